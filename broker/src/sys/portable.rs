//! Fallback implementation for platforms without Unix calls.

use std::fs::File;
use std::io;
use std::path::Path;

use super::{EntryKind, FsFacts, Stamp};

/// Where a process cannot be looked up, a stage's writer is taken as gone: `gc` goes by age
/// alone there.
pub(crate) fn process_alive(_pid: u32) -> bool {
    false
}

pub(crate) fn rename_noreplace(_from: &Path, _to: &Path) -> io::Result<bool> {
    Ok(false)
}

pub(crate) fn rename_checked(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(to) {
        Ok(_) => return Err(io::ErrorKind::AlreadyExists.into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::rename(from, to)
}

pub(crate) fn open_nofollow(path: &Path) -> io::Result<File> {
    if std::fs::symlink_metadata(path)?.file_type().is_symlink() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "is a symlink"));
    }
    File::open(path)
}

pub(crate) fn open_read_append(path: &Path) -> io::Result<File> {
    if std::fs::symlink_metadata(path)?.file_type().is_symlink() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "is a symlink"));
    }
    std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(path)
}

pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().append(true).open(path)
}

pub(crate) fn open_dir(path: &Path) -> io::Result<File> {
    File::open(path)
}

/// Opens a directory; a symlink is refused after the fact (no `O_NOFOLLOW` here).
pub(crate) fn open_dir_nofollow(path: &Path) -> io::Result<File> {
    if std::fs::symlink_metadata(path)?.file_type().is_symlink() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a symlink"));
    }
    File::open(path)
}

pub(crate) fn stamp(meta: &std::fs::Metadata) -> Stamp {
    let ns = |t: io::Result<std::time::SystemTime>| {
        t.ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128)
    };
    Stamp {
        kind: EntryKind::of(meta.file_type()),
        dev: 0,
        ino: 0,
        size: meta.len(),
        nlink: 1,
        mtime_ns: ns(meta.modified()),
        ctime_ns: ns(meta.modified()),
        birth_ns: meta.created().is_ok().then(|| ns(meta.created())),
    }
}

pub(crate) fn name_bytes(name: &std::ffi::OsStr) -> &[u8] {
    name.as_encoded_bytes()
}

pub(crate) fn is_remote_fs(_path: &Path) -> bool {
    false
}

pub(crate) fn fs_facts(_path: &Path) -> FsFacts {
    FsFacts::default()
}

pub(crate) fn writable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.permissions().readonly())
}

pub(crate) fn mode_string(_path: &Path) -> String {
    String::new()
}

pub(crate) fn device(_path: &Path) -> Option<u64> {
    None
}

pub(crate) fn set_mode_file(_f: &File, _mode: u32) -> io::Result<()> {
    Ok(())
}

pub(crate) fn set_mode_path(_path: &Path, _mode: u32) -> io::Result<()> {
    Ok(())
}

pub(crate) fn is_shared_dir(_path: &Path) -> bool {
    false
}

pub(crate) fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::OutOfMemory | io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    )
}

pub(crate) fn is_permission_denied(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
}

pub(crate) fn list_dir(
    dir: &Path,
    each: impl FnMut(std::ffi::OsString, EntryKind),
) -> io::Result<()> {
    super::list_dir_std(dir, each)
}
