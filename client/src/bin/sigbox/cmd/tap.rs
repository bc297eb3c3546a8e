//! `sigbox tap`: runs a command, passes its output through, and sends the stream signals in it
//! to the mailbox by the broker's table (`sigbox::tap`, spec/streams.md).

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use anyhow::Context;
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use sigbox::flux::{FluxEvent, FluxParser};
use sigbox::pilot::{PilotEvent, PilotParser};
use sigbox::{Mailbox, NewSignal, Target, tap};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The signals `tap` passes on to the command instead of dying of them.
const FORWARDED: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// After the command exits, how long `tap` waits for more output when none comes (what the
/// command's own background children hold open).
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Sends `sig` to the command: to its whole process group when it has its own, else to it
/// alone (except SIGINT, which a terminal already sent to the whole foreground group).
fn forward(pid: u32, own_group: bool, sig: i32) {
    let (Some(pid), Some(signal)) = (
        i32::try_from(pid).ok().and_then(Pid::from_raw),
        Signal::from_named_raw(sig),
    ) else {
        return;
    };
    let sent = if own_group {
        kill_process_group(pid, signal)
    } else if sig == SIGINT {
        return;
    } else {
        kill_process(pid, signal)
    };
    if let Err(e) = sent {
        tracing::warn!(signal = sig, error = %e, "tap: cannot forward the signal");
    }
}

/// Shared state of the two pump threads.
struct Tap {
    mailbox: Mailbox,
    from: String,
    to: Target,
    progress_bar: bool,
    /// `--json`: each signal sent is reported on stderr as one JSON object.
    json: bool,
    /// What the terminal shows, guarded with stderr: see [`Screen`].
    stderr: Mutex<Screen>,
    failed: AtomicBool,
    progress: Mutex<Option<(i64, String)>>,
    /// When a pump last read or handled something: after the command exits, output is
    /// drained for as long as it keeps coming.
    last_activity: Mutex<Instant>,
}

/// The terminal's state, for the progress bar: the bar is drawn only on a line of its own,
/// never over output the command left without a newline (a prompt).
#[derive(Default)]
struct Screen {
    /// The bar is on the terminal's last line now.
    bar_shown: bool,
    /// The command's last output did not end its line.
    line_open: bool,
}

impl Tap {
    fn active(&self) {
        *self.last_activity.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_activity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    /// Sends a mapped stream signal to `to`, from `from`.
    fn send(&self, mut s: NewSignal) {
        s.target(self.to.clone()).from(self.from.clone());
        let sent = self.mailbox.send(&s);
        self.active();
        if let Ok(id) = &sent
            && self.json
        {
            let v = serde_json::json!({
                "event": "sent", "id": id, "type": s.signal_type().as_str(),
                "target": crate::output::target_json(&self.to), "from": self.from,
            });
            let _g = self.stderr.lock();
            let _ = writeln!(std::io::stderr(), "{v}");
        }
        if let Err(e) = sent {
            self.failed.store(true, Ordering::Relaxed);
            let _g = self.stderr.lock();
            let _ = writeln!(
                std::io::stderr(),
                "sigbox: tap: cannot send a mailbox signal: {e}"
            );
        }
    }

    fn draw_bar(&self, screen: &mut Screen, err: &mut std::io::StderrLock<'_>) {
        if screen.line_open {
            return;
        }
        if let Some((p, phase)) = &*self.progress.lock().unwrap_or_else(|e| e.into_inner()) {
            screen.bar_shown = true;
            let filled = (*p as usize * 30) / 100;
            let _ = write!(
                err,
                "\r\x1b[2K[{}{}] {p:>3}% {phase}",
                "#".repeat(filled),
                "-".repeat(30 - filled)
            );
            let _ = err.flush();
        }
    }

    /// Passes a chunk of the child's output through unchanged, now.
    fn pass_through(&self, is_stderr: bool, chunk: &[u8]) {
        let mut screen = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        if is_stderr || self.progress_bar {
            let mut err = std::io::stderr().lock();
            if screen.bar_shown {
                let _ = err.write_all(b"\r\x1b[2K");
                screen.bar_shown = false;
            }
            if is_stderr {
                let _ = err.write_all(chunk);
            }
            let _ = err.flush();
        }
        if !is_stderr {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(chunk);
            let _ = out.flush();
        }
        if !chunk.is_empty() {
            screen.line_open = !chunk.ends_with(b"\n");
        }
        if self.progress_bar {
            self.draw_bar(&mut screen, &mut std::io::stderr().lock());
        }
    }

    /// Sends what one read of the stream held, in stream order: Flux lines and Pilot blocks
    /// by the line where each starts (a Flux ABORT after a Pilot status stays after it).
    fn handle(&self, flux_events: Vec<FluxEvent>, pilot_events: Vec<PilotEvent>) {
        enum Ev {
            Flux(FluxEvent),
            Pilot(PilotEvent),
        }
        let line_of = |e: &Ev| match e {
            Ev::Flux(FluxEvent::Signal(s)) => s.line,
            Ev::Flux(FluxEvent::Error { line, .. } | FluxEvent::TooLong { line, .. }) => *line,
            Ev::Pilot(PilotEvent::Signal(s)) => s.line,
            Ev::Pilot(PilotEvent::Warning { line, .. }) => *line,
        };
        let mut all: Vec<Ev> = flux_events.into_iter().map(Ev::Flux).collect();
        all.extend(pilot_events.into_iter().map(Ev::Pilot));
        all.sort_by_key(line_of);
        for e in all {
            match e {
                Ev::Flux(FluxEvent::Signal(s)) => self.send(tap::from_flux(&s)),
                Ev::Flux(other) => {
                    tracing::warn!(event = %other.to_json(), "flux: not a valid signal");
                }
                Ev::Pilot(e) => self.pilot(e),
            }
        }
    }

    fn pilot(&self, e: PilotEvent) {
        match e {
            PilotEvent::Signal(s) => {
                if s.signal_type == "status" || !s.phase.is_empty() {
                    let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
                    let prev = p.take().unwrap_or((0, String::new()));
                    let progress = if s.signal_type == "status" {
                        s.progress
                    } else {
                        prev.0
                    };
                    let phase = if s.phase.is_empty() {
                        prev.1
                    } else {
                        s.phase.clone()
                    };
                    *p = Some((progress, phase));
                }
                if self.progress_bar {
                    let mut screen = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
                    self.draw_bar(&mut screen, &mut std::io::stderr().lock());
                }
                self.send(tap::from_pilot(&s));
            }
            PilotEvent::Warning { line, message } => {
                tracing::warn!(line, message, "pilot: block skipped")
            }
        }
    }
}

fn pump(tap: &Tap, mut src: impl Read, is_stderr: bool) {
    let (mut f, mut p) = (FluxParser::default(), PilotParser::default());
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        tap.active();
        tap.pass_through(is_stderr, chunk);
        tap.handle(f.feed(chunk), p.feed(chunk));
        tap.active();
    }
    tap.handle(f.finish(), p.finish());
}

