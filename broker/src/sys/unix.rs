//! Unix implementation of the platform layer.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::{EntryKind, FsFacts, Stamp};

mod holders;
mod root;
pub(crate) use holders::*;
pub(crate) use root::*;

/// Lists a directory by path (see [`list_fd`]); the tests' way in.
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
pub(crate) fn list_dir(
    dir: &Path,
    each: impl FnMut(std::ffi::OsString, EntryKind),
) -> io::Result<()> {
    let fd = rustix::fs::open(dir, root::DIR_FLAGS, Mode::empty())?;
    list_fd(&fd, each)
}

/// Lists a directory already open (and not yet read from): each entry's name and kind,
/// without `.` and `..`, **as it was at one moment**.
///
/// On Linux this is `getdents64` into a buffer of this thread's, 32 KiB at first: no `fstat`
/// (which `opendir` adds) and no allocation per entry beyond its name. The kind comes from
/// `d_type`, or from an `lstat` where the filesystem does not fill it in.
///
/// One `getdents64` call runs under the directory's lock, which a rename, link or unlink in it
/// takes exclusively, so what one call returns is the directory at one moment (less what is
/// removed after it). A listing made of several calls is not: names added between two calls
/// land before or after where the first stopped (in hash order on ext4), so it can hold a name
/// added late and miss one added before it, and a consumer that lists `inputs/` while a
/// producer sends (or a bridge imports) would take a producer's later signal before its
/// earlier one (spec/mailbox.md §4). So a listing whose names came from more than one call is
/// made again, from the start, into a buffer that holds the whole directory; the size it
/// needed is kept for this thread's next listings. After [`RELISTS`] such attempts (a
/// directory growing by half between two listings, each time), or when the buffer is at its
/// largest ([`LIST_MAX`]), the last listing is taken as it is.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn list_fd(
    fd: &impl AsFd,
    mut each: impl FnMut(std::ffi::OsString, EntryKind),
) -> io::Result<()> {
    use std::cell::RefCell;
    use std::os::unix::ffi::OsStrExt;

    use rustix::fs::{AtFlags, FileType, RawDir, SeekFrom, statat};

    thread_local! {
        static BUF: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(LIST_BUF));
    }
    let fd = fd.as_fd();
    BUF.with(|buf| {
        // Released before `each` is called: a listing never runs inside another.
        let mut guard = buf.borrow_mut();
        let buf: &mut Vec<u8> = &mut guard;
        let mut names: Vec<(std::ffi::OsString, FileType)> = Vec::new();
        for attempt in 0..=RELISTS {
            if buf.capacity() < LIST_BUF {
                buf.reserve(LIST_BUF);
            }
            names.clear();
            let mut entries = RawDir::new(&fd, buf.spare_capacity_mut());
            // `getdents64` calls that returned names, and the bytes of their records.
            let (mut calls, mut bytes) = (0usize, 0usize);
            loop {
                let refill = entries.is_buffer_empty();
                let Some(entry) = entries.next() else { break };
                let entry = entry?;
                calls += usize::from(refill);
                let name = entry.file_name().to_bytes();
                // A record: 19 bytes of header, the name and its NUL, aligned to 8.
                bytes += (19 + name.len() + 1).next_multiple_of(8);
                if matches!(name, b"." | b"..") {
                    continue;
                }
                names.push((OsStr::from_bytes(name).to_os_string(), entry.file_type()));
            }
            // A buffer at its largest cannot do better: the listing is taken as it is.
            if calls <= 1 || attempt == RELISTS || buf.capacity() >= LIST_MAX {
                break;
            }
            // Room for the whole directory, and for it to grow by half meanwhile.
            let want = (bytes + bytes / 2 + 4096).min(LIST_MAX);
            buf.reserve_exact(want);
            rustix::fs::seek(fd, SeekFrom::Start(0))?;
        }
        drop(guard);
        for (name, d_type) in names {
            let kind = kind_of(d_type, || {
                statat(fd, &name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode))
            });
            each(name, kind);
        }
        Ok(())
    })
}

/// The size of a thread's first listing buffer.
#[cfg(any(target_os = "linux", target_os = "android"))]
const LIST_BUF: usize = 32 * 1024;

/// The largest a thread's listing buffer grows: 16 MiB, a directory of about 150,000 names
/// of a signal's length. A larger one is listed in several calls, as it is.
#[cfg(any(target_os = "linux", target_os = "android"))]
const LIST_MAX: usize = 16 * 1024 * 1024;

/// How many times a listing that took more than one `getdents64` call is made again (see
/// [`list_fd`]).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) const RELISTS: usize = 3;

