//! Delivery (spec/mailbox.md §9.2, §9.3, §9.6, §9.10): everything between "a pass decided to
//! take this file" and "its record is in `processed/`". From the bottom up:
//!
//! | file | owns | spec |
//! |---|---|---|
//! | `mod.rs` | the vocabulary: a [`Delivery`], how it is taken back ([`Undo`]), where it waits ([`Held`]) | §9.2 |
//! | `slot.rs` | claim slots `claimed/<Agent>/<n>/` and their `flock`s, what a handle has in flight | §9.2 |
//! | `record.rs` | the claimed file read, its handling record spliced in, the delivery made of it | §3.4, §9.2 |
//! | `commit.rs` | a group of claims ([`Batch`](commit::Batch)), its group commit, the decisions on claims by link, taking back | §9.2, §9.10 |
//! | `deliveries.rs` | a pass's deliveries as one value ([`Deliveries`]): claimed, committed in groups, handed out, acknowledged or rolled back | §9.2 |
//! | `claim.rs` | the claim: a no-clobber move (rename or link, by [`atomic::link_step`](crate::atomic::link_step)) into the slot | §9.2, §9.10 |
//! | `recover.rs` | moves a crash interrupted: twins, files in two places, put back | §9.3, §9.6 |
//! | `buffer.rs` | the orchestrator's move into an absent agent's buffer | §6, §9.3 |
//! | `redeliver.rs` | slots of dead consumers taken over, their signals delivered again, broadcast markers | §9.2 |
//! | `ack.rs` | the acknowledgement: a handed-over claim into `processed/` | §9.2 |
//!
//! The pass (`pass.rs`) is their caller, through [`Deliveries`].

use std::path::PathBuf;

use crate::signal::Signal;

mod ack;
mod buffer;
mod claim;
mod commit;
mod deliveries;
mod record;
mod recover;
mod redeliver;
mod slot;
#[cfg(test)]
mod tests;

pub(super) use commit::Batch;
pub(super) use deliveries::{Deliveries, HandOver};
pub(super) use redeliver::Orphan;
pub(super) use slot::Flight;

/// Claims per group commit: a pass makes its claims durable together, at most this many at a
/// time, so that the first are handed over while the pass goes on. A claim holds no
/// descriptor until the commit, so the group does not depend on the descriptor limit.
const GROUP_COMMIT: usize = 64;

/// A signal claimed for delivery.
pub(in crate::mailbox) struct Delivery {
    pub(super) signal: Signal,
    /// The source directory of its claim while that claim is not durable (it joined a batch
    /// not yet committed); `None` once durable.
    pending: Option<PathBuf>,
    /// How to take the delivery back if it cannot be handed over.
    pub(super) undo: Undo,
    /// Where it waits for its acknowledgement once handed over.
    held: Held,
}

/// What takes back a delivery that was made but could not be handed over.
pub(super) enum Undo {
    /// Move the claimed file (at the signal's path) back to here.
    Claim(PathBuf),
    /// Remove this ack, then the broadcast's marker.
    Ack { ack: PathBuf, marker: PathBuf },
    /// Nothing: a redelivery stays in the slot this handle holds, for its next pass.
    Keep,
}

impl Delivery {
    /// A delivery that is durable as made.
    fn durable(signal: Signal, undo: Undo, held: Held) -> Delivery {
        Delivery {
            signal,
            pending: None,
            undo,
            held,
        }
    }

    /// A broadcast delivered by writing `ack`, with its `marker` in the handle's slot.
    pub(super) fn acked(signal: Signal, ack: PathBuf, marker: PathBuf) -> Delivery {
        let held = Held::Marker(marker.clone());
        Delivery::durable(signal, Undo::Ack { ack, marker }, held)
    }
}

impl Delivery {
    /// A delivery made again from a slot this handle took over; nothing to take back when it
    /// cannot be handed over (it stays in the slot, for the next pass).
    fn redelivered(signal: Signal, held: Held) -> Delivery {
        Delivery::durable(signal, Undo::Keep, held)
    }
}

/// Where a delivery sits until it is acknowledged.
#[derive(Clone, Debug)]
enum Held {
    /// A claimed file in a slot: acknowledged by its move into `processed/`, under the
    /// record's path the hand-over named ([`Signal::record`](crate::Signal::record); `None`
    /// before the hand-over).
    Claim(PathBuf, Option<PathBuf>),
    /// A broadcast's marker in a slot (its ack is written): acknowledged by its removal.
    Marker(PathBuf),
}
