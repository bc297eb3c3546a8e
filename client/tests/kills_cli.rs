//! Guards the durability contract through the command line: `sigbox send` and `sigbox poll`
//! processes killed with SIGKILL at random moments never lose an acknowledged signal (every one
//! is printed by some poll), never print one twice unless the second time is marked as a
//! redelivery, and never leave a partial file visible.

use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;

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

/// A stdout that is full: every write to it blocks until the test reads it. A `goblin watch`
/// writing to it stops at its first report, after every filesystem step before that report:
/// the moment between consuming a signal and reporting its transition, held for as long as
/// the test likes. Returns the pipe's ends and how many bytes fill it.
fn full_pipe() -> (std::io::PipeReader, std::io::PipeWriter, usize) {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    use std::io::Write;
    let (reader, mut writer) = std::io::pipe().unwrap();
    let flags = fcntl_getfl(&writer).unwrap();
    fcntl_setfl(&writer, flags | OFlags::NONBLOCK).unwrap();
    let mut filled = 0;
    for chunk in [4096, 1] {
        loop {
            match writer.write(&vec![b'.'; chunk]) {
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
    }
    // Blocking again: the flag belongs to the open pipe, which the child shares.
    fcntl_setfl(&writer, flags).unwrap();
    (reader, writer, filled)
}

/// `sigbox goblin watch --worktree W --stage BUILD` (the README's form) killed between moving
/// the signal into `.consumed/` and reporting the transition, then started again: the restart
/// reports the transition the killed one took, exactly once, whether it names the stage the
/// transition left, the one it entered, or none; a restart at another stage is refused with
/// the reason and changes nothing. (A restart that forced BUILD used to drop the saved
/// transition: the signal was consumed, and every later run timed out.)
#[test]
fn a_goblin_watch_killed_between_consume_and_report_is_finished_by_its_restart_exactly_once() {
    use rustix::process::{Pid, Signal, kill_process};
    use sigbox::goblin::{Goblin, Stage};
    for restart in [Some("BUILD"), Some("REVIEW"), None, Some("SCOPE")] {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path();
        let g = Goblin::open(wt).unwrap();
        std::fs::write(g.dir().join("build-complete"), br#"{"commits": 5}"#).unwrap();
        let (mut reader, writer, filled) = full_pipe();
        let mut first = Command::new(BIN)
            .args(["goblin", "watch", "--worktree"])
            .arg(wt)
            .args(["--stage", "BUILD", "--once", "--timeout", "60s"])
            .stdout(writer.try_clone().unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        drop(writer);
        // Wait until the signal is consumed and the new stage saved with the transition
        // pending: the watch is then blocked on its report, and is killed there.
        let consumed = g.dir().join(".consumed");
        let state = g.dir().join(".sigbox-state.json");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let moved = std::fs::read_dir(&consumed).is_ok_and(|d| d.count() == 1);
            let pending = std::fs::read_to_string(&state).is_ok_and(|s| s.contains("pending"));
            if moved && pending {
                break;
            }
            assert!(first.try_wait().unwrap().is_none(), "the watch ended early");
            assert!(std::time::Instant::now() < deadline, "never consumed");
            std::thread::sleep(Duration::from_millis(5));
        }
        // It cannot pass its report: killed there, once it is blocked writing it (the kernel's
        // pipe write is where it sleeps).
        let wchan = format!("/proc/{}/wchan", first.id());
        common::wait_until(
            "the watch blocked writing its report",
            Duration::from_secs(30),
            || std::fs::read_to_string(&wchan).is_ok_and(|w| w.contains("pipe_write")),
        );
        assert!(first.try_wait().unwrap().is_none());
        let pid = Pid::from_raw(i32::try_from(first.id()).unwrap()).unwrap();
        kill_process(pid, Signal::KILL).unwrap();
        first.wait().unwrap();
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut reader, &mut out).unwrap();
        assert_eq!(out.len(), filled, "the killed watch reported nothing");
        assert!(!g.dir().join("build-complete").exists());

        let watch = |stage: Option<&str>, timeout: &str| {
            let mut c = Command::new(BIN);
            c.args(["goblin", "watch", "--worktree"]).arg(wt).args([
                "--once",
                "--timeout",
                timeout,
            ]);
            if let Some(s) = stage {
                c.args(["--stage", s]);
            }
            c.output().unwrap()
        };
        let mut second = watch(restart, "5s");
        if restart == Some("SCOPE") {
            // Starting at another stage would lose the transition: refused, nothing changed.
            let err = String::from_utf8_lossy(&second.stderr);
            assert_eq!(second.status.code(), Some(2), "{err}");
            assert!(second.stdout.is_empty());
            assert!(
                err.contains("BUILD -> REVIEW on build-complete is saved unfinished")
                    && err.contains("would lose it"),
                "{err}"
            );
            assert!(std::fs::read_to_string(&state).unwrap().contains("pending"));
            second = watch(None, "5s");
        }
        let text = String::from_utf8(second.stdout).unwrap();
        let reports: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            second.status.code(),
            Some(0),
            "restart {restart:?}: {text:?} {}",
            String::from_utf8_lossy(&second.stderr)
        );
        assert_eq!(reports.len(), 1, "restart {restart:?}: {text:?}");
        let r = &reports[0];
        assert_eq!(
            (&r["event"], &r["signal"], &r["from"], &r["to"]),
            (
                &serde_json::json!("transition"),
                &serde_json::json!("build-complete"),
                &serde_json::json!("BUILD"),
                &serde_json::json!("REVIEW")
            ),
            "restart {restart:?}"
        );
        assert_eq!(r["payload"]["commits"], 5);
        assert!(r["consumed"].as_str().unwrap().contains(".consumed"));
        assert_eq!(g.state().unwrap().stage, Stage::Review);
        assert!(!std::fs::read_to_string(&state).unwrap().contains("pending"));
        // Exactly once: the next watch has nothing to report.
        let third = watch(None, "0s");
        assert_eq!(third.status.code(), Some(1), "timed out, nothing to do");
        assert!(third.stdout.is_empty(), "reported twice");
    }
}
