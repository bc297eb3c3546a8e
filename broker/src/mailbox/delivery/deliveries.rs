//! A pass's deliveries as one value, in the shape of a receive guard (spec/mailbox.md §9.2):
//! the pass makes it over the handle's slots for the agent, claims into it, and commits it
//! group by group; each durable group is handed out, then acknowledged (at once, or by the
//! next pass) when the hand-over takes it, or rolled back (pending again) when it does not.
//!
//! What is neither committed nor handed out when it drops (a pass that failed halfway) stays
//! claimed in the handle's slot, where the handle's next pass for the agent finds it
//! ([`Mailbox::orphans`]): resolved as an interrupted claim while its source is still there
//! (§9.6), else delivered again, marked. Nothing is lost by the drop.

use std::path::{Path, PathBuf};

use super::commit::TakenBack;
use super::{Batch, Delivery, Flight, GROUP_COMMIT, Held};
use crate::error::{Error, Result};
use crate::mailbox::Mailbox;
use crate::mailbox::report::Pass;
use crate::mailbox::route::Item;
use crate::signal::Signal;

/// Where a pass hands its durable deliveries, group by group.
pub(in crate::mailbox) type HandOver<'h> = &'h mut dyn FnMut(&[Signal]) -> std::io::Result<()>;

/// The deliveries of one pass for one agent.
pub(in crate::mailbox) struct Deliveries<'p, 'h> {
    mb: &'p Mailbox,
    agent: &'p str,
    /// The group being claimed, durable at its commit.
    batch: Batch,
    /// What the handle has in flight for the agent: its slots, what was handed out.
    flight: &'p mut Flight,
    /// The caller's hand-over.
    to: HandOver<'h>,
    /// Set once a hand-over failed: nothing more is handed out.
    failed: bool,
    /// Acknowledge each group the hand-over takes at once (else the next pass does).
    ack: bool,
}

impl<'p, 'h> Deliveries<'p, 'h> {
    /// The deliveries of a pass of `mb` for `agent`, into `flight`'s slots, handed to `to`;
    /// with `ack`, each group `to` takes is acknowledged at once.
    pub(in crate::mailbox) fn new(
        mb: &'p Mailbox,
        agent: &'p str,
        flight: &'p mut Flight,
        to: HandOver<'h>,
        ack: bool,
    ) -> Self {
        Deliveries {
            mb,
            agent,
            batch: Batch::new(GROUP_COMMIT),
            flight,
            to,
            failed: false,
            ack,
        }
    }

    /// How many deliveries the current group holds.
    pub(in crate::mailbox) fn len(&self) -> usize {
        self.batch.len()
    }

    /// True once the current group is as large as a group commit takes.
    pub(in crate::mailbox) fn is_full(&self) -> bool {
        self.batch.is_full()
    }

    /// True when the last claim of the group went by link: decided at the commit (§9.10).
    pub(in crate::mailbox) fn ends_linked(&self) -> bool {
        self.batch.ends_linked()
    }

    /// Adds a delivery made outside a claim (a redelivery, a broadcast's ack).
    pub(in crate::mailbox) fn push(&mut self, d: Delivery) {
        self.batch.push(d);
    }

    /// The handle's own slot for the agent, taken on first use.
    pub(in crate::mailbox) fn slot(&mut self) -> Result<PathBuf> {
        self.mb.own_slot(self.agent, self.flight)
    }

    /// Claims the scanned `item` in `dir` into `slot`, in the current group (see
    /// [`Mailbox::claim`]).
    pub(in crate::mailbox) fn claim(
        &mut self,
        slot: &Path,
        dir: &Path,
        item: &Item,
        pass: &mut Pass,
    ) -> Result<Option<Delivery>> {
        if self.batch.starts_group() {
            let held = self.mb.own_slot_for_group(slot, self.flight)?;
            self.batch.hold(slot, held);
        }
        self.mb
            .claim(slot, dir, item, self.agent, pass, &mut self.batch)
    }

    /// Makes the current group durable (the group commit, §9.2).
    pub(in crate::mailbox) fn commit(&mut self) -> Result<()> {
        self.mb.commit(&mut self.batch)
    }

    /// Commits the current group and hands it out.
    pub(in crate::mailbox) fn commit_and_hand_out(&mut self, pass: &mut Pass) -> Result<()> {
        self.commit()?;
        self.hand_out(pass)
    }

    /// Hands the group's durable deliveries out, unless an earlier hand-over failed; what the
    /// caller takes is held for its acknowledgement (at once, with `ack`), and recorded in
    /// `pass`; what it does not take is rolled back.
    pub(in crate::mailbox) fn hand_out(&mut self, pass: &mut Pass) -> Result<()> {
        // What the commit found invalid or unsettled among claims by link.
        pass.rejected.append(&mut self.batch.rejected);
        for s in std::mem::take(&mut self.batch.settling) {
            pass.note_settling(s.path, s.until);
        }
        let ready = self.batch.take_durable();
        if ready.is_empty() {
            return Ok(());
        }
        if self.failed {
            // Nothing more goes to a caller that could not take the last group.
            self.roll_back(ready)?;
            return Ok(());
        }
        // Each claim's record in processed/ is named now, so that what the caller shows of it
        // says where the file will be once acknowledged (spec/cli.md, `path`).
        let mut ready = ready;
        let named = ready.iter_mut().try_for_each(|d| {
            if let Held::Claim(slot, record) = &mut d.held {
                let r = self.mb.record_for(slot)?;
                d.signal.record = Some(r.clone());
                *record = Some(r);
            }
            Ok::<(), Error>(())
        });
        if let Err(e) = named {
            self.failed = true;
            self.roll_back(ready)?;
            return Err(e);
        }
        // The signals go to the caller as they are (no copy); the rest of each delivery waits
        // for the hand-over's answer.
        let (signals, rest): (Vec<Signal>, Vec<_>) = ready
            .into_iter()
            .map(|d| (d.signal, (d.pending, d.undo, d.held)))
            .unzip();
        if let Err(e) = (self.to)(&signals) {
            self.failed = true;
            // Claimed but not handed over: put back for a later pass, never stranded.
            let ready: Vec<Delivery> = signals
                .into_iter()
                .zip(rest)
                .map(|(signal, (pending, undo, held))| Delivery {
                    signal,
                    pending,
                    undo,
                    held,
                })
                .collect();
            let all = ready.len();
            let back = self.roll_back(ready)?;
            let pending = all - back.stuck - back.kept;
            let reason = if pending == all {
                "cannot hand the claimed signals over; they are pending again".to_string()
            } else {
                let mut said = vec![format!("{pending} of them are pending again")];
                if back.kept > 0 {
                    said.push(format!(
                        "{} (delivered again, or a broadcast archived meanwhile) stay in flight \
                         and come again, marked",
                        back.kept
                    ));
                }
                if back.stuck > 0 {
                    said.push(format!(
                        "{} could not be put back and stay in flight",
                        back.stuck
                    ));
                }
                format!("cannot hand the claimed signals over; {}", said.join(", "))
            };
            return Err(Error::io(self.mb.root(), &reason, e));
        }
        self.flight
            .handed
            .extend(rest.into_iter().map(|(_, _, held)| held));
        pass.delivered.extend(signals);
        if self.ack {
            self.mb.ack_handed(self.flight)?;
        }
        Ok(())
    }

    /// Takes back durable deliveries the hand-over did not take: pending again (see
    /// [`Mailbox::undo`]). Returns how many could not be taken back.
    fn roll_back(&self, ready: Vec<Delivery>) -> Result<TakenBack> {
        self.mb.undo(ready)
    }
}
