//! Redelivery (spec/mailbox.md §9.2): the slots of consumers that died before handing their
//! signals over are taken over, and what they hold is delivered again, under the same ids,
//! marked as redeliveries with a count; a broadcast's marker stands for its ack in flight.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::slot::{Flight, Slot};
use super::{Delivery, Held};
use crate::atomic::{self, Clobber};
use crate::body::{self, Handled};
use crate::error::Result;
use crate::io::ReadOutcome;
use crate::mailbox::layout::Layout;
use crate::mailbox::report::Pass;
use crate::mailbox::{Mailbox, identity, lossy};
use crate::name::own;
use crate::name::{self, NameKind};
use crate::signal::Target;

/// A marker is a few hundred bytes; anything larger was not written by sigbox.
pub(super) const MARKER_CAP: u64 = 64 * 1024;

/// A signal in a slot this handle holds that was never handed over.
pub(in crate::mailbox) struct Orphan {
    pub(super) dir: PathBuf,
    pub(super) name: OsString,
}

/// What a broadcast marker left in a slot stands for ([`Mailbox::marker_fate`]).
pub(in crate::mailbox) enum MarkerFate {
    /// Gone since it was listed.
    Gone,
    /// Emptied and not yet removed: a removal cut off between its two steps; nothing comes
    /// again for it.
    Emptied,
    /// Not a marker sigbox wrote, and why: quarantined.
    Foreign(String),
    /// The broadcast it names is gone: dropped.
    Stale(String),
    /// The agent's ack was never written: the broadcast is still pending for it (delivered
    /// as any pending broadcast, unmarked); dropped.
    Unacked,
    /// Delivered again, marked: the broadcast, its file name, and the redelivery count.
    Again(Box<crate::signal::Signal>, String, u32),
}

/// The FIFO instant a file's name gives (a canonical name, or an upstream Ralph form).
fn name_instant(name: &OsStr) -> Option<i128> {
    match name::classify(name) {
        NameKind::Canonical(c) => Some(c.instant),
        NameKind::Foreign { instant, .. } => instant,
        _ => None,
    }
}

/// True for a file name that is one path component: a marker names a file in `inputs/` or
/// `processed/`, never a path elsewhere.
pub(super) fn is_plain_name(file: &str) -> bool {
    !file.is_empty() && file != "." && file != ".." && !file.contains(['/', '\\', '\0'])
}

impl Mailbox {
    /// Takes over every slot of `agent` that no live handle holds and that has signals in it,
    /// and lists what the slots this handle holds contain that was never handed over, oldest
    /// first: the redeliveries. A signal whose claim or acknowledgement a crash interrupted
    /// halfway (the same signal is still in `inputs/` or the buffer, or already in
    /// `processed/`) is resolved here instead: its slot link is removed.
    pub(in crate::mailbox) fn orphans(
        &self,
        agent: &str,
        flight: &mut Flight,
    ) -> Result<Vec<Orphan>> {
        let mut out = Vec::new();
        for (_, dir) in self.slots_for_pass(agent, flight)? {
            let is_own = flight.own.as_ref().is_some_and(|s| s.dir == dir);
            if is_own && flight.own_known {
                // Holds what was handed out and nothing else: only this handle's passes write
                // there, and none claimed into it since it was last listed.
                debug_assert!(
                    self.slot_entries(&dir)?
                        .iter()
                        .all(|f| flight.handed(&dir.join(f))),
                    "the own slot {} holds what was never handed out",
                    dir.display()
                );
                continue;
            }
            let lock = if flight.holds(&dir) {
                None
            } else {
                match self.io.lock_dir(&dir)? {
                    Some(lock) => Some(lock),
                    None => continue, // a live handle holds it
                }
            };
            let mut found = Vec::new();
            let (entries, twins) = self.slot_listing(&dir)?;
            for t in &twins {
                self.clear_claim_twin(&dir, t, agent)?;
            }
            for f in entries {
                if lock.is_none() && flight.handed(&dir.join(&f)) {
                    continue;
                }
                if !Layout::is_marker(&f) && self.resolve_twin(agent, &dir, &f)? {
                    continue;
                }
                found.push((self.fifo_instant(&dir, &f)?, f));
            }
            if found.is_empty() {
                if is_own {
                    flight.own_known = true;
                }
                continue; // an empty slot nobody holds: released again at once
            }
            if let Some(lock) = lock {
                tracing::info!(slot = %dir.display(), signals = found.len(), "taking over the claims of a consumer that died");
                flight.adopted.push(Slot {
                    dir: dir.clone(),
                    _lock: lock,
                });
            }
            out.extend(found.into_iter().map(|(at, name)| {
                (
                    at,
                    Orphan {
                        dir: dir.clone(),
                        name,
                    },
                )
            }));
        }
        let mut out: Vec<(i128, Orphan)> = out;
        out.sort_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
        Ok(out.into_iter().map(|(_, o)| o).collect())
    }

