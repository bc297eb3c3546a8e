//! The sigbox checkpoint client: what an agent runtime calls at each checkpoint.
//!
//! A [`Checkpoint`] is one agent's handle on a mailbox. While it lives it holds the agent's
//! presence, so the orchestrator leaves the agent's signals in `inputs/` rather than buffering
//! them. [`Checkpoint::poll`] runs one checkpoint pass; [`Checkpoint::wait`] blocks until
//! something is delivered, woken by filesystem events (with a rescan on event overflow, and
//! polling where events do not arrive); [`Checkpoint::wait_resume`] is the PAUSE handler.
//!
//! An agent loop that checks in at each step:
//!
//! ```
//! use std::time::Duration;
//! use sigbox::{Mailbox, NewSignal, SignalType, Target};
//! use sigbox_client::Checkpoint;
//!
//! let dir = tempfile::tempdir()?;
//! let mailbox = Mailbox::init(dir.path())?;
//! let mut executor = Checkpoint::open(dir.path(), "Executor")?;
//!
//! // Someone steers the executor, then pauses and resumes it.
//! for (ty, msg) in [(SignalType::Steer, "prefer the v2 API"), (SignalType::Pause, "hold"),
//!                   (SignalType::Resume, "go on")] {
//!     mailbox.send(NewSignal::new(ty).target(Target::Agent("Executor".into())).message(msg))?;
//! }
//!
//! let mut log = Vec::new();
//! for step in 0..3 {
//!     // ... do one atomic step of work ...
//!     // What a poll returns stays in flight until acknowledged (the next poll or wait, or
//!     // `ack`): were this process to die first, the next run would get it again, marked by
//!     // `signal.redelivery() > 0`.
//!     for signal in executor.poll()? {
//!         match signal.signal_type {
//!             SignalType::Abort => {
//!                 executor.ack()?;
//!                 return Ok(());
//!             }
//!             SignalType::Pause => {
//!                 // Finish the step, then block (without spinning) until RESUME, ABORT, or
//!                 // a new STEER/INFO.
//!                 let next = executor.wait_resume(Some(Duration::from_secs(5)))?;
//!                 log.extend(next.iter().map(|s| s.signal_type.to_string()));
//!             }
//!             other => log.push(other.to_string()),
//!         }
//!     }
//!     let _ = step;
//! }
//! executor.ack()?;
//! assert_eq!(log, ["STEER", "RESUME"]);
//! assert_eq!(mailbox.processed()?.len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod asks;
mod checkpoint;
mod durations;
mod env;
pub mod logfmt;
pub mod pause;
mod watch;

pub use asks::{Waited, wait_outcome};
pub use checkpoint::{Checkpoint, Notes, WaitMode};
pub use durations::{MAX_SETTLE, parse_duration, parse_settle};
pub use env::{DEFAULT_ROOT, DEFAULT_SETTLE, durability_from, root_from, settle_from};
pub use watch::{DirWatch, Waiter, Woke, deadline_after, no_events_reason};

pub use sigbox;

/// The README's Rust examples, compiled as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
