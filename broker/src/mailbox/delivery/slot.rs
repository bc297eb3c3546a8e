//! Claim slots (spec/mailbox.md §9.2): a delivery is claimed into a slot that the claiming
//! handle holds, `claimed/<Agent>/<n>/`. A handle holds its slot with an exclusive `flock` on
//! the slot directory for as long as it lives; the kernel drops the lock when the process
//! dies. A slot nobody holds with signals in it therefore belongs to a consumer that died
//! before handing them over (`redeliver.rs`).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};

use super::Held;
use crate::clock;
use crate::error::{Error, ErrorKind, Result};
use crate::io::Renamed;
use crate::mailbox::{Mailbox, lossy};
use crate::name;
use crate::name::own;
use crate::sys::{EntryKind, Stamp};

/// A slot this handle holds: the directory, and the locked descriptor that holds it.
pub(in crate::mailbox) struct Slot {
    pub(super) dir: PathBuf,
    pub(super) _lock: File,
}

/// What one handle has in flight for one agent.
#[derive(Default)]
pub(in crate::mailbox) struct Flight {
    /// The slot new claims go to, taken at the first claim.
    pub(super) own: Option<Slot>,
    /// Slots taken over from dead consumers, held until what they hold is handed over.
    pub(super) adopted: Vec<Slot>,
    /// Handed over and not yet acknowledged: [`Mailbox::pass`] returns deliveries in this
    /// state; the next pass of the handle, or [`Mailbox::ack`], acknowledges them.
    pub(super) handed: Vec<Held>,
    /// True while the own slot is known to hold nothing but what `handed` lists: its last
    /// listing found nothing else, and no pass used it since. A pass then does not list it:
    /// only this handle's passes write there (acknowledgements only take out of it).
    pub(super) own_known: bool,
    /// The agent's slots as last listed, with the `lstat` stamp of `claimed/<agent>/` taken
    /// before that listing; kept only when the stamp proves it (spec/mailbox.md §5.1).
    pub(super) slots_seen: Option<(Stamp, Vec<(u32, PathBuf)>)>,
}

impl Flight {
    /// How many slots of dead consumers this handle holds: a mark for [`Flight::let_go_since`].
    pub(in crate::mailbox) fn adoption_mark(&self) -> usize {
        self.adopted.len()
    }

    /// Lets go of the slots taken over since `mark` (their locks are released): what they hold
    /// stays in flight for whoever takes them next.
    pub(in crate::mailbox) fn let_go_since(&mut self, mark: usize) {
        self.adopted.truncate(mark);
    }

    pub(super) fn holds(&self, dir: &Path) -> bool {
        self.own.iter().chain(&self.adopted).any(|s| s.dir == dir)
    }

    /// True when `path` was handed over and waits for its acknowledgement (a pass that keeps
    /// what was handed, [`PassControl::keep_handed`](super::PassControl::keep_handed), finds
    /// it still in the slot: it is no orphan).
    pub(super) fn handed(&self, path: &Path) -> bool {
        self.handed
            .iter()
            .any(|h| matches!(h, Held::Claim(p, _) | Held::Marker(p) if p == path))
    }
}

