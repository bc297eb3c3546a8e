//! The acknowledgement (spec/mailbox.md §9.2): what a pass handed over moves on from its slot
//! into `processed/`, under the record's name the hand-over gave it.

use std::path::{Path, PathBuf};

use super::Held;
use super::slot::Flight;
use crate::error::{Error, ErrorKind, Result};
use crate::io::Renamed;
use crate::mailbox::{Mailbox, lossy};
use crate::name;
use crate::name::own;

impl Mailbox {
    /// Acknowledges everything handed over and not yet acknowledged: each claimed file moves
    /// into `processed/` (no-clobber, a fresh `.dup-` name when the name is taken by another
    /// signal), each marker is removed; then `processed/` is fsynced, and each slot that lost
    /// a marker. Slots taken over from dead consumers are released once empty. Returns how
    /// many deliveries were acknowledged.
    pub(in crate::mailbox) fn ack_handed(&self, flight: &mut Flight) -> Result<usize> {
        if flight.handed.is_empty() {
            return Ok(0);
        }
        // Each slot is looked up beneath the root once for the whole acknowledgement, and its
        // moves go through the held descriptor; a slot that cannot be opened is left to each
        // move's own lookup, which reports why.
        self.io.verify_kept();
        let mut held: Vec<(&Path, std::sync::Arc<std::fs::File>)> = Vec::new();
        for h in &flight.handed {
            let (Held::Claim(p, _) | Held::Marker(p)) = h;
            if let Some(d) = p.parent()
                && !held.iter().any(|(x, _)| *x == d)
                && let Ok(f) = self.io.hold_dir(d)
            {
                held.push((d, f));
            }
        }
        let mut moved = false;
        let mut slots: Vec<PathBuf> = Vec::new();
        let mut done = 0;
        let result = flight.handed.iter().try_for_each(|h| {
            match h {
                Held::Claim(path, record) => {
                    self.settle_claim(path, record.as_deref())?;
                    moved = true;
                }
                Held::Marker(path) => {
                    self.io.remove_emptied(path)?;
                    if let Some(d) = path.parent()
                        && !slots.iter().any(|s| s == d)
                    {
                        slots.push(d.to_path_buf());
                    }
                }
            }
            done += 1;
            Ok::<(), Error>(())
        });
        flight.handed.drain(..done);
        if moved {
            self.io.sync_dir(&self.layout.processed)?;
        }
        for d in &slots {
            self.io.sync_dir(d)?;
        }
        result?;
        if !flight.adopted.is_empty() {
            let mut keep = Vec::new();
            for s in flight.adopted.drain(..) {
                if !self.slot_entries(&s.dir)?.is_empty() {
                    keep.push(s);
                }
            }
            flight.adopted = keep;
        }
        Ok(done)
    }

    /// Where a claim at `claimed` (in a slot) is to be acknowledged into, named before its
    /// hand-over so that what is shown of it says where it will be: `processed/<its name>`,
    /// or a fresh `.dup-` name when that name is taken, or reserved: another claim of that
    /// name in flight in any slot (a dropped name used again while the first file waits for
    /// its acknowledgement) will take it. The slots are looked at before `processed/`, so a
    /// claim acknowledged meanwhile (one rename from its slot into `processed/`) is seen in
    /// one or the other. A canonical name sigbox wrote is unique and needs no look at the
    /// slots.
    pub(in crate::mailbox) fn record_for(&self, claimed: &Path) -> Result<PathBuf> {
        let name = claimed.file_name().unwrap_or_default();
        let plain = self.layout.processed.join(name);
        let fresh = || self.layout.processed.join(own::unique_variant(name));
        if name::parse_canonical(&lossy(name)).is_none() && self.in_flight_elsewhere(claimed)? {
            return Ok(fresh());
        }
        Ok(match self.io.stamp(&plain)? {
            None => plain,
            Some(_) => fresh(),
        })
    }

    /// True when a slot other than `claimed`'s holds a file of `claimed`'s name.
    pub(super) fn in_flight_elsewhere(&self, claimed: &Path) -> Result<bool> {
        let name = claimed.file_name().unwrap_or_default();
        for e in self.io.list(&self.layout.claimed, true)? {
            let Some(agent) = e.name.to_str().filter(|a| crate::signal::valid_agent(a)) else {
                continue;
            };
            for (_, dir) in self.slots(agent)? {
                if claimed.parent() != Some(dir.as_path())
                    && self.io.stamp(&dir.join(name))?.is_some()
                {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Moves a handed-over claim from its slot into `processed/`: to `record`, the path its
    /// hand-over named, when it has one and it is free.
    pub(super) fn settle_claim(&self, path: &Path, record: Option<&Path>) -> Result<()> {
        if let Some(dest) = record {
            match self.io.rename_noreplace(path, dest)? {
                Renamed::Done => return Ok(()),
                Renamed::SourceGone => {
                    tracing::warn!(file = %path.display(), "a claim in flight vanished before its acknowledgement");
                    return Ok(());
                }
                Renamed::DestExists if self.same_signal(path, dest)? => {
                    // Acknowledged before, and a crash kept the slot link.
                    self.io.remove(path)?;
                    return Ok(());
                }
                // Another file of that name was acknowledged there since the hand-over (two
                // files of one name in flight at once): this one takes a fresh name.
                Renamed::DestExists => tracing::warn!(
                    file = %path.display(),
                    record = %dest.display(),
                    "the record's name in processed/ was taken since the hand-over: acknowledged under a fresh name"
                ),
            }
        }
        let name = path.file_name().unwrap_or_default();
        let processed = &self.layout.processed;
        let placed = own::with_fresh_names(processed, name, |attempt, dest| {
            Ok(match self.io.rename_noreplace(path, &dest)? {
                Renamed::Done => Some(()),
                Renamed::SourceGone => {
                    tracing::warn!(file = %path.display(), "a claim in flight vanished before its acknowledgement");
                    Some(())
                }
                Renamed::DestExists => {
                    if attempt == 0 && self.same_signal(path, &dest)? {
                        // Acknowledged before, and a crash kept the slot link.
                        self.io.remove(path)?;
                        Some(())
                    } else {
                        None
                    }
                }
            })
        })?;
        placed.ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                Some(path),
                "cannot find a free name in processed/",
            )
        })
    }

    /// Acknowledges every delivery this handle made to `agent` and has not acknowledged yet:
    /// they are handed over for good and never delivered again, also after a crash. The next
    /// pass of this handle for `agent` does the same first; a handle dropped (or a process
    /// that dies) without it leaves them to be delivered again, marked
    /// ([`Signal::redelivery`](crate::Signal::redelivery)). Returns how many were acknowledged.
    ///
    /// **Durability:** `processed/` is fsynced before this returns.
    pub fn ack(&self, agent: &str) -> Result<usize> {
        self.check_agent(agent)?;
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        match flights.get_mut(agent) {
            Some(f) => self.ack_handed(f),
            None => Ok(0),
        }
    }
}
