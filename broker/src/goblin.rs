//! Goblin signal files: `worktrees/{ISSUE_ID}/.goblin/<name>`, and the stage machine they drive.
//!
//! See `spec/goblin.md`. Writes go through the same atomic-write primitive as the mailbox
//! (staged as a dot-file beside the target, fsynced, renamed, directory fsynced).

use std::collections::HashSet;
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

pub use signal::{GoblinSignal, Payload, parse_payload};
pub use stage::{MAX_RETRIES, PipelineState, Stage, next_stage};

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
        match atomic::claim(&self.io, &src, &dest, || Ok(()))? {
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

/// A running `watch` (spec/goblin.md, `watch`): the pipeline state it drives, and the file
/// versions it has reported, so that each is reported once.
#[derive(Clone, Debug)]
pub struct Watch {
    state: PipelineState,
    reported: HashSet<(GoblinSignal, i128, Report)>,
    /// A transition finished at start-up, reported by the first step.
    recovered: Option<Event>,
}

/// A transition saved with the new stage before its effects (moving the winner aside,
/// reporting it), so that a process killed in between does not leave the pipeline stuck: the
/// next start finishes it.
#[derive(Clone, Debug)]
struct PendingTransition {
    signal: GoblinSignal,
    from: Stage,
    payload: Payload,
}

/// What a file version was reported as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Report {
    Invalid,
    Unexpected,
}

impl Watch {
    /// A watch at `state` that has reported nothing yet. [`Goblin::start_watch`] picks the
    /// state as the spec says and saves it.
    pub fn new(state: PipelineState) -> Watch {
        Watch {
            state,
            reported: HashSet::new(),
            recovered: None,
        }
    }

    /// The current stage and retries.
    pub fn state(&self) -> PipelineState {
        self.state
    }

    /// True the first time this version of the file is reported as `what`.
    fn first_report(&mut self, o: &Observed, what: Report) -> bool {
        self.reported.insert((o.signal, o.mtime_ns, what))
    }
}

/// What a [`Goblin::step`] reports, as it happens. [`Event::to_json`] is its JSON line.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The stage advanced on `signal`, whose file was moved into `.consumed/`.
    Transition {
        /// The signal that fired.
        signal: GoblinSignal,
        /// The stage it left.
        from: Stage,
        /// The stage it entered.
        to: Stage,
        /// Retries after the transition.
        retries: u32,
        /// The signal's body.
        payload: Payload,
        /// Where its file went (`None`: it was gone already).
        consumed: Option<PathBuf>,
        /// When, RFC 3339 in UTC with milliseconds.
        at: String,
    },
    /// A ready signal with no transition from `stage`; left in place, reported once per version.
    Unexpected {
        /// The signal.
        signal: GoblinSignal,
        /// The current stage.
        stage: Stage,
        /// Its body.
        payload: Payload,
        /// When, RFC 3339 in UTC with milliseconds.
        at: String,
    },
    /// A signal file that settled and is still invalid; left in place, reported once per
    /// version.
    Invalid {
        /// The signal.
        signal: GoblinSignal,
        /// The current stage.
        stage: Stage,
        /// Why it is invalid.
        reason: String,
        /// When, RFC 3339 in UTC with milliseconds.
        at: String,
    },
    /// Another candidate for `stage` lost to `chosen`, written later, and was set aside.
    Conflict {
        /// The losing signal.
        signal: GoblinSignal,
        /// The stage both were candidates for.
        stage: Stage,
        /// The winner.
        chosen: GoblinSignal,
        /// Where the loser went in `.stale/` (`None`: it was gone already).
        moved_to: Option<PathBuf>,
        /// When, RFC 3339 in UTC with milliseconds.
        at: String,
    },
    /// A file written for an earlier stage, set aside as `stage` starts.
    Stale {
        /// The signal.
        signal: GoblinSignal,
        /// The stage that starts.
        stage: Stage,
        /// Where it went in `.stale/` (`None`: it was gone already).
        moved_to: Option<PathBuf>,
        /// When, RFC 3339 in UTC with milliseconds.
        at: String,
    },
}

impl Event {
    /// The event as `sigbox goblin watch` prints it: `{"event", ...}` with the fields of
    /// spec/goblin.md, `at` last.
    pub fn to_json(&self) -> Value {
        match self {
            Event::Transition {
                signal,
                from,
                to,
                retries,
                payload,
                consumed,
                at,
            } => json!({"event": "transition", "signal": signal.name(), "from": from.as_str(),
                        "to": to.as_str(), "retries": retries, "payload": payload.to_json(),
                        "consumed": consumed, "at": at}),
            Event::Unexpected {
                signal,
                stage,
                payload,
                at,
            } => json!({"event": "unexpected", "signal": signal.name(), "stage": stage.as_str(),
                        "payload": payload.to_json(),
                        "reason": format!("no transition from {} on {}", stage.as_str(), signal.name()),
                        "at": at}),
            Event::Invalid {
                signal,
                stage,
                reason,
                at,
            } => json!({"event": "invalid", "signal": signal.name(), "stage": stage.as_str(),
                        "reason": reason, "at": at}),
            Event::Conflict {
                signal,
                stage,
                chosen,
                moved_to,
                at,
            } => json!({"event": "conflict", "signal": signal.name(), "stage": stage.as_str(),
                        "chosen": chosen.name(), "moved_to": moved_to, "at": at}),
            Event::Stale {
                signal,
                stage,
                moved_to,
                at,
            } => json!({"event": "stale", "signal": signal.name(), "stage": stage.as_str(),
                        "moved_to": moved_to, "at": at}),
        }
    }
}

