//! Helpers shared by sigbox's cross-crate tests: a crash model of the filesystem seam, and
//! small utilities for building and inspecting mailboxes.
#![deny(missing_docs)]

pub mod crash;
pub mod fuzz_checks;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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

/// Runs `f` on every item, on several threads at once; returns when all are done. For checks
/// that are independent of each other and bound by `fsync` more than by the CPU (a mailbox
/// makes each send and claim durable): they overlap their waits for the disk. The first panic
/// stops the items not yet started and is raised again here, with its own message.
pub fn par_each<T: Sync>(items: &[T], f: impl Fn(&T) + Sync) {
    let workers = std::thread::available_parallelism()
        .map_or(4, |n| n.get() * 4)
        .clamp(4, 16)
        .min(items.len().max(1));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let first_panic = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(item)));
                    if let Err(payload) = done {
                        stop.store(true, Ordering::Relaxed);
                        first_panic.lock().unwrap().get_or_insert(payload);
                    }
                }
            });
        }
    });
    if let Some(payload) = first_panic.into_inner().unwrap() {
        std::panic::resume_unwind(payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn par_each_runs_every_item_once_and_raises_a_panic() {
        let seen = Mutex::new(Vec::new());
        let items: Vec<usize> = (0..100).collect();
        par_each(&items, |&i| seen.lock().unwrap().push(i));
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, items);
        let r = std::panic::catch_unwind(|| par_each(&items, |&i| assert!(i != 42, "item {i}")));
        assert_eq!(*r.unwrap_err().downcast::<String>().unwrap(), "item 42");
    }
}
