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
//!
//! # Map of the crate
//!
//! From the bottom up: each module imports only from the rows above it.
//!
//! | module | owns | spec |
//! |---|---|---|
//! | `error` | [`Error`], [`ErrorKind`]: every error names its file and reason | |
//! | `signal` | [`SignalType`], [`Target`], [`Signal`], [`NewSignal`] | `mailbox.md` §3.1 |
//! | [`name`] | file names: canonical and upstream forms | `mailbox.md` §2 |
//! | `body` | bodies, records and the handling block ([`Handling`]) | `mailbox.md` §3.2-§3.4 |
//! | `clock` | protocol instants, the settle rule, the size cap | `mailbox.md` §4, §5 |
//! | `sys` | platform differences: `renameat2`, `getdents64`, stamps | `mailbox.md` §9.9 |
//! | `io` | the seam: every effect, the hook, durability, poisoning ([`IoOptions`]) | `mailbox.md` §9 |
//! | `atomic` | the atomic write and the claim | `mailbox.md` §9.1, §9.2 |
//! | `mailbox` | the Ralph mailbox ([`Mailbox`]), one file per spec section | `mailbox.md` |
//! | `doctor` | [`diagnose`]: what is wrong with a root | `mailbox.md` §1, §8 |
//! | [`goblin`], [`mux`] | the other file dialects | `goblin.md`, `mux.md` |
//! | `lines`, [`flux`], [`pilot`] | the stream dialects on a shared line splitter | `streams.md` |
//! | [`tap`] | the table from stream signals to mailbox signals | `streams.md` §tap |
#![deny(missing_docs)]

mod atomic;
mod body;
mod clock;
mod doctor;
mod error;
pub mod flux;
pub mod goblin;
mod io;
mod lines;
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
pub use io::{Durability, FsHook, FsOp, IoOptions, PORTABLE_RENAME_ENV};
pub use mailbox::{
    Buffered, DEFAULT_QUORUM, Finished, LAYOUT, Mailbox, MailboxOptions, Pass, PassControl,
    Pending, Presence, Problem, ProblemKind, Rejection, SHARED_DIR_MODE, SHARED_FILE_MODE,
};
pub use signal::{NewSignal, ROLES, Signal, SignalType, Target, valid_agent};
