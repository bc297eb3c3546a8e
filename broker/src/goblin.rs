//! Goblin signal files: `worktrees/{ISSUE_ID}/.goblin/<name>`, and the stage machine they drive.
//!
//! See `spec/goblin.md`. Writes go through the same atomic-write primitive as the mailbox
//! (staged as a dot-file beside the target, fsynced, renamed, directory fsynced).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use crate::atomic::{self, Clobber};
use crate::clock::{self, DEFAULT_MAX_FILE_SIZE, Precision};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{Io, IoOptions, ReadOutcome};

/// The six Goblin signals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GoblinSignal {
    /// Written by the scoper; SCOPE → BUILD.
    ScopeComplete,
    /// Written by the builder; BUILD → REVIEW.
    BuildComplete,
    /// Written by the reviewer; REVIEW → TEST.
    ReviewApproved,
    /// Written by the reviewer; REVIEW → BUILD (a retry).
    ReviewChangesRequested,
    /// Written by the tester; TEST → DONE.
    TestPassed,
    /// Written by the tester; TEST → REVIEW (a retry).
    TestFailed,
}

/// The type a documented field must have.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Timestamp,
    Str,
    Count,
    Strings,
    Issues,
}

impl GoblinSignal {
    /// All six, in pipeline order.
    pub const ALL: [GoblinSignal; 6] = [
        GoblinSignal::ScopeComplete,
        GoblinSignal::BuildComplete,
        GoblinSignal::ReviewApproved,
        GoblinSignal::ReviewChangesRequested,
        GoblinSignal::TestPassed,
        GoblinSignal::TestFailed,
    ];

    /// The file name.
    pub fn name(self) -> &'static str {
        match self {
            GoblinSignal::ScopeComplete => "scope-complete",
            GoblinSignal::BuildComplete => "build-complete",
            GoblinSignal::ReviewApproved => "review-approved",
            GoblinSignal::ReviewChangesRequested => "review-changes-requested",
            GoblinSignal::TestPassed => "test-passed",
            GoblinSignal::TestFailed => "test-failed",
        }
    }

    /// Parses a file name; `None` for anything but the six names.
    pub fn parse(name: &str) -> Option<GoblinSignal> {
        GoblinSignal::ALL.into_iter().find(|s| s.name() == name)
    }

    fn fields(self) -> &'static [(&'static str, Kind)] {
        use Kind::*;
        match self {
            GoblinSignal::ScopeComplete => {
                &[("completed_at", Timestamp), ("scope_result_hash", Str)]
            }
            GoblinSignal::BuildComplete => &[
                ("completed_at", Timestamp),
                ("commits", Count),
                ("files_changed", Count),
                ("lines_added", Count),
                ("lines_removed", Count),
            ],
            GoblinSignal::ReviewApproved => &[
                ("completed_at", Timestamp),
                ("critical_issues", Count),
                ("informational_issues", Count),
                ("auto_fixes", Count),
            ],
            GoblinSignal::ReviewChangesRequested => &[
                ("completed_at", Timestamp),
                ("issues", Issues),
                ("summary", Str),
            ],
            GoblinSignal::TestPassed => &[
                ("completed_at", Timestamp),
                ("qa_steps_total", Count),
                ("qa_steps_passed", Count),
                ("bugs_found", Count),
                ("bugs_fixed", Count),
                ("screenshots", Strings),
            ],
            GoblinSignal::TestFailed => &[
                ("completed_at", Timestamp),
                ("failing_steps", Strings),
                ("reason", Str),
                ("attempts", Count),
                ("screenshots", Strings),
            ],
        }
    }

    /// Checks a JSON body against this signal's documented fields (unknown fields are fine).
    /// The error names the field and what it should be.
    pub fn validate(self, body: &Map<String, Value>) -> std::result::Result<(), String> {
        for (field, kind) in self.fields() {
            let Some(v) = body.get(*field) else { continue };
            let ok = match kind {
                Kind::Timestamp => v
                    .as_str()
                    .is_some_and(|s| DateTime::parse_from_rfc3339(s).is_ok()),
                Kind::Str => v.is_string(),
                Kind::Count => v.as_u64().is_some(),
                Kind::Strings => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
                Kind::Issues => v.as_array().is_some_and(|a| a.iter().all(valid_issue)),
            };
            if !ok {
                let want = match kind {
                    Kind::Timestamp => "an ISO-8601 instant such as 2024-01-15T10:30:00Z",
                    Kind::Str => "a string",
                    Kind::Count => "a non-negative integer",
                    Kind::Strings => "an array of strings",
                    Kind::Issues => {
                        "an array of issues {type, category, file, line, fixed, description}"
                    }
                };
                return Err(format!(
                    "{}: field `{field}` must be {want}, got {v}",
                    self.name()
                ));
            }
        }
        Ok(())
    }
}

