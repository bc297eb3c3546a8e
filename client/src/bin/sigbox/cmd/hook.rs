//! `sigbox hook RUNTIME --as AGENT`: one checkpoint pass inside a coding agent's hook, answered
//! in that runtime's envelope (spec/hooks.md). Nothing pending: no output, exit 0.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{Value, json};
use sigbox::{Signal, SignalType};
use sigbox_client::Checkpoint;
use sigbox_client::pause::{self, Folded, InForce, PauseAfter};

use crate::cli::{HookArgs, Runtime};

pub(crate) mod permission;

/// The most of an event read from stdin: a tool's whole output can ride in a PostToolUse.
const MAX_EVENT: u64 = 16 << 20;

/// The passes after a call's first: they keep what earlier passes of the call claimed in
/// flight (not answered yet), never acknowledging it before the answer is written.
fn keeping() -> sigbox::PassControl<'static> {
    let mut c = sigbox::PassControl::new();
    c.ack_later().keep_handed();
    c
}

/// How often a held tool call looks at the recorded PAUSE (a parallel call may clear it); it
/// sleeps on filesystem events in between, so a signal for the agent wakes it at once.
const HOLD_LOOK: std::time::Duration = std::time::Duration::from_millis(250);

/// The lifecycle events sigbox answers, by what they can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    SessionStart,
    UserPrompt,
    PreTool,
    PostTool,
    Stop,
}

impl Event {
    /// The event a runtime's name stands for; `None` for events sigbox does not answer.
    /// Copilot names an event in camelCase, or in PascalCase when its hook was configured so
    /// (its "VS Code compatible" payload, which it also sends to the hooks of a project's
    /// `.claude/settings.json`).
    pub(crate) fn parse(runtime: Runtime, name: &str) -> Option<Event> {
        if runtime == Runtime::Copilot
            && let Some(e) = Event::parse(Runtime::Claude, name)
        {
            return Some(e);
        }
        Some(match (runtime, name) {
            (Runtime::Claude | Runtime::Codex, "SessionStart")
            | (Runtime::Copilot, "sessionStart") => Event::SessionStart,
            (Runtime::Claude | Runtime::Codex, "UserPromptSubmit") => Event::UserPrompt,
            (Runtime::Claude | Runtime::Codex, "PreToolUse") | (Runtime::Copilot, "preToolUse") => {
                Event::PreTool
            }
            (Runtime::Claude | Runtime::Codex, "PostToolUse")
            | (Runtime::Copilot, "postToolUse") => Event::PostTool,
            (Runtime::Claude | Runtime::Codex, "Stop") | (Runtime::Copilot, "agentStop") => {
                Event::Stop
            }
            _ => return None,
        })
    }

    /// The runtime's name for it (what `hookEventName` must say).
    pub(crate) fn name(self, runtime: Runtime) -> &'static str {
        match (runtime, self) {
            (Runtime::Copilot, Event::SessionStart) => "sessionStart",
            (Runtime::Copilot, Event::UserPrompt) => "userPromptSubmitted",
            (Runtime::Copilot, Event::PreTool) => "preToolUse",
            (Runtime::Copilot, Event::PostTool) => "postToolUse",
            (Runtime::Copilot, Event::Stop) => "agentStop",
            (_, Event::SessionStart) => "SessionStart",
            (_, Event::UserPrompt) => "UserPromptSubmit",
            (_, Event::PreTool) => "PreToolUse",
            (_, Event::PostTool) => "PostToolUse",
            (_, Event::Stop) => "Stop",
        }
    }

    /// The events `hooks install` registers for a runtime: every one sigbox can answer in.
    /// Copilot's userPromptSubmitted ignores its answer, so it is not registered.
    pub(crate) fn installed(runtime: Runtime) -> &'static [Event] {
        match runtime {
            Runtime::Copilot => &[
                Event::SessionStart,
                Event::PreTool,
                Event::PostTool,
                Event::Stop,
            ],
            _ => &[
                Event::SessionStart,
                Event::UserPrompt,
                Event::PreTool,
                Event::PostTool,
                Event::Stop,
            ],
        }
    }
}

