//! Locks that a stopped process cannot keep (spec/mailbox.md §9.11): an exclusive `flock`
//! taken with a bounded wait, and who holds one when it cannot be had.
//!
//! A process can be frozen at any instant (Ctrl-Z, SIGSTOP, `docker pause`, a debugger),
//! holding whatever it holds then. A `flock` wait has no time limit and is restarted after
//! every signal handler, so a blocking `flock` on a lock a frozen process holds waits for
//! ever and ignores SIGTERM. Every lock sigbox waits for goes through [`lock_bounded`]: it
//! asks again and again without blocking, and gives up when the time is over or when every
//! process holding the lock is stopped (the caller then does without, by a rule of its own).
//! The holders are read from `/proc/locks` (Linux: each lock with the process that took it,
//! and the device and inode it is on), their state from `/proc/<pid>/task/*/stat`.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;

/// One process holding a lock, as `/proc/locks` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    /// Its process id (in this pid namespace; 0 where the kernel cannot say).
    pub(crate) pid: u32,
    /// Every thread of it is stopped (SIGSTOP, SIGTSTP, a tracer): it runs nothing, and
    /// nothing it started in the kernel is still under way.
    pub(crate) stopped: bool,
    /// The process that took the lock has ended, and the lock lives on in a process that
    /// inherited its descriptor (the command `flock(1)` started, say): not sigbox, whose
    /// descriptors close at `exec`, and nothing a wait can expect to end.
    pub(crate) gone: bool,
}

impl Holder {
    /// Nothing to wait for: stopped, or holding a lock its taker left behind.
    pub(crate) fn idle(&self) -> bool {
        self.stopped || self.gone
    }
}

/// How [`lock_bounded`] ended.
#[derive(Debug)]
pub(crate) enum Bounded {
    /// The lock is held (released when the descriptor closes or is unlocked).
    Held,
    /// Not had in the time given, or every holder is stopped: who holds it (empty where they
    /// cannot be read).
    Busy(Vec<Holder>),
}

/// How long a lock wait sleeps between two tries, at first and at most: a holder that runs
/// keeps a lock for one fsync or a few renames (tens of microseconds to a few milliseconds).
const FIRST_NAP: Duration = Duration::from_micros(50);
const LONGEST_NAP: Duration = Duration::from_millis(5);
/// How often the holders are looked at while waiting (a read of `/proc/locks`).
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// Takes an exclusive `flock` on `fd`, waiting at most `limit`, and not at all once every
/// process holding it is stopped (when `give_up_on_stopped`). Never blocks in the kernel, so
/// a stop signal's handler always runs within one nap and the caller's next step sees it.
pub(crate) fn lock_bounded(
    fd: impl AsFd,
    limit: Duration,
    give_up_on_stopped: bool,
) -> io::Result<Bounded> {
    lock_bounded_as(
        fd,
        FlockOperation::NonBlockingLockExclusive,
        limit,
        give_up_on_stopped,
    )
}

/// [`lock_bounded`] for a shared `flock` (which only an exclusive one excludes).
pub(crate) fn lock_shared_bounded(
    fd: impl AsFd,
    limit: Duration,
    give_up_on_stopped: bool,
) -> io::Result<Bounded> {
    lock_bounded_as(
        fd,
        FlockOperation::NonBlockingLockShared,
        limit,
        give_up_on_stopped,
    )
}

fn lock_bounded_as(
    fd: impl AsFd,
    op: FlockOperation,
    limit: Duration,
    give_up_on_stopped: bool,
) -> io::Result<Bounded> {
    let began = Instant::now();
    let mut nap = FIRST_NAP;
    let mut looked: Option<Instant> = None;
    // A holder whose taker is gone, seen once: the taker may have ended a moment after the
    // read of /proc/locks, its lock released with it. Only seen again, a look later, with the
    // lock still held, is it an orphan that nothing will release.
    let mut orphan_seen = false;
    loop {
        match rustix::fs::flock(&fd, op) {
            Ok(()) => return Ok(Bounded::Held),
            Err(rustix::io::Errno::WOULDBLOCK) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let waited = began.elapsed();
        let look = give_up_on_stopped && looked.is_none_or(|t| t.elapsed() >= LOOK_EVERY);
        if waited >= limit || look {
            let holders = holders(&fd);
            looked = Some(Instant::now());
            let idle = !holders.is_empty() && holders.iter().all(Holder::idle);
            let confirmed = holders.iter().all(|h| h.stopped) || orphan_seen;
            if waited >= limit || (idle && confirmed) {
                return Ok(Bounded::Busy(holders));
            }
            orphan_seen = idle;
        }
        std::thread::sleep(nap.min(limit.saturating_sub(waited)));
        nap = (nap * 2).min(LONGEST_NAP);
    }
}

/// The processes holding a lock on the file `fd` is open on (other than waiters), from
/// `/proc/locks`; empty where that cannot be read (not Linux, no `/proc`).
pub(crate) fn holders(fd: impl AsFd) -> Vec<Holder> {
    let Ok(st) = rustix::fs::fstat(&fd) else {
        return Vec::new();
    };
    let dev = st.st_dev;
    let want = (
        rustix::fs::major(dev),
        rustix::fs::minor(dev),
        #[allow(clippy::useless_conversion)] // u32 on some targets
        u64::from(st.st_ino),
    );
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    let mut out: Vec<Holder> = Vec::new();
    for line in locks.lines() {
        let Some((pid, on)) = parse_lock_line(line) else {
            continue;
        };
        if on == want && !out.iter().any(|h| h.pid == pid) {
            out.push(Holder {
                pid,
                stopped: is_stopped(pid),
                gone: is_gone(pid),
            });
        }
    }
    out
}

/// How a lock below a root is held by nobody who will let it go ([`stopped_holders_below`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// By a process that is stopped (its pid).
    Stopped,
    /// By a process that inherited it from one that has ended (that one's pid).
    Orphaned,
}