/// Runs `command`, sending its stream signals from `from` to `to` in the mailbox at `root`;
/// exits with its status.
pub(crate) fn run(
    root: &Path,
    from: &str,
    to: &str,
    command: &[String],
    json: bool,
) -> anyhow::Result<ExitCode> {
    // The sender's name, as `send` takes it (refused before the command runs, not at its
    // first line).
    if !sigbox::valid_sender(from) {
        anyhow::bail!(
            "--as {from:?}: the sender's name must be non-empty text on one line, without \
             control characters"
        );
    }
    let mailbox = super::open(root)?;
    let to = Target::parse_sent(to).map_err(|e| anyhow::anyhow!("--to: {e}"))?;
    let (program, args) = command.split_first().context("no command given after --")?;
    // Termination signals are for the command: `tap` forwards them and stays to drain its
    // output, so that what the command prints on its way out still reaches the mailbox.
    let mut signals = Signals::new(FORWARDED).context("cannot install signal handlers")?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group, so a signal reaches everything it started; but not when it may
    // read the terminal, where a background group would be stopped (and the terminal's own
    // Ctrl-C reaches the whole foreground group anyway).
    let own_group = !std::io::stdin().is_terminal();
    if own_group {
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("{program}: cannot run"))?;
    let child_pid = child.id();
    let signals_handle = signals.handle();
    let forwarder = std::thread::spawn(move || {
        for sig in signals.forever() {
            forward(child_pid, own_group, sig);
        }
    });
    let tap = Arc::new(Tap {
        mailbox,
        from: from.to_string(),
        to,
        progress_bar: !json && std::io::stderr().is_terminal(),
        json,
        stderr: Mutex::new(Screen::default()),
        failed: AtomicBool::new(false),
        progress: Mutex::new(None),
        last_activity: Mutex::new(Instant::now()),
    });
    let out = child.stdout.take().expect("piped");
    let err = child.stderr.take().expect("piped");
    let t1 = {
        let tap = tap.clone();
        std::thread::spawn(move || pump(&tap, out, false))
    };
    let t2 = {
        let tap = tap.clone();
        std::thread::spawn(move || pump(&tap, err, true))
    };
    let status = child
        .wait()
        .with_context(|| format!("{program}: cannot wait"))?;
    signals_handle.close();
    let _ = forwarder.join();
    // The command is gone; its output is drained to the end (every signal already read is
    // sent, however long that takes), unless something it started still holds the pipes open
    // and writes nothing: that is given a moment of silence, then left behind.
    tap.active();
    while !(t1.is_finished() && t2.is_finished()) && tap.idle_for() < DRAIN_GRACE {
        std::thread::sleep(Duration::from_millis(10));
    }
    if t1.is_finished() && t2.is_finished() {
        let _ = t1.join();
        let _ = t2.join();
    } else {
        tracing::warn!(
            "tap: the command exited, but a process it started still holds its output; not waiting for it"
        );
    }
    if tap
        .stderr
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .bar_shown
    {
        eprintln!();
    }
    let code = match status.code() {
        Some(c) => c,
        None => {
            use std::os::unix::process::ExitStatusExt;
            128 + status.signal().unwrap_or(0)
        }
    };
    if code == 0 && tap.failed.load(Ordering::Relaxed) {
        // The command succeeded but some of its signals did not reach the mailbox: never hide
        // that behind a success.
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}
