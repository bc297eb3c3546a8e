//! What sigbox refuses or keeps is said, with what to do: never a silent skip, never an error
//! that names a path inside a directory that is missing without saying so. Each test runs the
//! real `sigbox` on the real hostile thing.

use std::path::Path;
use std::process::Command;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn sigbox(root: &Path, args: &[&str]) -> std::process::Output {
    common::sigbox_at(BIN, root, args)
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn fresh() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    (tmp, root)
}

/// A layout directory removed by hand (or never made by the tool that made the root): a poll
/// names that directory as missing and says to run `init`, which mends it.
#[test]
fn a_missing_layout_directory_is_named_with_init_as_the_way_out() {
    for dir in ["agents", "acks"] {
        let (_tmp, root) = fresh();
        // A broadcast pending: its delivery writes an ack under acks/.
        assert!(
            sigbox(&root, &["send", "INFO", "all", "--target", "ALL"])
                .status
                .success()
        );
        std::fs::remove_dir_all(root.join(dir)).unwrap();
        let o = sigbox(&root, &["poll", "--as", "Executor"]);
        assert_eq!(o.status.code(), Some(2), "{dir}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains(&format!("{}: missing", root.join(dir).display()))
                && err.contains("sigbox init"),
            "{dir}: {err}"
        );
        assert!(sigbox(&root, &["init"]).status.success());
        let o = sigbox(&root, &["poll", "--as", "Executor"]);
        assert!(o.status.success(), "{dir} after init: {}", stderr(&o));
    }
}

/// An APPROVE or SKIP for an agent that is not the orchestrator is sent (upstream allows it),
/// with a warning: only the orchestrator takes it, in an approval state.
#[test]
fn an_approve_for_a_subagent_is_sent_with_a_warning() {
    let (_tmp, root) = fresh();
    for t in ["APPROVE", "SKIP"] {
        let o = sigbox(&root, &["send", t, "go", "--target", "Executor"]);
        assert!(o.status.success());
        let err = stderr(&o);
        assert!(
            err.contains(&format!("only the orchestrator takes {t}"))
                && err.contains("Executor never receives it"),
            "{err}"
        );
    }
    let o = sigbox(
        &root,
        &["send", "APPROVE", "go", "--target", "Orchestrator"],
    );
    assert!(o.status.success());
    assert!(
        !stderr(&o).contains("only the orchestrator"),
        "{}",
        stderr(&o)
    );
}

/// `gc --rejected` removes files, never a tree: a quarantined directory stays, and is said.
#[test]
fn gc_says_which_quarantined_directory_it_keeps() {
    let (_tmp, root) = fresh();
    std::fs::create_dir(root.join("inputs/adir.yaml")).unwrap();
    std::fs::write(root.join("inputs/adir.yaml/inner"), b"x").unwrap();
    std::fs::write(root.join("inputs/bad.json"), b"{").unwrap();
    let o = sigbox(&root, &["--settle", "0s", "poll", "--as", "Executor"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(root.join("rejected/adir.yaml").is_dir());
    let o = sigbox(&root, &["gc", "--rejected", "--older-than", "0s"]);
    assert!(o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("adir.yaml") && err.contains("a quarantined directory is kept"),
        "{err}"
    );
    assert!(root.join("rejected/adir.yaml/inner").is_file());
    assert!(!root.join("rejected/bad.json").exists());
}

/// A FIFO, a directory or a symlink named as a mux signal file is not counted and is said.
#[test]
fn mux_says_what_it_does_not_count() {
    // mux paths are relative to the project's root, as upstream's are.
    let tmp = tempfile::tempdir().unwrap();
    let session = tmp.path().join("s1");
    let signals = session.join(".signals");
    std::fs::create_dir_all(&signals).unwrap();
    std::fs::write(signals.join("plan.done"), b"").unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(signals.join("build.done"))
            .status()
            .unwrap()
            .success()
    );
    std::fs::create_dir(signals.join("review.done")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", signals.join("test.fail")).unwrap();
    let o = Command::new(BIN)
        .current_dir(tmp.path())
        .args(["mux", "check", "s1", "--expected", "1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    for (name, what) in [
        ("build.done", "a FIFO"),
        ("review.done", "a directory"),
        ("test.fail", "a symlink"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(name) && l.contains(what) && l.contains("not counted")),
            "{name}: {err}"
        );
    }
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"complete\":1"), "{out}");
}
