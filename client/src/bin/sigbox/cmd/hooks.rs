//! `sigbox hooks install|uninstall RUNTIME`: sigbox's entries merged into a coding agent's
//! hook settings, every other hook and setting kept (spec/hooks.md, "Installing").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};

use super::hook::Event;
use crate::cli::{HooksCmd, HooksPlace, Runtime};
use crate::output::{Out, path_json};

/// The hook time limit written with each entry, in seconds: above the longest a paused tool
/// call is held (`--pause-wait`, 25 s by default) plus a pass.
const TIMEOUT_S: u64 = 120;

/// The biggest settings file read.
const MAX_SETTINGS: u64 = 4 << 20;

pub(crate) fn run(root: &Path, cmd: HooksCmd, out: &mut Out) -> anyhow::Result<ExitCode> {
    let (runtime, place, entry) = match cmd {
        HooksCmd::Install {
            runtime,
            agent,
            place,
            state,
        } => (
            runtime,
            place,
            Some((super::mailbox::agent_name(&agent)?, state)),
        ),
        HooksCmd::Uninstall { runtime, place } => (runtime, place, None),
    };
    let file = settings_file(runtime, &place)?;
    let old = read_settings(runtime, &file)?;
    let mut new = old.clone().unwrap_or_else(|| match runtime {
        Runtime::Copilot => json!({"version": 1, "hooks": {}}),
        _ => json!({}),
    });
    let removed = remove_ours(runtime, &quoted_root(root)?, &mut new);
    // An uninstall that empties `hooks` leaves no `hooks: {}` behind where there was none
    // before (Copilot's file keeps it: it is the file's whole point).
    let had_hooks = |v: &Value| {
        v.get("hooks")
            .and_then(Value::as_object)
            .is_some_and(|h| !h.is_empty())
    };
    if entry.is_none()
        && runtime != Runtime::Copilot
        && !new.get("hooks").is_some_and(|_| had_hooks(&new))
        && new.get("hooks").is_some()
        && let Some(o) = new.as_object_mut()
    {
        o.remove("hooks");
    }
    let mut added = 0;
    if let Some((agent, state)) = &entry {
        for &event in Event::installed(runtime) {
            let command = command_line(root, runtime, agent, state.as_deref(), event)?;
            add(runtime, &mut new, event, command, &file)?;
            added += 1;
        }
    }
    let changed = old.as_ref() != Some(&new) && !(old.is_none() && entry.is_none());
    let action = if entry.is_some() {
        "install"
    } else {
        "uninstall"
    };
    if place.dry_run {
        let text = serde_json::to_string_pretty(&new).expect("JSON serializes");
        out.emit_lines(
            &json!({"action": action, "file": path_json(&file), "changed": changed,
                    "dry_run": true, "content": new}),
            || {
                if !changed {
                    return vec![format!("{}: nothing to change", file.display())];
                }
                let mut lines = vec![format!("would write {}:", file.display())];
                lines.extend(text.lines().map(str::to_string));
                lines
            },
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if changed {
        write_settings(&file, old.is_some(), &new)?;
    }
    // Replaced by the same entries: nothing was added or removed.
    let (added, removed) = if changed { (added, removed) } else { (0, 0) };
    out.emit(
        &json!({"action": action, "file": path_json(&file), "changed": changed,
                "added": added, "removed": removed}),
        || match (entry.is_some(), changed) {
            (true, true) => format!("installed {added} sigbox hook(s) in {}", file.display()),
            (true, false) => format!("already installed in {}", file.display()),
            (false, true) => format!("removed {removed} sigbox hook(s) from {}", file.display()),
            (false, false) => format!("no sigbox hook in {}", file.display()),
        },
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The settings file a runtime reads hooks from, for a project or the user.
fn settings_file(runtime: Runtime, place: &HooksPlace) -> anyhow::Result<PathBuf> {
    let home = |var: &str, dir: &str| -> anyhow::Result<PathBuf> {
        if let Some(h) = std::env::var_os(var).filter(|h| !h.is_empty()) {
            return Ok(PathBuf::from(h));
        }
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .context("--user: HOME is not set")?;
        Ok(PathBuf::from(home).join(dir))
    };
    Ok(if place.user {
        match runtime {
            Runtime::Claude => home("CLAUDE_CONFIG_DIR", ".claude")?.join("settings.json"),
            Runtime::Codex => home("CODEX_HOME", ".codex")?.join("hooks.json"),
            Runtime::Copilot => home("COPILOT_HOME", ".copilot")?
                .join("hooks")
                .join("sigbox.json"),
        }
    } else {
        let project = place.project.clone().unwrap_or_else(|| PathBuf::from("."));
        if !project.is_dir() {
            bail!(
                "{}: the project directory does not exist",
                project.display()
            );
        }
        match runtime {
            Runtime::Claude => project.join(".claude").join("settings.json"),
            Runtime::Codex => project.join(".codex").join("hooks.json"),
            Runtime::Copilot => project.join(".github").join("hooks").join("sigbox.json"),
        }
    })
}

/// What a hook entry's command runs first: a POSIX shell that runs sigbox (`$0`, with the
/// arguments after it) when the program is there, and otherwise reads the event, says on
/// stderr that the hook was skipped and exits 0: a program moved or removed since the
/// install never makes the runtime refuse the agent's work (Copilot denies every tool call
/// whose `preToolUse` hook exits non-zero; Claude Code blocks on exit 2). The script is in
/// single quotes without a quote, a backslash or a `$` outside them, so it reads the same
/// under bash, zsh, fish and sh (Codex runs a hook with `$SHELL -lc`).
const FALLBACK: &str = "/bin/sh -c 'if [ -f \"$0\" ] && [ -x \"$0\" ]; then exec \"$0\" \"$@\"; fi; \
     cat >/dev/null; echo \"sigbox hook: $0 is missing: skipped, the agent goes on unsteered \
     (run sigbox hooks install again)\" >&2'";

/// The command a hook entry runs: [`FALLBACK`], then this executable by its absolute path (a
/// hook's PATH may not have it), the mailbox root made absolute, shell-quoted.
fn command_line(
    root: &Path,
    runtime: Runtime,
    agent: &str,
    state: Option<&str>,
    event: Event,
) -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("cannot find the sigbox executable")?;
    let root = std::path::absolute(root)
        .with_context(|| format!("{}: cannot make the root absolute", root.display()))?;
    let (Some(exe), Some(root_s)) = (exe.to_str(), root.to_str()) else {
        bail!(
            "{}: a path that is not UTF-8 cannot be written into the runtime's JSON settings; \
             use a UTF-8 root",
            root.display()
        );
    };
    let mut words = vec![
        FALLBACK.into(),
        quote(exe),
        "--root".into(),
        quote(root_s),
        "hook".into(),
        runtime.as_str().into(),
        "--as".into(),
        quote(agent),
    ];
    if let Some(s) = state {
        words.extend(["--state".into(), quote(s)]);
    }
    if runtime == Runtime::Copilot {
        words.extend(["--event".into(), event.name(runtime).into()]);
    }
    Ok(words.join(" "))
}

/// The mailbox root as a hook's command names it: absolute, shell-quoted.
fn quoted_root(root: &Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(root)
        .with_context(|| format!("{}: cannot make the root absolute", root.display()))?;
    let s = abs.to_str().with_context(|| {
        format!(
            "{}: a path that is not UTF-8 cannot be written into the runtime's JSON settings; \
             use a UTF-8 root",
            root.display()
        )
    })?;
    Ok(quote(s))
}

/// `s` quoted for a POSIX shell: as is when it is plain, else in single quotes.
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// True when a hook's command is the one `hooks install` writes for this runtime and this
/// mailbox: [`FALLBACK`] (absent in what earlier versions wrote), then the program named
/// exactly `sigbox`, then `--root ROOT hook RUNTIME --as`, `ROOT` as `root` quotes it.
/// Anything else (a `sigbox-audit` of the user's own, a wrapper, the hooks of another
/// mailbox) is someone else's and kept.
fn is_ours(runtime: Runtime, root: &str, command: &str) -> bool {
    let command = command
        .strip_prefix(FALLBACK)
        .and_then(|c| c.strip_prefix(' '))
        .unwrap_or(command);
    let Some(rest) = command.split_once(" --root ") else {
        return false;
    };
    let exe = rest.0.trim_matches('\'');
    let name = exe.rsplit('/').next().unwrap_or(exe);
    name == "sigbox"
        && rest.1.starts_with(&format!("{root} "))
        && rest
            .1
            .contains(&format!(" hook {} --as ", runtime.as_str()))
}

/// The file as JSON, `None` when it does not exist; refused (untouched) when it is not a JSON
/// object whose `hooks` is an object of arrays.
fn read_settings(runtime: Runtime, file: &Path) -> anyhow::Result<Option<Value>> {
    let meta = match std::fs::symlink_metadata(file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("{}", file.display()))),
    };
    if !meta.is_file() {
        bail!("{}: not a regular file; left untouched", file.display());
    }
    if meta.len() > MAX_SETTINGS {
        bail!(
            "{}: over {MAX_SETTINGS} bytes; left untouched",
            file.display()
        );
    }
    let bytes = std::fs::read(file).with_context(|| format!("{}", file.display()))?;
    let v: Value = serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "{}: not valid JSON; left untouched (fix it, then install again)",
            file.display()
        )
    })?;
    let Value::Object(obj) = &v else {
        bail!("{}: not a JSON object; left untouched", file.display());
    };
    match obj.get("hooks") {
        None => {}
        Some(Value::Object(events)) => {
            for (event, groups) in events {
                if !groups.is_array() {
                    bail!(
                        "{}: hooks.{event} is not an array; left untouched",
                        file.display()
                    );
                }
            }
        }
        Some(_) => bail!(
            "{}: `hooks` is not an object; left untouched",
            file.display()
        ),
    }
    // Copilot ignores a hooks file whose version is not 1: hooks added there would never run.
    if runtime == Runtime::Copilot && obj.get("version") != Some(&json!(1)) {
        bail!(
            "{}: `version` is not 1, so Copilot would not run its hooks; left untouched",
            file.display()
        );
    }
    Ok(Some(v))
}