fn valid_issue(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    let s = |k: &str| o.get(k).is_none_or(Value::is_string);
    s("type")
        && s("category")
        && s("file")
        && s("description")
        && o.get("line").is_none_or(|l| l.as_u64().is_some())
        && o.get("fixed").is_none_or(Value::is_boolean)
}

/// Pipeline stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Scoping.
    Scope,
    /// Building.
    Build,
    /// Reviewing.
    Review,
    /// Testing.
    Test,
    /// Finished successfully.
    Done,
    /// Gave up after too many retries.
    Failed,
}

impl Stage {
    /// The upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Scope => "SCOPE",
            Stage::Build => "BUILD",
            Stage::Review => "REVIEW",
            Stage::Test => "TEST",
            Stage::Done => "DONE",
            Stage::Failed => "FAILED",
        }
    }

    /// Parses a stage name, case-insensitively.
    pub fn parse(s: &str) -> Option<Stage> {
        [
            Stage::Scope,
            Stage::Build,
            Stage::Review,
            Stage::Test,
            Stage::Done,
            Stage::Failed,
        ]
        .into_iter()
        .find(|st| st.as_str().eq_ignore_ascii_case(s.trim()))
    }

    /// True for DONE and FAILED.
    pub fn is_terminal(self) -> bool {
        matches!(self, Stage::Done | Stage::Failed)
    }
}

/// Retries allowed before a pipeline fails (upstream's MAX_RETRIES).
pub const MAX_RETRIES: u32 = 3;

/// The stage machine: where `signal` takes a pipeline in `stage` that has retried `retries`
/// times. `None` when `signal` is not a transition of `stage`. A backward transition (changes
/// requested, tests failed) is a retry; the fourth one goes to FAILED instead.
pub fn next_stage(stage: Stage, signal: GoblinSignal, retries: u32) -> Option<(Stage, u32)> {
    use GoblinSignal::*;
    let (to, retry) = match (stage, signal) {
        (Stage::Scope, ScopeComplete) => (Stage::Build, false),
        (Stage::Build, BuildComplete) => (Stage::Review, false),
        (Stage::Review, ReviewApproved) => (Stage::Test, false),
        (Stage::Review, ReviewChangesRequested) => (Stage::Build, true),
        (Stage::Test, TestPassed) => (Stage::Done, false),
        (Stage::Test, TestFailed) => (Stage::Review, true),
        _ => return None,
    };
    if retry {
        let r = retries + 1;
        Some(if r > MAX_RETRIES {
            (Stage::Failed, r)
        } else {
            (to, r)
        })
    } else {
        Some((to, retries))
    }
}

/// What a signal file holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    /// An empty file: a valid signal, as written by `touch`.
    Empty,
    /// A JSON object.
    Json(Map<String, Value>),
}

impl Payload {
    /// The payload as JSON (`null` for an empty signal).
    pub fn to_json(&self) -> Value {
        match self {
            Payload::Empty => Value::Null,
            Payload::Json(m) => Value::Object(m.clone()),
        }
    }
}

