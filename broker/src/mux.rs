//! mux-ospec signal files: `{session}/.signals/<stage>.done` or `.fail`.
//!
//! See `spec/mux.md`. Paths are relative to the project root and may not leave it; writes go
//! through the same atomic-write primitive as the mailbox.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::atomic::{self, Clobber};
use crate::clock::{self, DEFAULT_MAX_FILE_SIZE, Precision};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{Io, IoOptions, ReadOutcome};
use crate::sys::EntryKind;

/// A signal's outcome: the file suffix follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MuxStatus {
    /// `.done`
    Success,
    /// `.fail`
    Fail,
}

impl MuxStatus {
    /// `success` or `fail`, as upstream writes it in the `key: value` form.
    pub fn as_str(self) -> &'static str {
        match self {
            MuxStatus::Success => "success",
            MuxStatus::Fail => "fail",
        }
    }

    /// The file suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            MuxStatus::Success => ".done",
            MuxStatus::Fail => ".fail",
        }
    }
}

/// The on-disk form of a written signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MuxFormat {
    /// The seed's signal-v1 JSON document.
    Json,
    /// Upstream `signal.py`'s `key: value` lines.
    Kv,
}

/// What to write in a signal.
#[derive(Clone, Debug, Default)]
pub struct MuxFields {
    /// The output artifact's path.
    pub path: Option<String>,
    /// Its size in bytes (taken from the file at `path` when absent and the file exists).
    pub size: Option<u64>,
    /// The error, for a failure.
    pub error: Option<String>,
    /// A trace id (default: the content of `<session>/.trace`).
    pub trace_id: Option<String>,
    /// A version.
    pub version: Option<String>,
    /// The previous signal.
    pub previous: Option<String>,
    /// Grade for review stages: PASS, WARN or FAIL.
    pub grade: Option<String>,
    /// Phase number.
    pub phase_num: Option<u64>,
    /// Duration in seconds.
    pub duration_seconds: Option<u64>,
    /// Produced artifacts.
    pub artifacts: Vec<String>,
}

/// Lexically resolves `rel` under `root`: refuses absolute paths and any `..` that would leave
/// the root, and refuses to pass through an existing symlink (which could lead anywhere).
pub fn resolve(root: &Path, rel: &Path) -> Result<PathBuf> {
    if rel.is_absolute() || rel.has_root() {
        return Err(Error::new(
            ErrorKind::PathEscape,
            Some(rel),
            "absolute path refused: mux paths are relative to the project root (tmp/ is \
             project-local, not /tmp)",
        ));
    }
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(Error::new(
                        ErrorKind::PathEscape,
                        Some(rel),
                        "path leaves the project root through `..`",
                    ));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(Error::new(
                    ErrorKind::PathEscape,
                    Some(rel),
                    "absolute path refused",
                ));
            }
        }
    }
    let mut out = root.to_path_buf();
    for p in parts {
        out.push(p);
        if std::fs::symlink_metadata(&out).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(Error::new(
                ErrorKind::PathEscape,
                Some(&out),
                "is a symlink: refusing to follow it (it could lead outside the project root)",
            ));
        }
    }
    Ok(out)
}

/// The file a signal for `arg` goes to: `.signals/` inserted when the parent is not
/// `.signals` (as upstream), and the suffix set by the status (an existing `.done`/`.fail`
/// suffix is replaced).
pub fn signal_file(root: &Path, arg: &Path, status: MuxStatus) -> Result<PathBuf> {
    let resolved = resolve(root, arg)?;
    let name = resolved
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::new(ErrorKind::InvalidName, Some(arg), "no file name"))?;
    let stem = name
        .strip_suffix(".done")
        .or_else(|| name.strip_suffix(".fail"))
        .unwrap_or(name);
    if stem.is_empty() || stem.starts_with('.') {
        return Err(Error::new(
            ErrorKind::InvalidName,
            Some(arg),
            "empty or hidden stage name",
        ));
    }
    // A stage name is one line of every reader's output (`verify.py` prints `<name>: <error>`):
    // a newline or another control character would forge lines there.
    if let Some(c) = stem.chars().find(|c| c.is_control()) {
        return Err(Error::new(
            ErrorKind::InvalidName,
            Some(arg),
            format!(
                "the stage name holds a control character (U+{:04X}): name stages with printable \
                 characters",
                c as u32
            ),
        ));
    }
    let parent = resolved.parent().unwrap_or(root);
    let dir = if parent.file_name().is_some_and(|n| n == ".signals") {
        parent.to_path_buf()
    } else {
        parent.join(".signals")
    };
    Ok(dir.join(format!("{stem}{}", status.suffix())))
}

