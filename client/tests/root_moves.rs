//! A `wait` follows its root: when `inputs/` is replaced, or the whole root is moved away and
//! made again, while it sleeps, a signal sent to the new one wakes it, long before its 30 s
//! backstop (its own `--timeout`, 15 s, would end it first otherwise).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn sigbox(root: &Path, args: &[&str]) -> std::process::Output {
    common::sigbox_at(BIN, root, args)
}

/// A `sigbox --json wait --as Executor --timeout <timeout>` on `root`, its output piped.
fn spawn_wait(root: &Path, timeout: &str) -> std::process::Child {
    Command::new(BIN)
        .arg("--root")
        .arg(root)
        .args(["--json", "wait", "--as", "Executor", "--timeout", timeout])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Starts a `wait`, lets it fall asleep, runs `replace`, sends to the (new) root, and returns
/// what the wait printed and its exit status.
fn wait_across(replace: impl FnOnce(&Path)) -> (String, Option<i32>, String) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    let child = spawn_wait(&root, "15s");
    // Asleep: it watches inputs/.
    common::wait_until("the wait watches inputs/", Duration::from_secs(30), || {
        common::watches(child.id(), &root.join("inputs"))
    });
    replace(&root);
    let sent = sigbox(&root, &["send", "steer", "after", "--target", "Executor"]);
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let id = String::from_utf8(sent.stdout).unwrap().trim().to_string();
    let out = child.wait_with_output().unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(
        printed.contains(&id),
        "the wait missed the signal sent to the new root (exit {:?}): {printed} {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    (printed, out.status.code(), id)
}

#[test]
fn a_wait_follows_a_replaced_inputs_directory() {
    let (_, code, _) = wait_across(|root| {
        std::fs::rename(root.join("inputs"), root.join("inputs.old")).unwrap();
        // The wait wakes while there is no inputs/ at all: it must keep waiting.
        std::thread::sleep(Duration::from_millis(300));
        std::fs::create_dir(root.join("inputs")).unwrap();
    });
    assert_eq!(code, Some(0));
}

#[test]
fn a_wait_follows_a_root_moved_away_and_made_again() {
    let (_, code, _) = wait_across(|root| {
        std::fs::rename(root, root.with_extension("old")).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(sigbox(root, &["init"]).status.success());
    });
    assert_eq!(code, Some(0));
}

/// A root that is a symlink, pointed at another mailbox while a `wait` sleeps (the link
/// replaced by a rename, as `ln -sfn` does): no event comes in the directories the wait
/// watches, and it looks once a second instead of only at its 30 s backstop. A signal sent
/// through the link to the new mailbox ends the wait within seconds (it is given 10; its own
/// `--timeout` is 60 s). Before, it slept until the backstop.
#[test]
fn a_wait_follows_a_root_symlink_pointed_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, link) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("signals"),
    );
    assert!(sigbox(&a, &["init"]).status.success());
    assert!(sigbox(&b, &["init"]).status.success());
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let mut child = spawn_wait(&link, "60s");
    // Asleep: it watches the inputs/ the link leads to now.
    common::wait_until("the wait watches inputs/", Duration::from_secs(30), || {
        common::watches(child.id(), &a.join("inputs"))
    });
    let fresh = tmp.path().join("signals.new");
    std::os::unix::fs::symlink(&b, &fresh).unwrap();
    std::fs::rename(&fresh, &link).unwrap();
    let sent = sigbox(&link, &["send", "steer", "after", "--target", "Executor"]);
    assert!(sent.status.success());
    let id = String::from_utf8(sent.stdout).unwrap().trim().to_string();
    assert!(b.join("inputs").join(format!("{id}.json")).exists());
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the wait slept on after its root's link was pointed elsewhere");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(
        printed.contains(&id),
        "the wait missed the signal sent through the repointed link (exit {:?}): {printed} {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
}
