//! Moves a crash interrupted (spec/mailbox.md §9.3, §9.6): a file in two places, a claim
//! twin left beside its source, a claim to put back; and whether two files are one signal.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::record::Recorded;
use crate::body::{self};
use crate::error::Result;
use crate::io::ReadOutcome;
use crate::mailbox::route::Item;
use crate::mailbox::{Mailbox, identity, lossy};
use crate::name::own;
use crate::sys::EntryKind;

impl Mailbox {
    /// The destination of a claim is taken. When it holds this very signal (the same file
    /// under two links, left by an earlier version's link + unlink, or a copy with the same fields), an earlier claim
    /// was interrupted by a crash before it removed the source durably, so it was never handed
    /// over: redo it, synced (spec §9.6). `None` when the destination holds a different
    /// signal: the claim needs a fresh name.
    pub(super) fn finish_interrupted(
        &self,
        dir: &Path,
        src: &Path,
        dest: &Path,
        name: &OsStr,
        extra: &Map<String, Value>,
        agent: &str,
    ) -> Result<Option<Recorded>> {
        let (Some(a), Some(b)) = (self.io.stamp(src)?, self.io.stamp(dest)?) else {
            return Ok(Some(Recorded::Gone)); // the source went: another consumer resolved it
        };
        let same_file = (a.dev, a.ino) == (b.dev, b.ino);
        if !same_file && !self.same_signal(src, dest)? {
            return Ok(None);
        }
        if same_file {
            // Two links to one file (left by an earlier version's link + unlink): rename between them is a no-op by
            // POSIX, so drop the source link instead.
            if !self.io.remove(src)? {
                return Ok(Some(Recorded::Gone));
            }
        } else {
            match self.io.rename_replace(src, dest) {
                Ok(()) => {}
                Err(e)
                    if e.io_error()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
                {
                    return Ok(Some(Recorded::Gone));
                }
                Err(e) => return Err(e),
            }
        }
        let recorded = self.annotate(dest, name, extra, agent, None)?;
        self.io.sync_dir(&self.layout.processed)?;
        self.io.sync_dir(dir)?;
        Ok(Some(recorded))
    }

    /// Puts back a file a claim took by mistake (not the one it decided on, or not settled):
    /// to where it was, or, when that name is taken again, beside it under a fresh `.dup-`
    /// name; durably; with `touch`, its mtime set to now right after the move. The next pass
    /// sees it as it is. Returns where it went (`None`: it vanished, or no name was free).
    pub(super) fn put_back(
        &self,
        claimed: &Path,
        dir: &Path,
        name: &OsStr,
        touch: Option<&File>,
    ) -> Result<Option<PathBuf>> {
        let back = own::with_fresh_names(dir, name, |_, dest| {
            Ok(match self.io.rename_noreplace(claimed, &dest)? {
                crate::io::Renamed::Done => {
                    // The move back changed its ctime, which would make it look renamed in
                    // whole (§5): at once, before anything else, it reads as written now,
                    // and settles.
                    if let Some(f) = touch
                        && let Err(e) = self.io.touch(f, &dest)
                    {
                        tracing::warn!(error = %e, "a file put back may be read before it settles");
                    }
                    Some(Some(dest))
                }
                crate::io::Renamed::SourceGone => Some(None),
                crate::io::Renamed::DestExists => None,
            })
        })?;
        if back.is_none() {
            tracing::warn!(file = %claimed.display(), "cannot put back a file claimed in a race; it stays in flight");
        }
        self.io.sync_dir(dir)?;
        if let Some(slot) = claimed.parent() {
            self.io.sync_dir(slot)?;
        }
        tracing::debug!(file = %claimed.display(), "put back a file used again under a name being claimed");
        Ok(back.flatten())
    }

