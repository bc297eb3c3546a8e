//! Broadcasts (spec/mailbox.md §9.4, §9.5): delivered once per agent with an idempotent ack,
//! archived into `processed/` when the quorum has acked, or at `finish` as partial.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::PathBuf;

use serde_json::json;

use super::layout::Layout;
use super::report::{ArchivedBroadcast, Finished, Pass};
use super::route::{Item, Source};
use super::{Mailbox, identity, lossy};
use crate::atomic::{self, Clobber, Placed};
use crate::body::{Archived, Handled};
use crate::clock::{self, Precision};
use crate::error::Result;
use crate::io::ReadOutcome;
use crate::name::own;
use crate::signal::{Signal, Target};
use crate::sys::EntryKind;

impl Mailbox {
    /// Delivers a broadcast to `agent` once: writes its marker into the handle's `slot`,
    /// then `acks/<id>/<agent>.ack` without replacing. `None` when the agent has acked it
    /// before (in either ack form), when `agent` sent it (its `from`: then the ack is
    /// written and nothing handed over), or when the file is gone or invalid (then it is
    /// quarantined and recorded in `pass`).
    ///
    /// **Durability:** the marker, then the ack, are written atomically and durably before
    /// the signal is returned: a consumer that dies before handing it over leaves the marker,
    /// and the agent's next pass delivers the broadcast again.
    pub(super) fn ack_once(
        &self,
        slot: &std::path::Path,
        item: &Item,
        agent: &str,
        pass: &mut Pass,
    ) -> Result<Option<(Signal, PathBuf, PathBuf)>> {
        let name = item.name.as_os_str();
        let key = (agent.to_string(), name.to_os_string());
        let inputs = &self.layout.inputs;
        let src = inputs.join(name);
        let known = self
            .acked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        if let Some(file) = known
            && self
                .io
                .stamp(&src)?
                .is_some_and(|st| (st.ino, st.ctime_ns) == file)
        {
            return Ok(None);
        }
        let fname = lossy(name);
        let Some(read) = self.read_resolving(inputs, name)? else {
            return Ok(None);
        };
        let reason = match read {
            ReadOutcome::Gone => return Ok(None),
            ReadOutcome::Bytes(bytes, stamp) => {
                let parsed = Signal::parse_file_bytes(&bytes, &src);
                let fields = parsed.as_ref().ok().map(|s| &s.fields);
                let now = self.fs_now();
                if let Some(until) =
                    identity::untrusted_settling(&fname, fields, &stamp, self.opts.settle, now)
                {
                    pass.note_settling(src.clone(), until);
                    return Ok(None);
                }
                match parsed {
                    // Routed as a broadcast on what the scan read: the file here now must be
                    // that one (a dropped name can be used again meanwhile) and a broadcast;
                    // anything else waits for the next pass to route it as what it is.
                    Ok(sig)
                        if sig.target != Target::All
                            || item
                                .seen
                                .is_some_and(|seen| seen != (stamp.ino, stamp.mtime_ns)) =>
                    {
                        return Ok(None);
                    }
                    Ok(mut sig) => {
                        let id = identity::identity(&fname, &sig.fields, &stamp);
                        sig.id.clone_from(&id);
                        let remember = || {
                            self.acked
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .insert(key.clone(), (stamp.ino, stamp.ctime_ns));
                        };
                        let ack_dir = self.layout.ack_dir(&id);
                        let [ack, upstream_ack] = Layout::ack_names(agent).map(|n| ack_dir.join(n));
                        if self.ack_counts(&ack, Some((agent, &mut *pass)))?
                            || self.ack_counts(&upstream_ack, Some((agent, &mut *pass)))?
                            || self.upstream_acks(&id, &stamp)?.iter().any(|a| a == agent)
                        {
                            remember();
                            return Ok(None);
                        }
                        // Its own broadcast: acked for its sender (the ack counts toward the
                        // quorum), never handed to it. Nothing is handed over, so no marker.
                        if sig.from.as_deref() == Some(agent) {
                            self.write_ack(&ack_dir, &ack, &id, agent, sig)?;
                            remember();
                            return Ok(None);
                        }
                        let marker = slot.join(Layout::marker_name(OsStr::new(&id)));
                        self.write_marker(&marker, &fname, &id, 0)?;
                        let written = self.write_ack(&ack_dir, &ack, &id, agent, sig)?;
                        remember();
                        return Ok(match written {
                            Some((sig, ack)) => Some((sig, ack, marker)),
                            None => {
                                // Another handle of the agent acked it first: it delivers.
                                self.drop_marker(&marker)?;
                                None
                            }
                        });
                    }
                    Err(e) => e.reason().to_string(),
                }
            }
            other => other.rejection().unwrap_or_default(),
        };
        self.quarantine_into(pass, inputs, name, &reason, agent)?;
        Ok(None)
    }

