//! Builds the `sigbox` Python package with maturin, installs the wheel, and runs its pytest
//! suite (`tests/test_sigbox.py`) and `mypy --strict` on a typed example. The Python is the
//! one all the Python-driven tests share (`tests/shared/python.rs`): `SIGBOX_PYTHON` when set
//! (`.ci/run` sets it), else `target/py-tools` with the pinned tools, made once.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../tests/shared/python.rs"]
mod shared_python;

fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn target() -> PathBuf {
    here().join("../target")
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Python with maturin, pytest and mypy.
fn python() -> PathBuf {
    shared_python::python()
}

/// The `sigbox` CLI the tests race against.
fn sigbox_bin() -> PathBuf {
    let bin = target().join("debug/sigbox");
    run(Command::new(env!("CARGO"))
        .args(["build", "-p", "sigbox-client", "--bin", "sigbox"])
        .current_dir(here()));
    bin
}

#[test]
fn the_python_package_builds_installs_and_passes_its_suite() {
    let py = python();
    let wheels = target().join("py-wheels");
    let _ = std::fs::remove_dir_all(&wheels);
    run(Command::new(&py)
        .args(["-m", "maturin", "build", "--quiet", "-o"])
        .arg(&wheels)
        .arg("-i")
        .arg(&py)
        .current_dir(here()));
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a wheel");
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.contains("-cp39-abi3-"),
        "one abi3 wheel for 3.9+: {name}"
    );
    run(Command::new(&py)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--force-reinstall",
            "--no-deps",
        ])
        .arg(&wheel));
    let tmp = tempfile::tempdir().unwrap();
    run(Command::new(&py)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(here().join("tests/test_sigbox.py"))
        .arg(here().join("tests/test_asks.py"))
        .env("SIGBOX_BIN", sigbox_bin())
        .env_remove("SIGBOX_ROOT")
        .current_dir(tmp.path()));
    run(Command::new(&py)
        .args([
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            "/dev/null",
        ])
        .arg(here().join("tests/typecheck_example.py"))
        .current_dir(tmp.path()));
}
