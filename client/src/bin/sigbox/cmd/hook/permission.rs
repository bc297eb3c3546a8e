//! `sigbox hook RUNTIME --as AGENT` on a `PermissionRequest`: the runtime is about to show its
//! approval prompt; sigbox asks a person instead (spec/asks.md), waits for the one answer up to
//! a bound under the runtime's hook time limit, and returns `allow` or `deny` in the runtime's
//! envelope. No answer in time: no output, no decision, and the runtime's own prompt follows
//! (unless `--permission-default` says otherwise). See spec/hooks.md, "Permission requests".

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Map, Value, json};
use sigbox::asks::{Asks, NewAsk, Outcome};
use sigbox_client::Waited;

use crate::cli::{HookArgs, NoAnswer, Runtime};

/// The wait of Claude Code's and Codex's hooks when `--permission-wait` is not given: under
/// Claude Code's command-hook default of 600 s and its earlier 60 s, and Codex's 600 s
/// (spec/hooks-sources.md §1.2, §2.2).
const WAIT_CLAUDE_CODEX: Duration = Duration::from_secs(50);
/// Copilot CLI's: under its `timeoutSec` default of 30 s (spec/hooks-sources.md §3.2).
const WAIT_COPILOT: Duration = Duration::from_secs(25);
/// The most of a tool's input kept in the request's context, as JSON; past it the context
/// keeps its head and says how long it was (the request file is capped at 1 MiB).
const INPUT_KEPT: usize = 256 << 10;
/// The most of a tool's input shown in the request's one-line message, in characters.
const SHOWN: usize = 400;

/// The runtime a permission event comes from, when `v` (or `--event`) is one; `None` for
/// every other event.
pub(crate) fn wants(runtime: Runtime, forced: Option<&str>, v: &Value) -> Option<Runtime> {
    let name = forced.map(str::to_string).or_else(|| {
        v.get("hook_event_name")
            .or_else(|| v.get("hookEventName"))
            .and_then(Value::as_str)
            .map(str::to_string)
    })?;
    if name != "PermissionRequest" && name != "permissionRequest" {
        return None;
    }
    // As for every event: a `timestamp` without the fields only Claude Code and Codex send is
    // Copilot's payload, answered in Copilot's envelope (spec/hooks-sources.md §3.1).
    let theirs = ["permission_mode", "turn_id", "model"]
        .iter()
        .any(|k| v.get(k).is_some());
    Some(if v.get("timestamp").is_some() && !theirs {
        Runtime::Copilot
    } else {
        runtime
    })
}

/// The first of `keys` in `v` that is a string.
fn text<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_str))
}

