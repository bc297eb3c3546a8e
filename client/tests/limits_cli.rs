//! Guards `sigbox poll` under a small descriptor limit (`ulimit -n`): with 17 it delivers every
//! pending signal, quarantining none; with too few to claim at all it exits 2 naming the
//! reason, and every signal is still pending.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

mod common;

use common::mailbox_with;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

/// `sigbox --json poll --as Executor` under `ulimit -n limit`.
fn poll_with_limit(root: &Path, limit: u32) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {limit} && exec \"$0\" --root \"$1\" --json poll --as Executor"
        ))
        .arg(BIN)
        .arg(root)
        .env("SIGBOX_LINK_CLAIMS", "1")
        .output()
        .unwrap()
}

/// The descriptor limit `poll` must deliver everything under: 16, and one more for the rename
/// lock where claims move by link (spec/mailbox.md §9.10, this machine's root filesystem may
/// be one), forced here so that the figure does not depend on it.
const LIMIT: u32 = 17;

#[test]
fn poll_under_ulimit_17_delivers_everything_and_quarantines_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let sent = mailbox_with(&root, 100);
    let mb = sigbox::Mailbox::open(&root).unwrap();
    let out = poll_with_limit(&root, LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: HashSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(printed, sent);
    assert!(mb.rejected().unwrap().is_empty());
}

#[test]
fn poll_with_too_few_descriptors_claims_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let sent = mailbox_with(&root, 10);
    let mb = sigbox::Mailbox::open(&root).unwrap();
    let out = poll_with_limit(&root, 6);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Too many open files"), "{err}");
    assert!(out.stdout.is_empty());
    let pending: HashSet<String> = mb.pending().unwrap().into_iter().map(|p| p.id).collect();
    assert_eq!(pending, sent, "a signal left inputs/ without being printed");
    assert!(mb.rejected().unwrap().is_empty());
}

/// `sigbox --root <root> --json poll --as Executor`, to be run.
fn json_poll(root: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--root")
        .arg(root)
        .args(["--json", "poll", "--as", "Executor"]);
    c
}

/// A dropped file just under the cap: its record (the signal and the handling block a claim
/// writes into it) is over the cap, and the cap is the signal's. A consumer killed while
/// handing it over leaves it to the next, which delivers it again, marked; once delivered,
/// `log` and `doctor` read its record.
#[test]
fn a_signal_under_the_cap_is_never_refused_for_its_record() {
    use std::io::Read;
    use std::process::Stdio;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    sigbox::Mailbox::init(&root).unwrap();
    let cap = 1024 * 1024;
    let head = "{\"type\":\"STEER\",\"target\":\"Executor\",\"message\":\"";
    let tail = "\"}";
    let mut big = String::from(head);
    big.push_str(&"x".repeat(cap - 26 - head.len() - tail.len()));
    big.push_str(tail);
    assert_eq!(big.len(), cap - 26);
    let staged = tmp.path().join("big.json");
    std::fs::write(&staged, &big).unwrap();
    // Renamed in a clock tick after its last write: complete at once (spec §5).
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::rename(&staged, root.join("inputs/big.json")).unwrap();
    // A consumer blocked handing it over (a pipe nobody reads: far smaller than the signal),
    // killed there.
    let mut c = json_poll(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    c.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    c.kill().unwrap();
    c.wait().unwrap();
    // The next consumer gets it again, marked, whole.
    let out = json_poll(&root).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        line["redelivery"],
        1,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        line["message"].as_str().unwrap().len(),
        big.len() - head.len() - tail.len()
    );
    let rejected: Vec<_> = std::fs::read_dir(root.join("rejected")).unwrap().collect();
    assert!(rejected.is_empty(), "quarantined: {rejected:?}");
    // Its record in processed/ is over the cap and readable.
    let record = root.join("processed/big.json");
    assert!(std::fs::metadata(&record).unwrap().len() > cap as u64);
    let log = Command::new(BIN)
        .args(["--root", root.to_str().unwrap(), "--json", "log"])
        .output()
        .unwrap();
    assert!(
        log.status.success(),
        "{}",
        String::from_utf8_lossy(&log.stderr)
    );
    let log = String::from_utf8(log.stdout).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("\"Executor\""), "{log}");
    let doctor = Command::new(BIN)
        .args(["--root", root.to_str().unwrap(), "doctor"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout).to_string()
        + &String::from_utf8_lossy(&doctor.stderr);
    assert!(!said.contains("unreadable"), "{said}");
    // Over the cap by its own bytes: still refused, naming the cap.
    let mut over = String::from(head);
    over.push_str(&"y".repeat(cap + 1 - head.len() - tail.len()));
    over.push_str(tail);
    std::fs::write(&staged, &over).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::rename(&staged, root.join("inputs/over.json")).unwrap();
    let out = json_poll(&root).output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    let why = std::fs::read_to_string(root.join("rejected/over.json.reason.json")).unwrap();
    assert!(why.contains("over the 1048576 byte cap"), "{why}");
}
