//! Stable output: one JSON object per line with `--json`, short aligned lines otherwise.

use std::io::{self, Write};

use serde_json::{Value, json};
use sigbox::{Signal, Target};

/// Writes lines to stdout; a closed pipe surfaces as an error that `main` treats as success.
pub(crate) struct Out {
    json: bool,
    stdout: io::StdoutLock<'static>,
}

impl Out {
    pub(crate) fn new(json: bool) -> Out {
        Out {
            json,
            stdout: io::stdout().lock(),
        }
    }

    pub(crate) fn json(&self) -> bool {
        self.json
    }

    /// Writes `value` as one JSON line (in JSON mode) or `human` (otherwise), its control
    /// characters escaped ([`escape`]).
    pub(crate) fn emit(&mut self, value: &Value, human: impl FnOnce() -> String) -> io::Result<()> {
        if self.json {
            serde_json::to_writer(&mut self.stdout, value)?;
            writeln!(self.stdout)
        } else {
            writeln!(self.stdout, "{}", escape(&human()))
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
        for line in human() {
            writeln!(self.stdout, "{}", escape(&line))?;
        }
        Ok(())
    }

    /// True with `--json`.
    pub(crate) fn is_json(&self) -> bool {
        self.json
    }

    /// Writes `bytes` as they are.
    pub(crate) fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stdout.write_all(bytes)
    }

    /// Writes a human line, its control characters escaped ([`escape`]).
    pub(crate) fn line(&mut self, s: &str) -> io::Result<()> {
        writeln!(self.stdout, "{}", escape(s))
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.stdout.flush()
    }
}

/// `s` with every control character but a tab escaped (`\n`, `\r`, `\u{1b}`): text from
/// senders (a message, a file name, a reason quoting either) never moves the cursor, clears
/// the screen or rings the bell of a person's terminal, and one record stays one line.
pub(crate) fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() && c != '\t') {
        return s.into();
    }
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
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
/// `message`, `created_at`, `from`, `iteration`, `redelivery` (0, or how many times it was
/// delivered again after a consumer died before handing it over), `path` (where the file was
/// when it was handed over), and `fields` (the whole body).
pub(crate) fn signal_json(s: &Signal) -> Value {
    json!({
        "id": s.id,
        "type": s.signal_type.as_str(),
        "target": target_json(&s.target),
        "message": s.message,
        "created_at": s.created_at.map(|t| t.with_timezone(&chrono::Utc).to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        "from": s.from,
        "iteration": s.iteration,
        "redelivery": s.redelivery(),
        "path": path_json(&s.path),
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