/// Writes a signal file atomically and returns its path. Creates `.signals/` (and the
/// session directory) when missing. The file is replaced if it exists; the other status's file
/// for the same stage is left alone (a `.done` and a `.fail` can coexist; `check` counts both).
///
/// **Durability:** staged as `.<name>.tmp.<pid>` beside the target (as upstream), fsynced,
/// renamed, directory fsynced.
pub fn write_signal(
    root: &Path,
    arg: &Path,
    status: MuxStatus,
    fields: &MuxFields,
    format: MuxFormat,
) -> Result<PathBuf> {
    write_signal_with(root, arg, status, fields, format, &IoOptions::new())
}

/// Like [`write_signal`], with the seam's options: durability, and a hook that sees every
/// filesystem effect (for fault injection and crash tests).
pub fn write_signal_with(
    root: &Path,
    arg: &Path,
    status: MuxStatus,
    fields: &MuxFields,
    format: MuxFormat,
    io: &IoOptions,
) -> Result<PathBuf> {
    let io = Io::new(io);
    io.set_root(root)?;
    let file = signal_file(root, arg, status)?;
    let dir = file.parent().expect("signal files have a parent");
    io.create_dir_all_synced(dir, Some(root))?;
    let session = if dir.file_name().is_some_and(|n| n == ".signals") {
        dir.parent().unwrap_or(root)
    } else {
        dir
    };
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let created_at = clock::now_rfc3339(Precision::Secs);
    let trace_id = fields.trace_id.clone().or_else(|| {
        match io.read_untrusted(&session.join(".trace"), 4096).ok()? {
            ReadOutcome::Bytes(b, _) => Some(String::from_utf8_lossy(&b).trim().to_string()),
            _ => None,
        }
        .filter(|s| !s.is_empty())
    });
    // With a path, always a size, as upstream writes it: the artifact's, or 0 when it is
    // missing (upstream's readers sum sizes and expect the key).
    let size = fields.size.or_else(|| {
        let p = fields.path.as_ref()?;
        let measured = resolve(root, Path::new(p)).ok().and_then(|full| {
            io.stamp(&full)
                .ok()
                .flatten()
                .filter(|m| m.kind == EntryKind::File)
                .map(|m| m.size)
        });
        Some(measured.unwrap_or(0))
    });
    let signal = Rendered {
        fields,
        status,
        stem,
        created_at,
        trace_id,
        size,
    };
    let bytes = match format {
        MuxFormat::Kv => signal.kv(),
        MuxFormat::Json => signal.json(),
    };
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("signal");
    let stage = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    atomic::write_atomic(&io, &stage, &file, &bytes, Clobber::Yes)?;
    Ok(file)
}

/// A signal as it is about to be written: the caller's fields and what was resolved at write
/// time (the stage, the instant, the trace id and the size).
struct Rendered<'a> {
    fields: &'a MuxFields,
    status: MuxStatus,
    stem: &'a str,
    created_at: String,
    trace_id: Option<String>,
    size: Option<u64>,
}

impl Rendered<'_> {
    /// Upstream `signal.py`'s `key: value` lines.
    fn kv(&self) -> Vec<u8> {
        let Rendered {
            fields,
            status,
            created_at,
            trace_id,
            size,
            ..
        } = self;
        let mut s = String::new();
        let mut line = |k: &str, v: &str| {
            // One line per key: a newline in a value would forge another key. An empty value
            // is no value: `key:` alone is no `key: value` line, and the reader refuses it.
            let v = v.replace(['\n', '\r'], " ");
            if !v.trim().is_empty() {
                s.push_str(&format!("{k}: {v}\n"));
            }
        };
        if let Some(p) = &fields.path {
            line("path", p);
        }
        if let Some(n) = size {
            line("size", &n.to_string());
        }
        line("status", status.as_str());
        line("created_at", created_at);
        for (k, v) in [
            ("error", &fields.error),
            ("trace_id", trace_id),
            ("version", &fields.version),
            ("previous", &fields.previous),
            ("grade", &fields.grade),
        ] {
            if let Some(v) = v {
                line(k, v);
            }
        }
        s.into_bytes()
    }

    /// The signal-v1 JSON document, pretty-printed.
    fn json(&self) -> Vec<u8> {
        let Rendered {
            fields,
            status,
            stem,
            created_at,
            trace_id,
            size,
        } = self;
        let mut m = Map::new();
        m.insert("$schema".into(), json!("signal-v1.json"));
        m.insert("phase".into(), json!(stem));
        if let Some(n) = fields.phase_num {
            m.insert("phase_num".into(), json!(n));
        }
        let st = match status {
            MuxStatus::Success => "completed",
            MuxStatus::Fail => "failed",
        };
        m.insert("status".into(), json!(st));
        m.insert("timestamp".into(), json!(created_at));
        if let Some(d) = fields.duration_seconds {
            m.insert("duration_seconds".into(), json!(d));
        }
        let mut artifacts = fields.artifacts.clone();
        if artifacts.is_empty() {
            artifacts.extend(fields.path.clone());
        }
        m.insert("artifacts".into(), json!(artifacts));
        for (k, v) in [
            ("grade", fields.grade.as_ref().map(|g| json!(g))),
            ("path", fields.path.as_ref().map(|p| json!(p))),
            ("size", size.map(|n| json!(n))),
            ("error", fields.error.as_ref().map(|e| json!(e))),
            ("trace_id", trace_id.as_ref().map(|t| json!(t))),
            ("version", fields.version.as_ref().map(|v| json!(v))),
            ("previous", fields.previous.as_ref().map(|p| json!(p))),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), v);
            }
        }
        let mut b = serde_json::to_vec_pretty(&Value::Object(m)).expect("JSON serializes");
        b.push(b'\n');
        b
    }
}

