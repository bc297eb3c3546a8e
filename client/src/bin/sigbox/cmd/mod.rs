//! The commands, one file per concept. Each is a leaf: it imports `cli`, `output` and the
//! libraries, never another command; `main.rs` routes to them.

pub(crate) mod asks;
pub(crate) mod demo;
pub(crate) mod goblin;
pub(crate) mod hook;
pub(crate) mod hooks;
pub(crate) mod launch;
pub(crate) mod mailbox;
pub(crate) mod mux;
pub(crate) mod streams;
pub(crate) mod tap;

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

/// The mailbox options every command opens a mailbox with, set once from the command line.
static OPTIONS: OnceLock<sigbox::MailboxOptions> = OnceLock::new();

/// `-v` given at least once: commands say on stderr what they did besides their output.
static VERBOSE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `--durability relaxed` (or `SIGBOX_DURABILITY=relaxed`) in force: no fsync.
static RELAXED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True when the command runs without fsync ([`set_options`]).
pub(crate) fn relaxed() -> bool {
    RELAXED.load(std::sync::atomic::Ordering::Relaxed)
}

/// `--json` given: machine output everywhere, stderr included.
static JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records `--json`.
pub(crate) fn set_json(json: bool) {
    JSON.store(json, std::sync::atomic::Ordering::Relaxed);
}

/// True under `--json`.
pub(crate) fn json() -> bool {
    JSON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Records `-v`.
pub(crate) fn set_verbose(verbose: bool) {
    VERBOSE.store(verbose, std::sync::atomic::Ordering::Relaxed);
}

/// True when a command should say on stderr what it skipped and why: with `-v`, and always
/// when stderr is a terminal (a person is watching).
pub(crate) fn telling() -> bool {
    VERBOSE.load(std::sync::atomic::Ordering::Relaxed)
        || std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Sets the settle window (`--settle`, `SIGBOX_SETTLE`) and the durability (`--durability`,
/// `SIGBOX_DURABILITY`) for every mailbox the command opens.
pub(crate) fn set_options(settle: Duration, durability: sigbox::Durability) {
    RELAXED.store(
        durability == sigbox::Durability::RelaxedNoFsync,
        std::sync::atomic::Ordering::Relaxed,
    );
    let mut opts = sigbox::MailboxOptions::new();
    opts.settle(settle).durability(durability);
    let _ = OPTIONS.set(opts);
}

/// The options of [`set_options`], or the defaults.
pub(crate) fn options() -> sigbox::MailboxOptions {
    OPTIONS.get().cloned().unwrap_or_default()
}

/// Opens the mailbox at `root` with the command line's options.
pub(crate) fn open(root: &Path) -> sigbox::Result<sigbox::Mailbox> {
    options().open(root)
}
