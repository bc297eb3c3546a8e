//! `sigbox hooks install|uninstall RUNTIME`: sigbox's entries merged into a coding agent's
//! hook settings, every other hook and setting kept (spec/hooks.md, "Installing").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::{Value, json};

mod jsonc;

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
        check_shape(runtime, &file, &text)?;
    }
    let removed = remove_ours(runtime, &quoted_root(root)?, &file, &mut text)?;
    let mut added = 0;
    if let Some((agent, state)) = &entry {
        for &event in Event::installed(runtime) {
            let command = command_line(root, runtime, agent, state.as_deref(), event)?;
            add(runtime, &file, &mut text, event, command)?;
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

/// A settings file's text, as read.
struct Loaded {
    /// The text, without a byte-order mark; what a new file starts as for a file with
    /// nothing but blank space in it.
    text: String,
    /// It started with a byte-order mark.
    bom: bool,
    /// The bytes read, as they were: the backup.
    raw: Vec<u8>,
}

/// What a file that does not exist (or holds nothing) starts as.
fn new_file(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Copilot => "{\n  \"version\": 1,\n  \"hooks\": {}\n}\n",
        _ => "{}\n",
    }
}

/// The runtime's name, as its users know it.
fn product(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Claude => "Claude Code",
        Runtime::Codex => "Codex",
        Runtime::Copilot => "Copilot",
    }
}

/// The file's text, `None` when it does not exist. Refused (untouched) when it is a symbolic
/// link (but for `--dry-run`, which writes nothing and reads what it points to) or not a
/// regular file, is over [`MAX_SETTINGS`], or is not UTF-8; a file of blank space only is
/// read as a new one (nothing in it to keep).
fn load(runtime: Runtime, file: &Path, dry_run: bool) -> anyhow::Result<Option<Loaded>> {
    let mut meta = match std::fs::symlink_metadata(file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("{}", file.display()))),
    };
    if meta.file_type().is_symlink() && dry_run {
        meta = std::fs::metadata(file).with_context(|| format!("{}", file.display()))?;
    }
    if meta.file_type().is_symlink() {
        let to = std::fs::read_link(file)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| "?".into());
        bail!(
            "{}: a symbolic link (to {to}); sigbox replaces a settings file by an atomic rename, \
             which would replace the link: put the file itself in its place (or add sigbox's \
             entries to {to} by hand: --dry-run prints them), then run again; left untouched",
            file.display()
        );
    }
    if !meta.is_file() {
        bail!(
            "{}: not a regular file, so {} reads no settings from it: move it aside, then run \
             again; left untouched",
            file.display(),
            product(runtime)
        );
    }
    // Opened without blocking (a FIFO put there meanwhile would hang an open) or following a
    // link put there meanwhile, then checked again on what was opened.
    let mut flags = rustix::fs::OFlags::NONBLOCK;
    if !dry_run {
        flags |= rustix::fs::OFlags::NOFOLLOW;
    }
    let opened = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits() as i32)
            .open(file)
            .with_context(|| format!("{}", file.display()))?
    };
    let meta = opened
        .metadata()
        .with_context(|| format!("{}", file.display()))?;
    if !meta.is_file() {
        bail!(
            "{}: not a regular file, so {} reads no settings from it: move it aside, then run \
             again; left untouched",
            file.display(),
            product(runtime)
        );
    }
    if meta.len() > MAX_SETTINGS {
        bail!(
            "{}: over {MAX_SETTINGS} bytes, more than a settings file holds; left untouched",
            file.display()
        );
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(&opened, MAX_SETTINGS + 1),
        &mut bytes,
    )
    .with_context(|| format!("{}", file.display()))?;
    if bytes.len() as u64 > MAX_SETTINGS {
        bail!(
            "{}: over {MAX_SETTINGS} bytes, more than a settings file holds; left untouched",
            file.display()
        );
    }
    let raw = bytes.clone();
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not UTF-8 text (byte {}), which {} reads: save it as UTF-8, then run again; \
             left untouched",
            file.display(),
            e.utf8_error().valid_up_to(),
            product(runtime)
        )
    })?;
    let (text, bom) = match text.strip_prefix('\u{feff}') {
        Some(rest) => (rest.to_string(), true),
        None => (text, false),
    };
    if text.trim().is_empty() {
        // Nothing to keep: an install writes the file whole, an uninstall finds nothing.
        return Ok(Some(Loaded {
            text: new_file(runtime).to_string(),
            bom,
            raw,
        }));
    }
    Ok(Some(Loaded { text, bom, raw }))
}

