//! The Ralph mailbox (spec/mailbox.md): the handle, `open`/`init`, `send` and `gc`. Each part
//! of the protocol has its own file:
//!
//! | file | owns | spec |
//! |---|---|---|
//! | `layout.rs` | directory and file names | §1 |
//! | `options.rs` | the handle's settings | |
//! | `report.rs` | what operations report | §6-§8 |
//! | `scan.rs` | listing, FIFO order, settle window, listing reuse | §2, §4, §5 |
//! | `route.rs` | the routing table, as a pure decision | §6 |
//! | `pass.rs` | a checkpoint pass carrying out the decisions | §6, §9.2 |
//! | `identity.rs` | a signal's identity, as a pure function of its name, body and stamp | §2.4 |
//! | `delivery/` | slots, claims, records, group commit, recovery, buffer moves, redelivery, acks | §9.2, §9.3, §9.6, §9.10 |
//! | `links.rs` | a second link sigbox itself left, resolved | §9.6 |
//! | `broadcast.rs` | acks, archive, finish | §9.4, §9.5 |
//! | `presence.rs` | presence locks | §7 |
//! | `quarantine.rs` | moving invalid files aside | §8 |
//! | `inspect.rs` | read-only views for `ls`, `log`, `doctor` | §3.4 |
//! | `overview.rs` | read-only views for the console | spec/console.md |
//! | `bridge/` | the bridge's side ([`BridgeSide`]): lock, state file, holds, export, import, what waits for other hosts | spec/bridge.md |

mod bridge;
mod broadcast;
mod capped;
mod delivery;
mod identity;
mod inspect;
mod layout;
mod links;
mod options;
mod overview;
mod pass;
mod presence;
mod quarantine;
mod report;
mod route;
mod scan;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};

pub use bridge::{
    BridgeSide, BroadcastsSeen, Imported, Outbound, OutboundPlace, OutboundSignal, Outgoing,
};
pub use layout::LAYOUT;
pub(crate) use layout::Layout;
pub use options::{DEFAULT_QUORUM, MailboxOptions, SHARED_DIR_MODE, SHARED_FILE_MODE};
pub use pass::PassControl;
pub use presence::{PauseLock, Presence};
pub use report::{
    ArchivedBroadcast, Buffered, Finished, Pass, Pending, Problem, ProblemKind, Rejection, Settling,
};

use crate::atomic::{self, Clobber, Placed};
use crate::body;
use crate::clock::{next_micros, ns_of};
use crate::error::{Error, ErrorKind, Result};
use crate::io::Io;
use crate::name;
use crate::name::own;
use crate::signal::{NewSignal, Target};
use crate::sys::EntryKind;
pub(crate) use identity::identity;
use layout::REQUIRED;
use scan::ScanCache;

/// A mailbox handle. Cheap to keep open; safe to share between threads.
pub struct Mailbox {
    layout: Layout,
    opts: MailboxOptions,
    io: Io,
    /// Parsed dropped files and listings proven current (`scan.rs`).
    scans: Mutex<ScanCache>,
    /// Broadcasts this handle knows are acked, per agent and file name, with the inode and
    /// ctime of the file acked: a new file under the name is another broadcast (`broadcast.rs`).
    acked: Mutex<HashMap<(String, OsString), (u64, i128)>>,
    /// Files a watcher saw renamed in (`Mailbox::arrived_whole`), with the inode and mtime the
    /// first scan after that found (`scan.rs`).
    arrivals: Mutex<HashMap<PathBuf, Option<(u64, i128)>>>,
    /// What this handle has in flight, per agent (`delivery/slot.rs`). Held for a whole pass.
    flights: Mutex<HashMap<String, delivery::Flight>>,
    /// How far the filesystem's clock is from this process's, and when that was measured
    /// ([`Mailbox::fs_now`]).
    fs_clock: Mutex<Option<(std::time::Instant, i128)>>,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("root", &self.layout.root)
            .field("opts", &self.opts)
            .finish()
    }
}

/// How often [`Mailbox::fs_now`] measures the filesystem's clock again.
const FS_CLOCK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// A difference between the clocks below which they count as one: file times come from a
/// coarse clock (one scheduler tick, 1 to 10 ms), so a probe reads up to a tick behind.
const FS_CLOCK_SLACK: std::time::Duration = std::time::Duration::from_millis(100);

