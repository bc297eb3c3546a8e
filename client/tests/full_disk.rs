//! A full disk never stops the delivery of what is already there (spec/mailbox.md §8). One
//! file to quarantine on a full filesystem once stopped every agent's pass before anything was
//! delivered: the reason beside it could not be written. Here the filesystem is really full (a
//! small tmpfs mounted for the test, filled to the last block by a file), and the real `sigbox`
//! runs on it. Needs root to mount; skipped with a line otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

/// A tmpfs mounted at a temporary directory for as long as it lives.
struct Mounted {
    at: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mounted {
    fn tmpfs(size: &str) -> Option<Mounted> {
        let dir = tempfile::tempdir().ok()?;
        let at = dir.path().join("mnt");
        std::fs::create_dir(&at).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .output()
            .ok()?
            .status
            .success();
        ok.then_some(Mounted { at, _dir: dir })
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.at).status();
    }
}

fn sigbox(root: &Path, args: &[&str]) -> std::process::Output {
    common::sigbox_at(BIN, root, args)
}

/// Fills the filesystem of `dir` to its last byte; the filler's path.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 4096];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => panic!("filling: {e}"),
        }
    }
    // The last bytes of a partial block, too.
    while f.write(&[0u8]).is_ok_and(|n| n == 1) {}
    path
}

#[test]
fn a_file_to_quarantine_on_a_full_disk_stops_no_delivery() {
    let Some(mnt) = Mounted::tmpfs("2m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let root = mnt.at.join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    let mut sent = Vec::new();
    for i in 0..10 {
        let o = sigbox(
            &root,
            &["send", "STEER", &format!("m{i}"), "--target", "Executor"],
        );
        assert!(o.status.success());
        sent.push(String::from_utf8(o.stdout).unwrap().trim().to_string());
    }
    // Invalid files of several kinds, each to be quarantined with a reason written beside it.
    std::fs::write(root.join("inputs/broken.yaml"), b"type: [STEER\n").unwrap();
    std::fs::write(root.join("inputs/unknown.json"), b"{\"type\": 3}").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("inputs/link.yaml")).unwrap();
    let filler = fill(&mnt.at);
    assert_eq!(
        std::fs::write(mnt.at.join("probe"), vec![0u8; 8192])
            .err()
            .and_then(|e| e.raw_os_error()),
        Some(28),
        "the disk is not full"
    );
    let got = sigbox(
        &root,
        &["--settle", "0s", "--json", "poll", "--as", "Executor"],
    );
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(got.status.success(), "poll failed on a full disk: {err}");
    let ids: Vec<String> = String::from_utf8_lossy(&got.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids, sent, "the Executor's signals, in order");
    assert!(err.contains("cannot quarantine this file now"), "{err}");
    // Nothing was lost meanwhile: the invalid files wait where they were.
    for name in ["broken.yaml", "unknown.json", "link.yaml"] {
        assert!(
            std::fs::symlink_metadata(root.join("inputs").join(name)).is_ok(),
            "{name} went"
        );
    }
    // Room again: the next pass quarantines them, each with its reason.
    std::fs::remove_file(filler).unwrap();
    let o = sigbox(&root, &["--settle", "0s", "poll", "--as", "Planner"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for name in ["broken.yaml", "unknown.json", "link.yaml"] {
        assert!(
            root.join("rejected")
                .join(format!("{name}.reason.json"))
                .is_file(),
            "{name}"
        );
        assert!(std::fs::symlink_metadata(root.join("inputs").join(name)).is_err());
    }
}