/// The slot numbers under `claimed/<Agent>/`: directories with decimal names.
pub(super) fn slot_number(name: &OsStr) -> Option<u32> {
    let s = name.to_str()?;
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl Mailbox {
    /// `agent`'s slots, `claimed/<agent>/<n>/`, by number: directories with decimal names
    /// (anything else there, a symlink among them, is ignored).
    pub(in crate::mailbox) fn slots(&self, agent: &str) -> Result<Vec<(u32, PathBuf)>> {
        let base = self.layout.claim_dir(agent);
        let mut out: Vec<(u32, PathBuf)> = self
            .io
            .list(&base, true)?
            .into_iter()
            .filter(|e| e.kind == EntryKind::Dir)
            .filter_map(|e| Some((slot_number(&e.name)?, base.join(&e.name))))
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// [`Mailbox::slots`] for a pass, reusing the listing `flight` keeps while an `lstat` of
    /// `claimed/<agent>/` proves it current (the rule of spec/mailbox.md §5.1): a checkpoint
    /// loop whose agent has no other consumer pays one `lstat` for it. A slot appears by a
    /// `mkdir` there (changing the stamp); a consumer dying changes nothing there, so every
    /// slot listed but the handle's own is still looked at on every pass.
    pub(in crate::mailbox) fn slots_for_pass(
        &self,
        agent: &str,
        flight: &mut Flight,
    ) -> Result<Vec<(u32, PathBuf)>> {
        if !self.opts.reuse_listings {
            flight.slots_seen = None;
            return self.slots(agent);
        }
        let base = self.layout.claim_dir(agent);
        let Some(st) = self.io.stamp(&base)? else {
            flight.slots_seen = None;
            return Ok(Vec::new()); // no consumer of the agent ever claimed
        };
        if let Some((seen, slots)) = &flight.slots_seen
            && *seen == st
        {
            return Ok(slots.clone());
        }
        let listed_at = clock::ns_of(self.fs_now());
        let slots = self.slots(agent)?;
        flight.slots_seen = (st.kind == EntryKind::Dir && clock::settled_before(&st, listed_at))
            .then(|| (st, slots.clone()));
        Ok(slots)
    }

    /// What a slot holds: its entries but a marker's rewrite in progress.
    pub(super) fn slot_entries(&self, dir: &Path) -> Result<Vec<OsString>> {
        Ok(self.slot_listing(dir)?.0)
    }

    /// A slot's entries (as [`Mailbox::slot_entries`]), and apart the staging names a claim by
    /// link moved a source to (`.<pid>.<16 hex>.claim.tmp`, §9.10).
    pub(super) fn slot_listing(&self, dir: &Path) -> Result<(Vec<OsString>, Vec<OsString>)> {
        let mut entries = Vec::new();
        let mut twins = Vec::new();
        for e in self.io.list(dir, true)? {
            if name::classify(&e.name) != name::NameKind::InProgress {
                entries.push(e.name);
            } else if own::is_claim_twin(&e.name) {
                twins.push(e.name);
            }
        }
        Ok((entries, twins))
    }

    /// A source name a claim by link moved aside and did not remove (the claimer died, or a
    /// crash brought it back, §9.10): a second link to a file that is elsewhere now goes; a
    /// file with no other name took the source's name before the claim moved it aside, and
    /// its name is lost with the claimer: it is quarantined, kept whole.
    pub(in crate::mailbox) fn clear_claim_twin(
        &self,
        dir: &Path,
        twin: &OsStr,
        agent: &str,
    ) -> Result<()> {
        let path = dir.join(twin);
        match self.io.stamp(&path)? {
            Some(st) if st.nlink >= 2 => {
                self.io.remove_second_link(&path)?;
            }
            Some(_) => {
                let reason = format!(
                    "a file moved aside by a claim that was interrupted (as {}): it took the \
                     name of the file being claimed, and that name is lost",
                    lossy(twin)
                );
                self.quarantine_claim_twin(dir, twin, &reason, agent)?;
            }
            None => {}
        }
        Ok(())
    }

    /// Quarantines the moved-aside source `dir/twin` (§9.10), kept whole, under a name readers
    /// see (a staging name is skipped everywhere).
    pub(in crate::mailbox) fn quarantine_claim_twin(
        &self,
        dir: &Path,
        twin: &OsStr,
        reason: &str,
        agent: &str,
    ) -> Result<()> {
        let shown = OsString::from(
            lossy(twin)
                .trim_start_matches('.')
                .trim_end_matches(".tmp")
                .to_string(),
        );
        if self
            .io
            .rename_noreplace(&dir.join(twin), &dir.join(&shown))?
            != Renamed::Done
        {
            return Ok(());
        }
        self.quarantine(dir, &shown, reason, agent)?;
        Ok(())
    }

    /// The slot `agent`'s new claims go to: taken at the first claim of this handle, the
    /// lowest-numbered slot nobody holds, or a new one. `claimed/` and `claimed/<agent>/`
    /// are made (durably) when missing.
    pub(in crate::mailbox) fn own_slot(&self, agent: &str, flight: &mut Flight) -> Result<PathBuf> {
        // What is written into the slot now is known again at its next listing only.
        flight.own_known = false;
        if let Some(s) = &flight.own {
            return Ok(s.dir.clone());
        }
        let base = self.layout.claim_dir(agent);
        self.io.create_dir_durable(&self.layout.claimed)?;
        self.io.create_dir_durable(&base)?;
        for _ in 0..64 {
            let slots = self.slots(agent)?;
            for (_, dir) in &slots {
                if flight.holds(dir) {
                    continue;
                }
                if let Some(lock) = self.io.lock_dir(dir)? {
                    flight.own = Some(self.own_held(dir, lock));
                    return Ok(dir.clone());
                }
            }
            let next = slots.last().map_or(0, |(n, _)| n + 1);
            let dir = base.join(next.to_string());
            // A race for the same number: the loser lists again.
            if self.io.create_dir_durable(&dir)?
                && let Some(lock) = self.io.lock_dir(&dir)?
            {
                flight.own = Some(self.own_held(&dir, lock));
                return Ok(dir);
            }
        }
        Err(Error::new(
            ErrorKind::Io,
            Some(&base),
            "cannot take a claim slot: every attempt lost a race to another handle",
        ))
    }

    /// Before a group of claims into `slot` (the handle's own slot): the root's kept layout
    /// directories checked ([`crate::io::Io::verify_kept`]), then `slot` looked up beneath the
    /// root and held for the group, refused unless it is still the directory this handle
    /// locked. A slot moved away and replaced (a directory made at its name) is nobody's: a
    /// claim there would be taken for a dead consumer's by the agent's next consumer while
    /// this handle still hands it out. The handle lets it go; its next pass takes a slot again.
    pub(in crate::mailbox) fn own_slot_for_group(
        &self,
        slot: &Path,
        flight: &mut Flight,
    ) -> Result<std::sync::Arc<File>> {
        self.io.verify_kept();
        let held = self.io.hold_dir(slot)?;
        if let Some(own) = flight.own.as_ref().filter(|s| s.dir == slot) {
            let same = match (held.metadata(), own._lock.metadata()) {
                (Ok(a), Ok(b)) => {
                    let (a, b) = (crate::sys::stamp(&a), crate::sys::stamp(&b));
                    (a.dev, a.ino) == (b.dev, b.ino)
                }
                _ => false,
            };
            if !same {
                flight.own = None;
                return Err(Error::new(
                    ErrorKind::Io,
                    Some(slot),
                    "this claim slot is no longer the directory this consumer holds (moved or \
                     replaced since it was taken): no claim goes into it; the next pass takes \
                     a slot again",
                ));
            }
        }
        Ok(held)
    }

    /// The handle's own slot `dir`, held by `lock`.
    fn own_held(&self, dir: &Path, lock: File) -> Slot {
        Slot {
            dir: dir.to_path_buf(),
            _lock: lock,
        }
    }
}
