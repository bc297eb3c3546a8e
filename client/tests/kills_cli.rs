//! Guards the durability contract through the command line: `sigbox send` and `sigbox poll`
//! processes killed with SIGKILL at random moments never lose an acknowledged signal (every one
//! is printed by some poll), never print one twice unless the second time is marked as a
//! redelivery, and never leave a partial file visible.

use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn spawn(root: &Path, args: &[&str]) -> Child {
    Command::new(BIN)
        .arg("--root")
        .arg(root)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A xorshift generator from `seed`: `next(n)` is below `n`. Seeded, so a run's moments repeat.
fn below(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

fn finish(mut c: Child, kill: bool) -> (bool, bool, String) {
    let killed = kill && c.try_wait().unwrap().is_none() && c.kill().is_ok();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut c.stdout.take().unwrap(), &mut text).unwrap();
    let ok = c.wait().unwrap().success();
    (killed, ok, text)
}

#[test]
fn killed_cli_senders_and_pollers_lose_and_duplicate_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    assert!(
        Command::new(BIN)
            .arg("--root")
            .arg(&root)
            .arg("init")
            .status()
            .unwrap()
            .success()
    );
    let mut next = below(0x9E37_79B9_7F4A_7C15u64);
    let (mut sent, mut delivered) = (HashSet::new(), HashSet::new());
    let (mut kills, mut again) = (0, 0);
    // A signal printed a second time must say so: a consumer that keeps the ids it acted on
    // then never acts twice.
    let mut take = |l: &str, delivered: &mut HashSet<String>| {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let id = v["id"].as_str().unwrap().to_string();
        let redelivery = v["redelivery"].as_u64().unwrap();
        if !delivered.insert(id.clone()) {
            assert!(
                redelivery > 0,
                "{id} printed twice, the second time unmarked"
            );
            again += 1;
        }
    };
    for round in 0..400 {
        let s = spawn(
            &root,
            &["send", "info", &format!("m{round}"), "--target", "Executor"],
        );
        let p = spawn(&root, &["--json", "poll", "--as", "Executor"]);
        std::thread::sleep(Duration::from_micros(next(4_000)));
        for (c, is_send) in [(s, true), (p, false)] {
            let (killed, ok, text) = finish(c, next(4) != 0);
            kills += usize::from(killed);
            if is_send {
                if ok {
                    sent.insert(text.trim().to_string());
                }
            } else {
                for l in text.lines() {
                    take(l, &mut delivered);
                }
            }
        }
    }
    let out = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["--json", "poll", "--as", "Executor"])
        .output()
        .unwrap();
    for l in String::from_utf8(out.stdout).unwrap().lines() {
        take(l, &mut delivered);
    }
    let mb = sigbox::Mailbox::open(&root).unwrap();
    assert!(
        mb.rejected().unwrap().is_empty(),
        "a partial file was visible"
    );
    let processed: HashSet<String> = mb
        .processed()
        .unwrap()
        .into_iter()
        .map(|s| s.unwrap().id)
        .collect();
    let lost: Vec<_> = sent.difference(&delivered).collect();
    assert!(
        lost.is_empty(),
        "acknowledged sends never printed: {lost:?}"
    );
    assert_eq!(
        delivered, processed,
        "everything printed is acknowledged in processed/"
    );
    assert_eq!(
        in_flight(&root),
        0,
        "signals left in flight after the last poll"
    );
    eprintln!(
        "{kills} SIGKILLs of sigbox send/poll: {} sends acknowledged, {} printed, {again} printed again (marked) after a kill, 0 lost, 0 duplicated unmarked",
        sent.len(),
        delivered.len(),
    );
    assert!(
        kills >= 100,
        "only {kills} processes were still running when killed"
    );
}

/// Thousands of pending signals; `poll` and `wait` killed again and again, with SIGKILL,
/// SIGTERM and SIGINT, while they claim and print in groups. Every signal is printed at least
/// once; a signal printed twice is marked as a redelivery the second time; everything printed
/// ends acknowledged in `processed/`, nothing stays in flight.
#[test]
fn polls_killed_mid_pass_over_thousands_lose_nothing() {
    use rustix::process::{Pid, Signal, kill_process};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let mb = sigbox::Mailbox::init(&root).unwrap();
    let mut sent = HashSet::new();
    for i in 0..3000 {
        let mut s = sigbox::NewSignal::new(sigbox::SignalType::Info);
        s.target(sigbox::Target::Agent("Executor".into()))
            .message(format!("m{i}"));
        sent.insert(mb.send(&s).unwrap());
    }
    let mut next = below(0x2545_F491_4F6C_DD1Du64);
    let mut printed: HashSet<String> = HashSet::new();
    let (mut twice, mut marked, mut killed) = (0, 0, 0);
    let mut take = |text: &str, printed: &mut HashSet<String>| {
        for l in text.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let id = v["id"].as_str().unwrap().to_string();
            let again = v["redelivery"].as_u64().unwrap();
            marked += usize::from(again > 0);
            if !printed.insert(id.clone()) {
                assert!(again > 0, "{id} printed twice, the second time unmarked");
                twice += 1;
            }
        }
    };
    for round in 0..60 {
        let args: &[&str] = if round % 2 == 0 {
            &["--json", "poll", "--as", "Executor"]
        } else {
            &["--json", "wait", "--as", "Executor", "--timeout", "1s"]
        };
        let mut c = spawn(&root, args);
        std::thread::sleep(Duration::from_micros(2_000 + next(30_000)));
        if c.try_wait().unwrap().is_none() {
            let sig = [Signal::KILL, Signal::TERM, Signal::INT][round % 3];
            let pid = Pid::from_raw(i32::try_from(c.id()).unwrap()).unwrap();
            if kill_process(pid, sig).is_ok() {
                killed += 1;
            }
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut c.stdout.take().unwrap(), &mut text).unwrap();
        c.wait().unwrap();
        take(&text, &mut printed);
    }
    let out = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["--json", "poll", "--as", "Executor"])
        .output()
        .unwrap();
    assert!(out.status.success());
    take(&String::from_utf8(out.stdout).unwrap(), &mut printed);
    let lost: Vec<_> = sent.difference(&printed).collect();
    assert!(lost.is_empty(), "{} signals never printed", lost.len());
    let processed: HashSet<String> = mb
        .processed()
        .unwrap()
        .into_iter()
        .map(|s| s.unwrap().id)
        .collect();
    assert_eq!(processed, printed);
    assert_eq!(in_flight(&root), 0, "signals left in flight");
    assert!(
        killed >= 10,
        "only {killed} consumers were still running when signalled"
    );
    eprintln!(
        "{killed} polls and waits killed mid-pass over 3000 signals: 0 lost, {marked} printed marked as redeliveries, {twice} printed twice (marked), 0 unmarked twice"
    );
}

