//! The group commit (spec/mailbox.md §9.2, §9.10): the claims of a pass not yet durable and
//! its deliveries in order, made durable together (the slot, then each source directory), the
//! claims by link decided there, and deliveries taken back when they cannot be handed over.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::record::Recorded;
use super::{Delivery, Held, Undo};
use crate::atomic::{self};
use crate::error::Result;
use crate::mailbox::Mailbox;
use crate::mailbox::report::{Rejection, Settling};

/// The claims of a pass not yet durable, and the pass's deliveries in order.
pub(in crate::mailbox) struct Batch {
    /// Claims per commit.
    pub(super) group: usize,
    /// The slot the claims go to, fsynced first at the commit.
    pub(super) dest: Option<PathBuf>,
    /// Directories to fsync after the slot, in order: the claims' source directories, with
    /// `inputs/` before any buffer (spec/mailbox.md §9.2).
    pub(super) dirs: Vec<PathBuf>,
    /// The directories the commit fsyncs, opened before the first claim that needs each, so
    /// that a commit never needs a new descriptor (the slot and the source directories).
    /// Held ([`crate::io::Io::hold_dir`]) until the commit: the group's claims, records and
    /// decisions go through them, with one lookup beneath the root per group, not per claim.
    pub(super) open_dirs: Vec<(PathBuf, Arc<File>)>,
    /// Claims since the last commit.
    pub(super) claims: usize,
    /// Deliveries in FIFO order, and claims by link not yet decided.
    pub(super) deliveries: Vec<Entry>,
    /// How many of `deliveries` are known durable (a prefix: a commit that succeeds makes all
    /// durable).
    pub(super) durable: usize,
    /// Files a commit found invalid (claims by link are read at the commit) and quarantined.
    pub(in crate::mailbox) rejected: Vec<Rejection>,
    /// The files a commit put back to settle, and when each is to be looked at again.
    pub(super) settling: Vec<Settling>,
}

/// One place in a batch's FIFO order. Deliveries are the common entry and stay unboxed.
#[allow(clippy::large_enum_variant)]
pub(super) enum Entry {
    /// A delivery made (durable or not yet).
    Made(Delivery),
    /// A claim by link (spec/mailbox.md §9.10) whose link waits for the commit's fsync of the
    /// slot; the commit then removes the source and reads and records the claim.
    Linked(Box<LinkedClaim>),
}

/// What a commit needs to finish a claim by link.
pub(super) struct LinkedClaim {
    pub(super) dest: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) name: std::ffi::OsString,
    pub(super) extra: Map<String, Value>,
    pub(super) agent: String,
    pub(super) expected: Option<(u64, i128)>,
    pub(super) ino: u64,
}

