//! Claims in flight (spec/mailbox.md §9.2): a delivery is claimed into a slot that the
//! claiming handle holds, `claimed/<Agent>/<n>/`, and moves on into `processed/` once it has
//! been handed over (the acknowledgement). A handle holds its slot with an exclusive `flock`
//! on the slot directory for as long as it lives; the kernel drops the lock when the process
//! dies. A slot nobody holds with signals in it therefore belongs to a consumer that died
//! before handing them over: the agent's next pass takes the slot over and delivers them
//! again, under the same ids, marked as redeliveries with a count.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::claim::{Delivery, Undo};
use super::layout::Layout;
use super::report::Pass;
use super::{Mailbox, identity, lossy};
use crate::atomic::{self, Clobber};
use crate::body::{self, Handled};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{ReadOutcome, Renamed};
use crate::name;
use crate::name::own;
use crate::signal::Signal;
use crate::sys::EntryKind;

/// A marker is a few hundred bytes; anything larger was not written by sigbox.
const MARKER_CAP: u64 = 64 * 1024;

/// A slot this handle holds: the directory, and the locked descriptor that holds it.
pub(super) struct Slot {
    dir: PathBuf,
    _lock: File,
}

/// What one handle has in flight for one agent.
#[derive(Default)]
pub(super) struct Flight {
    /// The slot new claims go to, taken at the first claim.
    own: Option<Slot>,
    /// Slots taken over from dead consumers, held until what they hold is handed over.
    adopted: Vec<Slot>,
    /// Handed over and not yet acknowledged: [`Mailbox::pass`] returns deliveries in this
    /// state; the next pass of the handle, or [`Mailbox::ack`], acknowledges them.
    pub(super) handed: Vec<Held>,
}

impl Flight {
    /// How many slots of dead consumers this handle holds: a mark for [`Flight::let_go_since`].
    pub(super) fn adoption_mark(&self) -> usize {
        self.adopted.len()
    }

    /// Lets go of the slots taken over since `mark` (their locks are released): what they hold
    /// stays in flight for whoever takes them next.
    pub(super) fn let_go_since(&mut self, mark: usize) {
        self.adopted.truncate(mark);
    }

    fn holds(&self, dir: &Path) -> bool {
        self.own.iter().chain(&self.adopted).any(|s| s.dir == dir)
    }

    /// True when `path` was handed over and waits for its acknowledgement (a pass that keeps
    /// what was handed, [`PassControl::keep_handed`](super::PassControl::keep_handed), finds
    /// it still in the slot: it is no orphan).
    fn handed(&self, path: &Path) -> bool {
        self.handed
            .iter()
            .any(|h| matches!(h, Held::Claim(p, _) | Held::Marker(p) if p == path))
    }
}

/// Where a delivery sits until it is acknowledged.
#[derive(Clone, Debug)]
pub(super) enum Held {
    /// A claimed file in a slot: acknowledged by its move into `processed/`, under the
    /// record's path the hand-over named ([`Signal::record`](crate::Signal::record); `None`
    /// before the hand-over).
    Claim(PathBuf, Option<PathBuf>),
    /// A broadcast's marker in a slot (its ack is written): acknowledged by its removal.
    Marker(PathBuf),
}

/// A signal in a slot this handle holds that was never handed over.
pub(super) struct Orphan {
    dir: PathBuf,
    name: OsString,
}

