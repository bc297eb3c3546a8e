//! How a hook folds the signals of one call into what the agent must do (spec/hooks.md,
//! "PAUSE"): a pure function of the signals, oldest first, and the PAUSE in force before
//! them, tested row by row. The hook turns the result into its answer and its record of the
//! PAUSE in force (`agents/<agent>.paused.json`).
//!
//! The rules, in the order the signals came:
//! - an ABORT stops the agent (the first one is named) and ends any PAUSE;
//! - a PAUSE is taken unless the PAUSE in force is newer, or is this PAUSE given again (its
//!   answer was never written: it keeps its record, and when it was taken);
//! - a RESUME ends the PAUSE in force only when it is not older than it; it is always told;
//! - a STEER ends any PAUSE and is news; every other type is news, and ends nothing.

use sigbox::{Signal, SignalType};

/// A signal as the fold looks at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Folded<'a> {
    /// Its type.
    pub signal_type: SignalType,
    /// Its id.
    pub id: &'a str,
    /// Its `created_at`, in nanoseconds since the Unix epoch.
    pub instant: Option<i64>,
    /// The instant its record says, once it is the PAUSE in force: its `created_at` as
    /// written into the record, read back.
    pub recorded: Option<i64>,
}

impl<'a> Folded<'a> {
    /// `s` as the fold looks at it.
    pub fn of(s: &'a Signal) -> Folded<'a> {
        Folded {
            signal_type: s.signal_type,
            id: &s.id,
            instant: s.created_at.and_then(|t| t.timestamp_nanos_opt()),
            recorded: s
                .created_at_rfc3339()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
                .and_then(|t| t.timestamp_nanos_opt()),
        }
    }
}

/// The PAUSE in force before the call, as its record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InForce<'a> {
    /// The PAUSE's id.
    pub id: Option<&'a str>,
    /// Its instant: a RESUME older than this does not end it.
    pub instant: Option<i64>,
}

/// The PAUSE in force after the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseAfter {
    /// None.
    None,
    /// The one in force before the call, its record unchanged.
    Kept,
    /// The PAUSE at this index of the signals: recorded anew.
    Taken(usize),
}

/// What the signals of one call ask of the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The index of the first ABORT: stop the agent.
    pub abort: Option<usize>,
    /// The PAUSE in force after them.
    pub pause: PauseAfter,
    /// The indexes of the signals the model is told of, oldest first.
    pub notes: Vec<usize>,
    /// Some signal told is more than a RESUME (a STEER, an INFO, an approval): worth holding
    /// a tool call back for where nothing else can carry it.
    pub news: bool,
}

