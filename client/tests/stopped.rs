//! A stopped process binds nobody (spec/mailbox.md §9.11). A process can be frozen at any
//! instant (Ctrl-Z, SIGSTOP, `docker pause`, a debugger), holding whatever it holds then; on a
//! root whose claims go by link, that was once the root's fsync lock or the rename lock, and
//! every other process of the root then waited for it with no limit and no word. These tests
//! freeze real processes with a real SIGSTOP (a holder of the root's lock, and consumers
//! stopped at seeded moments in the middle of their passes) and require every send, every
//! other agent's checkpoint and hook to answer, `doctor` to name the stopped process, and
//! nothing the frozen process held to be lost or given twice unmarked.
//!
//! Each step has a limit of its own (`wait_at_most`, far above any step's usual time): a
//! liveness check that turns a hang into a failure, not a speed figure.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rustix::process::Signal;

mod common;

use common::{signal, wait_at_most};

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

/// Far above what any one command takes here, even on a loaded machine: what it guards is
/// "answers at all", which a wait for a frozen process's lock never did.
const LIMIT: Duration = Duration::from_secs(60);

fn sigbox(root: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--root")
        .arg(root)
        .args(args)
        // Claims by link, as on ext2 and ext4 without a journal, whatever the test's disk.
        .env("SIGBOX_LINK_CLAIMS", "1")
        .env_remove("SIGBOX_ROOT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs a command to its end within [`LIMIT`]; its stdout.
fn answered(root: &Path, args: &[&str], what: &str) -> (std::process::ExitStatus, String) {
    let mut child = sigbox(root, args).spawn().unwrap();
    let reader = read_aside(&mut child);
    let status = wait_at_most(&mut child, LIMIT, what);
    (status, reader.join().unwrap())
}

/// Reads the child's stdout in a thread of its own, so that a child printing more than a
/// pipe holds never waits for the test to read.
fn read_aside(child: &mut Child) -> std::thread::JoinHandle<String> {
    let mut stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
        out
    })
}

/// `sigbox hook claude` for `agent` on a PreToolUse event, within [`LIMIT`].
fn hook_answers(root: &Path, agent: &str) -> String {
    let mut child = sigbox(root, &["hook", "claude", "--as", agent])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            br#"{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"true"}}"#,
        )
        .unwrap();
    let reader = read_aside(&mut child);
    let status = wait_at_most(&mut child, LIMIT, &format!("hook claude --as {agent}"));
    assert!(status.success(), "hook: {status}");
    reader.join().unwrap()
}

