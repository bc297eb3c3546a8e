//! Asking a person with real processes (spec/asks.md): answers racing from many processes,
//! an asker killed and started again by key, deadlines, forged, late and hostile answers.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn sigbox(root: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env("SIGBOX_ROOT", root).env_remove("SIGBOX_SETTLE");
    c
}

fn run(root: &Path, args: &[&str]) -> Output {
    sigbox(root).args(args).output().unwrap()
}

fn setup() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("r");
    assert!(run(&root, &["init"]).status.success());
    (d, root)
}

fn spawn_ask(root: &Path, args: &[&str]) -> Child {
    sigbox(root)
        .arg("ask")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for(p: &Path) {
    let until = Instant::now() + Duration::from_secs(30);
    while !p.exists() {
        assert!(Instant::now() < until, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn asks_files(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("asks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

#[test]
fn answers_racing_from_many_processes_have_one_winner_and_the_others_name_it() {
    let (_d, root) = setup();
    let asker = spawn_ask(
        &root,
        &["--as", "Executor", "--key", "race", "--json", "go?"],
    );
    wait_for(&root.join("asks/Executor.race.request.json"));
    let answerers: Vec<(String, Child)> = (0..12)
        .map(|i| {
            let who = format!("p{i}");
            let choice = if i % 2 == 0 { "approve" } else { "deny" };
            let c = sigbox(&root)
                .args(["answer", "Executor.race", choice, "--from", &who])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (who, c)
        })
        .collect();
    let mut winners = Vec::new();
    let mut refusals = Vec::new();
    for (who, c) in answerers {
        let o = c.wait_with_output().unwrap();
        match o.status.code() {
            Some(0) => winners.push(who),
            Some(2) => refusals.push(text(&o.stderr)),
            other => panic!("{who}: exit {other:?}: {}", text(&o.stderr)),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let winner = &winners[0];
    for r in &refusals {
        assert_eq!(r.lines().count(), 1, "{r}");
        assert!(
            r.contains("already answered") && r.contains(&format!("by {winner} ")),
            "{r}"
        );
    }
    let o = asker.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["answered_by"], winner.as_str());
    for k in ["id", "choice", "message", "answered_by", "answered_at"] {
        assert!(v.get(k).is_some(), "{k}: {v}");
    }
    assert_eq!(
        asks_files(&root),
        ["Executor.race.outcome.json", "Executor.race.request.json"]
    );
}

#[test]
fn an_asker_killed_and_started_again_by_key_gets_the_answer_given_meanwhile() {
    let (_d, root) = setup();
    let mut asker = spawn_ask(&root, &["--as", "Executor", "--key", "k9", "deploy?"]);
    wait_for(&root.join("asks/Executor.k9.request.json"));
    // Killed in its wait: once it watches asks/.
    common::wait_until("the asker watches asks/", Duration::from_secs(30), || {
        common::watches(asker.id(), &root.join("asks"))
    });
    common::signal(asker.id(), rustix::process::Signal::KILL).unwrap();
    asker.wait().unwrap();
    let a = run(
        &root,
        &[
            "answer",
            "Executor.k9",
            "approve",
            "ship it",
            "--from",
            "alice",
        ],
    );
    assert!(a.status.success(), "{}", text(&a.stderr));
    let again = run(
        &root,
        &["ask", "--as", "Executor", "--key", "k9", "deploy?"],
    );
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout).trim(), "approve");
    assert!(text(&again.stderr).contains("ship it"));
    // No second request.
    assert_eq!(
        asks_files(&root),
        ["Executor.k9.outcome.json", "Executor.k9.request.json"]
    );
}

#[test]
fn a_stop_signal_while_waiting_keeps_the_request_for_the_next_ask() {
    let (_d, root) = setup();
    for sig in [rustix::process::Signal::INT, rustix::process::Signal::TERM] {
        // `ask` leaves these signals to their default action; one this test's own parent set
        // to be ignored (a job started in the background) is ignored by the asker too.
        if common::ignored_here(sig) {
            eprintln!(
                "signal {} is ignored by this process, and so by the asker: not sent",
                sig.as_raw()
            );
            continue;
        }
        let mut asker = spawn_ask(&root, &["--as", "Executor", "--key", "s", "stay?"]);
        wait_for(&root.join("asks/Executor.s.request.json"));
        // Signalled in its wait: once it watches asks/ (from the second round on, the request
        // is there before this asker starts).
        common::wait_until("the asker watches asks/", Duration::from_secs(30), || {
            common::watches(asker.id(), &root.join("asks"))
        });
        common::signal(asker.id(), sig).unwrap();
        let st = common::wait_at_most(
            &mut asker,
            Duration::from_secs(30),
            &format!("ask after signal {}", sig.as_raw()),
        );
        assert!(!st.success());
        let l = run(&root, &["--json", "asks"]);
        assert!(
            text(&l.stdout).contains("\"status\":\"open\""),
            "{}",
            text(&l.stdout)
        );
    }
    let asker = spawn_ask(&root, &["--as", "Executor", "--key", "s", "stay?"]);
    // Answered while it waits: once it watches asks/ (an answer before would be found at once).
    common::wait_until("the asker watches asks/", Duration::from_secs(30), || {
        common::watches(asker.id(), &root.join("asks"))
    });
    assert!(
        run(&root, &["answer", "Executor.s", "deny"])
            .status
            .success()
    );
    let o = asker.wait_with_output().unwrap();
    assert_eq!(text(&o.stdout).trim(), "deny");
}

#[test]
fn at_the_deadline_ask_exits_1_the_expiry_is_recorded_and_a_late_answer_refused() {
    let (_d, root) = setup();
    let o = run(
        &root,
        &[
            "ask",
            "--as",
            "Planner",
            "--key",
            "d",
            "--timeout",
            "300ms",
            "ok?",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "", "no answer: no choice on stdout");
    assert!(
        text(&o.stderr).contains("expired at"),
        "{}",
        text(&o.stderr)
    );
    let outcome = std::fs::read_to_string(root.join("asks/Planner.d.outcome.json")).unwrap();
    assert!(outcome.contains("\"status\":\"expired\""), "{outcome}");
    let late = run(&root, &["answer", "Planner.d", "approve"]);
    assert_eq!(late.status.code(), Some(2));
    assert!(
        text(&late.stderr).contains("expired at"),
        "{}",
        text(&late.stderr)
    );
    let all = run(&root, &["--json", "asks", "--all"]);
    assert!(text(&all.stdout).contains("\"status\":\"expired\""));
    // Asked again by key: the expiry, at once.
    let again = run(&root, &["ask", "--as", "Planner", "--key", "d", "ok?"]);
    assert_eq!(again.status.code(), Some(1));
}

#[test]
fn a_forged_outcome_does_not_answer_and_the_real_one_still_does() {
    let (d, root) = setup();
    let asker = spawn_ask(
        &root,
        &["--as", "Executor", "--key", "f", "--json", "deploy?"],
    );
    wait_for(&root.join("asks/Executor.f.request.json"));
    let outcome = root.join("asks/Executor.f.outcome.json");
    let forged = r#"{"kind":"sigbox.outcome","id":"Executor.f","request":"0123456789abcdef","status":"answered","choice":"approve","message":null,"answered_by":"mallory","answered_at":"2030-01-01T00:00:00Z"}"#;
    // By rename (arrives whole), as a careful forger would.
    let stage = d.path().join("forged");
    std::fs::write(&stage, forged).unwrap();
    std::fs::rename(&stage, &outcome).unwrap();
    common::wait_until(
        "the forged outcome moved aside",
        Duration::from_secs(30),
        || !outcome.exists(),
    );
    let rejected: Vec<String> = std::fs::read_dir(root.join("rejected"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        rejected.iter().any(|n| n == "Executor.f.outcome.json"),
        "{rejected:?}"
    );
    let a = run(&root, &["answer", "Executor.f", "deny", "--from", "alice"]);
    assert!(a.status.success(), "{}", text(&a.stderr));
    let o = asker.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["choice"].as_str(), v["answered_by"].as_str()),
        (Some("deny"), Some("alice"))
    );
}

#[test]
fn hostile_and_unknown_ids_and_choices_not_offered_are_refused_in_one_line() {
    let (d, root) = setup();
    let o = run(
        &root,
        &["ask", "--as", "Executor", "--key", "h", "--no-wait", "x"],
    );
    assert_eq!(text(&o.stdout).trim(), "Executor.h");
    let long = format!("Executor.{}", "a".repeat(300));
    let table: [(&str, &str, &str); 7] = [
        ("../../../etc/passwd", "approve", "invalid request id"),
        ("Executor/../../x", "approve", "invalid request id"),
        ("Executor.a/b", "approve", "invalid request id"),
        (&long, "approve", "over 128"),
        ("Executor.nope", "approve", "no such request"),
        ("Executor.h", "maybe", "is not offered (approve, deny)"),
        ("", "approve", "invalid request id"),
    ];
    for (id, choice, why) in table {
        let o = run(&root, &["answer", id, choice]);
        assert_eq!(o.status.code(), Some(2), "{id}");
        let e = text(&o.stderr);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(why), "{id}: {e}");
    }
    // Nothing was written outside asks/ nor beside the root.
    assert_eq!(asks_files(&root), ["Executor.h.request.json"]);
    let beside: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
    assert_eq!(beside.len(), 1);
}
