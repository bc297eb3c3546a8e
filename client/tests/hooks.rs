//! `sigbox hook` and `sigbox hooks install|uninstall` (spec/hooks.md): each runtime's
//! documented events in, answers checked against each runtime's documented output shape
//! (spec/schemas/upstream/), every signal handed over once.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use sigbox::{Mailbox, NewSignal, SignalType, Target};

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn spec() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec")
}

fn fixture(runtime: &str, event: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hooks")
            .join(runtime)
            .join(format!("{event}.json")),
    )
    .unwrap()
}

/// The runtime's documented output shape for `event`.
fn output_schema(runtime: &str, event: &str) -> jsonschema::Validator {
    let file = match runtime {
        "codex" => {
            let kebab = match event {
                "PreToolUse" => "pre-tool-use",
                "PostToolUse" => "post-tool-use",
                "SessionStart" => "session-start",
                "UserPromptSubmit" => "user-prompt-submit",
                "Stop" => "stop",
                other => panic!("{other}"),
            };
            format!("{kebab}.command.output.schema.json")
        }
        _ => format!("{event}.output.schema.json"),
    };
    let path = spec().join("schemas/upstream").join(runtime).join(file);
    let schema: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn hook(root: &Path, runtime: &str, event: &str, extra: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.arg("--root")
        .arg(root)
        .args(["hook", runtime, "--as", "Executor"])
        .args(extra)
        .env_remove("SIGBOX_ROOT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if runtime == "copilot" {
        c.args(["--event", event]);
    }
    if !extra.contains(&"--pause-wait") {
        c.args(["--pause-wait", "200ms"]);
    }
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fixture(runtime, event))
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A hook holding a PreToolUse call (up to 30 s) under the PAUSE in force, once it holds it
/// (it has recorded that PAUSE, and sleeps on the events of `inputs/`).
fn hold_a_tool_call(root: &Path, mb: &Mailbox) -> std::process::Child {
    let mut holder = Command::new(BIN)
        .arg("--root")
        .arg(root)
        .args(["hook", "claude", "--as", "Executor", "--pause-wait", "30s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    holder
        .stdin
        .take()
        .unwrap()
        .write_all(&fixture("claude", "PreToolUse"))
        .unwrap();
    common::wait_until(
        "the hook holds the call",
        std::time::Duration::from_secs(30),
        || common::watches(holder.id(), &root.join("inputs")),
    );
    assert!(
        mb.paused("Executor").unwrap().is_some(),
        "held, not recorded"
    );
    holder
}

/// A fresh mailbox in a temporary directory (kept while the first value lives).
fn fresh() -> (tempfile::TempDir, PathBuf, Mailbox) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    let mb = Mailbox::init(&root).unwrap();
    (dir, root, mb)
}

fn send(mb: &Mailbox, ty: SignalType, msg: &str) {
    mb.send(
        NewSignal::new(ty)
            .target(Target::Agent("Executor".into()))
            .message(msg)
            .from("alice"),
    )
    .unwrap();
}

/// Every string anywhere in the answer, joined: what the model or the user reads.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(text_of).collect::<Vec<_>>().join("\n"),
        Value::Object(o) => o.values().map(text_of).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

const EVENTS: [(&str, &[&str]); 3] = [
    (
        "claude",
        &[
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PostToolUse",
            "Stop",
        ],
    ),
    (
        "codex",
        &[
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PostToolUse",
            "Stop",
        ],
    ),
    (
        "copilot",
        &["sessionStart", "preToolUse", "postToolUse", "agentStop"],
    ),
];

/// What a case expects of the answer.
fn expect(runtime: &str, event: &str, signal: &str, answer: Option<&Value>) -> Result<(), String> {
    let stop_event = matches!(event, "Stop" | "agentStop");
    let pre_tool = matches!(event, "PreToolUse" | "preToolUse");
    let denied = |a: &Value| {
        a.pointer("/hookSpecificOutput/permissionDecision")
            .or_else(|| a.get("permissionDecision"))
            == Some(&Value::from("deny"))
    };
    match (signal, answer) {
        ("nothing", None) => Ok(()),
        ("nothing", Some(a)) => Err(format!("nothing pending, but answered {a}")),
        // Copilot's preToolUse has no context channel: a RESUME alone lets the call run.
        ("PAUSE+RESUME", None) if runtime == "copilot" && pre_tool => Ok(()),
        (_, None) => Err("no answer".into()),
        (_, Some(a)) => {
            let text = text_of(a);
            let wanted = match signal {
                "PAUSE+RESUME" => "RESUME",
                s => s,
            };
            if !text.contains(wanted) || !text.contains("from alice") {
                return Err(format!(
                    "the answer does not name the {wanted} and its sender: {a}"
                ));
            }
            match signal {
                "ABORT" => {
                    let stops = a.get("continue") == Some(&Value::Bool(false));
                    let ok = match (runtime, pre_tool) {
                        ("claude", _) => stops,
                        ("codex", true) | ("copilot", true) => denied(a),
                        ("codex", false) => stops,
                        // Copilot cannot stop from these: told, or let end.
                        _ => true,
                    };
                    ok.then_some(()).ok_or(format!("ABORT does not stop: {a}"))
                }
                "PAUSE" if pre_tool => denied(a)
                    .then_some(())
                    .ok_or(format!("PAUSE does not hold the tool call: {a}")),
                // The paused turn is kept alive, so that a RESUME goes on without anyone
                // typing.
                "PAUSE" if stop_event => (a.get("decision") == Some(&Value::from("block"))
                    && text.contains("until a RESUME"))
                .then_some(())
                .ok_or(format!("the paused turn is not kept alive: {a}")),
                "STEER" | "INFO" if stop_event => (a.get("decision")
                    == Some(&Value::from("block")))
                .then_some(())
                .ok_or(format!("Stop with a signal pending is not blocked: {a}")),
                "PAUSE+RESUME" if pre_tool && denied(a) => {
                    Err(format!("resumed, yet the call is denied: {a}"))
                }
                _ => Ok(()),
            }
        }
    }
}

/// One named case per runtime × event × signal: the documented input in, the answer valid
/// against the runtime's documented output shape, meaning what the signal means, and the
/// signal handed over once (a second call answers nothing about it).
#[test]
fn every_runtime_event_and_signal_is_answered_in_the_documented_shape() {
    let mut failures = Vec::new();
    let mut cases = 0;
    for (runtime, events) in EVENTS {
        for event in events {
            let schema = output_schema(runtime, event);
            for signal in ["nothing", "STEER", "INFO", "ABORT", "PAUSE", "PAUSE+RESUME"] {
                cases += 1;
                let name = format!("{runtime} × {event} × {signal}");
                let dir = tempfile::tempdir().unwrap();
                let root = dir.path().join("signals");
                let mb = Mailbox::init(&root).unwrap();
                match signal {
                    "nothing" => {}
                    "PAUSE+RESUME" => {
                        send(&mb, SignalType::Pause, "hold on");
                        send(&mb, SignalType::Resume, "carry on");
                    }
                    s => send(&mb, SignalType::parse(s).unwrap(), "the message"),
                }
                let out = hook(&root, runtime, event, &[]);
                if !out.status.success() || !out.stderr.is_empty() {
                    failures.push(format!(
                        "{name}: exit {:?}, stderr {}",
                        out.status.code(),
                        String::from_utf8_lossy(&out.stderr)
                    ));
                    continue;
                }
                let stdout = String::from_utf8(out.stdout).unwrap();
                let answer: Option<Value> = if stdout.trim().is_empty() {
                    None
                } else {
                    match serde_json::from_str(stdout.trim()) {
                        Ok(v) => Some(v),
                        Err(e) => {
                            failures.push(format!("{name}: not JSON ({e}): {stdout}"));
                            continue;
                        }
                    }
                };
                if let Some(a) = &answer {
                    let errors: Vec<String> =
                        schema.iter_errors(a).map(|e| e.to_string()).collect();
                    if !errors.is_empty() {
                        failures.push(format!("{name}: {a} is not valid: {errors:?}"));
                        continue;
                    }
                }
                if let Err(why) = expect(runtime, event, signal, answer.as_ref()) {
                    failures.push(format!("{name}: {why}"));
                    continue;
                }
                // Handed over once: what was answered is never answered again; a PAUSE in
                // force is carried over (it is still in force at the next call).
                let again = hook(&root, runtime, event, &[]);
                let again = String::from_utf8(again.stdout).unwrap();
                let pending: Vec<_> = mb.pending().unwrap();
                match signal {
                    // A PAUSE is a state: recorded, in force at the next call too.
                    "PAUSE" => {
                        if mb.paused("Executor").unwrap().is_none() {
                            failures.push(format!("{name}: the PAUSE was lost"));
                        }
                        let stop = matches!(*event, "Stop" | "agentStop");
                        if !stop && !again.contains("PAUSE") {
                            failures.push(format!("{name}: not paused at the next call: {again}"));
                        }
                        if !pending.is_empty() {
                            failures.push(format!("{name}: left pending: {pending:?}"));
                        }
                    }
                    _ => {
                        if again.contains("the message") || again.contains("carry on") {
                            failures.push(format!("{name}: answered twice: {again}"));
                        }
                        if !pending.is_empty() {
                            failures.push(format!("{name}: left pending: {pending:?}"));
                        }
                        if mb.paused("Executor").unwrap().is_some() {
                            failures.push(format!("{name}: a PAUSE recorded"));
                        }
                    }
                }
            }
        }
    }
    assert_eq!(cases, 14 * 6);
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A PAUSE holds a tool call until a RESUME arrives (woken by the event, not the bound), and
/// the call then goes on with the RESUME as context.
#[test]
fn a_pause_holds_the_tool_call_until_resume() {
    let (_dir, root, mb) = fresh();
    send(&mb, SignalType::Pause, "hold on");
    let resumer = {
        let root = root.clone();
        std::thread::spawn(move || {
            // Sent once the call is held: the hook sleeps on the events of inputs/.
            common::wait_until(
                "the hook holds the call",
                std::time::Duration::from_secs(30),
                || common::watchers(&root.join("inputs")) > 0,
            );
            send(&Mailbox::open(&root).unwrap(), SignalType::Resume, "go");
        })
    };
    let out = hook(&root, "claude", "PreToolUse", &["--pause-wait", "60s"]);
    resumer.join().unwrap();
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        a.pointer("/hookSpecificOutput/permissionDecision"),
        None,
        "{a}"
    );
    assert!(text_of(&a).contains("RESUME"), "{a}");
    assert!(mb.pending().unwrap().is_empty());
    // And a PAUSE with no RESUME survives any number of calls.
    send(&mb, SignalType::Pause, "hold on");
    for _ in 0..3 {
        let out = hook(&root, "codex", "PreToolUse", &[]);
        let a: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {:?} / {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(
            a.pointer("/hookSpecificOutput/permissionDecision"),
            Some(&Value::from("deny")),
            "{a}"
        );
    }
    send(&mb, SignalType::Resume, "go");
    let out = hook(&root, "codex", "PreToolUse", &[]);
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        a.pointer("/hookSpecificOutput/permissionDecision")
            .is_none(),
        "{a}"
    );
    assert!(mb.pending().unwrap().is_empty());
    assert!(mb.paused("Executor").unwrap().is_none());
}

/// A PAUSE holds every tool call of the agent, parallel ones included, and a hook killed
/// while it holds one loses nothing: the PAUSE is a recorded state, not a message one call
/// takes away.
#[test]
fn a_pause_holds_parallel_calls_and_survives_a_killed_hook() {
    let (_dir, root, mb) = fresh();
    send(&mb, SignalType::Pause, "hold on");
    // A holder, killed in the middle of its hold.
    let mut holder = hold_a_tool_call(&root, &mb);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(
        mb.paused("Executor").unwrap().is_some(),
        "the PAUSE was lost"
    );
    // Three calls at once: every one is held, then denied.
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let root = root.clone();
            std::thread::spawn(move || hook(&root, "claude", "PreToolUse", &["--pause-wait", "1s"]))
        })
        .collect();
    for c in calls {
        let out = c.join().unwrap();
        let a: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        assert_eq!(
            a.pointer("/hookSpecificOutput/permissionDecision"),
            Some(&Value::from("deny")),
            "{a}"
        );
    }
    // One RESUME releases calls held in parallel, whichever of them takes it.
    let held: Vec<_> = (0..2)
        .map(|_| {
            let root = root.clone();
            std::thread::spawn(move || {
                let t = std::time::Instant::now();
                let out = hook(&root, "claude", "PreToolUse", &["--pause-wait", "20s"]);
                (out, t.elapsed())
            })
        })
        .collect();
    // Both held (each sleeps on the events of inputs/) before the RESUME comes.
    common::wait_until(
        "both calls are held",
        std::time::Duration::from_secs(30),
        || common::watchers(&root.join("inputs")) >= 2,
    );
    send(&mb, SignalType::Resume, "go");
    for h in held {
        let (out, took) = h.join().unwrap();
        assert!(took.as_secs() < 10, "held for {took:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("\"deny\""), "{text}");
    }
    assert!(mb.paused("Executor").unwrap().is_none());
}

