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
//!     for signal in executor.poll()? {
//!         match signal.signal_type {
//!             SignalType::Abort => return Ok(()),
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
//! assert_eq!(log, ["STEER", "RESUME"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use sigbox::{Mailbox, MailboxOptions, Presence, Signal, SignalType};

pub use sigbox;

/// How [`Checkpoint::wait`] learns that something may have arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Filesystem events where they are reliable, polling every second on network and FUSE
    /// filesystems. The default.
    Auto,
    /// Filesystem events (inotify on Linux); an event overflow triggers a full rescan.
    Events,
    /// Poll at this interval; for filesystems that deliver no events.
    Poll(Duration),
}

/// How often an event-driven wait rescans anyway, in case an event was lost: a backstop like
/// Postfix's periodic pickup wake-up, cheap because a pass over an unchanged inbox costs one
/// directory listing.
const BACKSTOP: Duration = Duration::from_secs(30);

/// Polling interval chosen by [`WaitMode::Auto`] where events are unreliable.
const AUTO_POLL: Duration = Duration::from_secs(1);

/// An event-driven wait on a few directories: wakes when an entry is created, changed, renamed
/// or removed in them (reads of the directories themselves never wake it), or when events
/// overflowed and a rescan is due. Shared by every waiting command.
pub struct DirWatch {
    _watcher: RecommendedWatcher,
    rx: Receiver<WakeUp>,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch").finish_non_exhaustive()
    }
}

impl DirWatch {
    /// Watches `dirs` (each recursively or not). Fails when the platform gives no events or a
    /// directory cannot be watched; callers then poll.
    pub fn new(dirs: &[(&Path, bool)]) -> notify::Result<DirWatch> {
        let (tx, rx) = mpsc::channel();
        let handler = move |res: notify::Result<notify::Event>| {
            if let Some(wake) = wake_of(&res) {
                let _ = tx.send(wake);
            }
        };
        let mut watcher = notify::recommended_watcher(handler)?;
        for (dir, recursive) in dirs {
            let mode = if *recursive {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            watcher.watch(dir, mode)?;
        }
        Ok(DirWatch {
            _watcher: watcher,
            rx,
        })
    }

    /// Forgets wake-ups that arrived so far: call right before looking at the directories, so
    /// that anything after the look wakes the next [`DirWatch::wait`].
    pub fn drain(&self) {
        while self.rx.try_recv().is_ok() {}
    }

    /// Sleeps until something changes or `timeout` passes. Returns false if the watcher died
    /// (then poll instead).
    pub fn wait(&self, timeout: Duration) -> bool {
        match self.rx.recv_timeout(timeout) {
            Ok(WakeUp::Rescan) => {
                tracing::debug!("event overflow: rescanning");
                true
            }
            Ok(WakeUp::Changed) | Err(RecvTimeoutError::Timeout) => true,
            Err(RecvTimeoutError::Disconnected) => false,
        }
    }
}

/// What a filesystem event means to a waiter. `None`: nothing to look at.
fn wake_of(res: &notify::Result<notify::Event>) -> Option<WakeUp> {
    match res {
        // The kernel's queue overflowed (inotify IN_Q_OVERFLOW): events were lost, so the
        // directories must be listed again, which the next pass does in full.
        Ok(ev) if ev.need_rescan() => Some(WakeUp::Rescan),
        // Opening and reading a directory are events too (inotify's IN_OPEN, IN_CLOSE_NOWRITE):
        // the waiter's own listing must not wake it, or it would spin.
        Ok(ev) if matches!(ev.kind, notify::EventKind::Access(_)) => None,
        Ok(_) => Some(WakeUp::Changed),
        // A watcher error may mean lost events too: rescan.
        Err(_) => Some(WakeUp::Rescan),
    }
}

/// One agent's checkpoint handle.
pub struct Checkpoint {
    mailbox: Mailbox,
    agent: String,
    state: Option<String>,
    mode: WaitMode,
    _presence: Presence,
    events: Option<DirWatch>,
    interrupted: Option<sigbox::Error>,
}

/// Why a wait woke up.
#[derive(Debug, PartialEq, Eq)]
enum WakeUp {
    Changed,
    Rescan,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("root", &self.mailbox.root())
            .field("agent", &self.agent)
            .field("state", &self.state)
            .field("mode", &self.mode)
            .finish()
    }
}

impl Checkpoint {
    /// Opens a checkpoint for `agent` on the mailbox at `root`, with default options, and
    /// takes the agent's presence.
    pub fn open(root: impl AsRef<Path>, agent: &str) -> sigbox::Result<Checkpoint> {
        Checkpoint::with_options(&MailboxOptions::new(), root, agent)
    }

    /// Opens a checkpoint with mailbox options of your own.
    pub fn with_options(
        opts: &MailboxOptions,
        root: impl AsRef<Path>,
        agent: &str,
    ) -> sigbox::Result<Checkpoint> {
        let mailbox = opts.open(root)?;
        let presence = mailbox.presence(agent)?;
        Ok(Checkpoint {
            mailbox,
            agent: agent.to_string(),
            state: None,
            mode: WaitMode::Auto,
            _presence: presence,
            events: None,
            interrupted: None,
        })
    }

    /// Sets the agent's current state (for APPROVE/SKIP routing). Default: none.
    pub fn state(&mut self, state: Option<&str>) -> &mut Self {
        self.state = state.map(str::to_string);
        self
    }