/// FNV-1a 64 of `bytes`, 16 lower-case hex digits.
fn fnv(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The request's key when the event names its session and its tool call: the same call fired
/// again (a retried hook) re-attaches to its request instead of asking twice. Digests, so that
/// whatever the ids hold the key is valid.
fn key_of(v: &Value) -> Option<String> {
    let session = text(v, &["session_id", "sessionId"])?;
    let call = text(v, &["tool_use_id", "toolUseId", "toolCallId"])?;
    Some(format!(
        "perm-{}-{}",
        fnv(session.as_bytes()),
        fnv(call.as_bytes())
    ))
}

/// `s` cut to `n` characters, with an ellipsis when cut.
fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The one line a person reads: what the tool would do.
fn message(runtime: Runtime, tool: &str, input: &Value) -> String {
    let who = match runtime {
        Runtime::Claude => "Claude Code",
        Runtime::Codex => "Codex",
        Runtime::Copilot => "Copilot",
    };
    let what = match input {
        Value::String(s) => s.clone(),
        Value::Object(m) => match ["command", "file_path", "path", "url", "pattern"]
            .iter()
            .find_map(|k| m.get(*k).and_then(Value::as_str))
        {
            Some(s) => s.to_string(),
            None => input.to_string(),
        },
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let why = input
        .get("description")
        .and_then(Value::as_str)
        .map(|d| format!(" ({})", cut(d, 120)))
        .unwrap_or_default();
    if what.is_empty() {
        format!("{who} asks to use {tool}{why}")
    } else {
        format!("{who} asks to use {tool}: {}{why}", cut(&what, SHOWN))
    }
}

/// The tool's input as kept in the request: whole up to [`INPUT_KEPT`] bytes of JSON, else its
/// head and its length.
fn kept_input(input: &Value) -> Value {
    let whole = input.to_string();
    if whole.len() <= INPUT_KEPT {
        return input.clone();
    }
    let mut end = INPUT_KEPT / 4;
    while !whole.is_char_boundary(end) {
        end -= 1;
    }
    json!({"truncated": true, "bytes": whole.len(), "head": &whole[..end]})
}

/// The runtime's answer: `allow`, or `deny` with `reason` (spec/hooks.md cites each shape).
fn envelope(runtime: Runtime, allow: bool, reason: &str) -> Value {
    let mut decision = Map::new();
    decision.insert(
        "behavior".into(),
        json!(if allow { "allow" } else { "deny" }),
    );
    if !allow {
        decision.insert("message".into(), json!(reason));
    }
    match runtime {
        Runtime::Copilot => Value::Object(decision),
        Runtime::Claude | Runtime::Codex => json!({"hookSpecificOutput": {
            "hookEventName": "PermissionRequest", "decision": decision}}),
    }
}

/// Answers a permission event `v` from `runtime`: asks, waits, decides.
pub(crate) fn run(root: &Path, args: &HookArgs, runtime: Runtime, v: &Value) -> ExitCode {
    let skipped = |why: String| {
        super::super::mailbox::warn_line(
            &json!({"event": "hook_skipped", "reason": why}),
            &format!("hook: {why}"),
        );
        ExitCode::SUCCESS
    };
    // Nobody would read the decision: do not make a person answer for nothing.
    if let Some(why) = crate::output::reaches_nobody() {
        return skipped(format!(
            "{why}: no decision can be read, so nothing was asked"
        ));
    }
    let agent = match super::super::mailbox::agent_name(&args.agent) {
        Ok(a) => a,
        Err(e) => return skipped(format!("{e}")),
    };
    let tool = text(v, &["tool_name", "toolName"]).unwrap_or("a tool");
    let input = ["tool_input", "toolInput", "toolArgs"]
        .iter()
        .find_map(|k| v.get(*k))
        .cloned()
        .unwrap_or(Value::Null);
    let wait = args.permission.permission_wait.unwrap_or(match runtime {
        Runtime::Copilot => WAIT_COPILOT,
        _ => WAIT_CLAUDE_CODEX,
    });
    let mut context = json!({
        "runtime": runtime.as_str(), "event": "PermissionRequest", "tool_name": tool,
        "tool_input": kept_input(&input),
    });
    for (field, keys) in [
        ("session_id", &["session_id", "sessionId"][..]),
        (
            "tool_use_id",
            &["tool_use_id", "toolUseId", "toolCallId"][..],
        ),
        ("cwd", &["cwd"][..]),
    ] {
        if let Some(s) = text(v, keys) {
            context[field] = json!(cut(s, 1024));
        }
    }
    let mut new = NewAsk::new(&agent, &message(runtime, tool, &input))
        .timeout(wait)
        .context(context);
    if let Some(k) = key_of(v) {
        new = new.key(&k);
    }
    let decided = (|| -> sigbox::Result<Option<Outcome>> {
        let mb = super::super::open(root)?;
        let asked = Asks::new(&mb).ask(&new)?;
        if let Some(o) = asked.outcome {
            return Ok(Some(o));
        }
        Ok(
            match sigbox_client::wait_outcome(&mb, &asked.request.id, &agent, None, &mut || false)?
            {
                Waited::Outcome(o) => Some(o),
                Waited::Stopped => None,
            },
        )
    })();
    let answer = match decided {
        Err(e) => return skipped(format!("cannot ask: {e}")),
        Ok(None) => None,
        Ok(Some(Outcome::Answered(a))) => {
            let allow = a.choice == "approve";
            let reason = match a.message.as_deref().map(str::trim) {
                Some(m) if !m.is_empty() => m.to_string(),
                _ => format!("{} denied it (sigbox answer)", a.by),
            };
            Some(envelope(runtime, allow, &reason))
        }
        Ok(Some(Outcome::Expired { .. })) => match args.permission.permission_default {
            NoAnswer::Prompt => None,
            NoAnswer::Allow => Some(envelope(runtime, true, "")),
            NoAnswer::Deny => Some(envelope(
                runtime,
                false,
                &format!(
                    "nobody answered within {} s (sigbox --permission-default deny)",
                    wait.as_secs_f64()
                ),
            )),
        },
    };
    if let Some(a) = answer {
        let mut out = std::io::stdout().lock();
        let written = serde_json::to_writer(&mut out, &a)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            return skipped(format!("cannot write the decision: {e}"));
        }
    }
    ExitCode::SUCCESS
}
