//! `sigbox tap`: runs a command, passes its output through, and sends the stream signals in it
//! to the mailbox by the broker's table (`sigbox::tap`, spec/streams.md).

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use sigbox::flux::{FluxEvent, FluxParser};
use sigbox::pilot::{PilotEvent, PilotParser};
use sigbox::{Mailbox, NewSignal, Target, tap};

/// Shared state of the two pump threads.
struct Tap {
    mailbox: Mailbox,
    from: String,
    to: Target,
    progress_bar: bool,
    stderr: Mutex<()>,
    failed: AtomicBool,
    progress: Mutex<Option<(i64, String)>>,
}

impl Tap {
    /// Sends a mapped stream signal to `to`, from `from`.
    fn send(&self, mut s: NewSignal) {
        s.target(self.to.clone()).from(self.from.clone());
        if let Err(e) = self.mailbox.send(&s) {
            self.failed.store(true, Ordering::Relaxed);
            let _g = self.stderr.lock();
            let _ = writeln!(
                std::io::stderr(),
                "sigbox: tap: cannot send a mailbox signal: {e}"
            );
        }
    }

    fn draw_bar(&self, err: &mut std::io::StderrLock<'_>) {
        if let Some((p, phase)) = &*self.progress.lock().unwrap_or_else(|e| e.into_inner()) {
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
        let _g = self.stderr.lock();
        if is_stderr || self.progress_bar {
            let mut err = std::io::stderr().lock();
            if self.progress_bar {
                let _ = err.write_all(b"\r\x1b[2K");
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
        if self.progress_bar && chunk.ends_with(b"\n") {
            self.draw_bar(&mut std::io::stderr().lock());
        }
    }

    fn handle(&self, flux_events: Vec<FluxEvent>, pilot_events: Vec<PilotEvent>) {
        for e in flux_events {
            match e {
                FluxEvent::Signal(s) => self.send(tap::from_flux(&s)),
                other => tracing::warn!(event = %other.to_json(), "flux: not a valid signal"),
            }
        }
        for e in pilot_events {
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
                        let _g = self.stderr.lock();
                        self.draw_bar(&mut std::io::stderr().lock());
                    }
                    self.send(tap::from_pilot(&s));
                }
                PilotEvent::Warning { line, message } => {
                    tracing::warn!(line, message, "pilot: block skipped")
                }
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
        tap.pass_through(is_stderr, chunk);
        tap.handle(f.feed(chunk), p.feed(chunk));
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
) -> anyhow::Result<ExitCode> {
    let mailbox = Mailbox::open(root)?;
    let to = Target::parse(Some(to)).map_err(anyhow::Error::msg)?;
    let (program, args) = command.split_first().context("no command given after --")?;
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("{program}: cannot run"))?;
    let tap = Arc::new(Tap {
        mailbox,
        from: from.to_string(),
        to,
        progress_bar: std::io::stderr().is_terminal(),
        stderr: Mutex::new(()),
        failed: AtomicBool::new(false),
        progress: Mutex::new(None),
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
    let _ = t1.join();
    let _ = t2.join();
    if tap.progress_bar && tap.progress.lock().map(|p| p.is_some()).unwrap_or(false) {
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
