//! The claim (spec/mailbox.md §9.2, §9.3, §9.6): a no-clobber rename into `processed/`, the
//! handling record appended in place, the group commit that makes a pass's claims durable
//! together, the orchestrator's move into a buffer, and the recovery of a move a crash
//! interrupted.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::inflight::Held;
use super::report::{Buffered, Pass, Rejection, Settling};
use super::route::Item;
use super::{Mailbox, identity, lossy};
use crate::atomic::{self, Claimed};
use crate::body::{self, Handled};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{Linked, ReadOutcome};
use crate::name;
use crate::name::own;
use crate::signal::Signal;
use crate::sys::EntryKind;

/// Claims per group commit: a pass makes its claims durable together, at most this many at a
/// time, so that the first are handed over while the pass goes on. A claim holds no
/// descriptor until the commit, so the group does not depend on the descriptor limit.
pub(super) const GROUP_COMMIT: usize = 64;

/// A signal claimed for delivery.
pub(super) struct Delivery {
    pub(super) signal: Signal,
    /// The source directory of its claim while that claim is not durable (it joined a batch
    /// not yet committed); `None` once durable.
    pending: Option<PathBuf>,
    /// How to take the delivery back if it cannot be handed over.
    pub(super) undo: Undo,
    /// Where it waits for its acknowledgement once handed over.
    pub(super) held: Held,
}

/// What takes back a delivery that was made but could not be handed over.
pub(super) enum Undo {
    /// Move the claimed file (at the signal's path) back to here.
    Claim(PathBuf),
    /// Remove this ack, then the broadcast's marker.
    Ack { ack: PathBuf, marker: PathBuf },
    /// Nothing: a redelivery stays in the slot this handle holds, for its next pass.
    Keep,
}

impl Delivery {
    /// A delivery that is durable as made.
    pub(super) fn durable(signal: Signal, undo: Undo, held: Held) -> Delivery {
        Delivery {
            signal,
            pending: None,
            undo,
            held,
        }
    }

    /// A broadcast delivered by writing `ack`, with its `marker` in the handle's slot.
    pub(super) fn acked(signal: Signal, ack: PathBuf, marker: PathBuf) -> Delivery {
        let held = Held::Marker(marker.clone());
        Delivery::durable(signal, Undo::Ack { ack, marker }, held)
    }
}

/// The claims of a pass not yet durable, and the pass's deliveries in order.
pub(super) struct Batch {
    /// Claims per commit.
    group: usize,
    /// The slot the claims go to, fsynced first at the commit.
    dest: Option<PathBuf>,
    /// Directories to fsync after the slot, in order: the claims' source directories, with
    /// `inputs/` before any buffer (spec/mailbox.md §9.2).
    dirs: Vec<PathBuf>,
    /// The directories the commit fsyncs, opened before the first claim that needs each, so
    /// that a commit never needs a new descriptor (the slot and the source directories).
    open_dirs: Vec<(PathBuf, File)>,
    /// Claims since the last commit.
    claims: usize,
    /// Deliveries in FIFO order, and claims by link not yet decided.
    deliveries: Vec<Entry>,
    /// How many of `deliveries` are known durable (a prefix: a commit that succeeds makes all
    /// durable).
    durable: usize,
    /// Files a commit found invalid (claims by link are read at the commit) and quarantined.
    pub(super) rejected: Vec<Rejection>,
    /// The files a commit put back to settle, and when each is to be looked at again.
    pub(super) settling: Vec<Settling>,
}

/// One place in a batch's FIFO order. Deliveries are the common entry and stay unboxed.
#[allow(clippy::large_enum_variant)]
enum Entry {
    /// A delivery made (durable or not yet).
    Made(Delivery),
    /// A claim by link (spec/mailbox.md §9.10) whose link waits for the commit's fsync of the
    /// slot; the commit then removes the source and reads and records the claim.
    Linked(Box<LinkedClaim>),
}

/// What a commit needs to finish a claim by link.
struct LinkedClaim {
    dest: PathBuf,
    dir: PathBuf,
    name: std::ffi::OsString,
    extra: Map<String, Value>,
    agent: String,
    expected: Option<(u64, i128)>,
    ino: u64,
}

impl Batch {
    /// An empty batch that commits every `group` claims.
    pub(super) fn new(group: usize) -> Batch {
        Batch {
            group,
            dest: None,
            dirs: Vec::new(),
            open_dirs: Vec::new(),
            claims: 0,
            deliveries: Vec::new(),
            durable: 0,
            rejected: Vec::new(),
            settling: Vec::new(),
        }
    }

