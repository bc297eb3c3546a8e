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

mod atomic;
mod body;
mod clock;
mod doctor;
mod error;
pub mod flux;
pub mod goblin;
mod io;
pub mod lines;
mod mailbox;
pub mod mux;
pub mod name;
pub mod pilot;
mod signal;
mod sys;
pub mod tap;

pub use body::{Archived, Handling};
pub use doctor::{Finding, Severity, diagnose};
pub use error::{Error, ErrorKind, Result};
pub use io::{Durability, FsHook, FsOp, IoOptions};
pub use mailbox::{
    DEFAULT_QUORUM, Finished, LAYOUT, Mailbox, MailboxOptions, Pass, Pending, Presence, Rejection,
    SHARED_DIR_MODE, SHARED_FILE_MODE,
};
pub use signal::{NewSignal, ROLES, Signal, SignalType, Target};
