//! The seam's effects on files and directories (spec/mailbox.md §9.1): create, write, replace
//! a record's tail, sync, remove. Each goes through the hook and the poison check.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use super::{Durability, FsOp, Io};
use crate::error::{Error, Result};
use crate::sys::{self};

use super::order::SYNC_LOCK_WAIT;

impl Io {
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
    ///
    /// The three steps are one change (order.rs): no other process's fsync of the parent
    /// writes the new name before the directory it names is on the disk.
    pub(crate) fn create_dir_durable(&self, path: &Path) -> Result<bool> {
        self.change(|| {
            if !self.create_dir(path)? {
                return Ok(false);
            }
            self.sync_dir(path)?;
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                self.sync_dir(parent)?;
            }
            Ok(true)
        })
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

    /// Sets the mtime of `file` (at `path`) back to `mtime_ns`: a record whose order comes
    /// from its mtime keeps it across the handling block written into it.
    pub(crate) fn keep_mtime(&self, file: &File, path: &Path, mtime_ns: i128) -> Result<()> {
        self.check_poison(path)?;
        let when = crate::clock::time_of(mtime_ns);
        self.effect(FsOp::Touch(path), || file.set_modified(when))
            .map_err(|e| Error::io(path, "cannot set the modification time of", e))
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

    /// Opens a directory for [`Io::sync_dir_file`].
    fn open_dir(&self, path: &Path) -> Result<File> {
        self.dir(path)?
            .into_file()
            .map_err(|e| Error::io(path, "cannot open directory", e))
    }

    /// A directory opened for [`Io::sync_dir_file`] and held for the effects in it while the
    /// descriptor lives ([`sys::hold_dir`]): one lookup beneath the root for a bounded
    /// operation there (a group of claims into a slot and its commit, an acknowledgement out
    /// of it). A pass opens the directories its commit will fsync before it claims anything,
    /// so that running out of descriptors can stop it only before a claim, never between a
    /// claim and its commit.
    pub(crate) fn hold_dir(&self, path: &Path) -> Result<std::sync::Arc<File>> {
        sys::hold_dir(self.root().as_ref(), path).map_err(|e| self.resolve_error(path, e, false))
    }

    /// [`Io::sync_dir`] of a directory already open ([`Io::hold_dir`]). A failed fsync poisons the
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
            })?;
        self.release_pins(path);
        Ok(())
    }

    /// `fsync`, one process of the root at a time where renames are not atomic across
    /// directories (ext2, ext4 without a journal: [`Io::link_claims`]). There a directory's
    /// fsync, and a new file's (which syncs its directory too), writes the buffers on the
    /// directory's list (`fsync_buffers_list`); a second fsync of the same directory that
    /// finds the list emptied by the first returns at once, before the first one's writes have
    /// reached the disk: a `send` could return with its name not yet durable, or a stage's
    /// removal not durable while its inode is used again. The lock is the root directory's
    /// own `flock`, which nothing else takes.
    ///
    /// The lock binds nobody for long (spec/mailbox.md §9.11): it is waited for at most
    /// [`SYNC_LOCK_WAIT`], and not at all once its holder is stopped (a stopped process has
    /// no fsync under way: a stop takes effect only between two system calls). Without it,
    /// the fsync is followed by a `syncfs` of the root's filesystem, which waits for every
    /// write under way there, another process's fsync of the same directory included: the
    /// same promise, at the cost of writing what else is dirty on that filesystem.
    fn sync_serialized(&self, file: &File) -> io::Result<()> {
        let root = match self.link_claims() {
            true => self.root(),
            false => None,
        };
        let Some(root) = root else {
            return file.sync_all();
        };
        match super::order::ordered() {
            super::order::Ordered::Alone => {}
            super::order::Ordered::Held => return file.sync_all(),
            super::order::Ordered::Unlocked => {
                file.sync_all()?;
                return match sys::sync_filesystem(file) {
                    Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(()),
                    other => other,
                };
            }
        }
        match sys::lock_bounded(root.as_ref(), SYNC_LOCK_WAIT, true) {
            Ok(sys::Bounded::Held) => {
                let synced = file.sync_all();
                let _ = rustix::fs::flock(root.as_ref(), rustix::fs::FlockOperation::Unlock);
                synced
            }
            Ok(sys::Bounded::Busy(holders)) => {
                tracing::debug!(holders = %sys::describe_holders(&holders),
                    "the root's fsync lock is held: fsync, then syncfs");
                file.sync_all()?;
                match sys::sync_filesystem(file) {
                    Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(()),
                    other => other,
                }
            }
            // No locks on this filesystem: as without the lock.
            Err(_) => file.sync_all(),
        }
    }

    /// Now by the clock of the filesystem `dir` is on: `dir`'s times set to "now"
    /// (`utimensat(UTIME_NOW)`, which the kernel, or an NFS server, takes from its own clock),
    /// then its ctime read back (spec/mailbox.md §5). Not an effect: only the directory's
    /// times change, which nothing reads (it is `tmp/`).
    pub(crate) fn fs_time_ns(&self, dir: &Path) -> Result<i128> {
        let (parent, name) = self.place(dir)?;
        sys::touch_now_at(&parent, name)
            .and_then(|()| sys::stat_at(&parent, name))
            .map(|st| st.ctime_ns)
            .map_err(|e| Error::io(dir, "cannot read the filesystem's clock", e))
    }

    /// `unlink`; `Ok(false)` when the file is already gone.
    pub(crate) fn remove(&self, path: &Path) -> Result<bool> {
        self.check_poison(path)?;
        let mut pinned = None;
        match self.effect(FsOp::Remove(path), || {
            let (dir, name) = self.place_io(path)?;
            // Kept in use until the removal is durable (order.rs): what cannot be opened so
            // (gone already, say) is unlinked as it is.
            // Only a last link frees its inode: another link keeps it in use.
            if self.pins_removals() {
                pinned = sys::open_path_at(&dir, name).ok().filter(|f| {
                    f.metadata()
                        .is_ok_and(|m| std::os::unix::fs::MetadataExt::nlink(&m) == 1)
                });
            }
            sys::unlink_at(&dir, name)
        }) {
            Ok(()) => {
                if let (Some(file), Some(dir)) = (pinned, path.parent()) {
                    self.pin(dir, file);
                }
                Ok(true)
            }
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
        self.change(|| {
            let removed = self.remove_emptied(path)?;
            if removed && let Some(dir) = path.parent() {
                self.sync_dir(dir)?;
            }
            Ok(removed)
        })
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
}
