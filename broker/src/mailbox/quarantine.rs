//! Quarantine (spec/mailbox.md §8): a file that can never be delivered is moved into
//! `rejected/` with a reason file beside it. Nothing is deleted but on a person's request
//! (`sigbox gc --rejected`, [`Mailbox::clear_rejected`]).

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::layout::Layout;
use super::report::{Pass, Rejection};
use super::{Mailbox, lossy};
use crate::atomic::{self, Claimed, Clobber};
use crate::clock::{self, Precision};
use crate::error::{Error, ErrorKind, Result};
use crate::io::ReadOutcome;
use crate::name::own;
use crate::sys::EntryKind;

impl Mailbox {
    /// Moves `dir/name` to `rejected/` and writes the reason beside it. `None` when another
    /// process moved the file first.
    pub(super) fn quarantine(
        &self,
        dir: &Path,
        name: &OsStr,
        reason: &str,
        agent: &str,
    ) -> Result<Option<Rejection>> {
        // A second link a crash left is sigbox's own, not a reason to quarantine (§9.6): once
        // resolved, the file is gone from here or read again by the next pass.
        if self.resolve_own_link(dir, name)?.is_some() {
            return Ok(None);
        }
        let src = dir.join(name);
        // Refused for its links, which are one now (the other was resolved since the read),
        // or whose second link may still be on its way out (§3.3): the next pass reads it
        // again.
        if crate::io::is_hard_link_reason(reason) && self.links_waiting(&src)?.is_some() {
            return Ok(None);
        }
        let found = own::with_fresh_names(&self.layout.rejected, name, |_, dest| {
            let write_reason = || {
                let body = json!({
                    "file": lossy(name),
                    "from": src.to_string_lossy(),
                    "reason": reason,
                    "rejected_at": clock::now_rfc3339(Precision::Micros),
                    "rejected_by": agent,
                });
                let mut bytes = serde_json::to_vec_pretty(&body).expect("JSON serializes");
                bytes.push(b'\n');
                let stage = own::stage_name(&self.layout.rejected, "reason");
                let why = Layout::reason_path(&dest);
                atomic::write_atomic(&self.io, &stage, &why, &bytes, Clobber::Yes)
            };
            Ok(
                match atomic::claim_refused(&self.io, &src, &dest, write_reason)? {
                    Claimed::Lost => Some(None),
                    Claimed::Won(_) => {
                        tracing::info!(from = %src.display(), file = %dest.display(), reason, "quarantined");
                        Some(Some(Rejection {
                            name: lossy(name),
                            path: dest,
                            reason: reason.to_string(),
                        }))
                    }
                    Claimed::DestExists => None,
                },
            )
        })?;
        found.ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                Some(&src),
                "cannot find a free name in rejected/",
            )
        })
    }

    /// [`Mailbox::quarantine`], recording the rejection in `pass`.
    pub(super) fn quarantine_into(
        &self,
        pass: &mut Pass,
        dir: &Path,
        name: &OsStr,
        reason: &str,
        agent: &str,
    ) -> Result<()> {
        if crate::io::is_hard_link_reason(reason)
            && let Some(Some(until)) = self.links_waiting(&dir.join(name))?
        {
            pass.note_settling(dir.join(name), until);
            return Ok(());
        }
        match self.quarantine(dir, name, reason, agent) {
            Ok(Some(r)) => pass.rejected.push(r),
            Ok(None) => {}
            // A full disk (or quota, or no descriptor left) while the reason is written: the
            // file stays where it is, unread by anyone, and a later pass quarantines it; what
            // else this pass finds is still delivered (spec/mailbox.md §8). Only the write
            // failed: the move is undone before the error reaches here.
            Err(e) if e.io_error().is_some_and(crate::sys::is_transient) => {
                tracing::warn!(file = %dir.join(name).display(), error = %e,
                    "cannot quarantine this file now; it stays where it is until a later pass \
                     can (the rest is delivered)");
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Why a file refused for its links is not refused now: `Some(None)` when it has one link
    /// (or is gone), `Some(Some(t))` while its second link may still be on its way out (until
    /// `t`, §3.3); `None` when the hard-link rule applies.
    fn links_waiting(&self, path: &Path) -> Result<Option<Option<std::time::SystemTime>>> {
        Ok(match self.io.stamp(path)? {
            None => Some(None),
            Some(st) if st.nlink < 2 => Some(None),
            Some(st) => clock::links_settling(&st, self.opts.settle, self.fs_now()).map(Some),
        })
    }

    /// True for a staging name in `rejected/` that is sigbox's own write in progress (a reason
    /// being written), not a quarantined entry: a quarantined entry has its reason beside it,
    /// whatever its name. A symlink, FIFO or directory planted under a staging name elsewhere
    /// and quarantined keeps that name, and is listed and cleared as any other.
    fn own_stage(&self, path: &Path, name: &OsStr) -> Result<bool> {
        Ok(own::is_stage_name(name) && self.io.stamp(&Layout::reason_path(path))?.is_none())
    }

    /// Files in `rejected/` with their reasons.
    pub fn rejected(&self) -> Result<Vec<Rejection>> {
        let mut out = Vec::new();
        for e in self.io.list(&self.layout.rejected, true)? {
            let path = self.layout.rejected.join(&e.name);
            if Layout::is_reason_file(&e.name) || self.own_stage(&path, &e.name)? {
                continue;
            }
            let why = Layout::reason_path(&path);
            let reason = match self.io.read_untrusted(&why, self.opts.max_file_size)? {
                ReadOutcome::Bytes(b, _) => serde_json::from_slice::<Value>(&b)
                    .ok()
                    .and_then(|v| v.get("reason").and_then(Value::as_str).map(String::from)),
                _ => None,
            };
            out.push(Rejection {
                name: lossy(&e.name),
                path,
                reason: reason.unwrap_or_else(|| "(no reason recorded)".into()),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes the quarantined files in `rejected/` that were quarantined at least `age` ago,
    /// with their reason files: once a person has read them (`sigbox ls --all`, `doctor`),
    /// what `sigbox gc --rejected` clears. Whatever a file is (a symlink or a FIFO that was
    /// quarantined is removed as the link or node it is, never followed); directories are
    /// left. Returns how many quarantined files it removed.
    pub fn clear_rejected(&self, age: Duration) -> Result<usize> {
        let now = clock::ns_of(self.fs_now());
        let dir = &self.layout.rejected;
        let mut removed = 0;
        for e in self.io.list(dir, true)? {
            let path = dir.join(&e.name);
            if e.kind == EntryKind::Dir {
                // A directory planted in a drop zone and quarantined: what is in it came from
                // elsewhere and may be anyone's, so gc never removes a tree. Said, not kept
                // silently.
                tracing::warn!(dir = %path.display(),
                    "a quarantined directory is kept: gc removes no directory; remove it by \
                     hand (`rm -r`) once read");
                continue;
            }
            if Layout::is_reason_file(&e.name) || self.own_stage(&path, &e.name)? {
                continue;
            }
            // Moved here by a rename, which sets the ctime: when it was quarantined.
            let old = self
                .io
                .stamp(&path)?
                .is_some_and(|st| now - st.changed_ns() >= age.as_nanos() as i128);
            if old && self.io.remove_emptied(&path)? {
                self.io.remove_emptied(&Layout::reason_path(&path))?;
                removed += 1;
            }
        }
        if removed > 0 {
            self.io.sync_dir(dir)?;
        }
        Ok(removed)
    }
}
