//! What the one integration-test binary of a crate needs (`tests/suite.rs` of `client/`,
//! `console/`, `bridge/` and `tests/`): each file of its `tests/` folder is a module of that
//! binary, so that `cargo test` builds one binary per crate and runs all of a crate's tests at
//! once. A file left out would not run at all: [`every_file_is_a_module`] fails then. A test
//! that changes what is shared by a whole process (its descriptor table, its limits) runs its
//! body in a process of its own ([`in_own_process`]), never beside the others.
//!
//! Each suite includes this file (`#[path = "../../tests/shared/suite.rs"] mod shared_suite;`).

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::process::Command;

/// Fails unless every `.rs` file directly in `dir`, `root` aside, is declared a module in
/// `root` (the binary's root file in `dir`) with `#[path = "<file name>"]`.
pub fn every_file_is_a_module(dir: &Path, root: &str) {
    let text = std::fs::read_to_string(dir.join(root))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(root).display()));
    every_file_is_a_module_of(dir, &[root], &text);
}

/// Fails unless every `.rs` file directly in `dir`, the `roots` aside, is declared a module
/// with `#[path = "<file name>"]` in `text` (the roots' text).
pub fn every_file_is_a_module_of(dir: &Path, roots: &[&str], text: &str) {
    let root = roots.join(", ");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".rs")
            && !roots.contains(&name.as_str())
            && !text.contains(&format!("#[path = \"{name}\"]"))
        {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "{}: not modules of {root}, so never run: {missing:?}",
        dir.display()
    );
}

/// The variable that tells a process started by [`in_own_process`] which test it is for.
const OWN_PROCESS: &str = "SIGBOX_TEST_OWN_PROCESS";

/// Runs `body`, the test `name` of the module `module` (its `module_path!()`), in a process of
/// its own: this test binary again, running that test alone. Inside that process, runs `body`
/// itself. Fails unless that process ran the test and it passed.
pub fn in_own_process(module: &str, name: &str, body: impl FnOnce()) {
    // A test's name in the harness is its path without the crate's name.
    let test = match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{name}"),
        None => name.to_string(),
    };
    if std::env::var_os(OWN_PROCESS).is_some_and(|v| v == test.as_str()) {
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(&exe)
        .args([test.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env(OWN_PROCESS, &test)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test}, run in its own process ({}): {}\n{stdout}\n{}",
        exe.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
