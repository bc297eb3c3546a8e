//! The Ralph mailbox: send, FIFO listing, and the checkpoint pass that routes every signal.
//!
//! See `spec/mailbox.md` for the protocol this implements, including the order of syscalls.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};

use crate::body::{self, Archived, Handled};
use crate::clock::{self, DEFAULT_MAX_FILE_SIZE, Precision, next_micros, ns_of};
use serde_json::{Map, Value, json};

use crate::atomic::{self, Claimed, Clobber, Placed};
use crate::body::Body;
use crate::error::{Error, ErrorKind, Result};
use crate::io::{Durability, FsHook, Io, IoOptions, ReadOutcome};
use crate::name::{self, Format, NameKind};
use crate::signal::{NewSignal, Signal, SignalType, Target};
use crate::sys::EntryKind;
use crate::sys::Stamp;

/// The directories of a mailbox root, in the order `init` creates them.
pub const LAYOUT: [&str; 7] = [
    "inputs",
    "processed",
    "acks",
    "buffered",
    "rejected",
    "tmp",
    "agents",
];

/// The default broadcast quorum (the Librarian is episodic and not part of it).
pub const DEFAULT_QUORUM: [&str; 5] = [
    "Orchestrator",
    "Executor",
    "Planner",
    "Questioner",
    "Reviewer",
];

/// Settings of a mailbox handle. Every setter names its default.
#[derive(Clone)]
pub struct MailboxOptions {
    settle: Duration,
    max_file_size: u64,
    quorum: Vec<String>,
    approval_states: Vec<String>,
    orchestrator: String,
    io: IoOptions,
    shared: bool,
    reuse_listings: bool,
}

/// Directory mode of a shared mailbox: group read/write/enter, setgid (files keep the root's
/// group), nothing for others.
pub const SHARED_DIR_MODE: u32 = 0o2770;
/// File mode of a shared mailbox.
pub const SHARED_FILE_MODE: u32 = 0o660;

impl Default for MailboxOptions {
    fn default() -> Self {
        MailboxOptions {
            settle: Duration::from_secs(2),
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            quorum: DEFAULT_QUORUM.iter().map(|s| s.to_string()).collect(),
            approval_states: vec!["KNOWLEDGE_APPROVAL".to_string()],
            orchestrator: "Orchestrator".to_string(),
            io: IoOptions::new(),
            shared: false,
            reuse_listings: true,
        }
    }
}

impl std::fmt::Debug for MailboxOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailboxOptions")
            .field("settle", &self.settle)
            .field("max_file_size", &self.max_file_size)
            .field("quorum", &self.quorum)
            .field("approval_states", &self.approval_states)
            .field("orchestrator", &self.orchestrator)
            .field("io", &self.io)
            .field("shared", &self.shared)
            .field("reuse_listings", &self.reuse_listings)
            .finish()
    }
}

impl MailboxOptions {
    /// Default options.
    pub fn new() -> MailboxOptions {
        MailboxOptions::default()
    }

    /// How long a dropped (non-canonical) file must stay unchanged before it is read: a file
    /// still being written is never delivered half-way, and one that does not parse is
    /// quarantined only after this window. Default: 2 s.
    pub fn settle(&mut self, d: Duration) -> &mut Self {
        self.settle = d;
        self
    }

    /// Files larger than this are quarantined unread. Default: 1 MiB.
    pub fn max_file_size(&mut self, bytes: u64) -> &mut Self {
        self.max_file_size = bytes;
        self
    }

    /// The agents whose acks archive a broadcast. Default: Orchestrator, Executor, Planner,
    /// Questioner, Reviewer.
    pub fn quorum<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, agents: I) -> &mut Self {
        self.quorum = agents.into_iter().map(Into::into).collect();
        self
    }

    /// The orchestrator states in which APPROVE and SKIP are delivered. Default:
    /// `KNOWLEDGE_APPROVAL`.
    pub fn approval_states<I: IntoIterator<Item = S>, S: Into<String>>(
        &mut self,
        states: I,
    ) -> &mut Self {
        self.approval_states = states.into_iter().map(Into::into).collect();
        self
    }

    /// The orchestrator's agent name. Default: `Orchestrator`.
    pub fn orchestrator(&mut self, name: impl Into<String>) -> &mut Self {
        self.orchestrator = name.into();
        self
    }

    /// fsync or not. Default: [`Durability::Durable`].
    pub fn durability(&mut self, d: Durability) -> &mut Self {
        self.io.durability(d);
        self
    }

    /// Observes every filesystem effect; for fault-injection tests. Default: none.
    pub fn hook(&mut self, hook: Arc<dyn FsHook>) -> &mut Self {
        self.io.hook(hook);
        self
    }

    /// Sets durability and hook at once, as [`crate::goblin::Goblin::open_with`] and
    /// [`crate::mux::write_signal_with`] take them. Default: durable, no hook.
    pub fn io(&mut self, io: IoOptions) -> &mut Self {
        self.io = io;
        self
    }

    /// With `init`: create a shared layout: directories `2770` (group members read, write and
    /// enter; setgid so every file keeps the root's group; others nothing), set explicitly
    /// whatever the umask. Existing directories are never changed. Default: off (the umask
    /// decides). A root that is setgid and group-writable is treated as shared when opened:
    /// what sigbox creates in it is group-writable.
    pub fn shared(&mut self, shared: bool) -> &mut Self {
        self.shared = shared;
        self
    }

    /// Reuse a directory listing while the directory's `lstat` stamp proves it current (see
    /// `spec/mailbox.md` §5.1). Always off on network and FUSE filesystems, whose attribute
    /// caches can serve a stale directory timestamp. Default: on.
    pub fn reuse_listings(&mut self, reuse: bool) -> &mut Self {
        self.reuse_listings = reuse;
        self
    }

    /// Opens an existing mailbox at `root`.
    pub fn open(&self, root: impl AsRef<Path>) -> Result<Mailbox> {
        let mb = Mailbox::new(root.as_ref(), self.clone());
        for dir in ["inputs", "processed", "tmp"] {
            let p = mb.root.join(dir);
            if !p.is_dir() {
                return Err(Error::new(
                    ErrorKind::NotInitialized,
                    Some(&p),
                    "missing: not a sigbox mailbox (run `sigbox init`)",
                ));
            }
        }
        Ok(mb)
    }

    /// Creates the layout at `root` where it is missing (idempotent), then opens it.
    ///
    /// **Durability:** every directory created is fsynced into its parent.
    pub fn init(&self, root: impl AsRef<Path>) -> Result<Mailbox> {
        let mut mb = Mailbox::new(root.as_ref(), self.clone());
        if self.shared {
            mb.io.set_shared(SHARED_DIR_MODE, SHARED_FILE_MODE);
        }
        mb.io.create_dir_all_synced(&mb.root, None)?;
        let mut created = false;
        for sub in LAYOUT {
            created |= mb.io.create_dir(&mb.root.join(sub))?;
        }
        if created {
            mb.io.sync_dir(&mb.root)?;
        }
        Ok(mb)
    }
}

