//! The filesystem seam: every filesystem effect of the broker goes through [`Io`].
//!
//! Effects (creating directories and files, writing, fsync, rename, unlink) call an optional
//! [`FsHook`] first, so that tests can record them, inject faults, or freeze the filesystem at
//! the n-th step to simulate a crash. Reads and listings pass the hook's [`FsHook::read`], which
//! may fail them or cut them short. Nothing else in the crate touches the filesystem for
//! writing. One type, [`Io`], its parts by role:
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Io`], [`IoOptions`], [`FsOp`], [`FsHook`], durability and poisoning |
//! | `root.rs` | the root, opened once; every path resolved beneath it, never through a symlink |
//! | `write.rs` | create, write, replace a record's tail, sync, remove |
//! | `rename.rs` | no-clobber rename and link, with the rename and claim locks |
//! | `order.rs` | a change and its fsyncs under one lock, removed inodes kept until durable |
//! | `lock.rs` | presence lock files and directory `flock`s |
//! | `read.rs` | reads of files strangers write ([`ReadOutcome`]), listings, `lstat` probes |

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, ErrorKind, Result};
use crate::sys::{self};

mod lock;
mod order;
mod read;
mod rename;
mod root;
mod write;

pub(crate) use lock::DirLock;
pub(crate) use read::{ReadOutcome, is_hard_link_reason};
pub(crate) use rename::{Linked, SecondLink};

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
    /// Sets the mtime of the file at `path` (`futimens`): to now, for a file sigbox put back
    /// where it was, which reads as written now, so it settles again (spec/mailbox.md §2.4);
    /// back to what it was, for a record ordered by its mtime (§4) that sigbox wrote into.
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
    /// One `read` of the file at `path` (a signal, a record, a marker): shown to
    /// [`FsHook::read`] only, never to `before` or `after`.
    Read(&'a Path),
    /// The listing of the directory at `path`: shown to [`FsHook::read`] only.
    List(&'a Path),
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
    /// Called before each read ([`FsOp::Read`], asking for up to `len` bytes) and each listing
    /// ([`FsOp::List`], `len` 0). Returns how many bytes the read may return (fewer than `len`
    /// cuts it short, as a read the kernel ends early), or the error it fails with. Reads are
    /// not effects: `before` and `after` never see them, so a hook that counts steps counts
    /// effects alone. The default lets every read through whole.
    fn read(&self, op: &FsOp<'_>, len: usize) -> io::Result<usize> {
        let _ = op;
        Ok(len)
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
    /// The directory every path below it is resolved from, never through a symlink
    /// ([`Io::set_root`]); paths outside it are used as given.
    root: std::sync::RwLock<Option<Arc<sys::Root>>>,
    /// When [`Io::refresh_root`] last looked.
    root_checked: std::sync::Mutex<Option<std::time::Instant>>,
    /// Files this handle unlinked, each kept open (`O_PATH`) with the directory it was in,
    /// until that directory is synced (`order.rs`).
    pins: std::sync::Mutex<Vec<(PathBuf, File)>>,
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
            link_forced: opts.link_claims.or_else(|| {
                match std::env::var_os(LINK_CLAIMS_ENV)?.to_str()? {
                    "1" => Some(true),
                    "0" => Some(false),
                    _ => None,
                }
            }),
            root: std::sync::RwLock::new(None),
            root_checked: std::sync::Mutex::new(None),
            pins: std::sync::Mutex::new(Vec::new()),
        }
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

#[cfg(test)]
mod tests;
