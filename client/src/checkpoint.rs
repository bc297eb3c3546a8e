//! [`Checkpoint`]: one agent's handle on a mailbox, what its runtime calls at each checkpoint:
//! presence while it lives, one pass per [`Checkpoint::poll`], and the waits built on passes.

use std::path::Path;
use std::time::{Duration, Instant};

use sigbox::{Mailbox, MailboxOptions, PassControl, Presence, Signal};

use crate::watch::{POLL, Waiter};

/// How often a wait on a root that is a symlink looks whether the link points elsewhere now.
const ROOT_LINK_LOOK: Duration = Duration::from_secs(1);

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

/// One agent's checkpoint handle.
pub struct Checkpoint {
    mailbox: Mailbox,
    agent: String,
    state: Option<String>,
    mode: WaitMode,
    _presence: Presence,
    waiter: Waiter,
    /// The `inputs/` and the agent's buffer the watch was armed on (device, inode of each,
    /// when a real directory): when either path leads elsewhere (the root moved and made
    /// again, the buffer made since), the watch is taken again, and the presence with it.
    watched: Option<Watched>,
    interrupted: Option<sigbox::Error>,
    /// What the passes since the last [`Checkpoint::take_notes`] did besides delivering.
    notes: Notes,
}

/// What checkpoint passes did besides delivering: what a person at the terminal would want
/// to know when nothing (or less than expected) came ([`Checkpoint::take_notes`]).
#[non_exhaustive]
#[derive(Clone, Debug, Default)]
pub struct Notes {
    /// Signals the orchestrator moved into an absent agent's buffer.
    pub buffered: Vec<sigbox::Buffered>,
    /// Broadcasts archived because the quorum had acked them, with where each is now.
    pub archived: Vec<sigbox::ArchivedBroadcast>,
    /// Files quarantined into `rejected/`.
    pub rejected: Vec<sigbox::Rejection>,
    /// When the next dropped file still settling becomes eligible (after the last pass).
    pub next_check: Option<std::time::SystemTime>,
    /// The files still settling after the last pass, each with when it becomes eligible.
    pub settling: Vec<sigbox::Settling>,
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
            waiter: Waiter::new(),
            watched: None,
            interrupted: None,
            notes: Notes::default(),
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
        self.waiter.unwatch();
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
    /// They stay in flight until acknowledged: by [`Checkpoint::ack`] once acted on, or by
    /// the next `poll` or `wait`. If the process dies first, the agent's next checkpoint
    /// delivers them again, marked ([`Signal::redelivery`]).
    ///
    /// If the pass failed after delivering signals, they are returned and the error is kept
    /// for [`Checkpoint::take_error`]; the next call returns it if it was not taken.
    pub fn poll(&mut self) -> sigbox::Result<Vec<Signal>> {
        self.poll_with(PassControl::new().ack_later(), &mut |_| Ok(()))
    }

    /// Acknowledges what the last passes delivered: never delivered again, also after a
    /// crash. Returns how many signals were acknowledged.
    pub fn ack(&self) -> sigbox::Result<usize> {
        self.mailbox.ack(&self.agent)
    }

    /// [`Checkpoint::poll`], handing each group of signals to `hand_over` as soon as it is
    /// durably claimed, and stopping early as `control` says (see
    /// [`sigbox::Mailbox::pass_with`]): a group `hand_over` accepts is acknowledged at once,
    /// unless `control` says [`PassControl::ack_later`]. Returns the signals `hand_over`
    /// accepted.
    pub fn poll_with(
        &mut self,
        control: &PassControl<'_>,
        hand_over: &mut dyn FnMut(&[Signal]) -> std::io::Result<()>,
    ) -> sigbox::Result<Vec<Signal>> {
        Ok(self.pass_once(control, hand_over)?.delivered)
    }

    /// One pass, after reporting the error that interrupted the last one, if any; an error
    /// that interrupts this one is kept for the next call (its deliveries come back now).
    fn pass_once(
        &mut self,
        control: &PassControl<'_>,
        hand_over: &mut dyn FnMut(&[Signal]) -> std::io::Result<()>,
    ) -> sigbox::Result<sigbox::Pass> {
        if let Some(e) = self.interrupted.take() {
            return Err(e);
        }
        let mut pass =
            self.mailbox
                .pass_with(&self.agent, self.state.as_deref(), control, hand_over)?;
        self.interrupted = pass.interrupted.take();
        self.notes.buffered.extend(pass.buffered.iter().cloned());
        self.notes.archived.extend(pass.archived.iter().cloned());
        self.notes.rejected.extend(pass.rejected.iter().cloned());
        self.notes.next_check = pass.next_check;
        self.notes.settling.clone_from(&pass.settling);
        Ok(pass)
    }