/// What the signals of one hook call ask of the agent.
#[derive(Debug, Default)]
struct Verdict {
    /// An ABORT: stop the agent. The text names it.
    abort: Option<String>,
    /// The PAUSE in force (none came after it: RESUME, ABORT or STEER), as recorded.
    pause: Option<Value>,
    /// What the model should read, one line per signal, oldest first.
    notes: Vec<String>,
    /// Some note is more than a RESUME (a STEER, an INFO, an approval): worth holding a tool
    /// call back for where nothing else can carry it.
    news: bool,
}

/// The instant a recorded PAUSE counts from.
fn record_instant(r: &Value) -> Option<i64> {
    r.get("created_at")
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .and_then(|t| t.timestamp_nanos_opt())
}

/// The record of a PAUSE in force (`agents/<agent>.paused.json`): what the model is told (the
/// signal's line, without the redelivery note: that is said once, in the answer that is the
/// redelivery), the instant a RESUME must be later than, and when it was taken (how long a
/// Stop hook keeps the paused turn alive counts from then).
fn pause_record(s: &Signal) -> Value {
    json!({
        "id": s.id,
        "from": s.from,
        "message": s.message,
        "created_at": s.created_at_rfc3339(),
        "taken_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "line": plain_line(s),
    })
}

/// What a line says of a signal handed over again after an answer that was never written.
const AGAIN: &str = " (delivered again: a previous hook could not answer)";

/// One line a model reads about a signal: type, sender, time, text, and the redelivery note
/// when this answer is the signal's redelivery.
fn describe(s: &Signal) -> String {
    let mut line = plain_line(s);
    if s.redelivery() > 0 {
        line.push_str(AGAIN);
    }
    line
}

/// [`describe`] without the redelivery note.
fn plain_line(s: &Signal) -> String {
    let mut line = format!("[sigbox] {}", s.signal_type.as_str());
    if let Some(f) = &s.from {
        line.push_str(&format!(" from {f}"));
    }
    if let Some(t) = s.created_at_rfc3339_secs() {
        line.push_str(&format!(" at {t}"));
    }
    match s.message.as_deref().filter(|m| !m.trim().is_empty()) {
        Some(m) => line.push_str(&format!(": {m}")),
        None => line.push_str(": (no message)"),
    }
    line
}

/// Folds the signals of a call into what the agent must do, from the PAUSE in force before
/// them (`held`, its record), by the rules of [`sigbox_client::pause::fold`].
fn judge(signals: &[Signal], held: Option<Value>) -> Verdict {
    let seen: Vec<Folded<'_>> = signals.iter().map(Folded::of).collect();
    let in_force = held.as_ref().map(|p| InForce {
        id: p.get("id").and_then(Value::as_str),
        instant: record_instant(p),
    });
    let folded = pause::fold(&seen, in_force);
    Verdict {
        abort: folded.abort.map(|i| describe(&signals[i])),
        pause: match folded.pause {
            PauseAfter::None => None,
            PauseAfter::Kept => held,
            PauseAfter::Taken(i) => Some(pause_record(&signals[i])),
        },
        notes: folded
            .notes
            .iter()
            .map(|&i| describe(&signals[i]))
            .collect(),
        news: folded.news,
    }
}

/// What a Stop hook does about the end of a turn, besides the signals it hands over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct AtStop {
    /// Still paused, within `--pause-keep` of the PAUSE: the turn is kept alive (blocked), so
    /// that a RESUME goes on without anyone typing.
    keep_alive: bool,
    /// A PAUSE in force was cleared in this call (a RESUME or a STEER): the turn goes on.
    resumed: bool,
}