    /// Writes `ack` (no-clobber) and returns `sig` when this write made it.
    fn write_ack(
        &self,
        ack_dir: &std::path::Path,
        ack: &std::path::Path,
        id: &str,
        agent: &str,
        sig: Signal,
    ) -> Result<Option<(Signal, PathBuf)>> {
        self.io.create_dir_durable(ack_dir)?;
        let body = json!({
            "signal": id,
            "agent": agent,
            "acked_at": clock::now_rfc3339(Precision::Micros),
        });
        let mut bytes = serde_json::to_vec(&body).expect("JSON serializes");
        bytes.push(b'\n');
        let stage = own::stage_name(ack_dir, "ack");
        Ok(
            match atomic::write_atomic(&self.io, &stage, ack, &bytes, Clobber::No)? {
                Placed::Done => Some((sig, ack.to_path_buf())),
                Placed::Exists => None,
            },
        )
    }

    /// True when an ack stands at `path`: a regular file, as sigbox and upstream write them.
    /// Anything else under an ack's name (a FIFO, a directory, a symlink, a socket) is no ack
    /// (spec/mailbox.md §9.4): it never counts, and with `quarantine` (the agent's pass) it is
    /// quarantined like any other hostile entry, so that the name is free for the agent's real
    /// ack and the agent gets its broadcast.
    fn ack_counts(
        &self,
        path: &std::path::Path,
        quarantine: Option<(&str, &mut Pass)>,
    ) -> Result<bool> {
        let Some(st) = self.io.stamp(path)? else {
            return Ok(false);
        };
        if st.kind == EntryKind::File {
            return Ok(true);
        }
        if let (Some((agent, pass)), Some(dir), Some(name)) =
            (quarantine, path.parent(), path.file_name())
        {
            let reason = format!(
                "{} under an ack's name: an ack is a regular file that sigbox or upstream \
                 writes, so this one does not count, and the agent is given its broadcast",
                st.kind.describe()
            );
            self.quarantine_into(pass, dir, name, &reason, agent)?;
        }
        Ok(false)
    }

