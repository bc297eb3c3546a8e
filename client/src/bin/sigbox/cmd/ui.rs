//! `sigbox ui ...`: the console (spec/console.md), the `sigbox-ui` program installed beside
//! `sigbox`, run in this process's place.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};

/// The command line, with `--` put after `ui` when `ui` is the subcommand: everything after
/// it is `sigbox-ui`'s, its `--root`s included (several are welcome there, where the global
/// `--root` takes one).
pub(crate) fn args_os() -> Vec<OsString> {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let mut i = 1;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        match a.as_ref() {
            "--root" | "--settle" | "--durability" => i += 2,
            "--json" | "--verbose" => i += 1,
            a if a.starts_with("--root=")
                || a.starts_with("--settle=")
                || a.starts_with("--durability=") =>
            {
                i += 1
            }
            a if a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| c == 'v') => i += 1,
            "ui" => {
                if args.get(i + 1).is_none_or(|n| n != "--") {
                    args.insert(i + 1, "--".into());
                }
                break;
            }
            _ => break,
        }
    }
    args
}

/// Replaces this process by `sigbox-ui`, installed beside `sigbox`, with the settle window of
/// this command line, then `args`. The root of this command line is served too when it was
/// given (`--root` before `ui`), or when `args` name none (`SIGBOX_ROOT`, else `signals`).
pub(crate) fn exec(
    root: &Path,
    root_given: bool,
    args: &[OsString],
    settle: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the sigbox executable")?;
    let path = exe.with_file_name("sigbox-ui");
    if !path.exists() {
        bail!(
            "{}: not installed; install it with `cargo install --path console` (beside sigbox)",
            path.display()
        );
    }
    let mut cmd = std::process::Command::new(&path);
    // The program takes the durability from the environment only.
    if super::relaxed() {
        cmd.env("SIGBOX_DURABILITY", "relaxed");
    } else {
        cmd.env_remove("SIGBOX_DURABILITY");
    }
    let names_root = args.iter().any(|a| {
        let a = a.to_string_lossy();
        a == "--root" || a.starts_with("--root=")
    });
    if root_given || !names_root {
        cmd.arg("--root").arg(root);
    }
    let err = cmd
        .arg("--settle")
        .arg(format!("{}ms", settle.as_millis()))
        .args(args)
        .exec();
    Err(anyhow::Error::new(err).context(format!("{}: cannot run", path.display())))
}