/// Removes every sigbox entry for `runtime`, and the groups and events left empty by it.
/// Returns how many entries it removed.
fn remove_ours(runtime: Runtime, root: &str, settings: &mut Value) -> usize {
    let Some(Value::Object(events)) = settings.get_mut("hooks") else {
        return 0;
    };
    let mut removed = 0;
    let names: Vec<String> = events.keys().cloned().collect();
    for name in names {
        let Some(Value::Array(groups)) = events.get_mut(&name) else {
            continue;
        };
        let before = groups.len();
        let mut kept = Vec::new();
        for mut g in std::mem::take(groups) {
            match runtime {
                // Copilot: the entries are the hooks themselves.
                Runtime::Copilot => {
                    let cmd = g.get("bash").and_then(Value::as_str).unwrap_or_default();
                    if is_ours(runtime, root, cmd) {
                        removed += 1;
                    } else {
                        kept.push(g);
                    }
                }
                // Claude Code and Codex: groups of `{matcher, hooks: [...]}`.
                _ => {
                    if let Some(Value::Array(hooks)) = g.get_mut("hooks") {
                        let n = hooks.len();
                        hooks.retain(|h| {
                            !is_ours(
                                runtime,
                                root,
                                h.get("command").and_then(Value::as_str).unwrap_or_default(),
                            )
                        });
                        removed += n - hooks.len();
                        if hooks.is_empty() && n > 0 {
                            continue;
                        }
                    }
                    kept.push(g);
                }
            }
        }
        let now_empty = kept.is_empty() && before > 0;
        *groups = kept;
        if now_empty {
            events.remove(&name);
        }
    }
    removed
}