/// The filesystem's clock minus this process's, by a probe of the directory `tmp`
/// ([`Mailbox::fs_now`]); 0 within [`FS_CLOCK_SLACK`] or where no probe can be made.
pub(crate) fn measure_fs_skew(io: &Io, tmp: &Path) -> i128 {
    let before = ns_of(SystemTime::now());
    match io.fs_time_ns(tmp) {
        Ok(fs) => {
            let after = ns_of(SystemTime::now());
            let s = fs - (before + after) / 2;
            if s.abs() < FS_CLOCK_SLACK.as_nanos() as i128 {
                0
            } else {
                s
            }
        }
        Err(_) => 0,
    }
}

/// Bytes a sent signal leaves free under the file cap for the handling blocks appended to it
/// (each is about 150 bytes: the claim's and a few redeliveries').
const HANDLING_ROOM: u64 = 4096;

fn lossy(name: &OsStr) -> String {
    name.to_string_lossy().into_owned()
}

impl MailboxOptions {
    /// Opens an existing mailbox at `root`.
    pub fn open(&self, root: impl AsRef<Path>) -> Result<Mailbox> {
        let mb = Mailbox::new(root.as_ref(), self.clone());
        if let Err(e) = mb.io.set_root(root.as_ref()) {
            if e.io_error()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            {
                return Err(Error::new(
                    ErrorKind::NotInitialized,
                    Some(&mb.layout.inputs),
                    "missing: not a sigbox mailbox (run `sigbox init`)",
                ));
            }
            return Err(e);
        }
        // Every layout directory there is must be a real one: a symlink or a file in its place
        // is refused by name, and nothing below it is touched.
        for dir in LAYOUT {
            let p = mb.layout.root.join(dir);
            match mb.io.stamp(&p)? {
                None if REQUIRED.contains(&dir) => {
                    return Err(Error::new(
                        ErrorKind::NotInitialized,
                        Some(&p),
                        "missing: not a sigbox mailbox (run `sigbox init`)",
                    ));
                }
                Some(s) if s.kind != EntryKind::Dir => {
                    return Err(crate::io::refused_dir(&p, s.kind.describe()));
                }
                _ => {}
            }
        }
        Ok(mb)
    }

    /// Creates the layout at `root` where it is missing (idempotent), then opens it.
    ///
    /// **Durability:** every directory created is fsynced, then its parent.
    pub fn init(&self, root: impl AsRef<Path>) -> Result<Mailbox> {
        let mut mb = Mailbox::new(root.as_ref(), self.clone());
        if self.shared {
            mb.io.set_shared(SHARED_DIR_MODE, SHARED_FILE_MODE);
        }
        mb.io.create_dir_all_synced(&mb.layout.root, None)?;
        mb.io.set_root(root.as_ref())?;
        // Each new directory's own entries first, then the root's entries, once.
        let mut created = false;
        for sub in LAYOUT {
            let dir = mb.layout.root.join(sub);
            if mb.io.create_dir(&dir)? {
                mb.io.sync_dir(&dir)?;
                created = true;
            }
        }
        if created {
            mb.io.sync_dir(&mb.layout.root)?;
        }
        Ok(mb)
    }
}

impl Mailbox {
    /// Opens an existing mailbox with default options.
    pub fn open(root: impl AsRef<Path>) -> Result<Mailbox> {
        MailboxOptions::new().open(root)
    }

    /// Creates (idempotently) and opens a mailbox with default options.
    pub fn init(root: impl AsRef<Path>) -> Result<Mailbox> {
        MailboxOptions::new().init(root)
    }

