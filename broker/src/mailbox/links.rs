//! Two links to one signal file that sigbox itself left (spec/mailbox.md §9.6): a crash, where
//! a rename's new entry became durable and the removal of its old one did not (ext4 without a
//! journal writes directory blocks independently; its `fsck` then counts two links). The
//! hard-link rule (§3.3) quarantines a file with more than one link, since the other may be
//! outside the root; a second link that is sigbox's own, under the file's own name in the
//! place the file was moving to or from, is resolved instead.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::{Mailbox, lossy};
use crate::error::Result;
use crate::io::{ReadOutcome, SecondLink};
use crate::name;
use crate::name::own;
use crate::sys::{EntryKind, Stamp};

/// How a second link sigbox left was resolved.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Resolved {
    /// The link at the place asked about was the leftover (the move had reached its
    /// destination): it is gone, durably.
    Here,
    /// The other link was the leftover (a send's staging name, or a claim slot's link to a
    /// file still at its source): it is gone, durably, and the file is read again as usual.
    There,
    /// Nothing removed: another process holds the file's lock (a claim by link under way, or
    /// a resolution of the same links), stopped or for longer than the wait
    /// (spec/mailbox.md §9.11). The file is left as it is: neither delivered nor quarantined
    /// by this pass.
    Busy,
}

impl Mailbox {
    /// When `dir/name` has two links and the other is sigbox's own leftover, removes the
    /// leftover durably and says which; `None` when the other link is not found where sigbox
    /// puts files (then it may lead anywhere, and the file is quarantined).
    ///
    /// The moves, and so the leftovers, by place of the file asked about:
    /// - `inputs/`: a send's staging name `.<pid>.<unique tail>.send.tmp` beside it (the
    ///   staging link goes); `buffered/<agent>/<name>` (the orchestrator's move): the move was
    ///   made, the `inputs/` link goes; a claim slot's `<name>`: the claim was never handed
    ///   over (its hand-over waits for the fsync of `inputs/`), the `inputs/` link goes and the
    ///   slot's owner delivers it again, marked;
    /// - a buffer: `inputs/<name>` (the orchestrator's move): the `inputs/` link goes; a slot
    ///   of its agent: the buffer's link goes;
    /// - either, with `processed/<name>`: the `processed/` link goes (below).
    pub(super) fn resolve_own_link(&self, dir: &Path, name: &OsStr) -> Result<Option<Resolved>> {
        let Some((leftover, resolved, kept)) = self.own_link(dir, name)? else {
            return Ok(None);
        };
        // The link that stays is made durable first: it may be a claim's link that its
        // claimer has not synced yet (a claim by link under way, §9.10), and the removal of
        // the other must never become durable before it.
        if let Some(parent) = kept.parent() {
            self.io.sync_dir(parent)?;
        }
        // Not removed: the file lost its other link meanwhile (another process resolved the
        // same two links from the other side), and stays here, to be read again; or another
        // process holds it.
        match self.drop_link(&leftover)? {
            SecondLink::Removed => Ok(Some(resolved)),
            SecondLink::Kept => Ok(Some(Resolved::There)),
            SecondLink::Busy(_) => Ok(Some(Resolved::Busy)),
        }
    }