/// One signal file as a scan saw it.
#[derive(Clone, Debug)]
pub struct Observed {
    /// Which signal.
    pub signal: GoblinSignal,
    /// Its path.
    pub path: PathBuf,
    /// Last modification, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// What it holds, or why it cannot be used yet.
    pub state: FileState,
}

/// The state of a signal file.
#[derive(Clone, Debug)]
pub enum FileState {
    /// Complete and valid.
    Ready(Payload),
    /// Empty or not (yet) parseable, and changed within the settle window: possibly still being
    /// written (`echo '{...}' > file` truncates before it writes). Look again at the instant.
    Settling(SystemTime),
    /// Unchanged for the settle window and still invalid.
    Invalid(String),
}

/// The persisted pipeline state (`.goblin/.sigbox-state.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineState {
    /// Current stage.
    pub stage: Stage,
    /// Retries so far.
    pub retries: u32,
}

const STATE_FILE: &str = ".sigbox-state.json";
const CONSUMED_DIR: &str = ".consumed";
const STALE_DIR: &str = ".stale";

/// A worktree's `.goblin/` directory.
pub struct Goblin {
    dir: PathBuf,
    io: Io,
    settle: Duration,
    max_size: u64,
}

impl std::fmt::Debug for Goblin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Goblin").field("dir", &self.dir).finish()
    }
}

impl Goblin {
    /// Opens the `.goblin/` directory of `worktree` (which must exist), creating `.goblin/` if
    /// needed. Settle window 1 s, size cap 1 MiB, durable writes.
    pub fn open(worktree: impl AsRef<Path>) -> Result<Goblin> {
        Goblin::open_with(worktree, &IoOptions::new())
    }

    /// Like [`Goblin::open`], with the seam's options: durability, and a hook that sees every
    /// filesystem effect (for fault injection and crash tests).
    pub fn open_with(worktree: impl AsRef<Path>, io: &IoOptions) -> Result<Goblin> {
        let worktree = worktree.as_ref();
        if !worktree.is_dir() {
            return Err(Error::new(
                ErrorKind::NotInitialized,
                Some(worktree),
                "worktree directory does not exist",
            ));
        }
        let dir = worktree.join(".goblin");
        if let Ok(m) = std::fs::symlink_metadata(&dir)
            && m.file_type().is_symlink()
        {
            return Err(Error::new(
                ErrorKind::NotRegularFile,
                Some(&dir),
                "is a symlink: refusing to follow it out of the worktree",
            ));
        }
        let g = Goblin {
            dir,
            io: Io::new(io),
            settle: Duration::from_secs(1),
            max_size: DEFAULT_MAX_FILE_SIZE,
        };
        if !g.dir.is_dir() && g.io.create_dir(&g.dir)? {
            g.io.sync_dir(worktree)?;
        }
        Ok(g)
    }

    /// Sets the settle window for empty or unparseable files. Default: 1 s.
    pub fn settle(&mut self, d: Duration) -> &mut Self {
        self.settle = d;
        self
    }

    /// The `.goblin/` directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `.goblin/<signal>` atomically: empty (as `touch`) for `None`, else the JSON body,
    /// validated, with `completed_at` filled in when absent. Replaces an existing file.
    ///
    /// **Durability:** staged as `.<name>.tmp.<pid>.<rand>`, fsynced, renamed, `.goblin/`
    /// fsynced: a reader never sees a partial file, and the signal survives a crash.
    pub fn write(&self, signal: GoblinSignal, body: Option<Map<String, Value>>) -> Result<PathBuf> {
        let path = self.dir.join(signal.name());
        let bytes = match body {
            None => Vec::new(),
            Some(mut m) => {
                m.entry("completed_at")
                    .or_insert_with(|| json!(clock::now_rfc3339(Precision::Secs)));
                signal
                    .validate(&m)
                    .map_err(|r| Error::new(ErrorKind::InvalidSignal, Some(&path), r))?;
                let mut b = serde_json::to_vec_pretty(&Value::Object(m)).expect("JSON serializes");
                b.push(b'\n');
                b
            }
        };
        let u = uuid::Uuid::now_v7().simple().to_string();
        let stage = self.dir.join(format!(
            ".{}.tmp.{}.{}",
            signal.name(),
            std::process::id(),
            &u[20..]
        ));
        atomic::write_atomic(&self.io, &stage, &path, &bytes, Clobber::Yes)?;
        Ok(path)
    }

