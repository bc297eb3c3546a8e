//! `sigbox ui ...`: the console (spec/console.md), the `sigbox-ui` program installed beside
//! `sigbox`, run in this process's place.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

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
    let names_root = args.iter().any(|a| {
        let a = a.to_string_lossy();
        a == "--root" || a.starts_with("--root=")
    });
    let root = (root_given || !names_root).then_some(root);
    super::launch::exec_beside("sigbox-ui", "console", root, settle, args)
}
