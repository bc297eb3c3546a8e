//! No-clobber renames and links (spec/mailbox.md §9.2, §9.10), with the locks that make them
//! exclusive where the filesystem cannot: the rename lock and the claim lock.

use std::fs::File;
use std::io::{self};
use std::path::Path;
use std::sync::atomic::Ordering;

use super::{FsOp, Io, Renamed};
use crate::error::{Error, Result};
use crate::sys::{self, Stamp};

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
    ///
    /// The rename lock is kept until the returned guard drops: a move that must look whole to
    /// every process resolving second links (an archive into `processed/`, whose link a
    /// resolver would otherwise take for an interrupted claim's) holds it until its source is
    /// gone; a caller that does not drops it at once. Nothing that takes the rename lock may
    /// run while the guard is held.
    pub(crate) fn link_exclusive(
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