    /// Opens `dir` for the commit unless it is open already.
    fn open_dir(&mut self, io: &crate::io::Io, dir: &Path) -> Result<()> {
        if !self.open_dirs.iter().any(|(p, _)| p == dir) {
            let f = io.open_dir(dir)?;
            self.open_dirs.push((dir.to_path_buf(), f));
        }
        Ok(())
    }

    fn dir_file(&self, dir: &Path) -> &File {
        &self
            .open_dirs
            .iter()
            .find(|(p, _)| p == dir)
            .expect("a batch opens every directory it commits before its first claim")
            .1
    }

    /// Notes `dir` as the source directory of a claim, synced at the commit after the slot.
    /// A buffered signal left `inputs/` by the orchestrator's move, whose fsync of `inputs/`
    /// may not have happened yet (it died in between, or has not got there). Until that
    /// removal is durable, a power loss can bring the signal back to `inputs/`, to be buffered
    /// and delivered again: `inputs/` is synced before the buffer, so before the hand-over.
    fn note_source(&mut self, inputs: &Path, dir: &Path) {
        if dir != inputs && !self.dirs.iter().any(|d| d == inputs) {
            self.dirs.push(inputs.to_path_buf());
        }
        if !self.dirs.iter().any(|d| d == dir) {
            self.dirs.push(dir.to_path_buf());
        }
    }

    /// Adds a delivery, in FIFO order.
    pub(super) fn push(&mut self, d: Delivery) {
        self.deliveries.push(Entry::Made(d));
    }

    /// True when the last entry is a claim by link, decided at the commit.
    pub(super) fn ends_linked(&self) -> bool {
        matches!(self.deliveries.last(), Some(Entry::Linked(_)))
    }

    /// True when the batch holds as many uncommitted claims as one commit takes.
    pub(super) fn is_full(&self) -> bool {
        self.claims >= self.group
    }

    /// Takes the deliveries that are durable, in FIFO order: what may be handed over now.
    pub(super) fn take_durable(&mut self) -> Vec<Delivery> {
        let mut ready = Vec::new();
        let mut pending = Vec::new();
        for e in std::mem::take(&mut self.deliveries) {
            match e {
                Entry::Made(d) if d.pending.is_none() => ready.push(d),
                other => pending.push(other),
            }
        }
        self.deliveries = pending;
        self.durable = 0;
        ready
    }

    /// Deliveries made in this pass and not handed over yet, durable or not.
    pub(super) fn len(&self) -> usize {
        self.deliveries.len()
    }
}

/// What annotating a claimed file found in it. A valid signal is the common outcome and
/// stays unboxed.
#[allow(clippy::large_enum_variant)]
enum Recorded {
    /// A valid signal, annotated.
    Signal(Signal),
    /// Not a valid signal: quarantined from `processed/`.
    Rejected(Rejection),
    /// Gone, or taken by another process before it could be quarantined.
    Gone,
    /// Not the file the claim was decided on (its name was used again meanwhile), with the
    /// descriptor it was read through.
    Stale(Option<File>),
    /// A canonical-looking file sigbox did not write, changed within the settle window: put
    /// back, to be looked at again then.
    Unsettled(std::time::SystemTime),
}

impl Mailbox {
    /// Makes the batch's claims durable (group commit): fsync the slot, then each directory of
    /// `batch.dirs` in order (`inputs/` before a buffer). A claim is durable once its source
    /// directory is synced: when the commit then fails on another directory, the claims
    /// already durable are still handed over. The claimed files themselves are not synced:
    /// their content was durable when they were sent, and the handling block appended since
    /// is a record, not a promise (spec/mailbox.md §9.2).
    pub(super) fn commit(&self, batch: &mut Batch) -> Result<()> {
        if batch.claims > 0 {
            let dest = batch
                .dest
                .clone()
                .expect("a batch with claims knows their slot");
            self.io.sync_dir_file(batch.dir_file(&dest), &dest)?;
            // Claims by link: their links are durable now; each source goes, and each claim
            // is read and recorded (§9.10). After an error, what was decided still commits.
            let decided = self.decide_links(batch);
            while let Some(dir) = batch.dirs.first() {
                self.io.sync_dir_file(batch.dir_file(dir), dir)?;
                for e in &mut batch.deliveries[batch.durable..] {
                    if let Entry::Made(d) = e
                        && d.pending.as_ref() == Some(dir)
                    {
                        d.pending = None;
                    }
                }
                batch.dirs.remove(0);
            }
            batch.claims = 0;
            decided?;
        }
        // Every delivery is durable now: the batch's claims just committed; the rest (acks,
        // claims that finished an interrupted one) were synced when made.
        debug_assert!(
            batch
                .deliveries
                .iter()
                .all(|e| matches!(e, Entry::Made(d) if d.pending.is_none()))
        );
        batch.durable = batch.deliveries.len();
        Ok(())
    }

