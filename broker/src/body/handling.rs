//! The handling block's schema (spec/mailbox.md §3.4): the fields sigbox adds to a record
//! (`handling_metadata`, a broadcast's archive status, an import's `bridged`), what a claim,
//! an ack or an archive writes in them, and what a reader makes of them. Pure.
/// The field names of the handling block (upstream's `handling_metadata` schema), named once.
pub(crate) mod key {
    /// The block itself: who handled the signal, when, and how.
    pub(crate) const HANDLING_METADATA: &str = "handling_metadata";
    /// A broadcast's archive status: `delivered` or `partial`.
    pub(crate) const DELIVERY_STATUS: &str = "delivery_status";
    /// The quorum agents that had not acked an archived broadcast.
    pub(crate) const UNACKED_AGENTS: &str = "unacked_agents";
    /// Inside the block: the agent.
    pub(crate) const HANDLED_BY: &str = "handled_by";
    /// Inside the block: when (RFC 3339, microseconds).
    pub(crate) const HANDLED_AT: &str = "handled_at";
    /// Inside the block: what was done.
    pub(crate) const ACTION_TAKEN: &str = "action_taken";
    /// Inside a redelivery's block: how many times the signal has been delivered again.
    pub(crate) const REDELIVERY: &str = "redelivery";
}

use serde_json::{Map, Value, json};

use crate::clock::{self, Precision};
use crate::signal::Signal;

/// The field an imported signal carries: `{"from": <host>, "hops": n, "id": <its id there>}`.
pub const BRIDGED: &str = "bridged";

/// Fields sigbox adds to archived files; they are not part of the signal.
pub(super) const HANDLING_KEYS: [&str; 3] = [
    key::HANDLING_METADATA,
    key::DELIVERY_STATUS,
    key::UNACKED_AGENTS,
];

/// How a broadcast was archived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Archived {
    /// Every quorum agent acked it.
    Delivered,
    /// Archived by `finish` before every quorum agent acked it.
    Partial,
}

impl Archived {
    /// The status as written in the record: `delivered` or `partial`.
    pub fn as_str(self) -> &'static str {
        match self {
            Archived::Delivered => "delivered",
            Archived::Partial => "partial",
        }
    }
}

impl std::fmt::Display for Archived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The handling block a claim appends: what it says, built once here.
#[derive(Debug)]
pub(crate) enum Handled<'a> {
    /// A claim delivered the signal to the agent.
    Delivered,
    /// A broadcast archived with its status and the quorum agents that had not acked.
    Archived(Archived, &'a [String]),
    /// A claim whose consumer died before handing it over, delivered again: the count.
    Redelivered(u32),
    /// Taken by a bridge and published to other hosts (spec/bridge.md).
    Exported,
}

impl Handled<'_> {
    /// The fields appended for `agent`, now.
    pub(crate) fn fields(&self, agent: &str) -> Map<String, Value> {
        let action = match self {
            Handled::Delivered => "delivered",
            Handled::Archived(..) => "broadcast archived",
            Handled::Redelivered(_) => "redelivered",
            Handled::Exported => "exported",
        };
        let mut extra = Map::new();
        extra.insert(
            key::HANDLING_METADATA.into(),
            json!({
                key::HANDLED_BY: agent,
                key::HANDLED_AT: clock::now_rfc3339(Precision::Micros),
                key::ACTION_TAKEN: action,
            }),
        );
        match self {
            Handled::Archived(status, unacked) => {
                extra.insert(key::DELIVERY_STATUS.into(), json!(status.as_str()));
                extra.insert(key::UNACKED_AGENTS.into(), json!(unacked));
            }
            Handled::Redelivered(n) => {
                if let Some(Value::Object(block)) = extra.get_mut(key::HANDLING_METADATA) {
                    block.insert(key::REDELIVERY.into(), json!(n));
                }
            }
            Handled::Delivered | Handled::Exported => {}
        }
        extra
    }
}

/// The handling block of a processed record, as [`Signal::handling`] reads it back.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Handling {
    /// The agent that claimed or archived it.
    pub handled_by: Option<String>,
    /// When (RFC 3339).
    pub handled_at: Option<String>,
    /// What was done: `delivered`, `redelivered`, `broadcast archived`, `exported`.
    pub action_taken: Option<String>,
    /// For an archived broadcast: `delivered` or `partial`.
    pub delivery_status: Option<String>,
    /// For an archived broadcast: the quorum agents that had not acked.
    pub unacked_agents: Option<Vec<String>>,
    /// How many times the signal was delivered again because a consumer died before handing
    /// it over (0: never).
    pub redelivery: u32,
}

impl Signal {
    /// The handling block of a record read from `processed/` ([`crate::Mailbox::processed`]);
    /// `None` for a signal that carries none (claimed, but the annotation never landed).
    pub fn handling(&self) -> Option<Handling> {
        let meta = self.fields.get(key::HANDLING_METADATA)?;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(String::from);
        Some(Handling {
            handled_by: text(meta.get(key::HANDLED_BY)),
            handled_at: text(meta.get(key::HANDLED_AT)),
            action_taken: text(meta.get(key::ACTION_TAKEN)),
            redelivery: redelivery_of(meta),
            delivery_status: text(self.fields.get(key::DELIVERY_STATUS)),
            unacked_agents: self
                .fields
                .get(key::UNACKED_AGENTS)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                }),
        })
    }
}

impl Signal {
    /// 0 for a first delivery; n when this is the n-th time the signal is delivered again
    /// because a consumer died (or lost power) after claiming it and before handing it over
    /// (spec/mailbox.md §9.2). A consumer that keeps the ids it has acted on never acts twice.
    pub fn redelivery(&self) -> u32 {
        let here = self
            .fields
            .get(key::HANDLING_METADATA)
            .map_or(0, redelivery_of);
        // Delivered again on another host after a consumer there died (spec/bridge.md §5).
        let crossed = self.fields.get(BRIDGED).map_or(0, redelivery_of);
        here.max(crossed)
    }
}

pub(super) fn redelivery_of(block: &Value) -> u32 {
    block
        .get(key::REDELIVERY)
        .and_then(Value::as_u64)
        .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// Removes the handling block from a record's fields, leaving the signal as it was sent.
pub(crate) fn strip_handling(fields: &mut Map<String, Value>) {
    for k in HANDLING_KEYS {
        fields.remove(k);
    }
}