/// An entry's kind from its `d_type`, or from `lstat` (`stat`) where the filesystem left it
/// unknown.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn kind_of(
    d_type: rustix::fs::FileType,
    stat: impl FnOnce() -> rustix::io::Result<rustix::fs::FileType>,
) -> EntryKind {
    use rustix::fs::FileType;
    entry_kind(match d_type {
        // Vanished between readdir and stat: let the caller see it gone later.
        FileType::Unknown => stat().unwrap_or(FileType::RegularFile),
        ft => ft,
    })
}

/// The [`EntryKind`] of a file type (a symlink is a symlink).
fn entry_kind(ft: rustix::fs::FileType) -> EntryKind {
    use rustix::fs::FileType;
    match ft {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Special,
    }
}

/// Lists a directory already open: each entry's name and kind.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn list_fd(
    fd: &impl AsFd,
    mut each: impl FnMut(std::ffi::OsString, EntryKind),
) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let dir = rustix::fs::Dir::read_from(fd)?;
    for entry in dir {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let kind = entry_kind(entry.file_type());
        each(OsStr::from_bytes(name.to_bytes()).to_os_string(), kind);
    }
    Ok(())
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
        // std reads the metadata with `statx` where the kernel has it, asking for the birth
        // time too; it is an error where the filesystem does not record it.
        birth_ns: meta
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as i128),
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

/// What the filesystem holding `path` is, as far as `doctor` explains it: mounted read-only
/// (`statvfs`'s `ST_RDONLY`), and kept in memory only (tmpfs, ramfs: gone at reboot).
pub(crate) fn fs_facts(path: &Path) -> FsFacts {
    let read_only = rustix::fs::statvfs(path)
        .is_ok_and(|st| st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY));
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let memory = {
        const MEMORY: [i64; 2] = [
            0x0102_1994,            // tmpfs
            0x8584_58F6_u32 as i64, // ramfs
        ];
        // `f_type`'s width differs between targets (i32, i64, u32).
        #[allow(clippy::unnecessary_cast)]
        rustix::fs::statfs(path).is_ok_and(|st| MEMORY.contains(&(st.f_type as i64)))
    };
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let memory = false;
    FsFacts { read_only, memory }
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

/// True for "permission denied".
/// True while a process with this id lives in this pid namespace (`kill(pid, 0)` finds it,
/// whether or not it may be signalled; a zombie counts: it has not been reaped yet).
pub(crate) fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e != rustix::io::Errno::SRCH,
    }
}

pub(crate) fn is_permission_denied(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
}

/// `openat(dir, name, flags)` with the flags every open of sigbox adds: `O_NOFOLLOW`,
/// `O_CLOEXEC`.
pub(crate) fn open_at(dir: &Dir, name: &OsStr, flags: OFlags, mode: u32) -> io::Result<File> {
    let fd = rustix::fs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?;
    Ok(File::from(fd))
}

/// Opens `name` in `dir`, a directory strangers write to, with `access` and the flags that make
/// that safe: no symlink followed, no blocking on a FIFO, no controlling terminal. On Linux it
/// also asks for `O_NOATIME` (a read then spares an inode update), which only the file's
/// owner may: for another user's file (`EPERM`) it opens again without it.
pub(crate) fn open_untrusted_at(dir: &Dir, name: &OsStr, access: OFlags) -> io::Result<File> {
    let flags = access | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    match rustix::fs::openat(dir, name, flags | OFlags::NOATIME, Mode::empty()) {
        Err(rustix::io::Errno::PERM) => {}
        other => return Ok(File::from(other?)),
    }
    Ok(File::from(rustix::fs::openat(
        dir,
        name,
        flags,
        Mode::empty(),
    )?))
}

