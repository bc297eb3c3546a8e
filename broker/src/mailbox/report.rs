//! What the mailbox's operations report to their callers (spec/mailbox.md §6-§8): the outcome
//! of a pass, pending and problem files, finished broadcasts. Pure data, at the bottom of the
//! module: every other file of `mailbox/` may use it.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::body::Archived;
use crate::error::Error;
use crate::signal::{Signal, Target};

/// A file that a pass moved to `rejected/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The file's name as it was in the drop zone (lossy for non-UTF-8 names).
    pub name: String,
    /// Where it is now.
    pub path: PathBuf,
    /// Why it can never be delivered.
    pub reason: String,
}

/// A signal the orchestrator moved into an absent agent's buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffered {
    /// The signal id.
    pub id: String,
    /// The agent whose buffer now holds it.
    pub agent: String,
}

/// What one checkpoint pass did.
#[non_exhaustive]
#[derive(Debug, Default)]
pub struct Pass {
    /// Signals delivered to the agent, oldest first.
    pub delivered: Vec<Signal>,
    /// Signals the orchestrator moved to an absent agent's buffer.
    pub buffered: Vec<Buffered>,
    /// Broadcasts the orchestrator archived because the quorum had acked.
    pub archived: Vec<ArchivedBroadcast>,
    /// Files moved to quarantine.
    pub rejected: Vec<Rejection>,
    /// True when the pass stopped early after a PAUSE or ABORT.
    pub stopped: bool,
    /// When a dropped file that is still settling becomes eligible: check again then (the
    /// earliest of [`Pass::settling`]).
    pub next_check: Option<SystemTime>,
    /// The files the pass left to settle (written in place within the settle window, spec
    /// §5), each once, with when it becomes eligible if unchanged.
    pub settling: Vec<Settling>,
    /// Set when the pass stopped early because of this error *after* delivering signals: the
    /// signals in `delivered` are durably claimed and must be acted on; the error must be
    /// reported too. (Without deliveries the pass returns the error itself.)
    pub interrupted: Option<Error>,
}

impl Pass {
    /// Notes that the file at `path` is still settling until `until`.
    pub(super) fn note_settling(&mut self, path: PathBuf, until: SystemTime) {
        self.next_check = Some(self.next_check.map_or(until, |t| t.min(until)));
        match self.settling.iter_mut().find(|s| s.path == path) {
            Some(s) => s.until = s.until.min(until),
            None => self.settling.push(Settling { path, until }),
        }
    }
}

/// A broadcast archived into `processed/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivedBroadcast {
    /// The signal id.
    pub id: String,
    /// Its record in `processed/`, where it is now.
    pub path: PathBuf,
}

/// A file written in place that a pass left to settle (spec/mailbox.md §5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settling {
    /// The file.
    pub path: PathBuf,
    /// When it becomes eligible if it does not change again.
    pub until: SystemTime,
}

/// A pending signal, as `ls` shows it.
#[derive(Clone, Debug)]
pub struct Pending {
    /// The signal id.
    pub id: String,
    /// The file.
    pub path: PathBuf,
    /// The instant FIFO order uses, in nanoseconds since the Unix epoch.
    pub instant: i128,
    /// The body's `created_at` as every output shows it (the offset it was written with,
    /// [`Signal::created_at_rfc3339`]); `None` when the body has none (or was not read).
    pub created_at: Option<String>,
    /// The type as written.
    pub type_name: String,
    /// The target.
    pub target: Target,
    /// For a buffered signal: whose buffer it is in.
    pub buffered_for: Option<String>,
    /// Its sender (`from`), when it names one: an agent's own broadcast is not delivered to
    /// it (spec/mailbox.md §9.4).
    pub from: Option<String>,
}

/// A file in `inputs/` that is not (yet) deliverable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub path: PathBuf,
    /// What is the matter with it.
    pub kind: ProblemKind,
}

/// Why a file in `inputs/` (or a claim slot) is not deliverable now.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// Changed within the settle window: possibly still being written (spec §5).
    Settling {
        /// When it becomes eligible if it does not change again.
        until: SystemTime,
        /// The settle window.
        window: Duration,
        /// It waits for a second link to go (a delivery or a claim by link, spec
        /// mailbox.md §3.3), not for a writer to finish.
        second_link: bool,
    },
    /// Invalid: the next pass quarantines it (spec §8).
    Invalid {
        /// Why.
        reason: String,
    },
    /// A claim slot that no live handle holds with signals in it: a consumer of `agent` died
    /// before handing them over; the agent's next pass delivers them again, marked (spec
    /// §9.2). The path is the slot.
    InFlight {
        /// The agent they were claimed for.
        agent: String,
        /// How many.
        count: usize,
    },
    /// A claim slot a live handle holds: signals claimed by a running consumer of `agent`
    /// and not yet handed over (the CLI prints and flushes them; a library consumer
    /// acknowledges them). The path is the slot.
    Held {
        /// The agent they were claimed for.
        agent: String,
        /// How many.
        count: usize,
    },
    /// A second link to a signal that an interrupted move of sigbox's own left (spec §9.6),
    /// not a planted one: the next pass removes one of the two links and the signal goes on
    /// (which one depends on whose pass comes first: a claim's slot link goes when the agent's
    /// pass finds it, the source's when another pass does).
    Leftover {
        /// The link a pass that finds the problem's path removes.
        leftover: PathBuf,
    },
}

impl Problem {
    /// The reason, in one line.
    pub fn reason(&self) -> String {
        match &self.kind {
            ProblemKind::Settling {
                second_link: true, ..
            } => "it has a second link: read once that link is gone (a delivery or a claim by \
                  link); quarantined unread if it stays"
                .to_string(),
            ProblemKind::Settling { window, .. } => {
                format!("changed less than {window:?} ago: waiting for the writer to finish")
            }
            ProblemKind::Invalid { reason } => reason.clone(),
            ProblemKind::InFlight { agent, count } => format!(
                "{count} signal(s) claimed by a consumer of {agent} that stopped before handing \
                 them over: {agent}'s next pass delivers them again, marked as redeliveries"
            ),
            ProblemKind::Held { agent, count } => format!(
                "{count} signal(s) claimed by a running consumer of {agent}, being handed over"
            ),
            ProblemKind::Leftover { leftover } => format!(
                "one of two links to one signal that an interrupted move left ({}): the next \
                 pass removes one of them and delivers the signal once",
                leftover.display()
            ),
        }
    }
}

/// What `finish` did with one broadcast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The signal id.
    pub id: String,
    /// Whether every quorum agent had acked.
    pub status: Archived,
    /// Quorum agents that had not acked.
    pub unacked: Vec<String>,
}