impl Batch {
    /// An empty batch that commits every `group` claims.
    pub(in crate::mailbox) fn new(group: usize) -> Batch {
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

    /// True before the group's first claim: nothing is held yet.
    pub(super) fn starts_group(&self) -> bool {
        self.open_dirs.is_empty()
    }

    /// Holds `dir`, opened as [`Batch::open_dir`] opens it, for the group.
    pub(super) fn hold(&mut self, dir: &Path, f: Arc<File>) {
        self.open_dirs.push((dir.to_path_buf(), f));
    }

    /// Opens `dir` for the commit unless it is open already.
    pub(super) fn open_dir(&mut self, io: &crate::io::Io, dir: &Path) -> Result<()> {
        if !self.open_dirs.iter().any(|(p, _)| p == dir) {
            let f = io.hold_dir(dir)?;
            self.open_dirs.push((dir.to_path_buf(), f));
        }
        Ok(())
    }

    pub(super) fn dir_file(&self, dir: &Path) -> &File {
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
    pub(super) fn note_source(&mut self, inputs: &Path, dir: &Path) {
        if dir != inputs && !self.dirs.iter().any(|d| d == inputs) {
            self.dirs.push(inputs.to_path_buf());
        }
        if !self.dirs.iter().any(|d| d == dir) {
            self.dirs.push(dir.to_path_buf());
        }
    }

    /// Adds a delivery, in FIFO order.
    pub(in crate::mailbox) fn push(&mut self, d: Delivery) {
        self.deliveries.push(Entry::Made(d));
    }

    /// True when the last entry is a claim by link, decided at the commit.
    pub(in crate::mailbox) fn ends_linked(&self) -> bool {
        matches!(self.deliveries.last(), Some(Entry::Linked(_)))
    }

    /// True when the batch holds as many uncommitted claims as one commit takes.
    pub(in crate::mailbox) fn is_full(&self) -> bool {
        self.claims >= self.group
    }

    /// Takes the deliveries that are durable, in FIFO order: what may be handed over now.
    pub(in crate::mailbox) fn take_durable(&mut self) -> Vec<Delivery> {
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
    pub(in crate::mailbox) fn len(&self) -> usize {
        self.deliveries.len()
    }
}

impl Mailbox {
    /// Makes the batch's claims durable (group commit): fsync the slot, then each directory of
    /// `batch.dirs` in order (`inputs/` before a buffer). A claim is durable once its source
    /// directory is synced: when the commit then fails on another directory, the claims
    /// already durable are still handed over. The claimed files themselves are not synced:
    /// their content was durable when they were sent, and the handling block appended since
    /// is a record, not a promise (spec/mailbox.md §9.2).
    pub(in crate::mailbox) fn commit(&self, batch: &mut Batch) -> Result<()> {
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
        // The next group looks its directories up beneath the root again; nothing stays held
        // while the group is handed over.
        batch.open_dirs.clear();
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
    pub(super) fn decide_links(&self, batch: &mut Batch) -> Result<()> {
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
    pub(super) fn decide_link(
        &self,
        l: &LinkedClaim,
        batch: &mut Batch,
    ) -> Result<Option<Delivery>> {
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
    /// each claimed file goes back where it was (no-clobber), each ack is removed durably and
    /// then its marker, and the directories are synced (the sources first, then the slots), so
    /// that a later pass delivers them again; a redelivery stays in its slot, and so does a
    /// broadcast archived meanwhile (its ack counted). Returns how many could not be taken
    /// back (left as they are, with a warning: claimed, recorded in `processed/`, not
    /// delivered), and how many stay in flight by design (to come again, marked).
    pub(in crate::mailbox) fn undo(&self, deliveries: Vec<Delivery>) -> Result<TakenBack> {
        let mut stuck = 0;
        let mut kept = 0;
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
                    // Under the lock an archive of the broadcast reads its acks under: one
                    // that counted this ack has moved the broadcast out of `inputs/` by now,
                    // and the ack and marker then stay (the agent's next pass delivers it
                    // again, marked, from `processed/`): removed, it would be lost.
                    // Held by a stopped process (§9.11): kept, as when archived (ack and
                    // marker stay; the next pass delivers it again, marked).
                    let decided = match ack.parent() {
                        Some(dir) => self.io.wait_lock_dir(dir)?,
                        None => crate::io::DirLock::Gone,
                    };
                    if !decided.had() || self.io.stamp(&d.signal.path)?.is_none() {
                        kept += 1;
                        continue;
                    }
                    // The ack's removal is durable before the marker is touched: a marker
                    // found emptied or gone after a crash then never stands beside an ack
                    // (which would read as handed over and acknowledged), and a marker left
                    // beside an ack emptied by the first step is delivered again, marked.
                    let removed = self.io.remove_owned(ack)?;
                    self.io.remove_emptied(marker)?;
                    note(&mut slots, marker);
                    removed
                }
                Undo::Keep => {
                    kept += 1;
                    continue;
                }
            };
            if !done {
                stuck += 1;
                tracing::warn!(file = %d.signal.path.display(), "cannot take back a delivery that was not handed over");
            }
        }
        for dir in dirs.iter().chain(&slots) {
            self.io.sync_dir(dir)?;
        }
        Ok(TakenBack { stuck, kept })
    }
}

/// What [`Mailbox::undo`] could not take back.
pub(in crate::mailbox) struct TakenBack {
    /// Left as they were, with a warning: claimed and not delivered.
    pub(in crate::mailbox) stuck: usize,
    /// In flight by design: the agent's next pass delivers them again, marked (a redelivery,
    /// a broadcast archived meanwhile).
    pub(in crate::mailbox) kept: usize,
}