/// A signal file as read back, from either form.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MuxRecord {
    /// The file name.
    pub name: String,
    /// The file.
    pub file: PathBuf,
    /// True for `.done`.
    pub done: bool,
    /// `path`.
    pub path: Option<String>,
    /// `size`.
    pub size: Option<u64>,
    /// `error`.
    pub error: Option<String>,
    /// `grade` (PASS, WARN, FAIL), when present.
    pub grade: Option<String>,
    /// Every field as read.
    pub fields: BTreeMap<String, Value>,
}

/// Parses a signal file: a JSON object, or `key: value` lines (split at the first `": "`, as
/// upstream). An empty file is a valid signal with no fields.
pub fn parse_record(bytes: &[u8]) -> std::result::Result<BTreeMap<String, Value>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let t = text.trim();
    if t.starts_with('{') {
        return match serde_json::from_str::<Value>(t) {
            Ok(Value::Object(m)) => Ok(m.into_iter().collect()),
            Ok(_) => Err("not a JSON object".into()),
            Err(e) => Err(format!("invalid JSON: {e}")),
        };
    }
    let mut out = BTreeMap::new();
    for line in t.lines() {
        if let Some((k, v)) = line.split_once(": ") {
            out.insert(k.trim().to_string(), Value::String(v.to_string()));
        } else if !line.trim().is_empty() {
            return Err(format!("line {line:?} is neither JSON nor `key: value`"));
        }
    }
    Ok(out)
}

/// Reads one signal file (no-follow, capped at 1 MiB).
pub fn read_record(file: &Path) -> std::result::Result<MuxRecord, String> {
    let io = Io::new(&IoOptions::new());
    let bytes = match io
        .read_untrusted(file, DEFAULT_MAX_FILE_SIZE)
        .map_err(|e| e.to_string())?
    {
        ReadOutcome::Bytes(b, _) => b,
        ReadOutcome::Gone => return Err("vanished while being read".into()),
        other => return Err(other.rejection().unwrap_or_default()),
    };
    let fields = parse_record(&bytes)?;
    let s = |k: &str| match fields.get(k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Null) | None => None,
        Some(v) => Some(v.to_string()),
    };
    let size = match fields.get("size") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(n.as_u64().ok_or("field `size` is not a byte count")?),
        Some(Value::String(v)) => Some(
            v.trim()
                .parse()
                .map_err(|_| format!("field `size` is not a byte count: {v:?}"))?,
        ),
        Some(v) => return Err(format!("field `size` is not a byte count: {v}")),
    };
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(MuxRecord {
        done: name.ends_with(".done"),
        name,
        file: file.to_path_buf(),
        path: s("path"),
        size,
        error: s("error"),
        grade: s("grade").map(|g| g.to_ascii_uppercase()),
        fields,
    })
}