/// Signals still in a claim slot under `root/claimed/`.
fn in_flight(root: &Path) -> usize {
    let mut n = 0;
    for agent in std::fs::read_dir(root.join("claimed")).unwrap() {
        for slot in std::fs::read_dir(agent.unwrap().path()).unwrap() {
            n += std::fs::read_dir(slot.unwrap().path()).unwrap().count();
        }
    }
    n
}

#[test]
fn killed_goblin_watch_never_leaves_the_pipeline_stuck() {
    use sigbox::goblin::{Goblin, PipelineState, Stage};
    let mut next = below(0x2545_F491_4F6C_DD1Du64);
    let (mut kills, mut finished_at_start) = (0, 0);
    for round in 0..150 {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path();
        let g = Goblin::open(wt).unwrap();
        g.save_state(PipelineState {
            stage: Stage::Build,
            retries: 0,
        })
        .unwrap();
        std::fs::write(g.dir().join("build-complete"), br#"{"commits": 1}"#).unwrap();
        let watch = |timeout: &str| {
            Command::new(BIN)
                .args(["goblin", "watch", "--worktree"])
                .arg(wt)
                .args(["--once", "--timeout", timeout])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let child = watch("10s");
        std::thread::sleep(Duration::from_micros(next(8_000)));
        let (killed, _, first) = finish(child, true);
        kills += usize::from(killed);
        let saved = std::fs::read_to_string(g.dir().join(".sigbox-state.json")).unwrap();
        finished_at_start += usize::from(saved.contains("\"pending\""));
        // Whatever the moment of the kill, the next watch ends at REVIEW, with the signal
        // consumed, and the transition reported at least once.
        let (_, ok, second) = finish(watch("0s"), false);
        let state = g.state().unwrap();
        assert_eq!(
            state.stage,
            Stage::Review,
            "round {round}: stuck at {:?} (first run: {first:?}, second: {second:?}, ok {ok})",
            state.stage
        );
        assert!(!g.dir().join("build-complete").exists(), "round {round}");
        let transitions = first
            .lines()
            .chain(second.lines())
            .filter(|l| l.contains(r#""event":"transition""#))
            .count();
        assert!(
            transitions >= 1,
            "round {round}: the transition was never reported"
        );
    }
    eprintln!(
        "{kills} goblin watch processes killed; {finished_at_start} killed in the middle of a \
         transition, finished by the next start"
    );
    assert!(
        kills >= 50,
        "only {kills} watch processes were still running when killed"
    );
}

#[test]
fn a_transition_into_a_terminal_stage_interrupted_by_a_kill_is_reported_by_the_next_watch() {
    use sigbox::goblin::Goblin;
    for (stage, signal, from, code) in [
        ("DONE", "test-passed", "TEST", 0),
        ("FAILED", "test-failed", "TEST", 3),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let g = Goblin::open(tmp.path()).unwrap();
        // What a watch killed between saving the new stage and moving the signal leaves.
        std::fs::write(
            g.dir().join(".sigbox-state.json"),
            format!(
                r#"{{"stage":"{stage}","retries":3,"updated_at":"2026-01-01T00:00:00Z","pending":{{"signal":"{signal}","from":"{from}","payload":null}}}}"#
            ),
        )
        .unwrap();
        std::fs::write(g.dir().join(signal), b"").unwrap();
        let watch = || {
            Command::new(BIN)
                .args(["goblin", "watch", "--worktree"])
                .arg(tmp.path())
                .args(["--timeout", "5s"])
                .output()
                .unwrap()
        };
        let out = watch();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains(r#""event":"transition""#)
                && text.contains(&format!(r#""to":"{stage}""#)),
            "{stage}: {text:?}"
        );
        assert_eq!(out.status.code(), Some(code), "{stage}");
        assert!(!g.dir().join(signal).exists(), "{stage}: not moved aside");
        // Reported once: the next watch has nothing to report.
        let again = watch();
        assert!(again.stdout.is_empty(), "{stage}: reported twice");
        assert_eq!(again.status.code(), Some(code));
    }
}
