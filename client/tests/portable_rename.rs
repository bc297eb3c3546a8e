//! The portable no-clobber rename (spec/mailbox.md §9.9), where `RENAME_NOREPLACE` is refused:
//! senders, two consumers of one agent and the orchestrator race as separate processes, and
//! every acknowledged send is delivered exactly once, nothing is quarantined, and each
//! broadcast is taken exactly once by the agent whose two consumers race for its
//! acknowledgement.
//!
//! Twice: forced through the seam (`SIGBOX_PORTABLE_RENAME=1`) on the test's own filesystem,
//! and on a FUSE mount (bindfs), which really refuses the flag. The FUSE run needs root,
//! `/dev/fuse` and `bindfs` (`.ci/run` installs it when it can); where they are missing it
//! says so and skips.
//!
//! What each run catches, measured: without the rename lock, a broadcast taken twice by one
//! agent, in both runs. With `link` + `unlink` instead of `rename` (the earlier fallback),
//! valid signals quarantined for "2 hard links" within seconds on FUSE; on a local filesystem
//! the window between the two calls is too short to be hit reliably, which is why the FUSE run
//! exists.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{have, ok, printed, run};

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

/// How long the processes race, per run.
const RACE: Duration = Duration::from_secs(4);

/// A loop of `sigbox <args>` in its own process group, until `stop` exists, appending stdout to
/// `log`.
fn spawn_loop(root: &Path, args: &str, log: &Path, stop: &Path, portable: bool) -> Child {
    let script = format!(
        "while [ ! -e '{stop}' ]; do '{BIN}' --root '{root}' {args} >> '{log}' \
         2>> '{log}.err'; done",
        stop = stop.display(),
        root = root.display(),
        log = log.display(),
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if portable {
        cmd.env(sigbox::PORTABLE_RENAME_ENV, "1");
    } else {
        cmd.env_remove(sigbox::PORTABLE_RENAME_ENV);
    }
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn().unwrap()
}

/// `sigbox <args>` once, which must succeed; its stdout.
fn sigbox(root: &Path, args: &[&str], portable: bool) -> String {
    let mut cmd = Command::new(BIN);
    cmd.arg("--root").arg(root).args(args);
    if portable {
        cmd.env(sigbox::PORTABLE_RENAME_ENV, "1");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "sigbox {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// What one race showed.
#[derive(Debug)]
struct Race {
    targeted: usize,
    broadcasts: usize,
    buffered_then_claimed: usize,
}

/// Senders, two Planner consumers and the orchestrator race in the mailbox at `root` (on a
/// filesystem the caller chose) for [`RACE`]; then everything is drained and checked.
fn race(root: &Path, work: &Path, portable: bool, label: &str) -> Race {
    sigbox(root, &["init"], portable);
    let stop = work.join("stop");
    let log = |n: &str| work.join(n);
    let loops = [
        ("send steer s --target Planner", "sent_targeted"),
        ("send info b", "sent_broadcast"),
        ("--json poll --as Planner", "planner_1"),
        ("--json poll --as Planner", "planner_2"),
        ("--json poll --as Orchestrator", "orchestrator"),
    ];
    let started = Instant::now();
    let mut children: Vec<Child> = loops
        .iter()
        .map(|(args, name)| spawn_loop(root, args, &log(name), &stop, portable))
        .collect();
    while started.elapsed() < RACE {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(&stop, b"").unwrap();
    for c in &mut children {
        let status = c.wait().unwrap();
        assert!(status.success(), "{label}: a loop ended with {status}");
    }
    for (_, name) in &loops {
        let err = std::fs::read_to_string(log(&format!("{name}.err"))).unwrap_or_default();
        assert!(
            err.trim().is_empty(),
            "{label}: {name} printed errors: {err}"
        );
    }
    // Drain: the orchestrator once more (it buffers what is left for the absent Planner), then
    // the Planner until nothing comes.
    sigbox(root, &["--json", "poll", "--as", "Orchestrator"], portable);
    let mut drained = String::new();
    loop {
        let out = sigbox(root, &["--json", "poll", "--as", "Planner"], portable);
        if out.is_empty() {
            break;
        }
        drained.push_str(&out);
    }
    let rejected: Vec<_> = std::fs::read_dir(root.join("rejected"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(rejected.is_empty(), "{label}: quarantined: {rejected:?}");
    // Broadcasts stay pending until the orchestrator finishes them; nothing else may.
    let ls = sigbox(root, &["--json", "ls"], portable);
    let pending: Vec<&str> = ls
        .lines()
        .filter(|l| !l.contains(r#""target":"ALL""#))
        .collect();
    assert!(pending.is_empty(), "{label}: still pending: {pending:?}");

    let mut got: HashMap<String, usize> = HashMap::new();
    let mut all = Vec::new();
    for name in ["planner_1", "planner_2"] {
        all.extend(printed(&std::fs::read_to_string(log(name)).unwrap()));
    }
    all.extend(printed(&drained));
    for (id, again) in &all {
        assert_eq!(
            *again, 0,
            "{label}: {id} marked as a redelivery, with no crash"
        );
        *got.entry(id.clone()).or_default() += 1;
    }
    let targeted = lines(&log("sent_targeted"));
    let broadcasts = lines(&log("sent_broadcast"));
    for id in targeted.iter().chain(&broadcasts) {
        match got.get(id) {
            None => panic!("{label}: acknowledged send {id} never delivered to the Planner"),
            Some(1) => {}
            Some(n) => panic!("{label}: {id} delivered {n} times to the Planner"),
        }
    }
    assert_eq!(
        got.len(),
        targeted.len() + broadcasts.len(),
        "{label}: delivered something never sent"
    );
    let buffered_then_claimed = all.len() - printed(&drained).len();
    let report = Race {
        targeted: targeted.len(),
        broadcasts: broadcasts.len(),
        buffered_then_claimed,
    };
    assert!(
        report.targeted > 20 && report.broadcasts > 20,
        "{label}: too little raced to show anything: {report:?}"
    );
    eprintln!(
        "{label}: {} targeted and {} broadcast sends, each delivered once to the Planner ({} \
         during the race, the rest drained); 0 quarantined",
        report.targeted, report.broadcasts, report.buffered_then_claimed
    );
    report
}

#[test]
fn forced_portable_renames_deliver_every_signal_once() {
    let tmp = tempfile::tempdir().unwrap();
    race(
        &tmp.path().join("signals"),
        tmp.path(),
        true,
        "portable (forced)",
    );
}

/// Unmounts the FUSE mount when dropped, however the check ends.
struct Fuse(PathBuf);

impl Drop for Fuse {
    fn drop(&mut self) {
        let _ = run("umount", &["-l", self.0.to_str().unwrap()]);
    }
}

#[test]
fn on_fuse_where_rename_noreplace_is_refused_every_signal_arrives_once() {
    let is_root = rustix::process::geteuid().is_root();
    if !is_root || !have("bindfs") || !Path::new("/dev/fuse").exists() {
        eprintln!("FUSE race skipped: needs root, /dev/fuse and bindfs (root: {is_root})");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let back = tmp.path().join("back");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&back).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    ok("bindfs", &[back.to_str().unwrap(), mnt.to_str().unwrap()]);
    let _mounted = Fuse(mnt.clone());
    // The mount really refuses the flag: otherwise this run shows nothing about the fallback.
    std::fs::write(mnt.join("a"), b"").unwrap();
    let refused = rustix::fs::renameat_with(
        rustix::fs::CWD,
        mnt.join("a"),
        rustix::fs::CWD,
        mnt.join("b"),
        rustix::fs::RenameFlags::NOREPLACE,
    );
    assert_eq!(
        refused,
        Err(rustix::io::Errno::INVAL),
        "bindfs took RENAME_NOREPLACE"
    );
    std::fs::remove_file(mnt.join("a")).unwrap();
    race(&mnt.join("signals"), tmp.path(), false, "FUSE (bindfs)");
}