/// A malformed or unknown event never breaks the agent: exit 0, no answer, one line on
/// stderr; `--strict` makes it an error. Nothing is claimed.
#[test]
fn a_bad_event_answers_nothing_and_claims_nothing() {
    let (_dir, root, mb) = fresh();
    send(&mb, SignalType::Steer, "keep me");
    for (input, strict) in [
        ("not json", false),
        ("[1, 2]", false),
        ("{\"hook_event_name\": \"Notification\"}", false),
        ("{}", false),
        ("not json", true),
    ] {
        let mut c = Command::new(BIN);
        c.arg("--root")
            .arg(&root)
            .args(["hook", "claude", "--as", "Executor"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if strict {
            c.arg("--strict");
        }
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(if strict { 2 } else { 0 }),
            "{input}"
        );
        assert!(out.stdout.is_empty(), "{input}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).lines().count(),
            1,
            "{input}"
        );
    }
    assert_eq!(mb.pending().unwrap().len(), 1, "nothing claimed");
}

/// An event whose text holds a lone surrogate, as a JavaScript runtime escapes one (a prompt
/// cut inside a character), is answered as any other; the surrogate is text sigbox does not
/// read.
#[test]
fn an_event_with_a_lone_surrogate_is_answered() {
    let (_dir, root, mb) = fresh();
    send(&mb, SignalType::Steer, "still here");
    let event = br#"{"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "cut \ud83d here \udc00", "cwd": "/"}"#;
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["hook", "claude", "--as", "Executor", "--strict"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(event).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(text_of(&answer).contains("still here"), "{answer}");
    assert!(mb.pending().unwrap().is_empty());
}

/// An answer that cannot be written hands nothing over: the next call gets the signal again,
/// marked as a redelivery.
#[test]
fn an_answer_not_written_comes_back_marked() {
    let (_dir, root, mb) = fresh();
    send(&mb, SignalType::Steer, "say it again");
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["hook", "claude", "--as", "Executor"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before the hook writes: its write fails (EPIPE).
    drop(child.stdout.take());
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fixture("claude", "PostToolUse"))
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot write the answer"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = hook(&root, "claude", "PostToolUse", &[]);
    let text = String::from_utf8(again.stdout).unwrap();
    assert!(text.contains("say it again"), "{text}");
    assert!(text.contains("delivered again"), "{text}");
    let third = hook(&root, "claude", "PostToolUse", &[]);
    assert!(third.stdout.is_empty());
}

/// Two hook processes for one agent, racing over a thousand signals sent meanwhile: each
/// signal is in exactly one answer.
#[test]
fn two_hooks_racing_hand_each_signal_over_once() {
    const N: usize = 1000;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    Mailbox::init(&root).unwrap();
    let sender = {
        let root = root.clone();
        std::thread::spawn(move || {
            let mb = Mailbox::open(&root).unwrap();
            for i in 0..N {
                send(&mb, SignalType::Info, &format!("m{i}."));
            }
        })
    };
    let racer = |root: PathBuf| {
        std::thread::spawn(move || {
            let mut seen: Vec<String> = Vec::new();
            let mut idle = 0;
            while idle < 20 {
                let out = hook(&root, "claude", "PostToolUse", &[]);
                assert!(out.status.success());
                if out.stdout.is_empty() {
                    idle += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    continue;
                }
                idle = 0;
                let a: Value = serde_json::from_slice(&out.stdout).unwrap();
                for line in text_of(&a).lines() {
                    if let Some(m) = line.split(": ").nth(1) {
                        seen.push(m.to_string());
                    }
                }
            }
            seen
        })
    };
    let a = racer(root.clone());
    let b = racer(root.clone());
    sender.join().unwrap();
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    assert!(
        !a.is_empty() && !b.is_empty(),
        "both took part: {} / {}",
        a.len(),
        b.len()
    );
    let mut count: HashMap<String, usize> = HashMap::new();
    for m in a.iter().chain(&b) {
        *count.entry(m.clone()).or_default() += 1;
    }
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "handed over twice: {twice:?}");
    for i in 0..N {
        assert!(
            count.contains_key(&format!("m{i}.")),
            "m{i} never handed over"
        );
    }
}

fn sigbox(cwd: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env_remove("SIGBOX_ROOT")
        .output()
        .unwrap()
}

/// Install and uninstall keep every other hook and setting, are idempotent, write a backup,
/// and refuse a malformed settings file without touching it.
#[test]
fn install_and_uninstall_round_trip_on_existing_settings() {
    let cases: [(&str, &str, &str); 3] = [
        (
            "claude",
            ".claude/settings.json",
            r#"{"model": "opus", "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}], "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}]}, "permissions": {"allow": ["Bash(ls)"]}}"#,
        ),
        (
            "codex",
            ".codex/hooks.json",
            r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "python3 check.py", "timeout": 30}]}]}}"#,
        ),
        (
            "copilot",
            ".github/hooks/sigbox.json",
            r#"{"version": 1, "hooks": {"preToolUse": [{"type": "command", "bash": "./audit.sh", "timeoutSec": 10}]}}"#,
        ),
    ];
    for (runtime, file, original) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, original).unwrap();
        let before: Value = serde_json::from_str(original).unwrap();
        // Dry run: nothing written.
        let out = sigbox(
            dir.path(),
            &["hooks", "install", runtime, "--as", "Executor", "--dry-run"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), original);
        let out = sigbox(
            dir.path(),
            &["--json", "hooks", "install", runtime, "--as", "Executor"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let installed: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        // Everything that was there is still there.
        for (k, v) in before.as_object().unwrap() {
            if k != "hooks" {
                assert_eq!(&installed[k], v, "{runtime}: {k}");
            }
        }
        for (event, groups) in before["hooks"].as_object().unwrap() {
            for g in groups.as_array().unwrap() {
                assert!(
                    installed["hooks"][event].as_array().unwrap().contains(g),
                    "{runtime}: {event} lost {g}"
                );
            }
        }
        let text = installed.to_string();
        assert!(
            text.contains("hook ") && text.contains("--as Executor"),
            "{text}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(format!("{file}.sigbox-backup"))).unwrap(),
            original
        );
        // Idempotent.
        let out = sigbox(
            dir.path(),
            &["--json", "hooks", "install", runtime, "--as", "Executor"],
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["changed"], false, "{runtime}: {report}");
        assert_eq!(
            serde_json::from_slice::<Value>(&std::fs::read(&path).unwrap()).unwrap(),
            installed
        );
        // The installed command really answers: run it as the runtime would.
        let out = sigbox(dir.path(), &["hooks", "uninstall", runtime]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let after: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            after, before,
            "{runtime}: uninstall gives back the original"
        );
        // A malformed file is refused and left as it was.
        let broken = "{\"hooks\": {\"PreToolUse\": [";
        std::fs::write(&path, broken).unwrap();
        let out = sigbox(
            dir.path(),
            &["hooks", "install", runtime, "--as", "Executor"],
        );
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("untouched"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), broken);
        std::fs::write(&path, r#"{"hooks": {"PreToolUse": "oops"}}"#).unwrap();
        let out = sigbox(
            dir.path(),
            &["hooks", "install", runtime, "--as", "Executor"],
        );
        assert_eq!(out.status.code(), Some(2));
    }
}

