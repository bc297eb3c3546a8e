//! The one Python the MCP, Python-package and bridge tests run: `$SIGBOX_PYTHON` when set
//! (`.ci/run` sets it), else the virtual environment `target/py-tools` with the pinned tools of
//! `.ci/py-tools.txt` (the same one `.ci/run` makes). The first test that needs it makes it,
//! once, under a lock file: test binaries run at once wait for it instead of making it twice,
//! and later runs reuse it while the pins are the same.
//!
//! Each test crate includes this file (`#[path = ...] mod python;`).

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The pinned requirements, one line each (`.ci/py-tools.txt` without its comments).
const PINS: &str = include_str!("../../.ci/py-tools.txt");

/// The pins as `.ci/run` writes them into `target/py-tools/.pins`: on one line, by spaces.
fn pins() -> Vec<&'static str> {
    PINS.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A Python with every pinned tool (see the module's doc); made at most once per process.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("SIGBOX_PYTHON").filter(|p| !p.is_empty()) {
                return PathBuf::from(p);
            }
            pinned_python()
        })
        .clone()
}

/// The Python of `target/py-tools`, whatever `$SIGBOX_PYTHON` says; made at most once per
/// process.
pub fn pinned_python() -> PathBuf {
    static PINNED: OnceLock<PathBuf> = OnceLock::new();
    PINNED
        .get_or_init(|| shared_venv(&workspace().join("target")))
        .clone()
}

/// `target/py-tools`, made (again) when its pins are not the wanted ones.
fn shared_venv(target: &Path) -> PathBuf {
    std::fs::create_dir_all(target).unwrap();
    let lock = std::fs::File::create(target.join(".py-tools.lock")).unwrap();
    lock.lock().unwrap();
    let venv = target.join("py-tools");
    let py = venv.join("bin/python");
    let want = pins().join(" ");
    let marker = venv.join(".pins");
    let have = std::fs::read_to_string(&marker).unwrap_or_default();
    if have.trim_end() != want || !py.exists() {
        if venv.exists() {
            std::fs::remove_dir_all(&venv)
                .unwrap_or_else(|e| panic!("cannot remove {}: {e}", venv.display()));
        }
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 is needed for the MCP, Python and bridge tests");
        assert!(made.success(), "python3 -m venv {} failed", venv.display());
        let pip = Command::new(&py)
            .args(["-m", "pip", "install", "--quiet"])
            .args(pins())
            .status()
            .unwrap();
        assert!(pip.success(), "pip install {want} failed");
        // Written last: a venv without it is made again.
        std::fs::write(&marker, format!("{want}\n")).unwrap();
    }
    py
}
