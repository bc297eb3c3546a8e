//! `sigbox hook claude|codex|copilot --as A` on a `PermissionRequest` (spec/hooks.md,
//! "Permission requests"): the event is asked of a person (spec/asks.md), another process
//! answers with `sigbox answer`, and the hook returns the decision in the runtime's documented
//! envelope (spec/schemas/upstream/); no answer in time is no decision.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sigbox::Mailbox;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn fixture(runtime: &str) -> Vec<u8> {
    let name = match runtime {
        "copilot" => "permissionRequest",
        _ => "PermissionRequest",
    };
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hooks")
            .join(runtime)
            .join(format!("{name}.json")),
    )
    .unwrap()
}

/// The runtime's documented output shape for a PermissionRequest.
fn output_schema(runtime: &str) -> jsonschema::Validator {
    let file = match runtime {
        "codex" => "codex/permission-request.command.output.schema.json",
        "claude" => "claude/PermissionRequest.output.schema.json",
        _ => "copilot/permissionRequest.output.schema.json",
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../spec/schemas/upstream")
        .join(file);
    let schema: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    Mailbox::init(&root).unwrap();
    (dir, root)
}

fn sigbox(root: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--root")
        .arg(root)
        .env_remove("SIGBOX_ROOT")
        .env_remove("SIGBOX_PERMISSION_DEFAULT");
    c
}

/// `sigbox hook RUNTIME --as Executor EXTRA...` with `event` on its stdin, running.
fn spawn_hook(root: &Path, runtime: &str, event: &[u8], extra: &[&str]) -> Child {
    let mut c = sigbox(root);
    c.args(["hook", runtime, "--as", "Executor"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if runtime == "copilot" {
        c.args(["--event", "permissionRequest"]);
    }
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(event).unwrap();
    drop(stdin);
    child
}

/// The requests `sigbox asks` lists (`--all`: every one).
fn asks(root: &Path, all: bool) -> Vec<Value> {
    let mut c = sigbox(root);
    c.args(["--json", "asks"]);
    if all {
        c.arg("--all");
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits until one request is open, and returns it.
fn open_request(root: &Path) -> Value {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(r) = asks(root, false).into_iter().next() {
            return r;
        }
        assert!(Instant::now() < end, "the hook never asked");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `sigbox answer ID CHOICE [MESSAGE] --from alice`, from another process.
fn answer(root: &Path, id: &str, choice: &str, message: Option<&str>) -> Output {
    let mut c = sigbox(root);
    c.args(["answer", id, choice]);
    if let Some(m) = message {
        c.arg(m);
    }
    c.args(["--from", "alice"]).output().unwrap()
}

/// The hook's one decision on stdout (checked against the runtime's schema), or `None` for
/// no output.
fn decision(runtime: &str, out: &Output) -> Option<Value> {
    assert!(out.status.success(), "the hook failed: {out:?}");
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    if text.trim().is_empty() {
        return None;
    }
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    let errors: Vec<String> = output_schema(runtime)
        .iter_errors(&v)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "{runtime}: {v} breaks its schema: {errors:?}"
    );
    Some(v)
}

/// The decision's `behavior` and `message`, whichever envelope it came in.
fn behavior(runtime: &str, v: &Value) -> (String, Option<String>) {
    let d = match runtime {
        "copilot" => v.clone(),
        _ => {
            assert_eq!(
                v["hookSpecificOutput"]["hookEventName"],
                "PermissionRequest"
            );
            v["hookSpecificOutput"]["decision"].clone()
        }
    };
    (
        d["behavior"].as_str().unwrap().to_string(),
        d["message"].as_str().map(str::to_string),
    )
}

/// The runtime's fixture, as tool call `n` of its session (Claude Code names each call).
fn call(runtime: &str, n: usize) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&fixture(runtime)).unwrap();
    if runtime == "claude" {
        v["tool_use_id"] = json!(format!("toolu_01CALL{n}"));
    }
    v.to_string().into_bytes()
}

fn approve_and_deny(runtime: &str) {
    let (_d, root) = root();
    // approve -> allow
    let hook = spawn_hook(
        &root,
        runtime,
        &call(runtime, 1),
        &["--permission-wait", "60s"],
    );
    let r = open_request(&root);
    assert_eq!(r["from"], "Executor");
    assert_eq!(r["choices"], json!(["approve", "deny"]));
    assert_eq!(r["context"]["event"], "PermissionRequest");
    assert!(r["context"]["tool_input"]["command"].is_string(), "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains(r["context"]["tool_input"]["command"].as_str().unwrap()),
        "{r}"
    );
    assert!(
        answer(&root, r["id"].as_str().unwrap(), "approve", Some("fine"))
            .status
            .success()
    );
    let out = hook.wait_with_output().unwrap();
    let v = decision(runtime, &out).expect("a decision");
    assert_eq!(behavior(runtime, &v), ("allow".to_string(), None), "{v}");
    // deny with a message -> deny carrying it
    let hook = spawn_hook(
        &root,
        runtime,
        &call(runtime, 2),
        &["--permission-wait", "60s"],
    );
    let r = open_request(&root);
    assert!(
        answer(
            &root,
            r["id"].as_str().unwrap(),
            "deny",
            Some("not on a Friday")
        )
        .status
        .success()
    );
    let out = hook.wait_with_output().unwrap();
    let v = decision(runtime, &out).expect("a decision");
    assert_eq!(
        behavior(runtime, &v),
        ("deny".to_string(), Some("not on a Friday".to_string())),
        "{v}"
    );
    // deny without a message -> deny naming who denied it (Codex wants a reason)
    let hook = spawn_hook(
        &root,
        runtime,
        &call(runtime, 3),
        &["--permission-wait", "60s"],
    );
    let r = open_request(&root);
    assert!(
        answer(&root, r["id"].as_str().unwrap(), "deny", None)
            .status
            .success()
    );
    let v = decision(runtime, &hook.wait_with_output().unwrap()).expect("a decision");
    let (b, m) = behavior(runtime, &v);
    assert_eq!(b, "deny");
    assert!(m.unwrap().contains("alice"), "{v}");
}

fn no_answer_is_no_decision(runtime: &str) {
    let (_d, root) = root();
    let t = Instant::now();
    let out = spawn_hook(
        &root,
        runtime,
        &fixture(runtime),
        &["--permission-wait", "600ms"],
    )
    .wait_with_output()
    .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(550));
    assert_eq!(decision(runtime, &out), None, "no answer: no decision");
    // Recorded expired; a late answer is refused naming why.
    let all = asks(&root, true);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0]["status"], "expired");
    let late = answer(&root, all[0]["id"].as_str().unwrap(), "approve", None);
    assert_eq!(late.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&late.stderr).contains("expired"),
        "{late:?}"
    );
    // A default configured by flag or environment decides instead.
    let out = spawn_hook(
        &root,
        runtime,
        &fixture(runtime),
        &["--permission-wait", "300ms", "--permission-default", "deny"],
    )
    .wait_with_output()
    .unwrap();
    let v = decision(runtime, &out).expect("the configured default");
    let (b, m) = behavior(runtime, &v);
    assert_eq!(b, "deny");
    assert!(m.unwrap().contains("nobody answered"), "{v}");
    let mut c = sigbox(&root);
    c.args([
        "hook",
        runtime,
        "--as",
        "Executor",
        "--permission-wait",
        "300ms",
    ])
    .env("SIGBOX_PERMISSION_DEFAULT", "allow")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if runtime == "copilot" {
        c.args(["--event", "permissionRequest"]);
    }
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fixture(runtime))
        .unwrap();
    let v = decision(runtime, &child.wait_with_output().unwrap()).expect("the env default");
    assert_eq!(behavior(runtime, &v).0, "allow");
}