    /// The leftover link [`resolve_own_link`](Self::resolve_own_link) would remove, which side
    /// it is, and the link that stays, without removing anything (what `ls` and `doctor`
    /// report). A claim by link under way (§9.10) looks the same as one a crash interrupted
    /// before its source went: resolving it for the claimer is safe, since its link is synced
    /// before the source's removal.
    pub(super) fn own_link(
        &self,
        dir: &Path,
        name: &OsStr,
    ) -> Result<Option<(PathBuf, Resolved, PathBuf)>> {
        let here = dir.join(name);
        let Some(st) = self.io.stamp(&here)? else {
            return Ok(None);
        };
        if st.nlink < 2 || st.kind != EntryKind::File {
            return Ok(None);
        }
        let same = |p: &Path| -> Result<bool> {
            Ok(self
                .io
                .stamp(p)?
                .is_some_and(|o| (o.dev, o.ino) == (st.dev, st.ino)))
        };
        // Beside it: the source name a claim by link moved aside to remove it (§9.10) and did
        // not unlink before a crash (or has not yet), or a send's staging name: that name goes.
        for twin in self.twins_beside(dir, name)? {
            if same(&twin)? {
                return Ok(Some((twin, Resolved::There, here)));
            }
        }
        if let Some(twin) = self.upstream_twin(dir, name, &st)? {
            return Ok(Some((twin, Resolved::There, here)));
        }
        // In processed/: an archive, or (an earlier version's) claim straight into processed/,
        // interrupted. Which, the link count does not say; dropping the processed/ link
        // decides safely: a targeted signal is claimed again, a broadcast finds every ack it
        // had (acks go by identity, which the file keeps) and is archived again.
        let record = self.layout.processed.join(name);
        if dir != self.layout.processed && same(&record)? {
            return Ok(Some((record, Resolved::There, here)));
        }
        // In a buffer, with inputs/<name>: the orchestrator's move into the buffer (by link,
        // §9.10, or by a rename a crash left half durable) reached it: the inputs/ link goes.
        let source = self.layout.inputs.join(name);
        if dir != self.layout.inputs
            && dir.parent() == Some(self.layout.buffered.as_path())
            && same(&source)?
        {
            return Ok(Some((source, Resolved::There, here)));
        }
        // In the bridge's outbox, with its source (inputs/ or a buffer): the move out for
        // export reached the outbox, the source goes; with bridge/sent/<name>: the record of
        // its export was made, the outbox's link goes (spec/bridge.md).
        if dir == self.layout.outbox {
            let sent = self.layout.sent.join(name);
            if same(&sent)? {
                return Ok(Some((here, Resolved::Here, sent)));
            }
            let mut sources = vec![source];
            sources.extend(
                self.io
                    .list(&self.layout.buffered, true)?
                    .into_iter()
                    .filter(|e| e.kind == EntryKind::Dir)
                    .map(|e| self.layout.buffered.join(e.name).join(name)),
            );
            for src in sources {
                if same(&src)? {
                    return Ok(Some((src, Resolved::There, here)));
                }
            }
            return Ok(None);
        }
        let mut later: Vec<PathBuf> = Vec::new();
        // From inputs/ or a buffer into the bridge's outbox: the source goes.
        later.push(self.layout.outbox.join(name));
        let agents: Vec<String> = if dir == self.layout.inputs {
            self.io
                .list(&self.layout.buffered, true)?
                .into_iter()
                .chain(self.io.list(&self.layout.claimed, true)?)
                .filter(|e| e.kind == EntryKind::Dir)
                .filter_map(|e| e.name.into_string().ok())
                .collect()
        } else if let Some(slot_agent) = dir
            .parent()
            .filter(|a| a.parent() == Some(&*self.layout.claimed))
            .and_then(|a| a.file_name())
        {
            // A claim slot's agent: the slot's parent's name. Another of its slots holds a
            // second link only when two consumers took the file at once, one by link and one
            // by rename (SIGBOX_LINK_CLAIMS set for one of them): the one that resolves first
            // yields its link, the other keeps the file.
            vec![lossy(slot_agent)]
        } else {
            // A buffer's agent: its directory's name.
            dir.file_name().map(lossy).into_iter().collect()
        };
        for agent in &agents {
            if dir == self.layout.inputs {
                later.push(self.layout.buffer_dir(agent).join(name));
            }
            for (_, slot) in self.slots(agent)? {
                later.push(slot.join(name));
            }
        }
        for other in &later {
            if *other != here && same(other)? {
                return Ok(Some((here, Resolved::Here, other.clone())));
            }
        }
        Ok(None)
    }

    /// Reads `dir/name` as an untrusted file; when it has two links and the other is sigbox's
    /// own leftover, resolves that first (and reads again when the file stays here). `None`
    /// when the link here was the leftover: the file is elsewhere now.
    pub(super) fn read_resolving(&self, dir: &Path, name: &OsStr) -> Result<Option<ReadOutcome>> {
        let path = dir.join(name);
        let mut read = self.read_signal_file(&path)?;
        // A crash can leave three names (a claim by link's source, its link, and the source
        // moved aside): one resolution per leftover.
        for _ in 0..3 {
            let ReadOutcome::HardLinked(_) = read else {
                break;
            };
            match self.resolve_own_link(dir, name)? {
                // Held by another process: left for a later pass, as if elsewhere.
                Some(Resolved::Here | Resolved::Busy) => return Ok(None),
                Some(Resolved::There) => {
                    read = self.read_signal_file(&path)?;
                }
                None => break,
            }
        }
        Ok(Some(read))
    }

