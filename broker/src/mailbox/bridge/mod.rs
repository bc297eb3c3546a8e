//! What a bridge joining mailboxes on several hosts needs from one mailbox (spec/bridge.md),
//! behind one handle, [`BridgeSide`] (`Mailbox::bridge`): taking a pending signal out for
//! export, recording it exported once the other side has it, writing a signal from another
//! host into `inputs/`, holding an agent's signals back on this host, and the bridge's state
//! file. The network side is the `sigbox-bridge` program; everything here is local files.
//!
//! | path | role | file |
//! |---|---|---|
//! | `R/bridge/` | the bridge's lock, `state.json` ([`BridgeState`]) | `mod.rs` |
//! | `R/bridge/hold/<agent>`, `R/bridge/hold.lock` | agents held back on this host (§5) | `hold.rs` |
//! | `R/bridge/outbox/` | signals taken for export, not yet acknowledged by the server | `export.rs` |
//! | `R/bridge/sent/` | signals exported, each annotated `action_taken: exported` | `export.rs` |
//! | `R/bridge/broadcasts/<16 hex>` | a pending broadcast exported (broadcasts stay in `inputs/`) | `export.rs` |
//! | `R/inputs/`, `R/acks/<id>/` | signals and broadcast acks from other hosts | `import.rs` |
//! | | what waits here for another host, and why (read-only: `ls`, `doctor`) | `outbound.rs` |

mod export;
mod hold;
mod import;
mod outbound;

use std::path::{Path, PathBuf};

pub use export::{BroadcastsSeen, Outgoing};
pub use import::Imported;
pub use outbound::{Outbound, OutboundPlace, OutboundSignal};

use super::{HANDLING_ROOM, Mailbox};
use crate::atomic::{self, Clobber};
use crate::bridge_state::BridgeState;
use crate::error::{Error, ErrorKind, Result};
use crate::io::ReadOutcome;
use crate::name::own;
use crate::signal::{SignalType, Target};

/// Room the `bridged` field takes in a signal that crosses hosts, out of the room a signal
/// keeps for its handling records.
const BRIDGED_ROOM: u64 = 512;

/// The bridge's state file in `bridge/`.
const STATE_FILE: &str = "state.json";

/// The bridge's side of a mailbox (spec/bridge.md): what `sigbox-bridge`, `sigbox bridge
/// status` and `doctor` do with this root's files. Borrowed from [`Mailbox::bridge`]; cheap
/// to make, holds nothing.
#[derive(Clone, Copy, Debug)]
pub struct BridgeSide<'m> {
    mb: &'m Mailbox,
}

impl Mailbox {
    /// The bridge's side of this mailbox: its lock, state file, holds, export and import.
    pub fn bridge(&self) -> BridgeSide<'_> {
        BridgeSide { mb: self }
    }
}

impl<'m> BridgeSide<'m> {
    /// `bridge/`: the bridge's state beside the mailbox.
    pub fn dir(&self) -> &Path {
        &self.mb.layout.bridge
    }

    /// Makes `bridge/` (durably) and takes the bridge's lock on it without waiting: `None`
    /// when another bridge runs on this root. The lock lasts as long as the returned file.
    pub fn lock(&self) -> Result<Option<std::fs::File>> {
        self.mb
            .io
            .create_dir_all_synced(&self.mb.layout.bridge, Some(&self.mb.layout.root))?;
        let lock = self.mb.io.lock_dir(&self.mb.layout.bridge)?;
        // Its directories are directories, or missing (made when first needed).
        for dir in [
            &self.mb.layout.outbox,
            &self.mb.layout.sent,
            &self.mb.layout.broadcasts,
            &self.mb.layout.hold,
        ] {
            if let Some(st) = self.mb.io.stamp(dir)?
                && st.kind != crate::sys::EntryKind::Dir
            {
                return Err(crate::io::refused_dir(dir, st.kind.describe()));
            }
        }
        Ok(lock)
    }