/// The locks on files below `root` held by processes that are stopped: `(pid, path)` for each
/// (what `doctor` reports). From `/proc/locks` (each held lock's pid, device and inode), then
/// the descriptors of each stopped holder (`/proc/<pid>/fd/*`, whose target names the file);
/// only processes this user may look at are found. `layout`: the directories below the root
/// a lock is looked for on by inode when its holder cannot be asked.
pub(crate) fn stopped_holders_below(
    root: &std::path::Path,
    layout: &[&str],
) -> Vec<(u32, std::path::PathBuf, Held)> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(root) else {
        return Vec::new();
    };
    let Ok(root) = std::fs::canonicalize(root) else {
        return Vec::new();
    };
    let dev = meta.dev();
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    // `dev_t` is narrower than `MetadataExt::dev`'s u64 on some targets (i32 on macOS).
    #[allow(clippy::unnecessary_cast)]
    let raw = dev as rustix::fs::Dev;
    let (maj, min) = (rustix::fs::major(raw), rustix::fs::minor(raw));
    let mut held: Vec<(u32, u64)> = locks
        .lines()
        .filter_map(parse_lock_line)
        .filter(|&(_, (a, b, _))| (a, b) == (maj, min))
        .map(|(pid, (_, _, ino))| (pid, ino))
        .collect();
    held.sort_unstable();
    held.dedup();
    let mut out = Vec::new();
    let mut pids: Vec<u32> = held.iter().map(|&(p, _)| p).collect();
    pids.dedup();
    // A lock whose taker has ended lives on in a process that inherited it, which cannot be
    // named: its file is found by inode, where it is the root or a layout directory.
    let root_ino = meta.ino();
    for &(pid, ino) in held.iter().filter(|&&(p, _)| is_gone(p)) {
        let place = if ino == root_ino {
            Some(root.clone())
        } else {
            layout
                .iter()
                .map(|d| root.join(d))
                .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.ino() == ino))
        };
        let path = place.unwrap_or_else(|| root.join(format!("<inode {ino}>")));
        out.push((pid, path, Held::Orphaned));
    }
    for pid in pids.into_iter().filter(|&p| is_stopped(p)) {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let (Ok(target), Ok(m)) = (std::fs::read_link(fd.path()), std::fs::metadata(fd.path()))
            else {
                continue;
            };
            if m.dev() == dev
                && held.contains(&(pid, m.ino()))
                && target.starts_with(&root)
                && !out.iter().any(|(p, t, _)| *p == pid && *t == target)
            {
                out.push((pid, target, Held::Stopped));
            }
        }
    }
    out
}

/// One line of `/proc/locks` held (not waited for): its pid and `(major, minor, inode)`.
/// `1: FLOCK  ADVISORY  WRITE 1234 fd:00:5678 0 EOF`; a waiter's line has `->` after the
/// number.
fn parse_lock_line(line: &str) -> Option<(u32, (u32, u32, u64))> {
    let mut words = line.split_whitespace();
    let _number = words.next()?;
    let class = words.next()?;
    if class == "->" {
        return None;
    }
    let (_, _, pid, place) = (words.next()?, words.next()?, words.next()?, words.next()?);
    let pid: u32 = pid.parse().ok()?;
    let mut parts = place.split(':');
    let maj = u32::from_str_radix(parts.next()?, 16).ok()?;
    let min = u32::from_str_radix(parts.next()?, 16).ok()?;
    let ino: u64 = parts.next()?.parse().ok()?;
    Some((pid, (maj, min, ino)))
}