/// What one [`Goblin::step`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A transition happened and the new state is saved: step again at once.
    Advanced,
    /// Nothing could fire: step again when a file changes, or at `next_check`.
    Waiting {
        /// When the earliest settling file's window ends, if a file is settling.
        next_check: Option<SystemTime>,
    },
}

/// Now, as an event's `at`.
fn event_time() -> String {
    clock::now_rfc3339(Precision::Millis)
}

impl Goblin {
    /// Starts a watch. Its state is `stage` (with `retries`, else 0) when given, else the saved
    /// state (with its retries replaced by `retries` when given), else SCOPE with 0 retries;
    /// it is saved when it differs from the saved one.
    pub fn start_watch(&self, stage: Option<Stage>, retries: Option<u32>) -> Result<Watch> {
        let (saved, pending) = match self.saved() {
            Some((st, p)) => (Some(st), p),
            None => (None, None),
        };
        if let (Some(st), Some(p), None) = (saved, &pending, stage) {
            // A transition was saved and its process ended before it finished: finish it.
            let consumed = match self.set_aside(p.signal, true)? {
                Some(path) => Some(path),
                None => self.last_consumed(p.signal)?,
            };
            let mut watch = Watch::new(st);
            watch.recovered = Some(Event::Transition {
                signal: p.signal,
                from: p.from,
                to: st.stage,
                retries: st.retries,
                payload: p.payload.clone(),
                consumed,
                at: event_time(),
            });
            if let Some(r) = retries {
                watch.state.retries = r;
            }
            return Ok(watch);
        }
        let state = match stage {
            Some(stage) => PipelineState {
                stage,
                retries: retries.unwrap_or(0),
            },
            None => {
                let mut s = saved.unwrap_or(PipelineState {
                    stage: Stage::Scope,
                    retries: 0,
                });
                if let Some(r) = retries {
                    s.retries = r;
                }
                s
            }
        };
        if Some(state) != saved || pending.is_some() {
            self.save_state(state)?;
        }
        Ok(Watch::new(state))
    }

    /// One look under the watch rule (spec/goblin.md, `watch`). Reads the six files, reports
    /// each invalid or unexpected file version once, and, when ready signals have a transition
    /// from the current stage, takes it: the one written last (mtime, then name) wins; the
    /// other candidates are set aside as conflicts; the winner is moved into `.consumed/`;
    /// every other ready or invalid file is set aside as stale (settling ones are left alone);
    /// then the transition is reported and the new state saved, in that order.
    ///
    /// `emit` gets each event as it happens, between the moves; an error from it, or from a
    /// move, ends the step at that point.
    pub fn step<E: From<Error>>(
        &self,
        watch: &mut Watch,
        mut emit: impl FnMut(Event) -> std::result::Result<(), E>,
    ) -> std::result::Result<Step, E> {
        if let Some(event) = watch.recovered.take() {
            emit(event)?;
            self.save_state(watch.state)?;
        }
        let PipelineState { stage, retries } = watch.state;
        let mut next_check: Option<SystemTime> = None;
        let mut candidates = Vec::new();
        let mut others = Vec::new();
        for o in self.scan()? {
            match &o.state {
                FileState::Settling(t) => {
                    next_check = Some(next_check.map_or(*t, |n| n.min(*t)));
                }
                FileState::Invalid(reason) => {
                    if watch.first_report(&o, Report::Invalid) {
                        emit(Event::Invalid {
                            signal: o.signal,
                            stage,
                            reason: reason.clone(),
                            at: event_time(),
                        })?;
                    }
                    others.push(o);
                }
                FileState::Ready(p) => {
                    if next_stage(stage, o.signal, retries).is_some() {
                        candidates.push((o.clone(), p.clone()));
                    } else {
                        if watch.first_report(&o, Report::Unexpected) {
                            emit(Event::Unexpected {
                                signal: o.signal,
                                stage,
                                payload: p.clone(),
                                at: event_time(),
                            })?;
                        }
                        others.push(o);
                    }
                }
            }
        }
        if candidates.is_empty() {
            return Ok(Step::Waiting { next_check });
        }
        // Several signals for this stage at once (approved and changes requested, say): the one
        // written last wins; the others are set aside as stale and reported.
        candidates.sort_by_key(|a| (a.0.mtime_ns, a.0.signal));
        let (winner, payload) = candidates.pop().expect("not empty");
        let (to, retries) = next_stage(stage, winner.signal, retries).expect("a candidate");
        // The new stage first, with the transition under way: a process killed before the
        // winner is moved aside and reported leaves the transition to the next start to finish
        // (spec/goblin.md, `watch`), never a consumed signal in a stage that did not advance.
        let next = PipelineState { stage: to, retries };
        let pending = PendingTransition {
            signal: winner.signal,
            from: stage,
            payload: payload.clone(),
        };
        self.write_state(next, Some(&pending))?;
        watch.state = next;
        for (o, _) in &candidates {
            let moved_to = self.set_aside(o.signal, false)?;
            emit(Event::Conflict {
                signal: o.signal,
                stage,
                chosen: winner.signal,
                moved_to,
                at: event_time(),
            })?;
        }
        let consumed = self.set_aside(winner.signal, true)?;
        // The next stage starts: signals left from earlier stages are stale.
        for o in &others {
            let moved_to = self.set_aside(o.signal, false)?;
            emit(Event::Stale {
                signal: o.signal,
                stage: to,
                moved_to,
                at: event_time(),
            })?;
        }
        emit(Event::Transition {
            signal: winner.signal,
            from: stage,
            to,
            retries,
            payload,
            consumed,
            at: event_time(),
        })?;
        self.save_state(next)?;
        Ok(Step::Advanced)
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
