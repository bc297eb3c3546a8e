//! sigbox's entries taken out of and put into a settings file's text, byte by byte: every
//! other hook, setting, comment and layout kept (spec/hooks.md, "Installing").

use std::path::Path;

use serde_json::{Value, json};

use super::settings::parsed;
use super::{Slot, TIMEOUT_S, is_ours, jsonc};
use crate::cli::Runtime;

/// Removes every sigbox entry for `runtime` from `text`, and the groups and events (and, but
/// in Copilot's own file, the `hooks` object) that their removal leaves empty: each removal
/// takes the entry's bytes and its separator, nothing else. Returns how many it removed.
pub(crate) fn remove_ours(
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

/// Adds sigbox's entry for the event of `slot` at the end of its list, laid out as the file
/// is.
pub(crate) fn add(
    runtime: Runtime,
    file: &Path,
    text: &mut String,
    slot: &Slot,
    command: String,
) -> anyhow::Result<()> {
    let entry = match runtime {
        Runtime::Copilot => json!({"type": "command", "bash": command, "timeoutSec": TIMEOUT_S}),
        _ => {
            let hook = json!({"type": "command", "command": command, "timeout": TIMEOUT_S});
            // Tool events match every tool; the others take no matcher.
            if slot.matcher {
                json!({"matcher": "*", "hooks": [hook]})
            } else {
                json!({"hooks": [hook]})
            }
        }
    };
    let key = slot.name;
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
