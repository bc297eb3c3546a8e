//! Requests to a person across hosts (spec/asks.md §8): asked on one host, answered on
//! another through the bridges, still exactly one answer; answers racing on two hosts: one
//! wins everywhere, and the loser is told so. Real `nats-server`, one `sigbox-bridge` process
//! per host, the `sigbox` CLI for `ask`, `answer` and `asks`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{Host, Server};
use serde_json::Value;

/// The `sigbox` CLI beside the bridge's binary (built when missing).
fn sigbox_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_sigbox-bridge")).with_file_name("sigbox");
    if !bin.exists() {
        let built = Command::new(env!("CARGO"))
            .args(["build", "-p", "sigbox-client", "--bin", "sigbox"])
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .status()
            .unwrap();
        assert!(built.success());
    }
    bin
}

fn sigbox(root: &Path) -> Command {
    let mut c = Command::new(sigbox_bin());
    c.arg("--root")
        .arg(root)
        .env_remove("SIGBOX_ROOT")
        .env("SIGBOX_SETTLE", "0");
    c
}

fn run(root: &Path, args: &[&str]) -> Output {
    sigbox(root).args(args).output().unwrap()
}

/// `asks --all --json` on `root`, by id.
fn asks_all(root: &Path) -> Vec<Value> {
    let out = run(root, &["--json", "asks", "--all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn find(root: &Path, id: &str) -> Option<Value> {
    asks_all(root).into_iter().find(|v| v["id"] == id)
}

/// Waits until `f` holds, up to 30 s.
fn eventually(what: &str, hosts: &[&Host], mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        if Instant::now() >= deadline {
            let logs: Vec<String> = hosts
                .iter()
                .map(|h| format!("--- {}\n{}", h.name, h.log()))
                .collect();
            panic!("never: {what}\n{}", logs.join("\n"));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn outcome_file(h: &Host, id: &str) -> Option<Vec<u8>> {
    std::fs::read(h.root.join("asks").join(format!("{id}.outcome.json"))).ok()
}

#[test]
fn asked_on_one_host_answered_on_another_the_asker_gets_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let a = Host::start(dir.path(), "ha", &server.url(), "asks", &[]);
    let b = Host::start(dir.path(), "hb", &server.url(), "asks", &[]);
    // The asker blocks on A.
    let asker = sigbox(&a.root)
        .args([
            "--json",
            "ask",
            "--as",
            "Executor",
            "--key",
            "deploy-1",
            "--choices",
            "yes,no",
            "--timeout",
            "60s",
            "deploy to prod?",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = "Executor.deploy-1";
    eventually("the request reaches B", &[&a, &b], || {
        find(&b.root, id).is_some()
    });
    let on_b = find(&b.root, id).unwrap();
    assert_eq!(on_b["home"], "ha", "{on_b}");
    assert_eq!(on_b["status"], "open");
    // A choice not offered, refused on B itself; nothing proposed.
    let out = run(&b.root, &["answer", id, "maybe"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not offered"));
    // Answered on B: carried to A, taken there, the asker on A gets it.
    let out = run(
        &b.root,
        &["--json", "answer", id, "yes", "ship it", "--from", "bob"],
    );
    assert!(
        out.status.success(),
        "{}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        a.log(),
        b.log()
    );
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["decided_on"], "ha", "{said}");
    let got = asker.wait_with_output().unwrap();
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let got: Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!(
        (&got["choice"], &got["message"], &got["answered_by"]),
        (&"yes".into(), &"ship it".into(), &"bob".into()),
        "{got}"
    );
    // One outcome, the same bytes on both hosts; B's proposal won.
    eventually("the outcome comes back to B", &[&a, &b], || {
        outcome_file(&b, id).is_some()
    });
    assert_eq!(outcome_file(&a, id), outcome_file(&b, id));
    let on_b = find(&b.root, id).unwrap();
    assert_eq!(on_b["status"], "answered");
    assert_eq!(on_b["proposals"][0]["status"], "won", "{on_b}");
    // A second answer, on either host, is refused naming the first.
    for h in [&a, &b] {
        let out = run(&h.root, &["answer", id, "no", "--from", "carol"]);
        assert_eq!(out.status.code(), Some(2), "{}", h.name);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("already answered \"yes\" by bob"), "{err}");
    }
    // The asker started again with its key re-attaches to the answer, on A.
    let again = run(
        &a.root,
        &[
            "ask",
            "--as",
            "Executor",
            "--key",
            "deploy-1",
            "--choices",
            "yes,no",
            "deploy to prod?",
        ],
    );
    assert!(again.status.success());
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), "yes");
}

/// How long after B's answer A's starts, round by round, in milliseconds.
const DELAYS: [u64; 7] = [0, 0, 50, 150, 300, 600, 5000];

#[test]
fn answers_racing_on_two_hosts_one_wins_everywhere_and_the_loser_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let a = Host::start(dir.path(), "ra", &server.url(), "race", &[]);
    let b = Host::start(dir.path(), "rb", &server.url(), "race", &[]);
    let c = Host::start(dir.path(), "rc", &server.url(), "race", &[]);
    let all = [&a, &b, &c];
    let rounds = DELAYS.len();
    let mut wins = (0, 0);
    for (i, delay) in DELAYS.into_iter().enumerate() {
        let id = format!("Executor.race-{i}");
        let key = format!("race-{i}");
        let out = run(
            &a.root,
            &["ask", "--as", "Executor", "--key", &key, "--no-wait", "go?"],
        );
        assert!(out.status.success());
        eventually("the request reaches B and C", &all, || {
            find(&b.root, &id).is_some() && find(&c.root, &id).is_some()
        });
        // Both at once: alice on A (approve), bob on B (deny).
        let spawn = |h: &Host, choice: &str, by: &str| {
            sigbox(&h.root)
                .args(["answer", &id, choice, "--from", by])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        // A's answer is taken where it is given, B's crosses twice: A starts later and
        // later, so that each side wins some rounds (the last gives B 5 s).
        let on_b = spawn(&b, "deny", "bob");
        thread::sleep(Duration::from_millis(delay));
        let on_a = spawn(&a, "approve", "alice");
        let (ra, rb) = (
            on_a.wait_with_output().unwrap(),
            on_b.wait_with_output().unwrap(),
        );
        let codes = (ra.status.code(), rb.status.code());
        assert!(
            codes == (Some(0), Some(2)) || codes == (Some(2), Some(0)),
            "round {i}: {codes:?}\nA: {}\nB: {}",
            String::from_utf8_lossy(&ra.stderr),
            String::from_utf8_lossy(&rb.stderr)
        );
        let (winner, loser_err) = if codes.0 == Some(0) {
            wins.0 += 1;
            ("alice", rb.stderr)
        } else {
            wins.1 += 1;
            ("bob", ra.stderr)
        };
        // The loser was told who won.
        let loser_err = String::from_utf8_lossy(&loser_err);
        assert!(
            loser_err.contains(&format!("by {winner}")),
            "round {i}: {loser_err}"
        );
        // One outcome everywhere, byte for byte, naming the winner.
        eventually("the outcome reaches every host", &all, || {
            all.iter().all(|h| outcome_file(h, &id).is_some())
        });
        let first = outcome_file(&a, &id);
        for h in all {
            assert_eq!(outcome_file(h, &id), first, "round {i}: {}", h.name);
            let v = find(&h.root, &id).unwrap();
            assert_eq!(v["answered_by"], winner, "round {i}: {}: {v}", h.name);
        }
        // B's `asks --all` says whether its answer was the one.
        let on_b = find(&b.root, &id).unwrap();
        let expect = if winner == "bob" { "won" } else { "lost" };
        assert_eq!(on_b["proposals"][0]["status"], expect, "round {i}: {on_b}");
    }
    assert_eq!(wins.0 + wins.1, rounds);
    eprintln!("won on A: {}, on B: {}", wins.0, wins.1);
    assert!(wins.1 >= 1, "B never won: {wins:?}");
}