    /// The instant an orphan is delivered again by, oldest first, as the listing it was
    /// claimed from ordered it (spec §4): the FIFO instant its name gives, else its body's
    /// `created_at`, else its mtime (which the handling blocks written into it leave as it
    /// was: [`Mailbox::keep_order`]). Not the mtime alone: a claim whose handling block was
    /// written would carry the claim's time, one interrupted before carries the send's, and a
    /// consumer killed between the two would have its claims come back out of order. A
    /// broadcast's marker takes the instant of the broadcast it names, not its own (written
    /// at the delivery).
    fn fifo_instant(&self, dir: &Path, name: &OsStr) -> Result<i128> {
        if !Layout::is_marker(name) {
            return self.file_instant(dir, name);
        }
        let marker = dir.join(name);
        let named = match self.io.read_untrusted(&marker, MARKER_CAP)? {
            ReadOutcome::Bytes(bytes, _) => serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("name")?.as_str().map(String::from))
                .filter(|f| is_plain_name(f)),
            _ => None,
        };
        if let Some(file) = named {
            for d in [&self.layout.inputs, &self.layout.processed] {
                if self.io.stamp(&d.join(&file))?.is_some() {
                    return self.file_instant(d, OsStr::new(&file));
                }
            }
        }
        Ok(self.io.stamp(&marker)?.map_or(0, |s| s.mtime_ns))
    }

    /// The FIFO instant of the signal file `dir/name` (spec §4): its name's, else its body's
    /// `created_at`, else its mtime, no later than its ctime.
    fn file_instant(&self, dir: &Path, name: &OsStr) -> Result<i128> {
        if let Some(at) = name_instant(name) {
            return Ok(at);
        }
        let path = dir.join(name);
        Ok(match self.read_signal_file(&path)? {
            ReadOutcome::Bytes(bytes, stamp) => body::read_signal(&bytes, &lossy(name), &path)
                .ok()
                .and_then(|s| s.created_at?.timestamp_nanos_opt())
                .map_or(stamp.mtime_clamped_ns(), i128::from),
            _ => self.io.stamp(&path)?.map_or(0, |s| s.mtime_ns),
        })
    }

    /// Sets the mtime of the record `path` (named `fname`, open as `file`), whose handling
    /// block was just written, back to what it was (`stamp`, read before), no later than its
    /// arrival, when its order comes from it (a name with no instant, spec §4): a consumer
    /// that dies with it in flight has it come again in its place.
    pub(in crate::mailbox) fn keep_order(
        &self,
        file: &std::fs::File,
        path: &Path,
        fname: &str,
        stamp: &crate::sys::Stamp,
    ) -> Result<()> {
        if name_instant(OsStr::new(fname)).is_some() {
            return Ok(());
        }
        self.io.keep_mtime(file, path, stamp.mtime_clamped_ns())
    }

    /// Delivers an orphan again: a claimed file gets a handling block with its redelivery
    /// count (fdatasynced before the hand-over, so that the count survives a power loss);
    /// a broadcast marker is rewritten with its count. `None` when there is nothing to
    /// deliver (the file was invalid and is quarantined, or the broadcast was never acked).
    pub(in crate::mailbox) fn redeliver(
        &self,
        o: &Orphan,
        agent: &str,
        pass: &mut Pass,
    ) -> Result<Option<Delivery>> {
        let path = o.dir.join(&o.name);
        if Layout::is_marker(&o.name) {
            return self.redeliver_broadcast(&o.dir, &o.name, agent, pass);
        }
        let (read, file) = self.read_claimed_signal(&path)?;
        let fname = lossy(&o.name);
        let reason = match read {
            ReadOutcome::Gone => return Ok(None),
            ReadOutcome::Bytes(bytes, stamp) => {
                match body::read_signal_end(&bytes, &fname, &path) {
                    Ok((mut sig, end)) => {
                        sig.id = identity::identity(&fname, &sig.fields, &stamp);
                        let count = body::redeliveries(&bytes, &fname).saturating_add(1);
                        let extra = Handled::Redelivered(count).fields(agent);
                        let format = name::format_of(&fname);
                        let a = body::annotation(&bytes, format, &extra, end);
                        match file {
                            Some(f) if body::records_whole(&bytes, format, &a) => {
                                self.io.replace_tail(&f, &path, a.span(&bytes), &a.tail)?;
                                self.keep_order(&f, &path, &fname, &stamp)?;
                                self.io.sync_data(&f, &path)?;
                            }
                            Some(_) => {
                                tracing::debug!(file = %path.display(), "no redelivery record: it would not stay one document");
                            }
                            None => {
                                tracing::warn!(file = %path.display(), "cannot record the redelivery count in the file (not writable)")
                            }
                        }
                        sig.fields.extend(extra);
                        return Ok(Some(Delivery::redelivered(sig, Held::Claim(path, None))));
                    }
                    Err(reason) => reason,
                }
            }
            other => other.rejection().unwrap_or_default(),
        };
        self.quarantine_into(pass, &o.dir, &o.name, &reason, agent)?;
        Ok(None)
    }

    /// What a broadcast marker left in a slot stands for, read without changing anything:
    /// what the agent's next pass does with it ([`Mailbox::redeliver_broadcast`]) and what
    /// reports count as in flight ([`Mailbox::slots_in_flight`]).
    pub(in crate::mailbox) fn marker_fate(&self, marker: &Path, agent: &str) -> Result<MarkerFate> {
        let parsed = match self.io.read_untrusted(marker, MARKER_CAP)? {
            ReadOutcome::Bytes(bytes, _) if bytes.is_empty() => return Ok(MarkerFate::Emptied),
            ReadOutcome::Bytes(bytes, _) => serde_json::from_slice::<Value>(&bytes).ok(),
            ReadOutcome::Gone => return Ok(MarkerFate::Gone),
            other => {
                let why = other.rejection().unwrap_or_default();
                return Ok(MarkerFate::Foreign(why));
            }
        };
        let Some((file, count)) = parsed.as_ref().and_then(|v| {
            let count = match v.get("redelivery") {
                None => 0,
                Some(n) => u32::try_from(n.as_u64()?).ok()?,
            };
            Some((v.get("name")?.as_str()?.to_string(), count))
        }) else {
            return Ok(MarkerFate::Foreign(
                "not a broadcast marker: not JSON naming a broadcast, with a count from 0 to \
                 4294967295"
                    .into(),
            ));
        };
        if !is_plain_name(&file) {
            return Ok(MarkerFate::Foreign(format!(
                "not a broadcast marker: names {file:?}, not a file name"
            )));
        }
        // The broadcast the marker names: the file of that name, in inputs/ or (archived
        // since) in processed/, whose identity is the marker's (a marker written before
        // identities were recorded takes the file it names).
        let marked = parsed
            .as_ref()
            .and_then(|v| v.get("id")?.as_str().map(String::from));
        let mut sig = None;
        for dir in [&self.layout.inputs, &self.layout.processed] {
            let p = dir.join(&file);
            if let ReadOutcome::Bytes(bytes, stamp) = self.read_signal_file(&p)?
                && let Ok(mut s) = body::read_signal(&bytes, &file, &p)
            {
                s.id = identity::identity(&file, &s.fields, &stamp);
                if marked.as_ref().is_none_or(|m| *m == s.id) {
                    sig = Some(s);
                    break;
                }
            }
        }
        let Some(sig) = sig else {
            return Ok(MarkerFate::Stale(file));
        };
        // What a delivery writes, and nothing else: the marker of that broadcast's identity
        // (one written before identities were recorded holds none), for an agent that did not
        // send it. Any other names a signal the agent must not be given by it.
        let named = marker.file_name().unwrap_or_default();
        let refused = if sig.target != Target::All {
            Some(format!("not a broadcast marker: {file} is not a broadcast"))
        } else if sig.from.as_deref() == Some(agent) {
            Some(format!(
                "not a broadcast marker: {file} is {agent}'s own broadcast, never delivered to it"
            ))
        } else if marked.is_some() && named != Layout::marker_name(OsStr::new(&sig.id)).as_str() {
            Some(format!(
                "not a broadcast marker: its name is not the one of the broadcast it names ({})",
                Layout::marker_name(OsStr::new(&sig.id))
            ))
        } else {
            None
        };
        if let Some(reason) = refused {
            return Ok(MarkerFate::Foreign(reason));
        }
        let acked = Layout::ack_names(agent)
            .into_iter()
            .map(|n| self.layout.ack_dir(&sig.id).join(n))
            .map(|p| self.io.stamp(&p))
            .collect::<Result<Vec<_>>>()?
            .iter()
            .any(Option::is_some);
        if !acked {
            return Ok(MarkerFate::Unacked);
        }
        Ok(MarkerFate::Again(
            Box::new(sig),
            file,
            count.saturating_add(1),
        ))
    }

    /// Delivers again a broadcast whose marker a dead consumer left: when its ack was
    /// written, the consumer may have died before handing it over. When it was not, the
    /// broadcast is still pending for the agent and the marker is dropped. A marker sigbox did
    /// not write (a directory, a FIFO, a symlink, a file that is not one) is quarantined with
    /// the reason, and delivery goes on.
    pub(super) fn redeliver_broadcast(
        &self,
        dir: &Path,
        name: &OsStr,
        agent: &str,
        pass: &mut Pass,
    ) -> Result<Option<Delivery>> {
        let marker = dir.join(name);
        match self.marker_fate(&marker, agent)? {
            MarkerFate::Gone => Ok(None),
            // Emptied and not yet removed: an acknowledgement (or the take-back of a hand-over)
            // cut off between the two steps of `Io::remove_emptied` (the filesystems whose claims
            // go by link). The broadcast was acknowledged, or its ack is gone and it is still
            // pending: either way the marker's removal is finished here, as nothing unusual.
            MarkerFate::Emptied => {
                tracing::debug!(file = %marker.display(), "finishing the removal of an emptied broadcast marker");
                self.drop_marker(&marker)?;
                Ok(None)
            }
            MarkerFate::Foreign(reason) => {
                self.quarantine_into(pass, dir, name, &reason, agent)?;
                Ok(None)
            }
            MarkerFate::Stale(file) => {
                tracing::warn!(broadcast = %file, "a broadcast to deliver again is gone; dropping its marker");
                self.drop_marker(&marker)?;
                Ok(None)
            }
            MarkerFate::Unacked => {
                self.drop_marker(&marker)?;
                Ok(None)
            }
            MarkerFate::Again(mut sig, file, count) => {
                self.write_marker(&marker, &file, &sig.id, count)?;
                sig.fields.extend(Handled::Redelivered(count).fields(agent));
                Ok(Some(Delivery::redelivered(*sig, Held::Marker(marker))))
            }
        }
    }

    /// The slots of `agent` that hold signals, with how many each holds and whether a live
    /// handle holds the slot (`false`: stranded, what the agent's next pass delivers again).
    /// In a stranded slot, a broadcast marker counts only when the next pass delivers its
    /// broadcast again ([`Mailbox::marker_fate`]): an emptied one, one whose broadcast is gone
    /// or was never acked, delivers nothing again, and one sigbox did not write is listed
    /// apart, with the reason it is quarantined. Locks each free slot for a moment (`ls`,
    /// `doctor`).
    pub(in crate::mailbox) fn slots_in_flight(&self, agent: &str) -> Result<Vec<SlotInFlight>> {
        let mut out = Vec::new();
        for (_, dir) in self.slots(agent)? {
            let live = self.io.lock_dir(&dir)?.is_none();
            let mut slot = SlotInFlight {
                count: 0,
                live,
                foreign: Vec::new(),
                dir,
            };
            for name in self.slot_entries(&slot.dir)? {
                if live {
                    slot.count += 1;
                    continue;
                }
                let path = slot.dir.join(&name);
                if !Layout::is_marker(&name) {
                    // As the pass reads it: half of an interrupted move (resolved, not
                    // delivered again), a signal (delivered again), or not one (quarantined).
                    if !self.twins(agent, &path, &name)?.is_empty() {
                        continue;
                    }
                    let why = match self.read_signal_file(&path)? {
                        ReadOutcome::Gone => continue,
                        ReadOutcome::Bytes(bytes, _) => {
                            body::read_signal(&bytes, &lossy(&name), &path).err()
                        }
                        // A claim by link cut off before its source's moved-aside name went
                        // (beside it, §9.10), or another second link of sigbox's own: the
                        // pass resolves the link and delivers it again.
                        ReadOutcome::HardLinked(_)
                            if self.own_link(&slot.dir, &name)?.is_some() =>
                        {
                            None
                        }
                        other => other.rejection(),
                    };
                    match why {
                        None => slot.count += 1,
                        Some(reason) => slot.foreign.push((path, reason)),
                    }
                    continue;
                }
                let marker = path;
                match self.marker_fate(&marker, agent)? {
                    MarkerFate::Again(..) => slot.count += 1,
                    MarkerFate::Foreign(reason) => slot.foreign.push((marker, reason)),
                    MarkerFate::Gone
                    | MarkerFate::Emptied
                    | MarkerFate::Stale(_)
                    | MarkerFate::Unacked => {}
                }
            }
            if slot.count > 0 || !slot.foreign.is_empty() {
                out.push(slot);
            }
        }
        Ok(out)
    }

    /// Writes a broadcast's marker at `marker`, atomically and durably: the broadcast `file`,
    /// with identity `id`, is in flight for the slot's handle, delivered `count` times again
    /// so far.
    pub(in crate::mailbox) fn write_marker(
        &self,
        marker: &Path,
        file: &str,
        id: &str,
        count: u32,
    ) -> Result<()> {
        let dir = marker.parent().unwrap_or(&self.layout.claimed);
        let body = json!({ "name": file, "id": id, "redelivery": count });
        let mut bytes = serde_json::to_vec(&body).expect("JSON serializes");
        bytes.push(b'\n');
        let stage = own::stage_name(dir, "marker");
        atomic::write_atomic(&self.io, &stage, marker, &bytes, Clobber::Yes)?;
        Ok(())
    }

    /// Removes a marker durably: were it to come back after a power loss, its broadcast
    /// would be delivered again.
    pub(in crate::mailbox) fn drop_marker(&self, marker: &Path) -> Result<()> {
        self.io.remove_owned(marker)?;
        Ok(())
    }
}

/// A slot with something in it ([`Mailbox::slots_in_flight`]).
pub(in crate::mailbox) struct SlotInFlight {
    /// The slot.
    pub(in crate::mailbox) dir: PathBuf,
    /// How many signals it holds that are in flight: held by a live handle, or delivered
    /// again, marked, by the agent's next pass.
    pub(in crate::mailbox) count: usize,
    /// Whether a live handle holds it.
    pub(in crate::mailbox) live: bool,
    /// Entries that are not signals or markers sigbox wrote, with why: the next pass
    /// quarantines them.
    pub(in crate::mailbox) foreign: Vec<(PathBuf, String)>,
}
