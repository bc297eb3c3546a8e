//! The root held open (spec/mailbox.md §9.9): its descriptor, the layout directories kept
//! open below it, the deeper directories an operation holds, and every lookup beneath it that
//! never follows a symlink.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

/// A directory that every path below it is resolved from, through its descriptor: never
/// through a symlink at any component, never out of it (spec/mailbox.md §1, "Beneath the
/// root"). The root's own path may hold symlinks (the user chose it); nothing below it may.
pub(crate) struct Root {
    path: PathBuf,
    fd: OwnedFd,
    /// Directories directly below the root (the layout's own), opened once without following
    /// a link and kept: most effects then need no lookup beyond their last component. Checked
    /// against the root's entries by [`Root::verify`].
    top: std::sync::Mutex<Vec<(std::ffi::OsString, Arc<OwnedFd>)>>,
    /// Deeper directories an operation holds open while it works there ([`hold_dir`]: a
    /// group of claims into a slot, an acknowledgement out of it): effects there go through
    /// the held descriptor instead of a lookup beneath the root each. Forgotten when the
    /// operation drops it.
    held: std::sync::Mutex<Vec<(PathBuf, std::sync::Weak<File>)>>,
}

/// A directory descriptor: the root's own, one opened beneath it, or (outside any root) one
/// opened by path.
pub(crate) enum Dir {
    Root(Arc<Root>),
    Shared(Arc<OwnedFd>),
    Owned(OwnedFd),
    Held(Arc<File>),
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Dir::Root(r) => r.fd.as_fd(),
            Dir::Shared(fd) => fd.as_fd(),
            Dir::Owned(fd) => fd.as_fd(),
            Dir::Held(f) => f.as_fd(),
        }
    }
}

impl AsFd for Root {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Dir {
    /// The directory as a [`File`] with an open file description of its own (for listing,
    /// `fsync` and `flock`: a kept descriptor's offset and locks are not shared).
    pub(crate) fn into_file(self) -> io::Result<File> {
        Ok(match self {
            Dir::Owned(fd) => File::from(fd),
            shared => File::from(rustix::fs::openat(&shared, ".", DIR_FLAGS, Mode::empty())?),
        })
    }
}

/// A directory outside every root, opened as given: its symlinks are the caller's.
const OUTSIDE_DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

pub(super) const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Root {
    /// Opens the directory at `path` as a root.
    pub(crate) fn open(path: &Path) -> io::Result<Root> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty())?;
        Ok(Root {
            path: path.to_path_buf(),
            fd,
            top: std::sync::Mutex::new(Vec::new()),
            held: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// True when the root's path no longer leads to the directory this root holds (moved,
    /// replaced, removed): the holder opens it again.
    pub(crate) fn moved(&self) -> bool {
        let now = rustix::fs::stat(&self.path);
        let held = rustix::fs::fstat(&self.fd);
        match (now, held) {
            (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino),
            _ => true,
        }
    }

    /// The root's path, as given.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// `p` relative to the root when it is the root or below it.
    pub(crate) fn rel<'p>(&self, p: &'p Path) -> Option<&'p Path> {
        use std::os::unix::ffi::OsStrExt;
        // The paths the mailbox makes are the root's own bytes joined with names: compared as
        // bytes, without splitting both into components on every call.
        let root = self.path.as_os_str().as_bytes();
        if !root.ends_with(b"/")
            && let Some(rest) = p.as_os_str().as_bytes().strip_prefix(root)
            && (rest.is_empty() || rest[0] == b'/')
        {
            let start = rest.iter().position(|&b| b != b'/').unwrap_or(rest.len());
            return Some(Path::new(OsStr::from_bytes(&rest[start..])));
        }
        p.strip_prefix(&self.path).ok()
    }

    /// Opens the directory `rel` beneath the root ([`beneath`]), from the kept descriptor of
    /// its first component.
    pub(crate) fn dir(self: &Arc<Self>, rel: &Path) -> io::Result<Dir> {
        use std::path::Component;
        if rel.as_os_str().is_empty() {
            return Ok(Dir::Root(Arc::clone(self)));
        }
        let mut comps = rel.components();
        if let (Some(Component::Normal(first)), rest) = (comps.next(), comps.as_path()) {
            let top = self.top_dir(first)?;
            if rest.as_os_str().is_empty() {
                return Ok(Dir::Shared(top));
            }
            if let Some(f) = self.held_dir(rel) {
                return Ok(Dir::Held(f));
            }
            return beneath(&top, rest).map(Dir::Owned);
        }
        beneath(&self.fd, rel).map(Dir::Owned)
    }