/// Adds sigbox's entry for `event`.
fn add(
    runtime: Runtime,
    settings: &mut Value,
    event: Event,
    command: String,
    file: &Path,
) -> anyhow::Result<()> {
    let obj = settings
        .as_object_mut()
        .with_context(|| format!("{}: not a JSON object", file.display()))?;
    let hooks = obj
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    if hooks.is_null() {
        *hooks = Value::Object(Map::new());
    }
    let events = hooks
        .as_object_mut()
        .with_context(|| format!("{}: `hooks` is not an object", file.display()))?;
    let list = events
        .entry(event.name(runtime))
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .with_context(|| {
            format!(
                "{}: hooks.{} is not an array",
                file.display(),
                event.name(runtime)
            )
        })?;
    list.push(match runtime {
        Runtime::Copilot => json!({"type": "command", "bash": command, "timeoutSec": TIMEOUT_S}),
        _ => {
            let hook = json!({"type": "command", "command": command, "timeout": TIMEOUT_S});
            match event {
                // Tool events match every tool; the others take no matcher.
                Event::PreTool | Event::PostTool => json!({"matcher": "*", "hooks": [hook]}),
                _ => json!({"hooks": [hook]}),
            }
        }
    });
    Ok(())
}

/// Writes `settings` to `file` atomically (a staged file fsynced, renamed over, the
/// directory fsynced), the old file kept beside it as `<file>.sigbox-backup` (itself staged
/// and renamed into place, after the new file is staged).
fn write_settings(file: &Path, existed: bool, settings: &Value) -> anyhow::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    let stage = |bytes: &[u8]| -> anyhow::Result<tempfile::NamedTempFile> {
        let mut staged = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(dir)
            .with_context(|| format!("{}: cannot stage a file", dir.display()))?;
        staged.write_all(bytes)?;
        staged.as_file().sync_all()?;
        Ok(staged)
    };
    let mut bytes = serde_json::to_vec_pretty(settings).expect("JSON serializes");
    bytes.push(b'\n');
    // The new file first: if it cannot be staged, nothing (the backup included) is touched.
    let staged = stage(&bytes)?;
    if existed {
        // The backup is renamed into place like the file itself: whatever is at its name (a
        // symlink, a FIFO planted there) is replaced, never followed or opened.
        let old = std::fs::read(file).with_context(|| format!("{}", file.display()))?;
        let backup = dir.join(format!("{name}.sigbox-backup"));
        stage(&old)?
            .persist(&backup)
            .map_err(|e| e.error)
            .with_context(|| format!("{}: cannot write the backup", backup.display()))?;
        // Keep the old file's permissions (a user's settings may be private).
        if let Ok(m) = std::fs::metadata(file) {
            let _ = staged.as_file().set_permissions(m.permissions());
        }
    }
    staged
        .persist(file)
        .map_err(|e| e.error)
        .with_context(|| format!("{}: cannot replace", file.display()))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("{}: cannot sync", dir.display()))?;
    Ok(())
}

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
    exec_beside("sigbox-mcp", "mcp", root, settle, &args)
}