/// Where a pending file lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Inputs,
    Buffer,
}

/// A routable file found by a scan.
#[derive(Clone, Debug)]
struct Item {
    name: OsString,
    source: Source,
    instant: i128,
    type_name: String,
    signal_type: Option<SignalType>,
    target: Target,
}

/// Who is running a pass, and what that allows.
struct Route<'a> {
    agent: &'a str,
    own: &'a Path,
    is_orch: bool,
    approval: bool,
}

/// What a scan found besides routable items.
#[derive(Clone, Debug, Default)]
struct Scan {
    items: Vec<Item>,
    rejects: Vec<(OsString, Source, String)>,
    next_check: Option<SystemTime>,
    settling: Vec<OsString>,
    /// A dropped (non-canonical) file was seen: its content can change in place without the
    /// directory changing, so this listing is never reused.
    foreign: bool,
}

/// Claims per group commit: a pass makes its claims durable together, at most this many at a
/// time (each keeps its file open until the commit).
const GROUP_COMMIT: usize = 64;

/// The claims of a pass not yet durable, and the pass's deliveries in order.
#[derive(Default)]
struct Batch {
    /// Appended handling blocks, to fdatasync.
    files: Vec<(PathBuf, File)>,
    /// Directories to fsync after `processed/`, in order: the claims' source directories,
    /// with `inputs/` before any buffer (spec/mailbox.md §9.2).
    dirs: Vec<PathBuf>,
    /// Claims since the last commit.
    claims: usize,
    /// Claims ever added (never reset): whether a claim joined the batch or was made durable
    /// on its own (finishing an interrupted claim).
    added: usize,
    /// Deliveries in FIFO order, each with the source directory of its claim while that claim
    /// is not durable yet (`None`: durable).
    signals: Vec<(Signal, Option<PathBuf>)>,
    /// How many of `signals` are known durable (a prefix: a commit that succeeds makes all
    /// durable).
    durable: usize,
}

/// A listing kept because the directory's stamp proves it current.
#[derive(Clone, Debug)]
struct Listing {
    stamp: Stamp,
    scan: Scan,
}

/// How much older than the listing the directory's last change must be for the listing to be
/// kept. Directory timestamps come from a coarse clock (a scheduler tick: 1 to 10 ms), so a
/// change made after the listing, within the same tick as an earlier change, could leave the
/// timestamp as it was. With this margin, any later change gets a later timestamp (git's
/// "racy index" rule).
const RACY_MARGIN_NS: i128 = 50_000_000;
/// The margin where timestamps look like whole seconds (filesystems with coarse timestamps).
const RACY_MARGIN_COARSE_NS: i128 = 2_000_000_000;

/// A dropped file's parse result: its body instant and body, or the reason it is invalid.
type Peeked = std::result::Result<(Option<i128>, Body), String>;

#[derive(Default)]
struct Cache {
    /// Parsed foreign files, valid while the file's stamp is unchanged.
    peeks: HashMap<OsString, (Stamp, Peeked)>,
    /// Broadcasts this handle knows are acked, per agent.
    acked: HashSet<(String, OsString)>,
    /// Listings proven current, per directory and agent.
    listings: HashMap<(PathBuf, String), Listing>,
}

/// A file that a pass moved to `rejected/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The file's name as it was in the drop zone (lossy for non-UTF-8 names).
    pub name: String,
    /// Where it is now.
    pub path: PathBuf,
    /// Why it can never be delivered.
    pub reason: String,
}

/// What one checkpoint pass did.
#[non_exhaustive]
#[derive(Debug, Default)]
pub struct Pass {
    /// Signals delivered to the agent, oldest first.
    pub delivered: Vec<Signal>,
    /// `(signal id, agent)` for signals the orchestrator moved to an absent agent's buffer.
    pub buffered: Vec<(String, String)>,
    /// Broadcasts the orchestrator archived because the quorum had acked.
    pub archived: Vec<String>,
    /// Files moved to quarantine.
    pub rejected: Vec<Rejection>,
    /// True when the pass stopped early after a PAUSE or ABORT.
    pub stopped: bool,
    /// When a dropped file that is still settling becomes eligible: check again then.
    pub next_check: Option<SystemTime>,
    /// Set when the pass stopped early because of this error *after* delivering signals: the
    /// signals in `delivered` are durably claimed and must be acted on; the error must be
    /// reported too. (Without deliveries the pass returns the error itself.)
    pub interrupted: Option<Error>,
}

/// A pending signal, as `ls` shows it.
#[derive(Clone, Debug)]
pub struct Pending {
    /// The signal id.
    pub id: String,
    /// The file.
    pub path: PathBuf,
    /// The instant FIFO order uses, in nanoseconds since the Unix epoch.
    pub instant: i128,
    /// The type as written.
    pub type_name: String,
    /// The target.
    pub target: Target,
    /// For a buffered signal: whose buffer it is in.
    pub buffered_for: Option<String>,
}

/// What `finish` did with one broadcast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The signal id.
    pub id: String,
    /// Whether every quorum agent had acked.
    pub status: Archived,
    /// Quorum agents that had not acked.
    pub unacked: Vec<String>,
}

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

/// A mailbox handle. Cheap to keep open; safe to share between threads.
pub struct Mailbox {
    root: PathBuf,
    inputs: PathBuf,
    processed: PathBuf,
    acks: PathBuf,
    buffered: PathBuf,
    rejected: PathBuf,
    tmp: PathBuf,
    agents: PathBuf,
    opts: MailboxOptions,
    io: Io,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("root", &self.root)
            .field("opts", &self.opts)
            .finish()
    }
}

