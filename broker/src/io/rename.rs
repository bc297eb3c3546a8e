//! No-clobber renames and links (spec/mailbox.md §9.2, §9.10), with the locks that make them
//! exclusive where the filesystem cannot: the rename lock and the claim lock.

use std::fs::File;
use std::io::{self};
use std::path::Path;
use std::sync::atomic::Ordering;

use super::{FsOp, Io, Renamed};
use crate::error::{Error, Result};
use crate::sys::{self, Stamp};

/// How long a claim by link, or the removal of a second link, waits for a signal file's own
/// lock while the process holding it runs ([`Io::lock_file`]): a holder keeps it for one
/// link, or one link, fsync and unlink.
const FILE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// How long a portable no-clobber rename waits for the rename lock while its holder runs.
const RENAME_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A signal file's own lock, held (spec/mailbox.md §9.11): an exclusive `flock` on its inode,
/// released when dropped. Only the processes that work on that one file ever wait for it.
pub(crate) struct FileLock {
    _file: File,
}

/// What [`Io::lock_file`] found.
enum FileLocked {
    /// Locked; the file's stamp under the lock.
    Held(FileLock, Stamp),
    /// Nothing there.
    Gone,
    /// Not a regular file, or one this process cannot open: nothing to lock.
    Unlockable,
    /// Another process holds the file's lock (stopped, or for longer than the wait).
    Busy(Vec<sys::Holder>),
}

/// What [`Io::remove_second_link`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SecondLink {
    /// The name is gone; the file keeps its other link.
    Removed,
    /// Nothing removed: the file has one link (or none) by now.
    Kept,
    /// Nothing removed: another process holds the file's lock (a claim under way, or a
    /// resolution of the same links from the other side) and is stopped, or held it for
    /// longer than the wait. The file is left as it is, for a later pass.
    Busy(Vec<sys::Holder>),
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

impl Io {
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