    /// The agents that have acked broadcast `id` (sigbox's `.ack` and upstream's
    /// `.ack.yaml`, regular files only: [`Mailbox::ack_counts`]), sorted.
    pub fn acked_by(&self, id: &str) -> Result<Vec<String>> {
        let mut out: Vec<String> = self
            .io
            .list(&self.layout.ack_dir(id), true)?
            .into_iter()
            .filter(|e| e.kind == EntryKind::File)
            .filter_map(|e| Layout::ack_agent(e.name.to_str()?).map(String::from))
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// The agents whose upstream ack, `acks/<stem>/<Agent>.ack.yaml` (upstream's signal id
    /// is the name without its extension), counts for the dropped broadcast with identity
    /// `id` whose file has `stamp`: an ack written after that file arrived. An ack left by
    /// an earlier file of the same name is older, so it never counts for a new one; two
    /// pending files with one stem (`news.yaml`, `news.json`) share upstream's acks, which
    /// cannot tell them apart (spec §2.4).
    fn upstream_acks(&self, id: &str, stamp: &crate::sys::Stamp) -> Result<Vec<String>> {
        let Some((stem, _)) = id.rsplit_once('@') else {
            return Ok(Vec::new()); // sigbox's own: its acks are under its id
        };
        // Since the file came to be where it is: its ctime (a rename into inputs/ sets it;
        // nothing changes a pending broadcast after). A draft written before older acks and
        // moved in later is still new. An ack's time is its mtime, no later than its ctime (an
        // mtime from a clock that runs ahead never makes an old ack new).
        let since = stamp.ctime_ns;
        let dir = self.layout.ack_dir(stem);
        let mut out = Vec::new();
        for e in self.io.list(&dir, true)? {
            let Some(agent) = e.name.to_str().and_then(|n| n.strip_suffix(".ack.yaml")) else {
                continue;
            };
            if self
                .io
                .stamp(&dir.join(&e.name))?
                .is_some_and(|st| st.kind == EntryKind::File && st.mtime_clamped_ns() >= since)
            {
                out.push(agent.to_string());
            }
        }
        Ok(out)
    }

    /// The quorum agents that have not acked the broadcast with identity `id`, whose file has
    /// `stamp`.
    fn unacked(&self, id: &str, stamp: &crate::sys::Stamp) -> Result<Vec<String>> {
        let mut acked: HashSet<String> = self.acked_by(id)?.into_iter().collect();
        acked.extend(self.upstream_acks(id, stamp)?);
        Ok(self
            .opts
            .quorum
            .iter()
            .filter(|q| !acked.contains(*q))
            .cloned()
            .collect())
    }

    /// Archives the broadcast in `inputs/<name>` when the whole quorum has acked it; its id
    /// and its record when this call archived it.
    pub(super) fn archive_if_acked(
        &self,
        name: &OsStr,
        agent: &str,
    ) -> Result<Option<ArchivedBroadcast>> {
        let Some((id, stamp)) = self.identify(&self.layout.inputs.join(name), name)? else {
            return Ok(None);
        };
        // Most passes find acks missing: no lock for that.
        if !self.unacked(&id, &stamp)?.is_empty() {
            return Ok(None);
        }
        // The acks are read again and the broadcast archived under the lock on its acks,
        // which the take-back of an ack waits for (`Mailbox::undo`): an ack counted here is
        // never removed before the broadcast has left `inputs/`.
        // Held by a process that is stopped (or for long): archived by a later pass.
        let decided = self.io.wait_lock_dir(&self.layout.ack_dir(&id))?;
        if !decided.had() || !self.unacked(&id, &stamp)?.is_empty() {
            return Ok(None);
        }
        let archived = self.archive(name, agent, Archived::Delivered, &[])?;
        Ok(archived.map(|path| ArchivedBroadcast { id, path }))
    }

    /// Archives a broadcast into `processed/` with its delivery status; its record, unless
    /// another pass took it first.
    fn archive(
        &self,
        name: &OsStr,
        agent: &str,
        status: Archived,
        unacked: &[String],
    ) -> Result<Option<PathBuf>> {
        let extra = Handled::Archived(status, unacked).fields(agent);
        let mut scratch = Pass::default();
        let inputs = &self.layout.inputs;
        let r = self.claim_into(
            &self.layout.processed,
            inputs,
            name,
            agent,
            extra,
            &mut scratch,
            None,
            Default::default(),
        )?;
        Ok(r.map(|d| d.signal.path))
    }

    /// Archives every pending broadcast at session end: `delivered` when the quorum acked,
    /// else `partial` with the agents that did not.
    pub fn finish(&self, agent: &str) -> Result<Vec<Finished>> {
        self.check_agent(agent)?;
        let all = |t: &str| t == "ALL";
        let scan = self.scan(&self.layout.inputs, Source::Inputs, &all, self.fs_now())?;
        let mut out = Vec::new();
        for item in scan.items {
            if item.target != Target::All {
                continue;
            }
            let Some((id, stamp)) =
                self.identify(&self.layout.inputs.join(&item.name), &item.name)?
            else {
                continue;
            };
            // As in `archive_if_acked`: an ack counted here stays until the archive is done.
            // Held by a process that is stopped (or for long): left pending, as `finish`
            // leaves a broadcast another pass archives first (its warning names the holder).
            let decided = self.io.wait_lock_dir(&self.layout.ack_dir(&id))?;
            if !decided.had() {
                continue;
            }
            let unacked = self.unacked(&id, &stamp)?;
            let status = if unacked.is_empty() {
                Archived::Delivered
            } else {
                Archived::Partial
            };
            if self.archive(&item.name, agent, status, &unacked)?.is_some() {
                out.push(Finished {
                    id,
                    status,
                    unacked,
                });
            }
        }
        Ok(out)
    }
}