/// The command `hooks install` writes runs as written and answers for the mailbox it names.
#[test]
fn the_installed_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("my signals");
    let mb = Mailbox::init(&root).unwrap();
    let out = sigbox(
        dir.path(),
        &[
            "--root",
            "my signals",
            "hooks",
            "install",
            "claude",
            "--as",
            "Executor",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let settings: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(".claude/settings.json")).unwrap())
            .unwrap();
    let command = settings["hooks"]["PostToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    send(&mb, SignalType::Steer, "from the installed hook");
    let elsewhere = tempfile::tempdir().unwrap();
    let mut child = Command::new("sh")
        .args(["-c", &command])
        .current_dir(elsewhere.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fixture("claude", "PostToolUse"))
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("from the installed hook"),
        "{command}"
    );
}

/// The settings file's neighbours are never followed: a symlink or FIFO planted at the backup's
/// name is replaced, not written through; a user's own hook whose program merely starts with
/// `sigbox` is kept; shapes a runtime would not read are refused untouched.
#[test]
fn install_follows_nothing_and_keeps_what_is_not_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let claude = dir.path().join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    let settings = claude.join("settings.json");
    let own = r#"{"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "/opt/tools/sigbox-audit --root /x hook claude --as Executor"}]}]}}"#;
    std::fs::write(&settings, own).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "VICTIM").unwrap();
    std::os::unix::fs::symlink(&victim, claude.join("settings.json.sigbox-backup")).unwrap();
    let out = sigbox(
        dir.path(),
        &["hooks", "install", "claude", "--as", "Executor"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "VICTIM");
    let backup = claude.join("settings.json.sigbox-backup");
    assert!(!backup.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), own);
    let out = sigbox(dir.path(), &["hooks", "uninstall", "claude"]);
    assert!(out.status.success());
    let after: Value = serde_json::from_slice(&std::fs::read(&settings).unwrap()).unwrap();
    assert_eq!(
        after,
        serde_json::from_str::<Value>(own).unwrap(),
        "the user's hook kept"
    );
    // Shapes refused, untouched.
    for (runtime, file, bad) in [
        ("claude", ".claude/settings.json", r#"{"hooks": "none"}"#),
        (
            "copilot",
            ".github/hooks/sigbox.json",
            r#"{"version": 2, "hooks": {}}"#,
        ),
        ("copilot", ".github/hooks/sigbox.json", r#"{"hooks": {}}"#),
    ] {
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bad).unwrap();
        let out = sigbox(
            dir.path(),
            &["hooks", "install", runtime, "--as", "Executor"],
        );
        assert_eq!(out.status.code(), Some(2), "{runtime} {bad}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), bad);
    }
}

/// A hook killed while it holds a paused tool call has answered nothing: a STEER it had
/// claimed before the PAUSE comes again at the next call, marked.
#[test]
fn a_hook_killed_while_holding_hands_nothing_over() {
    let (_dir, root, mb) = fresh();
    send(&mb, SignalType::Steer, "keep me");
    send(&mb, SignalType::Pause, "hold on");
    let mut holder = hold_a_tool_call(&root, &mb);
    holder.kill().unwrap();
    holder.wait().unwrap();
    let out = hook(&root, "claude", "PostToolUse", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("keep me"), "{text}");
    assert!(text.contains("delivered again"), "{text}");
    assert!(text.contains("PAUSE"), "still paused: {text}");
}

/// Parallel tool calls racing for a PAUSE still in `inputs/`: whichever claims it, none of
/// the others runs unpaused (reading the record, claiming and recording is one locked step).
#[test]
fn parallel_calls_racing_for_a_pause_are_all_held() {
    for round in 0..4 {
        let (_dir, root, mb) = fresh();
        send(&mb, SignalType::Pause, "hold on");
        let calls: Vec<_> = (0..3)
            .map(|_| {
                let root = root.clone();
                std::thread::spawn(move || {
                    hook(&root, "claude", "PreToolUse", &["--pause-wait", "500ms"])
                })
            })
            .collect();
        for c in calls {
            let out = c.join().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains("\"deny\""),
                "round {round}: a call ran: {text:?}"
            );
        }
    }
}

