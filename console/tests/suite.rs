//! The console's integration tests, one binary: each file of this folder is a module of it, so that
//! `cargo test` links one binary for the crate and runs all its tests at once, in the
//! harness's threads, instead of one binary after another. A test that changes what a whole
//! process shares runs its body in a process of its own (`shared_suite::in_own_process`).
//! A file of this folder that is not declared here fails `every_test_file_is_a_module`.

// Each file declares the helpers of `common/` itself (`mod common;`), as it did when it was a
// binary of its own: each has its copy of them.
#![allow(clippy::duplicate_mod)]

#[path = "../../tests/shared/suite.rs"]
mod shared_suite;

#[path = "api.rs"]
mod api;
#[path = "asks.rs"]
mod asks;
#[path = "browser.rs"]
mod browser;

#[test]
fn every_test_file_is_a_module() {
    shared_suite::every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
        "suite.rs",
    );
}