/// An `O_PATH` descriptor of `name` in `dir`, not following a symlink: it reads nothing and
/// opens any kind of file, and keeps the inode in use while it lives (an unlinked file's inode
/// is freed at its last close). Linux only; elsewhere `Unsupported`.
pub(crate) fn open_path_at(dir: &Dir, name: &OsStr) -> io::Result<File> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    return Ok(File::from(rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?));
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = (dir, name);
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// `renameat2(RENAME_NOREPLACE)` between two directories; `Ok(false)` where the filesystem
/// (FUSE, the Linux NFS client) or the platform refuses the flag: nothing happened, and the
/// caller uses [`rename_checked_at`] under a lock instead.
pub(crate) fn rename_noreplace_at(from: (&Dir, &OsStr), to: (&Dir, &OsStr)) -> io::Result<bool> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::fs::{RenameFlags, renameat_with};
        match renameat_with(from.0, from.1, to.0, to.1, RenameFlags::NOREPLACE) {
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

/// The portable no-clobber rename: `lstat` of the destination, then `renameat` when nothing
/// is there. `rename(2)` is exclusive on its source everywhere and leaves one name at every
/// instant; its destination is made exclusive by the lock the caller holds
/// ([`crate::io::Io`]). Never `link` + `unlink`, which leaves two claimable names.
pub(crate) fn rename_checked_at(from: (&Dir, &OsStr), to: (&Dir, &OsStr)) -> io::Result<()> {
    match stat_at(to.0, to.1) {
        Ok(_) => return Err(io::ErrorKind::AlreadyExists.into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    rename_at(from, to)
}

/// Sets the times of `name` in `dir` to now, by the filesystem's clock (`UTIME_NOW`), without
/// following a symlink.
pub(crate) fn touch_now_at(dir: &Dir, name: &OsStr) -> io::Result<()> {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    let times = rustix::fs::Timestamps {
        last_access: now,
        last_modification: now,
    };
    Ok(rustix::fs::utimensat(
        dir,
        name,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// `linkat` without following a symlink: a second name for the file at `from`. Fails with
/// `EEXIST` when `to` exists, `ENOENT` when `from` is gone.
pub(crate) fn link_at(from: (&Dir, &OsStr), to: (&Dir, &OsStr)) -> io::Result<()> {
    Ok(rustix::fs::linkat(
        from.0,
        from.1,
        to.0,
        to.1,
        rustix::fs::AtFlags::empty(),
    )?)
}

/// True when `e` says the filesystem makes no hard links (FAT, some FUSE filesystems) or no
/// more of them: a claim then moves by rename.
pub(crate) fn is_link_refused(e: &io::Error) -> bool {
    use rustix::io::Errno;
    [
        Errno::PERM,
        Errno::OPNOTSUPP,
        Errno::MLINK,
        Errno::XDEV,
        Errno::NOSYS,
    ]
    .iter()
    .any(|c| e.raw_os_error() == Some(c.raw_os_error()))
}

/// True when the filesystem holding `path` is ext2, or ext3/ext4 mounted without a journal:
/// there a rename between two directories is not committed whole, and a claim links the file
/// into its slot and makes that link durable before it removes the source (spec/mailbox.md
/// §9.10), since another process's fsync of the source directory could otherwise make the
/// removal durable before the arrival. Everywhere else a claim is one rename: journaling
/// filesystems commit it whole, and on filesystems whose inode numbers or links cannot be
/// trusted (FUSE, network filesystems) a claim by link could not tell its own link from
/// another file.
pub(crate) fn renames_not_atomic(path: &Path) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        const EXT: i64 = 0xEF53;
        let Ok(st) = rustix::fs::statfs(path) else {
            return false;
        };
        #[allow(clippy::unnecessary_cast)]
        let kind = st.f_type as i64;
        kind == EXT && !ext_has_journal(path)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = path;
        false
    }
}

/// True when the ext2/3/4 filesystem holding `path` runs a journal: the kernel lists every
/// journal it runs under `/proc/fs/jbd2/<device>-<journal inode>`.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn ext_has_journal(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let dev = meta.dev();
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let Ok(target) = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")) else {
        return false;
    };
    let Some(name) = target.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let prefix = format!("{name}-");
    std::fs::read_dir("/proc/fs/jbd2").is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
    })
}

/// `renameat`, replacing the destination.
pub(crate) fn rename_at(from: (&Dir, &OsStr), to: (&Dir, &OsStr)) -> io::Result<()> {
    Ok(rustix::fs::renameat(from.0, from.1, to.0, to.1)?)
}

/// `unlinkat` of a file.
pub(crate) fn unlink_at(dir: &Dir, name: &OsStr) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(
        dir,
        name,
        rustix::fs::AtFlags::empty(),
    )?)
}

/// `mkdirat`.
pub(crate) fn mkdir_at(dir: &Dir, name: &OsStr, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode))?)
}

/// `fstatat(AT_SYMLINK_NOFOLLOW)` as a [`Stamp`].
pub(crate) fn stat_at(dir: &Dir, name: &OsStr) -> io::Result<Stamp> {
    let st = rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(stamp_of(&st))
}

/// `fstat` of a directory descriptor as a [`Stamp`].
pub(crate) fn stat_dir(dir: &Dir) -> io::Result<Stamp> {
    Ok(stamp_of(&rustix::fs::fstat(dir)?))
}

fn stamp_of(st: &rustix::fs::Stat) -> Stamp {
    let kind = entry_kind(rustix::fs::FileType::from_raw_mode(st.st_mode));
    // The field widths differ between targets.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Stamp {
        kind,
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        size: st.st_size as u64,
        nlink: st.st_nlink as u64,
        mtime_ns: i128::from(st.st_mtime as i64) * 1_000_000_000
            + i128::from(st.st_mtime_nsec as i64),
        ctime_ns: i128::from(st.st_ctime as i64) * 1_000_000_000
            + i128::from(st.st_ctime_nsec as i64),
        birth_ns: None,
    }
}

/// `fchmod` of a directory descriptor.
pub(crate) fn set_mode_dir(dir: &Dir, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::fchmod(dir, Mode::from_raw_mode(mode))?)
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests;