/// Two mailboxes can share a project: each install and uninstall touches only the entries of
/// its own root.
#[test]
fn hooks_of_two_mailboxes_live_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    for root in ["a", "b"] {
        let out = sigbox(
            dir.path(),
            &[
                "--root", root, "hooks", "install", "claude", "--as", "Executor",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let read =
        || -> String { std::fs::read_to_string(dir.path().join(".claude/settings.json")).unwrap() };
    let both = read();
    assert_eq!(both.matches(" hook claude --as ").count(), 10, "{both}");
    let out = sigbox(dir.path(), &["--root", "a", "hooks", "uninstall", "claude"]);
    assert!(out.status.success());
    let left = read();
    assert_eq!(left.matches(" hook claude --as ").count(), 5, "{left}");
    assert!(
        left.contains("/b hook claude") && !left.contains("/a hook claude"),
        "{left}"
    );
}

/// The events each runtime's installed file registers, by the fixture that stands for them.
fn installed_events(runtime: &str) -> &'static [&'static str] {
    match runtime {
        "copilot" => &["sessionStart", "preToolUse", "postToolUse", "agentStop"],
        _ => &[
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PostToolUse",
            "Stop",
        ],
    }
}

/// The command line the runtime's settings file holds for `event`, as `hooks install` wrote it.
fn installed_command(project: &Path, runtime: &str, event: &str) -> String {
    let file = match runtime {
        "claude" => ".claude/settings.json",
        "codex" => ".codex/hooks.json",
        _ => ".github/hooks/sigbox.json",
    };
    let settings: Value =
        serde_json::from_slice(&std::fs::read(project.join(file)).unwrap()).unwrap();
    let entry = &settings["hooks"][event][0];
    match runtime {
        "copilot" => entry["bash"].as_str().unwrap().to_string(),
        _ => entry["hooks"][0]["command"].as_str().unwrap().to_string(),
    }
}

/// Runs `command` as the runtime does (`shell -c COMMAND`, the event on stdin).
fn run_as_runtime(shell: &str, command: &str, event: &[u8], cwd: &Path) -> Output {
    let mut child = Command::new(shell)
        .args(["-c", command])
        .current_dir(cwd)
        .env_remove("SIGBOX_ROOT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A hook that refuses its command line may be gone before the event is written: the pipe
    // is then closed, which is no failure of the hook.
    if let Err(e) = child.stdin.take().unwrap().write_all(event) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

/// Installed hooks whose `sigbox` has since moved away answer nothing and exit 0 (no decision
/// for every runtime: Copilot denies every tool call on any other exit of `preToolUse`), and
/// leave the signals for later; the same command answers once the program is back.
#[test]
fn an_installed_hook_whose_program_moved_away_is_no_decision() {
    for runtime in ["claude", "codex", "copilot"] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("signals");
        let mb = Mailbox::init(&root).unwrap();
        // The installing program is a copy that then moves away, as a rebuilt or reinstalled
        // binary does.
        let bin_dir = dir.path().join("bin dir");
        std::fs::create_dir_all(&bin_dir).unwrap();
        let program = bin_dir.join("sigbox");
        // Copied by a process of its own: a copy made here would hold the new file open for
        // writing in this process, and another test's fork meanwhile would keep that
        // descriptor until its exec, failing the copy's exec with "Text file busy".
        let cp = Command::new("cp").arg(BIN).arg(&program).status().unwrap();
        assert!(cp.success());
        let out = Command::new(&program)
            .args(["--root", "signals", "hooks", "install", runtime, "--as"])
            .arg("Executor")
            .current_dir(dir.path())
            .env_remove("SIGBOX_ROOT")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        send(&mb, SignalType::Steer, "waits for the hook");
        std::fs::rename(&program, bin_dir.join("moved")).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        for &event in installed_events(runtime) {
            let command = installed_command(dir.path(), runtime, event);
            for shell in ["sh", "bash"] {
                let out =
                    run_as_runtime(shell, &command, &fixture(runtime, event), elsewhere.path());
                let err = String::from_utf8_lossy(&out.stderr);
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{runtime} {event} under {shell}: {command}: {err}"
                );
                assert!(out.stdout.is_empty(), "{runtime} {event}: a decision");
                assert!(err.contains("is missing"), "{runtime} {event}: {err}");
            }
        }
        assert_eq!(mb.pending().unwrap().len(), 1, "{runtime}: taken unread");
        // Back in place: the same command line answers.
        std::fs::rename(bin_dir.join("moved"), &program).unwrap();
        let event = if runtime == "copilot" {
            "postToolUse"
        } else {
            "PostToolUse"
        };
        let command = installed_command(dir.path(), runtime, event);
        let out = run_as_runtime("sh", &command, &fixture(runtime, event), elsewhere.path());
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("waits for the hook"),
            "{runtime}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Recognized as sigbox's own: uninstall removes every entry.
        let out = sigbox(
            dir.path(),
            &["--root", "signals", "hooks", "uninstall", runtime],
        );
        let out = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.contains(&format!(
                "removed {} sigbox hook",
                installed_events(runtime).len()
            )),
            "{runtime}: {out}"
        );
    }
}