/// `text` parsed, or the refusal naming the place of the error.
fn parsed(file: &Path, text: &str) -> anyhow::Result<jsonc::Doc> {
    jsonc::parse(text).map_err(|e| {
        anyhow::anyhow!(
            "{}: not valid JSON: {e}; left untouched (fix it, then run again)",
            file.display()
        )
    })
}

/// Refuses (untouched) a file an install could not make the runtime read, saying what to do:
/// comments or trailing commas (each runtime reads strict JSON and ignores the whole file), a
/// root that is not an object, a `hooks` or a `hooks.EVENT` sigbox writes to holding another
/// thing than the runtime reads there (`null`, and an empty array for `hooks`, hold nothing
/// and are replaced), a Copilot file whose `version` is not 1.
fn check_shape(runtime: Runtime, file: &Path, text: &str) -> anyhow::Result<()> {
    let doc = parsed(file, text)?;
    let name = product(runtime);
    let first_comment = doc.comments.first().map(|c| (c.0, "a comment"));
    let first_comma = doc
        .trailing_commas
        .first()
        .map(|&c| (c, "a trailing comma"));
    if let Some((at, what)) = [first_comment, first_comma].into_iter().flatten().min() {
        let (line, col) = jsonc::line_col(text, at);
        let more = doc.comments.len() + doc.trailing_commas.len() - 1;
        let more = if more > 0 {
            format!(" (and {more} more comment(s) or trailing comma(s))")
        } else {
            String::new()
        };
        bail!(
            "{}: {what} at line {line}, column {col}{more}: {name} reads this file as strict \
             JSON and ignores the whole of it while it has comments or trailing commas, so \
             hooks added here would never run: remove them (sigbox then changes nothing else \
             in the file), and run again; left untouched",
            file.display()
        );
    }
    let at = |n: &jsonc::Node| {
        let (l, c) = jsonc::line_col(text, n.start);
        format!("line {l}, column {c}")
    };
    let jsonc::Kind::Object(_) = &doc.root.kind else {
        bail!(
            "{}: holds {}, not an object of settings, so {name} reads no hooks from it: move it \
             aside, then run again; left untouched",
            file.display(),
            doc.root.what()
        );
    };
    if runtime == Runtime::Copilot {
        let version = doc.root.member("version").map(|(_, m)| m.value.value());
        if version != Some(json!(1)) {
            bail!(
                "{}: {}, and Copilot ignores a hooks file whose `version` is not 1: if its \
                 hooks are meant to run, set \"version\": 1 in it, else move it aside; then run \
                 again; left untouched",
                file.display(),
                match version {
                    None => "no `version`".to_string(),
                    Some(v) => format!("`version` is {v}"),
                }
            );
        }
    }
    let Some((_, hooks)) = doc.root.member("hooks") else {
        return Ok(());
    };
    match &hooks.value.kind {
        jsonc::Kind::Object(_) => {}
        jsonc::Kind::Scalar(Value::Null) => return Ok(()),
        jsonc::Kind::Array(items) if items.is_empty() => return Ok(()),
        _ => bail!(
            "{}: `hooks` ({}) holds {}, where {name} reads an object of event names, each \
             with a list of hooks: move that value under another key (or replace it by {{}}), \
             then run again; left untouched",
            file.display(),
            at(&hooks.value),
            hooks.value.what()
        ),
    }
    for &event in Event::installed(runtime) {
        let key = event.name(runtime);
        if let Some((_, m)) = hooks.value.member(key) {
            match &m.value.kind {
                jsonc::Kind::Array(_) | jsonc::Kind::Scalar(Value::Null) => {}
                _ => bail!(
                    "{}: `hooks.{key}` ({}) holds {}, where {name} reads a list of hooks: put \
                     it in a list ([ ... ]) or remove it, then run again; left untouched",
                    file.display(),
                    at(&m.value),
                    m.value.what()
                ),
            }
        }
    }
    Ok(())
}