/// The answer to write, or `None` for no output (exit 0: the agent goes on as if no hook ran).
fn answer(
    runtime: Runtime,
    event: Event,
    v: &Verdict,
    pause_text: Option<&str>,
    at_stop: AtStop,
) -> Option<Value> {
    let notes = v.notes.join("\n");
    let has_notes = !notes.is_empty();
    // ABORT first: it ends the run.
    if let Some(a) = &v.abort {
        let reason = format!(
            "{a}\nStop now: do not call more tools; end your turn with a one-line summary."
        );
        return Some(match (runtime, event) {
            // Codex's PreToolUse cannot stop the agent (`continue` must stay true): the call
            // is denied with the reason, and the next event stops it.
            (Runtime::Codex, Event::PreTool) => deny(runtime, &with_notes(&reason, &notes)),
            (Runtime::Claude | Runtime::Codex, _) => {
                json!({"continue": false, "stopReason": with_notes(a, &notes)})
            }
            (Runtime::Copilot, Event::PreTool) => deny(runtime, &with_notes(&reason, &notes)),
            // Copilot has no way to stop from here: the model is told, and its next tool
            // call is denied.
            (Runtime::Copilot, Event::PostTool | Event::SessionStart) => {
                json!({"additionalContext": with_notes(&reason, &notes)})
            }
            (Runtime::Copilot, _) => json!({"decision": "allow", "reason": with_notes(a, &notes)}),
        });
    }
    if let Some(p) = pause_text {
        let text = format!(
            "{p}\nPaused: do not call tools and do not start new work until a RESUME arrives. \
             End your turn now."
        );
        return Some(match event {
            Event::PreTool => deny(runtime, &with_notes(&text, &notes)),
            // Kept alive: the model ends its turn again and the next Stop hook waits again,
            // so that a RESUME goes on with the work without anyone typing.
            Event::Stop if at_stop.keep_alive => block_stop(
                runtime,
                &with_notes(
                    &format!(
                        "{p}\nPaused: do not call tools and do not start new work until a RESUME \
                         arrives. Answer with one short line (\"Paused.\") and end your turn: the \
                         hook waits for the RESUME, and your turn goes on when it comes."
                    ),
                    &notes,
                ),
            ),
            // Past --pause-keep the turn ends, which is what a pause wants: a RESUME then
            // reaches the agent at its next prompt.
            Event::Stop if !has_notes => return None,
            Event::Stop => block_stop(runtime, &with_notes(&text, &notes)),
            _ => context(runtime, event, &with_notes(&text, &notes))?,
        });
    }
    if !has_notes {
        return None;
    }
    Some(match event {
        Event::Stop if at_stop.resumed => block_stop(
            runtime,
            &format!("{notes}\nThe PAUSE is over: go on with your work, as the signals above say."),
        ),
        Event::Stop => block_stop(runtime, &notes),
        // Copilot's preToolUse carries no context: the call is held back with the signals as
        // the reason, so the model reads them before it acts.
        Event::PreTool if runtime == Runtime::Copilot && !v.news => return None,
        Event::PreTool if runtime == Runtime::Copilot => deny(
            runtime,
            &format!(
                "{notes}\nThe call was held back so that you read this first; make it again if \
                 it still fits."
            ),
        ),
        _ => context(runtime, event, &notes)?,
    })
}

fn with_notes(text: &str, notes: &str) -> String {
    if notes.is_empty() {
        text.to_string()
    } else {
        format!("{notes}\n{text}")
    }
}

fn deny(runtime: Runtime, reason: &str) -> Value {
    match runtime {
        Runtime::Copilot => {
            json!({"permissionDecision": "deny", "permissionDecisionReason": reason})
        }
        _ => json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }}),
    }
}

fn block_stop(_runtime: Runtime, reason: &str) -> Value {
    json!({"decision": "block", "reason": reason})
}

/// True while a recorded PAUSE was taken less than `keep` ago (a record without `taken_at`,
/// written by an earlier version, counts from the PAUSE's own instant).
fn within(record: &Value, keep: std::time::Duration) -> bool {
    let since = record
        .get("taken_at")
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .and_then(|t| t.timestamp_nanos_opt())
        .or_else(|| record_instant(record));
    let (Some(since), Some(now)) = (since, chrono::Utc::now().timestamp_nanos_opt()) else {
        return false;
    };
    let keep = i64::try_from(keep.as_nanos()).unwrap_or(i64::MAX);
    now.saturating_sub(since) < keep
}

/// Text for the model on an event that carries it; `None` where the runtime has no such
/// channel (the signals then wait: see [`carries`]).
fn context(runtime: Runtime, event: Event, text: &str) -> Option<Value> {
    match runtime {
        Runtime::Copilot => matches!(event, Event::PostTool | Event::SessionStart)
            .then(|| json!({"additionalContext": text})),
        _ => Some(json!({"hookSpecificOutput": {
            "hookEventName": event.name(runtime),
            "additionalContext": text,
        }})),
    }
}