/// Whatever goes wrong, `sigbox hook` answers nothing and exits 0 (no decision in every
/// runtime), claiming nothing: a command line it refuses, an invalid `--as`, a bad settle
/// window, a stdout that reaches nobody. `--strict` still fails, for debugging.
#[test]
fn a_hook_that_fails_is_no_decision() {
    let (_dir, root, mb) = fresh();
    send(&mb, SignalType::Abort, "must not be lost");
    let root_s = root.to_str().unwrap();
    let cases: [(&str, &[&str], &str); 8] = [
        (
            "an unknown option, --durability before the subcommand",
            &[
                "--durability",
                "relaxed",
                "hook",
                "claude",
                "--as",
                "Executor",
                "--from-a-newer-version",
            ],
            "",
        ),
        (
            "an unknown option, --durability=relaxed before the subcommand",
            &[
                "--durability=relaxed",
                "hook",
                "claude",
                "--as",
                "Executor",
                "--from-a-newer-version",
            ],
            "",
        ),
        (
            "an unknown option",
            &[
                "hook",
                "copilot",
                "--as",
                "Executor",
                "--event",
                "preToolUse",
                "--from-a-newer-version",
            ],
            "",
        ),
        (
            "an invalid --as",
            &[
                "hook",
                "copilot",
                "--as",
                "not an agent!",
                "--event",
                "preToolUse",
            ],
            "",
        ),
        ("no --as", &["hook", "claude"], ""),
        (
            "an unknown runtime",
            &["hook", "gemini", "--as", "Executor"],
            "",
        ),
        (
            "a bad settle window",
            &["--settle", "soon", "hook", "claude", "--as", "Executor"],
            "",
        ),
        (
            "stdout at /dev/null",
            &["hook", "claude", "--as", "Executor"],
            ">/dev/null",
        ),
    ];
    for (what, args, redirect) in cases {
        for runtime_event in [
            fixture("copilot", "preToolUse"),
            fixture("claude", "PreToolUse"),
        ] {
            let command = format!(
                "exec \"$0\" --root \"$1\" {} {redirect}",
                args.join(" ").replace("not an agent!", "'not an agent!'")
            );
            let out = run_as_runtime_args(&command, root_s, &runtime_event);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{what}: {err}");
            assert!(out.stdout.is_empty(), "{what}: a decision");
            assert!(err.contains("hook"), "{what}: not said: {err}");
        }
        assert_eq!(mb.pending().unwrap().len(), 1, "{what}: taken");
    }
    // --strict: the error is the status, for a person debugging.
    let out = run_as_runtime_args(
        "exec \"$0\" --root \"$1\" hook claude --as Executor --strict --from-a-newer-version",
        root_s,
        &fixture("claude", "PreToolUse"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(mb.pending().unwrap().len(), 1);
}

/// `sh -c COMMAND BIN ROOT`, the event on stdin.
fn run_as_runtime_args(command: &str, root: &str, event: &[u8]) -> Output {
    let mut child = Command::new("sh")
        .args(["-c", command, BIN, root])
        .env_remove("SIGBOX_ROOT")
        .env_remove("SIGBOX_SETTLE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command line it refuses ends it before it reads the event: the pipe may be closed.
    let _ = child.stdin.take().unwrap().write_all(event);
    child.wait_with_output().unwrap()
}

/// A PAUSE whose answer could not be written is given again, and that answer says so, once:
/// the answers after it, while the PAUSE is in force, do not.
#[test]
fn a_pause_given_again_says_so_once() {
    let (_dir, root, mb) = fresh();
    send(&mb, SignalType::Pause, "hold on");
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["hook", "claude", "--as", "Executor"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fixture("claude", "PostToolUse"))
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot write the answer"),
        "{out:?}"
    );
    let again = String::from_utf8(hook(&root, "claude", "PostToolUse", &[]).stdout).unwrap();
    assert!(again.contains("PAUSE"), "{again}");
    assert_eq!(again.matches("delivered again").count(), 1, "{again}");
    for (runtime, event) in [
        ("claude", "PostToolUse"),
        ("claude", "PreToolUse"),
        ("codex", "UserPromptSubmit"),
        ("claude", "Stop"),
        ("copilot", "postToolUse"),
    ] {
        let later = String::from_utf8(hook(&root, runtime, event, &[]).stdout).unwrap();
        assert!(later.contains("PAUSE"), "{runtime} {event}: {later}");
        assert!(
            !later.contains("delivered again"),
            "{runtime} {event}: said again: {later}"
        );
    }
    assert!(mb.pending().unwrap().is_empty());
}

/// Copilot CLI runs the hooks of a project's `.claude/settings.json` with its own payload
/// (PascalCase events, a `timestamp`) and reads only its own answer fields: the Claude hook
/// answers it in Copilot's envelope, valid against Copilot's documented output, and runs no
/// pass on the event whose answer Copilot drops.
#[test]
fn copilot_running_a_claude_hook_is_answered_in_its_own_envelope() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hooks/copilot-vscode");
    for (event, copilot_event) in [
        ("SessionStart", Some("sessionStart")),
        ("UserPromptSubmit", None),
        ("PreToolUse", Some("preToolUse")),
        ("PostToolUse", Some("postToolUse")),
        ("Stop", Some("agentStop")),
    ] {
        let (_d, root, mb) = fresh();
        send(&mb, SignalType::Steer, "use the v2 API");
        let payload = std::fs::read(dir.join(format!("{event}.json"))).unwrap();
        let mut child = Command::new(BIN)
            .arg("--root")
            .arg(&root)
            .args(["hook", "claude", "--as", "Executor"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&payload).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{event}: {out:?}"
        );
        let Some(copilot_event) = copilot_event else {
            assert!(
                out.stdout.is_empty(),
                "{event}: answered where Copilot drops it"
            );
            assert_eq!(mb.pending().unwrap().len(), 1, "{event}: taken unread");
            continue;
        };
        let a: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{event}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        let errors: Vec<String> = output_schema("copilot", copilot_event)
            .iter_errors(&a)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{event}: {a} {errors:?}");
        assert!(a.get("hookSpecificOutput").is_none(), "{event}: {a}");
        assert!(text_of(&a).contains("use the v2 API"), "{event}: {a}");
        assert!(mb.pending().unwrap().is_empty());
    }
    // Claude Code's own payload stays Claude's, should it ever carry a `timestamp`.
    let (_d, root, mb) = fresh();
    send(&mb, SignalType::Steer, "use the v2 API");
    let mut payload: Value = serde_json::from_slice(&fixture("claude", "PostToolUse")).unwrap();
    payload["timestamp"] = Value::from("2026-01-07T08:00:11.000Z");
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["hook", "claude", "--as", "Executor"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    let a: Value = serde_json::from_slice(&child.wait_with_output().unwrap().stdout).unwrap();
    assert!(
        a.pointer("/hookSpecificOutput/additionalContext").is_some(),
        "{a}"
    );
}

/// Both of an agent's hooks run under Copilot (its own file and the project's Claude
/// settings), racing at every tool call: every STEER is handed over once, always in Copilot's
/// envelope.
#[test]
fn claude_and_copilot_hooks_racing_under_copilot_hand_each_steer_over_once() {
    let (_dir, root, mb) = fresh();
    let vscode = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hooks/copilot-vscode/PreToolUse.json"),
    )
    .unwrap();
    for i in 0..6 {
        send(&mb, SignalType::Steer, &format!("steer {i}."));
    }
    let schema = output_schema("copilot", "preToolUse");
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..20 {
        let run = |args: Vec<&'static str>, payload: Vec<u8>, root: PathBuf| {
            std::thread::spawn(move || {
                let mut child = Command::new(BIN)
                    .arg("--root")
                    .arg(&root)
                    .args(args)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                child.stdin.take().unwrap().write_all(&payload).unwrap();
                child.wait_with_output().unwrap()
            })
        };
        let a = run(
            vec!["hook", "claude", "--as", "Executor"],
            vscode.clone(),
            root.clone(),
        );
        let b = run(
            vec![
                "hook",
                "copilot",
                "--as",
                "Executor",
                "--event",
                "preToolUse",
            ],
            fixture("copilot", "preToolUse"),
            root.clone(),
        );
        for out in [a.join().unwrap(), b.join().unwrap()] {
            if out.stdout.is_empty() {
                continue;
            }
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(
                schema.iter_errors(&v).next().is_none(),
                "not Copilot's: {v}"
            );
            for line in text_of(&v).lines() {
                if let Some(m) = line.split(": ").nth(1).filter(|m| m.starts_with("steer")) {
                    seen.push(m.to_string());
                }
            }
        }
        if mb.pending().unwrap().is_empty() {
            break;
        }
        // Each preToolUse answer holds a call back: send more as a model would.
    }
    seen.sort();
    let want: Vec<String> = (0..6).map(|i| format!("steer {i}.")).collect();
    assert_eq!(seen, want, "each STEER once");
}

