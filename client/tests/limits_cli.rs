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