    /// Keeps `f`, the directory `rel` (opened beneath the root), for the effects there while
    /// its holder keeps `f`.
    fn hold(&self, rel: &Path, f: &Arc<File>) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|(p, w)| w.strong_count() > 0 && p != rel);
        held.push((rel.to_path_buf(), Arc::downgrade(f)));
    }

    /// The held descriptor of `rel` while its holder keeps it ([`hold_dir`]).
    fn held_dir(&self, rel: &Path) -> Option<Arc<File>> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.is_empty() {
            return None;
        }
        held.iter()
            .find(|(p, _)| p == rel)
            .and_then(|(_, w)| w.upgrade())
    }

    /// The kept descriptor of `name`, a directory directly below the root, opened (without
    /// following a link) the first time.
    fn top_dir(&self, name: &OsStr) -> io::Result<Arc<OwnedFd>> {
        let mut top = self.top.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, fd)) = top.iter().find(|(n, _)| n == name) {
            return Ok(Arc::clone(fd));
        }
        let fd = Arc::new(rustix::fs::openat(
            &self.fd,
            name,
            DIR_FLAGS,
            Mode::empty(),
        )?);
        top.push((name.to_os_string(), Arc::clone(&fd)));
        Ok(fd)
    }

    /// Forgets every kept directory that is no longer the one at its name below the root
    /// (replaced, moved, or a link planted there since): the next use opens it again, and a
    /// link is refused then. One `fstatat` and one `fstat` per kept directory.
    pub(crate) fn verify(&self) {
        let same = |name: &std::ffi::OsStr, fd: &OwnedFd| {
            let now = rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
            match (now, rustix::fs::fstat(fd)) {
                (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
                _ => false,
            }
        };
        let mut top = self.top.lock().unwrap_or_else(|p| p.into_inner());
        top.retain(|(name, fd)| same(name, fd));
    }
}

/// Opens the directory `rel` below the directory `at` without following a symlink at any
/// component: `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` on Linux, else (or where the
/// kernel refuses it) a walk of `openat(O_NOFOLLOW | O_DIRECTORY)`, one component at a time.
/// A symlink gives `ELOOP`, anything else that is not a directory `ENOTDIR`.
fn beneath(at: &impl AsFd, rel: &Path) -> io::Result<OwnedFd> {
    use std::path::Component;
    let at = at.as_fd();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::fs::{ResolveFlags, openat2};
        use rustix::io::Errno;
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        for _ in 0..4 {
            match openat2(at, rel, DIR_FLAGS, Mode::empty(), how) {
                Ok(fd) => return Ok(fd),
                // A rename elsewhere in the filesystem during the lookup: try again.
                Err(Errno::AGAIN) => continue,
                // No openat2 (before Linux 5.6) or a sandbox that forbids it: walk.
                Err(Errno::NOSYS | Errno::PERM) => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    let mut cur: Option<OwnedFd> = None;
    for comp in rel.components() {
        match comp {
            Component::Normal(name) => {
                let from = cur.as_ref().map_or(at, AsFd::as_fd);
                cur = Some(rustix::fs::openat(from, name, DIR_FLAGS, Mode::empty())?);
            }
            Component::CurDir => {}
            _ => return Err(rustix::io::Errno::XDEV.into()),
        }
    }
    match cur {
        Some(fd) => Ok(fd),
        None => Ok(rustix::fs::openat(at, ".", DIR_FLAGS, Mode::empty())?),
    }
}

/// The directory holding `path` and its last component: beneath `root` when `path` is below
/// it, else opened by path (following symlinks, as any program would: a path outside every
/// root is the caller's).
pub(crate) fn place<'p>(root: Option<&Arc<Root>>, path: &'p Path) -> io::Result<(Dir, &'p OsStr)> {
    let (parent, name) = match split_plain(path) {
        Some(split) => split,
        None => (
            path.parent().unwrap_or(Path::new("")),
            path.file_name()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?,
        ),
    };
    if let Some(rel) = root.and_then(|r| r.rel(parent).map(|rel| (r, rel))) {
        return Ok((rel.0.dir(rel.1)?, name));
    }
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    Ok((
        Dir::Owned(rustix::fs::open(parent, OUTSIDE_DIR_FLAGS, Mode::empty())?),
        name,
    ))
}

/// `path`'s parent and file name, split at its last `/` as bytes, for the plain paths the
/// mailbox makes (its root's bytes joined with names): what `Path::parent` and
/// `Path::file_name` give for those, without parsing every component from the back on each
/// effect. `None` for anything else (no `/`, a `/` doubled or last, a `.` or `..` component
/// at either end of the split), left to those two.
fn split_plain(path: &Path) -> Option<(&Path, &OsStr)> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let cut = memchr::memrchr(b'/', bytes)?;
    let (parent, name) = (&bytes[..cut], &bytes[cut + 1..]);
    let odd = |c: &[u8]| c.is_empty() || c == b"." || c == b"..";
    if odd(name) || parent.is_empty() || parent.ends_with(b"/") || parent.ends_with(b"/.") {
        return None;
    }
    // A `.` inside the parent (`a/./b`) is one component fewer for `Path::parent`.
    if memchr::memmem::find(parent, b"/./").is_some() || parent.starts_with(b"./") {
        return None;
    }
    Some((
        Path::new(OsStr::from_bytes(parent)),
        OsStr::from_bytes(name),
    ))
}

