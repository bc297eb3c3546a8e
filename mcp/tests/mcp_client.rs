//! Drives `sigbox-mcp` with a real MCP client, the official Python SDK (`mcp` on PyPI), over
//! stdio: `mcp/tests/test_mcp.py`. The Python is the one all the Python-driven tests share
//! (`tests/shared/python.rs`): `SIGBOX_PYTHON` when set (`.ci/run` sets it), else
//! `target/py-tools` with the pinned tools (`mcp` among them), made once.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../tests/shared/python.rs"]
mod shared_python;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A Python that imports `mcp`.
fn python() -> PathBuf {
    shared_python::python()
}

/// The `sigbox` CLI beside this package's binary (the tests send and list with it).
fn sigbox_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_sigbox-mcp")).with_file_name("sigbox");
    if !bin.exists() {
        let built = Command::new(env!("CARGO"))
            .args(["build", "-p", "sigbox-client", "--bin", "sigbox"])
            .current_dir(workspace())
            .status()
            .unwrap();
        assert!(built.success());
    }
    bin
}

#[test]
fn the_official_python_client_drives_the_server() {
    let out = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/test_mcp.py"))
        .env("SIGBOX_MCP_BIN", env!("CARGO_BIN_EXE_sigbox-mcp"))
        .env("SIGBOX_BIN", sigbox_bin())
        .env("PYTHONWARNINGS", "ignore")
        .env_remove("SIGBOX_ROOT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("OK"), "{err}");
    assert!(err.contains("Ran 26 tests"), "{err}");
}