/// True when no process `pid` exists in this pid namespace (0, a pid the kernel cannot
/// translate here, is not known to be gone).
pub(crate) fn is_gone(pid: u32) -> bool {
    pid != 0 && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// True when every thread of process `pid` is stopped (`T`) or traced and stopped (`t`);
/// false for a process that runs, sleeps, waits on the disk, or cannot be read.
pub(crate) fn is_stopped(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `pid (comm) S ...`: the state follows the last ')' (comm may hold anything).
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next());
        match state {
            Some("T" | "t") => any = true,
            // A thread that exited meanwhile does not run either.
            Some("Z" | "X") => {}
            _ => return false,
        }
    }
    any
}

/// What a person is told of the holders of a lock: "pid 123 (stopped: `kill -CONT 123` to let
/// it go on)", or "another process" where none can be named.
pub(crate) fn describe_holders(holders: &[Holder]) -> String {
    if holders.is_empty() {
        return "another process".to_string();
    }
    holders
        .iter()
        .map(|h| match (h.stopped, h.gone) {
            (true, _) => format!(
                "pid {} (stopped: `kill -CONT {}` lets it go on, or end it)",
                h.pid, h.pid
            ),
            (_, true) => format!(
                "a process that inherited it from pid {}, which has ended (a command started by \
                 `flock`?): `fuser -v` on the locked file finds it",
                h.pid
            ),
            (false, false) => format!("pid {}", h.pid),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `syncfs`: writes and waits for everything of the filesystem `fd` is on, the writes other
/// processes started included.
pub(crate) fn sync_filesystem(fd: &File) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    return Ok(rustix::fs::syncfs(fd)?);
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = fd;
        Err(io::ErrorKind::Unsupported.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_lines_are_read_as_the_kernel_writes_them() {
        assert_eq!(
            parse_lock_line("1: FLOCK  ADVISORY  WRITE 1234 fd:00:5678 0 EOF"),
            Some((1234, (0xfd, 0, 5678)))
        );
        assert_eq!(
            parse_lock_line("12: POSIX  ADVISORY  READ 99 08:11:42 1 2"),
            Some((99, (8, 0x11, 42)))
        );
        assert_eq!(
            parse_lock_line("1: -> FLOCK  ADVISORY  WRITE 777 fd:00:5678 0 EOF"),
            None
        );
        assert_eq!(parse_lock_line(""), None);
        assert_eq!(
            parse_lock_line("1: FLOCK ADVISORY WRITE x fd:00:1 0 EOF"),
            None
        );
    }

    /// A real process holding a real `flock`, then really stopped: the wait ends at once with
    /// its pid, where a blocking `flock` would wait until SIGCONT.
    #[test]
    fn a_stopped_holder_does_not_bind_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lockme");
        std::fs::write(&path, b"").unwrap();
        // `-o`: the command (`sleep`) does not inherit the lock, so that it ends with `flock`.
        let mut holder = std::process::Command::new("flock")
            .arg("-o")
            .arg(&path)
            .args(["sleep", "60"])
            .spawn()
            .expect("flock(1) from util-linux");
        let file = File::open(&path).unwrap();
        // Wait for the holder to have it (a wait ends Busy while the holder runs and holds).
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            match lock_bounded(&file, Duration::from_millis(1), false).unwrap() {
                Bounded::Held => {
                    rustix::fs::flock(&file, FlockOperation::Unlock).unwrap();
                    assert!(Instant::now() < until, "flock(1) never took the lock");
                    std::thread::sleep(Duration::from_millis(10));
                }
                Bounded::Busy(h) => {
                    assert_eq!(h.len(), 1, "{h:?}");
                    assert_eq!(h[0].pid, holder.id());
                    assert!(!h[0].stopped);
                    break;
                }
            }
        }
        let pid = rustix::process::Pid::from_raw(holder.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
        while !is_stopped(holder.id()) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let began = Instant::now();
        match lock_bounded(&file, Duration::from_secs(600), true).unwrap() {
            Bounded::Held => panic!("the lock was had while its holder is stopped"),
            Bounded::Busy(h) => {
                assert_eq!(
                    h,
                    vec![Holder {
                        pid: holder.id(),
                        stopped: true,
                        gone: false,
                    }]
                );
                assert!(describe_holders(&h).contains("kill -CONT"));
            }
        }
        // Well before the 600 s limit: a liveness check, not a speed figure.
        assert!(began.elapsed() < Duration::from_secs(60));
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
        holder.wait().unwrap();
        assert!(matches!(
            lock_bounded(&file, Duration::from_secs(5), true).unwrap(),
            Bounded::Held
        ));
    }
}