/// Removes every sigbox entry for `runtime` from `text`, and the groups and events (and, but
/// in Copilot's own file, the `hooks` object) that their removal leaves empty: each removal
/// takes the entry's bytes and its separator, nothing else. Returns how many it removed.
fn remove_ours(
    runtime: Runtime,
    root: &str,
    file: &Path,
    text: &mut String,
) -> anyhow::Result<usize> {
    let mut removed = 0;
    loop {
        let doc = parsed(file, text)?;
        let Some((hooks_at, hooks)) = doc.root.member("hooks") else {
            break;
        };
        let jsonc::Kind::Object(events) = &hooks.value.kind else {
            break;
        };
        let ours = |h: &jsonc::Node, key: &str| {
            h.value()
                .get(key)
                .and_then(Value::as_str)
                .is_some_and(|c| is_ours(runtime, root, c))
        };
        let mut found = None;
        'find: for (ei, ev) in events.iter().enumerate() {
            let jsonc::Kind::Array(groups) = &ev.value.kind else {
                continue;
            };
            for (gi, g) in groups.iter().enumerate() {
                if runtime == Runtime::Copilot {
                    // Copilot: the entries are the hooks themselves.
                    if ours(g, "bash") {
                        found = Some((ei, gi, None, 1));
                        break 'find;
                    }
                    continue;
                }
                // Claude Code and Codex: groups of `{matcher, hooks: [...]}`.
                let Some((_, list)) = g.member("hooks") else {
                    continue;
                };
                let jsonc::Kind::Array(hs) = &list.value.kind else {
                    continue;
                };
                let mine: Vec<usize> = (0..hs.len()).filter(|&i| ours(&hs[i], "command")).collect();
                if mine.len() == hs.len() && !hs.is_empty() {
                    found = Some((ei, gi, None, mine.len()));
                    break 'find;
                }
                if let Some(&first) = mine.first() {
                    found = Some((ei, gi, Some((&list.value, first)), 1));
                    break 'find;
                }
            }
        }
        let Some((ei, gi, inner, n)) = found else {
            break;
        };
        removed += n;
        let jsonc::Kind::Array(groups) = &events[ei].value.kind else {
            unreachable!("found in an array");
        };
        // The outermost container the removal would leave empty goes instead.
        let edits = match inner {
            Some((list, i)) => doc.remove(text, list, i),
            None if groups.len() > 1 => doc.remove(text, &events[ei].value, gi),
            None if events.len() > 1 || runtime == Runtime::Copilot => {
                doc.remove(text, &hooks.value, ei)
            }
            None => doc.remove(text, &doc.root, hooks_at),
        };
        *text = jsonc::apply(text, edits);
    }
    Ok(removed)
}

/// Adds sigbox's entry for `event` at the end of its list, laid out as the file is.
fn add(
    runtime: Runtime,
    file: &Path,
    text: &mut String,
    event: Event,
    command: String,
) -> anyhow::Result<()> {
    let entry = match runtime {
        Runtime::Copilot => json!({"type": "command", "bash": command, "timeoutSec": TIMEOUT_S}),
        _ => {
            let hook = json!({"type": "command", "command": command, "timeout": TIMEOUT_S});
            match event {
                // Tool events match every tool; the others take no matcher.
                Event::PreTool | Event::PostTool => json!({"matcher": "*", "hooks": [hook]}),
                _ => json!({"hooks": [hook]}),
            }
        }
    };
    let key = event.name(runtime);
    let doc = parsed(file, text)?;
    let piece = |key: Option<&str>, value: Value| jsonc::Piece {
        key: key.map(str::to_string),
        value,
    };
    let edit = match doc.root.member("hooks") {
        None => doc.insert(
            text,
            &doc.root,
            &piece(Some("hooks"), json!({ key: [entry] })),
        ),
        Some((_, hooks)) => match &hooks.value.kind {
            jsonc::Kind::Object(_) => match hooks.value.member(key) {
                None => doc.insert(text, &hooks.value, &piece(Some(key), json!([entry]))),
                Some((_, m)) => match &m.value.kind {
                    jsonc::Kind::Array(_) => doc.insert(text, &m.value, &piece(None, entry)),
                    // `null` holds nothing: the list replaces it.
                    _ => doc.replace(text, &m.value, &piece(None, json!([entry]))),
                },
            },
            // `null` or `[]` holds nothing: the object replaces it.
            _ => doc.replace(text, &hooks.value, &piece(None, json!({ key: [entry] }))),
        },
    };
    *text = jsonc::apply(text, vec![edit]);
    Ok(())
}

