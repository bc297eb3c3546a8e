//! Presence (spec/mailbox.md §7): a live handle of an agent holds a shared lock on
//! `agents/<agent>.lock`; the orchestrator buffers signals for agents whose lock nobody holds.

use std::fs::File;
use std::time::SystemTime;

use serde_json::Value;

use super::Mailbox;
use crate::atomic::{self, Clobber};
use crate::error::{Error, Result};
use crate::io::ReadOutcome;
use crate::name::own;

/// A held presence: while it lives, the orchestrator leaves this agent's signals in `inputs/`
/// instead of buffering them. Several handles of one agent may hold it at once (shared lock);
/// a crashed process releases it.
#[derive(Debug)]
pub struct Presence {
    _file: File,
    agent: String,
}

/// A held PAUSE lock ([`Mailbox::lock_paused`]); released when dropped.
#[derive(Debug)]
pub struct PauseLock {
    _file: File,
}

impl Presence {
    /// The agent this presence is for.
    pub fn agent(&self) -> &str {
        &self.agent
    }
}

impl Mailbox {
    /// Takes `agent`'s presence (a shared lock on `agents/<agent>.lock`) for as long as the
    /// returned value lives, and sets the lock file's mtime to now (when it may).
    pub fn presence(&self, agent: &str) -> Result<Presence> {
        self.check_agent(agent)?;
        let path = self.layout.lock_path(agent);
        let file = self
            .io
            .open_lock(&path)
            .map_err(|e| self.missing_layout(e))?;
        // Exclusive locks on this file are only ever taken by `is_present`, without waiting,
        // and held for the duration of one check; but a process can be stopped in it
        // (spec/mailbox.md §9.11). Waited for 1 s at most, and not at all for a stopped
        // holder: the agent then goes on without its presence (the orchestrator may buffer
        // its signals meanwhile, which its passes read as well), and is told so.
        match crate::sys::lock_shared_bounded(&file, std::time::Duration::from_secs(1), true) {
            Ok(crate::sys::Bounded::Held) => {}
            Ok(crate::sys::Bounded::Busy(holders)) => {
                tracing::warn!(file = %path.display(), holders = %crate::sys::describe_holders(&holders),
                    "cannot take the agent's presence: it goes on without it (the orchestrator may \
                     buffer its signals meanwhile, which it still takes)");
            }
            Err(e) => return Err(Error::io(&path, "cannot lock presence file", e)),
        }
        // The lock file's mtime says when the agent last took its presence here: a bridge
        // keeps importing for an agent that polls now and then (spec/bridge.md §3). Best
        // effort: a lock file another user made may not be ours to touch.
        let _ = file.set_modified(std::time::SystemTime::now());
        Ok(Presence {
            _file: file,
            agent: agent.to_string(),
        })
    }

    /// True when a live handle holds `agent`'s presence.
    pub fn is_present(&self, agent: &str) -> bool {
        self.io.is_locked(&self.layout.lock_path(agent))
    }

    /// Takes the agent's PAUSE lock (exclusive `flock` on `agents/<agent>.paused.lock`),
    /// waiting for it, for as long as the returned value lives: a consumer that reads the
    /// recorded PAUSE, claims and records what it found holds it, so that a parallel
    /// consumer never reads "not paused" while a PAUSE it cannot see is being claimed.
    ///
    /// Only the agent's own consumers take it. It is waited for at most 1 s while its holder
    /// runs (a holder keeps it for one pass), and not at all when the holder is stopped
    /// (spec/mailbox.md §9.11): the error then names the holder and what to do.
    pub fn lock_paused(&self, agent: &str) -> Result<PauseLock> {
        self.check_agent(agent)?;
        let path = self.layout.agents.join(format!("{agent}.paused.lock"));
        let file = self.io.open_lock(&path)?;
        match crate::sys::lock_bounded(&file, std::time::Duration::from_secs(1), true) {
            Ok(crate::sys::Bounded::Held) => Ok(PauseLock { _file: file }),
            Ok(crate::sys::Bounded::Busy(holders)) => Err(Error::io(
                &path,
                "cannot lock the PAUSE record",
                std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    format!(
                        "another consumer of {agent} holds it: {}",
                        crate::sys::describe_holders(&holders)
                    ),
                ),
            )),
            Err(e) => Err(Error::io(&path, "cannot lock the PAUSE record", e)),
        }
    }

    /// The PAUSE in force for `agent`, as [`Mailbox::set_paused`] recorded it; `None` when
    /// the agent is not paused (or the record is unreadable: it is then removed by the next
    /// `set_paused`). What a PAUSE means is a state, not a message: every consumer of the agent
    /// (parallel hook calls, say) sees it until a RESUME clears it (spec/hooks.md).
    pub fn paused(&self, agent: &str) -> Result<Option<Value>> {
        self.check_agent(agent)?;
        let path = self.layout.paused_path(agent);
        Ok(match self.io.read_untrusted(&path, 64 * 1024)? {
            ReadOutcome::Bytes(b, _) => serde_json::from_slice::<Value>(&b)
                .ok()
                .filter(Value::is_object),
            _ => None,
        })
    }

    /// Records (`Some`) or clears (`None`) the PAUSE in force for `agent`: `agents/<agent>
    /// .paused.json`, written atomically and durably (staged, fsynced, renamed, directory
    /// fsynced), removed durably.
    pub fn set_paused(&self, agent: &str, pause: Option<&Value>) -> Result<()> {
        self.check_agent(agent)?;
        let path = self.layout.paused_path(agent);
        match pause {
            Some(v) => {
                let mut bytes = serde_json::to_vec(v).expect("JSON serializes");
                bytes.push(b'\n');
                let stage = own::stage_name(&self.layout.agents, "paused");
                atomic::write_atomic(&self.io, &stage, &path, &bytes, Clobber::Yes)?;
            }
            None => {
                self.io.remove_owned(&path)?;
            }
        }
        Ok(())
    }

    /// The agents seen on this host: every agent whose `agents/<agent>.lock` a live handle
    /// holds (`true`: present now), or whose presence was taken here within `linger`
    /// (`false`), each with its lock file's mtime (when its presence was last taken here):
    /// an agent that polls now and then is not present between its polls, but its signals
    /// may still be for this host.
    pub fn agents_seen(&self, linger: std::time::Duration) -> Result<Vec<(String, bool, i128)>> {
        // Saturating: a linger too long to subtract from now reaches back to any time.
        let since = crate::clock::ns_of(SystemTime::now())
            .saturating_sub(i128::try_from(linger.as_nanos()).unwrap_or(i128::MAX));
        let mut out = Vec::new();
        for e in self.io.list(&self.layout.agents, true)? {
            let Some(agent) = e.name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
                continue;
            };
            if !crate::signal::valid_agent(agent) {
                continue;
            }
            let Some(st) = self.io.stamp(&self.layout.agents.join(&e.name))? else {
                continue;
            };
            let now = self.is_present(agent);
            if now || st.mtime_ns >= since {
                out.push((agent.to_string(), now, st.mtime_ns));
            }
        }
        out.sort();
        Ok(out)
    }
}
