//! Holding an agent's signals back on this host while a bridge runs (spec/bridge.md §5):
//! `bridge/hold/<agent>` with its note, and `bridge/hold.lock`, which makes the holds count.

use super::BridgeSide;
use crate::atomic::{self, Clobber};
use crate::error::{Error, Result};
use crate::io::ReadOutcome;
use crate::mailbox::route::{Item, Source};
use crate::name::own;

impl BridgeSide<'_> {
    /// Takes the lock that makes this root's holds count (`bridge/hold.lock`, shared, for as
    /// long as the returned file lives): the running bridge takes it; without it, a hold
    /// file holds nothing back and the root is a plain mailbox (spec/bridge.md §5).
    pub fn hold_lock(&self) -> Result<std::fs::File> {
        let file = self.mb.io.open_lock(&self.mb.layout.hold_lock)?;
        // Blocking is safe: exclusive locks on this file are only ever taken by a pass's
        // check, with try_lock, for the duration of one check.
        file.lock_shared().map_err(|e| {
            Error::io(
                &self.mb.layout.hold_lock,
                "cannot lock the bridge's hold lock",
                e,
            )
        })?;
        Ok(file)
    }

    /// Holds `agent`'s signals back from it on this host: `bridge/hold/<agent>`, with `note`
    /// (what the bridge waits for), written atomically. While a bridge runs here, the
    /// agent's passes here deliver nothing (spec/bridge.md §5): it belongs to another host,
    /// or the hand-off of its signals to this host is not over.
    pub fn hold(&self, agent: &str, note: &[u8]) -> Result<()> {
        self.mb.check_agent(agent)?;
        if !self.mb.io.is_dir(&self.mb.layout.hold) {
            self.mb
                .io
                .create_dir_all_synced(&self.mb.layout.hold, Some(&self.mb.layout.root))?;
        }
        let stage = own::stage_name(&self.mb.layout.hold, "hold");
        atomic::write_atomic(
            &self.mb.io,
            &stage,
            &self.mb.layout.hold.join(agent),
            note,
            Clobber::Yes,
        )?;
        Ok(())
    }

    /// Lets `agent`'s passes here deliver again: removes `bridge/hold/<agent>` (durably).
    pub fn release(&self, agent: &str) -> Result<()> {
        self.mb.check_agent(agent)?;
        if self.mb.io.remove(&self.mb.layout.hold.join(agent))? {
            self.mb.io.sync_dir(&self.mb.layout.hold)?;
        }
        Ok(())
    }

    /// The agents held back on this host (`bridge/hold/`), each with its note.
    pub fn held(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let mut out = Vec::new();
        for e in self.mb.io.list(&self.mb.layout.hold, true)? {
            let Some(agent) = e.name.to_str().filter(|a| crate::signal::valid_agent(a)) else {
                continue;
            };
            if let ReadOutcome::Bytes(bytes, _) = self
                .mb
                .io
                .read_untrusted(&self.mb.layout.hold.join(&e.name), 64 * 1024)?
            {
                out.push((agent.to_string(), bytes));
            }
        }
        out.sort();
        Ok(out)
    }

    /// True when a running bridge holds `agent`'s signals back from it on this host: a hold
    /// file for it, and the bridge's hold lock held. What cannot be looked at holds nothing
    /// back (a root without a bridge stays a plain mailbox).
    pub(in crate::mailbox) fn holds(&self, agent: &str) -> bool {
        self.mb
            .io
            .stamp(&self.mb.layout.hold.join(agent))
            .is_ok_and(|s| s.is_some())
            && self.mb.io.is_locked(&self.mb.layout.hold_lock)
    }

    /// True while this root holds signals a bridge would export for `agent` now that it is
    /// not an agent of this host (spec/bridge.md §5): pending (in `inputs/` or a buffer, a
    /// dropped file still settling too), in `bridge/outbox/`, or claimed in a slot of the
    /// agent whose consumer is gone. A host hands an agent over once this is false.
    pub fn holding(&self, agent: &str) -> Result<bool> {
        self.mb.check_agent(agent)?;
        let theirs = |it: &Item| {
            it.signal_type
                .is_some_and(|ty| self.consumer_agent(ty, &it.target) == Some(agent))
        };
        for (_, items, _) in self.mb.pending_items()? {
            if items.iter().any(theirs) {
                return Ok(true);
            }
        }
        let now = self.mb.fs_now();
        if self.mb.io.is_dir(&self.mb.layout.outbox) {
            let scan = self
                .mb
                .scan(&self.mb.layout.outbox, Source::Buffer, &|_| true, now)?;
            if scan.items.iter().any(theirs) || !scan.rejects.is_empty() {
                return Ok(true);
            }
        }
        for (_, slot) in self.mb.slots(agent)? {
            let Some(_lock) = self.mb.io.lock_dir(&slot)? else {
                continue; // a live handle holds it: delivered there
            };
            let scan = self.mb.scan(&slot, Source::Buffer, &|_| true, now)?;
            if !scan.items.is_empty() {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
