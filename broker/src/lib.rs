//! sigbox: a crash-safe, file-based signal broker for agent pipelines.
//!
//! The core is the Ralph mailbox: producers [`Mailbox::send`] signals into `inputs/`; agents run
//! a checkpoint [`Mailbox::pass`] that delivers, in FIFO order, exactly the signals meant for
//! them, each exactly once, durably.
//!
//! ```
//! use sigbox::{Mailbox, NewSignal, SignalType, Target};
//!
//! let dir = tempfile::tempdir()?;
//! let mailbox = Mailbox::init(dir.path().join("signals"))?;
//! let id = mailbox.send(
//!     NewSignal::new(SignalType::Steer)
//!         .target(Target::Agent("Executor".into()))
//!         .message("use the v2 API"),
//! )?;
//!
//! // Another agent's checkpoint leaves it alone...
//! assert!(mailbox.pass("Planner", None)?.delivered.is_empty());
//! // ...the Executor's delivers it, once.
//! let pass = mailbox.pass("Executor", None)?;
//! assert_eq!(pass.delivered[0].id, id);
//! assert_eq!(pass.delivered[0].message.as_deref(), Some("use the v2 API"));
//! assert!(mailbox.pass("Executor", None)?.delivered.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

// The map of the crate, from the bottom up. Pure modules first (no filesystem access), then the
// seam and what is built on it.

// Vocabulary: what a signal is, its names on disk, its bytes, its instants, its errors.
mod body; // bodies, records and the handling block (§3.2-§3.4)
mod clock;
mod error; // Error, ErrorKind: every error names its file and reason
pub mod name; // file names: canonical and upstream forms (§2)
mod signal; // SignalType, Target, Signal, NewSignal (spec/mailbox.md §3.1) // protocol instants, the settle rule, the size cap (§4, §5)

// The filesystem: platform calls, the one seam every effect goes through, the two primitives.
mod atomic;
mod io; // Io: every effect, the hook, durability, poisoning (§9)
mod sys; // platform differences: renameat2, getdents64, stamps // the atomic write and the claim (§9.1, §9.2)

// The Ralph mailbox and its diagnosis.
mod doctor;
mod mailbox; // the mailbox, one file per spec section (spec/mailbox.md) // doctor: explains what is wrong with a root

// The other dialects.
pub mod flux; // Flux `flux:signal` lines and result documents (spec/streams.md)
pub mod goblin; // Goblin `.goblin/` signal files (spec/goblin.md)
mod lines; // the capped line splitter the stream parsers share
pub mod mux; // mux `.signals/` files (spec/mux.md)
pub mod pilot; // Pilot `pilot-signal` blocks (spec/streams.md)

pub use body::{Archived, Handling};
pub use doctor::{Finding, Severity, diagnose};
pub use error::{Error, ErrorKind, Result};
pub use io::{Durability, FsHook, FsOp, IoOptions};
pub use mailbox::{
    Buffered, DEFAULT_QUORUM, Finished, LAYOUT, Mailbox, MailboxOptions, Pass, Pending, Presence,
    Problem, ProblemKind, Rejection, SHARED_DIR_MODE, SHARED_FILE_MODE,
};
pub use signal::{NewSignal, ROLES, Signal, SignalType, Target};