    /// What the passes since the last call did besides delivering: what they buffered,
    /// archived and quarantined, and when a file still settling becomes eligible.
    pub fn take_notes(&mut self) -> Notes {
        std::mem::take(&mut self.notes)
    }

    /// The error that interrupted the last pass after it had delivered signals, if any.
    pub fn take_error(&mut self) -> Option<sigbox::Error> {
        self.interrupted.take()
    }

    fn polling_interval(&self) -> Option<Duration> {
        match self.mode {
            WaitMode::Poll(d) => Some(d.max(crate::watch::MIN_POLL)),
            WaitMode::Events => None,
            WaitMode::Auto if self.mailbox.events_reliable() => None,
            WaitMode::Auto => Some(POLL),
        }
    }

    /// Starts the watcher if this handle waits on events and has none yet. Must run before
    /// the pass that precedes a wait, so that nothing arriving after that pass's listing is
    /// missed.
    fn arm(&mut self) -> sigbox::Result<()> {
        if self.waiter.is_watching() {
            return Ok(());
        }
        if let Some(interval) = self.polling_interval() {
            self.waiter.poll(interval);
            return Ok(());
        }
        let [inputs, buffered] = self.mailbox.watch_dirs();
        let buffer = buffered.join(&self.agent);
        let now = self.identities();
        // Nothing recursive and nothing that is not a real directory: a watch follows paths,
        // and must never walk a link planted in the layout out of the root. The root (a
        // replaced `inputs/` or a moved root changes an entry there), `inputs/`, `buffered/`
        // (the agent's buffer being made) and the agent's buffer.
        let root = self.mailbox.root();
        let mut dirs: Vec<(&Path, bool)> = vec![(root, false)];
        if now.inputs.is_some() {
            dirs.push((inputs, false));
        }
        if is_real_dir(buffered) {
            dirs.push((buffered, false));
        }
        if now.buffer.is_some() {
            dirs.push((&buffer, false));
        }
        // A root that is a symlink can be pointed at another directory with no event in any
        // of these (the link's own directory is not watched: it may be busy, `/tmp`). A look
        // every second finds it (the pass follows a moved root), at the cost of one pass.
        if std::fs::symlink_metadata(root).is_ok_and(|m| m.file_type().is_symlink()) {
            self.waiter.backstop(ROOT_LINK_LOOK);
        }
        self.watched = Some(now);
        if let Err(e) = self.waiter.watch(&dirs) {
            tracing::warn!("{}", crate::watch::no_events_reason(&e, POLL));
            self.poll_from_now_on();
        }
        Ok(())
    }

    /// What [`Checkpoint::arm`] watches, as it is now.
    fn identities(&self) -> Watched {
        let [inputs, buffered] = self.mailbox.watch_dirs();
        Watched {
            inputs: identity(inputs),
            buffer: identity(&buffered.join(&self.agent)),
        }
    }

    /// After a pass (which follows a replaced root): when `inputs/` is not the directory the
    /// watch was armed on, watch the new one and take the presence there.
    fn follow_inputs(&mut self) -> sigbox::Result<()> {
        if self.polling_interval().is_some() {
            return Ok(()); // nothing armed to follow: every pass looks anew
        }
        let now = self.identities();
        if now.inputs.is_some() && Some(now) == self.watched && self.waiter.is_watching() {
            return Ok(());
        }
        self.waiter.unwatch();
        if now.inputs.is_none() {
            // Gone (the root moved away, not made again yet): look every second until it is.
            self.waiter.poll(POLL);
            return Ok(());
        }
        if self.watched.is_none_or(|w| w.inputs != now.inputs) {
            tracing::info!("inputs/ was replaced: watching the new one");
            self._presence = self.mailbox.presence(&self.agent)?;
        }
        self.arm()
    }

    /// True when `e` says that `inputs/` (or the root) is not there at the moment.
    fn inputs_gone(&self, e: &sigbox::Error) -> bool {
        e.io_error()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
            && identity(self.mailbox.watch_dirs()[0]).is_none()
    }

