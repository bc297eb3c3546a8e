//! The names sigbox gives its own files (spec/mailbox.md §8, §9, §9.10): staging names for
//! writes in progress, the twin a claim by link leaves, fresh `.dup-` variants for a taken
//! destination, and the bound every name stays within. Pure rules, below every code that
//! writes or reads those names.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::error::Result;

/// The longest file name most filesystems take, in bytes.
pub(crate) const NAME_MAX: usize = 255;

/// How many names a move into a directory tries: its own, then fresh `.dup-` variants.
const NAME_TRIES: usize = 4;

/// A move into `dir` under `name`, or, while that destination is taken, under a fresh
/// [`unique_variant`] of it (spec/mailbox.md §8, §9.2, §9.3): calls `attempt(try, dest)` with
/// `try` = 0 for the plain name, up to four times, until it returns `Some`. `attempt` returns
/// `None` to ask for the next name. `Ok(None)` when every name was taken.
pub(crate) fn with_fresh_names<R>(
    dir: &Path,
    name: &OsStr,
    mut attempt: impl FnMut(usize, PathBuf) -> Result<Option<R>>,
) -> Result<Option<R>> {
    let mut dest = dir.join(name);
    for n in 0..NAME_TRIES {
        if let Some(r) = attempt(n, dest)? {
            return Ok(Some(r));
        }
        dest = dir.join(unique_variant(name));
    }
    Ok(None)
}

/// `name` with a unique part inserted before its extension, for a destination that is taken:
/// `<stem>.dup-<12 hex>.<ext>`, or `<name>.dup-<12 hex>` for a name without one.
pub(crate) fn unique_variant(name: &OsStr) -> OsString {
    let u = uuid::Uuid::now_v7().simple().to_string();
    let dup = format!(".dup-{}", &u[20..]);
    // The stem gives way so that the name stays within NAME_MAX bytes.
    let room = NAME_MAX.saturating_sub(dup.len());
    match name.to_str().and_then(|s| s.rsplit_once('.')) {
        Some((stem, ext)) if !stem.is_empty() => {
            let room = room.saturating_sub(ext.len() + 1);
            OsString::from(format!("{}{dup}.{ext}", cut(stem, room)))
        }
        _ => {
            let bytes = name.as_encoded_bytes();
            let mut o = match name.to_str() {
                Some(s) => OsString::from(cut(s, room)),
                None => <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
                    &bytes[..bytes.len().min(room)],
                )
                .to_os_string(),
            };
            o.push(dup);
            o
        }
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub(crate) fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A staging name unique to this process and call, in `dir`: the directory of the file it
/// becomes (spec/mailbox.md §9, "Atomic write"). A dot-file ending in `.tmp`, which every
/// reader skips as a write in progress.
///
/// Staging in the destination's own directory is what keeps a power loss from bringing the
/// staging name back: the rename then changes one directory, and the destination directory's
/// fsync makes both its sides durable at once. Staged elsewhere (say `tmp/`), the source
/// directory's removal is never synced, and a filesystem without a journal can come back with
/// both names linked to the signal.
pub(crate) fn stage_name(dir: &Path, hint: &str) -> PathBuf {
    stage_name_from(dir, &uuid::Uuid::now_v7().simple().to_string(), hint)
}

/// A staging name from a UUID v7 the caller already made for this write (its last 16 hex
/// digits: counter and random bits), so that a send draws random bits once.
pub(crate) fn stage_name_from(dir: &Path, uuid_hex: &str, hint: &str) -> PathBuf {
    let tail = uuid_hex.get(16..).unwrap_or(uuid_hex);
    dir.join(format!(".{}.{}.{}.tmp", std::process::id(), tail, hint))
}

/// True for the name a claim by link moves a source to before unlinking it
/// (spec/mailbox.md §9.10): a [`stage_name`] with the hint `claim`.
pub(crate) fn is_claim_twin(name: &OsStr) -> bool {
    is_stage_name(name) && name.to_str().is_some_and(|n| n.ends_with(".claim.tmp"))
}

/// The id of the process that made a [`stage_name`] (`.<pid>.<16 hex>.<hint>.tmp`); `None`
/// for any other name.
pub(crate) fn stage_pid(name: &OsStr) -> Option<u32> {
    if !is_stage_name(name) {
        return None;
    }
    name.to_str()?
        .strip_prefix('.')?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// True for a name [`stage_name`] makes: `.<pid>.<16 hex>.<hint>.tmp`. `gc` removes only these
/// outside `tmp/`, never another writer's write in progress.
pub(crate) fn is_stage_name(name: &OsStr) -> bool {
    let Some(rest) = name
        .to_str()
        .and_then(|n| n.strip_prefix('.'))
        .and_then(|n| n.strip_suffix(".tmp"))
    else {
        return false;
    };
    let mut parts = rest.split('.');
    let (Some(pid), Some(tail), Some(hint), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && tail.len() == 16
        && tail
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && matches!(
            hint,
            "send" | "ack" | "reason" | "marker" | "claim" | "state" | "export"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_names_are_recognised_and_nothing_else_is() {
        for hint in ["send", "ack", "reason", "marker", "claim"] {
            let p = stage_name(Path::new("/r/inputs"), hint);
            assert_eq!(p.parent(), Some(Path::new("/r/inputs")));
            let name = p.file_name().unwrap();
            assert!(is_stage_name(name), "{name:?}");
            assert!(super::super::classify(name) == super::super::NameKind::InProgress);
        }
        for other in [
            ".signal.yaml.tmp",
            "123.0123456789abcdef.send.tmp",
            ".123.0123456789abcdef.send",
            ".123.0123456789abcdeg.send.tmp",
            ".123.0123456789ABCDEF.send.tmp",
            ".x.0123456789abcdef.send.tmp",
            ".123.0123456789abcdef.other.tmp",
            ".123.0123456789abcdef.send.x.tmp",
        ] {
            assert!(!is_stage_name(OsStr::new(other)), "{other}");
        }
    }
}
