//! A signal's identity (spec/mailbox.md §2.4): the one id a file keeps for its whole life in
//! the mailbox (its acks, its delivery, its record in `processed/`, `ls` and `log`), so that
//! two files never share acks and a name used again is a new signal.

use std::time::SystemTime;

use serde_json::{Map, Value};

use super::layout::fnv1a;
use crate::clock;
use crate::name;
use crate::name::own;
use crate::sys::Stamp;

/// The longest stem an identity keeps (bytes): with the `@` and the 16 hex digits of the key,
/// an identity stays a valid file name (`acks/<id>/`) under the 255-byte limit.
const STEM_MAX: usize = 200;

/// True when sigbox itself wrote this file (or something that writes exactly what it
/// writes): a canonical name whose body's `id` is that name's stem. Only such a name is
/// trusted to be complete at once and to identify the signal by itself.
pub(crate) fn trusted(file_name: &str, fields: &Map<String, Value>) -> bool {
    name::parse_canonical(file_name).is_some()
        && fields.get("id").and_then(Value::as_str) == Some(name::signal_id(file_name))
}

/// The identity of the signal file `file_name`, whose body has `fields`, from `stamp` (taken
/// from the open descriptor it was read through: [`crate::sys::stamp`]).
///
/// - A file sigbox wrote ([`trusted`]): its name's stem, which holds a UUIDv7.
/// - Any other file: `<stem>@<16 hex>`, the hex a hash of the inode number and the inode's
///   birth time. Both survive the renames and appends of a file's life; a second file under
///   the same name (the same `news.yaml` the next day, or `news.json` beside `news.yaml`) is
///   another inode, and where an inode number is used again its birth time differs. Where the
///   filesystem records no birth time (some network and FUSE filesystems), the inode number
///   alone.
///
/// A name a move gave way with (`<stem>.dup-<12 hex>.<ext>`, spec §8) counts as the name it
/// had before.
pub(crate) fn identity(file_name: &str, fields: &Map<String, Value>, stamp: &Stamp) -> String {
    let file_name = &original_name(file_name);
    let stem = name::signal_id(file_name);
    if trusted(file_name, fields) {
        return stem.to_string();
    }
    let mut key = Vec::with_capacity(24);
    key.extend_from_slice(&stamp.ino.to_le_bytes());
    if let Some(birth) = stamp.birth_ns {
        key.extend_from_slice(&birth.to_le_bytes());
    }
    format!("{}@{:016x}", own::cut(stem, STEM_MAX), fnv1a(&key))
}

/// `file_name` without the `.dup-<12 hex>` a no-clobber move inserted before its extension. A
/// valid canonical name is kept as it is (an agent may be called `dup-0123456789ab`).
pub(super) fn original_name(file_name: &str) -> std::borrow::Cow<'_, str> {
    if name::parse_canonical(file_name).is_some() {
        return file_name.into();
    }
    let (stem, ext) = match file_name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => (stem, Some(ext)),
        _ => (file_name, None),
    };
    let Some((before, hex)) = stem.rsplit_once(".dup-") else {
        return file_name.into();
    };
    if hex.len() != 12 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return file_name.into();
    }
    match ext {
        Some(ext) => format!("{before}.{ext}").into(),
        None => before.to_string().into(),
    }
}

/// When a file under a canonical name that sigbox did not write (its body unreadable, or its
/// `id` not the name's) becomes eligible: such a file settles like a dropped one written in
/// place (§5), since it may be written in steps: from its last write (its mtime, no later
/// than its ctime), with no exemption for a later ctime, which a claim that put it back
/// changed. `None` when it may be read now.
pub(crate) fn untrusted_settling(
    file_name: &str,
    fields: Option<&Map<String, Value>>,
    stamp: &Stamp,
    settle: std::time::Duration,
    now: SystemTime,
) -> Option<SystemTime> {
    if name::parse_canonical(file_name).is_none() || fields.is_some_and(|f| trusted(file_name, f)) {
        return None;
    }
    let written = Stamp {
        ctime_ns: stamp.mtime_clamped_ns(),
        ..*stamp
    };
    clock::settling(&written, settle, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::EntryKind;

    fn stamp(ino: u64, birth_ns: Option<i128>) -> Stamp {
        Stamp {
            dev: 1,
            ino,
            size: 10,
            nlink: 1,
            mtime_ns: 5,
            ctime_ns: 5,
            birth_ns,
            kind: EntryKind::File,
        }
    }

    const CANON: &str =
        "signal.20261122T101500.123456Z.0193a4b5c6d7e8f90123456789abcdef.STEER.Executor.json";

    fn fields(id: Option<&str>) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("type".into(), "STEER".into());
        if let Some(id) = id {
            m.insert("id".into(), id.into());
        }
        m
    }

    #[test]
    fn a_file_sigbox_wrote_is_its_stem() {
        let stem = name::signal_id(CANON);
        assert_eq!(identity(CANON, &fields(Some(stem)), &stamp(7, None)), stem);
    }

    #[test]
    fn a_canonical_name_without_its_id_is_not_trusted() {
        for f in [fields(None), fields(Some("other"))] {
            let id = identity(CANON, &f, &stamp(7, Some(9)));
            assert!(
                id.starts_with(name::signal_id(CANON)) && id.contains('@'),
                "{id}"
            );
        }
    }

    #[test]
    fn same_stem_other_file_is_another_identity() {
        let f = fields(None);
        let a = identity("news.yaml", &f, &stamp(7, Some(100)));
        let b = identity("news.json", &f, &stamp(8, Some(100)));
        let again = identity("news.yaml", &f, &stamp(7, Some(200))); // inode used again
        let same = identity("news.yaml", &f, &stamp(7, Some(100)));
        assert!(a.starts_with("news@"));
        assert_ne!(a, b);
        assert_ne!(a, again);
        assert_eq!(a, same);
    }

    #[test]
    fn a_name_a_move_gave_way_with_is_the_name_it_had() {
        let stem = name::signal_id(CANON);
        let dup = CANON.replace(".json", ".dup-0123456789ab.json");
        assert_eq!(identity(&dup, &fields(Some(stem)), &stamp(7, None)), stem);
        let f = fields(None);
        let st = stamp(7, Some(3));
        assert_eq!(
            identity("news.dup-0123456789ab.yaml", &f, &st),
            identity("news.yaml", &f, &st)
        );
        // Not a move's insertion: kept.
        assert!(identity("news.dup-xyz.yaml", &f, &st).starts_with("news.dup-xyz@"));
        // A canonical name whose target looks like one: the name it is.
        let odd = CANON.replace(".Executor.json", ".dup-0123456789ab.json");
        let stem = name::signal_id(&odd);
        assert_eq!(identity(&odd, &fields(Some(stem)), &st), stem);
    }

    #[test]
    fn a_long_stem_keeps_the_identity_a_file_name() {
        let long = format!("{}.yaml", "é".repeat(120));
        let id = identity(&long, &fields(None), &stamp(1, None));
        assert!(id.len() <= 255 - ".ack.yaml".len(), "{}", id.len());
        assert!(id.ends_with(&format!("@{:016x}", fnv1a(&1u64.to_le_bytes()))));
    }
}
