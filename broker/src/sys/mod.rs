//! Platform differences live here and nowhere else (spec/mailbox.md §9.9), with the types the
//! platform layer shares: [`Stamp`], [`EntryKind`], [`Entry`].
//!
//! Every function has the same signature on every platform. A no-clobber rename is
//! `renameat2(RENAME_NOREPLACE)` on Linux; where that is refused (FUSE, the NFS client, other
//! platforms) it is `lstat` + `rename` under a lock the seam holds ([`crate::io::Io`],
//! spec/mailbox.md §9.9): one name at every instant, exclusive on both sides.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(not(unix))]
mod portable;
#[cfg(not(unix))]
pub(crate) use portable::*;

use std::ffi::OsString;
use std::path::Path;

/// What `doctor` says of the filesystem a root is on ([`fs_facts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FsFacts {
    /// Mounted read-only.
    pub(crate) read_only: bool,
    /// Kept in memory only (tmpfs, ramfs): nothing survives a reboot.
    pub(crate) memory: bool,
}

/// Identity and timing of a file (from `lstat` or `fstat`), as the mailbox needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) nlink: u64,
    pub(crate) mtime_ns: i128,
    pub(crate) ctime_ns: i128,
    /// When the inode was created (`statx`'s `stx_btime`), where the filesystem records it and
    /// the stamp came from an open descriptor ([`stamp`]); `None` from `lstat`. It survives
    /// renames and appends, so it is part of a signal's identity (spec/mailbox.md §2.4).
    pub(crate) birth_ns: Option<i128>,
    /// What the entry is (never what a symlink points to).
    pub(crate) kind: EntryKind,
}

impl Stamp {
    /// The last change of the entry or its content: the later of mtime and ctime, with an
    /// mtime later than the ctime taken as the ctime. The kernel sets the ctime itself, at
    /// every change, and never to the future; an mtime ahead of it was set by hand (`cp -p`,
    /// `rsync -t` or `tar x` from a machine whose clock runs ahead) and would otherwise keep a
    /// file "changing" until that future comes.
    pub(crate) fn changed_ns(&self) -> i128 {
        // max(min(mtime, ctime), ctime): the ctime.
        self.ctime_ns
    }

    /// The mtime, no later than the ctime (see [`Stamp::changed_ns`]): what orders a dropped
    /// file, which a future mtime would otherwise move behind everything sent since.
    pub(crate) fn mtime_clamped_ns(&self) -> i128 {
        self.mtime_ns.min(self.ctime_ns)
    }
}

/// What a directory entry is, from the listing (`d_type`) or `lstat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// A FIFO, socket or device.
    Special,
}

impl EntryKind {
    /// What the entry is, for a message: "a symlink", "a regular file", ...
    pub(crate) fn describe(self) -> &'static str {
        match self {
            EntryKind::Symlink => "a symlink",
            EntryKind::File => "a regular file",
            EntryKind::Dir => "a directory",
            EntryKind::Special => "a FIFO, socket or device",
        }
    }

    /// The kind of an entry of file type `ft` (from `lstat`: a symlink is a symlink).
    pub(crate) fn of(ft: std::fs::FileType) -> EntryKind {
        if ft.is_symlink() {
            EntryKind::Symlink
        } else if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_file() {
            EntryKind::File
        } else {
            EntryKind::Special
        }
    }
}

/// A directory entry as listed, without a `stat` when the platform gives the type.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) name: OsString,
    pub(crate) kind: EntryKind,
}

/// Lists a directory through `std::fs::read_dir`: each entry's name and kind.
#[cfg_attr(any(target_os = "linux", target_os = "android"), allow(dead_code))]
pub(crate) fn list_dir_std(
    dir: &Path,
    mut each: impl FnMut(OsString, EntryKind),
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        // Vanished between readdir and stat: let the caller see it gone later.
        let kind = entry.file_type().map_or(EntryKind::File, EntryKind::of);
        each(entry.file_name(), kind);
    }
    Ok(())
}
