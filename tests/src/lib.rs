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

/// `f(0)`, `f(1)`, ... up to the first `n` whose `f(n)` says it is the last (`.1` true), each
/// step's result in order. The steps are independent of each other (a crash enumeration: one
/// crash point each, on its own copy of the tree), so they run several at once, in batches:
/// the results, and the panic that fails the test, are those of the sequential loop, since
/// whatever a step after the last did is dropped.
pub fn par_until<R: Send>(f: impl Fn(usize) -> (R, bool) + Sync) -> Vec<R> {
    // Small batches: every step of the last batch after the last one is work thrown away.
    let batch = std::thread::available_parallelism()
        .map_or(4, |n| n.get() * 2)
        .clamp(2, 8);
    let mut out = Vec::new();
    for start in (0..).step_by(batch) {
        let f = &f;
        let steps: Vec<std::thread::Result<(R, bool)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (start..start + batch)
                .map(|n| {
                    s.spawn(move || std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(n))))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for step in steps {
            match step {
                Ok((r, last)) => {
                    out.push(r);
                    if last {
                        return out;
                    }
                }
                Err(payload) => std::panic::resume_unwind(payload),
            }
        }
    }
    unreachable!("the steps never end")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn par_until_gives_the_results_of_the_sequential_loop() {
        let steps = par_until(|n| (n * 10, n == 37));
        assert_eq!(steps, (0..=37).map(|n| n * 10).collect::<Vec<_>>());
        // A panic after the last step is dropped with it.
        let steps = par_until(|n| {
            assert!(n <= 2, "after the last");
            (n, n == 2)
        });
        assert_eq!(steps, [0, 1, 2]);
    }

    #[test]
    fn par_until_fails_with_the_first_failing_step_in_order() {
        let r = std::panic::catch_unwind(|| {
            par_until(|n| {
                assert!(n != 3 && n != 5, "step {n}");
                ((), n == 9)
            })
        });
        let msg = r.unwrap_err().downcast::<String>().unwrap();
        assert_eq!(*msg, "step 3");
    }

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
