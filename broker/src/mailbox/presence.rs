//! Presence (spec/mailbox.md §7): a live handle of an agent holds a shared lock on
//! `agents/<agent>.lock`; the orchestrator buffers signals for agents whose lock nobody holds.

use std::fs::File;

use super::Mailbox;
use crate::error::{Error, Result};

/// A held presence: while it lives, the orchestrator leaves this agent's signals in `inputs/`
/// instead of buffering them. Several handles of one agent may hold it at once (shared lock);
/// a crashed process releases it.
#[derive(Debug)]
pub struct Presence {
    _file: File,
    agent: String,
}

impl Presence {
    /// The agent this presence is for.
    pub fn agent(&self) -> &str {
        &self.agent
    }
}

impl Mailbox {
    /// Takes `agent`'s presence (a shared lock on `agents/<agent>.lock`) for as long as the
    /// returned value lives.
    pub fn presence(&self, agent: &str) -> Result<Presence> {
        self.check_agent(agent)?;
        let path = self.layout.lock_path(agent);
        let file = self.io.open_lock(&path)?;
        // Blocking is safe: exclusive locks on this file are only ever taken by `is_present`
        // with try_lock, and held for the duration of one check.
        file.lock_shared()
            .map_err(|e| Error::io(&path, "cannot lock presence file", e))?;
        Ok(Presence {
            _file: file,
            agent: agent.to_string(),
        })
    }

    /// True when a live handle holds `agent`'s presence.
    pub fn is_present(&self, agent: &str) -> bool {
        self.io.is_locked(&self.layout.lock_path(agent))
    }
}
