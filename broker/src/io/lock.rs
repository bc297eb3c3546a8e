//! Locks (spec/mailbox.md §7, §9.2): presence lock files and directory `flock`s, taken and
//! probed.

use std::fs::{self, File};
use std::io::{self};
use std::path::Path;

use super::read::is_symlink_error;
use super::{FsOp, Io};
use crate::error::{Error, Result};
use crate::sys::{self};

/// How long [`Io::wait_lock_dir`] waits while the lock's holder runs: it holds it for a few
/// reads, a move and its fsyncs.
const DIR_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// What [`Io::wait_lock_dir`] found.
#[derive(Debug)]
pub(crate) enum DirLock {
    /// Locked, for as long as the descriptor lives.
    Held {
        /// The locked descriptor.
        _lock: File,
    },
    /// The directory is gone.
    Gone,
    /// Another process holds it: stopped, or for longer than the wait.
    Busy,
}

impl DirLock {
    /// True unless another process holds the lock.
    pub(crate) fn had(&self) -> bool {
        !matches!(self, DirLock::Busy)
    }
}

impl Io {
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
        let Some(file) = self.open_dir_to_lock(path)? else {
            return Ok(None);
        };
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(Error::io(path, "cannot lock directory", e)),
        }
    }

    /// The directory `path` opened (never through a symlink) for a `flock`; `None` when it is
    /// gone.
    fn open_dir_to_lock(&self, path: &Path) -> Result<Option<File>> {
        match self.dir(path) {
            Ok(d) => d
                .into_file()
                .map(Some)
                .map_err(|e| Error::io(path, "cannot open directory", e)),
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// [`Io::lock_dir`], waiting for the lock while another holds it, for a decision made
    /// across processes in a few steps (a broadcast's archive against the take-back of one of
    /// its acks, spec/mailbox.md §9.4). Waited for at most [`DIR_LOCK_WAIT`], and not at all
    /// once its holder is stopped (§9.11): the caller then leaves the decision to a later pass.
    pub(crate) fn wait_lock_dir(&self, path: &Path) -> Result<DirLock> {
        let Some(file) = self.open_dir_to_lock(path)? else {
            return Ok(DirLock::Gone);
        };
        match sys::lock_bounded(&file, DIR_LOCK_WAIT, true) {
            Ok(sys::Bounded::Held) => Ok(DirLock::Held { _lock: file }),
            Ok(sys::Bounded::Busy(holders)) => {
                tracing::warn!(dir = %path.display(), holders = %sys::describe_holders(&holders),
                    "a lock another process holds: what it decides is left for a later pass");
                Ok(DirLock::Busy)
            }
            Err(e) => Err(Error::io(path, "cannot lock directory", e)),
        }
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