    /// Reads every signal file present.
    pub fn scan(&self) -> Result<Vec<Observed>> {
        let now = SystemTime::now();
        let mut out = Vec::new();
        for signal in GoblinSignal::ALL {
            let path = self.dir.join(signal.name());
            let Some(stamp) = self.io.stamp(&path)? else {
                continue;
            };
            let settling = clock::settling(&stamp, self.settle, now);
            let state = match self.io.read_untrusted(&path, self.max_size)? {
                ReadOutcome::Gone => continue,
                ReadOutcome::Bytes(bytes, _) => match (parse_payload(signal, &bytes), settling) {
                    // A complete JSON object can only come from a complete write: no prefix
                    // of a JSON object is itself one. Trust it at once.
                    (Ok(p @ Payload::Json(_)), _) => FileState::Ready(p),
                    (Ok(Payload::Empty) | Err(_), Some(until)) => FileState::Settling(until),
                    (Ok(p), None) => FileState::Ready(p),
                    (Err(reason), None) => FileState::Invalid(reason),
                },
                other => FileState::Invalid(other.rejection().unwrap_or_default()),
            };
            out.push(Observed {
                signal,
                path,
                mtime_ns: stamp.mtime_ns,
                state,
            });
        }
        Ok(out)
    }

    /// Moves a signal file into `.goblin/.consumed/` (after its transition) or `.goblin/.stale/`
    /// (written for an earlier stage), named `<name>.<timestamp>`. Nothing is deleted.
    pub fn set_aside(&self, signal: GoblinSignal, consumed: bool) -> Result<Option<PathBuf>> {
        let sub = self
            .dir
            .join(if consumed { CONSUMED_DIR } else { STALE_DIR });
        if self.io.create_dir(&sub)? {
            self.io.sync_dir(&self.dir)?;
        }
        let src = self.dir.join(signal.name());
        let ts = Utc::now().format("%Y%m%dT%H%M%S%.6fZ");
        let dest = sub.join(format!("{}.{ts}", signal.name()));
        match atomic::claim(&self.io, &src, &dest, || Ok(()))? {
            atomic::Claimed::Won(()) => Ok(Some(dest)),
            _ => Ok(None),
        }
    }

    /// The persisted pipeline state, if any.
    pub fn state(&self) -> Option<PipelineState> {
        let bytes = std::fs::read(self.dir.join(STATE_FILE)).ok()?;
        let v: Value = serde_json::from_slice(&bytes).ok()?;
        Some(PipelineState {
            stage: Stage::parse(v.get("stage")?.as_str()?)?,
            retries: u32::try_from(v.get("retries")?.as_u64()?).ok()?,
        })
    }

    /// Persists the pipeline state (atomically).
    pub fn save_state(&self, st: PipelineState) -> Result<()> {
        let body = json!({"stage": st.stage.as_str(), "retries": st.retries, "updated_at": clock::now_rfc3339(Precision::Secs)});
        let mut bytes = serde_json::to_vec(&body).expect("JSON serializes");
        bytes.push(b'\n');
        let stage = self.dir.join(format!(".state.tmp.{}", std::process::id()));
        atomic::write_atomic(
            &self.io,
            &stage,
            &self.dir.join(STATE_FILE),
            &bytes,
            Clobber::Yes,
        )?;
        Ok(())
    }

