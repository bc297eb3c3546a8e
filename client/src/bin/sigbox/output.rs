//! Stable output: one JSON object per line with `--json`, short aligned lines otherwise.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sigbox::{Signal, Target};

/// Writes lines to stdout; a closed pipe surfaces as an error that `main` treats as success.
pub(crate) struct Out {
    json: bool,
    stdout: io::StdoutLock<'static>,
    /// Set for a hand-over ([`Out::stop_when`]): lines are held here and written by
    /// [`Out::flush`], which a stop signal interrupts.
    held: Option<Held>,
    /// How many bytes of the last flush went out before it failed.
    cut: usize,
}

/// The lines of a hand-over not written yet, and the flag that interrupts their writing.
struct Held {
    lines: Vec<u8>,
    stop: Arc<AtomicBool>,
}

/// A flush that a stop signal interrupted ([`io::ErrorKind::Interrupted`]).
#[derive(Debug)]
pub(crate) struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped by a signal while writing to a reader that does not read")
    }
}

impl std::error::Error for Stopped {}

/// How long a flush waits on an output that takes nothing before it looks at its stop flag.
const STOP_LOOK: Duration = Duration::from_millis(100);

/// How long a flush goes on writing once the stop flag is set, to an output that keeps
/// taking bytes slowly.
const STOP_GRACE: Duration = Duration::from_millis(500);

/// The most written at once: a pipe that polls writable takes this much without blocking
/// (one page; `PIPE_BUF` on Linux).
const CHUNK: usize = 4096;

impl Out {
    pub(crate) fn new(json: bool) -> Out {
        Out {
            json,
            stdout: io::stdout().lock(),
            held: None,
            cut: 0,
        }
    }

    /// From now on, what is emitted is held until [`Out::flush`], and a flush blocked on an
    /// output that takes nothing (a reader that does not read) gives up once `stop` is set,
    /// with a [`Stopped`] error: a stop signal always ends a hand-over.
    pub(crate) fn stop_when(&mut self, stop: Arc<AtomicBool>) {
        self.held = Some(Held {
            lines: Vec::new(),
            stop,
        });
    }

    /// Where lines go: held for the next flush, or stdout.
    fn sink(&mut self) -> &mut dyn Write {
        match &mut self.held {
            Some(h) => &mut h.lines,
            None => &mut self.stdout,
        }
    }

    pub(crate) fn json(&self) -> bool {
        self.json
    }

    /// Writes `value` as one JSON line (in JSON mode) or `human` (otherwise), its control
    /// characters escaped ([`escape`]).
    pub(crate) fn emit(&mut self, value: &Value, human: impl FnOnce() -> String) -> io::Result<()> {
        let json = self.json;
        let sink = self.sink();
        if json {
            serde_json::to_writer(&mut *sink, value)?;
            writeln!(sink)
        } else {
            writeln!(sink, "{}", escape(&human()))
        }
    }

    /// As [`emit`](Self::emit), for a human form of several lines: each is escaped on its
    /// own, and they are written one per line.
    pub(crate) fn emit_lines(
        &mut self,
        value: &Value,
        human: impl FnOnce() -> Vec<String>,
    ) -> io::Result<()> {
        if self.json {
            return self.emit(value, String::new);
        }
        let sink = self.sink();
        for line in human() {
            writeln!(sink, "{}", escape(&line))?;
        }
        Ok(())
    }

    /// True with `--json`.
    pub(crate) fn is_json(&self) -> bool {
        self.json
    }

