//! The watch rule (spec/goblin.md, `watch`): one [`Goblin::step`] reads the six files and takes
//! the transition they call for (the one written last wins; the rest are set aside as stale),
//! saving the new stage before its effects so that a killed watch never leaves the pipeline
//! stuck.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::{
    FileState, Goblin, GoblinSignal, Observed, Payload, PipelineState, STATE_FILE, Stage,
    next_stage,
};
use crate::clock::{self, Precision};
use crate::error::{Error, ErrorKind, Result};

/// A running `watch` (spec/goblin.md, `watch`): the pipeline state it drives, the file
/// versions it has reported, so that each is reported once, and the worktree's watch lock,
/// held for as long as it lives, so that no other watch takes a transition meanwhile.
#[derive(Debug)]
pub struct Watch {
    state: PipelineState,
    reported: HashSet<(GoblinSignal, i128, Report)>,
    /// A transition finished at start-up, reported by the first step.
    recovered: Option<Event>,
    /// The watch lock (`None` where the filesystem has no locks).
    _lock: Option<std::fs::File>,
}

/// A path as JSON text (non-UTF-8 bytes replaced), or `null`: a path never stops an event.
fn lossy_path(p: Option<&std::path::Path>) -> Value {
    p.map_or(Value::Null, |p| {
        Value::String(p.to_string_lossy().into_owned())
    })
}

/// A transition saved with the new stage before its effects (moving the winner aside,
/// reporting it), so that a process killed in between does not leave the pipeline stuck: the
/// next start finishes it.
#[derive(Clone, Debug)]
pub(super) struct PendingTransition {
    pub(super) signal: GoblinSignal,
    pub(super) from: Stage,
    pub(super) payload: Payload,
}

/// What a file version was reported as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Report {
    Invalid,
    Unexpected,
}

impl Watch {
    /// A watch at `state` holding `lock`, that has reported nothing yet.
    /// [`Goblin::start_watch`] takes the lock, picks the state as the spec says and saves it.
    fn new(state: PipelineState, lock: Option<std::fs::File>) -> Watch {
        Watch {
            state,
            reported: HashSet::new(),
            recovered: None,
            _lock: lock,
        }
    }

    /// True while a transition finished at start-up is still to be reported (by the next
    /// [`Goblin::step`]), even when the stage it reached is terminal.
    pub fn recovering(&self) -> bool {
        self.recovered.is_some()
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
                        "consumed": lossy_path(consumed.as_deref()), "at": at}),
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
                        "chosen": chosen.name(), "moved_to": lossy_path(moved_to.as_deref()), "at": at}),
            Event::Stale {
                signal,
                stage,
                moved_to,
                at,
            } => json!({"event": "stale", "signal": signal.name(), "stage": stage.as_str(),
                        "moved_to": lossy_path(moved_to.as_deref()), "at": at}),
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
    /// Starts a watch: takes the worktree's watch lock first (refused, naming the holder, while
    /// another watch runs there: [`ErrorKind::Conflict`]), then picks its state. Its state is
    /// `stage` (with `retries`, else 0) when given, else the saved state (with its retries
    /// replaced by `retries` when given), else SCOPE with 0 retries; it is saved when it
    /// differs from the saved one.
    ///
    /// A transition saved unfinished (its watch stopped between saving the new stage and
    /// reporting it) is finished first and reported by the first [`Goblin::step`], when no
    /// `stage` is given or the given one is the stage it left or entered; the watch then goes
    /// on from the stage it entered (`retries` replacing its retries when given). Any other
    /// `stage` would lose it: refused ([`ErrorKind::Conflict`]), nothing changed.
    pub fn start_watch(&self, stage: Option<Stage>, retries: Option<u32>) -> Result<Watch> {
        // Before the saved state is read: of two watches started at once, one finishes a
        // transition saved unfinished and takes the later ones, the other is refused.
        let lock = self.lock_watch("watch")?;
        let (saved, pending) = match self.saved() {
            Some((st, p)) => (Some(st), p),
            None => (None, None),
        };
        if let (Some(st), Some(p)) = (saved, &pending) {
            if let Some(given) = stage
                && given != p.from
                && given != st.stage
            {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    Some(&self.dir.join(STATE_FILE)),
                    format!(
                        "the transition {} -> {} on {} is saved unfinished (the watch that took \
                         it stopped before reporting it): starting at {} would lose it; start \
                         the watch without a stage, or at {} or {}, to report it first",
                        p.from.as_str(),
                        st.stage.as_str(),
                        p.signal.name(),
                        given.as_str(),
                        p.from.as_str(),
                        st.stage.as_str()
                    ),
                ));
            }
            // A transition was saved and its process ended before it finished: finish it.
            let consumed = match self.set_aside(p.signal, true)? {
                Some(path) => Some(path),
                None => self.last_consumed(p.signal)?,
            };
            let mut watch = Watch::new(st, lock);
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
        if Some(state) != saved {
            self.save_state(state)?;
        }
        Ok(Watch::new(state, lock))
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
            // A transition finished at start-up: reported before anything else, and counted
            // as this step's transition.
            emit(event)?;
            self.save_state(watch.state)?;
            return Ok(Step::Advanced);
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
        // The next stage starts: signals left from earlier stages are stale. A ready signal for
        // the new stage written after the winner is not: a fast step wrote it before this
        // watcher saw the transition, and it is the next transition's.
        for o in &others {
            let ahead = matches!(o.state, FileState::Ready(_))
                && (o.mtime_ns, o.signal) > (winner.mtime_ns, winner.signal)
                && next_stage(to, o.signal, retries).is_some();
            if ahead {
                continue;
            }
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