/// Ids and redelivery marks printed by `poll --json`/`wait --json`.
fn delivered(out: &str) -> Vec<(String, u64)> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            (
                v["id"].as_str().unwrap().to_string(),
                v["redelivery"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn send(root: &Path, target: &str, message: &str) -> String {
    let (status, out) = answered(
        root,
        &["send", "STEER", message, "--target", target],
        &format!("send to {target}"),
    );
    assert!(status.success(), "send: {status}");
    out.trim().to_string()
}

/// A real process that takes an exclusive `flock` on `path` and is then really stopped.
fn stopped_holder(path: &Path) -> Child {
    // `-o`: `sleep` does not inherit the lock; `flock` holds it.
    let child = Command::new("flock")
        .arg("-o")
        .arg(path)
        .args(["sleep", "600"])
        .spawn()
        .expect("flock(1) from util-linux");
    let pid = child.id();
    // Stopped once it holds the lock (its line in /proc/locks).
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap());
    let until = std::time::Instant::now() + LIMIT;
    while !std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .any(|l| l.contains(&format!(" {pid} ")) && l.contains(&format!(":{ino} ")))
    {
        assert!(
            std::time::Instant::now() < until,
            "flock(1) never took the lock"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    signal(pid, Signal::STOP).unwrap();
    child
}

fn end(mut child: Child) {
    let _ = signal(child.id(), Signal::KILL);
    let _ = signal(child.id(), Signal::CONT);
    let _ = child.wait();
}

/// The root's fsync lock (taken on ext2 and ext4 without a journal, where two fsyncs of one
/// directory at once are not both durable when they return) held by a stopped process: every
/// send, poll and hook of every agent still answers, `doctor` names the process and says what
/// to do, and each signal sent is delivered once.
#[test]
fn a_stopped_holder_of_the_roots_fsync_lock_stalls_nobody() {
    if !common::have("flock") {
        eprintln!("skipped: no flock(1)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let (st, _) = answered(&root, &["init"], "init");
    assert!(st.success());
    let holder = stopped_holder(&root);
    let mut sent = HashSet::new();
    for i in 0..5 {
        sent.insert(send(&root, "Planner", &format!("p{i}")));
        sent.insert(send(&root, "Executor", &format!("e{i}")));
    }
    let (st, out) = answered(&root, &["--json", "poll", "--as", "Planner"], "poll");
    assert!(st.success(), "poll: {st}");
    let mut got = delivered(&out);
    let hooked = hook_answers(&root, "Executor");
    assert!(hooked.contains("e0") && hooked.contains("e4"), "{hooked}");
    let (st, doctor) = answered(&root, &["doctor"], "doctor");
    assert!(!st.success(), "doctor found nothing: {doctor}");
    let pid = holder.id();
    assert!(
        doctor.contains(&format!("process {pid} is stopped"))
            && doctor.contains(&format!("kill -CONT {pid}")),
        "{doctor}"
    );
    end(holder);
    let (_, out) = answered(&root, &["--json", "poll", "--as", "Executor"], "poll");
    got.extend(delivered(&out));
    // The hook delivered the Executor's five; nothing is left for it, nothing came twice.
    let (_, log) = answered(&root, &["--json", "log"], "log");
    let handled: HashSet<String> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["id"].as_str().map(String::from))
        .collect();
    assert_eq!(handled, sent, "every signal sent was taken once");
    assert!(got.iter().all(|(_, r)| *r == 0), "{got:?}");
}

/// Consumers of one agent stopped at seeded moments in the middle of their passes, holding
/// whatever they hold then (a file's claim lock between its link and its source's removal,
/// the root's fsync lock, a slot half committed): other agents' sends, polls and hooks answer
/// while each is stopped, and so does another consumer of the stopped one's own agent (which
/// may skip what the stopped one holds). Once every stopped consumer is killed, the agent's
/// next checkpoints deliver the rest: every signal sent reaches the agent, none twice unmarked.
#[test]
fn consumers_stopped_mid_pass_hold_back_only_what_they_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let (st, _) = answered(&root, &["init"], "init");
    assert!(st.success());
    let mut sent: HashSet<String> = HashSet::new();
    // Every delivery to the Executor, with its mark, from every consumer.
    let mut got: Vec<(String, u64)> = Vec::new();
    let mut others: HashSet<String> = HashSet::new();
    let mut others_sent: HashSet<String> = HashSet::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut stopped = Vec::new();
    for round in 0..6 {
        for i in 0..150 {
            sent.insert(send_fast(&root, &format!("r{round}m{i}")));
        }
        // A durable consumer, stopped at a seeded moment of its pass.
        let mut consumer = sigbox(&root, &["--json", "poll", "--as", "Executor"])
            .spawn()
            .unwrap();
        let printed = read_aside(&mut consumer);
        std::thread::sleep(Duration::from_micros(2_000 + next(40_000)));
        signal(consumer.id(), Signal::STOP).unwrap();
        // While it is stopped: another agent's sends, checkpoint and hook answer.
        for i in 0..3 {
            others_sent.insert(send(&root, "Planner", &format!("r{round}p{i}")));
        }
        let (st, out) = answered(
            &root,
            &["--json", "poll", "--as", "Planner"],
            "Planner's poll",
        );
        assert!(st.success() || st.code() == Some(0), "Planner's poll: {st}");
        others.extend(delivered(&out).into_iter().map(|(id, _)| id));
        hook_answers(&root, "Reviewer");
        // And the stopped one's own agent, through another consumer.
        let (_, out) = answered(
            &root,
            &["--json", "poll", "--as", "Executor"],
            "Executor's poll",
        );
        got.extend(delivered(&out));
        stopped.push((consumer, printed));
    }
    // The stopped consumers die where they stand (their claims in flight come again,
    // marked); what they printed before they were stopped counts as delivered.
    for (mut c, printed) in stopped {
        let _ = signal(c.id(), Signal::KILL);
        let _ = signal(c.id(), Signal::CONT);
        let _ = c.wait();
        let out = printed.join().unwrap();
        // A line cut by the kill is not a delivery.
        let whole = match out.rfind('\n') {
            Some(i) => &out[..=i],
            None => "",
        };
        got.extend(delivered(whole));
    }
    for _ in 0..3 {
        let (_, out) = answered(&root, &["--json", "poll", "--as", "Executor"], "last poll");
        got.extend(delivered(&out));
    }
    assert_eq!(others, others_sent, "the Planner's signals, each once");
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (id, mark) in &got {
        let n = seen.entry(id.clone()).or_default();
        if *n > 0 {
            assert!(*mark > 0, "{id} given twice, the second time unmarked");
        }
        *n += 1;
    }
    let ids: HashSet<String> = seen.keys().cloned().collect();
    let lost: Vec<_> = sent.difference(&ids).collect();
    assert!(lost.is_empty(), "{} lost: {lost:?}", lost.len());
}

/// A send for the Executor through the library, durable (the consumers' claims then race real
/// fsyncs), faster than a process per signal.
fn send_fast(root: &Path, message: &str) -> String {
    let mb = sigbox::MailboxOptions::new()
        .link_claims(true)
        .open(root)
        .unwrap();
    mb.send(
        sigbox::NewSignal::new(sigbox::SignalType::Steer)
            .target(sigbox::Target::Agent("Executor".into()))
            .message(message),
    )
    .unwrap()
}

/// A `poll` whose fsyncs find the root's lock held by a process that runs and never lets go
/// (here `flock(1)` waiting for its `sleep`) once waited in `flock` for ever, and ignored
/// SIGTERM there (the kernel restarts the call after the handler). Every wait is bounded now
/// and asks again without blocking: the poll delivers, and a SIGTERM in the middle of its
/// claims ends it, by that signal, with what it claimed printed.
#[test]
fn sigterm_ends_a_poll_whose_fsyncs_meet_a_lock_that_is_never_released() {
    if !common::have("flock") {
        eprintln!("skipped: no flock(1)");
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let (st, _) = answered(&root, &["init"], "init");
    assert!(st.success());
    let sent: HashSet<String> = (0..40)
        .map(|i| send_fast(&root, &format!("m{i}")))
        .collect();
    let holder = stopped_holder(&root);
    // Running again, holding the lock for good.
    signal(holder.id(), Signal::CONT).unwrap();
    let mut poll = sigbox(&root, &["--json", "poll", "--as", "Executor", "--max", "1"])
        .spawn()
        .unwrap();
    let reader = read_aside(&mut poll);
    let st = wait_at_most(&mut poll, LIMIT, "poll --max 1");
    assert!(st.success(), "{st}");
    assert_eq!(delivered(&reader.join().unwrap()).len(), 1);
    let mut poll = sigbox(&root, &["--json", "poll", "--as", "Executor"])
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(poll.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert!(!first.is_empty(), "the poll printed nothing");
    signal(poll.id(), Signal::TERM).unwrap();
    let rest = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
        out
    });
    let st = wait_at_most(&mut poll, LIMIT, "poll after SIGTERM");
    assert_eq!(st.signal(), Some(Signal::TERM.as_raw()), "{st}");
    let printed = delivered(&(first + &rest.join().unwrap()));
    end(holder);
    // What it printed is acknowledged; the rest comes to the next poll.
    let (_, out) = answered(&root, &["--json", "poll", "--as", "Executor"], "last poll");
    let all: Vec<(String, u64)> = printed.into_iter().chain(delivered(&out)).collect();
    assert_eq!(all.len() + 1, sent.len(), "{all:?}");
    assert!(all.iter().all(|(_, mark)| *mark == 0), "{all:?}");
}
