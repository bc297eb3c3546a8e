//! What a bridge joining mailboxes on several hosts needs from one mailbox (spec/bridge.md):
//! taking a pending signal out for export, recording it exported once the other side has it,
//! and writing a signal from another host into `inputs/`. The network side is the
//! `sigbox-bridge` program; everything here is local files.
//!
//! | path | role |
//! |---|---|
//! | `R/bridge/outbox/` | signals taken for export, not yet acknowledged by the server |
//! | `R/bridge/sent/` | signals exported, each annotated `action_taken: exported` |
//! | `R/bridge/broadcasts/<16 hex>` | a pending broadcast exported (broadcasts stay in `inputs/`) |

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::delivery::{Batch, Undo};
use super::layout::fnv1a;
use super::report::Pass;
use super::route::{Item, Source};
use super::{HANDLING_ROOM, Mailbox, identity, lossy};
use crate::atomic::{self, Clobber, Placed};
use crate::body;
use crate::body::BRIDGED;
use crate::error::{Error, ErrorKind, Result};
use crate::io::{Linked, ReadOutcome};
use crate::name;
use crate::name::own;
use crate::signal::{SignalType, Target};

/// Room the `bridged` field takes in a signal that crosses hosts, out of the room a signal
/// keeps for its handling records.
const BRIDGED_ROOM: u64 = 512;

/// The bridge's state file in `bridge/`.
const STATE_FILE: &str = "state.json";

/// A signal on its way to other hosts: what the bridge publishes.
#[derive(Clone, Debug)]
pub struct Outgoing {
    /// Its identity in this mailbox.
    pub id: String,
    /// The name it is written under on the importing side: a canonical name (spec/mailbox.md
    /// §2.1), its own when it has one.
    pub file_name: String,
    /// The de-duplication id in the stream: the canonical name's stem, with `~<hops>` when
    /// the signal crosses again from a host that had imported it.
    pub msg_id: String,
    /// Its type.
    pub signal_type: SignalType,
    /// Its target.
    pub target: Target,
    /// Its FIFO instant, in nanoseconds since the Unix epoch.
    pub instant: i128,
    /// The body written on the importing side (JSON): every field it had, its `id` the
    /// canonical stem, and [`BRIDGED`].
    pub body: Vec<u8>,
    /// Where it is held until exported.
    held: Held,
}

#[derive(Clone, Debug)]
enum Held {
    /// In `bridge/outbox/`, under this name.
    Outbox(std::ffi::OsString),
    /// A broadcast: stays in `inputs/` for the agents here.
    Broadcast,
}

impl Outgoing {
    /// True for a broadcast, which stays pending here while it is exported.
    pub fn is_broadcast(&self) -> bool {
        matches!(self.held, Held::Broadcast)
    }
}

/// The pending broadcasts a bridge has no more to do with (exported, or from another host),
/// by name and by the file the scan saw: read once, not at every round. Kept by the caller
/// across rounds of [`Mailbox::bridge_take`]; what is no longer pending is forgotten.
#[derive(Debug, Default)]
pub struct BroadcastsSeen(std::collections::HashSet<(std::ffi::OsString, Option<(u64, i128)>)>);

impl BroadcastsSeen {
    fn key(item: &Item) -> (std::ffi::OsString, Option<(u64, i128)>) {
        (item.name.clone(), item.seen)
    }

    fn contains(&self, item: &Item) -> bool {
        self.0.contains(&Self::key(item))
    }

    fn insert(&mut self, item: &Item) {
        self.0.insert(Self::key(item));
    }

    fn keep_only<'a>(&mut self, pending: impl Iterator<Item = &'a Item>) {
        let now: std::collections::HashSet<_> = pending.map(Self::key).collect();
        self.0.retain(|k| now.contains(k));
    }
}

/// What [`Mailbox::bridge_import`] did with a signal from another host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Imported {
    /// Written into `inputs/`, durably.
    Written,
    /// Already here (pending, buffered, in flight, processed, quarantined or on its way out):
    /// nothing written. A redelivery from the stream ends here.
    Here,
    /// Not a signal this mailbox accepts, with the reason: nothing written.
    Refused(String),
}

impl Mailbox {
    /// `bridge/`: the bridge's state beside the mailbox.
    pub fn bridge_dir(&self) -> &Path {
        &self.layout.bridge
    }

