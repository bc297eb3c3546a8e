//! The filesystem seam: every filesystem effect of the broker goes through [`Io`].
//!
//! Reads go straight to the operating system. Effects (creating directories and files, writing,
//! fsync, rename, unlink) call an optional [`FsHook`] first, so that tests can record them, inject
//! faults, or freeze the filesystem at the n-th step to simulate a crash. Nothing else in the
//! crate touches the filesystem for writing.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, ErrorKind, Result};
use crate::sys::{self, Entry, Stamp};

mod read;
use read::read_checked;
pub(crate) use read::{ReadOutcome, is_hard_link_reason};

/// Whether writes wait for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// fsync every file before it is renamed into place and every directory after an entry in
    /// it changes. The default, and what the durability contract in `spec/` describes.
    #[default]
    Durable,
    /// No fsync at all. Only for tests and tmpfs: a crash or power loss can lose or undo any
    /// recent operation.
    RelaxedNoFsync,
}

/// One filesystem effect, shown to an [`FsHook`] before it happens.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FsOp<'a> {
    /// `mkdir(path)`.
    CreateDir(&'a Path),
    /// `open(path, O_CREAT | O_EXCL | O_WRONLY)`.
    CreateFile(&'a Path),
    /// Appends `data` to the file at `path` (one just created, or one being annotated).
    Write(&'a Path, &'a [u8]),
    /// Replaces the bytes of the file at `path` from offset `at` to its end with `data`
    /// (`pwrite` at `at`, then `ftruncate` to `at + data.len()` when the file was longer): how
    /// a claim records its handling inside the record (spec/mailbox.md §3.4).
    ReplaceTail(&'a Path, u64, &'a [u8]),
    /// Sets the mtime of the file at `path` to now (`futimens`): a file sigbox put back where
    /// it was reads as written now, so it settles again (spec/mailbox.md §2.4).
    Touch(&'a Path),
    /// `fsync` of the file at `path`.
    SyncFile(&'a Path),
    /// `rename(from, to)`; with `noreplace`, fails if `to` exists.
    Rename {
        /// Source path.
        from: &'a Path,
        /// Destination path.
        to: &'a Path,
        /// True when the rename must not replace an existing destination.
        noreplace: bool,
    },
    /// `fsync` of the directory at `path`.
    SyncDir(&'a Path),
    /// `link(from, to)`: a second name for the file at `from` (a claim on a filesystem whose
    /// rename is not atomic across directories, spec/mailbox.md §9.10); fails if `to` exists.
    Link {
        /// The existing name.
        from: &'a Path,
        /// The new name.
        to: &'a Path,
    },
    /// `unlink(path)`.
    Remove(&'a Path),
    /// `chmod(path, mode)` of a file or directory this handle just created (shared mailboxes).
    SetMode(&'a Path, u32),
    /// `open(path, O_CREAT | O_RDWR)` of a presence lock file (never truncated, never synced:
    /// presence does not survive a crash, by design).
    OpenLock(&'a Path),
}

/// Observes (and may fail) each filesystem effect; for fault-injection and crash tests.
pub trait FsHook: Send + Sync {
    /// Called before `op`. Returning an error makes the operation fail with that error without
    /// touching the filesystem.
    fn before(&self, op: &FsOp<'_>) -> io::Result<()>;
    /// Called after `op` ran, with whether it succeeded.
    fn after(&self, op: &FsOp<'_>, ok: bool) {
        let _ = (op, ok);
    }
}

/// What a no-clobber rename did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renamed {
    /// The entry moved.
    Done,
    /// The source no longer exists: somebody else moved it first.
    SourceGone,
    /// The destination already exists; nothing moved.
    DestExists,
}

/// How a handle's effects reach the disk: the one set of seam options that the mailbox, Goblin
/// and mux handles all take, so a test arms a fault or a crash the same way for each.
#[derive(Clone, Default)]
pub struct IoOptions {
    /// fsync or not. Default: [`Durability::Durable`].
    pub durability: Durability,
    /// Observes (and may fail) every filesystem effect; for fault-injection and crash tests.
    /// Default: none.
    pub hook: Option<Arc<dyn FsHook>>,
    /// Never use `renameat2(RENAME_NOREPLACE)`: every no-clobber rename takes the portable
    /// path that filesystems refusing the flag get (spec/mailbox.md §9.9). For tests of that
    /// path on any filesystem. Default: false, or true when the environment variable
    /// `SIGBOX_PORTABLE_RENAME` is `1`.
    pub portable_rename: bool,
    /// Claims by `link`, fsync of the destination, then removal of the source, instead of one
    /// `rename` (spec/mailbox.md §9.10): `Some(true)` always, `Some(false)` never, `None` (the
    /// default) where the root's filesystem does not commit a rename between two directories
    /// whole (ext2, ext3/ext4 without a journal). The
    /// environment variable `SIGBOX_LINK_CLAIMS` (`1` or `0`) overrides `None`.
    pub link_claims: Option<bool>,
}

impl std::fmt::Debug for IoOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoOptions")
            .field("durability", &self.durability)
            .field("hook", &self.hook.is_some())
            .field("portable_rename", &self.portable_rename)
            .finish()
    }
}

impl IoOptions {
    /// Durable, no hook.
    pub fn new() -> IoOptions {
        IoOptions::default()
    }

    /// Sets the durability. Default: [`Durability::Durable`].
    pub fn durability(&mut self, d: Durability) -> &mut Self {
        self.durability = d;
        self
    }

    /// Sets the hook that sees every filesystem effect. Default: none.
    pub fn hook(&mut self, hook: Arc<dyn FsHook>) -> &mut Self {
        self.hook = Some(hook);
        self
    }

    /// Forces the portable no-clobber rename (see [`IoOptions::portable_rename`]).
    pub fn portable_rename(&mut self, on: bool) -> &mut Self {
        self.portable_rename = on;
        self
    }

    /// Forces claims by link (`true`) or by rename (`false`) whatever the filesystem (see
    /// [`IoOptions::link_claims`]).
    pub fn link_claims(&mut self, on: bool) -> &mut Self {
        self.link_claims = Some(on);
        self
    }
}

/// The environment variable that forces the portable rename in every handle of a process.
pub const PORTABLE_RENAME_ENV: &str = "SIGBOX_PORTABLE_RENAME";

/// The environment variable that forces claims by link (`1`) or by rename (`0`) in every
/// handle of a process whose options leave it to the filesystem.
pub const LINK_CLAIMS_ENV: &str = "SIGBOX_LINK_CLAIMS";

/// The rename lock held on the kept descriptor ([`Io::claim_locked`]), with the mutex that
/// keeps this handle's threads apart; released when dropped (the descriptor stays open).
struct ClaimLock<'a> {
    kept: std::sync::MutexGuard<'a, Option<sys::Dir>>,
    held: bool,
}

impl Drop for ClaimLock<'_> {
    fn drop(&mut self) {
        if let (true, Some(d)) = (self.held, self.kept.as_ref()) {
            let _ = rustix::fs::flock(d, rustix::fs::FlockOperation::Unlock);
        }
    }
}

/// What [`Io::link_exclusive`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Linked {
    /// The new name is made; the file's stamp as it was linked.
    Done(Stamp),
    /// The source is gone: somebody else took it.
    SourceGone,
    /// The destination exists; nothing changed.
    DestExists,
    /// The source has more than one link already: another process's claim is under way (or
    /// ended in a crash), or a link was planted; nothing changed.
    Busy,
    /// The source is not a regular file, or the filesystem makes no links: the caller moves
    /// it by rename.
    Unlinkable,
}
/// The seam. One per mailbox handle; it carries the durability mode, the hook and the poison flag.
pub(crate) struct Io {
    durability: Durability,
    hook: Option<Arc<dyn FsHook>>,
    poisoned: AtomicBool,
    /// Modes for what this handle creates, in a shared (group) mailbox: `(dirs, files)`.
    /// `None`: the process umask decides, as for any program.
    shared_modes: Option<(u32, u32)>,
    /// Set once `RENAME_NOREPLACE` was refused (or when forced): no-clobber renames take the
    /// portable path from then on, without asking the filesystem again.
    portable: AtomicBool,
    /// The directory whose `flock` every portable no-clobber rename of this handle's kind
    /// holds (a mailbox: its `tmp/`); `None`: the destination's own directory.
    rename_lock: Option<PathBuf>,
    /// Whether the rename lock's failure was already reported.
    lock_warned: AtomicBool,
    /// Claims by link (spec/mailbox.md §9.10): forced by the options, else decided by the
    /// root's filesystem at the first claim ([`Io::link_claims`]); turned off for good when
    /// the filesystem refuses a link.
    link_claims: std::sync::OnceLock<AtomicBool>,
    /// The options' or the environment's choice, if any.
    link_forced: Option<bool>,
    /// The rename lock's directory, opened at the first claim by link and kept: a claim then
    /// needs no new descriptor (a pass out of descriptors still commits what it claimed). The
    /// mutex keeps two threads of this handle apart, which one `flock` on one open file
    /// cannot.
    claim_lock: std::sync::Mutex<Option<sys::Dir>>,
    /// The directory every path below it is resolved from, never through a symlink
    /// ([`Io::set_root`]); paths outside it are used as given.
    root: std::sync::RwLock<Option<Arc<sys::Root>>>,
    /// When [`Io::refresh_root`] last looked.
    root_checked: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How often [`Io::refresh_root`] looks at most: it runs at every pass, and a pass over an
/// unchanged inbox costs a few system calls, so a look every pass would be most of it.
const ROOT_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Where a path lives: the directory holding it (opened beneath the root) and its name.
type Place<'p> = (sys::Dir, &'p std::ffi::OsStr);

impl Io {
    pub(crate) fn new(opts: &IoOptions) -> Io {
        Io {
            durability: opts.durability,
            hook: opts.hook.clone(),
            poisoned: AtomicBool::new(false),
            shared_modes: None,
            portable: AtomicBool::new(
                opts.portable_rename
                    || std::env::var_os(PORTABLE_RENAME_ENV).is_some_and(|v| v == "1"),
            ),
            rename_lock: None,
            lock_warned: AtomicBool::new(false),
            link_claims: std::sync::OnceLock::new(),
            claim_lock: std::sync::Mutex::new(None),
            link_forced: opts.link_claims.or_else(|| {
                match std::env::var_os(LINK_CLAIMS_ENV)?.to_str()? {
                    "1" => Some(true),
                    "0" => Some(false),
                    _ => None,
                }
            }),
            root: std::sync::RwLock::new(None),
            root_checked: std::sync::Mutex::new(None),
        }
    }

    /// Resolves every later path below `path` through a descriptor of it, never following a
    /// symlink at any component beneath it (spec/mailbox.md §1, "Beneath the root").
    pub(crate) fn set_root(&self, path: &Path) -> Result<()> {
        let root = sys::Root::open(path).map_err(|e| Error::io(path, "cannot open", e))?;
        *self.root.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(root));
        *self.root_checked.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(std::time::Instant::now());
        Ok(())
    }

    /// True when claims move by link (spec/mailbox.md §9.10): as forced, or when the root's
    /// filesystem does not commit a rename between two directories whole. Looked up once, at
    /// the first claim.
    pub(crate) fn link_claims(&self) -> bool {
        self.link_claims
            .get_or_init(|| {
                let on = self.link_forced.unwrap_or_else(|| {
                    self.root()
                        .is_some_and(|r| sys::renames_not_atomic(r.path()))
                });
                if on {
                    tracing::debug!(
                        "claims move by link: renames here are not atomic across directories"
                    );
                }
                AtomicBool::new(on)
            })
            .load(Ordering::Relaxed)
    }

    /// Opens the root again when its path now leads to another directory (the root was moved
    /// and made again, say): a long-lived handle follows its path, as it did before it held a
    /// descriptor; and forgets the kept layout directories that were replaced. At most once a
    /// second ([`ROOT_CHECK`]); the first call after `set_root` only starts the clock. True
    /// when the root changed.
    pub(crate) fn refresh_root(&self) -> Result<bool> {
        let Some(root) = self.root() else {
            return Ok(false);
        };
        {
            let mut checked = self.root_checked.lock().unwrap_or_else(|p| p.into_inner());
            let now = std::time::Instant::now();
            if checked.is_some_and(|t| now.duration_since(t) < ROOT_CHECK) {
                return Ok(false);
            }
            *checked = Some(now);
        }
        if !root.moved() {
            root.verify();
            return Ok(false);
        }
        match self.set_root(root.path()) {
            Ok(()) => Ok(true),
            // Gone, not made again yet: keep the one held until it is.
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn root(&self) -> Option<Arc<sys::Root>> {
        self.root.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The directory holding `path`, and its name; an error names the first component beneath
    /// the root that is a symlink or not a directory.
    fn place<'p>(&self, path: &'p Path) -> Result<Place<'p>> {
        sys::place(self.root().as_ref(), path).map_err(|e| self.resolve_error(path, e, true))
    }

    /// The directory `path` itself, opened as [`Io::place`] opens a parent.
    fn dir(&self, path: &Path) -> Result<sys::Dir> {
        sys::dir_at(self.root().as_ref(), path).map_err(|e| self.resolve_error(path, e, false))
    }

    /// The error for a path that cannot be resolved: a layout component that is a symlink or
    /// not a directory is refused by name ([`ErrorKind::PathEscape`]); anything else is the OS
    /// error (`NotFound` included, which callers read as "gone").
    fn resolve_error(&self, path: &Path, e: io::Error, parent: bool) -> Error {
        use rustix::io::Errno;
        let refused = [Errno::LOOP, Errno::NOTDIR, Errno::XDEV]
            .iter()
            .any(|c| e.raw_os_error() == Some(c.raw_os_error()));
        let (Some(root), true) = (self.root(), refused) else {
            return Error::io(path, "cannot open directory", e);
        };
        // The first component below the root that is not a real directory, for the message.
        let mut at = root.path().to_path_buf();
        let below = root.rel(path).unwrap_or(path);
        let mut comps: Vec<_> = below.components().collect();
        if parent {
            comps.pop();
        }
        let mut what = "not a directory";
        for c in comps {
            at.push(c);
            match std::fs::symlink_metadata(&at).map(|m| sys::EntryKind::of(m.file_type())) {
                Ok(sys::EntryKind::Dir) => continue,
                Ok(kind) => what = kind.describe(),
                Err(_) => {}
            }
            break;
        }
        refused_dir(&at, what)
    }

    /// Makes every portable no-clobber rename of this handle hold a `flock` on `dir`: one lock
    /// for every destination of a mailbox. (A destination's own directory will not do there:
    /// a claim slot is locked by its holder for as long as it holds it.)
    pub(crate) fn set_rename_lock(&mut self, dir: PathBuf) {
        self.rename_lock = Some(dir);
    }

    /// Creates directories and files group-writable (`dirs`, `files` modes), whatever the
    /// umask: for a shared mailbox, where several users' processes move and annotate the same
    /// files.
    pub(crate) fn set_shared(&mut self, dirs: u32, files: u32) {
        self.shared_modes = Some((dirs, files));
    }

    fn apply_mode(&self, path: &Path, mode: u32, file: Option<&File>) -> Result<()> {
        self.effect(FsOp::SetMode(path, mode), || match file {
            Some(f) => sys::set_mode_file(f, mode),
            None => {
                sys::dir_at(self.root().as_ref(), path).and_then(|d| sys::set_mode_dir(&d, mode))
            }
        })
        .map_err(|e| Error::io(path, &format!("cannot set mode {mode:o}"), e))
    }

    fn effect<T>(&self, op: FsOp<'_>, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        if let Some(hook) = &self.hook {
            hook.before(&op)?;
            let r = f();
            hook.after(&op, r.is_ok());
            r
        } else {
            f()
        }
    }

    fn check_poison(&self, path: &Path) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::Poisoned,
                Some(path),
                "refusing to write: an earlier fsync failed on this handle, so what is on disk \
                 is unknown; open a new handle after checking the filesystem",
            ));
        }
        Ok(())
    }

    fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// True after a failed fsync.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// `mkdir`; `Ok(false)` when the directory already exists.
    pub(crate) fn create_dir(&self, path: &Path) -> Result<bool> {
        self.check_poison(path)?;
        let (dir, name) = self.place(path)?;
        match self.effect(FsOp::CreateDir(path), || sys::mkdir_at(&dir, name, 0o777)) {
            Ok(()) => {
                if let Some((dirs, _)) = self.shared_modes {
                    self.apply_mode(path, dirs, None)?;
                }
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && self.is_dir(path) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                Err(self.resolve_error(path, rustix::io::Errno::NOTDIR.into(), false))
            }
            Err(e) => Err(Error::io(path, "cannot create directory", e)),
        }
    }

    /// Creates `dir` and every missing ancestor, outermost first, each durable
    /// ([`Io::create_dir_durable`]);
    /// with `base`, only the ancestors strictly below `base` (which must exist). `Ok(false)`
    /// when nothing was missing.
    pub(crate) fn create_dir_all_synced(&self, dir: &Path, base: Option<&Path>) -> Result<bool> {
        let mut missing = Vec::new();
        let mut d = dir;
        while !d.as_os_str().is_empty()
            && self.stamp(d).is_ok_and(|s| s.is_none())
            && base.is_none_or(|b| d.starts_with(b) && d != b)
        {
            missing.push(d);
            match d.parent() {
                Some(parent) => d = parent,
                None => break,
            }
        }
        let mut created = false;
        for dir in missing.iter().rev() {
            created |= self.create_dir_durable(dir)?;
        }
        Ok(created)
    }

    /// `mkdir`, then (when it created the directory) fsync of the new directory and of its
    /// parent, in that order: the new directory's own entries first, then its name. Without
    /// the first, a power loss can leave the name pointing at a directory whose content never
    /// reached the disk ("directory corrupted" on ext4 without a journal). `Ok(false)` when
    /// the directory already exists.
    pub(crate) fn create_dir_durable(&self, path: &Path) -> Result<bool> {
        if !self.create_dir(path)? {
            return Ok(false);
        }
        self.sync_dir(path)?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            self.sync_dir(parent)?;
        }
        Ok(true)
    }

    /// Creates `path` exclusively, writes `data`, and (when durable) fsyncs it.
    ///
    /// A failed fsync poisons the handle.
    pub(crate) fn write_new(&self, path: &Path, data: &[u8]) -> Result<()> {
        self.check_poison(path)?;
        let (dir, name) = self.place(path)?;
        let mut file = self
            .effect(FsOp::CreateFile(path), || {
                sys::open_at(
                    &dir,
                    name,
                    rustix::fs::OFlags::WRONLY
                        | rustix::fs::OFlags::CREATE
                        | rustix::fs::OFlags::EXCL,
                    0o666,
                )
            })
            .map_err(|e| Error::io(path, "cannot create file", e))?;
        if let Some((_, files)) = self.shared_modes {
            self.apply_mode(path, files, Some(&file))?;
        }
        self.effect(FsOp::Write(path, data), || file.write_all(data))
            .map_err(|e| Error::io(path, "cannot write", e))?;
        self.sync_file(&file, path)
    }

    /// [`Io::replace_tail`] of an existing regular file (never through a symlink), opened for
    /// it.
    pub(crate) fn replace_tail_unsynced(
        &self,
        path: &Path,
        span: (u64, u64),
        data: &[u8],
    ) -> Result<()> {
        self.check_poison(path)?;
        let (dir, name) = self.place(path)?;
        // Never blocking on a FIFO swapped in: only a regular file is opened.
        let file = sys::open_untrusted_at(&dir, name, rustix::fs::OFlags::WRONLY)
            .map_err(|e| Error::io(path, "cannot open for writing", e))?;
        self.replace_tail(&file, path, span, data)
    }

    /// `fdatasync` (when durable). A failed fsync poisons the handle.
    pub(crate) fn sync_data(&self, file: &File, path: &Path) -> Result<()> {
        self.check_poison(path)?;
        if self.durability == Durability::RelaxedNoFsync {
            return Ok(());
        }
        self.effect(FsOp::SyncFile(path), || file.sync_data())
            .map_err(|e| {
                self.poison();
                Error::io(path, "fsync failed; this handle now refuses writes", e)
            })
    }

    fn sync_file(&self, file: &File, path: &Path) -> Result<()> {
        if self.durability == Durability::RelaxedNoFsync {
            return Ok(());
        }
        // A new file's fsync writes its directory's buffers too (ext4 without a journal):
        // under the same lock as a directory's fsync.
        self.effect(FsOp::SyncFile(path), || self.sync_serialized(file))
            .map_err(|e| {
                self.poison();
                Error::io(path, "fsync failed; this handle now refuses writes", e)
            })
    }

    /// fsyncs a directory so that entries created, renamed or removed in it survive a crash.
    ///
    /// A failed fsync poisons the handle; a failure to open the directory (say, no descriptor
    /// left) does not: nothing was attempted.
    pub(crate) fn sync_dir(&self, path: &Path) -> Result<()> {
        self.check_poison(path)?;
        if self.durability == Durability::RelaxedNoFsync {
            return Ok(());
        }
        let dir = self.open_dir(path)?;
        self.sync_dir_file(&dir, path)
    }

    /// Opens a directory for [`Io::sync_dir_file`]: a pass opens the directories its commit will
    /// fsync before it claims anything, so that running out of descriptors can stop it only
    /// before a claim, never between a claim and its commit.
    pub(crate) fn open_dir(&self, path: &Path) -> Result<File> {
        self.dir(path)?
            .into_file()
            .map_err(|e| Error::io(path, "cannot open directory", e))
    }

    /// [`Io::sync_dir`] of a directory opened by [`Io::open_dir`]. A failed fsync poisons the
    /// handle.
    pub(crate) fn sync_dir_file(&self, dir: &File, path: &Path) -> Result<()> {
        self.check_poison(path)?;
        if self.durability == Durability::RelaxedNoFsync {
            return Ok(());
        }
        self.effect(FsOp::SyncDir(path), || self.sync_serialized(dir))
            .map_err(|e| {
                self.poison();
                Error::io(
                    path,
                    "directory fsync failed; this handle now refuses writes",
                    e,
                )
            })
    }

    /// `fsync`, one process of the root at a time where renames are not atomic across
    /// directories (ext2, ext4 without a journal: [`Io::link_claims`]). There a directory's
    /// fsync, and a new file's (which syncs its directory too), writes the buffers on the
    /// directory's list (`fsync_buffers_list`); a second fsync of the same directory that
    /// finds the list emptied by the first returns at once, before the first one's writes have
    /// reached the disk: a `send` could return with its name not yet durable, or a stage's
    /// removal not durable while its inode is used again. The lock is the root directory's
    /// own `flock`, which nothing else takes.
    fn sync_serialized(&self, dir: &File) -> io::Result<()> {
        let root = match self.link_claims() {
            true => self.root(),
            false => None,
        };
        let locked = root.as_ref().is_some_and(|r| {
            rustix::fs::flock(r.as_ref(), rustix::fs::FlockOperation::LockExclusive).is_ok()
        });
        let synced = dir.sync_all();
        if locked && let Some(r) = &root {
            let _ = rustix::fs::flock(r.as_ref(), rustix::fs::FlockOperation::Unlock);
        }
        synced
    }

    /// Renames without replacing the destination.
    pub(crate) fn rename_noreplace(&self, from: &Path, to: &Path) -> Result<Renamed> {
        self.check_poison(from)?;
        let op = FsOp::Rename {
            from,
            to,
            noreplace: true,
        };
        match self.effect(op, || self.rename_exclusive(from, to)) {
            Ok(()) => Ok(Renamed::Done),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !self.parent_missing(from, to) => {
                Ok(Renamed::SourceGone)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Renamed::DestExists),
            Err(e) => Err(match e.downcast::<Error>() {
                Ok(refused) => refused,
                Err(e) => Error::io(from, &format!("cannot rename to {}", to.display()), e),
            }),
        }
    }

    /// The no-clobber rename itself: `renameat2(RENAME_NOREPLACE)`, or where the filesystem
    /// refuses the flag, `lstat` + `rename` while holding the rename lock. Every sigbox process
    /// renaming into the same place takes the same lock, so of two renames to one destination
    /// one finds it taken; `rename` itself gives one winner per source. One name at every
    /// instant: no `link` + `unlink`, so no moment and no crash leaves a second claimable link.
    fn rename_exclusive(&self, from: &Path, to: &Path) -> io::Result<()> {
        let src = self.place_io(from)?;
        let dst = self.place_io(to)?;
        let (src, dst) = ((&src.0, src.1), (&dst.0, dst.1));
        if !self.portable.load(Ordering::Relaxed) {
            if sys::rename_noreplace_at(src, dst)? {
                return Ok(());
            }
            self.portable.store(true, Ordering::Relaxed);
            tracing::debug!(file = %to.display(), "RENAME_NOREPLACE refused: portable renames");
        }
        let _held = self.rename_lock_for(to)?;
        sys::rename_checked_at(src, dst)
    }

    /// Takes the rename lock: the exclusive `flock` that every portable no-clobber rename and
    /// every claim by link of this mailbox holds (on `tmp/`; without a mailbox, on the
    /// destination's directory). `None` where the filesystem has no locks (some network
    /// filesystems), reported once. Never taken twice by one thread: `flock` on a second
    /// descriptor would wait for the first.
    fn rename_lock_for(&self, to: &Path) -> io::Result<Option<File>> {
        let dir = self.rename_lock_dir(to);
        let locked = sys::dir_at(self.root().as_ref(), dir)
            .and_then(sys::Dir::into_file)
            .and_then(|f| f.lock().map(|()| f));
        self.lock_or_warn(dir, locked)
    }

    /// The directory the rename lock is on (see [`Io::rename_lock_for`]).
    fn rename_lock_dir<'p>(&'p self, to: &'p Path) -> &'p Path {
        match &self.rename_lock {
            Some(d) => d.as_path(),
            None => to.parent().unwrap_or(Path::new(".")),
        }
    }

    /// A lock taken, or `None` (reported once) where the filesystem has no locks; a
    /// transient error is an error.
    fn lock_or_warn<T>(&self, dir: &Path, locked: io::Result<T>) -> io::Result<Option<T>> {
        match locked {
            Ok(f) => Ok(Some(f)),
            Err(e) if sys::is_transient(&e) => Err(e),
            Err(e) => {
                // No locks here (some network filesystems): still one winner per source, but
                // two renames of different files to one name could both succeed.
                if !self.lock_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(dir = %dir.display(), error = %e,
                        "cannot lock for renames: no-clobber renames are exclusive on their \
                         source only");
                }
                Ok(None)
            }
        }
    }

    /// Takes the rename lock on a descriptor kept from the first claim by link on: the
    /// layout's own descriptor of `tmp/` where the root keeps one, so that claims (and the
    /// resolution of their second links) need no descriptor of their own, and a pass short of
    /// descriptors fails at its first claim, before anything is claimed. Released when the
    /// guard drops. Only for a mailbox, whose rename lock is one directory (`tmp/`).
    fn claim_locked(&self, to: &Path) -> io::Result<ClaimLock<'_>> {
        let mut kept = self.claim_lock.lock().unwrap_or_else(|p| p.into_inner());
        if kept.is_none() {
            *kept = Some(sys::dir_at(self.root().as_ref(), self.rename_lock_dir(to))?);
        }
        let dir = self.rename_lock_dir(to);
        let held = {
            let d = kept.as_ref().expect("opened above");
            let locked = rustix::fs::flock(d, rustix::fs::FlockOperation::LockExclusive)
                .map_err(io::Error::from);
            self.lock_or_warn(dir, locked)?.is_some()
        };
        Ok(ClaimLock { kept, held })
    }

    /// Removes the name `path` of a file with another name, under the rename lock, only while
    /// the file still has more than one link: of two processes resolving one file's two links
    /// from either side (spec/mailbox.md §9.6), one removes a link, the other finds one link
    /// left and keeps it. False when nothing was removed.
    pub(crate) fn remove_second_link(&self, path: &Path) -> Result<bool> {
        self.check_poison(path)?;
        let _held = self
            .claim_locked(path)
            .map_err(|e| Error::io(path, "cannot lock to remove", e))?;
        match self.stamp(path)? {
            Some(st) if st.nlink >= 2 => self.remove(path),
            _ => Ok(false),
        }
    }

    /// The first step of a claim by link (spec/mailbox.md §9.10): under the rename lock, a
    /// second name `to` for the file at `from`, only when `from` is a regular file with one
    /// link. The lock and the link count make it exclusive: while one claim's link stands, the
    /// source has two links and no other claim links it, so the claim that removes the source
    /// later is the only one holding it. Without a `link` (a filesystem that makes none, or
    /// something else than a regular file) the caller moves the file by rename.
    pub(crate) fn link_exclusive(&self, from: &Path, to: &Path) -> Result<Linked> {
        Ok(self.link_exclusive_holding(from, to)?.0)
    }

    /// [`Io::link_exclusive`], keeping the rename lock until the returned guard drops: a move
    /// that must look whole to every process resolving second links (an archive into
    /// `processed/`, whose link a resolver would otherwise take for an interrupted claim's)
    /// holds it until its source is gone. Nothing that takes the rename lock may run while
    /// the guard is held.
    pub(crate) fn link_exclusive_holding(
        &self,
        from: &Path,
        to: &Path,
    ) -> Result<(Linked, Option<impl Drop + '_>)> {
        self.check_poison(from)?;
        let fail = |e: io::Error| match e.downcast::<Error>() {
            Ok(refused) => refused,
            Err(e) => Error::io(from, &format!("cannot link to {}", to.display()), e),
        };
        let (src, dst) = (
            self.place_io(from).map_err(fail)?,
            self.place_io(to).map_err(fail)?,
        );
        let held = self.claim_locked(to).map_err(fail)?;
        let st = match sys::stat_at(&src.0, src.1) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Linked::SourceGone, None)),
            Err(e) => return Err(fail(e)),
        };
        if st.kind != sys::EntryKind::File {
            return Ok((Linked::Unlinkable, None));
        }
        if st.nlink != 1 {
            return Ok((Linked::Busy, None));
        }
        let linked = match self.effect(FsOp::Link { from, to }, || {
            sys::link_at((&src.0, src.1), (&dst.0, dst.1))
        }) {
            Ok(()) => Linked::Done(st),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !self.parent_missing(from, to) => {
                Linked::SourceGone
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Linked::DestExists,
            Err(e) if sys::is_link_refused(&e) => {
                if let Some(on) = self.link_claims.get() {
                    on.store(false, Ordering::Relaxed);
                }
                tracing::debug!(file = %to.display(), error = %e, "links refused: claims move by rename");
                Linked::Unlinkable
            }
            Err(e) => return Err(fail(e)),
        };
        Ok((linked, Some(held)))
    }

    /// [`Io::place`] inside an effect: a refusal travels as an `io::Error` carrying the
    /// [`Error`] (taken back out by the caller), `NotFound` as itself.
    fn place_io<'p>(&self, path: &'p Path) -> io::Result<Place<'p>> {
        self.place(path)
            .map_err(|e| match e.io_error().map(io::Error::kind) {
                Some(io::ErrorKind::NotFound) => io::ErrorKind::NotFound.into(),
                _ => io::Error::other(e),
            })
    }

    /// Renames, replacing the destination; only for files this handle owns.
    pub(crate) fn rename_replace(&self, from: &Path, to: &Path) -> Result<()> {
        self.check_poison(from)?;
        let op = FsOp::Rename {
            from,
            to,
            noreplace: false,
        };
        self.effect(op, || {
            let (src, dst) = (self.place_io(from)?, self.place_io(to)?);
            sys::rename_at((&src.0, src.1), (&dst.0, dst.1))
        })
        .map_err(|e| match e.downcast::<Error>() {
            Ok(refused) => refused,
            Err(e) => Error::io(from, &format!("cannot rename to {}", to.display()), e),
        })
    }

    /// Opens (creating if needed) a presence lock file. `flock` works on a read-only descriptor,
    /// so a lock file another user created (and may not have made writable) is opened
    /// read-only; one this handle creates gets the shared mode in a shared mailbox.
    pub(crate) fn open_lock(&self, path: &Path) -> Result<File> {
        let (dir, name) = self.place(path)?;
        self.effect(FsOp::OpenLock(path), || {
            let create =
                rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CREATE | rustix::fs::OFlags::EXCL;
            match sys::open_at(&dir, name, create, 0o666) {
                Ok(f) => {
                    if let Some((_, files)) = self.shared_modes {
                        sys::set_mode_file(&f, files)?;
                    }
                    Ok(f)
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => open_lock_file(&dir, name),
                Err(e) => Err(e),
            }
        })
        .map_err(|e| Error::io(path, "cannot open presence lock", e))
    }

    /// Opens (creating if needed) a lock file its holder also writes to (who holds it), read
    /// and write (read-only when it is another user's), never through a symlink, without
    /// blocking on a FIFO, and only when it is a regular file.
    pub(crate) fn open_lock_rw(&self, path: &Path) -> Result<File> {
        let (dir, name) = self.place(path)?;
        self.effect(FsOp::OpenLock(path), || {
            use rustix::fs::OFlags;
            let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NONBLOCK | OFlags::NOCTTY;
            let file = match sys::open_at(&dir, name, flags, 0o666) {
                // Another user's lock file: `flock` works on a read-only descriptor too (the
                // holder then cannot say who it is).
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    open_lock_file(&dir, name)?
                }
                Err(e) if is_symlink_error(&e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "a symlink (a lock must be a plain file; remove what is there)",
                    ));
                }
                other => other?,
            };
            if !file.metadata()?.is_file() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "not a regular file (a lock must be a plain file; remove what is there)",
                ));
            }
            Ok(file)
        })
        .map_err(|e| Error::io(path, "cannot open the lock", e))
    }

    /// Opens the directory `path` (never through a symlink) and takes an exclusive `flock` on
    /// it without blocking: `Ok(None)` when another open file description holds it or the
    /// directory is gone. The lock lasts as long as the returned descriptor; a process that
    /// dies releases it. Not an effect: locks do not survive a crash and change nothing on
    /// disk.
    pub(crate) fn lock_dir(&self, path: &Path) -> Result<Option<File>> {
        let file = match self.dir(path) {
            Ok(d) => d
                .into_file()
                .map_err(|e| Error::io(path, "cannot open directory", e))?,
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(Error::io(path, "cannot lock directory", e)),
        }
    }

    /// True when `path` is a real directory (beneath the root: reached without a symlink and
    /// not itself one).
    pub(crate) fn is_dir(&self, path: &Path) -> bool {
        self.stamp(path)
            .is_ok_and(|s| s.is_some_and(|s| s.kind == sys::EntryKind::Dir))
    }

    /// True when another open file description holds a lock on `path` (a non-blocking
    /// exclusive `flock` fails); false when nobody does or the file cannot be opened. Takes
    /// and releases the lock at once.
    pub(crate) fn is_locked(&self, path: &Path) -> bool {
        let Ok(file) = self
            .place(path)
            .ok()
            .map_or(Err(io::ErrorKind::NotFound.into()), |(d, n)| {
                open_lock_file(&d, n)
            })
        else {
            return false;
        };
        matches!(file.try_lock(), Err(fs::TryLockError::WouldBlock))
    }

    /// `unlink`; `Ok(false)` when the file is already gone.
    pub(crate) fn remove(&self, path: &Path) -> Result<bool> {
        self.check_poison(path)?;
        match self.effect(FsOp::Remove(path), || {
            let (dir, name) = self.place_io(path)?;
            sys::unlink_at(&dir, name)
        }) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(match e.downcast::<Error>() {
                Ok(refused) => refused,
                Err(e) => Error::io(path, "cannot remove", e),
            }),
        }
    }

    /// Removes a file sigbox owns (a stage, a marker, an ack, a copy) whose name and content
    /// may be durable, and makes its removal durable: when it has one link and content, it is
    /// first emptied and synced (`ftruncate` to 0, `fsync`), then unlinked, then its directory
    /// is synced. On ext4 without a journal a directory's fsync does not write the freed
    /// inode: a power loss can leave the inode in use with no name, which a boot-time
    /// `fsck -p` clears by itself only when it is empty ("unattached zero-length inode"); one
    /// with content stops the boot. `false` when the file was already gone.
    pub(crate) fn remove_owned(&self, path: &Path) -> Result<bool> {
        let removed = self.remove_emptied(path)?;
        if removed && let Some(dir) = path.parent() {
            self.sync_dir(dir)?;
        }
        Ok(removed)
    }

    /// [`Io::remove_owned`] without the fsync of the directory, for a caller that removes
    /// several files of one directory and syncs it once after.
    pub(crate) fn remove_emptied(&self, path: &Path) -> Result<bool> {
        self.check_poison(path)?;
        // Only where a directory's fsync leaves the freed inode unwritten: the filesystems
        // whose claims go by link (a journal writes the two together).
        if self.durability == Durability::Durable && self.link_claims() {
            let (dir, name) = match self.place(path) {
                Ok(p) => p,
                Err(e)
                    if e.io_error()
                        .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
                {
                    return Ok(false);
                }
                Err(e) => return Err(e),
            };
            match sys::open_untrusted_at(&dir, name, rustix::fs::OFlags::WRONLY) {
                Ok(file) => {
                    let meta = file
                        .metadata()
                        .map_err(|e| Error::io(path, "cannot stat", e))?;
                    // A second link keeps the inode (and its content) alive: only the name goes.
                    if std::os::unix::fs::MetadataExt::nlink(&meta) == 1 && meta.len() > 0 {
                        self.effect(FsOp::ReplaceTail(path, 0, &[]), || file.set_len(0))
                            .map_err(|e| Error::io(path, "cannot empty", e))?;
                        self.sync_file(&file, path)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(e) if sys::is_transient(&e) => return Err(Error::io(path, "cannot open", e)),
                // Not a regular file, or not ours to open: removed as it is.
                Err(_) => {}
            }
        }
        self.remove(path)
    }

    /// Lists a directory. A missing directory lists as empty when `missing_ok`.
    pub(crate) fn list(&self, dir: &Path, missing_ok: bool) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        let fd = match self.dir(dir) {
            Ok(fd) => fd,
            Err(e)
                if missing_ok
                    && e.io_error()
                        .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                return Ok(out);
            }
            Err(e) => return Err(e),
        };
        // A description of its own: a kept directory's offset is shared.
        let fd = fd
            .into_file()
            .map_err(|e| Error::io(dir, "cannot open directory", e))?;
        match sys::list_fd(&fd, |name, kind| out.push(Entry { name, kind })) {
            Ok(()) => Ok(out),
            Err(e) => Err(Error::io(dir, "cannot list directory", e)),
        }
    }

    /// Reads a file from a directory that strangers write to: never follows a symlink, never
    /// blocks on a FIFO, refuses anything but a regular file with one link, and reads at most
    /// `cap` bytes.
    pub(crate) fn read_untrusted(&self, path: &Path, cap: u64) -> Result<ReadOutcome> {
        let (dir, name) = match self.place(path) {
            Ok(p) => p,
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                return Ok(ReadOutcome::Gone);
            }
            Err(e) => return Err(e),
        };
        let file = match sys::open_untrusted_at(&dir, name, rustix::fs::OFlags::RDONLY) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(ReadOutcome::Gone),
            Err(e) if is_symlink_error(&e) => return Ok(ReadOutcome::NotRegular("a symlink")),
            Err(e) if sys::is_transient(&e) => return Err(Error::io(path, "cannot open", e)),
            Err(e) => return Ok(ReadOutcome::Unreadable(format!("cannot open: {e}"))),
        };
        read_checked(&file, cap).map_err(|e| Error::io(path, "cannot read", e))
    }

    /// [`Io::read_untrusted`] for a file this handle has just claimed (renamed into
    /// `processed/`), keeping one read-write descriptor open for its handling record
    /// ([`Io::replace_tail`]). The descriptor comes back only with `ReadOutcome::Bytes`. When the file
    /// cannot be opened for writing (another user's private file, anything not a regular
    /// file), it is read as [`Io::read_untrusted`] reads it, without a descriptor.
    pub(crate) fn read_claimed(
        &self,
        path: &Path,
        cap: u64,
    ) -> Result<(ReadOutcome, Option<File>)> {
        let (dir, name) = match self.place(path) {
            Ok(p) => p,
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                return Ok((ReadOutcome::Gone, None));
            }
            Err(e) => return Err(e),
        };
        let access = rustix::fs::OFlags::RDWR;
        let file = match sys::open_untrusted_at(&dir, name, access) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((ReadOutcome::Gone, None)),
            Err(e) if sys::is_transient(&e) => return Err(Error::io(path, "cannot open", e)),
            Err(_) => return Ok((self.read_untrusted(path, cap)?, None)),
        };
        let r = read_checked(&file, cap).map_err(|e| Error::io(path, "cannot read", e))?;
        let keep = matches!(r, ReadOutcome::Bytes(..)).then_some(file);
        Ok((r, keep))
    }

    /// Replaces the bytes of `file` (opened by [`Io::read_claimed`]) from `at` to its end
    /// (`len` bytes long, as read) with `data`, without a sync: the caller fdatasyncs it when
    /// it must ([`Io::sync_data`]). One `pwrite`, and an `ftruncate` only when `data` ends
    /// before the old end.
    pub(crate) fn replace_tail(
        &self,
        file: &File,
        path: &Path,
        (at, len): (u64, u64),
        data: &[u8],
    ) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.check_poison(path)?;
        self.effect(FsOp::ReplaceTail(path, at, data), || {
            file.write_all_at(data, at)?;
            let end = at + data.len() as u64;
            if len > end {
                file.set_len(end)?;
            }
            Ok(())
        })
        .map_err(|e| Error::io(path, "cannot record the handling in", e))
    }

    /// Sets the mtime of `file` (at `path`) to now, so that it reads as written now.
    pub(crate) fn touch(&self, file: &File, path: &Path) -> Result<()> {
        self.check_poison(path)?;
        self.effect(FsOp::Touch(path), || {
            file.set_modified(std::time::SystemTime::now())
        })
        .map_err(|e| Error::io(path, "cannot set the modification time of", e))
    }

    /// `lstat`, as a [`Stamp`]; `None` when the file is gone.
    pub(crate) fn stamp(&self, path: &Path) -> Result<Option<Stamp>> {
        let r = match self.root().as_ref().and_then(|r| r.rel(path)) {
            // The root itself: as opened.
            Some(rel) if rel.as_os_str().is_empty() => self
                .dir(path)
                .and_then(|d| sys::stat_dir(&d).map_err(|e| Error::io(path, "cannot stat", e)))
                .map(Some),
            _ => match self.place(path) {
                Ok((dir, name)) => sys::stat_at(&dir, name)
                    .map(Some)
                    .map_err(|e| Error::io(path, "cannot stat", e)),
                Err(e) => Err(e),
            },
        };
        match r {
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                Ok(None)
            }
            other => other,
        }
    }

    /// `rename` reports `ENOENT` both for a vanished source and a missing destination
    /// directory; only the first is a lost race.
    fn parent_missing(&self, from: &Path, to: &Path) -> bool {
        let missing = |p: &Path| p.parent().is_some_and(|d| !self.is_dir(d));
        missing(from) || missing(to)
    }
}

