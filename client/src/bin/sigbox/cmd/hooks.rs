//! `sigbox hooks install|uninstall RUNTIME`: sigbox's entries merged into a coding agent's
//! hook settings, every other hook and setting kept (spec/hooks.md, "Installing").
//!
//! - `hooks.rs`: the command; where each runtime's settings live; the command line an entry
//!   runs, and how sigbox's entries are told from others.
//! - `settings.rs`: the settings file read, checked, and replaced with a backup.
//! - `merge.rs`: sigbox's entries removed from and added to the file's text.
//! - `jsonc.rs`: JSON with comments, parsed with each value's place in the text.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::json;

mod jsonc;
mod merge;
mod settings;

use self::merge::{add, remove_ours};
use self::settings::{check_shape, load, parsed, refuse_inline_codex_hooks, write_settings};
use super::hook::Event;
use crate::cli::{HooksCmd, HooksPlace, Runtime};
use crate::output::{Out, path_json};

/// The hook time limit written with each entry, in seconds: above the longest a paused tool
/// call is held (`--pause-wait`, 25 s by default) plus a pass.
pub(crate) const TIMEOUT_S: u64 = 120;

pub(crate) fn run(root: &Path, cmd: HooksCmd, out: &mut Out) -> anyhow::Result<ExitCode> {
    let (runtime, place, entry) = match cmd {
        HooksCmd::Install {
            runtime,
            agent,
            place,
            state,
            permissions,
        } => (
            runtime,
            place,
            Some((super::mailbox::agent_name(&agent)?, state, permissions)),
        ),
        HooksCmd::Uninstall { runtime, place } => (runtime, place, None),
    };
    let permissions = entry.as_ref().is_some_and(|e| e.2);
    if permissions && runtime == Runtime::Copilot {
        bail!(
            "--permissions: the PermissionRequest hook is offered for Claude Code and Codex; \
             Copilot's permissionRequest event is not answered by `sigbox hook copilot`, so \
             no entry is written for it (install without --permissions)"
        );
    }
    let slots = slots(runtime, permissions);
    let file = settings_file(runtime, &place)?;
    let install = entry.is_some();
    if install && runtime == Runtime::Codex {
        refuse_inline_codex_hooks(&file)?;
    }
    let loaded = load(runtime, &file, place.dry_run)?;
    let existed = loaded.is_some();
    let (mut text, bom, raw) = match loaded {
        Some(l) => (l.text, l.bom, Some(l.raw)),
        None => (new_file(runtime).to_string(), false, None),
    };
    let old_value = if existed {
        Some(parsed(&file, &text)?.root.value())
    } else {
        None
    };
    if install {
        check_shape(runtime, &file, &text, &slots)?;
    }
    let removed = remove_ours(runtime, &quoted_root(root)?, &file, &mut text)?;
    let mut added = 0;
    if let Some((agent, state, _)) = &entry {
        for slot in &slots {
            let command = command_line(root, runtime, agent, state.as_deref(), slot.name)?;
            add(runtime, &file, &mut text, slot, command)?;
            added += 1;
        }
    }
    let new_value = parsed(&file, &text)?.root.value();
    // A byte-order mark is dropped at install: the runtimes read the file as JSON, which has
    // none, and ignore a file that starts with one.
    let changed = match &old_value {
        Some(old) => *old != new_value || (install && bom),
        None => install,
    };
    if bom && !install {
        text.insert(0, '\u{feff}');
    }
    let action = if install { "install" } else { "uninstall" };
    if place.dry_run {
        out.emit_lines(
            &json!({"action": action, "file": path_json(&file), "changed": changed,
                    "dry_run": true, "content": new_value}),
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
        write_settings(&file, raw.as_deref(), text.as_bytes())?;
    }
    // Replaced by the same entries: nothing was added or removed.
    let (added, removed) = if changed { (added, removed) } else { (0, 0) };
    let dropped_bom = changed && install && bom;
    out.emit(
        &json!({"action": action, "file": path_json(&file), "changed": changed,
                "added": added, "removed": removed, "dropped_bom": dropped_bom}),
        || {
            let line = match (install, changed) {
                (true, true) => format!("installed {added} sigbox hook(s) in {}", file.display()),
                (true, false) => format!("already installed in {}", file.display()),
                (false, true) => {
                    format!("removed {removed} sigbox hook(s) from {}", file.display())
                }
                (false, false) => format!("no sigbox hook in {}", file.display()),
            };
            if dropped_bom {
                format!(
                    "{line} (and dropped the byte-order mark it started with, which the runtime \
                     cannot read)"
                )
            } else {
                line
            }
        },
    )?;
    Ok(ExitCode::SUCCESS)
}

/// One entry `hooks install` writes: the runtime's name for its event, and whether it takes
/// a matcher (the tool events: `"*"`, every tool).
pub(crate) struct Slot {
    pub(crate) name: &'static str,
    pub(crate) matcher: bool,
}

/// The event Claude Code and Codex fire before they show an approval prompt (spec/hooks.md,
/// "Permission requests"); its matcher is the tool name, as PreToolUse's.
pub(crate) const PERMISSION_REQUEST: &str = "PermissionRequest";

/// The entries an install writes for `runtime`: every event sigbox answers in, and the
/// PermissionRequest event when `permissions` (Claude Code and Codex).
fn slots(runtime: Runtime, permissions: bool) -> Vec<Slot> {
    let mut slots: Vec<Slot> = Event::installed(runtime)
        .iter()
        .map(|&e| Slot {
            name: e.name(runtime),
            matcher: matches!(e, Event::PreTool | Event::PostTool),
        })
        .collect();
    if permissions
        && runtime != Runtime::Copilot
        && !slots.iter().any(|s| s.name == PERMISSION_REQUEST)
    {
        slots.push(Slot {
            name: PERMISSION_REQUEST,
            matcher: true,
        });
    }
    slots
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
    event: &str,
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
        words.extend(["--event".into(), event.into()]);
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
pub(crate) fn is_ours(runtime: Runtime, root: &str, command: &str) -> bool {
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

/// What a file that does not exist (or holds nothing) starts as.
pub(crate) fn new_file(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Copilot => "{\n  \"version\": 1,\n  \"hooks\": {}\n}\n",
        _ => "{}\n",
    }
}

/// The runtime's name, as its users know it.
pub(crate) fn product(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Claude => "Claude Code",
        Runtime::Codex => "Codex",
        Runtime::Copilot => "Copilot",
    }
}
