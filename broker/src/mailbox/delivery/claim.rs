//! The claim (spec/mailbox.md §9.2, §9.10): a no-clobber move of a signal file into the
//! claiming handle's slot, by rename or, where renames are not atomic across directories, by
//! link; a fresh name when its own is taken.

use std::ffi::OsStr;
use std::path::Path;

use serde_json::{Map, Value};

use super::Delivery;
use super::commit::{Batch, Entry, LinkedClaim};
use crate::atomic::{self, Claimed, LinkStep};
use crate::body::{self, Handled};
use crate::error::{Error, ErrorKind, Result};
use crate::io::ReadOutcome;
use crate::mailbox::report::Pass;
use crate::mailbox::route::Item;
use crate::mailbox::{Mailbox, identity, lossy};
use crate::name;
use crate::name::own;

impl Mailbox {
    /// Claims the scanned `item` in `dir` for delivery to `agent` into the handle's `slot`, in
    /// `batch` (durable at its commit). `None` when another consumer won, or when the file
    /// turned out invalid (then it is quarantined and recorded in `pass`), or was not the file
    /// scanned any more (then it is put back).
    pub(in crate::mailbox) fn claim(
        &self,
        slot: &Path,
        dir: &Path,
        item: &Item,
        agent: &str,
        pass: &mut Pass,
        batch: &mut Batch,
    ) -> Result<Option<Delivery>> {
        let name = item.name.as_os_str();
        let extra = Handled::Delivered.fields(agent);
        debug_assert!(batch.dest.as_deref().is_none_or(|d| d == slot));
        batch.dest = Some(slot.to_path_buf());
        // A dropped file: the claim takes it only if it is the file the scan settled and
        // routed. A canonical name routes by itself; what it holds is checked once moved.
        self.claim_into(slot, dir, name, agent, extra, pass, Some(batch), item.seen)
    }

    /// Claims the scanned `item` in `dir` for a bridge into `bridge/outbox/`, in `batch`
    /// (durable at its commit), as [`Mailbox::claim`] claims into a slot: the record says
    /// `exported` by `host` (spec/bridge.md §3), with `redelivery` for a claim taken from a
    /// dead consumer's slot.
    pub(in crate::mailbox) fn claim_for_export(
        &self,
        dir: &Path,
        item: &Item,
        host: &str,
        redelivery: u32,
        pass: &mut Pass,
        batch: &mut Batch,
    ) -> Result<Option<Delivery>> {
        let outbox = self.layout.outbox.clone();
        let mut extra = Handled::Exported.fields(host);
        // A claim a dead consumer never handed over: the count follows it (spec/bridge.md §5).
        if redelivery > 0
            && let Some(Value::Object(block)) = extra.get_mut(crate::body::key::HANDLING_METADATA)
        {
            block.insert(crate::body::key::REDELIVERY.into(), redelivery.into());
        }
        batch.dest = Some(outbox.clone());
        self.claim_into(
            &outbox,
            dir,
            &item.name,
            host,
            extra,
            pass,
            Some(batch),
            item.seen,
        )
    }

    /// Reads a file under a canonical name before the orchestrator moves it into a buffer:
    /// only a file sigbox wrote is complete at once ([`identity::trusted`]); any other
    /// settles like a dropped file (spec §2.4, §5). False when the file must be left (gone,
    /// or still settling: then `pass.next_check` says when to look again).
    pub(in crate::mailbox) fn may_move(
        &self,
        dir: &Path,
        name: &OsStr,
        pass: &mut Pass,
    ) -> Result<bool> {
        let fname = lossy(name);
        if name::parse_canonical(&fname).is_none() {
            return Ok(true); // a dropped name: its scan settled it
        }
        let path = dir.join(name);
        let Some(read) = self.read_resolving(dir, name)? else {
            return Ok(false);
        };
        match &read {
            ReadOutcome::Gone => Ok(false),
            ReadOutcome::Bytes(bytes, stamp) => {
                let parsed = body::read_signal(bytes, &fname, &path);
                let fields = parsed.as_ref().ok().map(|s| &s.fields);
                let now = self.fs_now();
                Ok(
                    match identity::untrusted_settling(&fname, fields, stamp, self.opts.settle, now)
                    {
                        Some(until) => {
                            pass.note_settling(path.clone(), until);
                            false
                        }
                        None => true,
                    },
                )
            }
            _ => Ok(true),
        }
    }