    /// When the root's path leads to another directory than the one this handle opened (the
    /// root was moved and made again), opens the new one and forgets what it knew of the old:
    /// kept listings, acks, and its claims in flight, which stay in the old root's slots.
    fn follow_root(&self) -> Result<()> {
        if self.io.refresh_root()? {
            tracing::info!(root = %self.layout.root.display(), "the root was replaced: following it");
            self.flights
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
            *self.scans.lock().unwrap_or_else(|p| p.into_inner()) = ScanCache::default();
            self.acked.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        Ok(())
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.layout.root
    }

    /// The orchestrator's agent name.
    pub fn orchestrator(&self) -> &str {
        &self.opts.orchestrator
    }

    /// The handle's filesystem seam, for what lives beside the mailbox (`asks/`).
    pub(crate) fn io(&self) -> &Io {
        &self.io
    }

    fn new(root: &Path, mut opts: MailboxOptions) -> Mailbox {
        if opts.reuse_listings && crate::sys::is_remote_fs(root) {
            opts.reuse_listings = false;
        }
        let layout = Layout::new(root);
        let mut io = Io::new(&opts.io);
        if crate::sys::is_shared_dir(root) {
            io.set_shared(SHARED_DIR_MODE, SHARED_FILE_MODE);
        }
        // Where `RENAME_NOREPLACE` is refused, every no-clobber rename in the mailbox holds
        // this one lock (spec/mailbox.md §9.9).
        io.set_rename_lock(layout.tmp.clone());
        Mailbox {
            layout,
            opts,
            io,
            scans: Mutex::new(ScanCache::default()),
            acked: Mutex::new(HashMap::new()),
            arrivals: Mutex::new(HashMap::new()),
            flights: Mutex::new(HashMap::new()),
            fs_clock: Mutex::new(None),
        }
    }

    /// Now, by the filesystem's clock (spec/mailbox.md §5, "Clocks"): this process's clock
    /// corrected by how far the filesystem's runs from it, measured by a probe at most every
    /// [`FS_CLOCK_EVERY`] (the times `utimensat(UTIME_NOW)` gives `tmp/` are the filesystem's:
    /// the kernel's, or an NFS server's). The settle window and the reuse of a listing compare
    /// a file's times with this, never with the reader's own clock, so that a reader whose
    /// clock runs ahead (an NFS client ahead of its server, a container with a skewed clock)
    /// never reads a half-written file as settled, and one behind never holds a file for the
    /// length of the skew. A difference under [`FS_CLOCK_SLACK`] (the coarse clock file times
    /// come from) counts as none; where the probe cannot be made (a read-only root), none.
    pub(crate) fn fs_now(&self) -> SystemTime {
        let now = SystemTime::now();
        let skew = self.fs_skew_ns();
        match skew {
            0 => now,
            s if s > 0 => now + std::time::Duration::from_nanos(s as u64),
            s => now - std::time::Duration::from_nanos(s.unsigned_abs() as u64),
        }
    }

    /// The filesystem's clock minus this process's, in nanoseconds (see [`Mailbox::fs_now`]).
    pub(crate) fn fs_skew_ns(&self) -> i128 {
        let mut clock = self.fs_clock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, skew)) = *clock
            && at.elapsed() < FS_CLOCK_EVERY
        {
            return skew;
        }
        let skew = measure_fs_skew(&self.io, &self.layout.tmp);
        *clock = Some((std::time::Instant::now(), skew));
        skew
    }

    /// The drop zone, `inputs/`.
    pub fn inputs_dir(&self) -> &Path {
        &self.layout.inputs
    }

    /// An agent's durable buffer directory (it may not exist yet).
    pub fn buffer_dir(&self, agent: &str) -> PathBuf {
        self.layout.buffer_dir(agent)
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &MailboxOptions {
        &self.opts
    }

    /// True after a failed fsync: the handle refuses writes from then on.
    pub fn is_poisoned(&self) -> bool {
        self.io.is_poisoned()
    }

    /// True when the filesystem under the root delivers change events that a waiter can rely
    /// on; false on network and FUSE filesystems, where waiting must poll.
    pub fn events_reliable(&self) -> bool {
        !crate::sys::is_remote_fs(&self.layout.root)
    }

    /// True when claims here move by link (spec/mailbox.md §9.10: ext2, ext3 or ext4 without
    /// a journal, or as forced by [`MailboxOptions::link_claims`]): there a rename between
    /// two directories is not committed whole, and writes that must survive a power loss in
    /// order (a bridge's imports, spec/bridge.md §4) make each name durable before the next.
    pub fn claims_by_link(&self) -> bool {
        self.io.link_claims()
    }

    /// The directories a waiter for `agent` must watch: `inputs/` and the buffers.
    pub fn watch_dirs(&self) -> [&Path; 2] {
        [&self.layout.inputs, &self.layout.buffered]
    }

    /// True when `agent` is the orchestrator.
    pub fn is_orchestrator(&self, agent: &str) -> bool {
        agent == self.opts.orchestrator
    }

    fn check_agent(&self, agent: &str) -> Result<()> {
        match crate::signal::agent_name_problem(agent) {
            None => Ok(()),
            Some(why) => Err(Error::new(
                ErrorKind::InvalidName,
                Some(&self.layout.agents),
                format!(
                    "invalid agent name {}: {why}",
                    crate::signal::quoted_name(agent)
                ),
            )),
        }
    }

    /// Sends a signal and returns its id.
    ///
    /// **Durability:** in durable mode the signal survives a crash or power loss once this
    /// returns: the file is written and fsynced under a staging name in `inputs/` itself (a
    /// dot-file every reader skips), renamed to its canonical name there without replacing
    /// anything, and `inputs/` is fsynced. Readers never see a partial file.
    ///
    /// Refused, with nothing written: a target that is not an agent's name, a sender that
    /// is not text on one line ([`valid_sender`](crate::valid_sender)), a signal over the
    /// size cap.
    pub fn send(&self, s: &NewSignal) -> Result<String> {
        if let Target::Agent(a) = &s.target {
            self.check_agent(a)?;
            // Sent as upstream allows, but said: whatever its target, only the orchestrator
            // takes an APPROVE or a SKIP, and only in an approval state (spec/mailbox.md §6).
            if matches!(
                s.signal_type,
                crate::signal::SignalType::Approve | crate::signal::SignalType::Skip
            ) && !self.is_orchestrator(a)
            {
                tracing::warn!(
                    "{} --target {a}: only the orchestrator takes {}, in an approval state, \
                     whatever the target; {a} never receives it",
                    s.signal_type.as_str(),
                    s.signal_type.as_str()
                );
            }
        }
        if let Some(f) = &s.from
            && !crate::signal::valid_sender(f)
        {
            return Err(Error::new(
                ErrorKind::InvalidName,
                None,
                format!(
                    "sender {f:?}: the sender's name must be non-empty text on one line, \
                     without control characters"
                ),
            ));
        }
        let micros = next_micros();
        let at = DateTime::from_timestamp_micros(micros).unwrap_or_else(Utc::now);
        let unique = uuid::Uuid::now_v7().simple().to_string();
        let type_name = s.signal_type.as_str();
        let file = name::canonical_name(at, &unique, type_name, &s.target);
        let id = name::signal_id(&file).to_string();
        let bytes = body::canonical_bytes(s, &id, at);
        // What no consumer would take is refused here, not quarantined later: the file with
        // room for the handling blocks a claim and its redeliveries append must fit the cap.
        if bytes.len() as u64 + HANDLING_ROOM > self.opts.max_file_size {
            return Err(Error::new(
                ErrorKind::TooLarge,
                None,
                format!(
                    "the signal would be {} bytes; with room for its handling record a signal \
                     must stay under {} bytes (send a path to a file instead of its content)",
                    bytes.len(),
                    self.opts.max_file_size - HANDLING_ROOM
                ),
            ));
        }
        let dest = self.layout.inputs.join(&file);
        let stage = own::stage_name_from(&self.layout.inputs, &unique, "send");
        match atomic::write_atomic(&self.io, &stage, &dest, &bytes, Clobber::No)? {
            Placed::Done => {
                tracing::debug!(%id, "sent");
                Ok(id)
            }
            Placed::Exists => Err(Error::new(
                ErrorKind::Io,
                Some(&dest),
                "a file with this unique name already exists",
            )),
        }
    }

    /// [`gc`](Self::gc) of a source a claim by link moved aside in the buffer `dir` (§9.10):
    /// removed while it is a second link of a file that went on from there; quarantined,
    /// kept whole, when it is alone (a file that took the claimed name) or linked only
    /// elsewhere (planted by hand: claims by link take no file with two links, and the other
    /// name may lead outside the root). True when removed: a quarantine is no removal
    /// (`ls --all` lists it in rejected/).
    fn gc_buffer_twin(&self, dir: &Path, twin: &OsStr) -> Result<bool> {
        let p = dir.join(twin);
        let Some(st) = self.io.stamp(&p)? else {
            return Ok(false);
        };
        if st.nlink >= 2 && !self.linked_in_its_buffer_or_after(dir, &st)? {
            let reason = format!(
                "a file moved aside by a claim that was interrupted (as {}), whose other name \
                 is nowhere in the root a signal is kept: it may lead outside the root",
                lossy(twin)
            );
            self.quarantine_claim_twin(dir, twin, &reason, "gc")?;
            return Ok(false);
        }
        self.clear_claim_twin(dir, twin, "gc")?;
        Ok(st.nlink >= 2 && self.io.stamp(&p)?.is_none())
    }

    /// True when the file with stamp `st` (a source moved aside in the buffer `buffer`) has a
    /// name where a signal goes on from a buffer: the buffer itself, its agent's claim slots,
    /// or `processed/`.
    fn linked_in_its_buffer_or_after(&self, buffer: &Path, st: &crate::sys::Stamp) -> Result<bool> {
        let mut dirs = vec![buffer.to_path_buf(), self.layout.processed.clone()];
        if let Some(agent) = buffer.file_name().and_then(|a| a.to_str()) {
            dirs.extend(self.slots(agent)?.into_iter().map(|(_, d)| d));
        }
        for d in dirs {
            for e in self.io.list(&d, true)? {
                if e.kind != EntryKind::File || own::is_stage_name(&e.name) {
                    continue;
                }
                if self
                    .io
                    .stamp(&d.join(&e.name))?
                    .is_some_and(|o| (o.dev, o.ino) == (st.dev, st.ino))
                {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Removes staging files older than `age` that crashed writers left, at most `limit` per
    /// call: everything in `tmp/`, and sigbox's own staging names (`.<pid>.<hex>.<hint>.tmp`)
    /// in `inputs/`, `processed/`, `rejected/`, the ack directories, the buffers, the claim
    /// slots and a bridge's directories. A staging name whose writer (its pid) still runs on
    /// this host is never removed, whatever its age: it is a write in progress
    /// (`spec/mailbox.md` §9.7). Returns how many were removed. On ext4 without a journal,
    /// file creation slows down for minutes after many inodes are freed (`spec/mailbox.md`
    /// §9.7): spread large clean-ups over time.
    pub fn gc(&self, age: Duration, limit: usize) -> Result<usize> {
        let now = ns_of(self.fs_now());
        let stale = |p: &Path| -> Result<bool> {
            Ok(self.io.stamp(p)?.is_some_and(|st| {
                matches!(st.kind, EntryKind::File | EntryKind::Symlink)
                    && now - st.changed_ns() >= age.as_nanos() as i128
            }))
        };
        // Everything in tmp/ (where earlier versions staged); elsewhere, only sigbox's own
        // staging names, never another writer's write in progress.
        let mut dirs = vec![(self.layout.tmp.clone(), false)];
        dirs.push((self.layout.inputs.clone(), true));
        // An archive by link's moved-aside source (§9.10), still a second link of its record.
        dirs.push((self.layout.processed.clone(), true));
        dirs.push((self.layout.rejected.clone(), true));
        dirs.push((self.layout.agents.clone(), true));
        // A bridge's directories (spec/bridge.md §7): its state and markers staged there.
        for d in [
            &self.layout.bridge,
            &self.layout.outbox,
            &self.layout.sent,
            &self.layout.broadcasts,
            &self.layout.hold,
        ] {
            dirs.push((d.clone(), true));
        }
        for e in self.io.list(&self.layout.acks, true)? {
            if e.kind == EntryKind::Dir {
                dirs.push((self.layout.acks.join(&e.name), true));
            }
        }
        // Buffers: a source a claim by link moved aside there (the orchestrator's move,
        // spec/mailbox.md §9.10) whose file has gone on since, or alone (quarantined).
        for e in self.io.list(&self.layout.buffered, true)? {
            if e.kind == EntryKind::Dir {
                dirs.push((self.layout.buffered.join(&e.name), true));
            }
        }
        // Claim slots: a marker's rewrite staged there by a process that died.
        for agent in self.io.list(&self.layout.claimed, true)? {
            if agent.kind != EntryKind::Dir {
                continue;
            }
            let base = self.layout.claimed.join(&agent.name);
            for slot in self.io.list(&base, true)? {
                if slot.kind == EntryKind::Dir {
                    dirs.push((base.join(&slot.name), true));
                }
            }
        }
        let mut removed = 0;
        for (dir, only_stages) in dirs {
            let mut here = 0;
            for e in self.io.list(&dir, true)? {
                if removed + here >= limit {
                    break;
                }
                // Outside tmp/, only regular files with sigbox's own staging names.
                if only_stages && (e.kind != EntryKind::File || !own::is_stage_name(&e.name)) {
                    continue;
                }
                // A stage whose writer still runs is a write in progress, however old (a
                // writer stopped in a debugger, a disk that stalls): never stale.
                if atomic::stage_writer_alive(&e.name) {
                    continue;
                }
                let p = dir.join(&e.name);
                // A source a claim by link moved aside (§9.10) goes only as a second link: alone,
                // it is a file that took a claimed name, quarantined by the slot's next owner.
                let twin = own::is_claim_twin(&e.name);
                // In a buffer no owner comes for it: alone, it is quarantined here, kept whole.
                if twin && dir.parent() == Some(self.layout.buffered.as_path()) {
                    if stale(&p)? && self.gc_buffer_twin(&dir, &e.name)? {
                        here += 1;
                    }
                    continue;
                }
                if stale(&p)?
                    && if twin {
                        self.io.remove_second_link(&p)?
                    } else {
                        self.io.remove_emptied(&p)?
                    }
                {
                    here += 1;
                }
            }
            if here > 0 {
                self.io.sync_dir(&dir)?;
            }
            removed += here;
        }
        Ok(removed)
    }
}