/// The `.done` and `.fail` files of a session, as upstream finds them: with `signals_dir`,
/// only there; otherwise `<session>/.signals/` plus any misplaced elsewhere under the session
/// (not under `.agents/` or `.signals/`), which are returned separately so callers can warn.
/// Symlinks are never followed.
#[derive(Debug, Default)]
pub struct Found {
    /// `.done` files, sorted.
    pub done: Vec<PathBuf>,
    /// `.fail` files, sorted.
    pub fail: Vec<PathBuf>,
    /// Signal files found outside `.signals/`.
    pub misplaced: Vec<PathBuf>,
    /// Entries named as signal files (`.done`, `.fail`) in `.signals/` that are not regular
    /// files (a FIFO, a directory, a symlink): never read or counted, and said, with what
    /// they are.
    pub refused: Vec<(PathBuf, &'static str)>,
}

/// Finds a session's signal files (see [`Found`]). A `.signals` that is a symlink, a file or
/// anything but a real directory is refused by name ([`ErrorKind::PathEscape`]), never read
/// as an empty one.
pub fn find(session: &Path, signals_dir: Option<&Path>) -> Result<Found> {
    let mut found = Found::default();
    let add = |p: PathBuf, misplaced: bool, found: &mut Found| {
        let n = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if n.starts_with('.') {
            return; // a write in progress
        }
        if n.ends_with(".done") {
            found.done.push(p.clone());
        } else if n.ends_with(".fail") {
            found.fail.push(p.clone());
        } else {
            return;
        }
        if misplaced {
            found.misplaced.push(p);
        }
    };
    // Everything below the directory searched is listed through its descriptor: a symlinked
    // `.signals/` (or any directory below) is not followed, and lists as nothing.
    let io = Io::new(&IoOptions::new());
    if io.set_root(signals_dir.unwrap_or(session)).is_err() {
        return Ok(found);
    }
    if signals_dir.is_none() {
        let dir = session.join(".signals");
        if let Some(s) = io.stamp(&dir)?
            && s.kind != EntryKind::Dir
        {
            return Err(crate::io::refused_dir(&dir, s.kind.describe()));
        }
    }
    let list = |d: &Path| -> Vec<(PathBuf, EntryKind)> {
        io.list(d, true)
            .unwrap_or_default()
            .into_iter()
            .map(|e| (d.join(&e.name), e.kind))
            .collect()
    };
    let refuse = |p: PathBuf, kind: EntryKind, found: &mut Found| {
        let n = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !n.starts_with('.') && (n.ends_with(".done") || n.ends_with(".fail")) {
            found.refused.push((p, kind.describe()));
        }
    };
    match signals_dir {
        Some(d) => {
            for (p, kind) in list(d) {
                if kind == EntryKind::File {
                    add(p, false, &mut found);
                } else {
                    refuse(p, kind, &mut found);
                }
            }
        }
        None => {
            for (p, kind) in list(&session.join(".signals")) {
                if kind == EntryKind::File {
                    add(p, false, &mut found);
                } else {
                    refuse(p, kind, &mut found);
                }
            }
            let mut stack = vec![session.to_path_buf()];
            while let Some(d) = stack.pop() {
                for (p, kind) in list(&d) {
                    let name = p.file_name().unwrap_or_default();
                    if kind == EntryKind::Dir {
                        if name != ".signals" && name != ".agents" {
                            stack.push(p);
                        }
                    } else if kind == EntryKind::File {
                        add(p, true, &mut found);
                    }
                }
            }
        }
    }
    found.done.sort();
    found.fail.sort();
    found.refused.sort();
    Ok(found)
}

/// What `check` reports (upstream's JSON, plus what `--require-pass` adds).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckReport {
    /// `.done` files.
    pub complete: usize,
    /// `.fail` files (and, with `require_pass`, `.done` files whose grade is not PASS).
    pub failed: usize,
    /// The expected count.
    pub expected: usize,
    /// `complete`, `partial`, `incomplete`, or `timeout`.
    pub status: &'static str,
    /// With `require_pass`: `.done` files graded WARN or FAIL, or unreadable.
    pub not_passed: Vec<String>,
}

/// Counts a session's signals: `complete` when `complete + failed >= expected` and nothing
/// failed, `partial` when enough arrived but some failed, `incomplete` otherwise. With
/// `require_pass`, a `.done` whose grade is present and not PASS (or which cannot be read)
/// counts as failed: only PASS proceeds.
pub fn check(found: &Found, expected: usize, require_pass: bool) -> CheckReport {
    let mut not_passed = Vec::new();
    if require_pass {
        for f in &found.done {
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            match read_record(f) {
                Ok(r) if r.grade.as_deref().is_none_or(|g| g == "PASS") => {}
                Ok(r) => not_passed.push(format!("{name}: grade {}", r.grade.unwrap_or_default())),
                Err(e) => not_passed.push(format!("{name}: {e}")),
            }
        }
    }
    let complete = found.done.len() - not_passed.len();
    let failed = found.fail.len() + not_passed.len();
    let status = if complete + failed >= expected {
        if failed == 0 { "complete" } else { "partial" }
    } else {
        "incomplete"
    };
    CheckReport {
        complete,
        failed,
        expected,
        status,
        not_passed,
    }
}

/// The upstream JSON of a check report.
pub fn check_json(r: &CheckReport) -> Value {
    let mut v = json!({
        "complete": r.complete,
        "failed": r.failed,
        "expected": r.expected,
        "status": r.status,
        "checked_at": clock::now_rfc3339(Precision::Secs),
    });
    if !r.not_passed.is_empty() {
        v["not_passed"] = json!(r.not_passed);
    }
    v
}