/// A paused turn is kept alive at Stop (the runtimes document a Stop `block` that makes the
/// agent go on): the hook holds, a RESUME then goes on with the work without anyone typing;
/// past `--pause-keep` the turn ends.
#[test]
fn a_paused_turn_is_kept_alive_until_resume() {
    let (_dir, root, mb) = fresh();
    send(&mb, SignalType::Pause, "hold on");
    for (runtime, event) in [
        ("claude", "Stop"),
        ("codex", "Stop"),
        ("copilot", "agentStop"),
    ] {
        let out = hook(&root, runtime, event, &[]);
        let a: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{runtime}: {e}: {out:?}"));
        assert_eq!(a["decision"], "block", "{runtime}: {a}");
        let reason = a["reason"].as_str().unwrap();
        assert!(reason.contains("PAUSE from alice"), "{runtime}: {a}");
        assert!(reason.contains("until a RESUME"), "{runtime}: {a}");
        assert!(
            output_schema(runtime, event)
                .iter_errors(&a)
                .next()
                .is_none()
        );
        assert!(mb.paused("Executor").unwrap().is_some());
    }
    // A RESUME during the hold: the turn goes on, with it.
    let resumer = {
        let root = root.clone();
        std::thread::spawn(move || {
            // During the hold: once the hook sleeps on the events of inputs/.
            common::wait_until(
                "the hook holds the turn",
                std::time::Duration::from_secs(30),
                || common::watchers(&root.join("inputs")) > 0,
            );
            send(&Mailbox::open(&root).unwrap(), SignalType::Resume, "go on");
        })
    };
    let t = std::time::Instant::now();
    let out = hook(&root, "claude", "Stop", &["--pause-wait", "30s"]);
    resumer.join().unwrap();
    assert!(t.elapsed().as_secs() < 20, "held for {:?}", t.elapsed());
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["decision"], "block", "{a}");
    let reason = a["reason"].as_str().unwrap();
    assert!(reason.contains("RESUME from alice"), "{a}");
    assert!(reason.contains("The PAUSE is over: go on"), "{a}");
    assert!(!reason.contains("until a RESUME"), "{a}");
    assert!(mb.paused("Executor").unwrap().is_none());
    assert!(mb.pending().unwrap().is_empty());
    // Past --pause-keep the turn ends: no answer.
    send(&mb, SignalType::Pause, "hold on");
    let out = hook(&root, "claude", "Stop", &["--pause-keep", "0"]);
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(mb.paused("Executor").unwrap().is_some());
}

/// True when `small`'s bytes all appear in `big`, in order: nothing of it was changed or
/// dropped, only bytes added.
fn kept_in_order(small: &[u8], big: &[u8]) -> bool {
    let mut it = big.iter();
    small.iter().all(|b| it.any(|c| c == b))
}