    /// Sets how waits detect new signals. Default: [`WaitMode::Auto`].
    pub fn wait_mode(&mut self, mode: WaitMode) -> &mut Self {
        self.mode = mode;
        self.events = None;
        self
    }

    /// The agent.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The mailbox.
    pub fn mailbox(&self) -> &Mailbox {
        &self.mailbox
    }

    /// Runs one checkpoint pass and returns the delivered signals, oldest first.
    ///
    /// If the pass failed after delivering signals, they are returned and the error is kept
    /// for [`Checkpoint::take_error`]; the next call returns it if it was not taken.
    pub fn poll(&mut self) -> sigbox::Result<Vec<Signal>> {
        if let Some(e) = self.interrupted.take() {
            return Err(e);
        }
        let pass = self.mailbox.pass(&self.agent, self.state.as_deref())?;
        self.interrupted = pass.interrupted;
        Ok(pass.delivered)
    }

    /// The error that interrupted the last pass after it had delivered signals, if any.
    pub fn take_error(&mut self) -> Option<sigbox::Error> {
        self.interrupted.take()
    }

    fn polling_interval(&self) -> Option<Duration> {
        match self.mode {
            WaitMode::Poll(d) => Some(d),
            WaitMode::Events => None,
            WaitMode::Auto if self.mailbox.events_reliable() => None,
            WaitMode::Auto => Some(AUTO_POLL),
        }
    }

    /// Starts the watcher if this handle waits on events and has none yet. Must run before
    /// the pass that precedes a wait, so that nothing arriving after that pass's listing is
    /// missed.
    fn arm(&mut self) -> sigbox::Result<()> {
        if self.events.is_some() || self.polling_interval().is_some() {
            return Ok(());
        }
        let [inputs, buffered] = self.mailbox.watch_dirs();
        match DirWatch::new(&[(inputs, false), (buffered, true)]) {
            Ok(w) => self.events = Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "no filesystem events here; polling every second");
                self.mode = WaitMode::Poll(AUTO_POLL);
            }
        }
        Ok(())
    }

    /// Blocks until at least one signal is delivered, or until `timeout` passes (then returns
    /// an empty list). `None` waits forever.
    ///
    /// Event-driven where the filesystem gives events: it sleeps in the kernel until a file
    /// changes in `inputs/` or the agent's buffer, a dropped file's settle window ends, or the
    /// 30 s backstop; an event overflow triggers a full rescan. Where events are unreliable it
    /// polls (see [`WaitMode`]). It never spins.
    pub fn wait(&mut self, timeout: Option<Duration>) -> sigbox::Result<Vec<Signal>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.arm()?;
        loop {
            // Drain wake-ups that arrived before this pass: the pass sees their effects.
            if let Some(w) = &self.events {
                w.drain();
            }
            if let Some(e) = self.interrupted.take() {
                return Err(e);
            }
            let pass = self.mailbox.pass(&self.agent, self.state.as_deref())?;
            self.interrupted = pass.interrupted;
            if !pass.delivered.is_empty() {
                return Ok(pass.delivered);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(Vec::new());
            }
            let mut sleep = match self.polling_interval() {
                Some(interval) => interval,
                None => BACKSTOP,
            };
            if let Some(at) = pass.next_check {
                let until = at
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                sleep = sleep.min(until + Duration::from_millis(1));
            }
            if let Some(d) = deadline {
                sleep = sleep.min(d.saturating_duration_since(now));
            }
            match &self.events {
                Some(w) => {
                    if !w.wait(sleep) {
                        tracing::warn!("watcher stopped; polling every second");
                        self.events = None;
                        self.mode = WaitMode::Poll(AUTO_POLL);
                    }
                }
                None => std::thread::sleep(sleep),
            }
        }
    }

    /// The PAUSE handler: blocks until a RESUME, ABORT, STEER or INFO is delivered (or
    /// `timeout` passes), and returns everything delivered meanwhile. Further PAUSEs keep it
    /// waiting. Sleeps like [`Checkpoint::wait`]: no CPU is spent while paused.
    pub fn wait_resume(&mut self, timeout: Option<Duration>) -> sigbox::Result<Vec<Signal>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut got = Vec::new();
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Ok(got);
            }
            let batch = self.wait(left)?;
            let ends = batch.iter().any(|s| {
                matches!(
                    s.signal_type,
                    SignalType::Resume | SignalType::Abort | SignalType::Steer | SignalType::Info
                )
            });
            got.extend(batch);
            if ends {
                return Ok(got);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{AccessKind, CreateKind, EventKind, Flag, ModifyKind, RenameMode};

    #[test]
    fn overflow_and_errors_rescan_reads_never_wake() {
        let ev = |k| Ok(notify::Event::new(k));
        assert_eq!(
            wake_of(&ev(EventKind::Any).map(|e| e.set_flag(Flag::Rescan))),
            Some(WakeUp::Rescan)
        );
        assert_eq!(
            wake_of(&Err(notify::Error::generic("queue overflow"))),
            Some(WakeUp::Rescan)
        );
        assert_eq!(wake_of(&ev(EventKind::Access(AccessKind::Any))), None);
        assert_eq!(
            wake_of(&ev(EventKind::Create(CreateKind::File))),
            Some(WakeUp::Changed)
        );
        assert_eq!(
            wake_of(&ev(EventKind::Modify(ModifyKind::Name(RenameMode::To)))),
            Some(WakeUp::Changed)
        );
    }
}

/// The README's Rust examples, compiled as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
