//! The drop zone a person sees (spec/mailbox.md §5): a complete file renamed into `inputs/` is
//! read at once, by a poll (its ctime later than its mtime) and by a blocked `wait` (the
//! rename's event); a file written in place waits out the settle window after its last write;
//! a file moved into a buffer does not settle again; `--settle 0` reads files written in place
//! at once.
//!
//! No assertion here is on a duration: every "at once" is checked with a settle window far
//! longer than the command's own timeout, so a file that had to settle would make the command
//! come back empty.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

/// A fresh mailbox and a scratch directory beside it to write files in before moving them.
struct Zone {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    scratch: PathBuf,
}

impl Zone {
    fn new() -> Zone {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("signals");
        let scratch = tmp.path().join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        let z = Zone {
            _tmp: tmp,
            root,
            scratch,
        };
        z.ok("1s", &["init"]);
        z
    }

    fn cmd(&self, settle: &str, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env("SIGBOX_ROOT", &self.root)
            .env("SIGBOX_SETTLE", settle)
            .env_remove("RUST_LOG")
            .args(args);
        c
    }

    fn run(&self, settle: &str, args: &[&str]) -> Output {
        self.cmd(settle, args).output().unwrap()
    }

    fn ok(&self, settle: &str, args: &[&str]) -> String {
        let out = self.run(settle, args);
        assert!(
            out.status.success(),
            "sigbox {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `sigbox --json ARGS` with the settle window `settle`: one JSON value per line.
    fn json(&self, settle: &str, args: &[&str]) -> Vec<Value> {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        self.ok(settle, &a)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn inputs(&self) -> PathBuf {
        self.root.join("inputs")
    }

    /// Writes `body` in the scratch directory, waits `gap`, then renames it into `dir` as `name`.
    fn drop_by_rename(&self, dir: &Path, name: &str, body: &str, gap: Duration) {
        let tmp = self.scratch.join(name);
        std::fs::write(&tmp, body).unwrap();
        std::thread::sleep(gap);
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
}

const STEER: &str = "type: STEER\ntarget: Executor\nmessage: whole\n";

/// A complete file written elsewhere and then renamed in (its ctime later than its mtime) is
/// delivered by the first poll, with an hour's settle window.
#[test]
fn a_file_renamed_in_is_delivered_by_the_first_poll() {
    let z = Zone::new();
    // Written, then moved in at least one clock tick later: the rename's ctime is later.
    z.drop_by_rename(&z.inputs(), "note.yaml", STEER, Duration::from_millis(30));
    let got = z.json("1h", &["poll", "--as", "Executor"]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["message"], "whole");
}

/// A blocked `wait` reads a file renamed in at once: the rename's event says it arrived
/// whole, even when the write and the rename fall within one clock tick (equal timestamps).
#[test]
fn a_blocked_wait_takes_a_file_renamed_in_at_once() {
    let z = Zone::new();
    let child = z
        .cmd(
            "1h",
            &["--json", "wait", "--as", "Executor", "--timeout", "20s"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Armed: every watch in place (the root's comes before `inputs/`'s; a file renamed in
    // before `inputs/` is watched has no event to tell that it arrived whole, and settles).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = (0, 0);
    while Instant::now() < deadline {
        let n = common::inotify_watches(child.id());
        last = if n == last.0 { (n, last.1 + 1) } else { (n, 0) };
        if n >= 2 && last.1 >= 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    // No gap: the timestamps are most likely equal, and only the event tells.
    z.drop_by_rename(&z.inputs(), "now.yaml", STEER, Duration::ZERO);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "timed out: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["message"], "whole");
}

/// A file written in place, in two steps, is not delivered before the window has passed since
/// its last write; `ls` shows it as settling meanwhile; once settled it is delivered whole.
#[test]
fn a_file_written_in_place_waits_for_the_window_after_its_last_write() {
    let z = Zone::new();
    let path = z.inputs().join("steps.yaml");
    std::fs::write(&path, "type: STEER\n").unwrap();
    assert_eq!(z.ok("600ms", &["poll", "--as", "Orchestrator"]), "");
    // The second write past the window of the first, and the poll at once after it: a window
    // counted from the first write has passed, the one from the last has not (the poll has
    // the whole window to start in, however loaded the machine).
    std::thread::sleep(Duration::from_millis(700));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"target: Executor\nmessage: two steps\n")
        .unwrap();
    drop(f);
    // More than 700 ms after the first write, less than 600 ms after the last: still settling.
    assert_eq!(z.ok("600ms", &["poll", "--as", "Executor"]), "");
    let all = z.json("600ms", &["ls", "--all"]);
    assert!(
        all.iter().any(|v| v["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("steps.yaml"))),
        "ls --all shows the settling file: {all:?}"
    );
    let got = z.json("600ms", &["wait", "--as", "Executor", "--timeout", "10s"]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["message"], "two steps");
}

/// `--settle 0` reads a file written in place at once.
#[test]
fn no_window_reads_a_file_written_in_place_at_once() {
    let z = Zone::new();
    std::fs::write(z.inputs().join("now.yaml"), STEER).unwrap();
    assert_eq!(z.ok("1h", &["poll", "--as", "Executor"]), "");
    let got = z.json("0s", &["poll", "--as", "Executor"]);
    assert_eq!(got.len(), 1, "{got:?}");
}

/// A file the orchestrator moves into an absent agent's buffer does not settle a second time
/// there: the move is a rename.
#[test]
fn a_buffered_file_does_not_settle_again() {
    let z = Zone::new();
    z.drop_by_rename(
        &z.inputs(),
        "later.yaml",
        "type: STEER\ntarget: Planner\nmessage: kept\n",
        Duration::from_millis(30),
    );
    let pass = z.json("1h", &["poll", "--as", "Orchestrator"]);
    assert!(pass.is_empty(), "{pass:?}");
    let buffered = z.root.join("buffered/Planner");
    assert_eq!(std::fs::read_dir(&buffered).unwrap().count(), 1);
    let got = z.json("1h", &["poll", "--as", "Planner"]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["message"], "kept");
}

/// Nothing a pass does is invisible: with `-v` (and always on a terminal), `poll` says on
/// stderr what it buffered for whom, what it quarantined and why, and when a file still
/// settling becomes eligible; under `--json`, as JSON objects.
#[test]
fn poll_says_what_it_did_besides_delivering() {
    let z = Zone::new();
    z.ok("1s", &["send", "steer", "later", "--target", "Planner"]);
    std::fs::write(z.inputs().join("half.yaml"), "type: STEER\n").unwrap();
    z.drop_by_rename(&z.inputs(), "bad.json", "nope", Duration::from_millis(30));
    let out = z.run("1h", &["-v", "poll", "--as", "Orchestrator"]);
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    let rejected = z.root.join("rejected/bad.json");
    let settling = z.inputs().join("half.yaml");
    for want in [
        "buffered signal.",
        "for Planner, who is absent",
        &format!(
            "quarantined bad.json into {}: invalid JSON",
            rejected.display()
        ),
        &format!(
            "{} is still settling (written in place): eligible in",
            settling.display()
        ),
    ] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
    std::fs::write(z.inputs().join("bad2.json"), "nope").unwrap();
    let out = z.run("0s", &["--json", "-v", "poll", "--as", "Orchestrator"]);
    let events: Vec<Value> = String::from_utf8(out.stderr)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "rejected" && e["name"] == "bad2.json"),
        "{events:?}"
    );
    // Without -v and not on a terminal: stderr stays quiet.
    let out = z.run("1h", &["poll", "--as", "Orchestrator"]);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Text from senders never reaches a terminal raw: control characters in a message are
/// escaped in human output (and kept as they are in JSON).
#[test]
fn control_characters_from_senders_are_escaped() {
    let z = Zone::new();
    z.ok(
        "1s",
        &[
            "send",
            "steer",
            "a\u{1b}[2Jb\rc\u{7}",
            "--target",
            "Executor",
        ],
    );
    let human = z.ok("1s", &["poll", "--as", "Executor"]);
    assert!(
        !human.chars().any(|c| c.is_control() && c != '\n'),
        "{human:?}"
    );
    assert!(human.contains(r"a\u{1b}[2Jb\rc\u{7}"), "{human:?}");
    assert_eq!(human.lines().count(), 1);
    let z = Zone::new();
    z.ok("1s", &["send", "steer", "a\u{1b}b", "--target", "Executor"]);
    let got = z.json("1s", &["poll", "--as", "Executor"]);
    assert_eq!(got[0]["message"], "a\u{1b}b");
}