    /// The second half of the batch's claims by link, in FIFO order, once their links are
    /// durable (spec/mailbox.md §9.10): the source goes ([`atomic::remove_linked_source`]),
    /// then the claimed file is read and recorded as a claim by rename is. After an error,
    /// the claims not decided yet are dropped (their links removed: the files stay where they
    /// were) and the one that failed goes back.
    fn decide_links(&self, batch: &mut Batch) -> Result<()> {
        let mut failed = None;
        let entries = std::mem::take(&mut batch.deliveries);
        for e in entries {
            let l = match e {
                Entry::Linked(l) => l,
                made => {
                    batch.deliveries.push(made);
                    continue;
                }
            };
            if failed.is_some() {
                if let Err(e) = self.io.remove(&l.dest) {
                    tracing::warn!(file = %l.dest.display(), error = %e, "cannot drop a claim's link");
                }
                continue;
            }
            match self.decide_link(&l, batch) {
                Ok(Some(d)) => batch.deliveries.push(Entry::Made(d)),
                Ok(None) => {}
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Decides one claim by link: see [`Mailbox::decide_links`].
    fn decide_link(&self, l: &LinkedClaim, batch: &mut Batch) -> Result<Option<Delivery>> {
        let src = l.dir.join(&l.name);
        if let Some(other) = atomic::remove_linked_source(&self.io, &src, &l.dest, l.ino)? {
            let (_, file) = self.read_claimed_signal(&other)?;
            self.put_back(&other, &l.dir, &l.name, file.as_ref())?;
        }
        let recorded = match self.annotate(&l.dest, &l.name, &l.extra, &l.agent, l.expected) {
            Ok(r) => r,
            Err(e) => {
                // The source is gone: the file goes back there, pending again.
                if let Err(back) = self.io.rename_noreplace(&l.dest, &src) {
                    tracing::warn!(file = %l.dest.display(), error = %back, "cannot undo a claim");
                }
                return Err(e);
            }
        };
        Ok(match recorded {
            Recorded::Signal(signal) => Some(Delivery {
                held: Held::Claim(signal.path.clone(), None),
                signal,
                pending: Some(l.dir.clone()),
                undo: Undo::Claim(src),
            }),
            Recorded::Rejected(rej) => {
                batch.rejected.push(rej);
                None
            }
            Recorded::Gone => None,
            Recorded::Stale(file) => {
                self.put_back(&l.dest, &l.dir, &l.name, file.as_ref())?;
                None
            }
            Recorded::Unsettled(until) => {
                if let Some(back) = self.put_back(&l.dest, &l.dir, &l.name, None)? {
                    batch.settling.push(Settling { path: back, until });
                }
                None
            }
        })
    }

    /// Takes back durable deliveries that could not be handed over (a closed or full output):
    /// each claimed file goes back where it was (no-clobber), each ack is removed with its
    /// marker, and the directories are synced (the sources first, then the slots), so that a
    /// later pass delivers them again; a redelivery stays in its slot. Returns how many could not be taken back (left as they are, with
    /// a warning: claimed, recorded in `processed/`, not delivered).
    pub(super) fn undo(&self, deliveries: Vec<Delivery>) -> Result<usize> {
        let mut stuck = 0;
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut slots: Vec<PathBuf> = Vec::new();
        let note = |list: &mut Vec<PathBuf>, p: &Path| {
            if let Some(d) = p.parent()
                && !list.iter().any(|x| x == d)
            {
                list.push(d.to_path_buf());
            }
        };
        for d in deliveries {
            let done = match &d.undo {
                Undo::Claim(src) => {
                    let back = self.io.rename_noreplace(&d.signal.path, src)?;
                    if back == crate::io::Renamed::Done {
                        note(&mut dirs, src);
                        note(&mut slots, &d.signal.path);
                    }
                    back == crate::io::Renamed::Done
                }
                Undo::Ack { ack, marker } => {
                    let removed = self.io.remove_emptied(ack)?;
                    note(&mut dirs, ack);
                    self.io.remove_emptied(marker)?;
                    note(&mut slots, marker);
                    removed
                }
                Undo::Keep => true,
            };
            if !done {
                stuck += 1;
                tracing::warn!(file = %d.signal.path.display(), "cannot take back a delivery that was not handed over");
            }
        }
        for dir in dirs.iter().chain(&slots) {
            self.io.sync_dir(dir)?;
        }
        Ok(stuck)
    }

    /// Claims the scanned `item` in `dir` for delivery to `agent` into the handle's `slot`, in
    /// `batch` (durable at its commit). `None` when another consumer won, or when the file
    /// turned out invalid (then it is quarantined and recorded in `pass`), or was not the file
    /// scanned any more (then it is put back).
    pub(super) fn claim(
        &self,
        slot: &Path,
        dir: &Path,
        item: &Item,
        agent: &str,
        pass: &mut Pass,
        batch: &mut Batch,
    ) -> Result<Option<Delivery>> {
        let name = item.name.as_os_str();
        let extra = Handled::Delivered.fields(agent);
        debug_assert!(batch.dest.as_deref().is_none_or(|d| d == slot));
        batch.dest = Some(slot.to_path_buf());
        // A dropped file: the claim takes it only if it is the file the scan settled and
        // routed. A canonical name routes by itself; what it holds is checked once moved.
        self.claim_into(slot, dir, name, agent, extra, pass, Some(batch), item.seen)
    }

    /// Claims the scanned `item` in `dir` for a bridge into `bridge/outbox/`, in `batch`
    /// (durable at its commit), as [`Mailbox::claim`] claims into a slot: the record says
    /// `exported` by `host` (spec/bridge.md §3), with `redelivery` for a claim taken from a
    /// dead consumer's slot.
    pub(super) fn claim_for_export(
        &self,
        dir: &Path,
        item: &Item,
        host: &str,
        redelivery: u32,
        pass: &mut Pass,
        batch: &mut Batch,
    ) -> Result<Option<Delivery>> {
        let outbox = self.layout.outbox.clone();
        let mut extra = Handled::Exported.fields(host);
        // A claim a dead consumer never handed over: the count follows it (spec/bridge.md §5).
        if redelivery > 0
            && let Some(Value::Object(block)) = extra.get_mut(crate::body::key::HANDLING_METADATA)
        {
            block.insert(crate::body::key::REDELIVERY.into(), redelivery.into());
        }
        batch.dest = Some(outbox.clone());
        self.claim_into(
            &outbox,
            dir,
            &item.name,
            host,
            extra,
            pass,
            Some(batch),
            item.seen,
        )
    }

    /// Reads a file under a canonical name before the orchestrator moves it into a buffer:
    /// only a file sigbox wrote is complete at once ([`identity::trusted`]); any other
    /// settles like a dropped file (spec §2.4, §5). False when the file must be left (gone,
    /// or still settling: then `pass.next_check` says when to look again).
    pub(super) fn may_move(&self, dir: &Path, name: &OsStr, pass: &mut Pass) -> Result<bool> {
        let fname = lossy(name);
        if name::parse_canonical(&fname).is_none() {
            return Ok(true); // a dropped name: its scan settled it
        }
        let path = dir.join(name);
        let Some(read) = self.read_resolving(dir, name)? else {
            return Ok(false);
        };
        match &read {
            ReadOutcome::Gone => Ok(false),
            ReadOutcome::Bytes(bytes, stamp) => {
                let parsed = body::read_signal(bytes, &fname, &path);
                let fields = parsed.as_ref().ok().map(|s| &s.fields);
                let now = std::time::SystemTime::now();
                Ok(
                    match identity::untrusted_settling(&fname, fields, stamp, self.opts.settle, now)
                    {
                        Some(until) => {
                            pass.note_settling(path.clone(), until);
                            false
                        }
                        None => true,
                    },
                )
            }
            _ => Ok(true),
        }
    }

    /// The claim: rename into `dest_dir` (a slot, or `processed/` for an archive) without
    /// replacing, append the handling record `extra`, fsync `dest_dir`, then the source
    /// directory; with a `batch`, the fsyncs are left to its commit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn claim_into(
        &self,
        dest_dir: &Path,
        dir: &Path,
        name: &OsStr,
        agent: &str,
        extra: Map<String, Value>,
        pass: &mut Pass,
        mut batch: Option<&mut Batch>,
        expected: Option<(u64, i128)>,
    ) -> Result<Option<Delivery>> {
        let src = dir.join(name);
        let found = own::with_fresh_names(dest_dir, name, |attempt, dest| {
            let (claimed, pending) = match batch.as_deref_mut() {
                Some(b) => {
                    // Every descriptor the commit needs, before the claim: running out of
                    // descriptors then stops the pass before this claim, not after it.
                    for d in [dest_dir, self.layout.inputs.as_path(), dir] {
                        b.open_dir(&self.io, d)?;
                    }
                    // By link where renames are not atomic across directories (§9.10): the
                    // claim is decided at the commit, once the link is durable.
                    let claimed = 'claimed: {
                        let mut tries = 0;
                        while self.io.link_claims() {
                            tries += 1;
                            match self.io.link_exclusive(&src, &dest)? {
                                Linked::Done(st) => {
                                    b.claims += 1;
                                    b.note_source(&self.layout.inputs, dir);
                                    b.deliveries.push(Entry::Linked(Box::new(LinkedClaim {
                                        dest,
                                        dir: dir.to_path_buf(),
                                        name: name.to_os_string(),
                                        extra: extra.clone(),
                                        agent: agent.to_string(),
                                        expected,
                                        ino: st.ino,
                                    })));
                                    return Ok(Some(None));
                                }
                                Linked::SourceGone => break 'claimed Claimed::Lost,
                                Linked::DestExists => break 'claimed Claimed::DestExists,
                                Linked::Busy => {
                                    if tries > 1 || !self.busy_source(dir, name, agent, pass)? {
                                        break 'claimed Claimed::Lost;
                                    }
                                }
                                Linked::Unlinkable => break,
                            }
                        }
                        let annotate = || self.annotate(&dest, name, &extra, agent, expected);
                        let claimed = atomic::claim_unsynced(&self.io, &src, &dest, annotate)?;
                        if let Claimed::Won(_) = claimed {
                            b.claims += 1;
                            b.note_source(&self.layout.inputs, dir);
                        }
                        claimed
                    };
                    (claimed, Some(dir.to_path_buf()))
                }
                None => {
                    let annotate = || self.annotate(&dest, name, &extra, agent, expected);
                    (atomic::claim(&self.io, &src, &dest, annotate)?, None)
                }
            };
            let (recorded, pending) = match claimed {
                Claimed::Lost => return Ok(Some(None)),
                Claimed::Won(recorded) => (recorded, pending),
                Claimed::DestExists => {
                    return self.dest_taken(
                        attempt,
                        dest_dir,
                        dir,
                        &src,
                        &dest,
                        name,
                        &extra,
                        agent,
                        batch.as_deref_mut(),
                        pass,
                    );
                }
            };
            Ok(Some(self.delivery_of(
                recorded, pending, &src, &dest, dir, name, pass,
            )?))
        })?;
        found.ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                Some(&src),
                "cannot find a free name to claim it into",
            )
        })
    }

    /// A claim whose destination is taken: when it holds this very signal, an interrupted
    /// claim is finished (`processed/` only, plain name only); else `Ok(None)` asks for a
    /// fresh name.
    #[allow(clippy::too_many_arguments)]
    fn dest_taken(
        &self,
        attempt: usize,
        dest_dir: &Path,
        dir: &Path,
        src: &Path,
        dest: &Path,
        name: &OsStr,
        extra: &Map<String, Value>,
        agent: &str,
        batch: Option<&mut Batch>,
        pass: &mut Pass,
    ) -> Result<Option<Option<Delivery>>> {
        // Finishing an interrupted claim fsyncs both directories: commit first.
        if let Some(b) = batch {
            self.commit(b)?;
        }
        if attempt > 0 || dest_dir != self.layout.processed {
            // A `.dup-` name taken too, or a name in the slot still in use by an earlier
            // claim: try another.
            return Ok(None);
        }
        match self.finish_interrupted(dir, src, dest, name, extra, agent)? {
            // Synced when made: durable at once.
            Some(recorded) => Ok(Some(
                self.delivery_of(recorded, None, src, dest, dir, name, pass)?,
            )),
            None => Ok(None), // a different signal: try a fresh name
        }
    }

    /// A source with a second link already, met by a claim by link: another claim's link
    /// (under way, or left by a crash) or a planted one. A read resolves sigbox's own (§9.6);
    /// a link that is not sigbox's quarantines the file, as the hard-link rule says.
    /// True when the file is here with one link now: the claim tries again.
    fn busy_source(&self, dir: &Path, name: &OsStr, agent: &str, pass: &mut Pass) -> Result<bool> {
        Ok(match self.read_resolving(dir, name)? {
            Some(read @ ReadOutcome::HardLinked(_)) => {
                let reason = read.rejection().unwrap_or_default();
                self.quarantine_into(pass, dir, name, &reason, agent)?;
                false
            }
            Some(ReadOutcome::Bytes(..)) => true,
            _ => false,
        })
    }

    /// What a claim's record says: a delivery, a rejection (recorded in `pass`), or nothing.
    #[allow(clippy::too_many_arguments)]
    fn delivery_of(
        &self,
        recorded: Recorded,
        pending: Option<PathBuf>,
        src: &Path,
        dest: &Path,
        dir: &Path,
        name: &OsStr,
        pass: &mut Pass,
    ) -> Result<Option<Delivery>> {
        Ok(match recorded {
            // The handling metadata was appended to the file; `annotate` returned the
            // signal with it.
            Recorded::Signal(signal) => Some(Delivery {
                held: Held::Claim(signal.path.clone(), None),
                signal,
                pending,
                undo: Undo::Claim(src.to_path_buf()),
            }),
            Recorded::Rejected(rej) => {
                pass.rejected.push(rej);
                None
            }
            Recorded::Gone => None,
            Recorded::Stale(file) => {
                self.put_back(dest, dir, name, file.as_ref())?;
                None
            }
            Recorded::Unsettled(until) => {
                if let Some(back) = self.put_back(dest, dir, name, None)? {
                    pass.note_settling(back, until);
                }
                None
            }
        })
    }

    /// The destination of a claim is taken. When it holds this very signal (the same file
    /// under two links, left by an earlier version's link + unlink, or a copy with the same fields), an earlier claim
    /// was interrupted by a crash before it removed the source durably, so it was never handed
    /// over: redo it, synced (spec §9.6). `None` when the destination holds a different
    /// signal: the claim needs a fresh name.
    fn finish_interrupted(
        &self,
        dir: &Path,
        src: &Path,
        dest: &Path,
        name: &OsStr,
        extra: &Map<String, Value>,
        agent: &str,
    ) -> Result<Option<Recorded>> {
        let (Some(a), Some(b)) = (self.io.stamp(src)?, self.io.stamp(dest)?) else {
            return Ok(Some(Recorded::Gone)); // the source went: another consumer resolved it
        };
        let same_file = (a.dev, a.ino) == (b.dev, b.ino);
        if !same_file && !self.same_signal(src, dest)? {
            return Ok(None);
        }
        if same_file {
            // Two links to one file (left by an earlier version's link + unlink): rename between them is a no-op by
            // POSIX, so drop the source link instead.
            if !self.io.remove(src)? {
                return Ok(Some(Recorded::Gone));
            }
        } else {
            match self.io.rename_replace(src, dest) {
                Ok(()) => {}
                Err(e)
                    if e.io_error()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
                {
                    return Ok(Some(Recorded::Gone));
                }
                Err(e) => return Err(e),
            }
        }
        let recorded = self.annotate(dest, name, extra, agent, None)?;
        self.io.sync_dir(&self.layout.processed)?;
        self.io.sync_dir(dir)?;
        Ok(Some(recorded))
    }

    /// The identity (spec §2.4) of the signal file at `path`, first named `name`, with the
    /// file's stamp; `None` when it is gone or holds no readable signal.
    pub(super) fn identify(
        &self,
        path: &Path,
        name: &OsStr,
    ) -> Result<Option<(String, crate::sys::Stamp)>> {
        let ReadOutcome::Bytes(bytes, stamp) = self.read_signal_file(path)? else {
            return Ok(None);
        };
        let fname = lossy(name);
        Ok(body::read_signal(&bytes, &fname, path)
            .ok()
            .map(|sig| (identity::identity(&fname, &sig.fields, &stamp), stamp)))
    }

    /// True when `a` and `b` are one signal: two links to one file (a move a crash
    /// interrupted: the destination's entry became durable, the source's removal did not), or
    /// two files with one identity (§2.4), which only a file sigbox wrote can have (its name
    /// says which signal it is, whatever handling block either copy carries). Two dropped
    /// files with the same name and content are two signals: never one taken for the other.
    pub(super) fn same_signal(&self, a: &Path, b: &Path) -> Result<bool> {
        match (self.io.stamp(a)?, self.io.stamp(b)?) {
            (Some(x), Some(y)) if (x.dev, x.ino) == (y.dev, y.ino) => return Ok(true),
            (Some(_), Some(_)) => {}
            _ => return Ok(false),
        }
        let id = |p: &Path| -> Result<Option<String>> {
            Ok(self
                .identify(p, p.file_name().unwrap_or_default())?
                .map(|(id, _)| id))
        };
        Ok(match (id(a)?, id(b)?) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        })
    }

    /// Reads the claimed file at `dest`, and appends `extra` (handling metadata) to it, not
    /// synced: the record of who took the signal and when, which no delivery promise rests on
    /// (a power loss may lose it, or leave it torn, which readers ignore: §9.6). When the file
    /// does not hold a valid signal it is quarantined.
    fn annotate(
        &self,
        dest: &Path,
        name: &OsStr,
        extra: &Map<String, Value>,
        agent: &str,
        expected: Option<(u64, i128)>,
    ) -> Result<Recorded> {
        // One read-write descriptor reads the file and then records in it; a file that cannot
        // be opened for writing is read without one (and left unannotated below).
        let (mut read, mut file) = self.read_claimed_signal(dest)?;
        if let ReadOutcome::HardLinked(2) = read
            && self.drop_processed_twin(dest, name)?
        {
            (read, file) = self.read_claimed_signal(dest)?;
        }
        let reason = match read {
            ReadOutcome::Gone => return Ok(Recorded::Gone),
            ReadOutcome::Bytes(bytes, stamp) => {
                // The move took the file the claim was decided on, or another one put under
                // its name since (a name used again), which this pass neither settled nor
                // routed: it goes back.
                if expected.is_some_and(|exp| exp != (stamp.ino, stamp.mtime_ns)) {
                    return Ok(Recorded::Stale(file));
                }
                let fname = lossy(name);
                let format = name::format_of(&fname);
                // A record, not a bare body: after a crash the source may share the inode of an
                // interrupted claim whose handling block was already appended.
                let parsed = body::read_signal_end(&bytes, &fname, dest);
                // A canonical-looking name sigbox did not write settles like a dropped file
                // written in place (spec §2.4).
                let fields = parsed.as_ref().ok().map(|(s, _)| &s.fields);
                let now = std::time::SystemTime::now();
                if let Some(until) =
                    identity::untrusted_settling(&fname, fields, &stamp, self.opts.settle, now)
                {
                    return Ok(Recorded::Unsettled(until));
                }
                match parsed {
                    Ok((mut sig, end)) => {
                        sig.id = identity::identity(&fname, &sig.fields, &stamp);
                        // Appended in place, as upstream does: a claim allocates and frees no
                        // inode (on ext4, creating files right after frees is slow, and that
                        // would slow producers too).
                        let a = body::annotation(&bytes, format, extra, end);
                        let appended = match file {
                            _ if !body::records_whole(&bytes, format, &a) => {
                                tracing::debug!(file = %dest.display(), "no handling record: it would not stay one document");
                                Ok(())
                            }
                            Some(f) => self.io.replace_tail(&f, dest, a.span(&bytes), &a.tail),
                            None => self.io.replace_tail_unsynced(dest, a.span(&bytes), &a.tail),
                        };
                        match appended {
                            Ok(()) => {}
                            // A file dropped with a private mode by another user: the claim
                            // (a rename, which needs only the directories) stands; only the
                            // annotation is lost.
                            Err(e)
                                if e.io_error().is_some_and(crate::sys::is_permission_denied) =>
                            {
                                tracing::warn!(file = %dest.display(), "cannot annotate the claimed file (permission denied); the claim stands");
                            }
                            Err(e) => return Err(e),
                        }
                        // The handling metadata just appended, in the delivered record too.
                        sig.fields.extend(extra.clone());
                        return Ok(Recorded::Signal(sig));
                    }
                    Err(reason) => reason,
                }
            }
            other => other.rejection().unwrap_or_default(),
        };
        // Quarantine the file this claim holds: `dest` may carry a `.dup-` name, and the plain
        // name may be an earlier, valid record that must stay where it is.
        let parent = dest.parent().unwrap_or(&self.layout.processed);
        let held = dest.file_name().unwrap_or(name);
        Ok(match self.quarantine(parent, held, &reason, agent)? {
            Some(rej) => Recorded::Rejected(rej),
            None => Recorded::Gone,
        })
    }

    /// Puts back a file a claim took by mistake (not the one it decided on, or not settled):
    /// to where it was, or, when that name is taken again, beside it under a fresh `.dup-`
    /// name; durably; with `touch`, its mtime set to now right after the move. The next pass
    /// sees it as it is. Returns where it went (`None`: it vanished, or no name was free).
    fn put_back(
        &self,
        claimed: &Path,
        dir: &Path,
        name: &OsStr,
        touch: Option<&File>,
    ) -> Result<Option<PathBuf>> {
        let back = own::with_fresh_names(dir, name, |_, dest| {
            Ok(match self.io.rename_noreplace(claimed, &dest)? {
                crate::io::Renamed::Done => {
                    // The move back changed its ctime, which would make it look renamed in
                    // whole (§5): at once, before anything else, it reads as written now,
                    // and settles.
                    if let Some(f) = touch
                        && let Err(e) = self.io.touch(f, &dest)
                    {
                        tracing::warn!(error = %e, "a file put back may be read before it settles");
                    }
                    Some(Some(dest))
                }
                crate::io::Renamed::SourceGone => Some(None),
                crate::io::Renamed::DestExists => None,
            })
        })?;
        if back.is_none() {
            tracing::warn!(file = %claimed.display(), "cannot put back a file claimed in a race; it stays in flight");
        }
        self.io.sync_dir(dir)?;
        if let Some(slot) = claimed.parent() {
            self.io.sync_dir(slot)?;
        }
        tracing::debug!(file = %claimed.display(), "put back a file used again under a name being claimed");
        Ok(back.flatten())
    }

    /// A claimed file with two links whose other link is `processed/<name>`: a claim straight
    /// into `processed/` (an earlier version's, made by rename or by link + unlink) that a crash
    /// interrupted before it removed the source, so before any hand-over. The `processed/`
    /// link goes, durably (were it to come back, the claim would count as acknowledged), and
    /// the claim proceeds. True when it went.
    fn drop_processed_twin(&self, claimed: &Path, name: &OsStr) -> Result<bool> {
        let twin = self.layout.processed.join(name);
        if claimed.parent() == Some(self.layout.processed.as_path()) {
            return Ok(false);
        }
        let same = match (self.io.stamp(claimed)?, self.io.stamp(&twin)?) {
            (Some(a), Some(b)) => (a.dev, a.ino) == (b.dev, b.ino) && b.kind == EntryKind::File,
            _ => false,
        };
        if same && self.io.remove(&twin)? {
            self.io.sync_dir(&self.layout.processed)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// True when the move of the dropped `item` to `moved` took another file than the one the
    /// scan read (its name used again meanwhile): then it is put back, and settles.
    fn moved_another(&self, moved: &Path, item: &Item) -> Result<bool> {
        let Some(seen) = item.seen else {
            return Ok(false);
        };
        let (read, file) = self.read_claimed_signal(moved)?;
        if matches!(read, ReadOutcome::Bytes(_, st) if (st.ino, st.mtime_ns) == seen) {
            return Ok(false);
        }
        self.put_back(moved, &self.layout.inputs, &item.name, file.as_ref())?;
        Ok(true)
    }

    /// Moves a signal for absent agent `agent` into `buffered/<agent>/` (spec §9.3).
    pub(super) fn buffer(&self, item: &Item, agent: &str, pass: &mut Pass) -> Result<()> {
        let name = item.name.as_os_str();
        // A canonical-looking file sigbox did not write settles first.
        if !self.may_move(&self.layout.inputs, name, pass)? {
            return Ok(());
        }
        let dir = self.layout.buffer_dir(agent);
        self.io.create_dir_durable(&dir)?;
        let src = self.layout.inputs.join(name);
        own::with_fresh_names(&dir, name, |_, dest| {
            match atomic::claim(&self.io, &src, &dest, || Ok(()))? {
                Claimed::Lost => {}
                // Routed on what the scan read: a dropped name used again meanwhile is another
                // file, for whoever it is for; it goes back, and settles.
                Claimed::Won(()) if self.moved_another(&dest, item)? => {}
                Claimed::Won(()) => pass.buffered.push(Buffered {
                    id: self
                        .identify(&dest, name)?
                        .map(|(id, _)| id)
                        .unwrap_or_else(|| name::signal_id(&lossy(name)).to_string()),
                    agent: agent.to_string(),
                }),
                Claimed::DestExists => {
                    if !self.same_signal(&src, &dest)? {
                        return Ok(None);
                    }
                    // A crash interrupted an earlier move of this very signal after the buffer
                    // side became durable: finish it by dropping the source.
                    self.io.remove(&src)?;
                    self.io.sync_dir(&self.layout.inputs)?;
                }
            }
            Ok(Some(()))
        })?;
        Ok(())
    }
}
