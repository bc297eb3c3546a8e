//! Reading a file that strangers may have written: the checks every read of the drop zone
//! makes, and their outcome as a type with one wording for every refusal.

use std::fs::File;
use std::io::{self, Read};

use crate::sys::{self, Stamp};

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
pub(super) fn read_checked(mut file: &File, cap: u64) -> io::Result<ReadOutcome> {
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
