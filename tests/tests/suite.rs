//! The cross-crate tests, one binary: each file of this folder is a module of it, so that
//! `cargo test` links one binary for the crate and runs all its tests at once, in the
//! harness's threads, instead of one binary after another. A test that changes what a whole
//! process shares runs its body in a process of its own (`shared_suite::in_own_process`).
//! A file of this folder that is not declared here fails `every_test_file_is_a_module`.
#[path = "../../tests/shared/suite.rs"]
mod shared_suite;

// The harness starts the tests in the order of their names, two at a time (one per core). The
// longest test of the suite, the soak of `races.rs` (20,000 durable signals: a minute on a
// quiet disk, three on a busy one), is named to start first, so that the other tests run
// beside it instead of leaving it to run alone at the end.
#[path = "races.rs"]
mod a_races;

#[path = "asks_crash.rs"]
mod asks_crash;
#[path = "conformance.rs"]
mod conformance;
#[path = "crash_consistency.rs"]
mod crash_consistency;
#[path = "faults.rs"]
mod faults;
#[path = "fd_exhaustion.rs"]
mod fd_exhaustion;
#[path = "fuzz_corpus.rs"]
mod fuzz_corpus;
#[path = "hostile_input.rs"]
mod hostile_input;
#[path = "kills.rs"]
mod kills;
#[path = "meaning.rs"]
mod meaning;
#[path = "racy_listing.rs"]
mod racy_listing;
#[path = "streams.rs"]
mod streams;
#[path = "structure.rs"]
mod structure;
#[path = "torn_records.rs"]
mod torn_records;

#[test]
fn every_test_file_is_a_module() {
    shared_suite::every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
        "suite.rs",
    );
}