    /// Takes the rename lock: the exclusive `flock` that every portable no-clobber rename of
    /// this mailbox holds (on `tmp/`; without a mailbox, on the destination's directory).
    /// `None` where the filesystem has no locks (some network filesystems), reported once.
    /// Waited for at most [`RENAME_LOCK_WAIT`], and not at all once its holder is stopped:
    /// then the rename fails with an error naming the holder (spec/mailbox.md §9.11).
    fn rename_lock_for(&self, to: &Path) -> io::Result<Option<File>> {
        let dir = self.rename_lock_dir(to);
        let file = sys::dir_at(self.root().as_ref(), dir).and_then(sys::Dir::into_file)?;
        match sys::lock_bounded(&file, RENAME_LOCK_WAIT, true) {
            Ok(sys::Bounded::Held) => Ok(Some(file)),
            Ok(sys::Bounded::Busy(holders)) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "the rename lock on {} is held by {}; nothing was moved",
                    dir.display(),
                    sys::describe_holders(&holders)
                ),
            )),
            Err(e) => self.lock_or_warn(dir, Err::<File, _>(e)),
        }
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

    /// Takes the lock of the signal file at `path` (spec/mailbox.md §9.11): an exclusive
    /// `flock` on its inode, which every claim by link of that file and every removal of one
    /// of its links holds, from whichever of its names. Opened never through a symlink and
    /// without blocking (a FIFO opens at once; a socket does not open), then looked at through
    /// the descriptor: only a regular file is locked. A claim only ever meets a file its pass
    /// listed and read as a regular file; a device node put in its place takes root, and
    /// opening one without reading it is all this does. Waited for at most
    /// [`FILE_LOCK_WAIT`], and not at all once its holder is stopped. Two threads of one
    /// process are kept apart too: each opens the file anew, and `flock`s on two open file
    /// descriptions exclude each other. Four system calls (`openat`, `flock`, `fstat`,
    /// `close`), where the rename lock it replaces took three.
    fn lock_file(&self, place: (&sys::Dir, &std::ffi::OsStr)) -> io::Result<FileLocked> {
        let file = match sys::open_untrusted_at(place.0, place.1, rustix::fs::OFlags::RDONLY) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(FileLocked::Gone),
            // EMFILE, ENFILE: no descriptor left, which a claim by rename does not need.
            Err(e) if sys::is_transient(&e) && !matches!(e.raw_os_error(), Some(23 | 24)) => {
                return Err(e);
            }
            // A symlink, a socket, another user's private file, or no descriptor left (a
            // claim by rename needs none).
            Err(_) => return Ok(FileLocked::Unlockable),
        };
        match sys::lock_bounded(&file, FILE_LOCK_WAIT, true) {
            Ok(sys::Bounded::Held) => {}
            Ok(sys::Bounded::Busy(holders)) => return Ok(FileLocked::Busy(holders)),
            // No locks on this filesystem: the link count alone, as where none were taken.
            Err(e) if !sys::is_transient(&e) => {
                if !self.lock_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "cannot lock signal files: claims by link rely on link counts alone");
                }
            }
            Err(e) => return Err(e),
        }
        // What it is and its link count, under the lock: a claim's link made meanwhile is
        // seen. (A FIFO locked a moment harms nothing.)
        let st = sys::stamp(&file.metadata()?);
        if st.kind != sys::EntryKind::File {
            return Ok(FileLocked::Unlockable);
        }
        Ok(FileLocked::Held(FileLock { _file: file }, st))
    }

    /// Removes the name `path` of a file with another name, under the file's own lock, only
    /// while the file still has more than one link: of two processes resolving one file's two
    /// links from either side (spec/mailbox.md §9.6), one removes a link, the other finds one
    /// link left and keeps it. False when nothing was removed.
    pub(crate) fn remove_second_link(&self, path: &Path) -> Result<bool> {
        Ok(self.remove_second_link_or_busy(path)? == SecondLink::Removed)
    }

    /// [`Io::remove_second_link`], saying when another process holds the file's lock.
    pub(crate) fn remove_second_link_or_busy(&self, path: &Path) -> Result<SecondLink> {
        self.check_poison(path)?;
        let fail = |e: io::Error| Error::io(path, "cannot lock to remove", e);
        let place = self.place_io(path).map_err(fail)?;
        let _held = match self.lock_file((&place.0, place.1)).map_err(fail)? {
            FileLocked::Held(lock, st) if st.nlink >= 2 => lock,
            FileLocked::Held(..) | FileLocked::Gone | FileLocked::Unlockable => {
                return Ok(SecondLink::Kept);
            }
            FileLocked::Busy(holders) => return Ok(SecondLink::Busy(holders)),
        };
        Ok(match self.remove(path)? {
            true => SecondLink::Removed,
            false => SecondLink::Kept,
        })
    }

    /// The first step of a claim by link (spec/mailbox.md §9.10): under the file's own lock
    /// ([`Io::lock_file`]), a second name `to` for the file at `from`, only when `from` is a
    /// regular file with one link. The lock and the link count make it exclusive: while one
    /// claim's link stands, the source has two links and no other claim links it, so the claim
    /// that removes the source later is the only one holding it. Without a `link` (a filesystem
    /// that makes none, or something else than a regular file) the caller moves the file by
    /// rename. A file whose lock another process holds (stopped, or past the wait) is
    /// [`Linked::Busy`], as one with a second link is: only its own claimers ever wait for it.
    ///
    /// The file's lock is kept until the returned guard drops: a move that must look whole to
    /// every process resolving second links (an archive into `processed/`, whose link a
    /// resolver would otherwise take for an interrupted claim's) holds it until its source is
    /// gone; a caller that does not drops it at once. Nothing that takes the same file's lock
    /// may run in this thread while the guard is held.
    pub(crate) fn link_exclusive(
        &self,
        from: &Path,
        to: &Path,
    ) -> Result<(Linked, Option<FileLock>)> {
        self.check_poison(from)?;
        let fail = |e: io::Error| match e.downcast::<Error>() {
            Ok(refused) => refused,
            Err(e) => Error::io(from, &format!("cannot link to {}", to.display()), e),
        };
        let (src, dst) = (
            self.place_io(from).map_err(fail)?,
            self.place_io(to).map_err(fail)?,
        );
        let (held, st) = match self.lock_file((&src.0, src.1)).map_err(fail)? {
            FileLocked::Held(lock, st) => (lock, st),
            FileLocked::Gone => return Ok((Linked::SourceGone, None)),
            FileLocked::Unlockable => return Ok((Linked::Unlinkable, None)),
            FileLocked::Busy(holders) => {
                if holders.iter().any(sys::Holder::idle) {
                    tracing::warn!(file = %from.display(), holders = %sys::describe_holders(&holders),
                        "a signal is held by a stopped process's claim: it waits for that process");
                }
                return Ok((Linked::Busy, None));
            }
        };
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

    /// `rename` reports `ENOENT` both for a vanished source and a missing destination
    /// directory; only the first is a lost race.
    fn parent_missing(&self, from: &Path, to: &Path) -> bool {
        let missing = |p: &Path| p.parent().is_some_and(|d| !self.is_dir(d));
        missing(from) || missing(to)
    }
}