    /// True when a bridge holds `bridge/`'s lock: one runs on this root.
    pub fn running(&self) -> Result<bool> {
        if !self.mb.io.is_dir(&self.mb.layout.bridge) {
            return Ok(false);
        }
        Ok(self.mb.io.lock_dir(&self.mb.layout.bridge)?.is_none())
    }

    /// Replaces `bridge/state.json` with `state`, atomically (what `sigbox bridge status`
    /// and `doctor` read; no delivery rests on it, so it is not synced).
    pub fn write_state(&self, state: &BridgeState) -> Result<()> {
        let dest = self.mb.layout.bridge.join(STATE_FILE);
        let stage = own::stage_name(&self.mb.layout.bridge, "state");
        atomic::write_atomic(&self.mb.io, &stage, &dest, &state.to_json(), Clobber::Yes)?;
        Ok(())
    }

    /// `bridge/state.json` as the bridge last wrote it, read as [`BridgeState`] reads
    /// (leniently); `None` when there is none. Bytes that are not JSON are an error naming
    /// the file.
    pub fn state(&self) -> Result<Option<BridgeState>> {
        let Some(bytes) = self.state_file()? else {
            return Ok(None);
        };
        match BridgeState::from_json(&bytes) {
            Ok(state) => Ok(Some(state)),
            Err(e) => Err(Error::new(
                ErrorKind::InvalidSignal,
                Some(&self.state_path()),
                format!("not valid JSON: {e}"),
            )),
        }
    }

    /// `bridge/state.json`'s bytes as the bridge last wrote them; `None` when there is none.
    pub fn state_file(&self) -> Result<Option<Vec<u8>>> {
        let path = self.state_path();
        match self.mb.read_signal_file(&path)? {
            ReadOutcome::Gone => Ok(None),
            ReadOutcome::Bytes(bytes, _) => Ok(Some(bytes)),
            _ => Err(Error::new(
                ErrorKind::NotRegularFile,
                Some(&path),
                "not a regular file (planted?): remove it; a running bridge writes it again \
                 every second",
            )),
        }
    }

    /// `bridge/state.json`.
    pub fn state_path(&self) -> PathBuf {
        self.mb.layout.bridge.join(STATE_FILE)
    }

    /// How many signals wait in `bridge/outbox/` and how many records `bridge/sent/` holds.
    pub fn counts(&self) -> Result<(usize, usize)> {
        let count = |dir: &Path| -> Result<usize> {
            Ok(self
                .mb
                .io
                .list(dir, true)?
                .iter()
                // Dot-files are writes in progress (staging names, a claim's moved-aside source).
                .filter(|e| !e.name.as_encoded_bytes().starts_with(b"."))
                .count())
        };
        Ok((count(&self.mb.layout.outbox)?, count(&self.mb.layout.sent)?))
    }

    /// How many pending broadcasts this root's bridges are done with: the markers in
    /// `bridge/broadcasts/` (exported once the server acknowledged them, or too large to
    /// cross). Like the records in `bridge/sent/`, what is durable is the count.
    pub fn broadcasts_marked(&self) -> Result<usize> {
        Ok(self
            .mb
            .io
            .list(&self.mb.layout.broadcasts, true)?
            .iter()
            .filter(|e| !e.name.as_encoded_bytes().starts_with(b"."))
            .count())
    }

    /// The agent whose consumer a signal of type `ty` for `target` travels by between hosts
    /// (spec/bridge.md §2): its target's, the orchestrator's for APPROVE, SKIP and no target;
    /// none for a broadcast.
    pub fn consumer_agent<'a>(&self, ty: SignalType, target: &'a Target) -> Option<&'a str>
    where
        'm: 'a,
    {
        super::route::consumer_agent(ty, target, &self.mb.opts.orchestrator)
    }

    /// The largest body that crosses hosts: a signal `send` takes (the size cap less room for
    /// its handling records) with room for the `bridged` field the crossing adds.
    fn crossing_cap(&self) -> u64 {
        self.mb.opts.max_file_size - HANDLING_ROOM + BRIDGED_ROOM
    }

    fn crosses(&self, len: usize) -> bool {
        len as u64 <= self.crossing_cap()
    }
}
