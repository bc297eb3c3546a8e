//! Waiting for a person's answer (spec/asks.md §5): the asker's side of
//! [`sigbox::asks`], event-driven like [`crate::Checkpoint::wait`].

use std::time::Duration;

use chrono::Utc;
use sigbox::Mailbox;
use sigbox::asks::{Asks, Outcome};

use crate::watch::{POLL, Waiter};

/// How [`wait_outcome`] ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Waited {
    /// The request's outcome: its one answer, or its expiry. Durable: the asker may act on it.
    Outcome(Outcome),
    /// The caller's stop said so first; the request is kept, open (a later ask with its key
    /// re-attaches).
    Stopped,
}

/// Blocks until the request `id` has its outcome, recording its expiry at the deadline (as
/// `by`, the asker), or until `stop` returns true (checked at least every `tick`, when given;
/// else at every wake-up).
///
/// Event-driven where the filesystem gives events: it sleeps until an entry of `asks/`
/// changes, the deadline comes, or the 30 s backstop; polling every second elsewhere. It
/// never spins.
pub fn wait_outcome(
    mailbox: &Mailbox,
    id: &str,
    by: &str,
    tick: Option<Duration>,
    stop: &mut dyn FnMut() -> bool,
) -> sigbox::Result<Waited> {
    let asks = Asks::new(mailbox);
    let deadline = asks.request_checked(id)?.deadline;
    let mut waiter = Waiter::new();
    if mailbox.events_reliable()
        && let Err(e) = waiter.watch(&[(asks.dir(), false)])
    {
        tracing::warn!("{}", crate::watch::no_events_reason(&e, POLL));
    }
    loop {
        waiter.drain();
        if let Some(o) = asks.outcome_durable(id)? {
            return Ok(Waited::Outcome(o));
        }
        let now = Utc::now();
        let past = deadline.is_some_and(|d| now >= d);
        if past && let Some(o) = asks.expire(id, by)? {
            return Ok(Waited::Outcome(o));
        }
        if stop() {
            return Ok(Waited::Stopped);
        }
        // Past the deadline with no expiry recorded: the request was asked on another host,
        // which records it (spec/asks.md §8); it comes back as a change of `asks/`.
        let mut left = deadline.filter(|_| !past).map(|d| {
            (d - now)
                .to_std()
                .unwrap_or(Duration::ZERO)
                .saturating_add(Duration::from_millis(1))
        });
        if let Some(t) = tick {
            left = Some(left.map_or(t, |l| l.min(t)));
        }
        if !waiter.sleep(None, left) {
            tracing::warn!("watcher stopped; polling every second");
            waiter.unwatch();
        }
    }
}