    /// The staging names in `dir` that may be a second link of `dir/name`, from one listing:
    /// every source a claim by link moved aside (`.<pid>.<16 hex>.claim.tmp`, §9.10), and in
    /// `inputs/`, the names a send of the canonical `name` staged under (`.<pid>.<the last 16
    /// hex of its unique part>.send.tmp`, any pid). Listed only for a file with a second link.
    fn twins_beside(&self, dir: &Path, name: &OsStr) -> Result<Vec<PathBuf>> {
        let send_tail = (dir == self.layout.inputs)
            .then(|| name.to_str().and_then(name::parse_canonical))
            .flatten()
            .map(|c| format!(".{}.send.tmp", &c.unique[16..]));
        Ok(self
            .io
            .list(dir, true)?
            .into_iter()
            .filter(|e| {
                own::is_claim_twin(&e.name)
                    || send_tail.as_ref().is_some_and(|tail| {
                        own::is_stage_name(&e.name)
                            && e.name.to_str().is_some_and(|n| n.ends_with(tail))
                    })
            })
            .map(|e| dir.join(e.name))
            .collect())
    }

    /// The source a claim by link moved aside in the buffer `dir/name` came from, when it is
    /// still a second link of the file (`st`, its stamp): the file reached its buffer (the
    /// orchestrator's move, §9.10), a crash came before the source's unlink, and a process
    /// that claims by rename (another filesystem's rule, or `SIGBOX_LINK_CLAIMS=0`) then moved
    /// the file on without reading it, into a claim slot or the bridge's outbox.
    fn upstream_twin(&self, dir: &Path, name: &OsStr, st: &Stamp) -> Result<Option<PathBuf>> {
        for buffer in self.buffers_upstream(dir)? {
            for twin in self.twins_beside(&buffer, name)? {
                if self
                    .io
                    .stamp(&twin)?
                    .is_some_and(|o| (o.dev, o.ino) == (st.dev, st.ino))
                {
                    return Ok(Some(twin));
                }
            }
        }
        Ok(None)
    }

    /// For a file just claimed by rename into `dest` (a slot, the bridge's outbox) and read
    /// with a second link: removes [`upstream_twin`](Self::upstream_twin), once the claim's
    /// own link is durable. True when it went.
    pub(super) fn drop_upstream_twin(&self, dest: &Path, name: &OsStr) -> Result<bool> {
        let (Some(dir), Some(st)) = (dest.parent(), self.io.stamp(dest)?) else {
            return Ok(false);
        };
        let Some(twin) = self.upstream_twin(dir, name, &st)? else {
            return Ok(false);
        };
        self.io.sync_dir(dir)?;
        Ok(self.drop_link(&twin)? == SecondLink::Removed)
    }

    /// The buffers a file in `dir` may have been moved out of by a rename, unread: for a claim
    /// slot `claimed/<agent>/<n>/`, that agent's buffer; for the bridge's outbox, every buffer.
    fn buffers_upstream(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        if dir == self.layout.outbox {
            return Ok(self
                .io
                .list(&self.layout.buffered, true)?
                .into_iter()
                .filter(|e| e.kind == EntryKind::Dir)
                .map(|e| self.layout.buffered.join(e.name))
                .collect());
        }
        let agent = dir
            .parent()
            .filter(|a| a.parent() == Some(&*self.layout.claimed));
        Ok(agent
            .and_then(|a| a.file_name())
            .map(|a| self.layout.buffered.join(a))
            .into_iter()
            .collect())
    }

    /// Removes a leftover link and makes its removal durable; what [`Io::remove_second_link_or_busy`]
    /// did.
    fn drop_link(&self, path: &Path) -> Result<SecondLink> {
        let done = self.io.remove_second_link_or_busy(path)?;
        if done != SecondLink::Removed {
            return Ok(done);
        }
        if let Some(dir) = path.parent() {
            self.io.sync_dir(dir)?;
        }
        // Left by a crash, or by a claim by link under way in another process (its link made,
        // its source not removed yet): the one that stays was synced first.
        tracing::info!(file = %path.display(), "removed a second link to a signal (left by a crash, or by a claim by link under way)");
        Ok(SecondLink::Removed)
    }
}
