//! The order in which a change reaches the disk where nothing orders it for sigbox (ext2, ext4
//! without a journal: [`Io::link_claims`]; spec/mailbox.md §9.1).
//!
//! Two rules, each closing a way a power loss there stopped the boot-time check or brought a
//! removed name back on another file:
//!
//! - **A change and its own fsyncs under one lock** ([`Io::change`]): a new file's name, made
//!   in a shared directory, reaches the disk when any process fsyncs that directory, and its
//!   inode only when its own fsync runs. A change (stage, write, fsync, rename, fsync of the
//!   directory; a directory made and synced; a file emptied, synced, unlinked and its
//!   directory synced) holds the root's fsync lock from its first step to its last, and every
//!   other process's fsync waits for it: no fsync of another process writes a name whose
//!   inode is not on the disk yet. The lock binds nobody for long: it is waited for at most
//!   [`SYNC_LOCK_WAIT`] and not at all once its holder is stopped; a change that
//!   cannot have it goes on without it, each of its fsyncs followed by a `syncfs`.
//! - **A removed file's inode is kept until its removal is durable** ([`Io::remove`] pins it):
//!   an inode freed by an `unlink` can be given to the next file made on that filesystem, by
//!   any process, before the directory's fsync writes the removal; a power loss then brings the
//!   old name back on the new file (a second link to a signal, or a name for a directory,
//!   which stops the check). The unlink keeps an `O_PATH` descriptor of the file (which keeps
//!   the inode in use) until this handle fsyncs that directory, or drops.

use std::cell::Cell;
use std::fs::File;
use std::path::{Path, PathBuf};

use super::{Durability, Io};
use crate::error::Result;
use crate::sys::{self};

thread_local! {
    /// What the change this thread runs holds ([`Io::change`]): `Some(true)` the root's fsync
    /// lock, `Some(false)` nothing (its holder is stopped or kept it past the wait), `None`
    /// no change under way.
    static IN_CHANGE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// How long an fsync, or a change, waits for the root's fsync lock while its holder runs: a
/// holder keeps it for one fsync, or one change.
pub(super) const SYNC_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// How many removed files a handle keeps pinned before it fsyncs their directories at once:
/// each pin is a descriptor, so at most a sixteenth of the process's descriptor limit (one
/// under `ulimit -n 17`), and 64 at most.
pub(super) const MAX_PINS: usize = 64;

/// [`MAX_PINS`] within this process's descriptor limit.
fn max_pins() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
            let share = nofile.map_or(MAX_PINS, |n| usize::try_from(n / 16).unwrap_or(MAX_PINS));
            share.clamp(1, MAX_PINS)
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        MAX_PINS
    })
}

/// What an fsync of this thread does about the root's fsync lock.
pub(super) enum Ordered {
    /// No change under way: the fsync takes the lock itself.
    Alone,
    /// The change under way holds the lock: the fsync just runs.
    Held,
    /// The change under way runs without the lock: the fsync is followed by a `syncfs`.
    Unlocked,
}

/// [`Ordered`] for the fsync about to run on this thread.
pub(super) fn ordered() -> Ordered {
    match IN_CHANGE.get() {
        None => Ordered::Alone,
        Some(true) => Ordered::Held,
        Some(false) => Ordered::Unlocked,
    }
}

/// Resets the thread's change state and releases the lock when the change ends, also by a
/// panic.
struct ChangeGuard {
    root: Option<std::sync::Arc<sys::Root>>,
}

impl Drop for ChangeGuard {
    fn drop(&mut self) {
        IN_CHANGE.set(None);
        if let Some(root) = &self.root {
            let _ = rustix::fs::flock(root.as_ref(), rustix::fs::FlockOperation::Unlock);
        }
    }
}

impl Io {
    /// Runs `f`, a change whose effects and fsyncs must reach the disk with no fsync of
    /// another process in between, under the root's fsync lock (the module's first rule).
    /// Anywhere else (a journal orders the change, or nothing is synced), and inside a change
    /// already under way, `f` just runs.
    pub(crate) fn change<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if IN_CHANGE.get().is_some()
            || self.durability != Durability::Durable
            || !self.link_claims()
        {
            return f();
        }
        let Some(root) = self.root() else {
            return f();
        };
        let guard = match sys::lock_bounded(root.as_ref(), SYNC_LOCK_WAIT, true) {
            Ok(sys::Bounded::Held) => {
                IN_CHANGE.set(Some(true));
                ChangeGuard { root: Some(root) }
            }
            Ok(sys::Bounded::Busy(holders)) => {
                tracing::debug!(holders = %sys::describe_holders(&holders),
                    "the root's fsync lock is held: the change goes on without it");
                IN_CHANGE.set(Some(false));
                ChangeGuard { root: None }
            }
            // No locks on this filesystem: nothing to order by.
            Err(_) => return f(),
        };
        let out = f();
        drop(guard);
        out
    }

    /// Whether an unlink here pins the removed file's inode (the module's second rule).
    pub(super) fn pins_removals(&self) -> bool {
        cfg!(any(target_os = "linux", target_os = "android"))
            && self.durability == Durability::Durable
            && self.link_claims()
    }

    /// Keeps `file` (an `O_PATH` descriptor of a file just unlinked from `dir`) until `dir` is
    /// synced; past [`max_pins`], fsyncs the pinned directories now and lets their files go.
    pub(super) fn pin(&self, dir: &Path, file: File) {
        let full = {
            let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
            pins.push((dir.to_path_buf(), file));
            pins.len() >= max_pins()
        };
        if full {
            self.sync_pinned();
        }
    }

    /// Lets go of the files pinned for `dir`, whose fsync just made their removals durable.
    pub(super) fn release_pins(&self, dir: &Path) {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        if !pins.is_empty() {
            pins.retain(|(d, _)| d != dir);
        }
    }

    /// fsyncs every directory with a pinned removal, which lets go of its files; best effort
    /// (a failure is logged, and the files stay pinned until the handle drops).
    pub(super) fn sync_pinned(&self) {
        let dirs: Vec<PathBuf> = {
            let pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
            let mut dirs: Vec<PathBuf> = pins.iter().map(|(d, _)| d.clone()).collect();
            dirs.sort();
            dirs.dedup();
            dirs
        };
        for dir in dirs {
            if let Err(e) = self.sync_dir(&dir) {
                tracing::debug!(dir = %dir.display(), error = %e, "cannot sync a directory with pinned removals");
            }
        }
    }
}

impl Drop for Io {
    fn drop(&mut self) {
        // Removals this handle made and never synced: synced now, before their inodes go.
        if !self
            .pins
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
            && !self.is_poisoned()
        {
            self.sync_pinned();
        }
    }
}