    /// A claimed file with two links whose other link is `processed/<name>`: a claim straight
    /// into `processed/` (an earlier version's, made by rename or by link + unlink) that a crash
    /// interrupted before it removed the source, so before any hand-over. The `processed/`
    /// link goes, durably (were it to come back, the claim would count as acknowledged), and
    /// the claim proceeds. True when it went.
    pub(super) fn drop_processed_twin(&self, claimed: &Path, name: &OsStr) -> Result<bool> {
        let twin = self.layout.processed.join(name);
        if claimed.parent() == Some(self.layout.processed.as_path()) {
            return Ok(false);
        }
        let same = match (self.io.stamp(claimed)?, self.io.stamp(&twin)?) {
            (Some(a), Some(b)) => (a.dev, a.ino) == (b.dev, b.ino) && b.kind == EntryKind::File,
            _ => false,
        };
        if same && self.io.remove(&twin)? {
            self.io.sync_dir(&self.layout.processed)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// True when the move of the dropped `item` to `moved` took another file than the one the
    /// scan read (its name used again meanwhile): then it is put back, and settles.
    pub(super) fn moved_another(&self, moved: &Path, item: &Item) -> Result<bool> {
        let Some(seen) = item.seen else {
            return Ok(false);
        };
        let (read, file) = self.read_claimed_signal(moved)?;
        if matches!(read, ReadOutcome::Bytes(_, st) if (st.ino, st.mtime_ns) == seen) {
            return Ok(false);
        }
        self.put_back(moved, &self.layout.inputs, &item.name, file.as_ref())?;
        Ok(true)
    }

    /// True (and the slot link removed) when `dir/name` is half of an interrupted move: the
    /// same signal is still at the claim's source (its removal never became durable, so it was
    /// never handed over: the source is delivered as usual), or already in `processed/` (its
    /// acknowledgement was made).
    pub(super) fn resolve_twin(&self, agent: &str, dir: &Path, name: &OsStr) -> Result<bool> {
        let path = dir.join(name);
        // The source a claim by link moved aside in the buffer this claim came from
        // (spec/mailbox.md §9.10, "Read by the other rule"): that name goes, and the claim
        // stays, to be delivered again now.
        self.drop_upstream_twin(&path, name)?;
        for same_file in self.twins(agent, &path, name)? {
            if same_file {
                // Under the lock, while the other link stands: a pass resolving the same
                // two links from the other side (§9.6) may have removed it meanwhile.
                if self.io.remove_second_link(&path)? {
                    return Ok(true);
                }
                continue;
            }
            // A copy: its inode is freed, so its removal is made durable before the inode
            // can be used again (spec/mailbox.md §9.1).
            self.io.remove_owned(&path)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The other halves of an interrupted move of the claimed `path` (named `name`), looked at
    /// without changing anything: for each of the claim's source (`inputs/`, the agent's
    /// buffer) and `processed/` that holds the same signal, whether it is the same file (a
    /// second link) rather than a copy. What [`Mailbox::resolve_twin`] resolves, and what
    /// reports do not count as coming again.
    pub(super) fn twins(&self, agent: &str, path: &Path, name: &OsStr) -> Result<Vec<bool>> {
        let mut out = Vec::new();
        for other in [
            &self.layout.inputs,
            &self.layout.buffer_dir(agent),
            &self.layout.processed,
        ] {
            let twin = other.join(name);
            let Some(b) = self.io.stamp(&twin)? else {
                continue;
            };
            let same_file = self
                .io
                .stamp(path)?
                .is_some_and(|a| (a.dev, a.ino) == (b.dev, b.ino));
            if same_file || self.same_signal(path, &twin)? {
                out.push(same_file);
            }
        }
        Ok(out)
    }

    /// The identity (spec §2.4) of the signal file at `path`, first named `name`, with the
    /// file's stamp; `None` when it is gone or holds no readable signal.
    pub(in crate::mailbox) fn identify(
        &self,
        path: &Path,
        name: &OsStr,
    ) -> Result<Option<(String, crate::sys::Stamp)>> {
        let ReadOutcome::Bytes(bytes, stamp) = self.read_signal_file(path)? else {
            return Ok(None);
        };
        let fname = lossy(name);
        Ok(body::read_signal(&bytes, &fname, path)
            .ok()
            .map(|sig| (identity::identity(&fname, &sig.fields, &stamp), stamp)))
    }

    /// True when `a` and `b` are one signal: two links to one file (a move a crash
    /// interrupted: the destination's entry became durable, the source's removal did not), or
    /// two files with one identity (§2.4), which only a file sigbox wrote can have (its name
    /// says which signal it is, whatever handling block either copy carries). Two dropped
    /// files with the same name and content are two signals: never one taken for the other.
    pub(in crate::mailbox) fn same_signal(&self, a: &Path, b: &Path) -> Result<bool> {
        match (self.io.stamp(a)?, self.io.stamp(b)?) {
            (Some(x), Some(y)) if (x.dev, x.ino) == (y.dev, y.ino) => return Ok(true),
            (Some(_), Some(_)) => {}
            _ => return Ok(false),
        }
        let id = |p: &Path| -> Result<Option<String>> {
            Ok(self
                .identify(p, p.file_name().unwrap_or_default())?
                .map(|(id, _)| id))
        };
        Ok(match (id(a)?, id(b)?) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        })
    }
}
