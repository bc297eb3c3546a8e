//! Import (spec/bridge.md §4): a signal from another host written into `inputs/` once, and
//! the acks of broadcasts shared between hosts (`acks/<id>/<agent>.ack`).

use std::path::PathBuf;

use serde_json::json;

use super::BridgeSide;
use crate::atomic::{self, Clobber, Placed};
use crate::body;
use crate::error::{Error, ErrorKind, Result};
use crate::mailbox::identity;
use crate::name;
use crate::name::own;
use crate::signal::{SignalType, Target};

/// What [`BridgeSide::import`] did with a signal from another host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Imported {
    /// Written into `inputs/`, durably.
    Written,
    /// Already here (pending, buffered, in flight, processed, quarantined or on its way out):
    /// nothing written. A redelivery from the stream ends here.
    Here,
    /// Not a signal this mailbox accepts, with the reason: nothing written.
    Refused(String),
}

impl BridgeSide<'_> {
    /// Every ack of a broadcast under a canonical id (`acks/<id>/<agent>.ack`, the same id on
    /// every host) as `(id, agent)`, once the broadcast was handed over (no marker of it left
    /// in the agent's slots): what a bridge shares with the other hosts, so that an agent that
    /// moves is not given again a broadcast it acked elsewhere (spec/bridge.md §5).
    pub fn acks(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for d in self.mb.io.list(&self.mb.layout.acks, true)? {
            let Some(id) = d.name.to_str() else { continue };
            if d.kind != crate::sys::EntryKind::Dir
                || name::parse_canonical(&format!("{id}.json"))
                    .is_none_or(|c| c.target() != Target::All)
            {
                continue;
            }
            let marker = crate::mailbox::Layout::marker_name(std::ffi::OsStr::new(id));
            for e in self.mb.io.list(&self.mb.layout.ack_dir(id), true)? {
                if let Some(agent) = e.name.to_str().and_then(|n| n.strip_suffix(".ack"))
                    && crate::signal::valid_agent(agent)
                    && !self.in_flight_here(agent, &marker)?
                {
                    out.push((id.to_string(), agent.to_string()));
                }
            }
        }
        Ok(out)
    }

    /// True when a slot of `agent` holds the broadcast marker `marker`: acked here and not
    /// handed over yet (its consumer may have died). Such an ack is not shared: on another
    /// host it would keep the agent from a broadcast it never got (spec/bridge.md §5).
    fn in_flight_here(&self, agent: &str, marker: &str) -> Result<bool> {
        for (_, slot) in self.mb.slots(agent)? {
            if self.mb.io.stamp(&slot.join(marker))?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Records that `agent` acked broadcast `id` on host `from`: `acks/<id>/<agent>.ack`,
    /// written durably without replacing anything. False when it was there already; refused
    /// (an error) for an id that is not a canonical broadcast's or a name that is not an
    /// agent's.
    pub fn import_ack(&self, id: &str, agent: &str, from: &str) -> Result<bool> {
        let file = format!("{id}.json");
        let broadcast = name::parse_canonical(&file).is_some_and(|c| c.target() == Target::All);
        if !broadcast || !crate::signal::valid_agent(agent) {
            return Err(Error::new(
                ErrorKind::InvalidName,
                None,
                format!("an ack of {id:?} by {agent:?}: not a broadcast's id and an agent's name"),
            ));
        }
        let dir = self.mb.layout.ack_dir(id);
        self.mb.io.create_dir_durable(&dir)?;
        let body = json!({
            "signal": id,
            "agent": agent,
            "acked_at": crate::clock::now_rfc3339(crate::clock::Precision::Micros),
            "acked_on": from,
        });
        let mut bytes = serde_json::to_vec(&body).unwrap_or_default();
        bytes.push(b'\n');
        let stage = own::stage_name(&dir, "ack");
        let ack = dir.join(format!("{agent}.ack"));
        Ok(atomic::write_atomic(&self.mb.io, &stage, &ack, &bytes, Clobber::No)? == Placed::Done)
    }

    /// Writes a signal from another host into `inputs/` under `file_name` (a canonical name,
    /// spec/mailbox.md §2.1) with `body` (JSON whose `id` is the name's stem), durably and
    /// without replacing anything. A signal already here, anywhere in its life (pending,
    /// buffered, in flight, processed, quarantined, on its way out again), is not written
    /// again: the places are looked at in the order a signal moves through them, so one that
    /// moves on meanwhile is found further on.
    pub fn import(&self, file_name: &str, body: &[u8]) -> Result<Imported> {
        let (mut done, end) = self.import_batch(&[(file_name, body)]);
        end?;
        Ok(done.pop().unwrap_or(Imported::Here))
    }

    /// [`import`](Self::import) of a batch from one consumer, in its order, as one group
    /// (spec/bridge.md §4): each signal is checked, staged, fsynced and renamed into `inputs/`
    /// no-clobber in turn, then `inputs/` is fsynced once for the lot (after each signal where
    /// a power loss could keep a later rename and lose an earlier one: ext2, ext4 without a
    /// journal). The renames follow the batch's order, so that at any moment, and after a
    /// power loss, what is in `inputs/` of the batch is a prefix of it: an agent never sees a
    /// later signal of the batch without the earlier ones.
    ///
    /// Returns what was done with each signal of a prefix of the batch, durably (the whole
    /// batch when the second part is `Ok`); on an error, the prefix ends before the signal it
    /// concerns, which was not written, nor any after it. When the batch's fsync fails the
    /// prefix is empty: nothing of the batch is known to be durable (synced after each signal,
    /// the prefix is what was synced before the failure).
    pub fn import_batch(&self, batch: &[(&str, &[u8])]) -> (Vec<Imported>, Result<()>) {
        let mut done = Vec::with_capacity(batch.len());
        // Synced as soon as one signal is written or found here: one found here may be one a
        // bridge killed before its fsync renamed into place.
        let mut sync = false;
        let mut end = Ok(());
        // Where a power loss may keep a later rename in a directory and lose an earlier one
        // (ext2, ext4 without a journal: the filesystems whose claims go by link), each name
        // is made durable before the next is written, so that `inputs/` holds a prefix of the
        // batch after a power loss too, as one signal at a time did.
        let each =
            self.mb.io.link_claims() || crate::sys::renames_not_atomic(&self.mb.layout.inputs);
        for (file_name, body) in batch {
            match self.import_unsynced(file_name, body) {
                Ok(i) => {
                    let written = !matches!(i, Imported::Refused(_));
                    if each && written {
                        if let Err(e) = self.mb.io.sync_dir(&self.mb.layout.inputs) {
                            return (done, Err(e));
                        }
                    } else {
                        sync |= written;
                    }
                    done.push(i);
                }
                Err(e) => {
                    end = Err(e);
                    break;
                }
            }
        }
        if sync && let Err(e) = self.mb.io.sync_dir(&self.mb.layout.inputs) {
            return (Vec::new(), Err(e));
        }
        (done, end)
    }

    /// One signal of [`import_batch`](Self::import_batch): checked, and written into `inputs/`
    /// unless it is here already, without the fsync of `inputs/`.
    fn import_unsynced(&self, file_name: &str, body: &[u8]) -> Result<Imported> {
        let Some(canon) = name::parse_canonical(file_name) else {
            return Ok(Imported::Refused(format!(
                "{file_name:?} is not a canonical signal name"
            )));
        };
        if !self.crosses(body.len()) {
            return Ok(Imported::Refused(format!(
                "{} bytes, over the cap of {} bytes for a signal from another host",
                body.len(),
                self.crossing_cap()
            )));
        }
        let dest = self.mb.layout.inputs.join(file_name);
        let sig = match body::read_signal(body, file_name, &dest) {
            Ok(sig) => sig,
            Err(reason) => return Ok(Imported::Refused(reason)),
        };
        if !identity::trusted(file_name, &sig.fields) {
            return Ok(Imported::Refused(format!(
                "its body's id is not {:?}, the name's",
                name::signal_id(file_name)
            )));
        }
        if self.known_here(file_name, &canon.target(), sig.signal_type)? {
            return Ok(Imported::Here);
        }
        // Staged under a send's name, so that a second link a crash leaves is resolved as a
        // send's (spec/mailbox.md §9.6).
        let stage = own::stage_name_from(&self.mb.layout.inputs, canon.unique, "send");
        Ok(
            match atomic::write_unsynced_dir(&self.mb.io, &stage, &dest, body, Clobber::No)? {
                Placed::Done => Imported::Written,
                Placed::Exists => Imported::Here,
            },
        )
    }

    /// Whether the signal under canonical `file_name` is anywhere in this mailbox: `inputs/`,
    /// its agent's buffer, a claim slot of its agent or of the orchestrator, `processed/`,
    /// `rejected/`, the bridge's outbox.
    fn known_here(&self, file_name: &str, target: &Target, ty: SignalType) -> Result<bool> {
        let exists = |p: PathBuf| -> Result<bool> { Ok(self.mb.io.stamp(&p)?.is_some()) };
        if exists(self.mb.layout.inputs.join(file_name))? {
            return Ok(true);
        }
        let mut takers: Vec<&str> = Vec::new();
        if let Target::Agent(a) = target {
            if exists(self.mb.layout.buffer_dir(a).join(file_name))? {
                return Ok(true);
            }
            if !ty.is_approval() {
                takers.push(a);
            }
        }
        if ty.is_approval() || !matches!(target, Target::All) {
            takers.push(&self.mb.opts.orchestrator);
        }
        for agent in takers {
            for (_, slot) in self.mb.slots(agent)? {
                if exists(slot.join(file_name))? {
                    return Ok(true);
                }
            }
        }
        for dir in [
            &self.mb.layout.processed,
            &self.mb.layout.rejected,
            &self.mb.layout.outbox,
        ] {
            if exists(dir.join(file_name))? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