/// The directory `path`, opened as [`dir_at`] opens it and, when it lies deeper than the
/// layout's top directories beneath `root`, held there for as long as the caller keeps the
/// descriptor: every effect in it meanwhile (by any path through `root`) goes through this
/// descriptor, with no lookup of its own. The lookup beneath the root is made once, here; a
/// directory moved while it is held takes the effects made through it along (as a move
/// between one lookup and its effect would): hold it for one bounded operation only, never
/// across a wait.
pub(crate) fn hold_dir(root: Option<&Arc<Root>>, path: &Path) -> io::Result<Arc<File>> {
    if let Some((r, rel)) = root.and_then(|r| r.rel(path).map(|rel| (r, rel))) {
        match r.dir(rel)? {
            Dir::Held(f) => return Ok(f),
            Dir::Owned(fd) => {
                let f = Arc::new(File::from(fd));
                r.hold(rel, &f);
                return Ok(f);
            }
            top => return Ok(Arc::new(top.into_file()?)),
        }
    }
    Ok(Arc::new(dir_at(root, path)?.into_file()?))
}

/// The directory `path` itself, opened as [`place`] opens a parent (never through a symlink
/// beneath the root; outside it, not through a final symlink).
pub(crate) fn dir_at(root: Option<&Arc<Root>>, path: &Path) -> io::Result<Dir> {
    if let Some((r, rel)) = root.and_then(|r| r.rel(path).map(|rel| (r, rel))) {
        if rel.as_os_str().is_empty() {
            // A description of its own: listing or locking must not share the root's.
            return Ok(Dir::Owned(rustix::fs::openat(
                &r.fd,
                ".",
                DIR_FLAGS,
                Mode::empty(),
            )?));
        }
        return r.dir(rel);
    }
    // Outside the root, a path is used as given, as `place` uses it: its symlinks are the
    // user's (the root's own path may hold some, spec §1.0; `init` syncs its parents).
    Ok(Dir::Owned(rustix::fs::open(
        path,
        OUTSIDE_DIR_FLAGS,
        Mode::empty(),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wherever the byte split answers, it answers what `Path::parent` and `Path::file_name`
    /// do, for every path built of these pieces (up to four of them).
    #[test]
    fn split_plain_agrees_with_path_parent_and_file_name() {
        let pieces = ["", "/", "//", ".", "..", "a", "bc", "./", "/.", "a/", "ü"];
        let mut paths = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = paths
                .iter()
                .flat_map(|p| pieces.iter().map(move |x| format!("{p}{x}")))
                .collect();
            paths.extend(longer);
        }
        let mut answered = 0;
        for p in &paths {
            let path = Path::new(p);
            if let Some((parent, name)) = split_plain(path) {
                answered += 1;
                // As bytes: `Path`'s own equality ignores a doubled or trailing `/`.
                assert_eq!(
                    Some(parent.as_os_str()),
                    path.parent().map(Path::as_os_str),
                    "parent of {p:?}"
                );
                assert_eq!(Some(name), path.file_name(), "file name of {p:?}");
            }
        }
        assert!(
            answered > 1000,
            "the split answers for most plain paths: {answered}"
        );
        let root = "/tmp/x/.tmpA1/signals/claimed/Executor/0/signal.20261126T150258.213538Z.01a2.INFO.Executor.json";
        assert!(split_plain(Path::new(root)).is_some());
    }
}
