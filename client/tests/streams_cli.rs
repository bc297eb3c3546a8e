//! Guards `sigbox flux`, `sigbox pilot` and `sigbox tap` end to end: a child that prints its
//! signals slowly, split across writes, has its output passed through unchanged and live, its
//! signals turned into mailbox signals, and its exit status kept.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};

use rustix::process::Signal;
use serde_json::Value;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn sigbox(root: &Path, args: &[&str]) -> std::process::Output {
    common::sigbox_at(BIN, root, args)
}

const SLOW_CHILD: &str = r#"
printf 'compiling...\n'
printf '{"flux:sig'
sleep 0.3
printf 'nal": {"verdict": "hold", "reason": "needs_human", "meta": {"question": "Which DB?"}}}\n'
printf '```pilot-'
sleep 0.2
printf 'signal\n{"v": 2, "type": "status",\n'
sleep 0.2
printf '"phase": "IMPL", "progress": 65}\n```\n'
printf 'to stderr\n' >&2
printf '{"flux:signal": {"verdict": "bogus"}}\n'
printf '```pilot-signal\n{"type": "exit", "exit_signal": true, "success": false, "reason": "tests failing"}\n```\n'
printf '{"flux:signal": {"verdict": "abort"}}'
exit 3
"#;

#[test]
fn tap_passes_output_through_and_turns_signals_into_mailbox_signals() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    let out = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["tap", "--as", "Executor", "--", "sh", "-c", SLOW_CHILD])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "the child's exit status");
    // Passed through unchanged: exactly what the child wrote.
    let direct = Command::new("sh")
        .args(["-c", SLOW_CHILD])
        .output()
        .unwrap();
    assert_eq!(out.stdout, direct.stdout);
    assert!(String::from_utf8_lossy(&out.stderr).contains("to stderr"));
    // One mailbox signal per valid stream signal, in order, for the orchestrator.
    let ls = sigbox(&root, &["--json", "ls"]);
    let pending: Vec<Value> = String::from_utf8(ls.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = pending
        .iter()
        .map(|v| v["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["PAUSE", "INFO", "ABORT", "ABORT"], "{pending:?}");
    assert!(pending.iter().all(|v| v["target"] == "Orchestrator"));
    let mut delivered = Vec::new();
    for _ in 0..4 {
        let p = sigbox(&root, &["--json", "poll", "--as", "Orchestrator"]);
        delivered.extend(
            String::from_utf8(p.stdout)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    assert_eq!(
        delivered[0]["message"], "Which DB?",
        "hold/needs_human carries the question"
    );
    assert_eq!(delivered[0]["fields"]["source"], "flux");
    assert_eq!(delivered[0]["from"], "Executor");
    assert_eq!(delivered[1]["message"], "pilot: IMPL 65%");
    assert_eq!(delivered[1]["fields"]["source_signal"]["progress"], 65);
    assert!(
        delivered[2]["message"]
            .as_str()
            .unwrap()
            .contains("tests failing")
    );
    assert_eq!(delivered[3]["message"], "flux: abort");
}

#[test]
fn tap_is_live() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    let marker = dir.path().join("finished");
    let script = format!(
        "echo first; sleep 2; touch '{}'; echo second",
        marker.display()
    );
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["tap", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert_eq!(first, "first\n");
    assert!(
        !marker.exists(),
        "the first line arrived while the command was still running"
    );
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "second\n");
    assert!(child.wait().unwrap().success());
}

#[test]
fn tap_refuses_a_missing_mailbox_and_reports_a_missing_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = sigbox(&dir.path().join("nope"), &["tap", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a sigbox mailbox"));
    let root = dir.path().join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    let out = sigbox(&root, &["tap", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/program: cannot run"));
}

#[test]
fn flux_parse_prints_one_line_per_event_with_line_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("stage.log");
    std::fs::write(&f, "x\r\n{\"flux:signal\": {\"verdict\": \"rework\", \"reason\": \"flaky\"}}\r\n{\"flux:signal\": {}}\n").unwrap();
    let out = Command::new(BIN)
        .args(["flux", "parse"])
        .arg(&f)
        .output()
        .unwrap();
    // One line is not a valid signal: printed as an error event, and the status says so.
    assert_eq!(out.status.code(), Some(1));
    let ev: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(ev.len(), 2);
    assert_eq!(
        (
            ev[0]["line"].as_u64(),
            ev[0]["verdict"].as_str(),
            ev[0]["reason"].as_str()
        ),
        (Some(2), Some("rework"), Some("flaky"))
    );
    assert!(ev[0].get("meta").is_some());
    assert_eq!(ev[1]["line"], 3);
    assert!(ev[1]["error"].as_str().unwrap().contains("missing"));
    // From stdin too.
    let mut c = Command::new(BIN)
        .args(["flux", "parse", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut c.stdin.take().unwrap(),
        br#"{"flux:signal": {"verdict": "proceed"}}"#,
    )
    .unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(String::from_utf8(o.stdout).unwrap().contains("\"proceed\""));
}

#[test]
fn flux_result_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    std::fs::write(&good, r#"{"verdict": "blocked", "summary": "Needs credentials.", "blockers": [{"title": "No key", "description": "x"}]}"#).unwrap();
    let out = Command::new(BIN)
        .args(["flux", "result"])
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["routing"]["route"], "fallback");
    assert_eq!(v["routing"]["gates"], "skipped");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"verdict": "pass", "summary": ""}"#).unwrap();
    let out = Command::new(BIN)
        .args(["flux", "result"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(
        v["routing"],
        Value::Null,
        "never proceed on an invalid document"
    );
    let out = Command::new(BIN)
        .args(["flux", "result"])
        .arg(dir.path().join("missing.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.json"));
}

#[test]
fn pilot_parse_summary_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("nav.log");
    std::fs::write(&f, "```pilot-signal\n{\"phase\": \"VERIFY\", \"progress\": 150}\n```\n```pilot-signal\n{oops\n```\n").unwrap();
    let out = Command::new(BIN)
        .args(["--json", "pilot", "parse"])
        .arg(&f)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["signals"].as_u64(),
            v["progress"].as_i64(),
            v["phase"].as_str(),
            v["exit"].as_bool()
        ),
        (Some(1), Some(100), Some("VERIFY"), Some(false))
    );
    assert_eq!(v["phase_progress"], 80);
    assert_eq!(v["warnings"], 1);
    let out = Command::new(BIN)
        .args(["pilot", "parse"])
        .arg(&f)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("progress: 100%")
            && text.contains("phase: VERIFY (80%)")
            && text.contains("warning: line 4"),
        "{text}"
    );
}

#[test]
fn sigterm_to_tap_reaches_the_command_whose_last_signal_reaches_the_mailbox() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    let script = r#"
trap 'printf "{\"flux:signal\": {\"verdict\": \"abort\", \"reason\": \"stopped\"}}\n"; exit 0' TERM
echo "$$"
while :; do sleep 0.05; done
"#;
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["tap", "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut pid = String::new();
    out.read_line(&mut pid).unwrap();
    let pid = pid.trim().to_string();
    common::signal(child.id(), Signal::TERM).unwrap();
    let status = common::wait_at_most(&mut child, std::time::Duration::from_secs(20), "tap");
    assert_eq!(status.code(), Some(0), "the command's own exit status");
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("\"abort\""), "output drained: {rest:?}");
    assert!(
        !common::alive(pid.parse().unwrap()),
        "the command outlived tap"
    );
    let ls = sigbox(&root, &["--json", "ls"]);
    let pending: Vec<Value> = String::from_utf8(ls.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        pending.iter().any(|p| p["type"] == "ABORT"),
        "the command's last signal was lost: {pending:?}"
    );
}

#[test]
fn a_background_grandchild_holding_the_output_does_not_keep_tap_alive() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["tap", "--", "sh", "-c", "echo $$; sleep 60 & echo started"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut pgid = String::new();
    out.read_line(&mut pgid).unwrap();
    let status = common::wait_at_most(&mut child, std::time::Duration::from_secs(30), "tap");
    // The background sleep is in the command's process group: end it.
    let _ = common::signal_group(pgid.trim().parse().unwrap(), Signal::TERM);
    assert_eq!(status.code(), Some(0));
}

#[test]
fn output_that_keeps_coming_after_the_command_exits_is_all_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    // The command exits at once; what it started writes a signal every 0.3 s for 1.8 s.
    let script = r#"(for i in 1 2 3 4 5 6; do sleep 0.3; printf '{"flux:signal": {"verdict": "proceed", "summary": "s%s"}}\n' "$i"; done) & exit 0"#;
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["tap", "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = common::wait_at_most(&mut child, std::time::Duration::from_secs(30), "tap");
    assert_eq!(status.code(), Some(0));
    let ls = sigbox(&root, &["--json", "ls"]);
    let n = String::from_utf8(ls.stdout).unwrap().lines().count();
    assert_eq!(
        n, 6,
        "signals written while output kept coming were dropped"
    );
}

#[test]
fn flux_result_refuses_a_fifo_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("result.json");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let mut child = Command::new(BIN)
        .args(["flux", "result"])
        .arg(&fifo)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = common::wait_at_most(&mut child, std::time::Duration::from_secs(30), "tap");
    assert_eq!(status.code(), Some(2));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("not a regular file"), "{err}");
}

/// Flux and Pilot signals that arrive in one read reach the mailbox in stream order, not
/// grouped by parser.
#[test]
fn tap_keeps_stream_order_across_flux_and_pilot() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    // One write: a Pilot status block, then a Flux abort, then a Pilot exit block.
    let script = r#"printf '```pilot-signal\n{"type": "status", "phase": "IMPL", "progress": 10}\n```\n{"flux:signal": {"verdict": "abort", "reason": "r"}}\n```pilot-signal\n{"type": "exit", "message": "done"}\n```\n'"#;
    let out = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["tap", "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ls = sigbox(&root, &["--json", "ls"]);
    let types: Vec<String> = String::from_utf8(ls.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(types, ["INFO", "ABORT", "INFO"], "stream order");
}
