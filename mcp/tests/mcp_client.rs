//! Drives `sigbox-mcp` with a real MCP client, the official Python SDK (`mcp` on PyPI), over
//! stdio: `mcp/tests/test_mcp.py`. The Python is `SIGBOX_PYTHON` when set (`.ci/run` sets it);
//! otherwise a virtual environment is made once under `target/mcp-venv` with the pinned `mcp`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `mcp` release the tests are written against.
const MCP_VERSION: &str = "2.3.0";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A Python that imports `mcp`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SIGBOX_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let venv = workspace().join("target/mcp-venv");
    let py = venv.join("bin/python");
    let has_mcp = |py: &Path| {
        Command::new(py)
            .args(["-c", &format!("import mcp, importlib.metadata as m; assert m.version('mcp') == '{MCP_VERSION}'")])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has_mcp(&py) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 is needed for the MCP client tests");
        assert!(made.success(), "python3 -m venv failed");
        let pip = Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                &format!("mcp=={MCP_VERSION}"),
            ])
            .status()
            .unwrap();
        assert!(pip.success(), "pip install mcp=={MCP_VERSION} failed");
    }
    py
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
    assert!(err.contains("Ran 23 tests"), "{err}");
}
