//! Unix implementation of the platform layer.

use std::fs::File;
use std::io;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::{EntryKind, Stamp};

/// Renames `from` to `to` with `renameat2(RENAME_NOREPLACE)`, failing with `AlreadyExists`
/// instead of replacing `to`. `Ok(false)` when the filesystem (FUSE, the Linux NFS client) or
/// the platform does not support the flag: nothing happened, and the caller uses
/// [`rename_checked`] under a lock instead.
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<bool> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
            Ok(()) => Ok(true),
            Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = (from, to);
        Ok(false)
    }
}

/// The portable no-clobber rename: `lstat(to)`, then `rename(from, to)` when nothing is there.
///
/// `rename(2)` is exclusive on its source on every filesystem (of two renames of one name, one
/// gets `ENOENT`) and leaves one name at every instant, even across a crash; only its
/// destination is not exclusive, so the caller holds a lock that every no-clobber rename into
/// the same place takes ([`crate::io::Io`]). Never `link` + `unlink`: that leaves a moment,
/// and after a crash a state, where the file has two names, and so two claimable copies.
pub(crate) fn rename_checked(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(to) {
        Ok(_) => return Err(io::ErrorKind::AlreadyExists.into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::rename(from, to)
}

/// Opens a file for reading without following a final symlink, without blocking on a FIFO and
/// without ever making a terminal the controlling one.
pub(crate) fn open_nofollow(path: &Path) -> io::Result<File> {
    open_untrusted(path, OFlags::RDONLY)
}

/// [`open_nofollow`], read-write and appending: one descriptor to read a claimed file and then
/// append its handling record. A directory fails here with `EISDIR`; callers fall back to
/// [`open_nofollow`] on any failure but `ENOENT`.
pub(crate) fn open_read_append(path: &Path) -> io::Result<File> {
    open_untrusted(path, OFlags::RDWR | OFlags::APPEND)
}

/// Opens a file in a directory strangers write to, with `access` and the flags that make that
/// safe: no symlink followed, no blocking on a FIFO, no controlling terminal.
///
/// On Linux it also asks for `O_NOATIME`: sigbox's reads leave the access time alone, which
/// spares the filesystem an inode update on the first read of every new file (under
/// `relatime`). Only the file's owner may ask for it: for another user's file (`EPERM`) the
/// open is retried without it.
fn open_untrusted(path: &Path, access: OFlags) -> io::Result<File> {
    let flags = access | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    match rustix::fs::open(path, flags | OFlags::NOATIME, Mode::empty()) {
        Err(rustix::io::Errno::PERM) => {}
        other => return Ok(File::from(other?)),
    }
    Ok(File::from(rustix::fs::open(path, flags, Mode::empty())?))
}

/// Opens an existing file for appending, without following a final symlink.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    let fd = rustix::fs::open(
        path,
        OFlags::WRONLY | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// Lists a directory: each entry's name and kind, without `.` and `..`.
///
/// On Linux this is one `open` and `getdents64` into a 32 KiB buffer: no `fstat` (which
/// `opendir` adds) and no allocation per entry beyond its name. The kind comes from `d_type`,
/// or from an `lstat` where the filesystem does not fill it in.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn list_dir(
    dir: &Path,
    mut each: impl FnMut(std::ffi::OsString, EntryKind),
) -> io::Result<()> {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use rustix::fs::{AtFlags, FileType, RawDir, statat};

    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut buf = Vec::with_capacity(32 * 1024);
    let mut entries = RawDir::new(&fd, buf.spare_capacity_mut());
    while let Some(entry) = entries.next() {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let kind = kind_of(entry.file_type(), || {
            statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| FileType::from_raw_mode(st.st_mode))
        });
        each(OsStr::from_bytes(name.to_bytes()).to_os_string(), kind);
    }
    Ok(())
}

/// An entry's kind from its `d_type`, or from `lstat` (`stat`) where the filesystem left it
/// unknown.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn kind_of(
    d_type: rustix::fs::FileType,
    stat: impl FnOnce() -> rustix::io::Result<rustix::fs::FileType>,
) -> EntryKind {
    use rustix::fs::FileType;
    let ft = match d_type {
        // Vanished between readdir and stat: let the caller see it gone later.
        FileType::Unknown => stat().unwrap_or(FileType::RegularFile),
        ft => ft,
    };
    match ft {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Special,
    }
}

/// Lists a directory: each entry's name and kind.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn list_dir(
    dir: &Path,
    each: impl FnMut(std::ffi::OsString, EntryKind),
) -> io::Result<()> {
    super::list_dir_std(dir, each)
}

/// Opens a directory so that it can be fsynced.
pub(crate) fn open_dir(path: &Path) -> io::Result<File> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// Opens a directory without following a final symlink (`ELOOP` / `ENOTDIR` then).
pub(crate) fn open_dir_nofollow(path: &Path) -> io::Result<File> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// A file's [`Stamp`] from its metadata.
pub(crate) fn stamp(meta: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    Stamp {
        kind: EntryKind::of(meta.file_type()),
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
        nlink: meta.nlink(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
    }
}

/// The raw bytes of a file name, for names that are not UTF-8.
pub(crate) fn name_bytes(name: &std::ffi::OsStr) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    name.as_bytes()
}