/// True when an answer on this event can carry signals; a pass runs only then, so that no
/// signal is claimed by a call that could not hand it over.
fn carries(runtime: Runtime, event: Event) -> bool {
    !(runtime == Runtime::Copilot && event == Event::UserPrompt)
}

/// The event on stdin: one JSON object of at most [`MAX_EVENT`] bytes, and whether a lone
/// surrogate in it was written as the replacement character ([`mend_lone_surrogates`]).
fn read_json() -> Result<(Value, bool), String> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_EVENT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the event from stdin: {e}"))?;
    if bytes.len() as u64 > MAX_EVENT {
        return Err(format!("the event is over {MAX_EVENT} bytes"));
    }
    let json = mend_lone_surrogates(&bytes);
    let v: Value = serde_json::from_slice(&json)
        .map_err(|e| format!("the event on stdin is not JSON: {e}"))?;
    if !v.is_object() {
        return Err("the event on stdin is not a JSON object".into());
    }
    Ok((v, matches!(json, std::borrow::Cow::Owned(_))))
}

/// `json` with each escaped lone surrogate (a `\ud800` not followed by its pair, or a
/// `\udc00` alone) written `\ufffd`, the replacement character. A JavaScript runtime's
/// `JSON.stringify` escapes a lone surrogate so (a prompt or tool output cut inside a
/// character has one), and serde_json refuses it: the event would be skipped for one
/// character of text sigbox does not read.
fn mend_lone_surrogates(json: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let escape_at = |at: usize| -> Option<u16> {
        let hex = json.get(at..at + 6)?.strip_prefix(b"\\u")?;
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let mut mended: Option<Vec<u8>> = None;
    let (mut i, mut copied) = (0, 0);
    while i < json.len() {
        if json[i] != b'\\' {
            i += 1;
            continue;
        }
        match escape_at(i) {
            Some(0xD800..=0xDBFF) if matches!(escape_at(i + 6), Some(0xDC00..=0xDFFF)) => i += 12,
            Some(0xD800..=0xDFFF) => {
                let out = mended.get_or_insert_with(Vec::new);
                out.extend_from_slice(&json[copied..i]);
                out.extend_from_slice(b"\\ufffd");
                i += 6;
                copied = i;
            }
            // Any other escape, `\\` included: both bytes, so that an escaped backslash
            // never starts one.
            _ => i += 2,
        }
    }
    match mended {
        None => std::borrow::Cow::Borrowed(json),
        Some(mut out) => {
            out.extend_from_slice(&json[copied..]);
            std::borrow::Cow::Owned(out)
        }
    }
}

/// Reads the event `v`: the runtime that sent it and the event. `Err` says why it is
/// not one sigbox answers.
///
/// The runtime is the one named on the command line, except for a payload with a `timestamp`
/// (Claude Code and Codex send none; Copilot sends one in both of its formats) and none of the
/// fields only they send (`permission_mode`; Codex's `turn_id` and `model`): Copilot CLI runs
/// the hooks of a project's `.claude/settings.json` too, with its own payload, and reads only
/// its own answer fields, so such an event is answered in Copilot's envelope whichever file its
/// hook came from.
fn read_event(
    runtime: Runtime,
    forced: Option<&str>,
    v: &Value,
) -> Result<(Runtime, Event), String> {
    let theirs = ["permission_mode", "turn_id", "model"]
        .iter()
        .any(|k| v.get(k).is_some());
    let runtime = if v.get("timestamp").is_some() && !theirs {
        Runtime::Copilot
    } else {
        runtime
    };
    let name = match forced {
        Some(n) => n.to_string(),
        None => v
            .get("hook_event_name")
            .or_else(|| v.get("hookEventName"))
            .and_then(Value::as_str)
            .ok_or_else(|| match runtime {
                Runtime::Copilot => {
                    "the event names no hook event: Copilot's does not, pass --event".to_string()
                }
                _ => "the event has no hook_event_name".to_string(),
            })?
            .to_string(),
    };
    Event::parse(runtime, &name)
        .map(|e| (runtime, e))
        .ok_or_else(|| format!("event {name:?} is not one sigbox answers"))
}

pub(crate) fn run(root: &Path, args: &HookArgs) -> anyhow::Result<ExitCode> {
    let quiet_fail = |why: String| -> anyhow::Result<ExitCode> {
        if args.strict {
            anyhow::bail!("hook: {why}");
        }
        // A hook must never break the agent: one line for the runtime's log, exit 0.
        super::mailbox::warn_line(
            &json!({"event": "hook_skipped", "reason": why}),
            &format!("hook: {why}"),
        );
        Ok(ExitCode::SUCCESS)
    };
    let (v, mended) = match read_json() {
        Ok(v) => v,
        Err(why) => return quiet_fail(why),
    };
    if let Some(runtime) = permission::wants(args.runtime, args.event.as_deref(), &v) {
        // A person is never asked to approve text other than what the runtime sent: such a
        // request is left to the runtime's own prompt.
        if mended {
            return quiet_fail(
                "the permission request holds a lone surrogate (an escape such as \\ud800): \
                 no request is made of it; the runtime asks in its own way"
                    .into(),
            );
        }
        return Ok(permission::run(root, args, runtime, &v));
    }
    let (runtime, event) = match read_event(args.runtime, args.event.as_deref(), &v) {
        Ok(e) => e,
        Err(why) => return quiet_fail(why),
    };
    if !carries(runtime, event) {
        return Ok(ExitCode::SUCCESS);
    }
    let agent = match super::mailbox::agent_name(&args.agent) {
        Ok(a) => a,
        Err(e) => return quiet_fail(format!("{e}")),
    };
    // An answer nobody reads hands nothing over: claim nothing.
    if let Some(why) = crate::output::reaches_nobody() {
        return quiet_fail(format!(
            "{why}: no answer can be read, so nothing was taken"
        ));
    }
    let mut cp = match Checkpoint::with_options(&super::options(), root, &agent) {
        Ok(cp) => cp,
        Err(e) => return quiet_fail(format!("{e}")),
    };
    cp.state(args.state.as_deref());
    // The PAUSE in force is a recorded state, not a message: every call of the agent sees it
    // (parallel tool calls too) until a RESUME, STEER or ABORT clears it. Reading it, claiming
    // and recording what was found is one step under the agent's PAUSE lock, so that a
    // parallel call never reads "not paused" while this one claims a PAUSE.
    let step = match cp.mailbox().lock_paused(&agent) {
        Ok(l) => l,
        Err(e) => return quiet_fail(format!("{e}")),
    };
    let held = match cp.mailbox().paused(&agent) {
        Ok(h) => h,
        Err(e) => return quiet_fail(format!("{e}")),
    };
    let mut delivered = match cp.poll() {
        Ok(s) => s,
        Err(e) => return quiet_fail(format!("{e}")),
    };
    let mut verdict = judge(&delivered, held.clone());
    // Recorded before anything more is claimed or handed over (the next pass acknowledges
    // this one's claims): a call killed from here on loses no PAUSE.
    let mut recorded = held.clone();
    let record = |v: &Verdict, cp: &Checkpoint, recorded: &mut Option<Value>| {
        if v.pause != *recorded {
            cp.mailbox()
                .set_paused(&agent, v.pause.as_ref())
                .map_err(|e| format!("cannot record the PAUSE: {e}"))?;
            *recorded = v.pause.clone();
        }
        Ok::<(), String>(())
    };
    if let Err(why) = record(&verdict, &cp, &mut recorded) {
        return quiet_fail(why);
    }
    // A pass stops at a PAUSE (spec/mailbox.md §6): look again at once, so that a RESUME or
    // STEER already waiting behind it is read in this call.
    let mut again = 0;
    while delivered
        .last()
        .is_some_and(|s| s.signal_type == SignalType::Pause)
        && again < 16
    {
        again += 1;
        match cp.poll_with(&keeping(), &mut |_| Ok(())) {
            Ok(more) if !more.is_empty() => {
                delivered.extend(more);
                verdict = judge(&delivered, held.clone());
                if let Err(why) = record(&verdict, &cp, &mut recorded) {
                    return quiet_fail(why);
                }
            }
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(error = %e, "hook: a pass after a PAUSE failed");
                break;
            }
        }
    }
    drop(step);
    // A PAUSE in force before a tool call or at the end of a turn: hold the call, sleeping on
    // filesystem events, until a RESUME, ABORT or STEER arrives (here, or taken by a parallel
    // call of the agent, which clears the record) or the bound passes (under the runtime's
    // time limit).
    if verdict.pause.is_some()
        && verdict.abort.is_none()
        && matches!(event, Event::PreTool | Event::Stop)
    {
        // Saturating: a `--pause-wait` too long to represent holds until the runtime's limit.
        let deadline =
            sigbox_client::deadline_after(Some(args.pause_wait)).unwrap_or_else(Instant::now);
        while verdict.pause.is_some() && verdict.abort.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match cp.wait_with(Some(left.min(HOLD_LOOK)), &keeping(), &mut |_| Ok(())) {
                Ok(more) => {
                    // Another call may have cleared (or renewed) the record meanwhile.
                    let now_held = cp.mailbox().paused(&agent).unwrap_or(None);
                    recorded = now_held.clone();
                    let fresh = judge(&more, now_held);
                    verdict.abort = verdict.abort.take().or(fresh.abort);
                    verdict.notes.extend(fresh.notes);
                    verdict.news |= fresh.news;
                    verdict.pause = fresh.pause;
                    delivered.extend(more);
                    if let Err(why) = record(&verdict, &cp, &mut recorded) {
                        return quiet_fail(why);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "hook: the wait for a RESUME failed");
                    break;
                }
            }
        }
    }
    let pause_text = match (&verdict.pause, &verdict.abort) {
        (Some(p), None) => p.get("line").and_then(Value::as_str).map(|line| {
            // Said once: in the answer that hands the PAUSE over again, not in every answer
            // while it is in force (a record written by an earlier version may carry it).
            let line = line.strip_suffix(AGAIN).unwrap_or(line);
            let id = p.get("id").and_then(Value::as_str);
            let again = delivered.iter().any(|s| {
                s.signal_type == SignalType::Pause
                    && s.redelivery() > 0
                    && Some(s.id.as_str()) == id
            });
            if again {
                format!("{line}{AGAIN}")
            } else {
                line.to_string()
            }
        }),
        _ => None,
    };
    let at_stop = AtStop {
        keep_alive: event == Event::Stop
            && pause_text.is_some()
            && verdict
                .pause
                .as_ref()
                .is_some_and(|p| within(p, args.pause_keep)),
        resumed: event == Event::Stop
            && (held.is_some() || delivered.iter().any(|s| s.signal_type == SignalType::Pause))
            && verdict.pause.is_none()
            && verdict.abort.is_none(),
    };
    let answer = answer(runtime, event, &verdict, pause_text.as_deref(), at_stop);
    if let Some(a) = &answer {
        let mut out = std::io::stdout().lock();
        let written = serde_json::to_writer(&mut out, a)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            // Not handed over: the claims stay in flight and come back, marked, at the next
            // call (spec/mailbox.md §9.2).
            return quiet_fail(format!("cannot write the answer: {e}"));
        }
    }
    // Handed over: acknowledged, never given again.
    if !delivered.is_empty()
        && let Err(e) = cp.ack()
    {
        return quiet_fail(format!("cannot acknowledge what was handed over: {e}"));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::mend_lone_surrogates;

    #[test]
    fn only_lone_surrogates_are_mended() {
        for (json, want) in [
            (r#""\ud800""#, r#""\ufffd""#),
            (r#""\uDC00x""#, r#""\ufffdx""#),
            (r#""a\ud800\u0041""#, r#""a\ufffd\u0041""#),
            (r#""\ud800\ud83d\ude00""#, r#""\ufffd\ud83d\ude00""#),
            (r#""\ud800"#, r#""\ufffd"#),
            (r#""\ud83d\ude00""#, r#""\ud83d\ude00""#),
            (r#""\\ud800""#, r#""\\ud800""#),
            (r#""\\\ud800""#, r#""\\\ufffd""#),
            (r#""\ud80""#, r#""\ud80""#),
        ] {
            let got = mend_lone_surrogates(json.as_bytes());
            assert_eq!(String::from_utf8_lossy(&got), want, "{json}");
            assert_eq!(
                matches!(got, std::borrow::Cow::Borrowed(_)),
                json == want,
                "{json}: copied only when mended"
            );
        }
    }
}