    /// The claim: rename into `dest_dir` (a slot, or `processed/` for an archive) without
    /// replacing, append the handling record `extra`, fsync `dest_dir`, then the source
    /// directory; with a `batch`, the fsyncs are left to its commit.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::mailbox) fn claim_into(
        &self,
        dest_dir: &Path,
        dir: &Path,
        name: &OsStr,
        agent: &str,
        extra: Map<String, Value>,
        pass: &mut Pass,
        mut batch: Option<&mut Batch>,
        expected: Option<(u64, i128)>,
    ) -> Result<Option<Delivery>> {
        let src = dir.join(name);
        let found = own::with_fresh_names(dest_dir, name, |attempt, dest| {
            let (claimed, pending) = match batch.as_deref_mut() {
                Some(b) => {
                    // Every descriptor the commit needs, before the claim: running out of
                    // descriptors then stops the pass before this claim, not after it.
                    for d in [dest_dir, self.layout.inputs.as_path(), dir] {
                        b.open_dir(&self.io, d)?;
                    }
                    // By link where renames are not atomic across directories (§9.10), by the
                    // one claim step a single claim takes too ([`atomic::link_step`]): the
                    // claim is decided at the commit, once the link is durable.
                    let claimed = 'claimed: {
                        let mut tries = 0;
                        loop {
                            tries += 1;
                            match atomic::link_step(&self.io, &src, &dest, false, Ok)? {
                                LinkStep::Linked(ino) => {
                                    b.claims += 1;
                                    b.note_source(&self.layout.inputs, dir);
                                    b.deliveries.push(Entry::Linked(Box::new(LinkedClaim {
                                        dest,
                                        dir: dir.to_path_buf(),
                                        name: name.to_os_string(),
                                        extra: extra.clone(),
                                        agent: agent.to_string(),
                                        expected,
                                        ino,
                                    })));
                                    return Ok(Some(None));
                                }
                                LinkStep::Lost => break 'claimed Claimed::Lost,
                                LinkStep::DestExists => break 'claimed Claimed::DestExists,
                                LinkStep::Busy => {
                                    if tries > 1 || !self.busy_source(dir, name, agent, pass)? {
                                        break 'claimed Claimed::Lost;
                                    }
                                }
                                LinkStep::ByRename => break,
                            }
                        }
                        let annotate = || self.annotate(&dest, name, &extra, agent, expected);
                        let claimed = atomic::claim_unsynced(&self.io, &src, &dest, annotate)?;
                        if let Claimed::Won(_) = claimed {
                            b.claims += 1;
                            b.note_source(&self.layout.inputs, dir);
                        }
                        claimed
                    };
                    (claimed, Some(dir.to_path_buf()))
                }
                None => {
                    let annotate = || self.annotate(&dest, name, &extra, agent, expected);
                    (atomic::claim(&self.io, &src, &dest, annotate)?, None)
                }
            };
            let (recorded, pending) = match claimed {
                Claimed::Lost => return Ok(Some(None)),
                Claimed::Won(recorded) => (recorded, pending),
                Claimed::DestExists => {
                    return self.dest_taken(
                        attempt,
                        dest_dir,
                        dir,
                        &src,
                        &dest,
                        name,
                        &extra,
                        agent,
                        batch.as_deref_mut(),
                        pass,
                    );
                }
            };
            Ok(Some(self.delivery_of(
                recorded, pending, &src, &dest, dir, name, pass,
            )?))
        })?;
        found.ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                Some(&src),
                "cannot find a free name to claim it into",
            )
        })
    }

    /// A claim whose destination is taken: when it holds this very signal, an interrupted
    /// claim is finished (`processed/` only, plain name only); else `Ok(None)` asks for a
    /// fresh name.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dest_taken(
        &self,
        attempt: usize,
        dest_dir: &Path,
        dir: &Path,
        src: &Path,
        dest: &Path,
        name: &OsStr,
        extra: &Map<String, Value>,
        agent: &str,
        batch: Option<&mut Batch>,
        pass: &mut Pass,
    ) -> Result<Option<Option<Delivery>>> {
        // Finishing an interrupted claim fsyncs both directories: commit first.
        if let Some(b) = batch {
            self.commit(b)?;
        }
        if attempt > 0 || dest_dir != self.layout.processed {
            // A `.dup-` name taken too, or a name in the slot still in use by an earlier
            // claim: try another.
            return Ok(None);
        }
        match self.finish_interrupted(dir, src, dest, name, extra, agent)? {
            // Synced when made: durable at once.
            Some(recorded) => Ok(Some(
                self.delivery_of(recorded, None, src, dest, dir, name, pass)?,
            )),
            None => Ok(None), // a different signal: try a fresh name
        }
    }

    /// A source with a second link already, met by a claim by link: another claim's link
    /// (under way, or left by a crash) or a planted one. A read resolves sigbox's own (§9.6);
    /// a link that is not sigbox's quarantines the file, as the hard-link rule says.
    /// True when the file is here with one link now: the claim tries again.
    pub(super) fn busy_source(
        &self,
        dir: &Path,
        name: &OsStr,
        agent: &str,
        pass: &mut Pass,
    ) -> Result<bool> {
        Ok(match self.read_resolving(dir, name)? {
            Some(read @ ReadOutcome::HardLinked(_)) => {
                let reason = read.rejection().unwrap_or_default();
                self.quarantine_into(pass, dir, name, &reason, agent)?;
                false
            }
            Some(ReadOutcome::Bytes(..)) => true,
            _ => false,
        })
    }
}
