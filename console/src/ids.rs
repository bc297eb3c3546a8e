//! Ids that come in a request's path (`/api/signals/<id>`, `/api/asks/<id>/answer`): checked
//! before anything else. A signal's is then only compared with the ids the library lists; a
//! request's goes to the library's `answer`, which checks it again by the rule of ids
//! (spec/asks.md §2) before it makes a file name of it. Neither is joined to a path here.

/// The longest id taken (a file name's length).
const MAX_ID: usize = 255;

/// `Ok` when `id` can be a signal's or a request's id (spec/mailbox.md §2.4): 1 to 255 of
/// ASCII letters, digits, `.`, `_`, `-`, `@`, `+`, `:`, not starting with `.`; else why not.
pub(crate) fn check(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID {
        return Err(format!("invalid id: 1 to {MAX_ID} characters"));
    }
    if id.starts_with('.') {
        return Err(format!("invalid id {id:?}: it may not start with a dot"));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-@+:".contains(*c)))
    {
        return Err(format!(
            "invalid id {id:?}: {c:?} is not allowed (letters, digits, . _ - @ + : only; an id \
             is never a path)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn paths_are_not_ids() {
        for bad in [
            "",
            "..",
            "../x",
            "a/b",
            "/etc/passwd",
            "a\\b",
            ".x",
            "a\0b",
            "é",
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
        for good in [
            "signal.20261122T101500.123456Z.0190aa.STEER.Executor",
            "note@0123456789abcdef",
        ] {
            assert!(check(good).is_ok(), "{good:?}");
        }
    }
}
