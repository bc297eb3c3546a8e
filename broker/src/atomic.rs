//! The two primitives every write in sigbox is made of (spec/mailbox.md §9.1, §9.2): the atomic
//! write and the claim. The names they stage under are `name::own`'s.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::io::{Io, Linked, Renamed};
use crate::name::own;

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
    // One change (spec/mailbox.md §9.1): no other process's fsync of `dest`'s directory
    // writes the stage's name before its inode.
    io.change(|| {
        let placed = write_unsynced_dir(io, stage, dest, data, clobber)?;
        if placed == Placed::Done {
            io.sync_dir(dest_dir)?;
        }
        Ok(placed)
    })
}

/// [`write_atomic`] but for its last step: the file is written, fsynced and renamed into place,
/// and `dest`'s directory is **not** fsynced. For a group of writes into one directory that
/// syncs it once for the lot (spec/bridge.md §4): until that fsync, a power loss can take the
/// name back (never the content under a name that stays).
pub(crate) fn write_unsynced_dir(
    io: &Io,
    stage: &Path,
    dest: &Path,
    data: &[u8],
    clobber: Clobber,
) -> Result<Placed> {
    io.change(|| write_staged(io, stage, dest, data, clobber))
}

fn write_staged(
    io: &Io,
    stage: &Path,
    dest: &Path,
    data: &[u8],
    clobber: Clobber,
) -> Result<Placed> {
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
    // Under the rename lock until the source is gone: a process meeting the two links
    // meanwhile waits, then finds one (§9.10).
    let linked = link_step(io, src, dest, true, |ino| {
        io.sync_dir(parent(dest)?)?;
        remove_linked_source(io, src, dest, ino)
    })?;
    match linked {
        LinkStep::Linked(other) => {
            if let Some(other) = other {
                put_back(io, &other, src)?;
            }
            match between() {
                Ok(t) => {
                    io.sync_dir(parent(src)?)?;
                    Ok(Claimed::Won(t))
                }
                Err(e) => {
                    undo(io, src, dest);
                    Err(e)
                }
            }
        }
        LinkStep::Lost => Ok(Claimed::Lost),
        LinkStep::DestExists => Ok(Claimed::DestExists),
        LinkStep::Busy if !busy_by_rename => Ok(Claimed::Lost),
        LinkStep::Busy | LinkStep::ByRename => claim_by_rename(io, src, dest, between),
    }
}

/// The outcome of [`link_step`].
#[derive(Debug)]
pub(crate) enum LinkStep<T> {
    /// `dest` is a second link to the source; what the `linked` step returned.
    Linked(T),
    /// The source had already gone: another consumer won the race.
    Lost,
    /// The destination exists; nothing was linked.
    DestExists,
    /// The source has a second link already (another claim under way, one a crash left, or a
    /// planted link): nothing was linked.
    Busy,
    /// Claims go by rename here (renames are atomic across directories, or the source is not
    /// a regular file, or the filesystem refuses links): nothing was linked.
    ByRename,
}

/// The first step of every claim where claims go by link ([`Io::link_claims`], spec/mailbox.md
/// §9.10), the one implementation both the single claim ([`claim`]) and a pass's group of
/// claims use: [`Io::link_exclusive`] of `src` at `dest`, then `linked` with the linked file's
/// inode. With `hold`, `linked` runs under the rename lock (a single claim makes the link
/// durable and removes the source there, so that no process meets the two links unlocked);
/// without, after it (a group of claims makes its links durable together, at its commit).
pub(crate) fn link_step<T>(
    io: &Io,
    src: &Path,
    dest: &Path,
    hold: bool,
    linked: impl FnOnce(u64) -> Result<T>,
) -> Result<LinkStep<T>> {
    if !io.link_claims() {
        return Ok(LinkStep::ByRename);
    }
    let (outcome, held) = io.link_exclusive(src, dest)?;
    let held = if hold {
        held
    } else {
        drop(held);
        None
    };
    let step = match outcome {
        Linked::Done(st) => LinkStep::Linked(linked(st.ino)?),
        Linked::SourceGone => LinkStep::Lost,
        Linked::DestExists => LinkStep::DestExists,
        Linked::Busy => LinkStep::Busy,
        Linked::Unlinkable => LinkStep::ByRename,
    };
    drop(held);
    Ok(step)
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
    let twin = own::stage_name(parent(dest)?, "claim");
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
    let back = own::with_fresh_names(parent(src)?, name, |_, d| {
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

fn parent(p: &Path) -> Result<&Path> {
    p.parent().ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidName,
            Some(p),
            "path has no parent directory",
        )
    })
}

/// True when the stage `name` may be a write in progress: an [`own::stage_name`] whose writer still
/// runs on this host (in this pid namespace). `gc` never removes such a stage, however old:
/// the writer is about to rename it into place, and removing it would fail the write.
pub(crate) fn stage_writer_alive(name: &OsStr) -> bool {
    own::stage_pid(name).is_some_and(crate::sys::process_alive)
}
