//! What waits on this host on its way to another (spec/bridge.md §7): the signals in
//! `bridge/outbox/`, and the pending signals a bridge would export, each with where it waits
//! and why. Read-only: what `ls` and `doctor` show.

use std::collections::HashMap;

use serde_json::Value;

use super::BridgeSide;
use crate::bridge_state::BridgeState;
use crate::error::Result;
use crate::mailbox::inspect::Look;
use crate::mailbox::lossy;
use crate::mailbox::report::Pending;
use crate::mailbox::route::Source;
use crate::signal::SignalType;

/// Where a signal on its way to another host waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutboundPlace {
    /// Pending in `inputs/` or in a buffer: no agent of this host takes it, and the bridge
    /// has not taken it for export yet.
    Pending,
    /// In `bridge/outbox/`: taken for export, not acknowledged by the server yet.
    Outbox,
}

/// A signal waiting on this host on its way to another.
#[derive(Clone, Debug)]
pub struct OutboundSignal {
    /// The signal, where it is.
    pub signal: Pending,
    /// Where it waits.
    pub place: OutboundPlace,
    /// The agent whose consumer it travels by: its target, or the orchestrator (no target,
    /// APPROVE, SKIP).
    pub agent: String,
    /// The host that agent was last recorded on, when this root's bridge knows it
    /// (`bridge/hold/<agent>`); none when it is an agent of no host known here.
    pub host: Option<String>,
}

/// Everything waiting on this host for another, and why it waits.
#[derive(Clone, Debug, Default)]
pub struct Outbound {
    /// True when a bridge runs on this root (it holds `bridge/`'s lock).
    pub running: bool,
    /// Why what is listed waits: the bridge's state in words (not running, cannot reach its
    /// server, setting up, or exporting).
    pub reason: String,
    /// True when what waits is stuck until someone acts: no bridge runs, or it cannot reach
    /// its server.
    pub stranded: bool,
    /// The signals, oldest first.
    pub waiting: Vec<OutboundSignal>,
}

impl BridgeSide<'_> {
    /// What waits here on its way to another host (spec/bridge.md §7): every signal in
    /// `bridge/outbox/`, and, once a bridge ran on this root, every pending signal of a known
    /// type, not a broadcast, whose agent is not an agent of this host: held back here as an
    /// agent of another host (`bridge/hold/<agent>`), or neither among the agents of this
    /// host in the bridge's last state nor present now. Empty where no bridge ever ran.
    pub fn outbound(&self) -> Result<Outbound> {
        if !self.mb.io.is_dir(&self.mb.layout.bridge) {
            return Ok(Outbound::default());
        }
        let state: Option<BridgeState> = self.state().ok().flatten();
        let running = self.running()?;
        let (reason, stranded) = outbound_reason(running, state.as_ref());
        // The host each held agent was last recorded on, from its hold's note.
        let mut hosts: HashMap<String, Option<String>> = HashMap::new();
        for (agent, note) in self.held()? {
            let note: Value = serde_json::from_slice(&note).unwrap_or(Value::Null);
            // A host name as the bridge makes them; anything else in a note is not shown.
            let host = note["host"]
                .as_str()
                .filter(|h| {
                    (1..=64).contains(&h.len())
                        && h.bytes()
                            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
                })
                .map(str::to_string);
            hosts.insert(agent, host);
        }
        let here: Option<Vec<String>> = state.as_ref().and_then(|s| s.here.clone());
        let mut waiting = Vec::new();
        let away = |agent: &str| -> Option<Option<String>> {
            // Without a bridge the root is a plain mailbox: an agent present here takes them.
            if !running && self.mb.is_present(agent) {
                return None;
            }
            match hosts.get(agent) {
                Some(Some(h)) => Some(Some(h.clone())),
                _ if self.mb.is_present(agent) => None,
                _ => match &here {
                    Some(here) if !here.iter().any(|a| a == agent) => Some(None),
                    _ => None,
                },
            }
        };
        for p in self.mb.pending()? {
            let Some(ty) = SignalType::parse(&p.type_name) else {
                continue; // unknown types wait here for an agent that takes them
            };
            let Some(agent) = self.consumer_agent(ty, &p.target).map(str::to_string) else {
                continue; // a broadcast stays pending here for the agents of this host
            };
            if let Some(host) = away(&agent) {
                waiting.push(OutboundSignal {
                    signal: p,
                    place: OutboundPlace::Pending,
                    agent,
                    host,
                });
            }
        }
        if self.mb.io.is_dir(&self.mb.layout.outbox) {
            let outbox = &self.mb.layout.outbox;
            let scan = self
                .mb
                .scan(outbox, Source::Buffer, &|_| true, self.mb.fs_now())?;
            for it in scan.items {
                let (id, from, created_at) = match self.mb.look(outbox, &it)? {
                    Look::Pending(id, from, created_at) => (id, from, created_at),
                    Look::Gone => continue,
                    _ => (
                        crate::name::signal_id(&lossy(&it.name)).to_string(),
                        None,
                        None,
                    ),
                };
                let agent = it
                    .signal_type
                    .and_then(|ty| self.consumer_agent(ty, &it.target))
                    .unwrap_or(&self.mb.opts.orchestrator)
                    .to_string();
                let host = hosts.get(&agent).cloned().flatten();
                waiting.push(OutboundSignal {
                    signal: Pending {
                        id,
                        created_at,
                        path: outbox.join(&it.name),
                        instant: it.instant,
                        type_name: it.type_name,
                        target: it.target,
                        buffered_for: None,
                        from,
                    },
                    place: OutboundPlace::Outbox,
                    agent,
                    host,
                });
            }
        }
        waiting.sort_by(|a, b| {
            (a.signal.instant, &a.signal.id).cmp(&(b.signal.instant, &b.signal.id))
        });
        Ok(Outbound {
            running,
            reason,
            stranded,
            waiting,
        })
    }
}

/// Why signals for other hosts wait here, from whether a bridge runs and its last state; and
/// whether they are stuck until someone acts.
fn outbound_reason(running: bool, state: Option<&BridgeState>) -> (String, bool) {
    let server = state
        .and_then(|s| s.nats.clone())
        .unwrap_or_else(|| "?".into());
    if !running {
        return (
            "no bridge runs on this root: they wait until `sigbox bridge` runs again".into(),
            true,
        );
    }
    if state.and_then(|s| s.connected) == Some(false) {
        let why = state
            .and_then(|s| s.last_error.clone())
            .unwrap_or_else(|| "the connection is down".into());
        return (
            format!("the bridge cannot reach its server {server} ({why}): they wait until it can"),
            true,
        );
    }
    if state.and_then(|s| s.ready) != Some(true) {
        return (
            format!("the bridge is setting up its streams on {server}"),
            false,
        );
    }
    ("the bridge exports them (its next round)".into(), false)
}
