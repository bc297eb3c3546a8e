//! Reading a file that strangers may have written: the checks every read of the drop zone
//! makes, and their outcome as a type with one wording for every refusal.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::Path;

use super::{FsHook, FsOp, Io};
use crate::error::{Error, Result};
use crate::sys::{self, Entry, Stamp};

/// Outcome of reading a file from a directory strangers write to, with all the checks applied.
#[derive(Debug)]
pub(crate) enum ReadOutcome {
    /// The whole content, and the file's stamp (from the open descriptor).
    Bytes(Vec<u8>, Stamp),
    /// The file is gone: another process moved or removed it first.
    Gone,
    /// Larger than the cap; not read.
    TooLarge {
        /// The file's size.
        size: u64,
        /// The cap it is over.
        cap: u64,
    },
    /// A directory, FIFO, socket, device or symlink (what it is).
    NotRegular(&'static str),
    /// More than one hard link (how many).
    HardLinked(u64),
    /// Opening or reading failed (permission denied, I/O error): a property of the file, so
    /// it is reported on the file rather than failing the whole pass.
    Unreadable(String),
}

/// How the reason for a file with several links starts ([`ReadOutcome::rejection`]).
const HARD_LINKS: &str = "file has";

/// True when `reason` is the hard-link rule's ([`ReadOutcome::HardLinked`]): a reason that a
/// change of the link count since the read (sigbox resolving its own leftover) makes stale.
pub(crate) fn is_hard_link_reason(reason: &str) -> bool {
    reason.starts_with(HARD_LINKS) && reason.contains(" hard links: ")
}

impl ReadOutcome {
    /// Why the file can never be read as a signal, in the one wording every dialect uses;
    /// `None` for content and for a file that is gone.
    pub(crate) fn rejection(&self) -> Option<String> {
        Some(match self {
            ReadOutcome::Bytes(..) | ReadOutcome::Gone => return None,
            ReadOutcome::TooLarge { size, cap } => {
                format!("file is {size} bytes, over the {cap} byte cap")
            }
            ReadOutcome::NotRegular(what) => format!("{what}, not a signal file"),
            ReadOutcome::HardLinked(n) => format!(
                "{HARD_LINKS} {n} hard links: it may be a link to a file outside the root, so it \
                 is not read"
            ),
            ReadOutcome::Unreadable(reason) => reason.clone(),
        })
    }
}

/// The checks and the capped read of [`super::Io::read_untrusted`] on an open file. The file is read
/// with one `read` of its size plus one byte: a regular file's read stops at its end, so getting
/// exactly the size proves the end was reached; anything else (it grew, shrank, or the read was
/// cut short) reads on to the end, never past the cap.
///
/// A transient failure (see [`sys::is_transient`]) is the error; any other failure is
/// [`ReadOutcome::Unreadable`], a property of the file.
pub(super) fn read_checked(
    file: &File,
    path: &Path,
    hook: Option<&dyn FsHook>,
    cap: u64,
) -> io::Result<ReadOutcome> {
    let mut file = Hooked { file, path, hook };
    let unreadable = |what: &str, e: io::Error| {
        if sys::is_transient(&e) {
            Err(e)
        } else {
            Ok(ReadOutcome::Unreadable(format!("{what}: {e}")))
        }
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return unreadable("cannot stat", e),
    };
    let ft = meta.file_type();
    if !ft.is_file() {
        return Ok(ReadOutcome::NotRegular(if ft.is_dir() {
            "a directory"
        } else {
            "a FIFO, socket or device"
        }));
    }
    let stamp = sys::stamp(&meta);
    if stamp.nlink > 1 {
        return Ok(ReadOutcome::HardLinked(stamp.nlink));
    }
    if stamp.size > cap {
        return Ok(ReadOutcome::TooLarge {
            size: stamp.size,
            cap,
        });
    }
    let size = stamp.size as usize;
    let mut buf = vec![0; size + 1];
    let first = loop {
        match file.read(&mut buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => break r,
        }
    };
    let n = match first {
        Ok(n) => n,
        Err(e) => return unreadable("cannot read", e),
    };
    buf.truncate(n);
    if n != size
        && let Err(e) = (&mut file)
            .take((cap + 1).saturating_sub(n as u64))
            .read_to_end(&mut buf)
    {
        return unreadable("cannot read", e);
    }
    if buf.len() as u64 > cap {
        return Ok(ReadOutcome::TooLarge {
            size: buf.len() as u64,
            cap,
        });
    }
    Ok(ReadOutcome::Bytes(buf, stamp))
}

impl Io {
    /// Lists a directory. A missing directory lists as empty when `missing_ok`.
    pub(crate) fn list(&self, dir: &Path, missing_ok: bool) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        let fd = match self.dir(dir) {
            Ok(fd) => fd,
            Err(e)
                if missing_ok
                    && e.io_error()
                        .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                return Ok(out);
            }
            Err(e) => return Err(e),
        };
        // A description of its own: a kept directory's offset is shared.
        let fd = fd
            .into_file()
            .map_err(|e| Error::io(dir, "cannot open directory", e))?;
        if let Some(h) = &self.hook {
            h.read(&FsOp::List(dir), 0)
                .map_err(|e| Error::io(dir, "cannot list directory", e))?;
        }
        match sys::list_fd(&fd, |name, kind| out.push(Entry { name, kind })) {
            Ok(()) => Ok(out),
            Err(e) => Err(Error::io(dir, "cannot list directory", e)),
        }
    }

    /// Reads a file from a directory that strangers write to: never follows a symlink, never
    /// blocks on a FIFO, refuses anything but a regular file with one link, and reads at most
    /// `cap` bytes.
    pub(crate) fn read_untrusted(&self, path: &Path, cap: u64) -> Result<ReadOutcome> {
        let (dir, name) = match self.place(path) {
            Ok(p) => p,
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                return Ok(ReadOutcome::Gone);
            }
            Err(e) => return Err(e),
        };
        let file = match sys::open_untrusted_at(&dir, name, rustix::fs::OFlags::RDONLY) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(ReadOutcome::Gone),
            Err(e) if is_symlink_error(&e) => return Ok(ReadOutcome::NotRegular("a symlink")),
            Err(e) if sys::is_transient(&e) => return Err(Error::io(path, "cannot open", e)),
            Err(e) => return Ok(ReadOutcome::Unreadable(format!("cannot open: {e}"))),
        };
        read_checked(&file, path, self.hook.as_deref(), cap)
            .map_err(|e| Error::io(path, "cannot read", e))
    }

    /// [`Io::read_untrusted`] for a file this handle has just claimed (renamed into
    /// `processed/`), keeping one read-write descriptor open for its handling record
    /// ([`Io::replace_tail`]). The descriptor comes back only with `ReadOutcome::Bytes`. When the file
    /// cannot be opened for writing (another user's private file, anything not a regular
    /// file), it is read as [`Io::read_untrusted`] reads it, without a descriptor.
    pub(crate) fn read_claimed(
        &self,
        path: &Path,
        cap: u64,
    ) -> Result<(ReadOutcome, Option<File>)> {
        let (dir, name) = match self.place(path) {
            Ok(p) => p,
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                return Ok((ReadOutcome::Gone, None));
            }
            Err(e) => return Err(e),
        };
        let access = rustix::fs::OFlags::RDWR;
        let file = match sys::open_untrusted_at(&dir, name, access) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((ReadOutcome::Gone, None)),
            Err(e) if sys::is_transient(&e) => return Err(Error::io(path, "cannot open", e)),
            Err(_) => return Ok((self.read_untrusted(path, cap)?, None)),
        };
        let r = read_checked(&file, path, self.hook.as_deref(), cap)
            .map_err(|e| Error::io(path, "cannot read", e))?;
        let keep = matches!(r, ReadOutcome::Bytes(..)).then_some(file);
        Ok((r, keep))
    }

    /// `lstat`, as a [`Stamp`]; `None` when the file is gone.
    pub(crate) fn stamp(&self, path: &Path) -> Result<Option<Stamp>> {
        let r = match self.root().as_ref().and_then(|r| r.rel(path)) {
            // The root itself: as opened.
            Some(rel) if rel.as_os_str().is_empty() => self
                .dir(path)
                .and_then(|d| sys::stat_dir(&d).map_err(|e| Error::io(path, "cannot stat", e)))
                .map(Some),
            // A name that is not there is the common answer (a record's name looked up before
            // the hand-over, a buffer no agent ever had): no error is made for it.
            _ => match self.place(path) {
                Ok((dir, name)) => match sys::stat_at(&dir, name) {
                    Ok(st) => Ok(Some(st)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => Err(Error::io(path, "cannot stat", e)),
                },
                Err(e) => Err(e),
            },
        };
        match r {
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) =>
            {
                Ok(None)
            }
            other => other,
        }
    }

    /// True when `path` is a real directory (beneath the root: reached without a symlink and
    /// not itself one).
    pub(crate) fn is_dir(&self, path: &Path) -> bool {
        self.stamp(path)
            .is_ok_and(|s| s.is_some_and(|s| s.kind == sys::EntryKind::Dir))
    }
}

pub(super) fn is_symlink_error(e: &io::Error) -> bool {
    // O_NOFOLLOW on a symlink gives ELOOP on Linux and the BSDs (EMLINK on some).
    matches!(e.raw_os_error(), Some(code) if code == rustix::io::Errno::LOOP.raw_os_error()
        || code == rustix::io::Errno::MLINK.raw_os_error())
}

/// A file read through the seam's hook ([`FsHook::read`]): each `read` may be failed or cut
/// short by it, as the kernel could.
struct Hooked<'a> {
    file: &'a File,
    path: &'a Path,
    hook: Option<&'a dyn FsHook>,
}

impl Hooked<'_> {
    fn metadata(&self) -> io::Result<fs::Metadata> {
        self.file.metadata()
    }
}

impl Read for Hooked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let len = match self.hook {
            Some(h) => h.read(&FsOp::Read(self.path), buf.len())?.min(buf.len()),
            None => buf.len(),
        };
        self.file.read(&mut buf[..len])
    }
}
