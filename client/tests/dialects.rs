//! Guards the Goblin and mux dialects end to end through the real binary: files exactly as
//! the upstream tools and the seeds write them, the Goblin stage machine under `watch`, and
//! upstream's `check`/`verify` output, field by field and line by line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn ok_in(dir: &Path, args: &[&str]) -> String {
    let out = run_in(dir, args);
    assert!(
        out.status.success(),
        "sigbox {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn worktree() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let wt = d.path().join("worktrees/ENG-123");
    std::fs::create_dir_all(&wt).unwrap();
    (d, wt)
}

// ---------------------------------------------------------------- Goblin

#[test]
fn goblin_signal_writes_each_signal_atomically() {
    let (_d, wt) = worktree();
    let w = wt.to_str().unwrap();
    for name in [
        "scope-complete",
        "build-complete",
        "review-approved",
        "review-changes-requested",
        "test-passed",
        "test-failed",
    ] {
        ok_in(&wt, &["goblin", "signal", name, "--worktree", w]);
        assert_eq!(
            std::fs::read(wt.join(".goblin").join(name)).unwrap(),
            b"",
            "{name}: empty, as touch"
        );
    }
    ok_in(
        &wt,
        &[
            "goblin",
            "signal",
            "build-complete",
            "--worktree",
            w,
            "--json",
            r#"{"commits": 5, "mine": "kept"}"#,
        ],
    );
    let v: Value =
        serde_json::from_slice(&std::fs::read(wt.join(".goblin/build-complete")).unwrap()).unwrap();
    assert_eq!(v["commits"], 5);
    assert_eq!(v["mine"], "kept");
    assert!(
        chrono_like(v["completed_at"].as_str().unwrap()),
        "completed_at filled in"
    );
    // From a file, and from stdin.
    let body = wt.join("body.json");
    std::fs::write(
        &body,
        r#"{"reason": "Error handling not working", "attempts": 1}"#,
    )
    .unwrap();
    ok_in(
        &wt,
        &[
            "goblin",
            "signal",
            "test-failed",
            "--worktree",
            w,
            "--file",
            body.to_str().unwrap(),
        ],
    );
    let mut child = Command::new(BIN)
        .args(["goblin", "signal", "review-approved", "--worktree", w, "-"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"critical_issues": 0}"#)
        .unwrap();
    assert!(child.wait().unwrap().success());
    let v: Value =
        serde_json::from_slice(&std::fs::read(wt.join(".goblin/review-approved")).unwrap())
            .unwrap();
    assert_eq!(v["critical_issues"], 0);
    // No staging files left behind.
    let left: Vec<_> = std::fs::read_dir(wt.join(".goblin"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn chrono_like(s: &str) -> bool {
    s.len() >= 20 && s.as_bytes()[4] == b'-' && s.ends_with('Z')
}

#[test]
fn goblin_signal_refuses_bad_input_clearly() {
    let (_d, wt) = worktree();
    let w = wt.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["goblin", "signal", "deploy-complete", "--worktree", w],
            "unknown Goblin signal \"deploy-complete\"",
        ),
        (
            &[
                "goblin",
                "signal",
                "build-complete",
                "--worktree",
                w,
                "--json",
                r#"{"commits": -1}"#,
            ],
            "field `commits` must be a non-negative integer",
        ),
        (
            &[
                "goblin",
                "signal",
                "test-passed",
                "--worktree",
                w,
                "--json",
                "[1]",
            ],
            "must be a JSON object",
        ),
        (
            &[
                "goblin",
                "signal",
                "test-passed",
                "--worktree",
                "/nonexistent/wt",
            ],
            "worktree directory does not exist",
        ),
    ];
    for (args, needle) in cases {
        let out = run_in(&wt, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1);
    }
    // A body file that is a FIFO is refused at once instead of blocking the command.
    let fifo = wt.join("body.fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let out = run_in(
        &wt,
        &[
            "goblin",
            "signal",
            "build-complete",
            "--worktree",
            w,
            "--file",
            fifo.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a regular file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A symlinked .goblin is never followed.
    let (_d2, wt2) = worktree();
    std::os::unix::fs::symlink(_d2.path(), wt2.join(".goblin")).unwrap();
    let out = run_in(
        &wt2,
        &[
            "goblin",
            "signal",
            "build-complete",
            "--worktree",
            wt2.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("symlink"));
}

/// The seed's documented bodies, written by hand as an agent would.
fn seed_body(name: &str) -> Value {
    match name {
        "scope-complete" => {
            json!({"completed_at": "2024-01-15T10:30:00Z", "scope_result_hash": "abc123"})
        }
        "build-complete" => {
            json!({"completed_at": "2024-01-15T11:00:00Z", "commits": 5, "files_changed": 8, "lines_added": 200, "lines_removed": 50})
        }
        "review-approved" => {
            json!({"completed_at": "2024-01-15T11:30:00Z", "critical_issues": 0, "informational_issues": 2, "auto_fixes": 1})
        }
        "review-changes-requested" => {
            json!({"completed_at": "2024-01-15T11:30:00Z", "issues": [{"type": "critical", "category": "sql_injection", "file": "db.py", "line": 45, "fixed": false, "description": "String interpolation in query"}], "summary": "2 critical issues require fixes"})
        }
        "test-passed" => {
            json!({"completed_at": "2024-01-15T12:00:00Z", "qa_steps_total": 5, "qa_steps_passed": 5, "bugs_found": 2, "bugs_fixed": 2, "screenshots": ["01-initial.png", "02-action.png", "03-result.png"]})
        }
        "test-failed" => {
            json!({"completed_at": "2024-01-15T12:00:00Z", "failing_steps": ["QA-2", "QA-5"], "reason": "Error handling not working", "attempts": 1, "screenshots": ["01-initial.png", "02-error.png"]})
        }
        _ => unreachable!(),
    }
}

fn watch_once(wt: &Path, extra: &[&str]) -> (Option<i32>, Vec<Value>) {
    let mut args = vec![
        "goblin",
        "watch",
        "--worktree",
        wt.to_str().unwrap(),
        "--once",
        "--settle",
        "300ms",
    ];
    args.extend_from_slice(extra);
    if !extra.contains(&"--timeout") {
        args.extend_from_slice(&["--timeout", "20s"]);
    }
    let out = run_in(wt, &args);
    (
        out.status.code(),
        lines(&String::from_utf8(out.stdout).unwrap()),
    )
}

#[test]
fn goblin_watch_walks_the_pipeline_with_seed_payloads() {
    let (_d, wt) = worktree();
    let g = wt.join(".goblin");
    std::fs::create_dir_all(&g).unwrap();
    let steps = [
        ("SCOPE", "scope-complete", "BUILD", 0),
        ("BUILD", "build-complete", "REVIEW", 0),
        ("REVIEW", "review-changes-requested", "BUILD", 1),
        ("BUILD", "build-complete", "REVIEW", 1),
        ("REVIEW", "review-approved", "TEST", 1),
        ("TEST", "test-failed", "REVIEW", 2),
        ("REVIEW", "review-approved", "TEST", 2),
        ("TEST", "test-passed", "DONE", 2),
    ];
    for (i, (from, signal, to, retries)) in steps.into_iter().enumerate() {
        let body = seed_body(signal);
        std::fs::write(g.join(signal), serde_json::to_vec_pretty(&body).unwrap()).unwrap();
        let extra: &[&str] = if i == 0 { &["--stage", "SCOPE"] } else { &[] };
        let (code, events) = watch_once(&wt, extra);
        assert_eq!(code, Some(0));
        let t = events
            .iter()
            .find(|e| e["event"] == "transition")
            .expect("a transition");
        assert_eq!(
            (t["signal"].as_str(), t["from"].as_str(), t["to"].as_str()),
            (Some(signal), Some(from), Some(to))
        );
        assert_eq!(t["retries"], retries);
        for (k, v) in body.as_object().unwrap() {
            assert_eq!(&t["payload"][k], v, "{signal}: payload field {k}");
        }
        assert!(
            !g.join(signal).exists(),
            "{signal} cleaned up as the stage advanced"
        );
        assert!(
            Path::new(t["consumed"].as_str().unwrap()).exists(),
            "kept in .consumed/"
        );
    }
    let status = lines(&ok_in(
        &wt,
        &[
            "--json",
            "goblin",
            "status",
            "--worktree",
            wt.to_str().unwrap(),
        ],
    ));
    assert_eq!(status[0]["stage"], "DONE");
    // At DONE, watch exits 0 at once.
    let out = run_in(
        &wt,
        &["goblin", "watch", "--worktree", wt.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0));
    ok_in(
        &wt,
        &["goblin", "clean", "--worktree", wt.to_str().unwrap()],
    );
    let left: Vec<_> = std::fs::read_dir(&g)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.iter().all(|n| n == ".consumed" || n == ".stale"),
        "{left:?}"
    );
}

#[test]
fn goblin_fourth_retry_fails_the_pipeline() {
    let (_d, wt) = worktree();
    let w = wt.to_str().unwrap();
    let mut child = Command::new(BIN)
        .args([
            "goblin",
            "watch",
            "--worktree",
            w,
            "--stage",
            "REVIEW",
            "--retries",
            "3",
            "--timeout",
            "20s",
            "--settle",
            "200ms",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(
        "the watch watches .goblin/",
        Duration::from_secs(30),
        || common::watches(child.id(), &wt.join(".goblin")),
    );
    ok_in(
        &wt,
        &[
            "goblin",
            "signal",
            "review-changes-requested",
            "--worktree",
            w,
        ],
    );
    let status = child.wait().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert_eq!(status.code(), Some(3), "FAILED exits 3: {out}");
    let t = &lines(&out)[0];
    assert_eq!(t["to"], "FAILED");
    assert_eq!(t["retries"], 4);
}

#[test]
fn goblin_signal_written_in_two_steps_while_watch_runs_is_one_transition_with_full_payload() {
    let (_d, wt) = worktree();
    let g = wt.join(".goblin");
    std::fs::create_dir_all(&g).unwrap();
    let child = Command::new(BIN)
        .args([
            "goblin",
            "watch",
            "--worktree",
            wt.to_str().unwrap(),
            "--stage",
            "BUILD",
            "--timeout",
            "20s",
            "--settle",
            "1s",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The file is written while the watch runs: once it watches `.goblin/`.
    common::wait_until(
        "the watch watches .goblin/",
        Duration::from_secs(30),
        || common::watches(child.id(), &g),
    );
    // `echo '{...}' > file` truncates first, then writes; here the write also comes in two parts.
    let path = g.join("build-complete");
    let mut f = std::fs::File::create(&path).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    f.write_all(br#"{"commits": 5, "files_changed": 8,"#)
        .unwrap();
    f.flush().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    f.write_all(br#" "lines_added": 200, "lines_removed": 50}"#)
        .unwrap();
    drop(f);
    // Then the reviewer approves, which ends... nothing: watch runs on until DONE or timeout;
    // send it to TEST and DONE to let it exit.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(g.join("review-approved"), "").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(g.join("test-passed"), r#"{"qa_steps_total": 5}"#).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = lines(&String::from_utf8(out.stdout).unwrap());
    let builds: Vec<_> = events
        .iter()
        .filter(|e| e["signal"] == "build-complete")
        .collect();
    assert_eq!(
        builds.len(),
        1,
        "one transition, never a half-read file: {events:?}"
    );
    let p = &builds[0]["payload"];
    assert_eq!(
        (
            p["commits"].as_u64(),
            p["files_changed"].as_u64(),
            p["lines_added"].as_u64(),
            p["lines_removed"].as_u64()
        ),
        (Some(5), Some(8), Some(200), Some(50))
    );
    assert!(events.iter().all(|e| e["event"] != "invalid"), "{events:?}");
    let to: Vec<_> = events
        .iter()
        .filter(|e| e["event"] == "transition")
        .map(|e| e["to"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(to, ["REVIEW", "TEST", "DONE"]);
}

#[test]
fn goblin_unexpected_conflicting_and_invalid_files_are_reported_not_dropped() {
    let (_d, wt) = worktree();
    let g = wt.join(".goblin");
    std::fs::create_dir_all(&g).unwrap();
    // In BUILD: a stale test-failed from an earlier loop, an invalid review-approved.
    std::fs::write(g.join("test-failed"), r#"{"attempts": 1}"#).unwrap();
    std::fs::write(g.join("review-approved"), r#"{"critical_issues": "none"}"#).unwrap();
    let (code, events) = watch_once(&wt, &["--stage", "BUILD", "--timeout", "1500ms"]);
    assert_eq!(code, Some(1), "no transition: timeout");
    let unexpected = events
        .iter()
        .find(|e| e["event"] == "unexpected")
        .expect("reported");
    assert_eq!(unexpected["signal"], "test-failed");
    assert!(
        unexpected["reason"]
            .as_str()
            .unwrap()
            .contains("no transition from BUILD")
    );
    let invalid = events
        .iter()
        .find(|e| e["event"] == "invalid")
        .expect("reported");
    assert!(
        invalid["reason"]
            .as_str()
            .unwrap()
            .contains("critical_issues")
    );
    assert!(
        g.join("test-failed").exists() && g.join("review-approved").exists(),
        "nothing dropped"
    );
    // build-complete arrives: the stage advances and the leftovers are set aside as stale.
    std::fs::write(g.join("build-complete"), "{}").unwrap();
    let (code, events) = watch_once(&wt, &[]);
    assert_eq!(code, Some(0));
    let stale: Vec<_> = events
        .iter()
        .filter(|e| e["event"] == "stale")
        .map(|e| e["signal"].as_str().unwrap())
        .collect();
    assert_eq!(stale.len(), 2, "{events:?}");
    for e in events.iter().filter(|e| e["event"] == "stale") {
        assert!(Path::new(e["moved_to"].as_str().unwrap()).exists());
    }
    // In REVIEW, both verdicts at once: the one written last wins, the other is reported.
    std::fs::write(g.join("review-approved"), "{}").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(
        g.join("review-changes-requested"),
        r#"{"summary": "one more thing"}"#,
    )
    .unwrap();
    let (code, events) = watch_once(&wt, &[]);
    assert_eq!(code, Some(0));
    let t = events.iter().find(|e| e["event"] == "transition").unwrap();
    assert_eq!(t["signal"], "review-changes-requested");
    let c = events.iter().find(|e| e["event"] == "conflict").unwrap();
    assert_eq!(c["signal"], "review-approved");
    assert!(Path::new(c["moved_to"].as_str().unwrap()).exists());
}

/// Several `goblin watch` processes on one worktree, many rounds: whether they were all
/// waiting when the signal arrived or all start at once with the signal there, exactly one
/// reports each transition (the next stage starts once). The others are refused, naming the
/// watch that holds the worktree, or (started after it ended) find nothing left to do.
#[test]
fn goblin_watches_racing_on_one_worktree_report_each_transition_once() {
    const WATCHERS: usize = 4;
    let (mut refused, mut rounds) = (0, 0);
    for round in 0..30 {
        let (_d, wt) = worktree();
        let signal_first = round % 2 == 1;
        let signal = || {
            ok_in(
                &wt,
                &[
                    "goblin",
                    "signal",
                    "build-complete",
                    "--worktree",
                    ".",
                    "{\"commits\": 1}",
                ],
            )
        };
        // The pipeline at BUILD; the watches go on from the saved stage, so that one started
        // after the winner ended finds REVIEW, not a BUILD of its own making.
        let at_build = run_in(
            &wt,
            &[
                "goblin",
                "watch",
                "--worktree",
                ".",
                "--stage",
                "BUILD",
                "--timeout",
                "0s",
            ],
        );
        assert_eq!(at_build.status.code(), Some(1));
        if signal_first {
            signal();
        }
        let timeout = if signal_first { "1s" } else { "3s" };
        let mut watchers: Vec<_> = (0..WATCHERS)
            .map(|_| {
                Command::new(BIN)
                    .current_dir(&wt)
                    .args(["goblin", "watch", "--worktree", "."])
                    .args(["--once", "--settle", "0s", "--timeout", timeout])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        if !signal_first {
            // All of them watching (or refused) before the signal arrives.
            let dir = wt.join(".goblin");
            common::wait_until(
                "every watch watching .goblin/ or ended",
                Duration::from_secs(30),
                || {
                    watchers
                        .iter_mut()
                        .all(|w| w.try_wait().unwrap().is_some() || common::watches(w.id(), &dir))
                },
            );
            signal();
        }
        let mut transitions = 0;
        for w in watchers {
            let out = w.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            transitions += lines(&String::from_utf8(out.stdout).unwrap())
                .iter()
                .filter(|e| e["event"] == "transition")
                .count();
            match out.status.code() {
                Some(0 | 1) => {}
                Some(2) => {
                    assert!(
                        err.contains("another goblin watch (pid ")
                            && err.contains("is at work on this worktree"),
                        "round {round}: refused without naming the holder: {err}"
                    );
                    refused += 1;
                }
                other => panic!("round {round}: exit {other:?}: {err}"),
            }
        }
        assert_eq!(
            transitions, 1,
            "round {round}: the transition was reported {transitions} times"
        );
        let consumed = std::fs::read_dir(wt.join(".goblin/.consumed"))
            .unwrap()
            .count();
        assert_eq!(consumed, 1, "round {round}");
        let state: Value =
            serde_json::from_slice(&std::fs::read(wt.join(".goblin/.sigbox-state.json")).unwrap())
                .unwrap();
        assert_eq!(state["stage"], "REVIEW", "round {round}");
        assert!(state.get("pending").is_none(), "round {round}");
        rounds += 1;
    }
    eprintln!(
        "{rounds} rounds of {WATCHERS} watches on one worktree: one report each, {refused} watches refused"
    );
    assert!(
        refused >= rounds,
        "the watches hardly overlapped: {refused} refused"
    );
}

// ---------------------------------------------------------------- mux

fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("tmp/mux/20260209-1430-topic")).unwrap();
    d
}

const SESSION: &str = "tmp/mux/20260209-1430-topic";

#[test]
fn mux_signal_json_and_kv_with_upstream_path_rules() {
    let d = project();
    let root = d.path();
    std::fs::write(root.join(SESSION).join(".trace"), "trace-42\n").unwrap();
    std::fs::write(root.join(SESSION).join("impl.md"), "0123456789").unwrap();
    // `.signals/` is inserted when the parent is not `.signals`; the suffix follows --status.
    let p = ok_in(
        root,
        &[
            "mux",
            "signal",
            &format!("{SESSION}/implement"),
            "--status",
            "success",
            "--path",
            &format!("{SESSION}/impl.md"),
            "--grade",
            "PASS",
            "--phase-num",
            "2",
            "--format",
            "json",
        ],
    );
    assert_eq!(p.trim(), format!("{SESSION}/.signals/implement.done"));
    let v: Value = serde_json::from_slice(&std::fs::read(root.join(p.trim())).unwrap()).unwrap();
    assert_eq!(v["$schema"], "signal-v1.json");
    assert_eq!(v["phase"], "implement");
    assert_eq!(v["phase_num"], 2);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["grade"], "PASS");
    assert_eq!(v["size"], 10, "measured from --path");
    assert_eq!(v["trace_id"], "trace-42", "from the session's .trace");
    assert!(v["timestamp"].as_str().unwrap().ends_with('Z'));
    let p = ok_in(
        root,
        &[
            "mux",
            "signal",
            &format!("{SESSION}/.signals/review.done"),
            "--status",
            "fail",
            "--error",
            "tests failing\ninjected: line",
            "--format",
            "kv",
        ],
    );
    assert_eq!(p.trim(), format!("{SESSION}/.signals/review.fail"));
    let kv = std::fs::read_to_string(root.join(p.trim())).unwrap();
    let keys: Vec<&str> = kv.lines().map(|l| l.split_once(": ").unwrap().0).collect();
    assert_eq!(keys, ["status", "created_at", "error", "trace_id"]);
    assert!(kv.contains("status: fail\n") && kv.contains("error: tests failing injected: line\n"));
    // The default is what upstream `signal.py` writes: `key: value` lines, with `size: 0` for
    // an artifact that is not there.
    let p = ok_in(
        root,
        &[
            "mux",
            "signal",
            &format!("{SESSION}/test"),
            "--status",
            "success",
            "--path",
            &format!("{SESSION}/missing.md"),
        ],
    );
    let kv = std::fs::read_to_string(root.join(p.trim())).unwrap();
    let keys: Vec<&str> = kv.lines().map(|l| l.split_once(": ").unwrap().0).collect();
    assert_eq!(
        keys,
        ["path", "size", "status", "created_at", "trace_id"],
        "{kv}"
    );
    assert!(kv.contains("size: 0\n"), "{kv}");
}

#[test]
fn mux_paths_stay_inside_the_project_root() {
    let d = project();
    let root = d.path();
    std::os::unix::fs::symlink("/tmp", root.join(SESSION).join(".signals")).unwrap();
    let cases: [(&str, &str); 4] = [
        ("/tmp/mux/x/.signals/a", "absolute path refused"),
        ("../outside/.signals/a", "leaves the project root"),
        ("tmp/../../x/a", "leaves the project root"),
        ("tmp/mux/20260209-1430-topic/.signals/a", "symlink"),
    ];
    for (p, needle) in cases {
        let out = run_in(root, &["mux", "signal", p, "--status", "success"]);
        assert_eq!(out.status.code(), Some(2), "{p}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{p}: {err}");
    }
    let out = run_in(root, &["mux", "check", "/etc", "--expected", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!Path::new("/tmp/a.done").exists());
    // Stage names no reader can print as one line: refused, nothing written.
    let signals = root.join("tmp/mux/s/.signals");
    for (p, needle) in [
        ("tmp/mux/s/.signals/a\nb", "control character (U+000A)"),
        (
            "tmp/mux/s/.signals/a\u{1b}[2J",
            "control character (U+001B)",
        ),
        ("tmp/mux/s/.signals/", "empty or hidden stage name"),
        ("tmp/mux/s/.signals/.done", "empty or hidden stage name"),
    ] {
        let out = run_in(root, &["mux", "signal", p, "--status", "success"]);
        assert_eq!(out.status.code(), Some(2), "{p:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{p:?}: {err}");
        assert!(
            std::fs::read_dir(&signals).map_or(true, |mut d| d.next().is_none()),
            "{p:?} wrote something"
        );
    }
}

/// Signal files exactly as upstream's signal.py writes them.
fn upstream_kv(dir: &Path, name: &str, path: &str, size: u64, status: &str, error: Option<&str>) {
    let mut s = format!(
        "path: {path}\nsize: {size}\nstatus: {status}\ncreated_at: 2026-02-09T14:30:00+00:00\n"
    );
    if let Some(e) = error {
        s.push_str(&format!("error: {e}\n"));
    }
    s.push_str("trace_id: abc\nversion: 1\n");
    std::fs::write(dir.join(name), s).unwrap();
}

#[test]
fn mux_check_prints_upstream_json_field_by_field() {
    let d = project();
    let root = d.path();
    let sig = root.join(SESSION).join(".signals");
    std::fs::create_dir_all(&sig).unwrap();
    let check = |expected: &str, extra: &[&str]| -> (Option<i32>, Value) {
        let mut args = vec!["mux", "check", SESSION, "--expected", expected];
        args.extend_from_slice(extra);
        let out = run_in(root, &args);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), v)
    };
    let (code, v) = check("2", &[]);
    assert_eq!(code, Some(1));
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["complete", "failed", "expected", "status", "checked_at"]
    );
    assert_eq!(
        (
            v["complete"].as_u64(),
            v["failed"].as_u64(),
            v["expected"].as_u64(),
            v["status"].as_str()
        ),
        (Some(0), Some(0), Some(2), Some("incomplete"))
    );
    upstream_kv(
        &sig,
        "gather.done",
        "tmp/out/gather.md",
        100,
        "success",
        None,
    );
    upstream_kv(&sig, "plan.done", "tmp/out/plan.md", 200, "success", None);
    let (code, v) = check("2", &[]);
    assert_eq!(
        (code, v["status"].as_str(), v["complete"].as_u64()),
        (Some(0), Some("complete"), Some(2))
    );
    upstream_kv(
        &sig,
        "implement.fail",
        "tmp/out/impl.md",
        0,
        "fail",
        Some("build broke"),
    );
    let (code, v) = check("3", &[]);
    assert_eq!(
        (code, v["status"].as_str(), v["failed"].as_u64()),
        (Some(1), Some("partial"), Some(1))
    );
    // Grades: only PASS proceeds.
    std::fs::remove_file(sig.join("implement.fail")).unwrap();
    std::fs::write(
        sig.join("review.done"),
        serde_json::to_vec(&json!({"phase": "review", "status": "completed", "grade": "WARN"}))
            .unwrap(),
    )
    .unwrap();
    let (code, v) = check("3", &[]);
    assert_eq!(
        (code, v["status"].as_str()),
        (Some(0), Some("complete")),
        "without --require-pass"
    );
    let (code, v) = check("3", &["--require-pass"]);
    assert_eq!(
        (code, v["status"].as_str(), v["failed"].as_u64()),
        (Some(1), Some("partial"), Some(1))
    );
    assert!(
        v["not_passed"][0]
            .as_str()
            .unwrap()
            .contains("review.done: grade WARN")
    );
    // --signals-dir restricts the search.
    let (_, v) = check("1", &["--signals-dir", "tmp/nowhere"]);
    assert_eq!(v["complete"], 0);
}

#[test]
fn mux_check_waits_event_driven_and_times_out() {
    let d = project();
    let root = d.path().to_path_buf();
    let child = Command::new(BIN)
        .current_dir(&root)
        .args([
            "mux",
            "check",
            SESSION,
            "--expected",
            "2",
            "--timeout",
            "20s",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Waiting on events: it watches the session's directory.
    common::wait_until(
        "the check watches the session",
        Duration::from_secs(30),
        || common::watches(child.id(), &root.join(SESSION)),
    );
    ok_in(
        &root,
        &[
            "mux",
            "signal",
            &format!("{SESSION}/a"),
            "--status",
            "success",
        ],
    );
    std::thread::sleep(Duration::from_millis(100));
    ok_in(
        &root,
        &[
            "mux",
            "signal",
            &format!("{SESSION}/b"),
            "--status",
            "success",
            "--format",
            "kv",
        ],
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "complete");
    let out = run_in(
        &root,
        &[
            "mux",
            "check",
            SESSION,
            "--expected",
            "3",
            "--timeout",
            "300ms",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "timeout");
}

#[test]
fn mux_verify_matches_upstream_output_for_both_forms() {
    let d = project();
    let root = d.path();
    let sig = root.join(SESSION).join(".signals");
    std::fs::create_dir_all(&sig).unwrap();
    upstream_kv(
        &sig,
        "001-gather.done",
        "tmp/out/gather.md",
        1024,
        "success",
        None,
    );
    // The seed's JSON form, written by sigbox.
    ok_in(
        root,
        &[
            "mux",
            "signal",
            &format!("{SESSION}/002-plan"),
            "--status",
            "success",
            "--path",
            "tmp/out/plan.md",
            "--size",
            "2048",
        ],
    );
    upstream_kv(
        &sig,
        "003-implement.fail",
        "tmp/out/impl.md",
        0,
        "fail",
        Some("compile error"),
    );
    let v = |action: &str| ok_in(root, &["mux", "verify", SESSION, "--action", action]);
    assert_eq!(v("count"), "2\n");
    assert_eq!(v("failures"), "003-implement.fail: compile error\n");
    assert_eq!(v("paths"), "tmp/out/gather.md\ntmp/out/plan.md\n");
    assert_eq!(v("sizes"), "001-gather: 1024\n002-plan: 2048\n");
    assert_eq!(v("total-size"), "3072\n");
    assert_eq!(
        v("summary"),
        "completed: 2\nfailed: 1\ntotal_size: 3072\npaths: 2\nfailures:\n  - 003-implement.fail: compile error\n"
    );
    assert_eq!(
        ok_in(root, &["mux", "verify", SESSION]),
        v("summary"),
        "summary is the default"
    );
    std::fs::remove_file(sig.join("003-implement.fail")).unwrap();
    assert_eq!(v("failures"), "No failures\n");
    assert_eq!(
        v("summary"),
        "completed: 2\nfailed: 0\ntotal_size: 3072\npaths: 2\n"
    );
}

/// Upstream's `verify.py` and `check-signals.py` count nothing where the session (or the
/// `--signals-dir`) is missing or not a directory, print their zeros and exit as for an empty
/// session: every mux reader keeps that output and status, and says why on stderr.
#[test]
fn mux_readers_on_a_missing_session_keep_upstreams_output_and_status_and_say_why() {
    let d = project();
    let root = d.path();
    std::fs::write(root.join("tmp/mux/a-file"), b"").unwrap();
    let zeros = "completed: 0\nfailed: 0\ntotal_size: 0\npaths: 0\n";
    // (session, extra arguments, upstream's stdout, upstream's exit status; None: stdout is
    // JSON with zero counts)
    let cases: &[(&str, &[&str], Option<&str>, i32)] = &[
        ("verify", &["--action", "count"], Some("0\n"), 0),
        (
            "verify",
            &["--action", "failures"],
            Some("No failures\n"),
            0,
        ),
        ("verify", &["--action", "paths"], Some(""), 0),
        ("verify", &["--action", "sizes"], Some(""), 0),
        ("verify", &["--action", "total-size"], Some("0\n"), 0),
        ("verify", &["--action", "summary"], Some(zeros), 0),
        ("verify", &[], Some(zeros), 0),
        ("check", &["--expected", "1"], None, 1),
        ("check", &["--expected", "0"], None, 0),
        ("check", &["--expected", "1", "--timeout", "50ms"], None, 1),
    ];
    for session in ["tmp/mux/no-such-session", "tmp/mux/a-file"] {
        for (cmd, extra, want, code) in cases {
            let mut args = vec!["mux", cmd, session];
            args.extend_from_slice(extra);
            let out = run_in(root, &args);
            let text = String::from_utf8(out.stdout).unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
            match want {
                Some(want) => assert_eq!(&text, want, "{args:?}"),
                None => {
                    let v: Value = serde_json::from_str(&text).unwrap();
                    assert_eq!((&v["complete"], &v["failed"]), (&json!(0), &json!(0)));
                }
            }
            assert!(
                err.contains("WARNING:")
                    && err.contains(session)
                    && err.contains("nothing counted"),
                "{args:?}: the hint names the session: {err:?}"
            );
        }
        let out = run_in(root, &["--json", "mux", "verify", session]);
        assert_eq!(out.status.code(), Some(0));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((&v["completed"], &v["failed"]), (&json!(0), &json!(0)));
    }
    // A --signals-dir that does not exist: upstream counts nothing there, whatever the session.
    let out = run_in(
        root,
        &[
            "mux",
            "verify",
            SESSION,
            "--signals-dir",
            "tmp/nowhere",
            "--action",
            "count",
        ],
    );
    assert_eq!((out.status.code(), &out.stdout[..]), (Some(0), &b"0\n"[..]));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tmp/nowhere"));
    // An empty session that exists is no mistake: no hint.
    let out = run_in(root, &["mux", "verify", SESSION]);
    assert_eq!(
        (out.status.code(), String::from_utf8(out.stdout).unwrap()),
        (Some(0), zeros.to_string())
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mux_verify_reports_malformed_and_misplaced_files_by_name() {
    let d = project();
    let root = d.path();
    let sig = root.join(SESSION).join(".signals");
    std::fs::create_dir_all(&sig).unwrap();
    upstream_kv(&sig, "ok.done", "tmp/out/ok.md", 10, "success", None);
    std::fs::write(sig.join("bad-size.done"), "path: x\nsize: lots\n").unwrap();
    std::fs::write(sig.join("garbage.done"), "{not json").unwrap();
    std::fs::write(sig.join("huge.done"), vec![b'a'; 2 * 1024 * 1024]).unwrap();
    upstream_kv(
        &root.join(SESSION),
        "misplaced.done",
        "tmp/out/m.md",
        5,
        "success",
        None,
    );
    let out = run_in(root, &["mux", "verify", SESSION]);
    assert!(out.status.success(), "never a crash");
    let err = String::from_utf8_lossy(&out.stderr);
    for name in ["bad-size.done", "garbage.done", "huge.done"] {
        assert!(err.contains(name), "{name} reported: {err}");
    }
    assert!(err.contains("size` is not a byte count"), "{err}");
    assert!(
        err.contains("misplaced signal(s) outside .signals/") && err.contains("misplaced.done"),
        "{err}"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("completed: 5\nfailed: 0\ntotal_size: 15\npaths: 2\n"),
        "{text}"
    );
    let j = lines(&ok_in(root, &["--json", "mux", "verify", SESSION]));
    assert_eq!(j[0]["malformed"].as_array().unwrap().len(), 3);
}

/// A mux file sigbox writes is one its own reader reads: an empty value is left out rather
/// than written as a `key:` line the reader refuses.
#[test]
fn mux_empty_values_are_left_out() {
    let d = project();
    let root = d.path();
    let session = "tmp/mux/20260209-1430-topic";
    ok_in(
        root,
        &[
            "mux",
            "signal",
            &format!("{session}/impl"),
            "--status",
            "success",
            "--previous",
            "",
            "--trace-id",
            " ",
        ],
    );
    let text = std::fs::read_to_string(root.join(session).join(".signals/impl.done")).unwrap();
    assert!(
        !text.contains("previous") && !text.contains("trace_id"),
        "{text}"
    );
    let out = run_in(root, &["mux", "verify", session]);
    assert!(out.status.success());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("malformed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
