//! Guards the hand-over of `sigbox poll` and `wait` under SIGINT, SIGTERM and SIGHUP: a pass
//! interrupted in the middle of thousands of claims prints every signal it claimed before the
//! process ends by the signal, so nothing claimed is lost and nothing is printed twice; an idle
//! `wait` ends at once; `--max` bounds one call.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::process::Signal;

mod common;

use common::mailbox_with;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn processed(root: &Path) -> HashSet<String> {
    sigbox::Mailbox::open(root)
        .unwrap()
        .processed()
        .unwrap()
        .into_iter()
        .map(|s| s.unwrap().id)
        .collect()
}

fn ids_of(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["id"].as_str().unwrap().to_string()
        })
        .collect()
}

/// Runs `sigbox --json ARGS`, sends `signal` once the first signal is printed (the pass is
/// then in the middle of its claims), and returns the printed lines and how it ended.
fn interrupt_after_first_line(root: &Path, args: &[&str], signal: Signal) -> (Vec<String>, i32) {
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(root)
        .arg("--json")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut out = vec![lines.next().expect("the pass printed nothing").unwrap()];
    common::signal(child.id(), signal).unwrap();
    out.extend(lines.map(Result::unwrap));
    let status = child.wait().unwrap();
    let by = status
        .signal()
        .unwrap_or_else(|| panic!("{signal:?}: ended with {status} instead of by the signal"));
    (out, by)
}

fn interrupted_poll_prints_everything_it_claimed(signal: Signal) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let sent = mailbox_with(&root, 5_000);
    let (lines, by) = interrupt_after_first_line(&root, &["poll", "--as", "Executor"], signal);
    assert_eq!(by, signal.as_raw(), "ended by another signal");
    let printed = ids_of(&lines);
    let unique: HashSet<String> = printed.iter().cloned().collect();
    assert_eq!(unique.len(), printed.len(), "a signal was printed twice");
    let claimed = processed(&root);
    assert_eq!(
        claimed, unique,
        "claimed and printed differ: a claim was lost"
    );
    assert!(
        unique.len() < sent.len(),
        "{signal:?} came after the pass had finished: nothing was interrupted"
    );
    // What was not claimed is still pending, and the next poll delivers it.
    let rest = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["--json", "poll", "--as", "Executor"])
        .output()
        .unwrap();
    assert!(rest.status.success());
    let rest: Vec<String> = String::from_utf8(rest.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let mut all = unique;
    for id in ids_of(&rest) {
        assert!(all.insert(id), "delivered again after the interrupted pass");
    }
    assert_eq!(all, sent);
    eprintln!(
        "{signal:?}: {} of {} printed before the signal, 0 lost",
        printed.len(),
        sent.len()
    );
}

#[test]
fn sigterm_during_a_poll_loses_no_claim() {
    interrupted_poll_prints_everything_it_claimed(Signal::TERM);
}

#[test]
fn sigint_during_a_poll_loses_no_claim() {
    interrupted_poll_prints_everything_it_claimed(Signal::INT);
}

#[test]
fn sighup_during_a_poll_loses_no_claim() {
    interrupted_poll_prints_everything_it_claimed(Signal::HUP);
}

#[test]
fn sigterm_during_a_wait_pass_loses_no_claim() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let sent = mailbox_with(&root, 5_000);
    let (lines, by) = interrupt_after_first_line(
        &root,
        &["wait", "--as", "Executor", "--timeout", "60s"],
        Signal::TERM,
    );
    assert_eq!(by, 15);
    let printed: HashSet<String> = ids_of(&lines).into_iter().collect();
    assert_eq!(printed.len(), lines.len(), "a signal was printed twice");
    assert_eq!(processed(&root), printed, "a claim was lost");
    assert!(printed.len() < sent.len(), "nothing was interrupted");
}