    /// Writes `bytes` as they are.
    pub(crate) fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.sink().write_all(bytes)
    }

    /// Writes a human line, its control characters escaped ([`escape`]).
    pub(crate) fn line(&mut self, s: &str) -> io::Result<()> {
        writeln!(self.sink(), "{}", escape(s))
    }

    /// Writes out what is held (or buffered). A flush interrupted by the stop flag fails
    /// with a [`Stopped`] error ([`io::ErrorKind::Interrupted`]); what it held is dropped
    /// however it fails, and [`Out::cut`] says how much of it went out first.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.cut = 0;
        self.stdout.flush()?;
        let Some(held) = &mut self.held else {
            return Ok(());
        };
        let lines = std::mem::take(&mut held.lines);
        write_until_stopped(&self.stdout, &lines, &held.stop).map_err(|(written, e)| {
            self.cut = written;
            e
        })
    }

    /// How many bytes of the last flush went out before it failed (0 after a flush that
    /// succeeded, or failed before writing anything: then nobody can have read any of it).
    pub(crate) fn cut(&self) -> usize {
        self.cut
    }
}

/// Writes `bytes` to `out`, waiting for it to take them (`poll`) in slices of [`STOP_LOOK`]:
/// once `stop` is set, an output that takes nothing within a slice, or that is still taking
/// bytes [`STOP_GRACE`] later, ends the write with a [`Stopped`] error. `write(2)` itself is
/// never left blocked on a full pipe: a chunk is written only once the output polls writable.
/// A failure comes with how many bytes went out before it.
fn write_until_stopped(
    out: impl AsFd,
    bytes: &[u8],
    stop: &AtomicBool,
) -> Result<(), (usize, io::Error)> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::io::Errno;
    let fd = out.as_fd();
    let look = Timespec {
        tv_sec: 0,
        tv_nsec: i64::from(STOP_LOOK.subsec_nanos()),
    };
    let stopped = || io::Error::new(io::ErrorKind::Interrupted, Stopped);
    let mut written = 0;
    let mut stopped_at: Option<Instant> = None;
    while written < bytes.len() {
        if stop.load(Ordering::SeqCst)
            && stopped_at.get_or_insert_with(Instant::now).elapsed() >= STOP_GRACE
        {
            return Err((written, stopped()));
        }
        let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
        match poll(&mut fds, Some(&look)) {
            // Nothing taken in a slice: a stop ends it now.
            Ok(0) | Err(Errno::INTR) => {
                if stop.load(Ordering::SeqCst) {
                    return Err((written, stopped()));
                }
                continue;
            }
            Ok(_) => {}
            Err(e) => return Err((written, e.into())),
        }
        // Writable, or an error (a reader gone): the write says which. A chunk ends at the
        // last line end it holds: a write of at most `PIPE_BUF` bytes to a pipe is atomic, so a
        // process killed between two writes leaves whole lines only (for lines that fit).
        let end = chunk_end(bytes, written);
        match rustix::io::write(fd, &bytes[written..end]) {
            Ok(n) => written += n,
            Err(Errno::INTR | Errno::AGAIN) => {}
            Err(e) => return Err((written, e.into())),
        }
    }
    Ok(())
}

/// Where the write starting at `from` ends: at most [`CHUNK`] bytes on, just after the last
/// newline in that span when there is one (else the span's end).
fn chunk_end(bytes: &[u8], from: usize) -> usize {
    let end = bytes.len().min(from + CHUNK);
    if end == bytes.len() {
        return end;
    }
    match bytes[from..end].iter().rposition(|&c| c == b'\n') {
        Some(i) => from + i + 1,
        None => end,
    }
}

/// `s` with every control character but a tab escaped (`\n`, `\r`, `\u{1b}`): text from
/// senders (a message, a file name, a reason quoting either) never moves the cursor, clears
/// the screen or rings the bell of a person's terminal, and one record stays one line.
pub(crate) fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    sigbox_client::logfmt::escape_controls(s)
}

/// A path as JSON: a string, with any bytes that are not UTF-8 replaced (U+FFFD), so that a
/// hostile file name can never stop the output.
pub(crate) fn path_json(p: &std::path::Path) -> Value {
    Value::String(p.to_string_lossy().into_owned())
}

pub(crate) fn target_json(t: &Target) -> Value {
    match t {
        Target::All => json!("ALL"),
        Target::None => Value::Null,
        Target::Agent(a) => json!(a),
    }
}