/// The refusal of `path`, which is `what` (a symlink, a regular file, ...) where a directory of
/// a root's layout belongs ([`ErrorKind::PathEscape`]).
pub(crate) fn refused_dir(path: &Path, what: &str) -> Error {
    Error::new(
        ErrorKind::PathEscape,
        Some(path),
        format!(
            "is {what} where a directory belongs: sigbox never follows a link beneath the root \
             and touches nothing through it; make it a real directory"
        ),
    )
}

/// Opens an existing presence lock file: never through a symlink, never blocking (a FIFO
/// planted there would hang every pass), and only a regular file.
fn open_lock_file(dir: &sys::Dir, name: &std::ffi::OsStr) -> io::Result<File> {
    let file = match sys::open_untrusted_at(dir, name, rustix::fs::OFlags::RDONLY) {
        Err(e) if is_symlink_error(&e) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a symlink (a presence lock must be a plain file; remove what is there)",
            ));
        }
        other => other?,
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a presence lock must be a plain file; remove what is there)",
        ));
    }
    Ok(file)
}

fn is_symlink_error(e: &io::Error) -> bool {
    // O_NOFOLLOW on a symlink gives ELOOP on Linux and the BSDs (EMLINK on some).
    matches!(e.raw_os_error(), Some(code) if code == rustix::io::Errno::LOOP.raw_os_error()
        || code == rustix::io::Errno::MLINK.raw_os_error())
}

#[cfg(test)]
mod tests;
