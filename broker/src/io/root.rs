//! Where paths are resolved (spec/mailbox.md §9.9): the root opened once and every path below
//! it reached beneath it, never through a symlink; a root moved or replaced is followed.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Io, Place, ROOT_CHECK, refused_dir};
use crate::error::{Error, Result};
use crate::sys::{self};

impl Io {
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

    /// Forgets, at once, every kept layout directory that is no longer the one at its name
    /// below the root ([`sys::Root::verify`]): before each group of claims and each
    /// acknowledgement, so that a layout directory moved or replaced while a pass was handing
    /// a group over (a reader slow to take it, for minutes) takes no later claim with it.
    pub(crate) fn verify_kept(&self) {
        if let Some(root) = self.root() {
            root.verify();
        }
    }

    pub(super) fn root(&self) -> Option<Arc<sys::Root>> {
        self.root.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The directory holding `path`, and its name; an error names the first component beneath
    /// the root that is a symlink or not a directory.
    pub(super) fn place<'p>(&self, path: &'p Path) -> Result<Place<'p>> {
        sys::place(self.root().as_ref(), path).map_err(|e| self.resolve_error(path, e, true))
    }

    /// [`Io::place`] inside an effect: a refusal travels as an `io::Error` carrying the
    /// [`Error`] (taken back out by the caller), `NotFound` as itself.
    pub(super) fn place_io<'p>(&self, path: &'p Path) -> io::Result<Place<'p>> {
        self.place(path)
            .map_err(|e| match e.io_error().map(io::Error::kind) {
                Some(io::ErrorKind::NotFound) => io::ErrorKind::NotFound.into(),
                _ => io::Error::other(e),
            })
    }

    /// The directory `path` itself, opened as [`Io::place`] opens a parent.
    pub(super) fn dir(&self, path: &Path) -> Result<sys::Dir> {
        sys::dir_at(self.root().as_ref(), path).map_err(|e| self.resolve_error(path, e, false))
    }

    /// The error for a path that cannot be resolved: a layout component that is a symlink or
    /// not a directory is refused by name ([`ErrorKind::PathEscape`]); anything else is the OS
    /// error (`NotFound` included, which callers read as "gone").
    pub(super) fn resolve_error(&self, path: &Path, e: io::Error, parent: bool) -> Error {
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
}