#[test]
fn an_idle_wait_ends_by_the_signal() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    mailbox_with(&root, 0);
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["wait", "--as", "Executor", "--timeout", "120s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // In its sleep: it watches inputs/ (a signal before that would end it the same way, and
    // the test would not show it).
    common::wait_until("the wait watches inputs/", Duration::from_secs(30), || {
        common::watches(child.id(), &root.join("inputs"))
    });
    common::signal(child.id(), Signal::INT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(2), "{status}");
}

#[test]
fn max_bounds_one_call() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let sent = mailbox_with(&root, 100);
    let run = || {
        let out = Command::new(BIN)
            .arg("--root")
            .arg(&root)
            .args(["--json", "poll", "--as", "Executor", "--max", "30"])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let mut seen = HashSet::new();
    for want in [30, 30, 30, 10, 0] {
        let got = ids_of(&run());
        assert_eq!(got.len(), want);
        for id in got {
            assert!(seen.insert(id), "delivered twice");
        }
        assert_eq!(processed(&root), seen);
    }
    assert_eq!(seen, sent);
}

#[test]
fn a_poll_whose_output_is_full_puts_its_claims_back() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let sent = mailbox_with(&root, 500);
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["--json", "poll", "--as", "Executor"])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pending again"), "{err}");
    assert!(processed(&root).is_empty(), "claimed and never printed");
    let pending: HashSet<String> = sigbox::Mailbox::open(&root)
        .unwrap()
        .pending()
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(pending, sent);
}

/// A mailbox at `root` holding `n` STEER signals for the Executor of about 3 KB each: a group
/// of 64 is far more than a pipe holds.
fn mailbox_of_big_signals(root: &Path, n: usize) -> HashSet<String> {
    let mb = sigbox::MailboxOptions::new()
        .durability(sigbox::Durability::RelaxedNoFsync)
        .init(root)
        .unwrap();
    (0..n)
        .map(|i| {
            mb.send(
                sigbox::NewSignal::new(sigbox::SignalType::Steer)
                    .target(sigbox::Target::Agent("Executor".into()))
                    .message(format!("{i} {}", "x".repeat(3000))),
            )
            .unwrap()
        })
        .collect()
}

