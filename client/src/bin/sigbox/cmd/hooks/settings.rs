//! A runtime's settings file as `sigbox hooks` reads, checks and writes it (spec/hooks.md,
//! "Installing"): refused untouched when it is not what it should be (a symbolic link, too
//! big, not UTF-8, not the shape the runtime reads), replaced atomically with a backup.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::jsonc;
use super::{Slot, new_file, product};
use crate::cli::Runtime;

/// The biggest settings file read.
pub(crate) const MAX_SETTINGS: u64 = 4 << 20;

/// A settings file's text, as read.
pub(crate) struct Loaded {
    /// The text, without a byte-order mark; what a new file starts as for a file with
    /// nothing but blank space in it.
    pub(crate) text: String,
    /// It started with a byte-order mark.
    pub(crate) bom: bool,
    /// The bytes read, as they were: the backup.
    pub(crate) raw: Vec<u8>,
}

/// The file's text, `None` when it does not exist. Refused (untouched) when it is a symbolic
/// link (but for `--dry-run`, which writes nothing and reads what it points to) or not a
/// regular file, is over [`MAX_SETTINGS`], or is not UTF-8; a file of blank space only is
/// read as a new one (nothing in it to keep).
pub(crate) fn load(runtime: Runtime, file: &Path, dry_run: bool) -> anyhow::Result<Option<Loaded>> {
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
pub(crate) fn parsed(file: &Path, text: &str) -> anyhow::Result<jsonc::Doc> {
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
pub(crate) fn check_shape(
    runtime: Runtime,
    file: &Path,
    text: &str,
    slots: &[Slot],
) -> anyhow::Result<()> {
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
    for slot in slots {
        let key = slot.name;
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

/// Refuses to write Codex's `hooks.json` beside a `config.toml` that defines hooks inline:
/// Codex loads both but warns at every start ("loading hooks from both ...; prefer a single
/// representation for this layer"). `[hooks.state]`, where Codex records which hooks are
/// trusted, is not a definition.
pub(crate) fn refuse_inline_codex_hooks(hooks_json: &Path) -> anyhow::Result<()> {
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
pub(crate) fn inline_toml_hooks(text: &str) -> Option<(usize, String)> {
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
pub(crate) fn write_settings(file: &Path, old: Option<&[u8]>, bytes: &[u8]) -> anyhow::Result<()> {
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
