//! Export (spec/bridge.md §3): pending signals no agent of this host takes are claimed into
//! `bridge/outbox/` and published; once the server acknowledged them they move into
//! `bridge/sent/` (a broadcast, which stays in `inputs/`, gets a marker in
//! `bridge/broadcasts/`). What a bridge that stopped left in the outbox is published again.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::BridgeSide;
use crate::atomic::{self, LinkStep};
use crate::body;
use crate::body::BRIDGED;
use crate::error::{Error, ErrorKind, Result};
use crate::io::ReadOutcome;
use crate::mailbox::delivery::{Batch, Undo};
use crate::mailbox::identity;
use crate::mailbox::layout::fnv1a;
use crate::mailbox::lossy;
use crate::mailbox::report::Pass;
use crate::mailbox::route::{Item, Source};
use crate::name;
use crate::name::own;
use crate::signal::{SignalType, Target};

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
/// across rounds of [`BridgeSide::take`]; what is no longer pending is forgotten.
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

impl BridgeSide<'_> {
    /// What a bridge that stopped left in `bridge/outbox/` (taken, not yet acknowledged by
    /// the server), oldest first: published again, the stream drops what it already has.
    pub fn outbox(&self, host: &str) -> Result<Vec<Outgoing>> {
        let outbox = &self.mb.layout.outbox;
        if !self.mb.io.is_dir(outbox) {
            return Ok(Vec::new());
        }
        let scan = self
            .mb
            .scan(outbox, Source::Buffer, &|_| true, self.mb.fs_now())?;
        let mut out = Vec::new();
        for r in scan.rejects {
            tracing::warn!(file = %outbox.join(&r.name).display(), reason = %r.reason, "not a signal in the bridge's outbox; quarantined");
            self.mb.quarantine(outbox, &r.name, &r.reason, host)?;
        }
        for item in scan.items {
            if let Some(o) = self.outgoing_in_outbox(&item.name, item.instant, host)? {
                out.push(o);
            }
        }
        Ok(out)
    }

    /// True when a change at `path` (a filesystem event's) can give an export round nothing
    /// to take: a staging file in `inputs/`, or a signal there under a canonical name whose
    /// agent is `here` (its target, or the orchestrator for APPROVE, SKIP and no target) or
    /// whose type no agent takes. A broadcast, a name that says nothing (a file dropped by
    /// hand), anything in a buffer, and the directories themselves may: a round looks. The
    /// name alone decides, as [`take`](Self::take) decides by the name for these files, so a
    /// flood of signals for the agents here (an importer's) does not list `inputs/` again
    /// at each (spec/bridge.md §3).
    pub fn no_export_work(&self, path: &Path, here: &dyn Fn(&str) -> bool) -> bool {
        if path.parent() != Some(self.mb.layout.inputs.as_path()) {
            return false;
        }
        let Some(file) = path.file_name() else {
            return false;
        };
        if own::is_stage_name(file) {
            return true;
        }
        let Some(canon) = file.to_str().and_then(name::parse_canonical) else {
            return false;
        };
        let Some(ty) = canon.signal_type() else {
            return true;
        };
        let target = canon.target();
        self.consumer_agent(ty, &target).is_some_and(here)
    }

    /// Takes up to `max` pending signals that no agent here can take (spec/bridge.md):
    /// signals for an agent not `here`, and for the orchestrator (no target, APPROVE, SKIP)
    /// when it is not `here`, move into `bridge/outbox/` (a claim, durable); a
    /// broadcast not exported yet stays in `inputs/` for the agents here. Oldest first.
    /// Signals that came from another host are taken only when their agent left: a broadcast
    /// that came from another host is never sent back.
    pub fn take(
        &self,
        host: &str,
        max: usize,
        here: &dyn Fn(&str) -> bool,
        settled: &mut BroadcastsSeen,
    ) -> Result<Vec<Outgoing>> {
        // The kept layout directories checked at once, not at most once a second: an
        // `inputs/` or `bridge/outbox/` moved away just before is not read or written through.
        self.mb.io.verify_kept();
        let mut items: Vec<(PathBuf, Item)> = Vec::new();
        for (dir, list, _) in self.mb.pending_items()? {
            items.extend(list.into_iter().map(|it| (dir.clone(), it)));
        }
        // Claims a consumer made here and never handed over (it died), for an agent no longer
        // of this host: they follow it, marked as delivered again (spec/bridge.md §5). Each
        // dead slot is locked while this round works on it.
        let mut slot_locks = Vec::new();
        let mut again: HashMap<PathBuf, u32> = HashMap::new();
        for e in self.mb.io.list(&self.mb.layout.claimed, true)? {
            let Some(agent) = e.name.to_str().filter(|a| crate::signal::valid_agent(a)) else {
                continue;
            };
            if here(agent) {
                continue;
            }
            for (_, slot) in self.mb.slots(agent)? {
                let Some(lock) = self.mb.io.lock_dir(&slot)? else {
                    continue; // a live handle holds it
                };
                let scan = self
                    .mb
                    .scan(&slot, Source::Buffer, &|_| true, self.mb.fs_now())?;
                for it in scan.items {
                    let path = slot.join(&it.name);
                    let n = match self.mb.read_signal_file(&path)? {
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
        let orchestrator = self.mb.opts.orchestrator.clone();
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
                            self.exported(std::slice::from_ref(&o))?;
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
            if !self.mb.io.is_dir(&self.mb.layout.outbox) {
                self.mb
                    .io
                    .create_dir_all_synced(&self.mb.layout.outbox, Some(&self.mb.layout.root))?;
            }
            let before = batch.len();
            let src = dir.join(&item.name);
            let redelivery = again.get(&src).copied().unwrap_or(0);
            match self
                .mb
                .claim_for_export(&dir, &item, host, redelivery, &mut pass, &mut batch)?
            {
                Some(d) => batch.push(d),
                None if batch.len() > before => {} // a claim by link, decided at the commit
                None => {
                    blocked.push(item.target.clone());
                    continue;
                }
            }
            instants.insert(src, item.instant);
        }
        self.mb.commit(&mut batch)?;
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
    pub fn exported(&self, outs: &[Outgoing]) -> Result<()> {
        let (mut moved, mut marked) = (false, false);
        let mut linked: Vec<PathBuf> = Vec::new();
        for out in outs {
            match &out.held {
                Held::Broadcast => {
                    if !marked {
                        self.mb.io.create_dir_all_synced(
                            &self.mb.layout.broadcasts,
                            Some(&self.mb.layout.root),
                        )?;
                        marked = true;
                    }
                    let marker = self.mb.layout.broadcasts.join(broadcast_marker(&out.id));
                    let stage = own::stage_name(&self.mb.layout.broadcasts, "export");
                    self.mb
                        .io
                        .write_new(&stage, format!("{}\n", out.id).as_bytes())?;
                    if self.mb.io.rename_noreplace(&stage, &marker)? != crate::io::Renamed::Done {
                        atomic::remove_stage(&self.mb.io, &stage)?;
                    }
                }
                Held::Outbox(name) => {
                    if !moved {
                        self.mb.io.create_dir_all_synced(
                            &self.mb.layout.sent,
                            Some(&self.mb.layout.root),
                        )?;
                        moved = true;
                    }
                    let src = self.mb.layout.outbox.join(name);
                    own::with_fresh_names(&self.mb.layout.sent, name, |_, dest| {
                        // Where renames are not atomic across directories, a link now and the
                        // outbox's name removed after the fsync of sent/ (spec/mailbox.md
                        // §9.10): a power loss leaves the record in one place or two, never in
                        // none.
                        match atomic::link_step(&self.mb.io, &src, &dest, false, |_| Ok(()))? {
                            LinkStep::Linked(()) => {
                                linked.push(src.clone());
                                return Ok(Some(()));
                            }
                            LinkStep::DestExists => return Ok(None),
                            LinkStep::Lost => return Ok(Some(())),
                            LinkStep::Busy | LinkStep::ByRename => {}
                        }
                        Ok(match self.mb.io.rename_noreplace(&src, &dest)? {
                            crate::io::Renamed::DestExists => None,
                            _ => Some(()),
                        })
                    })?;
                }
            }
        }
        if marked {
            self.mb.io.sync_dir(&self.mb.layout.broadcasts)?;
        }
        if moved {
            self.mb.io.sync_dir(&self.mb.layout.sent)?;
            for src in &linked {
                // Only while the record in sent/ still holds the file.
                self.mb.io.remove_second_link(src)?;
            }
            self.mb.io.sync_dir(&self.mb.layout.outbox)?;
        }
        Ok(())
    }

    /// Gives up exporting `out`, which can never cross (`reason`: larger than the server
    /// takes): a signal in the outbox is quarantined with the reason (spec/mailbox.md §8); a
    /// broadcast, which stays pending here for the agents of this host, gets its marker, so
    /// that it is not tried again.
    pub fn refuse(&self, out: &Outgoing, host: &str, reason: &str) -> Result<()> {
        match &out.held {
            Held::Outbox(name) => {
                self.mb
                    .quarantine(&self.mb.layout.outbox, name, reason, host)?;
            }
            Held::Broadcast => self.exported(std::slice::from_ref(out))?,
        }
        Ok(())
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
        let Some(ReadOutcome::Bytes(bytes, stamp)) = self.mb.read_resolving(dir, &item.name)?
        else {
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
            self.mb.opts.settle,
            self.mb.fs_now(),
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
            .mb
            .io
            .stamp(&self.mb.layout.broadcasts.join(broadcast_marker(&id)))?
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
        let outbox = &self.mb.layout.outbox;
        let path = outbox.join(name);
        let fname = lossy(name);
        let reason = match self.mb.read_resolving(outbox, name)? {
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
        self.mb.quarantine(outbox, name, &reason, host)?;
        Ok(None)
    }
}

/// The marker name of an exported broadcast: a hash of its id.
fn broadcast_marker(id: &str) -> String {
    format!("{:016x}", fnv1a(id.as_bytes()))
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
