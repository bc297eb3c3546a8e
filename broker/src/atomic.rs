//! The two primitives every write in sigbox is made of (spec/mailbox.md §9.1, §9.2): the atomic
//! write and the claim, and the fresh-name rule for a taken destination (§8, §9.3).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::io::{Io, Linked, Renamed};

/// What [`write_atomic`] does when the destination exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Clobber {
    /// Never replace: the write fails with `DestExists` and the destination is untouched.
    No,
    /// Replace (for files the writer owns, such as Goblin and mux signal files).
    Yes,
}

/// The outcome of [`write_atomic`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// The file is at its destination (durably, in durable mode).
    Done,
    /// With [`Clobber::No`]: the destination existed; nothing changed there. The staged file
    /// has been removed again.
    Exists,
}

/// Writes `data` to `dest` so that no reader ever sees a partial file.
///
/// Steps, in order: create `stage_dir/<stage_name>` exclusively; write; fsync the file;
/// rename it to `dest` (without replacing, unless `clobber`); fsync `dest`'s directory.
///
/// **Durability:** in durable mode, once this returns `Ok(Placed::Done)` the file's content and
/// its name survive a crash or power loss. A failed fsync poisons the handle. On failure the
/// staged file is removed when possible; a crash can leave it in `stage_dir`, where `gc` (or the
/// dialect's own cleanup) removes it.
pub(crate) fn write_atomic(
    io: &Io,
    stage: &Path,
    dest: &Path,
    data: &[u8],
    clobber: Clobber,
) -> Result<Placed> {
    let dest_dir = parent(dest)?;
    io.write_new(stage, data)
        .inspect_err(|_| discard_stage(io, stage))?;
    match clobber {
        Clobber::No => match io.rename_noreplace(stage, dest) {
            Ok(Renamed::Done) => {}
            Ok(Renamed::DestExists) => {
                remove_stage(io, stage)?;
                return Ok(Placed::Exists);
            }
            Ok(Renamed::SourceGone) => {
                return Err(Error::new(
                    ErrorKind::Io,
                    Some(stage),
                    "staged file vanished before it was renamed into place (is another process \
                     cleaning the staging directory?)",
                ));
            }
            Err(e) => {
                discard_stage(io, stage);
                return Err(e);
            }
        },
        Clobber::Yes => io
            .rename_replace(stage, dest)
            .inspect_err(|_| discard_stage(io, stage))?,
    }
    io.sync_dir(dest_dir)?;
    Ok(Placed::Done)
}

/// Removes a stage [`write_atomic`] wrote and will not rename into place, durably
/// ([`Io::remove_owned`]). Its fsync may have made its name durable (ext4 without a journal
/// writes a new file's entry with it), so its removal must be durable too before its inode can
/// be used again: else a power loss brings the name back pointing at an inode that is free, or
/// that is another file's now (a second link to a signal, or a directory, which stops a
/// boot-time `fsck -p`); and its content is gone first, so that its inode, should the power
/// fail before the inode is written free, is an empty one the check clears by itself.
pub(crate) fn remove_stage(io: &Io, stage: &Path) -> Result<()> {
    io.remove_owned(stage)?;
    Ok(())
}

/// [`remove_stage`] on a path that already failed: best effort, the first error is the one
/// reported.
fn discard_stage(io: &Io, stage: &Path) {
    if let Err(e) = remove_stage(io, stage) {
        tracing::debug!(file = %stage.display(), error = %e, "cannot remove a stage");
    }
}

/// The outcome of [`claim`], carrying what its `between` step returned when it won.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claimed<T> {
    /// This caller moved the file; it is now at `dest`.
    Won(T),
    /// The source had already gone: another consumer won the race. Not an error.
    Lost,
    /// The destination exists; nothing moved.
    DestExists,
}