    /// Makes `bridge/` (durably) and takes the bridge's lock on it without waiting: `None`
    /// when another bridge runs on this root. The lock lasts as long as the returned file.
    pub fn bridge_lock(&self) -> Result<Option<std::fs::File>> {
        self.io
            .create_dir_all_synced(&self.layout.bridge, Some(&self.layout.root))?;
        let lock = self.io.lock_dir(&self.layout.bridge)?;
        // Its directories are directories, or missing (made when first needed).
        for dir in [
            &self.layout.outbox,
            &self.layout.sent,
            &self.layout.broadcasts,
            &self.layout.hold,
        ] {
            if let Some(st) = self.io.stamp(dir)?
                && st.kind != crate::sys::EntryKind::Dir
            {
                return Err(crate::io::refused_dir(dir, st.kind.describe()));
            }
        }
        Ok(lock)
    }

    /// True when a bridge holds `bridge/`'s lock: one runs on this root.
    pub fn bridge_running(&self) -> Result<bool> {
        if !self.io.is_dir(&self.layout.bridge) {
            return Ok(false);
        }
        Ok(self.io.lock_dir(&self.layout.bridge)?.is_none())
    }

    /// Replaces `bridge/state.json` with `bytes`, atomically (what `sigbox bridge status`
    /// and `doctor` read; no delivery rests on it, so it is not synced).
    pub fn bridge_write_state(&self, bytes: &[u8]) -> Result<()> {
        let dest = self.layout.bridge.join(STATE_FILE);
        let stage = own::stage_name(&self.layout.bridge, "state");
        atomic::write_atomic(&self.io, &stage, &dest, bytes, Clobber::Yes)?;
        Ok(())
    }

