//! The CLI's integration tests, one binary: each file of this folder is a module of it, so that
//! `cargo test` links one binary for the crate and runs all its tests at once, in the
//! harness's threads, instead of one binary after another. A test that changes what a whole
//! process shares runs its body in a process of its own (`shared_suite::in_own_process`).
//! A file of this folder that is not declared here fails `every_test_file_is_a_module`.

// Each file declares the helpers of `common/` itself (`mod common;`), as it did when it was a
// binary of its own: each has its copy of them.
#![allow(clippy::duplicate_mod)]

#[path = "../../tests/shared/suite.rs"]
mod shared_suite;

#[path = "asks.rs"]
mod asks;
#[path = "checkpoint.rs"]
mod checkpoint;
#[path = "cli.rs"]
mod cli;
#[path = "clock_skew.rs"]
mod clock_skew;
#[path = "dialects.rs"]
mod dialects;
#[path = "drop_zone.rs"]
mod drop_zone;
#[path = "full_disk.rs"]
mod full_disk;
#[path = "hooks.rs"]
mod hooks;
#[path = "hooks_permissions.rs"]
mod hooks_permissions;
#[path = "hostile_acks.rs"]
mod hostile_acks;
#[path = "hostile_root.rs"]
mod hostile_root;
#[path = "interrupts_cli.rs"]
mod interrupts_cli;
#[path = "kills_cli.rs"]
mod kills_cli;
#[path = "limits_cli.rs"]
mod limits_cli;
#[path = "linked_drops.rs"]
mod linked_drops;
#[path = "outputs.rs"]
mod outputs;
#[path = "permission_hook.rs"]
mod permission_hook;
#[path = "portable_rename.rs"]
mod portable_rename;
#[path = "power_loss.rs"]
mod power_loss;
#[path = "readme.rs"]
mod readme;
#[path = "root_moves.rs"]
mod root_moves;
#[path = "said_not_silent.rs"]
mod said_not_silent;
#[path = "schemas.rs"]
mod schemas;
#[path = "stopped.rs"]
mod stopped;
#[path = "streams_cli.rs"]
mod streams_cli;

#[test]
fn every_test_file_is_a_module() {
    shared_suite::every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
        "suite.rs",
    );
}
