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
//! | [`name`] | file names: canonical and upstream forms; the names sigbox gives its own files (staging, twins, `.dup-` variants, `NAME_MAX`) | `mailbox.md` §2, §8, §9 |
//! | `body` | bodies (`codec`), the handling block ([`Handling`], [`BRIDGED`]) and records | `mailbox.md` §3.2-§3.4 |
//! | `clock` | protocol instants, the settle rule, the size cap | `mailbox.md` §4, §5 |
//! | `sys` | platform differences: `renameat2`, `getdents64`, stamps | `mailbox.md` §9.9 |
//! | `io` | the seam: every effect and read, the hook, durability, poisoning ([`IoOptions`]) | `mailbox.md` §9 |
//! | `atomic` | the atomic write and the one claim step (rename or link) | `mailbox.md` §9.1, §9.2, §9.10 |
//! | [`bridge_state`] | `bridge/state.json`, one type for its writer and its readers | `bridge.md` §7 |
//! | `mailbox` | the Ralph mailbox ([`Mailbox`]), one file per spec section; `delivery/` (a pass's deliveries: slots, claims, records, group commits, acks), `bridge/` (the bridge's side, [`BridgeSide`]) | `mailbox.md`, `bridge.md` |
//! | `doctor` | [`diagnose`]: what is wrong with a root | `mailbox.md` §1, §8 |
//! | [`goblin`], [`mux`] | the other file dialects | `goblin.md`, `mux.md` |
//! | `lines`, [`flux`], [`pilot`] | the stream dialects on a shared line splitter | `streams.md` |
//! | [`tap`] | the table from stream signals to mailbox signals | `streams.md` §tap |
//! | [`asks`] | requests to a person and their one answer, beside the mailbox | `asks.md` |
#![deny(missing_docs)]

pub mod asks;
mod atomic;
mod body;
pub mod bridge_state;
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

pub use body::{Archived, BRIDGED, Handling};
pub use doctor::{Finding, Severity, diagnose};
pub use error::{Error, ErrorKind, Result};
pub use io::{Durability, FsHook, FsOp, IoOptions, LINK_CLAIMS_ENV, PORTABLE_RENAME_ENV};
pub use mailbox::{
    ArchivedBroadcast, BridgeSide, BroadcastsSeen, Buffered, DEFAULT_QUORUM, Finished, Imported,
    LAYOUT, Mailbox, MailboxOptions, Outbound, OutboundPlace, OutboundSignal, Outgoing, Pass,
    PassControl, PauseLock, Pending, Presence, Problem, ProblemKind, Rejection, SHARED_DIR_MODE,
    SHARED_FILE_MODE, Settling,
};
pub use signal::{
    NewSignal, ROLES, Signal, SignalType, Target, agent_name_problem, quoted_name, valid_agent,
    valid_sender,
};

/// Internals exposed for the fuzz targets and property tests only: not part of the API, may
/// change at any time.
#[doc(hidden)]
pub mod fuzzing {
    use crate::body::{self, Handled};
    use crate::name;

    /// The record a claim of `agent` leaves of the signal file `bytes` named `file_name`, after
    /// `redeliveries` deliveries again (spec/mailbox.md §3.4), and where its handling block
    /// starts.
    pub fn record_after_claims(
        bytes: &[u8],
        file_name: &str,
        redeliveries: u32,
    ) -> (Vec<u8>, usize) {
        let format = name::format_of(file_name);
        let mut record = bytes.to_vec();
        let mut at = 0;
        for n in 0..=redeliveries {
            let h = if n == 0 {
                Handled::Delivered
            } else {
                Handled::Redelivered(n)
            };
            let hint = body::parse_record(&record, format).ok().and_then(|b| b.end);
            let a = body::annotation(&record, format, &h.fields("Executor"), hint);
            at = a.at as usize;
            record.truncate(at);
            record.extend_from_slice(&a.tail);
        }
        (record, at)
    }

    /// True when `bytes` is a signal a claim takes from the drop zone as `file_name` (strictly:
    /// a record's leniency for torn blocks aside).
    pub fn is_dropped_signal(bytes: &[u8], file_name: &str) -> bool {
        body::parse_body(bytes, name::format_of(file_name)).is_ok_and(|b| {
            crate::Signal::from_body(b, file_name, std::path::Path::new(file_name)).is_ok()
        })
    }

    /// The identity (spec/mailbox.md §2.4) of a file named `file_name` whose body's `id` is
    /// `body_id`, with inode `ino` and birth time `birth_ns`.
    pub fn identity(
        file_name: &str,
        body_id: Option<&str>,
        ino: u64,
        birth_ns: Option<i128>,
    ) -> String {
        let mut fields = serde_json::Map::new();
        if let Some(id) = body_id {
            fields.insert("id".into(), id.into());
        }
        let stamp = crate::sys::Stamp {
            dev: 0,
            ino,
            size: 0,
            nlink: 1,
            mtime_ns: 0,
            ctime_ns: 0,
            birth_ns,
            kind: crate::sys::EntryKind::File,
        };
        crate::mailbox::identity(file_name, &fields, &stamp)
    }

    /// `bytes` as one strict document of the format `file_name` says (no duplicate key,
    /// nothing after it): its fields, or why not.
    pub fn one_document(
        bytes: &[u8],
        file_name: &str,
    ) -> std::result::Result<serde_json::Map<String, serde_json::Value>, String> {
        let text = std::str::from_utf8(body::strip_bom(bytes)).map_err(|e| e.to_string())?;
        let v = match name::format_of(file_name) {
            name::Format::Json => body::parse_json(text)?,
            name::Format::Yaml => body::parse_yaml(text)?,
        };
        match v {
            serde_json::Value::Object(m) => Ok(m),
            other => Err(format!("not a mapping: {other}")),
        }
    }
}