    /// `bridge/state.json` as the bridge last wrote it; `None` when there is none.
    pub fn bridge_state(&self) -> Result<Option<Vec<u8>>> {
        let path = self.layout.bridge.join(STATE_FILE);
        match self.read_signal_file(&path)? {
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

    /// How many signals wait in `bridge/outbox/` and how many records `bridge/sent/` holds.
    pub fn bridge_counts(&self) -> Result<(usize, usize)> {
        let count = |dir: &Path| -> Result<usize> {
            Ok(self
                .io
                .list(dir, true)?
                .iter()
                // Dot-files are writes in progress (staging names, a claim's moved-aside source).
                .filter(|e| !e.name.as_encoded_bytes().starts_with(b"."))
                .count())
        };
        Ok((count(&self.layout.outbox)?, count(&self.layout.sent)?))
    }

    /// How many pending broadcasts this root's bridges are done with: the markers in
    /// `bridge/broadcasts/` (exported once the server acknowledged them, or too large to
    /// cross). Like the records in `bridge/sent/`, what is durable is the count.
    pub fn bridge_broadcasts_marked(&self) -> Result<usize> {
        Ok(self
            .io
            .list(&self.layout.broadcasts, true)?
            .iter()
            .filter(|e| !e.name.as_encoded_bytes().starts_with(b"."))
            .count())
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

    /// The orchestrator's agent name.
    pub fn orchestrator(&self) -> &str {
        &self.opts.orchestrator
    }

    /// Takes the lock that makes this root's holds count (`bridge/hold.lock`, shared, for as
    /// long as the returned file lives): the running bridge takes it; without it, a hold
    /// file holds nothing back and the root is a plain mailbox (spec/bridge.md §5).
    pub fn bridge_hold_lock(&self) -> Result<std::fs::File> {
        let file = self.io.open_lock(&self.layout.hold_lock)?;
        // Blocking is safe: exclusive locks on this file are only ever taken by a pass's
        // check, with try_lock, for the duration of one check.
        file.lock_shared().map_err(|e| {
            Error::io(
                &self.layout.hold_lock,
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
    pub fn bridge_hold(&self, agent: &str, note: &[u8]) -> Result<()> {
        self.check_agent(agent)?;
        if !self.io.is_dir(&self.layout.hold) {
            self.io
                .create_dir_all_synced(&self.layout.hold, Some(&self.layout.root))?;
        }
        let stage = own::stage_name(&self.layout.hold, "hold");
        atomic::write_atomic(
            &self.io,
            &stage,
            &self.layout.hold.join(agent),
            note,
            Clobber::Yes,
        )?;
        Ok(())
    }

    /// Lets `agent`'s passes here deliver again: removes `bridge/hold/<agent>` (durably).
    pub fn bridge_release(&self, agent: &str) -> Result<()> {
        self.check_agent(agent)?;
        if self.io.remove(&self.layout.hold.join(agent))? {
            self.io.sync_dir(&self.layout.hold)?;
        }
        Ok(())
    }

    /// The agents held back on this host (`bridge/hold/`), each with its note.
    pub fn bridge_held(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let mut out = Vec::new();
        for e in self.io.list(&self.layout.hold, true)? {
            let Some(agent) = e.name.to_str().filter(|a| crate::signal::valid_agent(a)) else {
                continue;
            };
            if let ReadOutcome::Bytes(bytes, _) = self
                .io
                .read_untrusted(&self.layout.hold.join(&e.name), 64 * 1024)?
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
    pub(super) fn bridge_holds(&self, agent: &str) -> bool {
        self.io
            .stamp(&self.layout.hold.join(agent))
            .is_ok_and(|s| s.is_some())
            && self.io.is_locked(&self.layout.hold_lock)
    }

    /// The agent whose consumer a signal of type `ty` for `target` travels by between hosts
    /// (spec/bridge.md §2): its target's, the orchestrator's for APPROVE, SKIP and no target;
    /// none for a broadcast.
    pub(super) fn consumer_agent<'a>(
        &'a self,
        ty: SignalType,
        target: &'a Target,
    ) -> Option<&'a str> {
        match target {
            _ if ty.is_approval() => Some(&self.opts.orchestrator),
            Target::All => None,
            Target::None => Some(&self.opts.orchestrator),
            Target::Agent(a) => Some(a),
        }
    }

    /// True while this root holds signals a bridge would export for `agent` now that it is
    /// not an agent of this host (spec/bridge.md §5): pending (in `inputs/` or a buffer, a
    /// dropped file still settling too), in `bridge/outbox/`, or claimed in a slot of the
    /// agent whose consumer is gone. A host hands an agent over once this is false.
    pub fn bridge_holding(&self, agent: &str) -> Result<bool> {
        self.check_agent(agent)?;
        let theirs = |it: &Item| {
            it.signal_type
                .is_some_and(|ty| self.consumer_agent(ty, &it.target) == Some(agent))
        };
        for (_, items, _) in self.pending_items()? {
            if items.iter().any(theirs) {
                return Ok(true);
            }
        }
        let now = SystemTime::now();
        if self.io.is_dir(&self.layout.outbox) {
            let scan = self.scan(&self.layout.outbox, Source::Buffer, &|_| true, now)?;
            if scan.items.iter().any(theirs) || !scan.rejects.is_empty() {
                return Ok(true);
            }
        }
        for (_, slot) in self.slots(agent)? {
            let Some(_lock) = self.io.lock_dir(&slot)? else {
                continue; // a live handle holds it: delivered there
            };
            let scan = self.scan(&slot, Source::Buffer, &|_| true, now)?;
            if !scan.items.is_empty() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// What a bridge that stopped left in `bridge/outbox/` (taken, not yet acknowledged by
    /// the server), oldest first: published again, the stream drops what it already has.
    pub fn bridge_outbox(&self, host: &str) -> Result<Vec<Outgoing>> {
        let outbox = &self.layout.outbox;
        if !self.io.is_dir(outbox) {
            return Ok(Vec::new());
        }
        let scan = self.scan(outbox, Source::Buffer, &|_| true, SystemTime::now())?;
        let mut out = Vec::new();
        for r in scan.rejects {
            tracing::warn!(file = %outbox.join(&r.name).display(), reason = %r.reason, "not a signal in the bridge's outbox; quarantined");
            self.quarantine(outbox, &r.name, &r.reason, host)?;
        }
        for item in scan.items {
            if let Some(o) = self.outgoing_in_outbox(&item.name, item.instant, host)? {
                out.push(o);
            }
        }
        Ok(out)
    }

    /// Takes up to `max` pending signals that no agent here can take (spec/bridge.md):
    /// signals for an agent not `here`, and for the orchestrator (no target, APPROVE, SKIP)
    /// when it is not `here`, move into `bridge/outbox/` (a claim, durable); a
    /// broadcast not exported yet stays in `inputs/` for the agents here. Oldest first.
    /// Signals that came from another host are taken only when their agent left: a broadcast
    /// that came from another host is never sent back.
    pub fn bridge_take(
        &self,
        host: &str,
        max: usize,
        here: &dyn Fn(&str) -> bool,
        settled: &mut BroadcastsSeen,
    ) -> Result<Vec<Outgoing>> {
        let mut items: Vec<(PathBuf, Item)> = Vec::new();
        for (dir, list, _) in self.pending_items()? {
            items.extend(list.into_iter().map(|it| (dir.clone(), it)));
        }
        // Claims a consumer made here and never handed over (it died), for an agent no longer
        // of this host: they follow it, marked as delivered again (spec/bridge.md §5). Each
        // dead slot is locked while this round works on it.
        let mut slot_locks = Vec::new();
        let mut again: HashMap<PathBuf, u32> = HashMap::new();
        for e in self.io.list(&self.layout.claimed, true)? {
            let Some(agent) = e.name.to_str().filter(|a| crate::signal::valid_agent(a)) else {
                continue;
            };
            if here(agent) {
                continue;
            }
            for (_, slot) in self.slots(agent)? {
                let Some(lock) = self.io.lock_dir(&slot)? else {
                    continue; // a live handle holds it
                };
                let scan = self.scan(&slot, Source::Buffer, &|_| true, SystemTime::now())?;
                for it in scan.items {
                    let path = slot.join(&it.name);
                    let n = match self.read_signal_file(&path)? {
                        ReadOutcome::Bytes(bytes, _) => {
                            body::redeliveries(&bytes, &lossy(&it.name))
                        }
                        _ => 0,
                    };
                    again.insert(path, n.saturating_add(1));
                    items.push((slot.clone(), it));
                }
                slot_locks.push(lock);
            }
        }
        items.sort_by(|a, b| (a.1.instant, &a.1.name).cmp(&(b.1.instant, &b.1.name)));
        let orchestrator = self.opts.orchestrator.clone();
        let mut pass = Pass::default();
        let mut batch = Batch::new(max.max(1));
        let mut broadcasts = Vec::new();
        // The FIFO instant of each claimed file, by where it was.
        let mut instants: HashMap<PathBuf, i128> = HashMap::new();
        // Targets whose next signal could not be taken this round: their later signals wait
        // for the next round too, so that each producer's order holds in the stream.
        let mut blocked: Vec<Target> = Vec::new();
        settled.keep_only(items.iter().map(|(_, it)| it));
        for (dir, item) in items {
            if instants.len() + broadcasts.len() >= max {
                break;
            }
            // Unknown types wait here for an agent that takes them.
            let Some(ty) = item.signal_type else { continue };
            if blocked.contains(&item.target) {
                continue;
            }
            // APPROVE and SKIP are the orchestrator's whatever their target (§6).
            let is_here = match &item.target {
                _ if ty.is_approval() => here(&orchestrator),
                Target::All => {
                    if settled.contains(&item) {
                        continue;
                    }
                    match self.broadcast_out(&dir, &item, host)? {
                        Some(Ok(o)) if self.crosses(o.body.len()) => broadcasts.push(o),
                        // Too large to cross: it stays pending here only, marked so that it is
                        // not tried again.
                        Some(Ok(o)) => {
                            tracing::warn!(id = %o.id, bytes = o.body.len(), "a broadcast too large to cross hosts stays here only");
                            self.bridge_exported(std::slice::from_ref(&o))?;
                            settled.insert(&item);
                        }
                        Some(Err(())) => settled.insert(&item),
                        None => {}
                    }
                    continue;
                }
                Target::None => here(&orchestrator),
                Target::Agent(a) => here(a),
            };
            if is_here {
                continue;
            }
            if !self.io.is_dir(&self.layout.outbox) {
                self.io
                    .create_dir_all_synced(&self.layout.outbox, Some(&self.layout.root))?;
            }
            let before = batch.len();
            let src = dir.join(&item.name);
            let redelivery = again.get(&src).copied().unwrap_or(0);
            match self.claim_for_export(&dir, &item, host, redelivery, &mut pass, &mut batch)? {
                Some(d) => batch.push(d),
                None if batch.len() > before => {} // a claim by link, decided at the commit
                None => {
                    blocked.push(item.target.clone());
                    continue;
                }
            }
            instants.insert(src, item.instant);
        }
        self.commit(&mut batch)?;
        for r in batch.rejected.drain(..).chain(pass.rejected.drain(..)) {
            tracing::warn!(file = %r.path.display(), reason = %r.reason, "cannot export; quarantined");
        }
        let mut out = Vec::new();
        for d in batch.take_durable() {
            let instant = match &d.undo {
                Undo::Claim(src) => instants.get(src).copied(),
                _ => None,
            };
            let Some(name) = d.signal.path.file_name().map(OsStr::to_os_string) else {
                continue;
            };
            let mut sig = d.signal;
            let redelivery = sig.redelivery();
            body::strip_handling(&mut sig.fields);
            let id = sig.id.clone();
            let fname = lossy(&name);
            let held = Held::Outbox(name.clone());
            match outgoing(
                id,
                &fname,
                sig,
                instant.unwrap_or(0),
                host,
                held,
                redelivery,
            ) {
                Ok(o) if self.crosses(o.body.len()) => out.push(o),
                _ => {
                    // Read again, as a bridge that stopped would: the outbox decides.
                    if let Some(o) = self.outgoing_in_outbox(&name, instant.unwrap_or(0), host)? {
                        out.push(o);
                    }
                }
            }
        }
        drop(slot_locks);
        // Broadcasts and taken signals, oldest first.
        out.extend(broadcasts);
        out.sort_by_key(|o| o.instant);
        Ok(out)
    }

    /// Records each of `outs` exported, once the server acknowledged them all: a signal moves
    /// from `bridge/outbox/` into `bridge/sent/` (its record, annotated `action_taken:
    /// exported` when it was taken); a broadcast gets its marker in `bridge/broadcasts/`.
    /// One fsync per directory for the lot: a record a power loss takes back is published
    /// again, and the stream drops the copy (spec/bridge.md §3).
    pub fn bridge_exported(&self, outs: &[Outgoing]) -> Result<()> {
        let (mut moved, mut marked) = (false, false);
        let mut linked: Vec<PathBuf> = Vec::new();
        for out in outs {
            match &out.held {
                Held::Broadcast => {
                    if !marked {
                        self.io.create_dir_all_synced(
                            &self.layout.broadcasts,
                            Some(&self.layout.root),
                        )?;
                        marked = true;
                    }
                    let marker = self.layout.broadcasts.join(Self::broadcast_marker(&out.id));
                    let stage = own::stage_name(&self.layout.broadcasts, "export");
                    self.io
                        .write_new(&stage, format!("{}\n", out.id).as_bytes())?;
                    if self.io.rename_noreplace(&stage, &marker)? != crate::io::Renamed::Done {
                        atomic::remove_stage(&self.io, &stage)?;
                    }
                }
                Held::Outbox(name) => {
                    if !moved {
                        self.io
                            .create_dir_all_synced(&self.layout.sent, Some(&self.layout.root))?;
                        moved = true;
                    }
                    let src = self.layout.outbox.join(name);
                    own::with_fresh_names(&self.layout.sent, name, |_, dest| {
                        // Where renames are not atomic across directories, a link now and the
                        // outbox's name removed after the fsync of sent/ (spec/mailbox.md
                        // §9.10): a power loss leaves the record in one place or two, never in
                        // none.
                        if self.io.link_claims() {
                            match self.io.link_exclusive(&src, &dest)? {
                                Linked::Done(_) => {
                                    linked.push(src.clone());
                                    return Ok(Some(()));
                                }
                                Linked::DestExists => return Ok(None),
                                Linked::SourceGone => return Ok(Some(())),
                                Linked::Busy | Linked::Unlinkable => {}
                            }
                        }
                        Ok(match self.io.rename_noreplace(&src, &dest)? {
                            crate::io::Renamed::DestExists => None,
                            _ => Some(()),
                        })
                    })?;
                }
            }
        }
        if marked {
            self.io.sync_dir(&self.layout.broadcasts)?;
        }
        if moved {
            self.io.sync_dir(&self.layout.sent)?;
            for src in &linked {
                // Only while the record in sent/ still holds the file.
                self.io.remove_second_link(src)?;
            }
            self.io.sync_dir(&self.layout.outbox)?;
        }
        Ok(())
    }

    /// Gives up exporting `out`, which can never cross (`reason`: larger than the server
    /// takes): a signal in the outbox is quarantined with the reason (spec/mailbox.md §8); a
    /// broadcast, which stays pending here for the agents of this host, gets its marker, so
    /// that it is not tried again.
    pub fn bridge_refuse(&self, out: &Outgoing, host: &str, reason: &str) -> Result<()> {
        match &out.held {
            Held::Outbox(name) => {
                self.quarantine(&self.layout.outbox, name, reason, host)?;
            }
            Held::Broadcast => self.bridge_exported(std::slice::from_ref(out))?,
        }
        Ok(())
    }

    /// Every ack of a broadcast under a canonical id (`acks/<id>/<agent>.ack`, the same id on
    /// every host) as `(id, agent)`, once the broadcast was handed over (no marker of it left
    /// in the agent's slots): what a bridge shares with the other hosts, so that an agent that
    /// moves is not given again a broadcast it acked elsewhere (spec/bridge.md §5).
    pub fn bridge_acks(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for d in self.io.list(&self.layout.acks, true)? {
            let Some(id) = d.name.to_str() else { continue };
            if d.kind != crate::sys::EntryKind::Dir
                || name::parse_canonical(&format!("{id}.json"))
                    .is_none_or(|c| c.target() != Target::All)
            {
                continue;
            }
            let marker = super::Layout::marker_name(std::ffi::OsStr::new(&format!("{id}.json")));
            for e in self.io.list(&self.layout.ack_dir(id), true)? {
                if let Some(agent) = e.name.to_str().and_then(|n| n.strip_suffix(".ack"))
                    && crate::signal::valid_agent(agent)
                    && !self.in_flight_here(agent, &marker)?
                {
                    out.push((id.to_string(), agent.to_string()));
                }
            }
        }
        Ok(out)
    }

    /// True when a slot of `agent` holds the broadcast marker `marker`: acked here and not
    /// handed over yet (its consumer may have died). Such an ack is not shared: on another
    /// host it would keep the agent from a broadcast it never got (spec/bridge.md §5).
    fn in_flight_here(&self, agent: &str, marker: &str) -> Result<bool> {
        for (_, slot) in self.slots(agent)? {
            if self.io.stamp(&slot.join(marker))?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Records that `agent` acked broadcast `id` on host `from`: `acks/<id>/<agent>.ack`,
    /// written durably without replacing anything. False when it was there already; refused
    /// (an error) for an id that is not a canonical broadcast's or a name that is not an
    /// agent's.
    pub fn bridge_import_ack(&self, id: &str, agent: &str, from: &str) -> Result<bool> {
        let file = format!("{id}.json");
        let broadcast = name::parse_canonical(&file).is_some_and(|c| c.target() == Target::All);
        if !broadcast || !crate::signal::valid_agent(agent) {
            return Err(Error::new(
                ErrorKind::InvalidName,
                None,
                format!("an ack of {id:?} by {agent:?}: not a broadcast's id and an agent's name"),
            ));
        }
        let dir = self.layout.ack_dir(id);
        self.io.create_dir_durable(&dir)?;
        let body = json!({
            "signal": id,
            "agent": agent,
            "acked_at": crate::clock::now_rfc3339(crate::clock::Precision::Micros),
            "acked_on": from,
        });
        let mut bytes = serde_json::to_vec(&body).unwrap_or_default();
        bytes.push(b'\n');
        let stage = own::stage_name(&dir, "ack");
        let ack = dir.join(format!("{agent}.ack"));
        Ok(atomic::write_atomic(&self.io, &stage, &ack, &bytes, Clobber::No)? == Placed::Done)
    }

    /// Writes a signal from another host into `inputs/` under `file_name` (a canonical name,
    /// spec/mailbox.md §2.1) with `body` (JSON whose `id` is the name's stem), durably and
    /// without replacing anything. A signal already here, anywhere in its life (pending,
    /// buffered, in flight, processed, quarantined, on its way out again), is not written
    /// again: the places are looked at in the order a signal moves through them, so one that
    /// moves on meanwhile is found further on.
    pub fn bridge_import(&self, file_name: &str, body: &[u8]) -> Result<Imported> {
        let Some(canon) = name::parse_canonical(file_name) else {
            return Ok(Imported::Refused(format!(
                "{file_name:?} is not a canonical signal name"
            )));
        };
        if !self.crosses(body.len()) {
            return Ok(Imported::Refused(format!(
                "{} bytes, over the cap of {} bytes for a signal from another host",
                body.len(),
                self.crossing_cap()
            )));
        }
        let dest = self.layout.inputs.join(file_name);
        let sig = match body::read_signal(body, file_name, &dest) {
            Ok(sig) => sig,
            Err(reason) => return Ok(Imported::Refused(reason)),
        };
        if !identity::trusted(file_name, &sig.fields) {
            return Ok(Imported::Refused(format!(
                "its body's id is not {:?}, the name's",
                name::signal_id(file_name)
            )));
        }
        if self.known_here(file_name, &canon.target(), sig.signal_type)? {
            return Ok(Imported::Here);
        }
        // Staged under a send's name, so that a second link a crash leaves is resolved as a
        // send's (spec/mailbox.md §9.6).
        let stage = own::stage_name_from(&self.layout.inputs, canon.unique, "send");
        Ok(
            match atomic::write_atomic(&self.io, &stage, &dest, body, Clobber::No)? {
                Placed::Done => Imported::Written,
                Placed::Exists => Imported::Here,
            },
        )
    }

    /// Whether the signal under canonical `file_name` is anywhere in this mailbox: `inputs/`,
    /// its agent's buffer, a claim slot of its agent or of the orchestrator, `processed/`,
    /// `rejected/`, the bridge's outbox.
    fn known_here(&self, file_name: &str, target: &Target, ty: SignalType) -> Result<bool> {
        let exists = |p: PathBuf| -> Result<bool> { Ok(self.io.stamp(&p)?.is_some()) };
        if exists(self.layout.inputs.join(file_name))? {
            return Ok(true);
        }
        let mut takers: Vec<&str> = Vec::new();
        if let Target::Agent(a) = target {
            if exists(self.layout.buffer_dir(a).join(file_name))? {
                return Ok(true);
            }
            if !ty.is_approval() {
                takers.push(a);
            }
        }
        if ty.is_approval() || !matches!(target, Target::All) {
            takers.push(&self.opts.orchestrator);
        }
        for agent in takers {
            for (_, slot) in self.slots(agent)? {
                if exists(slot.join(file_name))? {
                    return Ok(true);
                }
            }
        }
        for dir in [
            &self.layout.processed,
            &self.layout.rejected,
            &self.layout.outbox,
        ] {
            if exists(dir.join(file_name))? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The largest body that crosses hosts: a signal `send` takes (the size cap less room for
    /// its handling records) with room for the `bridged` field the crossing adds.
    fn crossing_cap(&self) -> u64 {
        self.opts.max_file_size - HANDLING_ROOM + BRIDGED_ROOM
    }

    fn crosses(&self, len: usize) -> bool {
        len as u64 <= self.crossing_cap()
    }

    /// The marker name of an exported broadcast: a hash of its id.
    fn broadcast_marker(id: &str) -> String {
        format!("{:016x}", fnv1a(id.as_bytes()))
    }

    /// A pending broadcast to export (`Ok(Some(Ok(_)))`); `Ok(Some(Err(())))` when there is
    /// nothing to do with it (exported already, or from another host); `Ok(None)` when it
    /// cannot be read now (a pass deals with it, or it settles).
    #[allow(clippy::type_complexity)]
    fn broadcast_out(
        &self,
        dir: &Path,
        item: &Item,
        host: &str,
    ) -> Result<Option<std::result::Result<Outgoing, ()>>> {
        let Some(ReadOutcome::Bytes(bytes, stamp)) = self.read_resolving(dir, &item.name)? else {
            return Ok(None);
        };
        let fname = lossy(&item.name);
        let Ok(sig) = body::read_signal(&bytes, &fname, &dir.join(&item.name)) else {
            return Ok(None);
        };
        if identity::untrusted_settling(
            &fname,
            Some(&sig.fields),
            &stamp,
            self.opts.settle,
            SystemTime::now(),
        )
        .is_some()
        {
            return Ok(None);
        }
        if sig.fields.contains_key(BRIDGED) {
            return Ok(Some(Err(())));
        }
        let id = identity::identity(&fname, &sig.fields, &stamp);
        if self
            .io
            .stamp(&self.layout.broadcasts.join(Self::broadcast_marker(&id)))?
            .is_some()
        {
            return Ok(Some(Err(())));
        }
        Ok(Some(Ok(outgoing(
            id,
            &fname,
            sig,
            item.instant,
            host,
            Held::Broadcast,
            0,
        )?)))
    }

    /// The signal in `bridge/outbox/<name>`, read; one that is not a valid signal is
    /// quarantined (`None`).
    fn outgoing_in_outbox(
        &self,
        name: &OsStr,
        instant: i128,
        host: &str,
    ) -> Result<Option<Outgoing>> {
        let outbox = &self.layout.outbox;
        let path = outbox.join(name);
        let fname = lossy(name);
        let reason = match self.read_resolving(outbox, name)? {
            None | Some(ReadOutcome::Gone) => return Ok(None),
            Some(ReadOutcome::Bytes(bytes, stamp)) => {
                match body::read_signal(&bytes, &fname, &path) {
                    Ok(sig) => {
                        let id = identity::identity(&fname, &sig.fields, &stamp);
                        let held = Held::Outbox(name.to_os_string());
                        let again = body::redeliveries(&bytes, &fname);
                        match outgoing(id, &fname, sig, instant, host, held, again) {
                            Ok(o) if self.crosses(o.body.len()) => {
                                return Ok(Some(o));
                            }
                            Ok(o) => format!(
                                "{} bytes as it would cross to another host, over the cap of {} \
                                 bytes for a signal that crosses",
                                o.body.len(),
                                self.crossing_cap()
                            ),
                            Err(e) => e.to_string(),
                        }
                    }
                    Err(reason) => reason,
                }
            }
            Some(other) => other.rejection().unwrap_or_default(),
        };
        tracing::warn!(file = %path.display(), %reason, "cannot export; quarantined");
        self.quarantine(outbox, name, &reason, host)?;
        Ok(None)
    }
}

/// The signal `sig` read from `file_name` (identity `id`), as it crosses to another host.
fn outgoing(
    id: String,
    file_name: &str,
    sig: crate::signal::Signal,
    instant: i128,
    host: &str,
    held: Held,
    redelivery: u32,
) -> Result<Outgoing> {
    let mut fields = sig.fields;
    // Crossing again from a host that had imported it: one more hop, another stream id.
    let hops = fields
        .get(BRIDGED)
        .and_then(|b| b.get("hops"))
        .and_then(Value::as_u64)
        .map_or(0, |h| h.saturating_add(1));
    // A name a no-clobber move gave way with counts as the name it had.
    let original = identity::original_name(file_name);
    let canonical = if identity::trusted(&original, &fields) {
        original.to_string()
    } else {
        let micros = i64::try_from(instant.div_euclid(1000)).unwrap_or(0);
        let at: DateTime<Utc> = DateTime::from_timestamp_micros(micros).unwrap_or_default();
        // A unique part derived from the identity: the same signal gets the same name on
        // every host and at every attempt.
        let unique = format!(
            "{:016x}{:016x}",
            fnv1a(id.as_bytes()),
            fnv1a(format!("sigbox-bridge\0{id}").as_bytes())
        );
        name::canonical_name(at, &unique, sig.signal_type.as_str(), &sig.target)
    };
    let stem = name::signal_id(&canonical).to_string();
    let msg_id = if hops == 0 {
        stem.clone()
    } else {
        format!("{stem}~{hops}")
    };
    fields.insert("id".into(), json!(stem));
    let mut bridged = json!({"from": host, "hops": hops});
    if id != stem {
        bridged["id"] = json!(id);
    }
    // Claimed and never handed over where it was: delivered again on the next host, marked.
    let earlier = fields
        .get(BRIDGED)
        .and_then(|b| b.get("redelivery"))
        .and_then(Value::as_u64)
        .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
    if redelivery.max(earlier) > 0 {
        bridged["redelivery"] = json!(redelivery.max(earlier));
    }
    fields.insert(BRIDGED.into(), bridged);
    // Compact: a signal dropped as compact JSON must not outgrow the size cap by crossing.
    let mut body = serde_json::to_vec(&Value::Object(fields)).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            None,
            format!("cannot encode the signal: {e}"),
        )
    })?;
    body.push(b'\n');
    Ok(Outgoing {
        id,
        file_name: canonical,
        msg_id,
        signal_type: sig.signal_type,
        target: sig.target,
        instant,
        body,
        held,
    })
}
