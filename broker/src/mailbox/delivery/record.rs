//! The record of a claim (spec/mailbox.md §3.4, §9.2): the claimed file read once, its
//! handling block spliced in place, and the delivery made of it.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{Delivery, Held, Undo};
use crate::body::{self};
use crate::error::Result;
use crate::io::ReadOutcome;
use crate::mailbox::links::Resolved;
use crate::mailbox::report::{Pass, Rejection};
use crate::mailbox::{Mailbox, identity, lossy};
use crate::name;
use crate::signal::Signal;

/// What annotating a claimed file found in it. A valid signal is the common outcome and
/// stays unboxed.
#[allow(clippy::large_enum_variant)]
pub(super) enum Recorded {
    /// A valid signal, annotated.
    Signal(Signal),
    /// Not a valid signal: quarantined from `processed/`.
    Rejected(Rejection),
    /// Gone, or taken by another process before it could be quarantined.
    Gone,
    /// Not the file the claim was decided on (its name was used again meanwhile), with the
    /// descriptor it was read through.
    Stale(Option<File>),
    /// A canonical-looking file sigbox did not write, changed within the settle window: put
    /// back, to be looked at again then.
    Unsettled(std::time::SystemTime),
}

impl Mailbox {
    /// What a claim's record says: a delivery, a rejection (recorded in `pass`), or nothing.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn delivery_of(
        &self,
        recorded: Recorded,
        pending: Option<PathBuf>,
        src: &Path,
        dest: &Path,
        dir: &Path,
        name: &OsStr,
        pass: &mut Pass,
    ) -> Result<Option<Delivery>> {
        Ok(match recorded {
            // The handling metadata was appended to the file; `annotate` returned the
            // signal with it.
            Recorded::Signal(signal) => Some(Delivery {
                held: Held::Claim(signal.path.clone(), None),
                signal,
                pending,
                undo: Undo::Claim(src.to_path_buf()),
            }),
            Recorded::Rejected(rej) => {
                pass.rejected.push(rej);
                None
            }
            Recorded::Gone => None,
            Recorded::Stale(file) => {
                self.put_back(dest, dir, name, file.as_ref())?;
                None
            }
            Recorded::Unsettled(until) => {
                if let Some(back) = self.put_back(dest, dir, name, None)? {
                    pass.note_settling(back, until);
                }
                None
            }
        })
    }

    /// Reads the claimed file at `dest`, and appends `extra` (handling metadata) to it, not
    /// synced: the record of who took the signal and when, which no delivery promise rests on
    /// (a power loss may lose it, or leave it torn, which readers ignore: §9.6). When the file
    /// does not hold a valid signal it is quarantined.
    pub(super) fn annotate(
        &self,
        dest: &Path,
        name: &OsStr,
        extra: &Map<String, Value>,
        agent: &str,
        expected: Option<(u64, i128)>,
    ) -> Result<Recorded> {
        // One read-write descriptor reads the file and then records in it; a file that cannot
        // be opened for writing is read without one (and left unannotated below).
        let (mut read, mut file) = self.read_claimed_signal(dest)?;
        // Leftovers of an interrupted claim (§9.6, §9.10), one per pass of the loop: a claim
        // straight into processed/, a source moved aside in the buffer it came from, or
        // another consumer's link to the same file (one claiming by link while this one claims
        // by rename): the first to resolve yields its link, and the other goes on with the
        // file, read again.
        for _ in 0..3 {
            let ReadOutcome::HardLinked(_) = read else {
                break;
            };
            let again = self.drop_processed_twin(dest, name)?
                || self.drop_upstream_twin(dest, name)?
                || match dest.parent().zip(dest.file_name()) {
                    Some((dir, held)) => match self.resolve_own_link(dir, held)? {
                        Some(Resolved::Here) => return Ok(Recorded::Gone),
                        Some(Resolved::There) => true,
                        // Another process holds the file (stopped, or past the wait): not
                        // read as a hard-linked file; the quarantine below finds it held
                        // too and leaves it (spec/mailbox.md §9.11).
                        Some(Resolved::Busy) => false,
                        // Its other link went meanwhile.
                        None => self.io.stamp(dest)?.is_some_and(|st| st.nlink < 2),
                    },
                    None => false,
                };
            if !again {
                break;
            }
            (read, file) = self.read_claimed_signal(dest)?;
        }
        let reason = match read {
            ReadOutcome::Gone => return Ok(Recorded::Gone),
            ReadOutcome::Bytes(bytes, stamp) => {
                // The move took the file the claim was decided on, or another one put under
                // its name since (a name used again), which this pass neither settled nor
                // routed: it goes back.
                if expected.is_some_and(|exp| exp != (stamp.ino, stamp.mtime_ns)) {
                    return Ok(Recorded::Stale(file));
                }
                let fname = lossy(name);
                let format = name::format_of(&fname);
                // A record, not a bare body: after a crash the source may share the inode of an
                // interrupted claim whose handling block was already appended.
                let parsed = body::read_signal_end(&bytes, &fname, dest);
                // A canonical-looking name sigbox did not write settles like a dropped file
                // written in place (spec §2.4).
                let fields = parsed.as_ref().ok().map(|(s, _)| &s.fields);
                let now = self.fs_now();
                if let Some(until) =
                    identity::untrusted_settling(&fname, fields, &stamp, self.opts.settle, now)
                {
                    return Ok(Recorded::Unsettled(until));
                }
                match parsed {
                    Ok((mut sig, end)) => {
                        sig.id = identity::identity(&fname, &sig.fields, &stamp);
                        // Appended in place, as upstream does: a claim allocates and frees no
                        // inode (on ext4, creating files right after frees is slow, and that
                        // would slow producers too).
                        let a = body::annotation(&bytes, format, extra, end);
                        let appended = match file {
                            _ if !body::records_whole(&bytes, format, &a) => {
                                tracing::debug!(file = %dest.display(), "no handling record: it would not stay one document");
                                Ok(())
                            }
                            Some(f) => self
                                .io
                                .replace_tail(&f, dest, a.span(&bytes), &a.tail)
                                .and_then(|()| self.keep_order(&f, dest, &fname, &stamp)),
                            None => self.io.replace_tail_unsynced(dest, a.span(&bytes), &a.tail),
                        };
                        match appended {
                            Ok(()) => {}
                            // A file dropped with a private mode by another user: the claim
                            // (a rename, which needs only the directories) stands; only the
                            // annotation is lost.
                            Err(e)
                                if e.io_error().is_some_and(crate::sys::is_permission_denied) =>
                            {
                                tracing::warn!(file = %dest.display(), "cannot annotate the claimed file (permission denied); the claim stands");
                            }
                            Err(e) => return Err(e),
                        }
                        // The handling metadata just appended, in the delivered record too.
                        sig.fields.extend(extra.clone());
                        return Ok(Recorded::Signal(sig));
                    }
                    Err(reason) => reason,
                }
            }
            other => other.rejection().unwrap_or_default(),
        };
        // Quarantine the file this claim holds: `dest` may carry a `.dup-` name, and the plain
        // name may be an earlier, valid record that must stay where it is.
        let parent = dest.parent().unwrap_or(&self.layout.processed);
        let held = dest.file_name().unwrap_or(name);
        Ok(match self.quarantine(parent, held, &reason, agent)? {
            Some(rej) => Recorded::Rejected(rej),
            None => Recorded::Gone,
        })
    }
}
