//! The cross-crate tests, one binary: each file of this folder is a module of it, so that
//! `cargo test` links one binary for the crate and runs all its tests at once, in the
//! harness's threads, instead of one binary after another. A test that changes what a whole
//! process shares runs its body in a process of its own (`shared_suite::in_own_process`).
//! A file of this folder that is not declared here or in `processes.rs` fails
//! `every_test_file_is_a_module`. The tests that start processes are in `processes.rs`, a
//! binary of their own: a process started from a test binary holds, between its fork and its
//! exec, every descriptor of that binary, the locks of another test's mailbox among them (a
//! handle dropped would not let go of its claims at once), so the tests that drop and reopen
//! handles run where nothing forks.
#[path = "../../tests/shared/suite.rs"]
mod shared_suite;

#[path = "asks_crash.rs"]
mod asks_crash;
#[path = "conformance.rs"]
mod conformance;
#[path = "crash_consistency.rs"]
mod crash_consistency;
#[path = "faults.rs"]
mod faults;
#[path = "fuzz_corpus.rs"]
mod fuzz_corpus;
#[path = "meaning.rs"]
mod meaning;
#[path = "streams.rs"]
mod streams;
#[path = "structure.rs"]
mod structure;
#[path = "torn_records.rs"]
mod torn_records;

#[test]
fn every_test_file_is_a_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let both = ["suite.rs", "processes.rs"]
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap())
        .concat();
    shared_suite::every_file_is_a_module_of(&dir, &["suite.rs", "processes.rs"], &both);
}
