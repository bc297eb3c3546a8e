//! Reading signal files under the size cap (spec/mailbox.md §3.3): the cap is the signal's,
//! not its record's. A claim writes its handling block into the file it took (§3.4), so a
//! record (in a slot, in `processed/`, put back into `inputs/`) may be larger than the signal
//! it holds: it is read with [`RECORD_ROOM`] more, and refused only when the signal before its
//! handling block is over the cap.

use std::fs::File;
use std::path::Path;

use super::Mailbox;
use crate::body;
use crate::error::Result;
use crate::io::ReadOutcome;

/// Bytes a record may hold beyond the cap for its handling block: far more than any block
/// sigbox writes (a claim's is about 150 bytes; an archived broadcast's lists its acks).
pub(super) const RECORD_ROOM: u64 = 64 * 1024;

impl Mailbox {
    /// [`crate::io::Io::read_untrusted`] of a signal file or a record: the cap applies to the
    /// signal, not to the handling block a claim wrote after it.
    pub(super) fn read_signal_file(&self, path: &Path) -> Result<ReadOutcome> {
        let read = self
            .io
            .read_untrusted(path, self.opts.max_file_size + RECORD_ROOM)?;
        Ok(self.signal_capped(read))
    }

    /// [`crate::io::Io::read_claimed`] with the cap of [`Mailbox::read_signal_file`].
    pub(super) fn read_claimed_signal(&self, path: &Path) -> Result<(ReadOutcome, Option<File>)> {
        let (read, file) = self
            .io
            .read_claimed(path, self.opts.max_file_size + RECORD_ROOM)?;
        Ok(match self.signal_capped(read) {
            read @ ReadOutcome::Bytes(..) => (read, file),
            refused => (refused, None),
        })
    }

    /// A read under the record's cap, held to the signal's: over the cap only when the part
    /// before the handling block is.
    fn signal_capped(&self, read: ReadOutcome) -> ReadOutcome {
        let cap = self.opts.max_file_size;
        match read {
            ReadOutcome::Bytes(ref bytes, _) if bytes.len() as u64 > cap => {
                let size = body::signal_len(bytes) as u64;
                if size > cap {
                    ReadOutcome::TooLarge { size, cap }
                } else {
                    read
                }
            }
            ReadOutcome::TooLarge { size, .. } => ReadOutcome::TooLarge { size, cap },
            other => other,
        }
    }
}