#[test]
fn claude_permission_request_approve_allows_and_deny_denies_with_the_message() {
    approve_and_deny("claude");
}

#[test]
fn codex_permission_request_approve_allows_and_deny_denies_with_the_message() {
    approve_and_deny("codex");
}

#[test]
fn copilot_permission_request_answers_in_its_top_level_envelope() {
    approve_and_deny("copilot");
}

#[test]
fn claude_no_answer_within_the_bound_is_no_decision() {
    no_answer_is_no_decision("claude");
}

#[test]
fn codex_no_answer_within_the_bound_is_no_decision() {
    no_answer_is_no_decision("codex");
}

#[test]
fn a_hook_killed_mid_wait_and_fired_again_reattaches_to_its_one_request() {
    let (_d, root) = root();
    let mut first = spawn_hook(
        &root,
        "claude",
        &fixture("claude"),
        &["--permission-wait", "60s"],
    );
    let r = open_request(&root);
    first.kill().unwrap();
    first.wait().unwrap();
    // The runtime fires the same tool call again: the same request, not a second one.
    let again = spawn_hook(
        &root,
        "claude",
        &fixture("claude"),
        &["--permission-wait", "60s"],
    );
    // Answered while it waits on the request: once it watches asks/ (an answer before would
    // be found at once, as below).
    common::wait_until("the hook watches asks/", Duration::from_secs(30), || {
        common::watches(again.id(), &root.join("asks"))
    });
    assert!(
        answer(&root, r["id"].as_str().unwrap(), "approve", None)
            .status
            .success()
    );
    let v = decision("claude", &again.wait_with_output().unwrap()).expect("a decision");
    assert_eq!(behavior("claude", &v).0, "allow");
    assert_eq!(asks(&root, true).len(), 1, "asked once");
    // Fired once more after the answer: the answer, at once.
    let t = Instant::now();
    let out = spawn_hook(
        &root,
        "claude",
        &fixture("claude"),
        &["--permission-wait", "60s"],
    )
    .wait_with_output()
    .unwrap();
    assert!(t.elapsed() < Duration::from_secs(20));
    assert_eq!(
        behavior("claude", &decision("claude", &out).unwrap()).0,
        "allow"
    );
    assert_eq!(asks(&root, true).len(), 1, "still asked once");
    // Another tool call of the session is another request.
    let mut other: Value = serde_json::from_slice(&fixture("claude")).unwrap();
    other["tool_use_id"] = json!("toolu_01OTHER");
    let out = spawn_hook(
        &root,
        "claude",
        other.to_string().as_bytes(),
        &["--permission-wait", "200ms"],
    )
    .wait_with_output()
    .unwrap();
    assert_eq!(decision("claude", &out), None);
    assert_eq!(asks(&root, true).len(), 2);
}