/// `sigbox bridge ...`: runs the `sigbox-bridge` program installed beside `sigbox` with the
/// root and settle window of this command line, then the arguments given.
pub(crate) fn exec_bridge(
    root: &Path,
    args: &[std::ffi::OsString],
    settle: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    exec_beside("sigbox-bridge", "bridge", root, settle, args)
}

/// Replaces this process by `program`, installed beside `sigbox` (from the workspace's
/// `crate_dir`), with `--root`, the global `--settle` (or `SIGBOX_SETTLE`) as the program takes
/// it, then `args`.
fn exec_beside(
    program: &str,
    crate_dir: &str,
    root: &Path,
    settle: std::time::Duration,
    args: &[std::ffi::OsString],
) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the sigbox executable")?;
    let path = exe.with_file_name(program);
    if !path.exists() {
        bail!(
            "{}: not installed; install it with `cargo install --path {crate_dir}` (beside sigbox)",
            path.display()
        );
    }
    let mut cmd = std::process::Command::new(&path);
    // The programs take the durability from the environment only.
    if super::relaxed() {
        cmd.env("SIGBOX_DURABILITY", "relaxed");
    } else {
        cmd.env_remove("SIGBOX_DURABILITY");
    }
    let err = cmd
        .arg("--root")
        .arg(root)
        .arg("--settle")
        .arg(format!("{}ms", settle.as_millis()))
        .args(args)
        .exec();
    Err(anyhow::Error::new(err).context(format!("{}: cannot run", path.display())))
}