/// Moves `src` to `dest` without replacing anything: the claim. Exactly one of any number of
/// concurrent claimers of the same `src` wins.
///
/// `between` runs after the rename and before the fsyncs (it may write beside `dest`); then the
/// destination directory is fsynced, then the source directory. When `between` fails, the claim
/// is undone (renamed back, no-clobber) and its error returned. Destination first: a crash
/// between the two leaves the file in both directories (handled as an interrupted claim),
/// never in neither.
///
/// **Durability:** in durable mode, once this returns `Ok(Claimed::Won)` the move survives a
/// crash: the file is never found in `src`'s directory again.
///
/// Where renames are not atomic across directories ([`Io::link_claims`], spec/mailbox.md
/// §9.10) the move is a claim by link: [`Io::link_exclusive`], fsync of the destination
/// directory, [`remove_linked_source`], `between`, fsync of the source directory. A source
/// with a second link already (another claim under way) is left: `Lost`.
pub(crate) fn claim<T>(
    io: &Io,
    src: &Path,
    dest: &Path,
    between: impl FnOnce() -> Result<T>,
) -> Result<Claimed<T>> {
    claim_with(io, src, dest, false, between)
}

/// [`claim`] for a file leaving for `rejected/`: one with a second link (a planted link, the
/// reason it is refused) moves by rename.
pub(crate) fn claim_refused<T>(
    io: &Io,
    src: &Path,
    dest: &Path,
    between: impl FnOnce() -> Result<T>,
) -> Result<Claimed<T>> {
    claim_with(io, src, dest, true, between)
}

/// [`claim`] by rename on every filesystem: for a move whose loss in a power failure loses
/// nothing (Goblin's move of a signal it has acted on, whose new stage is saved first).
pub(crate) fn claim_by_rename<T>(
    io: &Io,
    src: &Path,
    dest: &Path,
    between: impl FnOnce() -> Result<T>,
) -> Result<Claimed<T>> {
    let r = claim_unsynced(io, src, dest, between)?;
    if let Claimed::Won(_) = r {
        io.sync_dir(parent(dest)?)?;
        io.sync_dir(parent(src)?)?;
    }
    Ok(r)
}

fn claim_with<T>(
    io: &Io,
    src: &Path,
    dest: &Path,
    busy_by_rename: bool,
    between: impl FnOnce() -> Result<T>,
) -> Result<Claimed<T>> {
    if io.link_claims() {
        let (linked, held) = io.link_exclusive_holding(src, dest)?;
        match linked {
            Linked::Done(st) => {
                // Under the rename lock until the source is gone: a process meeting the two
                // links meanwhile waits, then finds one (§9.10).
                io.sync_dir(parent(dest)?)?;
                let other = remove_linked_source(io, src, dest, st.ino)?;
                drop(held);
                if let Some(other) = other {
                    put_back(io, &other, src)?;
                }
                return match between() {
                    Ok(t) => {
                        io.sync_dir(parent(src)?)?;
                        Ok(Claimed::Won(t))
                    }
                    Err(e) => {
                        undo(io, src, dest);
                        Err(e)
                    }
                };
            }
            Linked::SourceGone => return Ok(Claimed::Lost),
            Linked::DestExists => return Ok(Claimed::DestExists),
            Linked::Busy if !busy_by_rename => return Ok(Claimed::Lost),
            Linked::Busy | Linked::Unlinkable => {}
        }
    }
    claim_by_rename(io, src, dest, between)
}