#[test]
fn hostile_tool_inputs_are_asked_whole_enough_and_bad_events_ask_nothing() {
    let (_d, root) = root();
    // A huge command with newlines and control characters: the request holds a head of it,
    // the message one line, and it can be answered.
    let mut ev: Value = serde_json::from_slice(&fixture("claude")).unwrap();
    let huge = format!("echo start\n{}\x1b[31m\nrm -rf /\r\n", "x".repeat(3 << 20));
    ev["tool_input"] = json!({"command": huge});
    let hook = spawn_hook(
        &root,
        "claude",
        ev.to_string().as_bytes(),
        &["--permission-wait", "60s"],
    );
    let r = open_request(&root);
    assert_eq!(
        r["context"]["tool_input"]["truncated"], true,
        "{}",
        r["context"]
    );
    let human = sigbox(&root).arg("asks").output().unwrap();
    let text = String::from_utf8(human.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "one line per request: {text:?}");
    assert!(!text.contains('\x1b'), "escaped");
    assert!(
        answer(&root, r["id"].as_str().unwrap(), "deny", Some("no"))
            .status
            .success()
    );
    let v = decision("claude", &hook.wait_with_output().unwrap()).unwrap();
    assert_eq!(behavior("claude", &v), ("deny".into(), Some("no".into())));
    // Not UTF-8, not JSON, a lone surrogate: no decision, nothing asked, exit 0.
    for bad in [
        b"{\"hook_event_name\":\"PermissionRequest\",\"tool_name\":\"\xff\xfe\"}".to_vec(),
        b"{\"hook_event_name\":\"PermissionRequest\",\"tool_name\":\"\\ud800\"}".to_vec(),
        b"not json".to_vec(),
    ] {
        let out = spawn_hook(&root, "claude", &bad, &["--permission-wait", "60s"])
            .wait_with_output()
            .unwrap();
        assert_eq!(decision("claude", &out), None);
    }
    assert_eq!(asks(&root, true).len(), 1, "nothing more was asked");
}