/// True when `path` is on a filesystem that does not deliver change events for writes made by
/// other machines (network and FUSE filesystems): waiting there must poll.
pub(crate) fn is_remote_fs(path: &Path) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        const REMOTE: [i64; 9] = [
            0x6969,                 // NFS
            0x517B,                 // SMB
            0xFF53_4D42_u32 as i64, // CIFS
            0xFE53_4D42_u32 as i64, // SMB2
            0x6573_5546,            // FUSE (sshfs, ...)
            0x00C3_6400,            // Ceph
            0x5346_414F,            // AFS
            0x0102_1997,            // 9p
            0x0BD0_0BD0,            // Lustre
        ];
        match rustix::fs::statfs(path) {
            // `f_type`'s width differs between targets (i32, i64, u32).
            #[allow(clippy::unnecessary_cast)]
            Ok(st) => REMOTE.contains(&(st.f_type as i64)),
            Err(_) => false,
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = path;
        false
    }
}

/// True when this process may create and remove entries in directory `path`.
pub(crate) fn writable(path: &Path) -> bool {
    use rustix::fs::{Access, AtFlags, CWD, accessat};
    accessat(
        CWD,
        path,
        Access::WRITE_OK | Access::EXEC_OK,
        AtFlags::EACCESS,
    )
    .is_ok()
}

/// The permission bits of `path`, as `mode 0755`.
pub(crate) fn mode_string(path: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(m) => format!("mode {:04o}", m.permissions().mode() & 0o7777),
        Err(e) => e.to_string(),
    }
}

/// The device a path is on.
pub(crate) fn device(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.dev())
}

/// `fchmod`.
pub(crate) fn set_mode_file(f: &File, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// `chmod` (of a directory this process just created; never followed through a symlink,
/// since `mkdir` made it).
pub(crate) fn set_mode_path(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// True when a mailbox root is shared: setgid and group-writable (what `init --shared` makes).
pub(crate) fn is_shared_dir(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| {
        let mode = m.permissions().mode();
        mode & 0o2000 != 0 && mode & 0o020 != 0
    })
}

/// True for an error that says something about the moment rather than the file: out of
/// descriptors or memory, interrupted, try again, an I/O error, no space. A read or write that
/// fails with one is retried later; the file is left where it is, never quarantined.
pub(crate) fn is_transient(e: &io::Error) -> bool {
    use rustix::io::Errno;
    let Some(code) = e.raw_os_error() else {
        return matches!(
            e.kind(),
            io::ErrorKind::OutOfMemory | io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
        );
    };
    [
        Errno::MFILE,
        Errno::NFILE,
        Errno::NOMEM,
        Errno::INTR,
        Errno::AGAIN,
        Errno::IO,
        Errno::NOBUFS,
        Errno::NOSPC,
        Errno::DQUOT,
    ]
    .iter()
    .any(|errno| errno.raw_os_error() == code)
}

/// The soft limit on open descriptors of this process, when there is one.
pub(crate) fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// True for "permission denied".
pub(crate) fn is_permission_denied(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;
    use rustix::fs::FileType;

    #[test]
    fn an_unknown_d_type_is_settled_by_lstat() {
        let never = || -> rustix::io::Result<FileType> { panic!("d_type was known") };
        assert_eq!(kind_of(FileType::RegularFile, never), EntryKind::File);
        assert_eq!(kind_of(FileType::Symlink, never), EntryKind::Symlink);
        assert_eq!(kind_of(FileType::Fifo, never), EntryKind::Special);
        assert_eq!(
            kind_of(FileType::Unknown, || Ok(FileType::Directory)),
            EntryKind::Dir
        );
        assert_eq!(
            kind_of(FileType::Unknown, || Ok(FileType::Socket)),
            EntryKind::Special
        );
        // Gone before the lstat: listed as a file, found gone when it is read.
        assert_eq!(
            kind_of(FileType::Unknown, || Err(rustix::io::Errno::NOENT)),
            EntryKind::File
        );
    }

    #[test]
    fn a_listing_gives_every_entry_with_its_kind() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("f.json"), b"{}").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::os::unix::fs::symlink("f.json", d.join("l.json")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("p.json"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        // More names than one 32 KiB getdents buffer holds.
        for i in 0..2000 {
            std::fs::write(d.join(format!("signal.{i:0>200}.json")), b"").unwrap();
        }
        let mut got = std::collections::BTreeMap::new();
        list_dir(d, |name, kind| {
            assert!(got.insert(name, kind).is_none(), "listed twice");
        })
        .unwrap();
        assert_eq!(got.len(), 2004);
        assert_eq!(got[std::ffi::OsStr::new("f.json")], EntryKind::File);
        assert_eq!(got[std::ffi::OsStr::new("sub")], EntryKind::Dir);
        assert_eq!(got[std::ffi::OsStr::new("l.json")], EntryKind::Symlink);
        assert_eq!(got[std::ffi::OsStr::new("p.json")], EntryKind::Special);
        assert!(!got.contains_key(std::ffi::OsStr::new(".")));
        assert!(!got.contains_key(std::ffi::OsStr::new("..")));
    }
}