/// The second step of a claim by link, once the link at `dest` is durable: removes the
/// source's name, only if it still names the linked file (inode `ino`). The source is moved
/// to a fresh staging name of this process's own beside `dest` (a plain `rename`: no other
/// process uses that name), checked there, and unlinked; a file that took the source's name meanwhile is returned, to go back where it
/// was ([`put_back`]). A source already gone is fine: the only other way out of the source
/// for a file with a claim's link is the removal by a pass that found the link and synced it
/// first ([`crate::mailbox`] §9.6), which leaves the claim holding it.
pub(crate) fn remove_linked_source(
    io: &Io,
    src: &Path,
    dest: &Path,
    ino: u64,
) -> Result<Option<PathBuf>> {
    // A fresh name of this process's own: `rename` needs no lock to be exclusive there.
    let twin = stage_name(parent(dest)?, "claim");
    match io.rename_replace(src, &twin) {
        Ok(()) => {}
        Err(e)
            if e.io_error()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    }
    match io.stamp(&twin)? {
        Some(st) if st.ino == ino => {
            io.remove(&twin)?;
            Ok(None)
        }
        Some(_) => Ok(Some(twin)),
        None => Ok(None),
    }
}

/// Moves `other` (a file that took a claimed source's name and was moved aside with it) back
/// to `src`, or, when that name is taken again, beside it under a fresh `.dup-` name.
pub(crate) fn put_back(io: &Io, other: &Path, src: &Path) -> Result<()> {
    let name = src.file_name().unwrap_or_default();
    let back = with_fresh_names(parent(src)?, name, |_, d| {
        Ok(match io.rename_noreplace(other, &d)? {
            Renamed::Done | Renamed::SourceGone => Some(()),
            Renamed::DestExists => None,
        })
    })?;
    if back.is_none() {
        tracing::warn!(file = %other.display(), "cannot put back a file that took a claimed name");
    }
    Ok(())
}

/// Takes back a claim whose `between` step failed: the file goes back to `src` (no-clobber);
/// if that fails too, it stays at `dest` as an interrupted claim (spec/mailbox.md §9.6).
fn undo(io: &Io, src: &Path, dest: &Path) {
    match io.rename_noreplace(dest, src) {
        Ok(Renamed::Done) => {}
        Ok(Renamed::SourceGone) => {
            tracing::warn!(file = %dest.display(), "cannot undo a claim: the claimed file is gone");
        }
        Ok(Renamed::DestExists) => tracing::warn!(
            file = %dest.display(),
            taken = %src.display(),
            "cannot undo a claim: its name was taken again; it stays in flight"
        ),
        Err(e) => tracing::warn!(file = %dest.display(), error = %e, "cannot undo a claim"),
    }
}

/// [`claim`] without the fsyncs: the caller makes the move durable later, destination
/// directory first, then the source directory, before it hands anything over (a group commit
/// of several claims).
pub(crate) fn claim_unsynced<T>(
    io: &Io,
    src: &Path,
    dest: &Path,
    between: impl FnOnce() -> Result<T>,
) -> Result<Claimed<T>> {
    Ok(match io.rename_noreplace(src, dest)? {
        Renamed::SourceGone => Claimed::Lost,
        Renamed::DestExists => Claimed::DestExists,
        Renamed::Done => match between() {
            Ok(t) => Claimed::Won(t),
            Err(e) => {
                // The claim is undone: the file goes back where it was, for a later claim.
                // Whoever called this will not hand it over, so leaving it at `dest` would
                // lose it.
                undo(io, src, dest);
                return Err(e);
            }
        },
    })
}

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
    let room = crate::mailbox::NAME_MAX.saturating_sub(dup.len());
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

fn parent(p: &Path) -> Result<&Path> {
    p.parent().ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidName,
            Some(p),
            "path has no parent directory",
        )
    })
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
/// ([`remove_linked_source`], spec/mailbox.md §9.10): a [`stage_name`] with the hint `claim`.
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

/// True when the stage `name` may be a write in progress: a [`stage_name`] whose writer still
/// runs on this host (in this pid namespace). `gc` never removes such a stage, however old:
/// the writer is about to rename it into place, and removing it would fail the write.
pub(crate) fn stage_writer_alive(name: &OsStr) -> bool {
    stage_pid(name).is_some_and(crate::sys::process_alive)
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
            assert!(crate::name::classify(name) == crate::name::NameKind::InProgress);
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