/// Settings files as people and tools write them: install changes only what it inserts
/// (indentation, escapes, number forms, key order, line endings and a missing final newline
/// all kept), and uninstall gives back the file byte for byte.
#[test]
fn install_then_uninstall_gives_back_every_byte() {
    let cases: Vec<(&str, &str, String)> = vec![
        (
            "claude",
            ".claude/settings.json",
            "{\n    \"model\": \"opus\",\n    \"env\": {\"NAME\": \"Caf\\u00e9 \\/ x\"},\n    \"n\": [1.0, 1e3, 100000000000000000000, -0],\n    \"hooks\": {\n        \"PreToolUse\": [\n            {\"matcher\": \"Bash\", \"hooks\": [{\"type\": \"command\", \"command\": \"./guard.sh\"}]}\n        ],\n        \"Notification\": [\n            {\n                \"hooks\": [\n                    {\n                        \"type\": \"command\",\n                        \"command\": \"notify-send hi\"\n                    }\n                ]\n            }\n        ]\n    },\n    \"permissions\": {\n        \"allow\": [\"Bash(ls)\"]\n    }\n}".into(),
        ),
        (
            "claude",
            ".claude/settings.json",
            "{\r\n\t\"hooks\": {\r\n\t\t\"Notification\": []\r\n\t},\r\n\t\"statusLine\": {\"type\": \"command\", \"command\": \"~/bin/status\"}\r\n}\r\n".into(),
        ),
        (
            "claude",
            ".claude/settings.json",
            r#"{"permissions":{"allow":["Bash(npm test)"],"deny":[]},"model":"sonnet"}"#.into(),
        ),
        (
            "claude",
            ".claude/settings.json",
            "{\n  \"$schema\": \"https://json.schemastore.org/claude-code-settings.json\",\n  \"hooks\": {\n    \"Stop\": [],\n    \"PostToolUse\": [\n      {\n        \"matcher\": \"Edit|Write\",\n        \"hooks\": [\n          { \"type\": \"command\", \"command\": \"npx prettier --write \\\"$CLAUDE_FILE_PATHS\\\"\" }\n        ]\n      }\n    ]\n  }\n}\n".into(),
        ),
        (
            "codex",
            ".codex/hooks.json",
            "{\n  \"hooks\": {\n    \"Stop\": [\n      {\n        \"hooks\": [\n          {\n            \"type\": \"command\",\n            \"command\": \"python3 ~/.codex/hooks/turn_usage.py\",\n            \"timeout\": 5\n          }\n        ]\n      }\n    ]\n  }\n}\n".into(),
        ),
        (
            "copilot",
            ".github/hooks/sigbox.json",
            "{\n    \"version\": 1,\n    \"hooks\": {\n        \"preToolUse\": [\n            {\n                \"type\": \"command\",\n                \"bash\": \"./scripts/audit.sh\",\n                \"powershell\": \"./scripts/audit.ps1\",\n                \"timeoutSec\": 10\n            }\n        ],\n        \"sessionEnd\": []\n    }\n}\n".into(),
        ),
        (
            "copilot",
            ".github/hooks/sigbox.json",
            "{\"version\": 1, \"hooks\": {}}".into(),
        ),
    ];
    for (n, (runtime, file, original)) in cases.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, original).unwrap();
        let out = sigbox(
            dir.path(),
            &["hooks", "install", runtime, "--as", "Executor"],
        );
        assert!(
            out.status.success(),
            "case {n}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let installed = std::fs::read(&path).unwrap();
        assert!(
            kept_in_order(original.as_bytes(), &installed),
            "case {n}: a byte of the file changed:\n{}",
            String::from_utf8_lossy(&installed)
        );
        let v: Value = serde_json::from_slice(&installed).unwrap();
        let before: Value = serde_json::from_str(original).unwrap();
        for (k, val) in before.as_object().unwrap() {
            if k != "hooks" {
                assert_eq!(&v[k], val, "case {n}: {k}");
            }
        }
        assert_eq!(
            v.to_string().matches(" hook ").count(),
            installed_events(runtime).len(),
            "case {n}"
        );
        if original.contains("\r\n") {
            let text = String::from_utf8_lossy(&installed).to_string();
            assert_eq!(
                text.matches('\n').count(),
                text.matches("\r\n").count(),
                "case {n}: line endings mixed:\n{text}"
            );
        }
        // Installing again changes nothing.
        let out = sigbox(
            dir.path(),
            &["hooks", "install", runtime, "--as", "Executor"],
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("already installed"));
        assert_eq!(std::fs::read(&path).unwrap(), installed, "case {n}");
        let out = sigbox(dir.path(), &["hooks", "uninstall", runtime]);
        assert!(out.status.success(), "case {n}");
        // The one thing not given back: an empty list (or `hooks` object) that sigbox's
        // entries went into is removed with them, as one they created would be (both mean
        // "no hooks" to every runtime).
        let expected = original.replace("    \"Stop\": [],\n", "");
        assert_eq!(
            String::from_utf8(std::fs::read(&path).unwrap()).unwrap(),
            expected,
            "case {n}: uninstall did not give the file back"
        );
    }
}

