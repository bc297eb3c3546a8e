//! The settle window goes by the filesystem's clock, not the reader's (spec/mailbox.md §5,
//! "Clocks"). A consumer whose clock ran ahead of the filesystem's by more than the window
//! (an NFS client ahead of its server, a container with a skewed clock) once read the first half
//! of a file written in two steps as settled, and gave it to the orchestrator; one behind held
//! every hand-written file for the length of the skew. Here the consumers really run with a
//! skewed clock (`faketime`, which shifts what the process's clock calls return; the file
//! times stay the kernel's), against the real `sigbox`. Skipped with a line without `faketime`.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

/// A liveness limit, far below the skews used: what a skewed clock once cost.
const LIMIT: Duration = Duration::from_secs(40);

/// `faketime` shifting the wall clock only: a skewed machine's or container's monotonic clock
/// is not a wall clock and is not skewed (and a monotonic clock shifted back puts the absolute
/// timeouts of the program's futex waits in the past for the kernel).
fn faketime(skew: &str) -> Command {
    let mut c = Command::new("faketime");
    c.args(["-f", skew, BIN])
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    c
}

fn skewed(root: &Path, skew: &str, args: &[&str]) -> std::process::Output {
    faketime(skew)
        .arg("--root")
        .arg(root)
        .args(args)
        .env_remove("SIGBOX_ROOT")
        .output()
        .unwrap()
}

fn messages(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["message"].as_str().unwrap_or("<none>").to_string()
        })
        .collect()
}

fn fresh() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    if !common::have("faketime") {
        eprintln!("skipped: no faketime (Debian's faketime package)");
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let o = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .arg("init")
        .output()
        .unwrap();
    assert!(o.status.success());
    // faketime really shifts this process's clock (else the test proves nothing).
    let o = skewed(&root, "+300s", &["doctor"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("ahead of the filesystem's"),
        "faketime did not shift the clock: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    Some((tmp, root))
}

#[test]
fn a_reader_ahead_of_the_filesystems_clock_never_reads_half_a_file() {
    let Some((_tmp, root)) = fresh() else { return };
    let path = root.join("inputs/by-hand.yaml");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(b"type: STEER\n").unwrap();
    // The first half alone parses: a no-target STEER, the orchestrator's. By a clock 30 s
    // ahead it is long settled; by the filesystem's it was written just now.
    let orch = skewed(&root, "+30s", &["--json", "poll", "--as", "Orchestrator"]);
    assert!(orch.status.success());
    assert_eq!(
        messages(&orch),
        Vec::<String>::new(),
        "half a file delivered"
    );
    f.write_all(b"target: Executor\nmessage: whole\n").unwrap();
    drop(f);
    let began = Instant::now();
    loop {
        let orch = skewed(&root, "+30s", &["--json", "poll", "--as", "Orchestrator"]);
        assert_eq!(
            messages(&orch),
            Vec::<String>::new(),
            "delivered to the orchestrator"
        );
        let got = skewed(&root, "+30s", &["--json", "poll", "--as", "Executor"]);
        match messages(&got).as_slice() {
            [] => {}
            [m] => {
                assert_eq!(m, "whole");
                break;
            }
            more => panic!("{more:?}"),
        }
        assert!(began.elapsed() < LIMIT, "never delivered");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_reader_behind_the_filesystems_clock_waits_the_window_not_the_skew() {
    let Some((_tmp, root)) = fresh() else { return };
    std::fs::write(
        root.join("inputs/by-hand.yaml"),
        b"type: STEER\ntarget: Executor\nmessage: in place\n",
    )
    .unwrap();
    // 120 s behind: by its own clock the file was written two minutes from now. A `wait`
    // wakes when the file settles, by its own clock too.
    let began = Instant::now();
    let mut child = faketime("-120s")
        .arg("--root")
        .arg(&root)
        .args(["--json", "wait", "--as", "Executor", "--timeout", "10m"])
        .env_remove("SIGBOX_ROOT")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let st = common::wait_at_most(&mut child, LIMIT, "wait with a clock 120 s behind");
    assert!(st.success(), "{st}");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(out.contains("in place"), "{out}");
    assert!(began.elapsed() < LIMIT);
    // And a plain poll by such a clock takes a file written in place once it has settled.
    std::fs::write(
        root.join("inputs/second.yaml"),
        b"type: STEER\ntarget: Executor\nmessage: second\n",
    )
    .unwrap();
    let began = Instant::now();
    loop {
        let got = skewed(&root, "-120s", &["--json", "poll", "--as", "Executor"]);
        if messages(&got) == ["second"] {
            break;
        }
        assert!(began.elapsed() < LIMIT, "held for the length of the skew");
        std::thread::sleep(Duration::from_millis(200));
    }
}