    /// Removes the signal files, the set-aside history, staging leftovers and the state: what
    /// upstream does when a pipeline completes or is cancelled. Returns what it removed.
    pub fn clean(&self) -> Result<Vec<PathBuf>> {
        let mut removed = Vec::new();
        for signal in GoblinSignal::ALL {
            let p = self.dir.join(signal.name());
            if self.io.remove(&p)? {
                removed.push(p);
            }
        }
        for sub in [CONSUMED_DIR, STALE_DIR] {
            let d = self.dir.join(sub);
            for e in self.io.list(&d, true)? {
                let p = d.join(&e.name);
                if self.io.remove(&p)? {
                    removed.push(p);
                }
            }
        }
        for e in self.io.list(&self.dir, false)? {
            let n = e.name.to_string_lossy();
            if n.starts_with('.') && n.contains(".tmp.") || n == STATE_FILE {
                let p = self.dir.join(&e.name);
                if self.io.remove(&p)? {
                    removed.push(p);
                }
            }
        }
        self.io.sync_dir(&self.dir)?;
        Ok(removed)
    }
}

/// Parses a Goblin file's bytes: empty (or only whitespace) is [`Payload::Empty`]; otherwise a
/// JSON object valid for `signal`.
pub fn parse_payload(signal: GoblinSignal, bytes: &[u8]) -> std::result::Result<Payload, String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Payload::Empty);
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => {
            signal.validate(&m)?;
            Ok(Payload::Json(m))
        }
        Ok(_) => Err(format!("{}: not a JSON object", signal.name())),
        Err(e) => Err(format!("{}: invalid JSON: {e}", signal.name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine() {
        use GoblinSignal::*;
        assert_eq!(
            next_stage(Stage::Scope, ScopeComplete, 0),
            Some((Stage::Build, 0))
        );
        assert_eq!(
            next_stage(Stage::Build, BuildComplete, 0),
            Some((Stage::Review, 0))
        );
        assert_eq!(
            next_stage(Stage::Review, ReviewApproved, 1),
            Some((Stage::Test, 1))
        );
        assert_eq!(
            next_stage(Stage::Review, ReviewChangesRequested, 0),
            Some((Stage::Build, 1))
        );
        assert_eq!(
            next_stage(Stage::Test, TestPassed, 2),
            Some((Stage::Done, 2))
        );
        assert_eq!(
            next_stage(Stage::Test, TestFailed, 2),
            Some((Stage::Review, 3))
        );
        assert_eq!(
            next_stage(Stage::Test, TestFailed, 3),
            Some((Stage::Failed, 4))
        );
        assert_eq!(next_stage(Stage::Build, ReviewApproved, 0), None);
        assert_eq!(next_stage(Stage::Done, TestPassed, 0), None);
    }

    #[test]
    fn payloads() {
        use GoblinSignal::*;
        assert_eq!(parse_payload(BuildComplete, b""), Ok(Payload::Empty));
        assert_eq!(parse_payload(BuildComplete, b" \n"), Ok(Payload::Empty));
        assert!(parse_payload(BuildComplete, br#"{"commits": 5}"#).is_ok());
        let e = parse_payload(BuildComplete, br#"{"commits": "five"}"#).unwrap_err();
        assert!(
            e.contains("`commits` must be a non-negative integer"),
            "{e}"
        );
        assert!(parse_payload(BuildComplete, br#"{"commits": 5"#).is_err());
        assert!(parse_payload(TestFailed, br#"{"failing_steps": ["QA-2", 5]}"#).is_err());
        let issues = br#"{"issues": [{"type": "critical", "line": 45, "fixed": false}]}"#;
        assert!(parse_payload(ReviewChangesRequested, issues).is_ok());
        let bad = br#"{"issues": [{"line": "45"}]}"#;
        assert!(parse_payload(ReviewChangesRequested, bad).is_err());
        assert!(parse_payload(ScopeComplete, br#"{"completed_at": "yesterday"}"#).is_err());
        assert!(
            parse_payload(ScopeComplete, br#"{"mine": [1, 2]}"#).is_ok(),
            "unknown kept"
        );
    }
}
