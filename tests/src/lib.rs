//! Helpers shared by sigbox's cross-crate tests: a crash model of the filesystem seam, and
//! small utilities for building and inspecting mailboxes.
#![deny(missing_docs)]

pub mod crash;
pub mod fuzz_checks;

use std::collections::BTreeSet;
use std::path::Path;

/// The names of the regular files and other entries directly in `dir` (empty when missing).
pub fn names(dir: &Path) -> BTreeSet<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

/// Names in `rejected/` that are quarantined files (not their `.reason.json` companions).
pub fn rejected(root: &Path) -> BTreeSet<String> {
    names(&root.join("rejected"))
        .into_iter()
        .filter(|n| !n.ends_with(".reason.json"))
        .collect()
}

/// The `reason` recorded beside a quarantined file.
pub fn reason(root: &Path, name: &str) -> String {
    let p = root.join("rejected").join(format!("{name}.reason.json"));
    let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["reason"].as_str().unwrap().to_string()
}

/// How many signals sit in claim slots under `root/claimed/` (in flight, not acknowledged).
pub fn in_flight(root: &std::path::Path) -> usize {
    let Ok(agents) = std::fs::read_dir(root.join("claimed")) else {
        return 0;
    };
    let mut n = 0;
    for agent in agents {
        for slot in std::fs::read_dir(agent.unwrap().path()).unwrap() {
            n += std::fs::read_dir(slot.unwrap().path()).unwrap().count();
        }
    }
    n
}

/// The stem a test names a signal by: a dropped file's identity is `<stem>@<16 hex>`, the hex a
/// key of the file (its inode and birth time) that no test can know in advance, and that a copy
/// of the file (the crash model's replay) changes (spec/mailbox.md §2.4); a file sigbox wrote is
/// its stem alone. Panics on an identity whose key is malformed.
pub fn stem(id: &str) -> String {
    match id.rsplit_once('@') {
        Some((stem, key)) if key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit()) => {
            stem.to_string()
        }
        Some(_) => panic!("an identity with a malformed key: {id}"),
        None => id.to_string(),
    }
}