/// The signals `sigbox --json poll` delivers now, with their redelivery counts.
fn poll_all(root: &Path) -> Vec<(String, u64)> {
    let out = Command::new(BIN)
        .arg("--root")
        .arg(root)
        .args(["--json", "poll", "--as", "Executor"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::printed(&String::from_utf8(out.stdout).unwrap())
}

/// A `poll` blocked writing into a FIFO whose reader never reads ends by SIGTERM or SIGINT,
/// with that signal's status, and acknowledges nothing: the next poll delivers every signal,
/// those of the group it was writing marked as redeliveries (part of it went into the FIFO).
fn a_stop_signal_ends_a_poll_blocked_on_a_reader_that_does_not_read(signal: Signal) {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let sent = mailbox_of_big_signals(&root, 100);
    let fifo = tmp.path().join("fifo");
    common::ok("mkfifo", &[fifo.to_str().unwrap()]);
    // The reader: opened, and never read.
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo)
        .unwrap();
    let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["--json", "poll", "--as", "Executor"])
        .stdout(writer)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Blocked once the FIFO is full: well filled (each write is whole lines, so its 16 pages
    // may hold less than 64 KiB), and nothing more coming.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = (0, std::time::Instant::now());
    loop {
        let now = rustix::io::ioctl_fionread(&reader).unwrap();
        if now != last.0 {
            last = (now, std::time::Instant::now());
        } else if now >= 32 * 1024 && last.1.elapsed() > Duration::from_millis(300) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the poll never filled the FIFO"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    common::signal(child.id(), signal).unwrap();
    let status = common::wait_at_most(
        &mut child,
        Duration::from_secs(20),
        &format!("{signal:?} did not end a poll blocked writing to a reader that does not read"),
    );
    assert_eq!(status.signal(), Some(signal.as_raw()), "{status}");
    assert!(processed(&root).is_empty(), "acknowledged, never read");
    drop(reader);
    let again = poll_all(&root);
    let ids: HashSet<String> = again.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids.len(), again.len(), "delivered twice");
    assert_eq!(ids, sent, "a signal was lost");
    let marked = again.iter().filter(|(_, n)| *n > 0).count();
    assert!(
        marked > 0,
        "the group partly written is not marked as delivered again"
    );
    assert_eq!(processed(&root), sent);
}

#[test]
fn sigterm_ends_a_poll_blocked_on_a_reader_that_does_not_read() {
    a_stop_signal_ends_a_poll_blocked_on_a_reader_that_does_not_read(Signal::TERM);
}

#[test]
fn sigint_ends_a_poll_blocked_on_a_reader_that_does_not_read() {
    a_stop_signal_ends_a_poll_blocked_on_a_reader_that_does_not_read(Signal::INT);
}

/// `sigbox --root <root> <args>` run by `sh`, so that `args` may end with redirections
/// (`>/dev/null`, `>&-`).
fn sigbox_sh(root: &Path, args: &str) -> std::process::Output {
    Command::new("sh")
        .args([
            "-c",
            &format!("exec \"$0\" --root \"$1\" {args}"),
            BIN,
            root.to_str().unwrap(),
        ])
        .output()
        .unwrap()
}

/// `poll` and `wait` whose stdout reaches nobody (closed, which the runtime turns into
/// `/dev/null`, or `/dev/null`) take nothing and say so (exit 2); `--discard` takes on purpose.
#[test]
fn a_poll_whose_stdout_reaches_nobody_takes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let sent = mailbox_with(&root, 5);
    for (how, args) in [
        ("closed", "poll --as Executor >&-"),
        ("/dev/null", "poll --as Executor >/dev/null"),
        ("closed", "wait --as Executor --timeout 5s >&-"),
        ("/dev/null", "wait --as Executor --timeout 5s >/dev/null"),
        ("closed", "poll --as Executor --max 1 1>&-"),
    ] {
        let out = sigbox_sh(&root, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{how}: {args}: {err}");
        assert!(
            err.contains("/dev/null") && err.contains("--discard"),
            "{how}: {err}"
        );
        assert!(processed(&root).is_empty(), "{how}: {args}: taken unread");
    }
    // Under --json, the error names no file: `path` is null (it once held the message's start).
    let out = sigbox_sh(&root, "--json poll --as Executor >/dev/null");
    let err: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).unwrap();
    assert_eq!(err["path"], serde_json::Value::Null, "{err}");
    assert!(
        err["error"].as_str().unwrap().contains("/dev/null"),
        "{err}"
    );
    let pending: HashSet<String> = sigbox::Mailbox::open(&root)
        .unwrap()
        .pending()
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(pending, sent);
    // On purpose.
    let out = sigbox_sh(&root, "poll --as Executor --discard >/dev/null");
    assert!(out.status.success());
    assert_eq!(processed(&root), sent);
}

/// A reader that takes one line and leaves (`sigbox poll | head -1`) while a group is being
/// written: the group is not acknowledged, and the next poll delivers it again marked, the
/// line that was read among them; nothing lost, nothing read comes back unmarked.
#[test]
fn a_group_cut_short_by_its_reader_comes_again_marked() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let sent = mailbox_of_big_signals(&root, 100);
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["--json", "poll", "--as", "Executor"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is gone now.
    let out = child.wait_with_output().unwrap();
    let read: serde_json::Value = serde_json::from_str(&first).unwrap();
    let read = read["id"].as_str().unwrap().to_string();
    assert!(
        !processed(&root).contains(&read),
        "acknowledged, though the group was cut short"
    );
    let again = poll_all(&root);
    let ids: HashSet<String> = again.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids.len(), again.len(), "delivered twice");
    assert_eq!(ids, sent, "a signal was lost");
    let marked = again.iter().find(|(id, _)| *id == read).unwrap().1;
    assert!(marked > 0, "the line read comes again unmarked");
    // A closed output ends it as it ends any command.
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