/// Refuses to write Codex's `hooks.json` beside a `config.toml` that defines hooks inline:
/// Codex loads both but warns at every start ("loading hooks from both ...; prefer a single
/// representation for this layer"). `[hooks.state]`, where Codex records which hooks are
/// trusted, is not a definition.
fn refuse_inline_codex_hooks(hooks_json: &Path) -> anyhow::Result<()> {
    let config = hooks_json.with_file_name("config.toml");
    let Ok(text) = std::fs::read_to_string(&config) else {
        return Ok(());
    };
    let Some((line, what)) = inline_toml_hooks(&text) else {
        return Ok(());
    };
    bail!(
        "{}: line {line} ({what}) defines hooks inline, and Codex advises one representation \
         per layer (with both files it warns at every start: \"prefer a single representation \
         for this layer\"): move those tables into {} (each [[hooks.EVENT]] becomes an entry \
         of \"hooks\": {{\"EVENT\": [...]}}), then run again; or keep config.toml and add \
         sigbox's entries to it by hand (--dry-run prints them); nothing was written",
        config.display(),
        hooks_json.display()
    );
}

/// The first hook definition in a `config.toml` (a table or key under `hooks` other than
/// `hooks.state`): its line number and text. A line scan that knows tables, comments and
/// multi-line strings, which is all the question needs.
fn inline_toml_hooks(text: &str) -> Option<(usize, String)> {
    /// The dotted key path of `s` (`hooks . "PreToolUse"` is `[hooks, PreToolUse]`).
    fn path(s: &str) -> Vec<String> {
        let mut parts = Vec::new();
        let mut cur = String::new();
        let mut quote: Option<char> = None;
        for c in s.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => cur.push(c),
                (None, '"' | '\'') => quote = Some(c),
                (None, '.') => parts.push(std::mem::take(&mut cur).trim().to_string()),
                (None, c) => cur.push(c),
            }
        }
        parts.push(cur.trim().to_string());
        parts
    }
    let defines = |p: &[String]| {
        p.first().is_some_and(|h| h == "hooks") && p.get(1).is_none_or(|e| e != "state")
    };
    let mut table: Vec<String> = Vec::new();
    let mut in_string: Option<&str> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(delim) = in_string {
            if line.matches(delim).count() % 2 == 1 {
                in_string = None;
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(head) = line.strip_prefix('[') {
            let head = head.strip_prefix('[').unwrap_or(head);
            let end = head.find(']').unwrap_or(head.len());
            table = path(&head[..end]);
            if table.len() >= 2 && defines(&table) {
                return Some((n + 1, line.to_string()));
            }
            continue;
        }
        // A key, by its path from the root.
        if let Some(eq) = line.find('=') {
            let mut key = table.clone();
            key.extend(path(&line[..eq]));
            if (key.len() >= 2 && defines(&key)) || key == ["hooks"] {
                return Some((n + 1, line.to_string()));
            }
            for delim in ["\"\"\"", "'''"] {
                if line[eq..].matches(delim).count() % 2 == 1 {
                    in_string = Some(delim);
                }
            }
        }
    }
    None
}

/// Writes `bytes` to `file` atomically (a staged file fsynced, renamed over, the directory
/// fsynced), the old file's bytes (`old`, as read) kept beside it as `<file>.sigbox-backup`
/// (itself staged and renamed into place, after the new file is staged).
fn write_settings(file: &Path, old: Option<&[u8]>, bytes: &[u8]) -> anyhow::Result<()> {
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
    // The new file first: if it cannot be staged, nothing (the backup included) is touched.
    let staged = stage(bytes)?;
    if let Some(old) = old {
        // The backup is renamed into place like the file itself: whatever is at its name (a
        // symlink, a FIFO planted there) is replaced, never followed or opened.
        let backup = dir.join(format!("{name}.sigbox-backup"));
        stage(old)?
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