    /// Gives up on events for this handle: it polls every second.
    fn poll_from_now_on(&mut self) {
        self.mode = WaitMode::Poll(POLL);
        self.waiter.unwatch();
        self.waiter.poll(POLL);
    }

    /// Blocks until at least one signal is delivered, or until `timeout` passes (then returns
    /// an empty list). `None` waits forever.
    ///
    /// Event-driven where the filesystem gives events: it sleeps in the kernel until a file
    /// changes in `inputs/` or the agent's buffer, a dropped file's settle window ends, or the
    /// 30 s backstop; an event overflow triggers a full rescan. Where events are unreliable it
    /// polls (see [`WaitMode`]). It never spins. What it returns stays in flight until
    /// acknowledged, as with [`Checkpoint::poll`].
    pub fn wait(&mut self, timeout: Option<Duration>) -> sigbox::Result<Vec<Signal>> {
        self.wait_with(timeout, PassControl::new().ack_later(), &mut |_| Ok(()))
    }

    /// [`Checkpoint::wait`], with each pass run as [`Checkpoint::poll_with`] runs it. Returns
    /// early, with nothing, once `control`'s stop flag is set.
    pub fn wait_with(
        &mut self,
        timeout: Option<Duration>,
        control: &PassControl<'_>,
        hand_over: &mut dyn FnMut(&[Signal]) -> std::io::Result<()>,
    ) -> sigbox::Result<Vec<Signal>> {
        let deadline = crate::watch::deadline_after(timeout);
        self.arm()?;
        loop {
            // Drain wake-ups that arrived before this pass: the pass sees their effects, and
            // reads the files renamed in at once (they arrived whole).
            self.waiter.drain();
            for p in self.waiter.take_arrivals() {
                self.mailbox.arrived_whole(&p);
            }
            let pass = match self.pass_once(control, hand_over) {
                Ok(pass) => pass,
                // `inputs/` gone for a moment (being replaced, or the root moved and not made
                // again yet): keep waiting, looking every second, until it is back.
                Err(e) if self.inputs_gone(&e) => {
                    self.waiter.unwatch();
                    self.waiter.poll(POLL);
                    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    if left.is_some_and(|l| l.is_zero()) {
                        return Ok(Vec::new());
                    }
                    self.waiter.sleep(None, left);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !pass.delivered.is_empty() || control.stopped() {
                return Ok(pass.delivered);
            }
            self.follow_inputs()?;
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(Vec::new());
            }
            let left = deadline.map(|d| d.saturating_duration_since(now));
            if !self.waiter.sleep(pass.next_check, left) {
                tracing::warn!("watcher stopped; polling every second");
                self.poll_from_now_on();
            }
        }
    }

    /// The PAUSE handler: blocks until a RESUME, ABORT, STEER or INFO is delivered (or
    /// `timeout` passes), and returns everything delivered meanwhile. Further PAUSEs keep it
    /// waiting. Sleeps like [`Checkpoint::wait`]: no CPU is spent while paused.
    pub fn wait_resume(&mut self, timeout: Option<Duration>) -> sigbox::Result<Vec<Signal>> {
        let deadline = crate::watch::deadline_after(timeout);
        let mut got: Vec<Signal> = Vec::new();
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Ok(got);
            }
            // What earlier rounds gathered is not returned yet: it stays in flight, never
            // acknowledged by the next round's pass (a crash now gives it again, marked).
            let mut control = PassControl::new();
            control.ack_later();
            if !got.is_empty() {
                control.keep_handed();
            }
            let batch = self.wait_with(left, &control, &mut |_| Ok(()))?;
            let ends = batch.iter().any(|s| s.signal_type.ends_pause_wait());
            got.extend(batch);
            if ends {
                return Ok(got);
            }
        }
    }
}

/// What a wait watches: `inputs/` and the agent's buffer, each by (device, inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Watched {
    inputs: Option<(u64, u64)>,
    buffer: Option<(u64, u64)>,
}

/// A real directory's (device, inode) at `dir` as it is now; `None` for anything else (a
/// symlink is not followed).
fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir)
        .ok()
        .filter(std::fs::Metadata::is_dir)
        .map(|m| (m.dev(), m.ino()))
}

fn is_real_dir(dir: &Path) -> bool {
    identity(dir).is_some()
}