/// What tools commonly produce is accepted where nothing is lost (an empty file, a
/// byte-order mark, `hooks: null` or `[]`, an event's `null`), and refused, untouched, with
/// the place and what to do where the runtime could not read the hooks (comments, trailing
/// commas, a `hooks` holding something else, a root that is not an object, a Copilot file
/// without `version: 1`, text that is not UTF-8, a symbolic link). Uninstall takes its
/// entries out of a file with comments, keeping them.
#[test]
fn settings_files_tools_produce_are_taken_or_refused_with_a_way_forward() {
    let accepted: [(&str, &[u8]); 7] = [
        ("claude", b""),
        ("claude", b"\n  \n"),
        ("claude", b"\xEF\xBB\xBF{\n  \"model\": \"opus\"\n}\n"),
        ("claude", b"{\"hooks\": null}"),
        ("codex", b"{\"hooks\": []}"),
        (
            "claude",
            b"{\"hooks\": {\"Stop\": null, \"PreToolUse\": []}}",
        ),
        ("copilot", b""),
    ];
    for (runtime, bytes) in accepted {
        let dir = tempfile::tempdir().unwrap();
        let file = match runtime {
            "claude" => ".claude/settings.json",
            "codex" => ".codex/hooks.json",
            _ => ".github/hooks/sigbox.json",
        };
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        let out = sigbox(
            dir.path(),
            &["hooks", "install", runtime, "--as", "Executor"],
        );
        let what = String::from_utf8_lossy(bytes).to_string();
        assert!(
            out.status.success(),
            "{what:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let written = std::fs::read(&path).unwrap();
        assert!(
            !written.starts_with(b"\xEF\xBB\xBF"),
            "{what:?}: the BOM kept"
        );
        let v: Value = serde_json::from_slice(&written)
            .unwrap_or_else(|e| panic!("{what:?}: {e}: {}", String::from_utf8_lossy(&written)));
        for event in installed_events(runtime) {
            assert!(v["hooks"][event].is_array(), "{what:?}: {v}");
        }
        if bytes.starts_with(b"\xEF\xBB\xBF") {
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("byte-order mark"),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
            assert!(kept_in_order(&bytes[3..], &written));
            assert_eq!(v["model"], "opus");
        }
    }
    let refused: [(&str, &[u8], &[&str]); 9] = [
        (
            "claude",
            b"{\n  // my settings\n  \"model\": \"opus\"\n}\n",
            &["a comment at line 2, column 3", "remove them"],
        ),
        (
            "claude",
            b"{\n  \"permissions\": {\"allow\": [\"Bash(ls)\",]},\n  \"model\": \"opus\",\n}\n",
            &[
                "a trailing comma at line 2, column 39",
                "1 more",
                "remove them",
            ],
        ),
        (
            "claude",
            b"{\"hooks\": \"none\"}",
            &[
                "`hooks` (line 1, column 11) holds a string",
                "replace it by {}",
            ],
        ),
        (
            "codex",
            b"{\"hooks\": {\"Stop\": {\"command\": \"x\"}}}",
            &["`hooks.Stop`", "holds an object", "put it in a list"],
        ),
        ("claude", b"[1, 2]", &["holds an array", "move it aside"]),
        (
            "copilot",
            b"{\"hooks\": {}}",
            &["no `version`", "set \"version\": 1"],
        ),
        (
            "claude",
            b"{\"model\": \"opus\" \"x\": 1}",
            &["not valid JSON", "line 1, column 18", "fix it"],
        ),
        (
            "claude",
            b"{\"model\": \"caf\xE9\"}",
            &["not UTF-8", "byte 14"],
        ),
        (
            "codex",
            b"\xEF\xBB\xBF{\"hooks\": {\"Stop\": [\n]} // x\n}",
            &["a comment at line 2, column 4"],
        ),
    ];
    for (runtime, bytes, says) in refused {
        let dir = tempfile::tempdir().unwrap();
        let file = match runtime {
            "claude" => ".claude/settings.json",
            "codex" => ".codex/hooks.json",
            _ => ".github/hooks/sigbox.json",
        };
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        let out = sigbox(
            dir.path(),
            &["hooks", "install", runtime, "--as", "Executor"],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let what = String::from_utf8_lossy(bytes).to_string();
        assert_eq!(out.status.code(), Some(2), "{what:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{what:?}: {err}");
        assert!(err.contains(file), "{what:?}: {err}");
        assert!(err.contains("untouched"), "{what:?}: {err}");
        for s in says {
            assert!(err.contains(s), "{what:?}: no {s:?} in {err}");
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{what:?}: touched");
    }
    // A symbolic link: named, left alone (the file it points to too).
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    let target = dir.path().join("dotfiles-settings.json");
    std::fs::write(&target, "{}").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join(".claude/settings.json")).unwrap();
    let out = sigbox(
        dir.path(),
        &["hooks", "install", "claude", "--as", "Executor"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "{}");
    // Uninstall from a file the user has since commented: the comments stay.
    let dir = tempfile::tempdir().unwrap();
    let out = sigbox(
        dir.path(),
        &["hooks", "install", "claude", "--as", "Executor"],
    );
    assert!(out.status.success());
    let path = dir.path().join(".claude/settings.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let commented = text.replacen(
        "{\n",
        "{\n  // team settings\n  \"model\": \"opus\", // pinned\n",
        1,
    );
    std::fs::write(&path, &commented).unwrap();
    let out = sigbox(dir.path(), &["hooks", "uninstall", "claude"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "{\n  // team settings\n  \"model\": \"opus\" // pinned\n}\n"
    );
}

/// Codex advises one representation of hooks per layer: `hooks install codex` refuses to
/// write `hooks.json` beside a `config.toml` that defines hooks, saying what to do, and goes on
/// beside one that only records which hooks are trusted (`[hooks.state]`) or turns the feature
/// on.
#[test]
fn codex_install_beside_inline_hooks_in_config_toml_says_what_to_do() {
    let defining = [
        "[[hooks.PreToolUse]]\nmatcher = \"^Bash$\"\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = 'x'\n",
        "model = \"gpt-5\"\n\n[hooks]\nStop = [{ hooks = [{ type = \"command\", command = \"y\" }] }]\n",
        "hooks.SessionStart = [{ hooks = [{ type = \"command\", command = \"z\" }] }]\n",
        "[ hooks . \"PostToolUse\" ]\n",
    ];
    for toml in defining {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".codex")).unwrap();
        std::fs::write(dir.path().join(".codex/config.toml"), toml).unwrap();
        let out = sigbox(
            dir.path(),
            &["hooks", "install", "codex", "--as", "Executor"],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{toml}: {err}");
        assert!(err.contains("config.toml: line"), "{err}");
        assert!(err.contains("hooks.json"), "{err}");
        assert!(err.contains("single representation"), "{err}");
        assert!(!dir.path().join(".codex/hooks.json").exists(), "{toml}");
    }
    let fine = [
        "[features]\nhooks = true\n",
        "[hooks.state.\"abc\"]\ntrusted_hash = \"sha256:0\"\nenabled = true\n",
        "notes = \"\"\"\n[[hooks.PreToolUse]]\n\"\"\"\n# [[hooks.Stop]]\n",
    ];
    for toml in fine {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".codex")).unwrap();
        std::fs::write(dir.path().join(".codex/config.toml"), toml).unwrap();
        let out = sigbox(
            dir.path(),
            &["hooks", "install", "codex", "--as", "Executor"],
        );
        assert!(
            out.status.success(),
            "{toml}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(dir.path().join(".codex/hooks.json").exists());
    }
    // --user: the config.toml of $CODEX_HOME.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), defining[0]).unwrap();
    let out = Command::new(BIN)
        .args(["hooks", "install", "codex", "--as", "Executor", "--user"])
        .env("CODEX_HOME", home.path())
        .env_remove("SIGBOX_ROOT")
        .current_dir(home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!home.path().join("hooks.json").exists());
}

/// A `--pause-wait` too long to represent holds the call as a long one would (until a RESUME),
/// never an internal error.
#[test]
fn a_pause_wait_too_long_to_represent_holds_until_resume() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    let mb = Mailbox::init(&root).unwrap();
    send(&mb, SignalType::Pause, "hold on");
    let mut holder = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["hook", "claude", "--as", "Executor", "--strict"])
        .args(["--pause-wait", "99999999999999999999h"])
        .env_remove("SIGBOX_ROOT")
        .env_remove("SIGBOX_SETTLE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    holder
        .stdin
        .take()
        .unwrap()
        .write_all(&fixture("claude", "PreToolUse"))
        .unwrap();
    // Held: it sleeps on the events of inputs/ (a bound read as zero would answer at once,
    // and never watch).
    common::wait_until(
        "the hook holds the call",
        std::time::Duration::from_secs(30),
        || common::watches(holder.id(), &root.join("inputs")),
    );
    assert!(mb.paused("Executor").unwrap().is_some());
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the call was not held: {:?}",
        holder.wait_with_output()
    );
    send(&mb, SignalType::Resume, "go");
    let out = holder.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("\"deny\""));
}