fn lossy(name: &OsStr) -> String {
    name.to_string_lossy().into_owned()
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

    fn new(root: &Path, mut opts: MailboxOptions) -> Mailbox {
        if opts.reuse_listings && crate::sys::is_remote_fs(root) {
            opts.reuse_listings = false;
        }
        let mut io = Io::new(&opts.io);
        if crate::sys::is_shared_dir(root) {
            io.set_shared(SHARED_DIR_MODE, SHARED_FILE_MODE);
        }
        Mailbox {
            inputs: root.join("inputs"),
            processed: root.join("processed"),
            acks: root.join("acks"),
            buffered: root.join("buffered"),
            rejected: root.join("rejected"),
            tmp: root.join("tmp"),
            agents: root.join("agents"),
            root: root.to_path_buf(),
            opts,
            io,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The drop zone, `inputs/`.
    pub fn inputs_dir(&self) -> &Path {
        &self.inputs
    }

    /// An agent's durable buffer directory (it may not exist yet).
    pub fn buffer_dir(&self, agent: &str) -> PathBuf {
        self.buffered.join(agent)
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
        !crate::sys::is_remote_fs(&self.root)
    }

    /// The directories a waiter for `agent` must watch: `inputs/` and the buffers.
    pub fn watch_dirs(&self) -> [&Path; 2] {
        [&self.inputs, &self.buffered]
    }

    /// True when `agent` is the orchestrator.
    pub fn is_orchestrator(&self, agent: &str) -> bool {
        agent == self.opts.orchestrator
    }

    fn check_agent(&self, agent: &str) -> Result<()> {
        if name::valid_agent(agent) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::InvalidName,
                Some(&self.agents),
                format!(
                    "invalid agent name {agent:?}: a letter then up to 63 letters, digits, '_' \
                     or '-'"
                ),
            ))
        }
    }

    /// Sends a signal and returns its id.
    ///
    /// **Durability:** in durable mode the signal survives a crash or power loss once this
    /// returns: the file is fsynced in `tmp/`, renamed into `inputs/` without replacing
    /// anything, and `inputs/` is fsynced. Readers never see a partial file.
    pub fn send(&self, s: &NewSignal) -> Result<String> {
        if let Target::Agent(a) = &s.target {
            self.check_agent(a)?;
        }
        let micros = next_micros();
        let at = DateTime::from_timestamp_micros(micros).unwrap_or_else(Utc::now);
        let unique = uuid::Uuid::now_v7().simple().to_string();
        let type_name = s.signal_type.as_str();
        let file = name::canonical_name(at, &unique, type_name, &s.target);
        let id = name::signal_id(&file).to_string();
        let mut body = Map::new();
        body.insert("id".into(), json!(id));
        body.insert("type".into(), json!(type_name));
        body.insert(
            "target".into(),
            match &s.target {
                Target::All => json!("ALL"),
                Target::None => Value::Null,
                Target::Agent(a) => json!(a),
            },
        );
        if let Some(m) = &s.message {
            body.insert("message".into(), json!(m));
        }
        if let Some(f) = &s.from {
            body.insert("from".into(), json!(f));
        }
        if let Some(i) = s.iteration {
            body.insert("iteration".into(), json!(i));
        }
        body.insert(
            "created_at".into(),
            json!(at.to_rfc3339_opts(SecondsFormat::Micros, true)),
        );
        for (k, v) in &s.extra {
            body.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let mut bytes = serde_json::to_vec(&Value::Object(body)).expect("a JSON map serializes");
        bytes.push(b'\n');
        let dest = self.inputs.join(&file);
        let stage = atomic::stage_name_from(&self.tmp, &unique, "send");
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

    /// Takes `agent`'s presence (a shared lock on `agents/<agent>.lock`) for as long as the
    /// returned value lives.
    pub fn presence(&self, agent: &str) -> Result<Presence> {
        self.check_agent(agent)?;
        let path = self.agents.join(format!("{agent}.lock"));
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
        let path = self.agents.join(format!("{agent}.lock"));
        let Ok(file) = File::open(&path) else {
            return false;
        };
        match file.try_lock() {
            Ok(()) => false,
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(std::fs::TryLockError::Error(_)) => false,
        }
    }

    /// Pending signals (in `inputs/`, and in every agent's buffer), oldest first. Files still
    /// settling or invalid are not listed; [`Mailbox::problems`] lists those.
    pub fn pending(&self) -> Result<Vec<Pending>> {
        let mut out = Vec::new();
        let scan = self.scan(&self.inputs, Source::Inputs, &|_| true, SystemTime::now())?;
        for it in scan.items {
            out.push(self.pending_of(&self.inputs, it, None));
        }
        for entry in self.io.list(&self.buffered, true)? {
            let (Some(agent), EntryKind::Dir) = (entry.name.to_str(), entry.kind) else {
                continue;
            };
            let dir = self.buffered.join(agent);
            let scan = self.scan(&dir, Source::Buffer, &|_| true, SystemTime::now())?;
            for it in scan.items {
                out.push(self.pending_of(&dir, it, Some(agent.to_string())));
            }
        }
        out.sort_by(|a, b| (a.instant, &a.id).cmp(&(b.instant, &b.id)));
        Ok(out)
    }

    fn pending_of(&self, dir: &Path, it: Item, buffered_for: Option<String>) -> Pending {
        let name = lossy(&it.name);
        Pending {
            id: name::signal_id(&name).to_string(),
            path: dir.join(&it.name),
            instant: it.instant,
            type_name: it.type_name,
            target: it.target,
            buffered_for,
        }
    }

    /// Files in `inputs/` that are not (yet) deliverable, with the reason: still settling,
    /// or invalid and about to be quarantined by the next pass.
    pub fn problems(&self) -> Result<Vec<(PathBuf, String)>> {
        let scan = self.scan(&self.inputs, Source::Inputs, &|_| true, SystemTime::now())?;
        let mut out: Vec<(PathBuf, String)> = scan
            .rejects
            .into_iter()
            .map(|(n, _, r)| (self.inputs.join(n), r))
            .collect();
        for n in scan.settling {
            out.push((
                self.inputs.join(n),
                format!(
                    "changed less than {:?} ago: waiting for the writer to finish",
                    self.opts.settle
                ),
            ));
        }
        Ok(out)
    }

    /// Lists `dir` and classifies each entry. `relevant` filters canonical names before any
    /// further work, so that a checkpoint skips foreign targets by name alone.
    fn scan(
        &self,
        dir: &Path,
        source: Source,
        relevant: &dyn Fn(&str) -> bool,
        now: SystemTime,
    ) -> Result<Scan> {
        let entries = self.io.list(dir, source == Source::Buffer)?;
        let mut scan = Scan::default();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen_foreign = false;
        for entry in entries {
            if entry.kind == EntryKind::File {
                // The fast path: another agent's signal is skipped on its name's shape alone.
                if let Some(target) = entry.name.to_str().and_then(name::canonical_target)
                    && !relevant(target)
                {
                    continue;
                }
            }
            let kind = match entry.kind {
                EntryKind::File => name::classify(&entry.name),
                _ => NameKind::Stray,
            };
            let canon = match kind {
                NameKind::InProgress => continue,
                NameKind::Canonical(c) => c,
                NameKind::BadCanonical => {
                    let reason = "name has the canonical shape but invalid fields (time, unique \
                                  part, type or target)"
                        .to_string();
                    scan.rejects.push((entry.name, source, reason));
                    continue;
                }
                NameKind::Foreign { instant, format } if entry.kind == EntryKind::File => {
                    seen_foreign = true;
                    self.scan_foreign(
                        dir, source, entry.name, instant, format, now, &mut cache, &mut scan,
                    )?;
                    continue;
                }
                _ => {
                    self.scan_odd(dir, source, entry.name, entry.kind, now, &mut scan)?;
                    continue;
                }
            };
            let item = Item {
                instant: canon.instant,
                type_name: canon.type_name.to_string(),
                signal_type: canon.signal_type(),
                target: canon.target(),
                source,
                name: OsString::new(),
            };
            scan.items.push(Item {
                name: entry.name,
                ..item
            });
        }
        scan.foreign = seen_foreign;
        if seen_foreign && cache.peeks.len() > 4 * scan.items.len() + 1024 {
            let keep: HashSet<&OsString> = scan.items.iter().map(|i| &i.name).collect();
            cache.peeks.retain(|k, _| keep.contains(k));
        }
        drop(cache);
        scan.items
            .sort_by(|a, b| (a.instant, &a.name).cmp(&(b.instant, &b.name)));
        Ok(scan)
    }

    /// [`Mailbox::scan`] for one agent's pass, reusing the previous listing when the directory
    /// provably has not changed since: same `lstat` stamp (device, inode, size, mtime, ctime),
    /// taken before that listing, with the directory's last change older than the listing by
    /// the racy margin, and nothing in it that needed a second look (no dropped files, nothing
    /// settling or rejected). A repeated poll of an idle inbox is then one `lstat`.
    fn scan_cached(
        &self,
        dir: &Path,
        source: Source,
        agent: &str,
        relevant: &dyn Fn(&str) -> bool,
        now: SystemTime,
    ) -> Result<Scan> {
        // Most agents never had a buffer: an `lstat` says so at half the cost of a failed open.
        let before = if self.opts.reuse_listings || source == Source::Buffer {
            let st = self.io.stamp(dir)?;
            if st.is_none() && source == Source::Buffer {
                return Ok(Scan::default()); // no buffer for this agent: nothing to list
            }
            st
        } else {
            None
        };
        if !self.opts.reuse_listings {
            return self.scan(dir, source, relevant, now);
        }
        let key = (dir.to_path_buf(), agent.to_string());
        if let Some(st) = before {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(l) = cache.listings.get(&key)
                && l.stamp == st
            {
                return Ok(l.scan.clone());
            }
        }
        let listed_at = ns_of(SystemTime::now());
        let scan = self.scan(dir, source, relevant, now)?;
        if let Some(st) = before {
            let changed = st.mtime_ns.max(st.ctime_ns);
            let whole_seconds =
                st.mtime_ns % 1_000_000_000 == 0 && st.ctime_ns % 1_000_000_000 == 0;
            let margin = if whole_seconds {
                RACY_MARGIN_COARSE_NS
            } else {
                RACY_MARGIN_NS
            };
            let provable = !scan.foreign
                && scan.rejects.is_empty()
                && scan.settling.is_empty()
                && scan.next_check.is_none()
                && listed_at - changed > margin;
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if provable {
                cache.listings.insert(
                    key,
                    Listing {
                        stamp: st,
                        scan: scan.clone(),
                    },
                );
            } else {
                cache.listings.remove(&key);
            }
        }
        Ok(scan)
    }

    /// Time since the last change of an entry (lstat), as `Some(eligible_at)` while it is
    /// still inside the settle window.
    fn settling(&self, stamp: &Stamp, now: SystemTime) -> Option<SystemTime> {
        clock::settling(stamp, self.opts.settle, now)
    }

    fn note_settling(scan: &mut Scan, name: OsString, at: SystemTime) {
        scan.next_check = Some(scan.next_check.map_or(at, |t| t.min(at)));
        scan.settling.push(name);
    }

    /// Symlinks, directories, special files, strays and non-UTF-8 names: refused once settled.
    fn scan_odd(
        &self,
        dir: &Path,
        source: Source,
        name: OsString,
        kind: EntryKind,
        now: SystemTime,
        scan: &mut Scan,
    ) -> Result<()> {
        let Some(stamp) = self.io.stamp(&dir.join(&name))? else {
            return Ok(());
        };
        if let Some(at) = self.settling(&stamp, now) {
            Self::note_settling(scan, name, at);
            return Ok(());
        }
        let reason = match kind {
            EntryKind::Symlink => "a symlink: links in the drop zone are never followed".into(),
            EntryKind::Dir => "a directory, not a signal file".into(),
            EntryKind::Special => {
                "a FIFO, socket or device, not a signal file (never opened)".into()
            }
            EntryKind::File if name.to_str().is_none() => format!(
                "file name is not UTF-8 ({:?})",
                crate::sys::name_bytes(&name)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
            EntryKind::File => {
                "not a signal file: the name must end in .json, .yaml or .yml".into()
            }
        };
        scan.rejects.push((name, source, reason));
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn scan_foreign(
        &self,
        dir: &Path,
        source: Source,
        name: OsString,
        name_instant: Option<i128>,
        format: Format,
        now: SystemTime,
        cache: &mut Cache,
        scan: &mut Scan,
    ) -> Result<()> {
        let path = dir.join(&name);
        let Some(stamp) = self.io.stamp(&path)? else {
            return Ok(());
        };
        if let Some(at) = self.settling(&stamp, now) {
            Self::note_settling(scan, name, at);
            return Ok(());
        }
        let parsed = match cache.peeks.get(&name) {
            Some((s, parsed)) if *s == stamp => parsed.clone(),
            _ => {
                let parsed = self.peek_foreign(&path, &name, format)?;
                let Some(parsed) = parsed else { return Ok(()) };
                cache.peeks.insert(name.clone(), (stamp, parsed.clone()));
                parsed
            }
        };
        match parsed {
            Err(reason) => scan.rejects.push((name, source, reason)),
            Ok((body_instant, body)) => match body.target {
                Err(reason) => scan.rejects.push((name, source, reason)),
                Ok(target) => scan.items.push(Item {
                    instant: name_instant.or(body_instant).unwrap_or(stamp.mtime_ns),
                    signal_type: SignalType::parse(&body.type_name),
                    type_name: body.type_name,
                    target,
                    source,
                    name,
                }),
            },
        }
        Ok(())
    }

    /// Reads and parses a dropped file. `Ok(None)` when it vanished.
    fn peek_foreign(&self, path: &Path, name: &OsStr, format: Format) -> Result<Option<Peeked>> {
        let s = name.to_str().unwrap_or_default();
        if s.chars().any(char::is_control) {
            return Ok(Some(Err("file name contains control characters".into())));
        }
        Ok(Some(
            match self.io.read_untrusted(path, self.opts.max_file_size)? {
                ReadOutcome::Gone => return Ok(None),
                ReadOutcome::Bytes(bytes, _) => body::parse_body(&bytes, format)
                    .or_else(|e| {
                        // Strict for what people drop, except for the leftover of a claim that
                        // a crash interrupted during its append (the same name is in
                        // processed/): that file may end in a torn handling block.
                        if self.processed.join(name).exists() {
                            body::parse_record(&bytes, format)
                        } else {
                            Err(e)
                        }
                    })
                    .map(|body| {
                        let at = body
                            .created_at
                            .and_then(|t| t.timestamp_nanos_opt())
                            .map(i128::from);
                        (at, body)
                    }),
                other => Err(other.rejection().unwrap_or_default()),
            },
        ))
    }

    /// Runs one checkpoint pass for `agent` in `state` (see the routing table in
    /// `spec/mailbox.md`).
    ///
    /// **Durability:** every delivered signal has been durably claimed (moved to `processed/`
    /// with both directories fsynced) or durably acked before this returns: it is never
    /// delivered to this agent again, also after a crash.
    pub fn pass(&self, agent: &str, state: Option<&str>) -> Result<Pass> {
        self.check_agent(agent)?;
        let span = tracing::debug_span!("pass", agent, state);
        let _enter = span.enter();
        let is_orch = self.is_orchestrator(agent);
        let approval =
            is_orch && state.is_some_and(|s| self.opts.approval_states.iter().any(|a| a == s));
        let now = SystemTime::now();
        // A subagent only ever acts on its own, broadcast, and (none) files: skip the rest by
        // name. APPROVE/SKIP are never for a subagent.
        let relevant = |target: &str| -> bool { is_orch || target == agent || target == "ALL" };
        let mut scan = self.scan_cached(&self.inputs, Source::Inputs, agent, &relevant, now)?;
        let own = self.buffered.join(agent);
        let buf = self.scan_cached(&own, Source::Buffer, agent, &|_| true, now)?;
        let mut pass = Pass {
            next_check: match (scan.next_check, buf.next_check) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            ..Pass::default()
        };
        scan.rejects.extend(buf.rejects);
        for (name, source, reason) in scan.rejects {
            let dir = if source == Source::Inputs {
                &self.inputs
            } else {
                &own
            };
            if let Some(r) = self.quarantine(dir, &name, &reason, agent)? {
                pass.rejected.push(r);
            }
        }
        let mut items = scan.items;
        if !buf.items.is_empty() {
            // A crash during the orchestrator's move into this buffer can leave the signal in
            // both places. Resolve that before claiming, durably, or it would be delivered twice.
            let in_buffer: HashSet<OsString> = buf.items.iter().map(|i| i.name.clone()).collect();
            let mut dropped = false;
            let mut keep = Vec::with_capacity(items.len());
            for item in items {
                if in_buffer.contains(&item.name)
                    && self.same_signal(&self.inputs.join(&item.name), &own.join(&item.name))?
                {
                    self.io.remove(&self.inputs.join(&item.name))?;
                    dropped = true;
                } else {
                    keep.push(item);
                }
            }
            if dropped {
                self.io.sync_dir(&self.inputs)?;
            }
            items = keep;
            items.extend(buf.items);
            items.sort_by(|a, b| (a.instant, &a.name).cmp(&(b.instant, &b.name)));
        }
        let ctx = Route {
            agent,
            own: &own,
            is_orch,
            approval,
        };
        if let Err(e) = self.route_all(&items, &ctx, &mut pass) {
            if pass.delivered.is_empty() {
                return Err(e);
            }
            tracing::warn!(error = %e, "pass interrupted after deliveries");
            pass.interrupted = Some(e);
        }
        tracing::debug!(
            delivered = pass.delivered.len(),
            buffered = pass.buffered.len(),
            rejected = pass.rejected.len(),
            "pass done"
        );
        Ok(pass)
    }

    /// Routes every item in FIFO order (the routing table of `spec/mailbox.md`), then hands
    /// over what is durable: every delivery when all went well; after an error, the deliveries
    /// that were made durable (the claims still pending are committed first, when possible).
    fn route_all(&self, items: &[Item], ctx: &Route<'_>, pass: &mut Pass) -> Result<()> {
        let mut batch = Batch::default();
        let routed = self.route_items(items, ctx, pass, &mut batch);
        let committed = self.commit(&mut batch);
        pass.delivered.extend(
            batch
                .signals
                .into_iter()
                .filter(|(_, pending)| pending.is_none())
                .map(|(sig, _)| sig),
        );
        routed.and(committed)
    }

    /// Makes the batch's claims durable (group commit): fdatasync every appended handling
    /// block and fsync `processed/`, all in flight together, then each directory of
    /// `batch.dirs` in order (`inputs/` before a buffer). A claim is durable once its source
    /// directory is synced: when the commit then fails on another directory, the claims
    /// already durable are still handed over.
    fn commit(&self, batch: &mut Batch) -> Result<()> {
        if batch.claims > 0 {
            // Closed when the syncs are done, whatever their outcome.
            let files = std::mem::take(&mut batch.files);
            self.io.sync_together(&files, &self.processed)?;
            while let Some(dir) = batch.dirs.first() {
                self.io.sync_dir(dir)?;
                for (_, pending) in &mut batch.signals[batch.durable..] {
                    if pending.as_ref() == Some(dir) {
                        *pending = None;
                    }
                }
                batch.dirs.remove(0);
            }
            batch.claims = 0;
        }
        // Every delivery is durable now: the batch's claims just committed; the rest (acks,
        // claims that finished an interrupted one) were synced when made.
        debug_assert!(batch.signals.iter().all(|(_, p)| p.is_none()));
        batch.durable = batch.signals.len();
        Ok(())
    }

    fn route_items(
        &self,
        items: &[Item],
        ctx: &Route<'_>,
        pass: &mut Pass,
        batch: &mut Batch,
    ) -> Result<()> {
        let agent = ctx.agent;
        let mut presence: HashMap<String, bool> = HashMap::new();
        let mut broadcasts: Vec<&Item> = Vec::new();
        for item in items {
            let Some(ty) = item.signal_type else {
                continue; // unknown types stay in inputs/ untouched
            };
            let dir = if item.source == Source::Buffer {
                ctx.own
            } else {
                &self.inputs
            };
            // Claims join the batch (not durable until it commits); a broadcast's ack is
            // durable as soon as it is written, and so is a claim that finished an
            // interrupted one.
            let added = batch.added;
            let delivered = if item.source == Source::Buffer {
                self.take(dir, &item.name, agent, pass, batch)?
            } else if ty.is_approval() {
                if ctx.approval {
                    self.take(dir, &item.name, agent, pass, batch)?
                } else {
                    None
                }
            } else {
                match &item.target {
                    Target::All => {
                        if ctx.is_orch {
                            broadcasts.push(item);
                        }
                        // It may quarantine from inputs/ (an fsync of inputs/): commit first.
                        self.commit(batch)?;
                        self.deliver_broadcast(&item.name, agent, pass)?
                    }
                    Target::None if ctx.is_orch => {
                        self.take(dir, &item.name, agent, pass, batch)?
                    }
                    Target::None => None,
                    Target::Agent(a) if a == agent => {
                        self.take(dir, &item.name, agent, pass, batch)?
                    }
                    Target::Agent(x) => {
                        if ctx.is_orch
                            && !*presence
                                .entry(x.clone())
                                .or_insert_with(|| self.is_present(x))
                        {
                            // The move into a buffer fsyncs inputs/: commit first, or the
                            // pending claims' removal from inputs/ could become durable
                            // before their arrival in processed/ (lost in a crash).
                            self.commit(batch)?;
                            self.buffer(&item.name, x, pass)?;
                        }
                        None
                    }
                }
            };
            if let Some(sig) = delivered {
                let stop = sig.signal_type.stops_pass();
                let pending = (batch.added > added).then(|| dir.to_path_buf());
                batch.signals.push((sig, pending));
                if stop {
                    pass.stopped = true;
                    break;
                }
            }
            if batch.claims >= GROUP_COMMIT {
                self.commit(batch)?;
            }
        }
        // Archiving fsyncs processed/ and inputs/: commit first, so that a claim is never made
        // durable by another operation's fsyncs and then dropped when the commit fails.
        self.commit(batch)?;
        for item in broadcasts {
            let acked = self.acked_by(&item.name)?;
            if self.opts.quorum.iter().all(|q| acked.contains(q)) {
                let id = name::signal_id(&lossy(&item.name)).to_string();
                if self.archive(&item.name, agent, Archived::Delivered, &[])? {
                    pass.archived.push(id);
                }
            }
        }
        Ok(())
    }

    /// Claims `dir/name` for `agent` into `processed/`. `None` when another consumer won, or
    /// when the file turned out invalid (then it is quarantined and recorded in `pass`).
    fn take(
        &self,
        dir: &Path,
        name: &OsStr,
        agent: &str,
        pass: &mut Pass,
        batch: &mut Batch,
    ) -> Result<Option<Signal>> {
        let extra = Handled::Delivered.fields(agent);
        self.move_to_processed(dir, name, agent, extra, pass, Some(batch))
    }

    /// The claim: rename into `processed/` without replacing, record the handling metadata,
    /// fsync `processed/`, then the source directory; with a `batch`, the fsyncs are left to
    /// its commit.
    fn move_to_processed(
        &self,
        dir: &Path,
        name: &OsStr,
        agent: &str,
        extra: Map<String, Value>,
        pass: &mut Pass,
        mut batch: Option<&mut Batch>,
    ) -> Result<Option<Signal>> {
        let src = dir.join(name);
        let mut dest = self.processed.join(name);
        for attempt in 0..4 {
            let (claimed, result) = match batch.as_deref_mut() {
                Some(b) => {
                    let between = || self.record(&dest, name, &extra, agent, Some(&mut b.files));
                    let r = atomic::claim_unsynced(&self.io, &src, &dest, between)?;
                    if r.0 == Claimed::Won {
                        b.claims += 1;
                        b.added += 1;
                        // A buffered signal left inputs/ by the orchestrator's move, whose
                        // fsync of inputs/ may not have happened yet (it died in between, or
                        // has not got there). Until that removal is durable, a power loss can
                        // bring the signal back to inputs/, to be buffered and delivered again:
                        // inputs/ is synced before the buffer, so before the hand-over.
                        if dir != self.inputs && !b.dirs.contains(&self.inputs) {
                            b.dirs.push(self.inputs.clone());
                        }
                        if !b.dirs.iter().any(|d| d == dir) {
                            b.dirs.push(dir.to_path_buf());
                        }
                    }
                    r
                }
                None => {
                    let between = || self.record(&dest, name, &extra, agent, None);
                    atomic::claim(&self.io, &src, &dest, between)?
                }
            };
            match claimed {
                Claimed::Lost => return Ok(None),
                Claimed::Won => {
                    return Ok(match result.flatten() {
                        Some(Ok(mut sig)) => {
                            // The handling metadata just appended, in the delivered record too.
                            sig.fields.extend(extra);
                            Some(sig)
                        }
                        Some(Err(rej)) => {
                            pass.rejected.push(rej);
                            None
                        }
                        None => None,
                    });
                }
                Claimed::DestExists => {
                    // Finishing an interrupted claim fsyncs both directories: commit first.
                    if let Some(b) = batch.as_deref_mut() {
                        self.commit(b)?;
                    }
                    let (Some(a), Some(b)) = (self.io.stamp(&src)?, self.io.stamp(&dest)?) else {
                        return Ok(None); // the source went: another consumer resolved it
                    };
                    let same_file = (a.dev, a.ino) == (b.dev, b.ino);
                    if attempt == 0 && (same_file || self.same_signal(&src, &dest)?) {
                        // An earlier claim of this very file was interrupted by a crash before
                        // it removed the source durably, so it was never handed over: redo it.
                        if same_file {
                            // Two links to one file (left by link+unlink): rename between them
                            // is a no-op by POSIX, so drop the source link instead.
                            if !self.io.remove(&src)? {
                                return Ok(None);
                            }
                        } else {
                            match self.io.rename_replace(&src, &dest) {
                                Ok(()) => {}
                                Err(e)
                                    if e.io_error().is_some_and(|e| {
                                        e.kind() == std::io::ErrorKind::NotFound
                                    }) =>
                                {
                                    return Ok(None);
                                }
                                Err(e) => return Err(e),
                            }
                        }
                        let r = self.record(&dest, name, &extra, agent, None)?;
                        self.io.sync_dir(&self.processed)?;
                        self.io.sync_dir(dir)?;
                        return Ok(match r {
                            Some(Ok(mut sig)) => {
                                // The handling metadata just appended, in the delivered record too.
                                sig.fields.extend(extra);
                                Some(sig)
                            }
                            Some(Err(rej)) => {
                                pass.rejected.push(rej);
                                None
                            }
                            None => None,
                        });
                    }
                    dest = self.processed.join(unique_variant(name));
                }
            }
        }
        Err(Error::new(
            ErrorKind::Io,
            Some(&src),
            "cannot find a free name in processed/",
        ))
    }

    /// True when `a` and `b` hold the same signal (ignoring archive metadata).
    fn same_signal(&self, a: &Path, b: &Path) -> Result<bool> {
        let read = |p: &Path| -> Result<Option<Map<String, Value>>> {
            let ReadOutcome::Bytes(bytes, _) =
                self.io.read_untrusted(p, self.opts.max_file_size)?
            else {
                return Ok(None);
            };
            let fname = p.file_name().unwrap_or_default().to_string_lossy();
            Ok(body::signal_fields(&bytes, &fname))
        };
        Ok(match (read(a)?, read(b)?) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        })
    }

    /// Reads the claimed file at `dest`, and appends `extra` (handling metadata) to it, synced
    /// at once, or with `defer`, left open there for the batch's commit to fdatasync.
    /// `Some(Err)` when the file does not hold a valid signal: it is then quarantined.
    fn record(
        &self,
        dest: &Path,
        name: &OsStr,
        extra: &Map<String, Value>,
        agent: &str,
        defer: Option<&mut Vec<(PathBuf, File)>>,
    ) -> Result<Option<std::result::Result<Signal, Rejection>>> {
        // One read-write descriptor reads the file and then appends the record; a file that
        // cannot be opened for writing is read without one (and left unannotated below).
        let (read, file) = self.io.read_claimed(dest, self.opts.max_file_size)?;
        let reason = match read {
            ReadOutcome::Gone => return Ok(None),
            ReadOutcome::Bytes(bytes, _) => {
                let fname = lossy(name);
                let format = name::format_of(&fname);
                // A record, not a bare body: after a crash the source may share the inode of an
                // interrupted claim whose handling block was already appended.
                match body::read_signal(&bytes, &fname, dest) {
                    Ok(sig) => {
                        // Appended in place, as upstream does: a claim allocates and frees no
                        // inode (on ext4, creating files right after frees is slow, and that
                        // would slow producers too).
                        let tail = body::handling_tail(&bytes, format, extra);
                        let appended = match (file, defer) {
                            (Some(f), Some(files)) => self
                                .io
                                .append_to(&f, dest, &tail)
                                .map(|()| files.push((dest.to_path_buf(), f))),
                            (Some(f), None) => self
                                .io
                                .append_to(&f, dest, &tail)
                                .and_then(|()| self.io.sync_data(&f, dest)),
                            (None, Some(files)) => self
                                .io
                                .append_unsynced(dest, &tail)
                                .map(|f| files.push((dest.to_path_buf(), f))),
                            (None, None) => self.io.append(dest, &tail),
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
                        return Ok(Some(Ok(sig)));
                    }
                    Err(reason) => reason,
                }
            }
            other => other.rejection().unwrap_or_default(),
        };
        // Quarantine the file this claim holds: `dest` may carry a `.dup-` name, and the plain
        // name may be an earlier, valid record that must stay where it is.
        let parent = dest.parent().unwrap_or(&self.processed);
        let held = dest.file_name().unwrap_or(name);
        Ok(self.quarantine(parent, held, &reason, agent)?.map(Err))
    }

    /// Delivers a broadcast to `agent` once: writes `acks/<id>/<agent>.ack` without replacing.
    fn deliver_broadcast(
        &self,
        name: &OsStr,
        agent: &str,
        pass: &mut Pass,
    ) -> Result<Option<Signal>> {
        let key = (agent.to_string(), name.to_os_string());
        if self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .acked
            .contains(&key)
        {
            return Ok(None);
        }
        let fname = lossy(name);
        let id = name::signal_id(&fname);
        let ack_dir = self.acks.join(id);
        let ack = ack_dir.join(format!("{agent}.ack"));
        let remember = || {
            self.cache
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .acked
                .insert(key.clone());
        };
        if self.io.stamp(&ack)?.is_some()
            || self
                .io
                .stamp(&ack_dir.join(format!("{agent}.ack.yaml")))?
                .is_some()
        {
            remember();
            return Ok(None);
        }
        let src = self.inputs.join(name);
        let bytes = match self.io.read_untrusted(&src, self.opts.max_file_size)? {
            ReadOutcome::Gone => return Ok(None),
            ReadOutcome::Bytes(b, _) => b,
            other => {
                let reason = other.rejection().unwrap_or_default();
                if let Some(r) = self.quarantine(&self.inputs, name, &reason, agent)? {
                    pass.rejected.push(r);
                }
                return Ok(None);
            }
        };
        let sig = match Signal::parse_file_bytes(&bytes, &src) {
            Ok(s) => s,
            Err(e) => {
                if let Some(r) = self.quarantine(&self.inputs, name, e.reason(), agent)? {
                    pass.rejected.push(r);
                }
                return Ok(None);
            }
        };
        if self.io.create_dir(&ack_dir)? {
            self.io.sync_dir(&self.acks)?;
        }
        let body = json!({
            "signal": id,
            "agent": agent,
            "acked_at": clock::now_rfc3339(Precision::Micros),
        });
        let mut bytes = serde_json::to_vec(&body).expect("JSON serializes");
        bytes.push(b'\n');
        let stage = atomic::stage_name(&self.tmp, "ack");
        match atomic::write_atomic(&self.io, &stage, &ack, &bytes, Clobber::No)? {
            Placed::Done => {
                remember();
                Ok(Some(sig))
            }
            Placed::Exists => {
                remember();
                Ok(None)
            }
        }
    }

    /// Agents that have acked a broadcast (sigbox's `.ack` and upstream's `.ack.yaml`).
    fn acked_by(&self, name: &OsStr) -> Result<HashSet<String>> {
        let id = name::signal_id(&lossy(name)).to_string();
        let mut out = HashSet::new();
        for e in self.io.list(&self.acks.join(&id), true)? {
            if let Some(n) = e.name.to_str()
                && let Some(a) = n
                    .strip_suffix(".ack")
                    .or_else(|| n.strip_suffix(".ack.yaml"))
            {
                out.insert(a.to_string());
            }
        }
        Ok(out)
    }

    /// Archives a broadcast into `processed/` with its delivery status.
    fn archive(
        &self,
        name: &OsStr,
        agent: &str,
        status: Archived,
        unacked: &[String],
    ) -> Result<bool> {
        let extra = Handled::Archived(status, unacked).fields(agent);
        let mut scratch = Pass::default();
        let r = self.move_to_processed(&self.inputs, name, agent, extra, &mut scratch, None)?;
        Ok(r.is_some())
    }

    /// Moves a signal for absent agent `x` into `buffered/<x>/`.
    fn buffer(&self, name: &OsStr, x: &str, pass: &mut Pass) -> Result<()> {
        let dir = self.buffered.join(x);
        if self.io.create_dir(&dir)? {
            self.io.sync_dir(&self.buffered)?;
        }
        let src = self.inputs.join(name);
        let mut dest = dir.join(name);
        for _ in 0..4 {
            match atomic::claim(&self.io, &src, &dest, || Ok(()))?.0 {
                Claimed::Lost => return Ok(()),
                Claimed::Won => {
                    pass.buffered
                        .push((name::signal_id(&lossy(name)).to_string(), x.to_string()));
                    return Ok(());
                }
                Claimed::DestExists => {
                    if self.same_signal(&src, &dest)? {
                        // A crash interrupted an earlier move of this very signal after the
                        // buffer side became durable: finish it by dropping the source.
                        self.io.remove(&src)?;
                        self.io.sync_dir(&self.inputs)?;
                        return Ok(());
                    }
                    dest = dir.join(unique_variant(name));
                }
            }
        }
        Ok(())
    }

    /// Moves `dir/name` to `rejected/` and writes the reason beside it. `None` when another
    /// process moved the file first.
    fn quarantine(
        &self,
        dir: &Path,
        name: &OsStr,
        reason: &str,
        agent: &str,
    ) -> Result<Option<Rejection>> {
        let src = dir.join(name);
        let mut dest = self.rejected.join(name);
        for _ in 0..4 {
            let (claimed, _) = atomic::claim(&self.io, &src, &dest, || {
                let mut why = dest.clone().into_os_string();
                why.push(".reason.json");
                let body = json!({
                    "file": lossy(name),
                    "from": src.to_string_lossy(),
                    "reason": reason,
                    "rejected_at": clock::now_rfc3339(Precision::Micros),
                    "rejected_by": agent,
                });
                let mut bytes = serde_json::to_vec_pretty(&body).expect("JSON serializes");
                bytes.push(b'\n');
                let stage = atomic::stage_name(&self.tmp, "reason");
                atomic::write_atomic(&self.io, &stage, Path::new(&why), &bytes, Clobber::Yes)
            })?;
            match claimed {
                Claimed::Lost => return Ok(None),
                Claimed::Won => {
                    tracing::warn!(file = %src.display(), reason, "quarantined");
                    return Ok(Some(Rejection {
                        name: lossy(name),
                        path: dest,
                        reason: reason.to_string(),
                    }));
                }
                Claimed::DestExists => dest = self.rejected.join(unique_variant(name)),
            }
        }
        Err(Error::new(
            ErrorKind::Io,
            Some(&src),
            "cannot find a free name in rejected/",
        ))
    }

    /// Archives every pending broadcast at session end: `delivered` when the quorum acked,
    /// else `partial` with the agents that did not.
    pub fn finish(&self, agent: &str) -> Result<Vec<Finished>> {
        self.check_agent(agent)?;
        let scan = self.scan(
            &self.inputs,
            Source::Inputs,
            &|t| t == "ALL",
            SystemTime::now(),
        )?;
        let mut out = Vec::new();
        for item in scan.items {
            if item.target != Target::All {
                continue;
            }
            let acked = self.acked_by(&item.name)?;
            let unacked: Vec<String> = self
                .opts
                .quorum
                .iter()
                .filter(|q| !acked.contains(*q))
                .cloned()
                .collect();
            let status = if unacked.is_empty() {
                Archived::Delivered
            } else {
                Archived::Partial
            };
            if self.archive(&item.name, agent, status, &unacked)? {
                out.push(Finished {
                    id: name::signal_id(&lossy(&item.name)).to_string(),
                    status,
                    unacked,
                });
            }
        }
        Ok(out)
    }

    /// Removes staging files in `tmp/` older than `age`, at most `limit` per call. Returns how
    /// many were removed. On ext4 without a journal, file creation slows down for minutes after
    /// many inodes are freed (`spec/mailbox.md` §9.7): spread large clean-ups over time.
    pub fn gc(&self, age: Duration, limit: usize) -> Result<usize> {
        let now = SystemTime::now();
        let mut removed = 0;
        for e in self.io.list(&self.tmp, false)? {
            if removed >= limit {
                break;
            }
            let p = self.tmp.join(&e.name);
            let Some(stamp) = self.io.stamp(&p)? else {
                continue;
            };
            if e.kind != EntryKind::File && e.kind != EntryKind::Symlink {
                continue;
            }
            if ns_of(now) - stamp.mtime_ns.max(stamp.ctime_ns) >= age.as_nanos() as i128
                && self.io.remove(&p)?
            {
                removed += 1;
            }
        }
        if removed > 0 {
            self.io.sync_dir(&self.tmp)?;
        }
        Ok(removed)
    }

    /// Signals in `processed/`, oldest first, with their handling metadata in `fields`.
    /// Unreadable files are returned as errors beside the rest.
    pub fn processed(&self) -> Result<Vec<std::result::Result<Signal, Error>>> {
        let mut out = Vec::new();
        for e in self.io.list(&self.processed, false)? {
            if e.kind != EntryKind::File {
                continue;
            }
            let path = self.processed.join(&e.name);
            out.push(
                match self.io.read_untrusted(&path, self.opts.max_file_size)? {
                    ReadOutcome::Bytes(b, stamp) => {
                        Signal::parse_file_bytes(&b, &path).map(|s| (s, stamp.mtime_ns))
                    }
                    ReadOutcome::Gone => continue,
                    _ => Err(Error::new(
                        ErrorKind::NotRegularFile,
                        Some(&path),
                        "unreadable",
                    )),
                },
            );
        }
        let key = |s: &Signal, mtime: i128| -> i128 {
            name::parse_canonical(&format!("{}.json", s.id))
                .map(|c| c.instant)
                .or_else(|| {
                    s.created_at
                        .and_then(|t| t.timestamp_nanos_opt())
                        .map(i128::from)
                })
                .unwrap_or(mtime)
        };
        let mut ok: Vec<(i128, Signal)> = Vec::new();
        let mut errs = Vec::new();
        for r in out {
            match r {
                Ok((s, m)) => ok.push((key(&s, m), s)),
                Err(e) => errs.push(Err(e)),
            }
        }
        ok.sort_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
        Ok(ok.into_iter().map(|(_, s)| Ok(s)).chain(errs).collect())
    }

    /// Files in `rejected/` with their reasons.
    pub fn rejected(&self) -> Result<Vec<Rejection>> {
        let mut out = Vec::new();
        for e in self.io.list(&self.rejected, true)? {
            let n = lossy(&e.name);
            if n.ends_with(".reason.json") {
                continue;
            }
            let path = self.rejected.join(&e.name);
            let mut why = path.clone().into_os_string();
            why.push(".reason.json");
            let reason = std::fs::read(&why)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| v.get("reason").and_then(Value::as_str).map(String::from))
                .unwrap_or_else(|| "(no reason recorded)".into());
            out.push(Rejection {
                name: n,
                path,
                reason,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

/// `name` with a unique part inserted before its extension, for a destination that is taken.
fn unique_variant(name: &OsStr) -> OsString {
    let u = uuid::Uuid::now_v7().simple().to_string();
    let s = lossy(name);
    let (stem, ext) = match s.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && name.to_str().is_some() => {
            (stem.to_string(), format!(".{ext}"))
        }
        _ => {
            let mut o = name.to_os_string();
            o.push(format!(".dup-{}", &u[20..]));
            return o;
        }
    };
    OsString::from(format!("{stem}.dup-{}{ext}", &u[20..]))
}