/// Folds `signals` (oldest first) into what the agent must do, from the PAUSE in force before
/// them (`held`), by the rules in this module's documentation.
pub fn fold(signals: &[Folded<'_>], held: Option<InForce<'_>>) -> Verdict {
    let mut abort = None;
    let mut notes = Vec::new();
    let mut news = false;
    // The PAUSE in force as the fold goes: its id, its instant, and where it came from.
    let mut pause: Option<(Option<&str>, Option<i64>, PauseAfter)> =
        held.map(|h| (h.id, h.instant, PauseAfter::Kept));
    for (i, s) in signals.iter().enumerate() {
        match s.signal_type {
            SignalType::Abort => {
                abort.get_or_insert(i);
                pause = None;
            }
            SignalType::Pause => {
                let same = pause.is_some_and(|(id, _, _)| id == Some(s.id));
                let newer = pause.is_none_or(|(_, at, _)| s.instant >= at);
                if newer && !same {
                    pause = Some((Some(s.id), s.recorded, PauseAfter::Taken(i)));
                }
            }
            SignalType::Resume => {
                if pause.is_some_and(|(_, at, _)| s.instant >= at) {
                    pause = None;
                }
                notes.push(i);
            }
            SignalType::Steer => {
                pause = None;
                news = true;
                notes.push(i);
            }
            _ => {
                news = true;
                notes.push(i);
            }
        }
    }
    Verdict {
        abort,
        pause: pause.map_or(PauseAfter::None, |(_, _, p)| p),
        notes,
        news,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signal: its type, id, and instant (also the instant its record would say).
    fn sig(ty: SignalType, id: &'static str, at: i64) -> Folded<'static> {
        Folded {
            signal_type: ty,
            id,
            instant: Some(at),
            recorded: Some(at),
        }
    }

    fn held(id: &'static str, at: i64) -> Option<InForce<'static>> {
        Some(InForce {
            id: Some(id),
            instant: Some(at),
        })
    }

    use PauseAfter::{Kept, None as Off, Taken};
    use SignalType::{Abort, Approve, Info, Pause, Resume, Skip, Steer};

    /// One named test per case: `folds!(name: held, [signals] => abort, pause, notes, news;)`.
    macro_rules! folds {
        ($($name:ident: $held:expr, [$($s:expr),*] => $abort:expr, $pause:expr, [$($n:expr),*], $news:literal;)*) => {
            $(
                #[test]
                fn $name() {
                    let signals: Vec<Folded<'static>> = vec![$($s),*];
                    let want = Verdict {
                        abort: $abort,
                        pause: $pause,
                        notes: vec![$($n),*],
                        news: $news,
                    };
                    assert_eq!(fold(&signals, $held), want);
                }
            )*
        };
    }

    folds! {
        nothing_without_a_pause: None, [] => None, Off, [], false;
        nothing_keeps_the_pause_in_force: held("p", 10), [] => None, Kept, [], false;
        a_pause_is_taken: None, [sig(Pause, "p", 10)] => None, Taken(0), [], false;
        a_newer_pause_replaces_the_one_in_force:
            held("p", 10), [sig(Pause, "q", 20)] => None, Taken(0), [], false;
        a_pause_as_old_as_the_one_in_force_replaces_it:
            held("p", 10), [sig(Pause, "q", 10)] => None, Taken(0), [], false;
        an_older_pause_leaves_the_one_in_force:
            held("p", 20), [sig(Pause, "q", 10)] => None, Kept, [], false;
        the_pause_in_force_given_again_keeps_its_record:
            held("p", 10), [sig(Pause, "p", 10)] => None, Kept, [], false;
        a_resume_ends_an_older_pause:
            held("p", 10), [sig(Resume, "r", 20)] => None, Off, [0], false;
        a_resume_as_old_as_the_pause_ends_it:
            held("p", 10), [sig(Resume, "r", 10)] => None, Off, [0], false;
        an_older_resume_leaves_the_pause:
            held("p", 20), [sig(Resume, "r", 10)] => None, Kept, [0], false;
        a_resume_without_a_pause_is_told: None, [sig(Resume, "r", 10)] => None, Off, [0], false;
        a_resume_after_a_pause_of_the_same_call_ends_it:
            None, [sig(Pause, "p", 10), sig(Resume, "r", 20)] => None, Off, [1], false;
        a_pause_after_a_resume_of_the_same_call_holds:
            None, [sig(Resume, "r", 10), sig(Pause, "p", 20)] => None, Taken(1), [0], false;
        a_steer_ends_any_pause_and_is_news:
            held("p", 20), [sig(Steer, "s", 10)] => None, Off, [0], true;
        an_abort_ends_the_pause:
            held("p", 10), [sig(Abort, "a", 5)] => Some(0), Off, [], false;
        the_first_abort_is_named:
            None, [sig(Abort, "a", 1), sig(Abort, "b", 2)] => Some(0), Off, [], false;
        a_pause_after_an_abort_is_in_force:
            None, [sig(Abort, "a", 1), sig(Pause, "p", 2)] => Some(0), Taken(1), [], false;
        an_info_is_news_and_leaves_the_pause:
            held("p", 10), [sig(Info, "i", 20)] => None, Kept, [0], true;
        approve_and_skip_are_news_and_leave_the_pause:
            held("p", 10), [sig(Approve, "y", 20), sig(Skip, "n", 30)] => None, Kept, [0, 1], true;
        a_pause_without_an_instant_is_older_than_any:
            Some(InForce { id: Some("p"), instant: None }),
            [Folded { signal_type: Resume, id: "r", instant: None, recorded: None }]
            => None, Off, [0], false;
        a_record_without_an_id_is_not_the_same_pause:
            Some(InForce { id: None, instant: Some(10) }), [sig(Pause, "p", 10)]
            => None, Taken(0), [], false;
    }

    #[test]
    fn a_taken_pause_counts_from_its_recorded_instant() {
        // The PAUSE taken in this call is compared by the instant its record will say.
        let p = Folded {
            signal_type: Pause,
            id: "p",
            instant: Some(10),
            recorded: Some(30),
        };
        let v = fold(&[p, sig(Resume, "r", 20)], None);
        assert_eq!(v.pause, Taken(0));
    }
}
