//! Goblin signal files: `worktrees/{ISSUE_ID}/.goblin/<name>`, and the stage machine they drive.
//!
//! See `spec/goblin.md`. Writes go through the same atomic-write primitive as the mailbox
//! (staged as a dot-file beside the target, fsynced, renamed, directory fsynced).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use chrono::Utc;
use serde_json::{Map, Value, json};

use crate::atomic::{self, Clobber};
use crate::clock::{self, DEFAULT_MAX_FILE_SIZE, Precision};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{Io, IoOptions, ReadOutcome};

mod signal;
mod stage;
mod watch;

pub use signal::{GoblinSignal, Payload, parse_payload};
pub use stage::{MAX_RETRIES, PipelineState, Stage, next_stage};
use watch::PendingTransition;
pub use watch::{Event, Step, Watch};

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

const STATE_FILE: &str = ".sigbox-state.json";
/// The lock a watch holds for as long as it runs (an exclusive `flock`), holding who it is.
const WATCH_LOCK: &str = ".sigbox-watch.lock";
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
        // Everything below the worktree is reached through its descriptor, never through a
        // symlink (`.goblin/.consumed` and `.goblin/.stale` included).
        let io = Io::new(io);
        io.set_root(worktree)?;
        let g = Goblin {
            dir,
            io,
            settle: Duration::from_secs(1),
            max_size: DEFAULT_MAX_FILE_SIZE,
        };
        if !g.dir.is_dir() {
            g.io.create_dir_durable(&g.dir)?;
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
        self.io.create_dir_durable(&sub)?;
        let src = self.dir.join(signal.name());
        let ts = Utc::now().format("%Y%m%dT%H%M%S%.6fZ");
        let dest = sub.join(format!("{}.{ts}", signal.name()));
        // By rename everywhere: the new stage is saved before the signal is moved aside, so
        // a power loss that loses the move loses nothing (and a kill leaves no second link).
        match atomic::claim_by_rename(&self.io, &src, &dest, || Ok(()))? {
            atomic::Claimed::Won(()) => Ok(Some(dest)),
            _ => Ok(None),
        }
    }

    /// The persisted pipeline state, if any.
    pub fn state(&self) -> Option<PipelineState> {
        self.saved().map(|(st, _)| st)
    }

    /// The saved state, and the transition saved with it whose effects may not all have
    /// happened (see [`Goblin::step`]).
    fn saved(&self) -> Option<(PipelineState, Option<PendingTransition>)> {
        let bytes = match self
            .io
            .read_untrusted(&self.dir.join(STATE_FILE), self.max_size)
        {
            Ok(crate::io::ReadOutcome::Bytes(b, _)) => b,
            _ => return None,
        };
        let v: Value = serde_json::from_slice(&bytes).ok()?;
        let st = PipelineState {
            stage: Stage::parse(v.get("stage")?.as_str()?)?,
            retries: u32::try_from(v.get("retries")?.as_u64()?).ok()?,
        };
        let pending = v.get("pending").and_then(|p| {
            Some(PendingTransition {
                signal: GoblinSignal::parse(p.get("signal")?.as_str()?)?,
                from: Stage::parse(p.get("from")?.as_str()?)?,
                payload: match p.get("payload")? {
                    Value::Null => Payload::Empty,
                    Value::Object(m) => Payload::Json(m.clone()),
                    _ => return None,
                },
            })
        });
        Some((st, pending))
    }

    /// Persists the pipeline state (atomically).
    pub fn save_state(&self, st: PipelineState) -> Result<()> {
        self.write_state(st, None)
    }

    /// Persists the state, with the transition into it while its effects are under way.
    fn write_state(&self, st: PipelineState, pending: Option<&PendingTransition>) -> Result<()> {
        let mut body = json!({"stage": st.stage.as_str(), "retries": st.retries, "updated_at": clock::now_rfc3339(Precision::Secs)});
        if let Some(p) = pending {
            body["pending"] = json!({
                "signal": p.signal.name(),
                "from": p.from.as_str(),
                "payload": p.payload.to_json(),
            });
        }
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

    /// Takes the worktree's watch lock (an exclusive `flock` on `.goblin/.sigbox-watch.lock`,
    /// released when the returned file is closed, so also when its process dies) and writes
    /// who holds it into it: `{"holder","pid","started_at"}`, `holder` being `what` (`watch`
    /// or `clean`). Refused ([`ErrorKind::Conflict`], naming the holder) while another process
    /// holds it: two watches of one worktree would both take each transition. `None` where
    /// the filesystem has no locks (a warning is logged).
    fn lock_watch(&self, what: &str) -> Result<Option<std::fs::File>> {
        use std::io::{Read, Seek, Write};
        let path = self.dir.join(WATCH_LOCK);
        let mut file = self.io.open_lock_rw(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                // Who holds it: written just after it took the lock, so a watch started at the
                // same instant gives it a moment to say.
                let read = || {
                    let mut held = String::new();
                    (&file).seek(std::io::SeekFrom::Start(0)).ok()?;
                    (&file).take(4096).read_to_string(&mut held).ok()?;
                    serde_json::from_str::<Value>(&held).ok()
                };
                let mut holder = read();
                for _ in 0..50 {
                    if holder.is_some() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    holder = read();
                }
                let what = holder
                    .as_ref()
                    .and_then(|h| h.get("holder")?.as_str())
                    .unwrap_or("watch")
                    .escape_debug()
                    .to_string();
                let who = match holder.as_ref().and_then(|h| h.get("pid")?.as_u64()) {
                    Some(pid) => format!(
                        "pid {pid}, started {}",
                        holder
                            .as_ref()
                            .and_then(|h| h.get("started_at")?.as_str())
                            .unwrap_or("at an unknown time")
                            .escape_debug()
                    ),
                    None => "starting, pid not written yet".to_string(),
                };
                return Err(Error::new(
                    ErrorKind::Conflict,
                    Some(&self.dir),
                    format!(
                        "another goblin {what} ({who}) is at work on this worktree (it holds \
                         {WATCH_LOCK}): one watch per worktree, so that each transition is \
                         taken and reported once, and no clean under it; stop that {what}, or \
                         let it be the one"
                    ),
                ));
            }
            Err(std::fs::TryLockError::Error(e)) if crate::sys::is_transient(&e) => {
                return Err(Error::io(&path, "cannot lock", e));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                // No locks on this filesystem (some network filesystems): the watch runs, and
                // two started at once could both take a transition.
                tracing::warn!(file = %path.display(), error = %e,
                    "cannot lock the worktree for this watch: make sure no other goblin watch \
                     runs on it");
                return Ok(None);
            }
        }
        // Who holds it, for whoever finds it taken. Not durable, and needs not be: the lock
        // itself does not survive the process.
        let me = json!({"holder": what, "pid": std::process::id(),
                        "started_at": clock::now_rfc3339(Precision::Secs)});
        let written = file
            .set_len(0)
            .and_then(|()| file.write_all(format!("{me}\n").as_bytes()));
        if let Err(e) = written {
            tracing::debug!(file = %path.display(), error = %e, "cannot write the watch lock's holder");
        }
        Ok(Some(file))
    }

    /// The newest `.consumed/` copy of `signal`.
    fn last_consumed(&self, signal: GoblinSignal) -> Result<Option<PathBuf>> {
        let dir = self.dir.join(CONSUMED_DIR);
        let prefix = format!("{}.", signal.name());
        let newest = self
            .io
            .list(&dir, true)?
            .into_iter()
            .filter_map(|e| e.name.into_string().ok())
            .filter(|n| n.starts_with(&prefix))
            .max();
        Ok(newest.map(|n| dir.join(n)))
    }

    /// Removes the signal files, the set-aside history, staging leftovers, the state and the
    /// watch lock: what upstream does when a pipeline completes or is cancelled. Returns what it
    /// removed. Refused ([`ErrorKind::Conflict`], naming the holder) while a watch runs on the
    /// worktree: its pipeline is neither complete nor cancelled.
    pub fn clean(&self) -> Result<Vec<PathBuf>> {
        // Held to the end, and the lock file removed last: a watch started meanwhile is
        // refused, one started after finds nothing of this pipeline left.
        let lock = self.lock_watch("clean")?;
        let mut removed = Vec::new();
        for signal in GoblinSignal::ALL {
            let p = self.dir.join(signal.name());
            if self.io.remove_emptied(&p)? {
                removed.push(p);
            }
        }
        for sub in [CONSUMED_DIR, STALE_DIR] {
            let d = self.dir.join(sub);
            let before = removed.len();
            for e in self.io.list(&d, true)? {
                let p = d.join(&e.name);
                if self.io.remove_emptied(&p)? {
                    removed.push(p);
                }
            }
            // Durable before their inodes are used again (spec/mailbox.md §9.1).
            if removed.len() > before {
                self.io.sync_dir(&d)?;
            }
        }
        for e in self.io.list(&self.dir, false)? {
            let n = e.name.to_string_lossy();
            if n.starts_with('.') && n.contains(".tmp.") || n == STATE_FILE {
                let p = self.dir.join(&e.name);
                if self.io.remove_emptied(&p)? {
                    removed.push(p);
                }
            }
        }
        let p = self.dir.join(WATCH_LOCK);
        if self.io.remove_emptied(&p)? {
            removed.push(p);
        }
        drop(lock);
        self.io.sync_dir(&self.dir)?;
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use GoblinSignal::*;

    /// Writes `signal` empty, last modified `secs` after the epoch (in the past, so settled).
    fn write_at(g: &Goblin, signal: GoblinSignal, secs: u64) {
        let p = g.write(signal, None).unwrap();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let f = std::fs::File::options().write(true).open(p).unwrap();
        f.set_modified(t).unwrap();
    }

    fn step(g: &Goblin, watch: &mut Watch) -> (Step, Vec<Event>) {
        let mut events = Vec::new();
        let step = g
            .step(watch, |e| {
                events.push(e);
                Ok::<_, Error>(())
            })
            .unwrap();
        (step, events)
    }

    fn kinds(events: &[Event]) -> Vec<String> {
        let kind = |e: &Event| e.to_json()["event"].as_str().unwrap().to_string();
        events.iter().map(kind).collect()
    }

    /// A fast step: the builder wrote `build-complete`, then the reviewer `review-approved`,
    /// before the watcher looked. The review signal is the next transition's, not stale.
    #[test]
    fn a_next_stage_signal_written_after_the_winner_is_kept_for_the_next_step() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = Goblin::open(dir.path()).unwrap();
        g.settle(Duration::ZERO);
        let mut watch = g.start_watch(Some(Stage::Build), None).unwrap();
        write_at(&g, BuildComplete, 1_700_000_000);
        write_at(&g, ReviewApproved, 1_700_000_001);
        // One for the next stage written before the build finished is stale.
        write_at(&g, ReviewChangesRequested, 1_600_000_000);
        let (done, events) = step(&g, &mut watch);
        assert_eq!(done, Step::Advanced);
        assert!(!kinds(&events).is_empty());
        assert_eq!(watch.state().stage, Stage::Review);
        assert!(g.dir().join(ReviewApproved.name()).exists(), "kept");
        assert!(
            !g.dir().join(ReviewChangesRequested.name()).exists(),
            "stale"
        );
        let (done, events) = step(&g, &mut watch);
        assert_eq!(done, Step::Advanced, "{events:?}");
        assert_eq!(watch.state().stage, Stage::Test);
    }

    #[test]
    fn the_signal_written_last_wins_and_the_others_are_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = Goblin::open(dir.path()).unwrap();
        g.settle(Duration::ZERO);
        let mut watch = g.start_watch(Some(Stage::Review), None).unwrap();
        write_at(&g, ReviewChangesRequested, 1_700_000_000);
        write_at(&g, ReviewApproved, 1_600_000_000);
        write_at(&g, ScopeComplete, 1_650_000_000);
        let (done, events) = step(&g, &mut watch);
        assert_eq!(done, Step::Advanced);
        assert_eq!(
            kinds(&events),
            ["unexpected", "conflict", "stale", "transition"]
        );
        let Event::Conflict {
            signal, moved_to, ..
        } = &events[1]
        else {
            panic!("{events:?}")
        };
        assert_eq!(*signal, ReviewApproved);
        assert!(
            moved_to
                .as_ref()
                .unwrap()
                .starts_with(g.dir().join(".stale"))
        );
        let Event::Transition {
            signal,
            to,
            consumed,
            at,
            ..
        } = &events[3]
        else {
            panic!("{events:?}")
        };
        assert_eq!((*signal, *to), (ReviewChangesRequested, Stage::Build));
        assert!(
            consumed
                .as_ref()
                .unwrap()
                .starts_with(g.dir().join(".consumed"))
        );
        assert_eq!(at.len(), "2024-01-15T10:30:00.000Z".len(), "{at}");
        let now = PipelineState {
            stage: Stage::Build,
            retries: 1,
        };
        assert_eq!(watch.state(), now);
        assert_eq!(g.state(), Some(now), "saved");
        assert!(g.scan().unwrap().is_empty(), "nothing left to fire");
    }

    #[test]
    fn a_file_that_cannot_fire_is_reported_once_and_left_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = Goblin::open(dir.path()).unwrap();
        g.settle(Duration::ZERO);
        let mut watch = g.start_watch(None, None).unwrap();
        assert_eq!(g.state().map(|s| s.stage), Some(Stage::Scope));
        write_at(&g, TestPassed, 1_700_000_000);
        let (first, events) = step(&g, &mut watch);
        assert_eq!(first, Step::Waiting { next_check: None });
        assert_eq!(kinds(&events), ["unexpected"]);
        let (_, again) = step(&g, &mut watch);
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(g.scan().unwrap().len(), 1);
    }
}
