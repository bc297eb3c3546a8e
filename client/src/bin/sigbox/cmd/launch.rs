//! `sigbox mcp`, `sigbox bridge` and `sigbox ui`: this process replaced by the program installed beside
//! `sigbox` (the MCP server and the bridge need an async runtime, which the CLI keeps out of
//! its own build).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};

/// `sigbox mcp`: replaces this process by the `sigbox-mcp` server installed beside it (the
/// server needs an async runtime, which the CLI keeps out of its own build).
pub(crate) fn exec_mcp(
    root: &Path,
    agent: &str,
    state: Option<&str>,
    channel: bool,
    settle: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    let mut args: Vec<std::ffi::OsString> = vec!["--as".into(), agent.into()];
    if let Some(s) = state {
        args.extend(["--state".into(), s.into()]);
    }
    if channel {
        args.push("--channel".into());
    }
    exec_beside("sigbox-mcp", "mcp", Some(root), settle, &args)
}

/// `sigbox bridge ...`: runs the `sigbox-bridge` program installed beside `sigbox` with the
/// root and settle window of this command line, then the arguments given.
pub(crate) fn exec_bridge(
    root: &Path,
    args: &[std::ffi::OsString],
    settle: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    exec_beside("sigbox-bridge", "bridge", Some(root), settle, args)
}

/// Replaces this process by `program`, installed beside `sigbox` (from the workspace's
/// `crate_dir`), with `--root` (when given), the global `--settle` (or `SIGBOX_SETTLE`) as the
/// program takes it, then `args`.
pub(crate) fn exec_beside(
    program: &str,
    crate_dir: &str,
    root: Option<&Path>,
    settle: std::time::Duration,
    args: &[std::ffi::OsString],
) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the sigbox executable")?;
    let path = exe.with_file_name(program);
    let install = format!(
        "install it beside sigbox, as the README's \"Installing what you ship\" says, or with \
         `cargo install --path {crate_dir}`"
    );
    if !path.exists() {
        bail!("{}: not installed; {install}", path.display());
    }
    let mut cmd = std::process::Command::new(&path);
    // The programs take the durability from the environment only.
    if super::relaxed() {
        cmd.env("SIGBOX_DURABILITY", "relaxed");
    } else {
        cmd.env_remove("SIGBOX_DURABILITY");
    }
    if let Some(root) = root {
        cmd.arg("--root").arg(root);
    }
    let err = cmd
        .arg("--settle")
        .arg(format!("{}ms", settle.as_millis()))
        .args(args)
        .exec();
    Err(anyhow::Error::new(err).context(format!(
        "{}: cannot run (is it the program, installed whole?); {install}",
        path.display()
    )))
}