/// The JSON form of a delivered signal: `id`, `type` (upper case; STOP as ABORT), `target`,
/// `message`, `created_at` (with the offset it was written with), `from`, `iteration`,
/// `redelivery` (0, or how many times it was delivered again after a consumer died before
/// handing it over), `path` (where the file is once the delivery is acknowledged: its record
/// in `processed/`, or a broadcast's file in `inputs/`), and `fields` (the whole body).
pub(crate) fn signal_json(s: &Signal) -> Value {
    json!({
        "id": s.id,
        "type": s.signal_type.as_str(),
        "target": target_json(&s.target),
        "message": s.message,
        "created_at": s.created_at_rfc3339(),
        "from": s.from,
        "iteration": s.iteration,
        "redelivery": s.redelivery(),
        "path": path_json(s.acked_path()),
        "fields": Value::Object(s.fields.clone()),
    })
}

pub(crate) fn signal_human(s: &Signal) -> String {
    let again = match s.redelivery() {
        0 => String::new(),
        n => format!("  (delivered again: {n})"),
    };
    format!(
        "{:<7} {:<12} {}  {}{again}",
        s.signal_type.as_str(),
        s.target.to_string(),
        s.id,
        s.message.as_deref().unwrap_or("")
    )
}

/// An instant in nanoseconds since the epoch as RFC 3339 in UTC with microseconds, the form
/// of `created_at` in every `--json` output.
pub(crate) fn instant_json(ns_since_epoch: i128) -> Value {
    let secs = ns_since_epoch.div_euclid(1_000_000_000);
    let nanos = ns_since_epoch.rem_euclid(1_000_000_000);
    i64::try_from(secs)
        .ok()
        .and_then(|s| chrono::DateTime::from_timestamp(s, nanos as u32))
        .map_or(Value::Null, |t| {
            json!(t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        })
}

/// Milliseconds from `ns_since_epoch` to now (0 for an instant in the future).
pub(crate) fn age_ms(ns_since_epoch: i128) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    u64::try_from(((now - ns_since_epoch) / 1_000_000).max(0)).unwrap_or(u64::MAX)
}

/// A short age: `42s`, `5m`, `3h`, `2d`.
pub(crate) fn age(ns_since_epoch: i128) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let secs = ((now - ns_since_epoch) / 1_000_000_000).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Why stdout reaches nobody, when it does not: closed (the runtime reopens a closed stdout
/// on `/dev/null` before `main`, so it reads as `/dev/null` then) or `/dev/null` itself.
/// `None` for anything else: a terminal, a file, a pipe or a socket (a reader that has gone
/// shows when the hand-over's write fails).
pub(crate) fn reaches_nobody() -> Option<&'static str> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = match io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata())
    {
        Ok(m) => m,
        Err(_) => return Some("stdout is closed"),
    };
    let null = std::fs::metadata("/dev/null").ok()?;
    (meta.file_type().is_char_device() && meta.rdev() == null.rdev())
        .then_some("stdout is /dev/null (or was closed)")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every write of a flush ends at a line end (lines shorter than a chunk): a process
    /// killed between two writes leaves no torn line for its reader.
    #[test]
    fn a_flush_writes_whole_lines_only() {
        let (tx, rx) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let mut text = Vec::new();
        for i in 0..200 {
            text.extend_from_slice(
                format!("{{\"id\": \"{i}\", \"pad\": \"{}\"}}\n", "x".repeat(i % 97)).as_bytes(),
            );
        }
        assert!(text.len() > 3 * CHUNK);
        write_until_stopped(&tx, &text, &AtomicBool::new(false)).unwrap();
        drop(tx);
        let mut got = Vec::new();
        let mut buf = vec![0u8; 2 * CHUNK];
        while got.len() < text.len() {
            let n = rx.recv(&mut buf).unwrap();
            let write = &buf[..n];
            assert!(n <= CHUNK, "a write of {n} bytes");
            assert_eq!(write.last(), Some(&b'\n'), "a write ends mid-line");
            got.extend_from_slice(write);
        }
        assert_eq!(got, text);
    }
}