/// The slot numbers under `claimed/<Agent>/`: directories with decimal names.
fn slot_number(name: &OsStr) -> Option<u32> {
    let s = name.to_str()?;
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// True for a file name that is one path component: a marker names a file in `inputs/` or
/// `processed/`, never a path elsewhere.
fn is_plain_name(file: &str) -> bool {
    !file.is_empty() && file != "." && file != ".." && !file.contains(['/', '\\', '\0'])
}

impl Mailbox {
    /// `agent`'s slots, `claimed/<agent>/<n>/`, by number: directories with decimal names
    /// (anything else there, a symlink among them, is ignored).
    pub(super) fn slots(&self, agent: &str) -> Result<Vec<(u32, PathBuf)>> {
        let base = self.layout.claim_dir(agent);
        let mut out: Vec<(u32, PathBuf)> = self
            .io
            .list(&base, true)?
            .into_iter()
            .filter(|e| e.kind == EntryKind::Dir)
            .filter_map(|e| Some((slot_number(&e.name)?, base.join(&e.name))))
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// What a slot holds: its entries but a marker's rewrite in progress.
    fn slot_entries(&self, dir: &Path) -> Result<Vec<OsString>> {
        Ok(self.slot_listing(dir)?.0)
    }

    /// A slot's entries (as [`Mailbox::slot_entries`]), and apart the staging names a claim by
    /// link moved a source to (`.<pid>.<16 hex>.claim.tmp`, §9.10).
    fn slot_listing(&self, dir: &Path) -> Result<(Vec<OsString>, Vec<OsString>)> {
        let mut entries = Vec::new();
        let mut twins = Vec::new();
        for e in self.io.list(dir, true)? {
            if name::classify(&e.name) != name::NameKind::InProgress {
                entries.push(e.name);
            } else if own::is_claim_twin(&e.name) {
                twins.push(e.name);
            }
        }
        Ok((entries, twins))
    }

    /// A source name a claim by link moved aside and did not remove (the claimer died, or a
    /// crash brought it back, §9.10): a second link to a file that is elsewhere now goes; a
    /// file with no other name took the source's name before the claim moved it aside, and
    /// its name is lost with the claimer: it is quarantined, kept whole.
    fn clear_claim_twin(&self, dir: &Path, twin: &OsStr, agent: &str) -> Result<()> {
        let path = dir.join(twin);
        match self.io.stamp(&path)? {
            Some(st) if st.nlink >= 2 => {
                self.io.remove_second_link(&path)?;
            }
            Some(_) => {
                // Under a name readers see (a staging name is skipped everywhere).
                let shown = OsString::from(
                    lossy(twin)
                        .trim_start_matches('.')
                        .trim_end_matches(".tmp")
                        .to_string(),
                );
                if self.io.rename_noreplace(&path, &dir.join(&shown))? != Renamed::Done {
                    return Ok(());
                }
                self.quarantine(
                    dir,
                    &shown,
                    "a file moved aside by a claim that was interrupted: it took the name of \
                     the file being claimed, and that name is lost",
                    agent,
                )?;
            }
            None => {}
        }
        Ok(())
    }

    /// The slot `agent`'s new claims go to: taken at the first claim of this handle, the
    /// lowest-numbered slot nobody holds, or a new one. `claimed/` and `claimed/<agent>/`
    /// are made (durably) when missing.
    pub(super) fn own_slot(&self, agent: &str, flight: &mut Flight) -> Result<PathBuf> {
        if let Some(s) = &flight.own {
            return Ok(s.dir.clone());
        }
        let base = self.layout.claim_dir(agent);
        self.io.create_dir_durable(&self.layout.claimed)?;
        self.io.create_dir_durable(&base)?;
        for _ in 0..64 {
            let slots = self.slots(agent)?;
            for (_, dir) in &slots {
                if flight.holds(dir) {
                    continue;
                }
                if let Some(lock) = self.io.lock_dir(dir)? {
                    flight.own = Some(Slot {
                        dir: dir.clone(),
                        _lock: lock,
                    });
                    return Ok(dir.clone());
                }
            }
            let next = slots.last().map_or(0, |(n, _)| n + 1);
            let dir = base.join(next.to_string());
            // A race for the same number: the loser lists again.
            if self.io.create_dir_durable(&dir)?
                && let Some(lock) = self.io.lock_dir(&dir)?
            {
                flight.own = Some(Slot {
                    dir: dir.clone(),
                    _lock: lock,
                });
                return Ok(dir);
            }
        }
        Err(Error::new(
            ErrorKind::Io,
            Some(&base),
            "cannot take a claim slot: every attempt lost a race to another handle",
        ))
    }

    /// Takes over every slot of `agent` that no live handle holds and that has signals in it,
    /// and lists what the slots this handle holds contain that was never handed over, oldest
    /// first: the redeliveries. A signal whose claim or acknowledgement a crash interrupted
    /// halfway (the same signal is still in `inputs/` or the buffer, or already in
    /// `processed/`) is resolved here instead: its slot link is removed.
    pub(super) fn orphans(&self, agent: &str, flight: &mut Flight) -> Result<Vec<Orphan>> {
        let mut out = Vec::new();
        for (_, dir) in self.slots(agent)? {
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
                let at = self.io.stamp(&dir.join(&f))?.map_or(0, |s| s.mtime_ns);
                found.push((at, f));
            }
            if found.is_empty() {
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

    /// True (and the slot link removed) when `dir/name` is half of an interrupted move: the
    /// same signal is still at the claim's source (its removal never became durable, so it was
    /// never handed over: the source is delivered as usual), or already in `processed/` (its
    /// acknowledgement was made).
    fn resolve_twin(&self, agent: &str, dir: &Path, name: &OsStr) -> Result<bool> {
        let path = dir.join(name);
        for other in [
            &self.layout.inputs,
            &self.layout.buffer_dir(agent),
            &self.layout.processed,
        ] {
            let twin = other.join(name);
            if self.io.stamp(&twin)?.is_none() {
                continue;
            }
            let same_file = match (self.io.stamp(&path)?, self.io.stamp(&twin)?) {
                (Some(a), Some(b)) => (a.dev, a.ino) == (b.dev, b.ino),
                _ => false,
            };
            if same_file {
                // Under the lock, while the other link stands: a pass resolving the same
                // two links from the other side (§9.6) may have removed it meanwhile.
                if self.io.remove_second_link(&path)? {
                    return Ok(true);
                }
                continue;
            }
            if self.same_signal(&path, &twin)? {
                // A copy: its inode is freed, so its removal is made durable before the inode
                // can be used again (spec/mailbox.md §9.1).
                self.io.remove_owned(&path)?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Delivers an orphan again: a claimed file gets a handling block with its redelivery
    /// count (fdatasynced before the hand-over, so that the count survives a power loss);
    /// a broadcast marker is rewritten with its count. `None` when there is nothing to
    /// deliver (the file was invalid and is quarantined, or the broadcast was never acked).
    pub(super) fn redeliver(
        &self,
        o: &Orphan,
        agent: &str,
        pass: &mut Pass,
    ) -> Result<Option<Delivery>> {
        let path = o.dir.join(&o.name);
        if Layout::is_marker(&o.name) {
            return self.redeliver_broadcast(&path, agent);
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

    /// Delivers again a broadcast whose marker a dead consumer left: when its ack was
    /// written, the consumer may have died before handing it over. When it was not, the
    /// broadcast is still pending for the agent and the marker is dropped.
    fn redeliver_broadcast(&self, marker: &Path, agent: &str) -> Result<Option<Delivery>> {
        let parsed = match self.io.read_untrusted(marker, MARKER_CAP)? {
            ReadOutcome::Bytes(bytes, _) => serde_json::from_slice::<Value>(&bytes).ok(),
            ReadOutcome::Gone => return Ok(None),
            _ => None,
        };
        let Some((file, count)) = parsed.as_ref().and_then(|v| {
            Some((
                v.get("name")?.as_str()?.to_string(),
                v.get("redelivery").and_then(Value::as_u64).unwrap_or(0),
            ))
        }) else {
            tracing::warn!(file = %marker.display(), "dropping an unreadable broadcast marker");
            self.drop_marker(marker)?;
            return Ok(None);
        };
        if !is_plain_name(&file) {
            self.drop_marker(marker)?;
            return Ok(None);
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
        let Some(mut sig) = sig else {
            tracing::warn!(broadcast = %file, "a broadcast to deliver again is gone; dropping its marker");
            self.drop_marker(marker)?;
            return Ok(None);
        };
        let acked = Layout::ack_names(agent)
            .into_iter()
            .map(|n| self.layout.ack_dir(&sig.id).join(n))
            .map(|p| self.io.stamp(&p))
            .collect::<Result<Vec<_>>>()?
            .iter()
            .any(Option::is_some);
        if !acked {
            self.drop_marker(marker)?;
            return Ok(None);
        }
        let count = u32::try_from(count).unwrap_or(u32::MAX).saturating_add(1);
        self.write_marker(marker, &file, &sig.id, count)?;
        sig.fields.extend(Handled::Redelivered(count).fields(agent));
        Ok(Some(Delivery::redelivered(
            sig,
            Held::Marker(marker.to_path_buf()),
        )))
    }

    /// Writes a broadcast's marker at `marker`, atomically and durably: the broadcast `file`,
    /// with identity `id`, is in flight for the slot's handle, delivered `count` times again
    /// so far.
    pub(super) fn write_marker(
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
    pub(super) fn drop_marker(&self, marker: &Path) -> Result<()> {
        self.io.remove_owned(marker)?;
        Ok(())
    }

    /// Acknowledges everything handed over and not yet acknowledged: each claimed file moves
    /// into `processed/` (no-clobber, a fresh `.dup-` name when the name is taken by another
    /// signal), each marker is removed; then `processed/` is fsynced, and each slot that lost
    /// a marker. Slots taken over from dead consumers are released once empty. Returns how
    /// many deliveries were acknowledged.
    pub(super) fn ack_handed(&self, flight: &mut Flight) -> Result<usize> {
        if flight.handed.is_empty() {
            return Ok(0);
        }
        let mut moved = false;
        let mut slots: Vec<PathBuf> = Vec::new();
        let mut done = 0;
        let result = flight.handed.iter().try_for_each(|h| {
            match h {
                Held::Claim(path, record) => {
                    self.settle_claim(path, record.as_deref())?;
                    moved = true;
                }
                Held::Marker(path) => {
                    self.io.remove_emptied(path)?;
                    if let Some(d) = path.parent()
                        && !slots.iter().any(|s| s == d)
                    {
                        slots.push(d.to_path_buf());
                    }
                }
            }
            done += 1;
            Ok::<(), Error>(())
        });
        flight.handed.drain(..done);
        if moved {
            self.io.sync_dir(&self.layout.processed)?;
        }
        for d in &slots {
            self.io.sync_dir(d)?;
        }
        result?;
        if !flight.adopted.is_empty() {
            let mut keep = Vec::new();
            for s in flight.adopted.drain(..) {
                if !self.slot_entries(&s.dir)?.is_empty() {
                    keep.push(s);
                }
            }
            flight.adopted = keep;
        }
        Ok(done)
    }

    /// Where a claim at `claimed` (in a slot) is to be acknowledged into, named before its
    /// hand-over so that what is shown of it says where it will be: `processed/<its name>`,
    /// or a fresh `.dup-` name when that name is taken, or reserved: another claim of that
    /// name in flight in any slot (a dropped name used again while the first file waits for
    /// its acknowledgement) will take it. The slots are looked at before `processed/`, so a
    /// claim acknowledged meanwhile (one rename from its slot into `processed/`) is seen in
    /// one or the other. A canonical name sigbox wrote is unique and needs no look at the
    /// slots.
    pub(super) fn record_for(&self, claimed: &Path) -> Result<PathBuf> {
        let name = claimed.file_name().unwrap_or_default();
        let plain = self.layout.processed.join(name);
        let fresh = || self.layout.processed.join(own::unique_variant(name));
        if name::parse_canonical(&lossy(name)).is_none() && self.in_flight_elsewhere(claimed)? {
            return Ok(fresh());
        }
        Ok(match self.io.stamp(&plain)? {
            None => plain,
            Some(_) => fresh(),
        })
    }

    /// True when a slot other than `claimed`'s holds a file of `claimed`'s name.
    fn in_flight_elsewhere(&self, claimed: &Path) -> Result<bool> {
        let name = claimed.file_name().unwrap_or_default();
        for e in self.io.list(&self.layout.claimed, true)? {
            let Some(agent) = e.name.to_str().filter(|a| crate::signal::valid_agent(a)) else {
                continue;
            };
            for (_, dir) in self.slots(agent)? {
                if claimed.parent() != Some(dir.as_path())
                    && self.io.stamp(&dir.join(name))?.is_some()
                {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Moves a handed-over claim from its slot into `processed/`: to `record`, the path its
    /// hand-over named, when it has one and it is free.
    fn settle_claim(&self, path: &Path, record: Option<&Path>) -> Result<()> {
        if let Some(dest) = record {
            match self.io.rename_noreplace(path, dest)? {
                Renamed::Done => return Ok(()),
                Renamed::SourceGone => {
                    tracing::warn!(file = %path.display(), "a claim in flight vanished before its acknowledgement");
                    return Ok(());
                }
                Renamed::DestExists if self.same_signal(path, dest)? => {
                    // Acknowledged before, and a crash kept the slot link.
                    self.io.remove(path)?;
                    return Ok(());
                }
                // Another file of that name was acknowledged there since the hand-over (two
                // files of one name in flight at once): this one takes a fresh name.
                Renamed::DestExists => tracing::warn!(
                    file = %path.display(),
                    record = %dest.display(),
                    "the record's name in processed/ was taken since the hand-over: acknowledged under a fresh name"
                ),
            }
        }
        let name = path.file_name().unwrap_or_default();
        let processed = &self.layout.processed;
        let placed = own::with_fresh_names(processed, name, |attempt, dest| {
            Ok(match self.io.rename_noreplace(path, &dest)? {
                Renamed::Done => Some(()),
                Renamed::SourceGone => {
                    tracing::warn!(file = %path.display(), "a claim in flight vanished before its acknowledgement");
                    Some(())
                }
                Renamed::DestExists => {
                    if attempt == 0 && self.same_signal(path, &dest)? {
                        // Acknowledged before, and a crash kept the slot link.
                        self.io.remove(path)?;
                        Some(())
                    } else {
                        None
                    }
                }
            })
        })?;
        placed.ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                Some(path),
                "cannot find a free name in processed/",
            )
        })
    }

    /// Acknowledges every delivery this handle made to `agent` and has not acknowledged yet:
    /// they are handed over for good and never delivered again, also after a crash. The next
    /// pass of this handle for `agent` does the same first; a handle dropped (or a process
    /// that dies) without it leaves them to be delivered again, marked
    /// ([`Signal::redelivery`]). Returns how many were acknowledged.
    ///
    /// **Durability:** `processed/` is fsynced before this returns.
    pub fn ack(&self, agent: &str) -> Result<usize> {
        self.check_agent(agent)?;
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        match flights.get_mut(agent) {
            Some(f) => self.ack_handed(f),
            None => Ok(0),
        }
    }

    /// The slots of `agent` that hold signals, with how many each holds and whether a live
    /// handle holds the slot (`false`: stranded, what the agent's next pass delivers again).
    /// Locks each free slot for a moment (`ls`, `doctor`).
    pub(super) fn slots_in_flight(&self, agent: &str) -> Result<Vec<(PathBuf, usize, bool)>> {
        let mut out = Vec::new();
        for (_, dir) in self.slots(agent)? {
            let live = self.io.lock_dir(&dir)?.is_none();
            let n = self.slot_entries(&dir)?.len();
            if n > 0 {
                out.push((dir, n, live));
            }
        }
        Ok(out)
    }
}

impl Delivery {
    /// A delivery made again from a slot this handle took over; nothing to take back when it
    /// cannot be handed over (it stays in the slot, for the next pass).
    fn redelivered(signal: Signal, held: Held) -> Delivery {
        Delivery::durable(signal, Undo::Keep, held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_numbers_are_plain_decimal_names() {
        assert_eq!(slot_number(OsStr::new("0")), Some(0));
        assert_eq!(slot_number(OsStr::new("17")), Some(17));
        for bad in ["", "-1", "1a", ".1", "1234567890", "x"] {
            assert_eq!(slot_number(OsStr::new(bad)), None, "{bad}");
        }
    }

    #[test]
    fn a_marker_names_one_file_and_no_path() {
        assert!(is_plain_name("2026-x-INFO-ALL-1.json"));
        for bad in ["", ".", "..", "../inputs/x.json", "a/b.json", "/etc/passwd"] {
            assert!(!is_plain_name(bad), "{bad}");
        }
    }
}
