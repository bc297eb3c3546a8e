//! Waiting for directories to change: [`DirWatch`], the filesystem events, and [`Waiter`], the
//! one sleep between two looks that every waiting command shares (the backstop, the poll
//! interval, a settling file's window and the caller's deadline).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};

/// How often an event-driven wait rescans anyway, in case an event was lost: a backstop like
/// Postfix's periodic pickup wake-up, cheap because a pass over an unchanged inbox costs one
/// directory listing.
const BACKSTOP: Duration = Duration::from_secs(30);

/// How often a wait without events looks again, unless its caller says otherwise.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// The shortest poll interval: a shorter one (`--poll 0`) would spin a core.
pub(crate) const MIN_POLL: Duration = Duration::from_millis(10);

/// Why a watch could not be set up, and what it means, as one line: which kernel limit was
/// reached (the inotify watches or instances, the open-file limit) and which setting raises
/// it, or the error itself; then that the wait falls back to looking every `every`.
pub fn no_events_reason(e: &notify::Error, every: Duration) -> String {
    let every = if every.subsec_millis() == 0 {
        format!("{} s", every.as_secs())
    } else {
        format!("{} ms", every.as_millis())
    };
    let why = match &e.kind {
        notify::ErrorKind::MaxFilesWatch => "the inotify watch limit is reached \
             (fs.inotify.max_user_watches, shared by every process of this user): raise it, \
             such as `sysctl fs.inotify.max_user_watches=524288`, or end the processes that \
             hold watches"
            .to_string(),
        notify::ErrorKind::Io(io) if io.raw_os_error() == Some(libc_emfile()) => "the inotify \
             instance limit (fs.inotify.max_user_instances, shared by every process of this \
             user) or this process's open-file limit (`ulimit -n`) is reached: raise it, such as \
             `sysctl fs.inotify.max_user_instances=1024`"
            .to_string(),
        notify::ErrorKind::Io(io) if io.raw_os_error() == Some(libc_enfile()) => {
            "the system's open-file limit is reached (fs.file-max): raise it".to_string()
        }
        _ => format!("no filesystem events here ({e})"),
    };
    format!("{why}; meanwhile looking every {every} instead of waiting on events")
}

/// `EMFILE`: too many open files in this process (or, from `inotify_init`, too many inotify
/// instances for this user).
fn libc_emfile() -> i32 {
    rustix::io::Errno::MFILE.raw_os_error()
}

/// `ENFILE`: too many open files in the system.
fn libc_enfile() -> i32 {
    rustix::io::Errno::NFILE.raw_os_error()
}

/// An event-driven wait on a few directories: wakes when an entry is created, changed, renamed
/// or removed in them (reads of the directories themselves never wake it), or when events
/// overflowed and a rescan is due. Shared by every waiting command.
pub struct DirWatch {
    _watcher: RecommendedWatcher,
    rx: Receiver<WakeUp>,
    /// Paths renamed into the watched directories (inotify's `IN_MOVED_TO`) since the last
    /// [`DirWatch::take_arrivals`].
    arrived: Mutex<Vec<PathBuf>>,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch").finish_non_exhaustive()
    }
}

impl DirWatch {
    /// Watches `dirs` (each recursively or not). Fails when the platform gives no events or a
    /// directory cannot be watched; callers then poll.
    pub fn new(dirs: &[(&Path, bool)]) -> notify::Result<DirWatch> {
        let (tx, rx) = mpsc::channel();
        let handler = move |res: notify::Result<notify::Event>| {
            if let Some(wake) = wake_of(&res) {
                let _ = tx.send(wake);
            }
        };
        let mut watcher = notify::recommended_watcher(handler)?;
        for (dir, recursive) in dirs {
            let mode = if *recursive {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            watcher.watch(dir, mode)?;
        }
        Ok(DirWatch {
            _watcher: watcher,
            rx,
            arrived: Mutex::new(Vec::new()),
        })
    }

    /// Forgets wake-ups that arrived so far: call right before looking at the directories, so
    /// that anything after the look wakes the next [`DirWatch::wait`]. The paths renamed in
    /// are kept for [`DirWatch::take_arrivals`].
    pub fn drain(&self) {
        while let Ok(w) = self.rx.try_recv() {
            self.keep(w);
        }
    }

    /// The paths renamed into the watched directories since the last call: files that
    /// arrived whole (spec/mailbox.md §5).
    pub fn take_arrivals(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.arrived.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn keep(&self, w: WakeUp) {
        if let WakeUp::Changed { arrived, .. } = w {
            self.keep_arrival(arrived);
        }
    }

    /// Keeps a path renamed in for [`DirWatch::take_arrivals`].
    fn keep_arrival(&self, arrived: Option<PathBuf>) {
        if let Some(p) = arrived {
            let mut a = self.arrived.lock().unwrap_or_else(|e| e.into_inner());
            // Bounded: a flood of renames falls back to the settle window for the rest.
            if a.len() < 4096 {
                a.push(p);
            }
        }
    }

    /// Sleeps until something changes or `timeout` passes. Returns false if the watcher died
    /// (then poll instead).
    pub fn wait(&self, timeout: Duration) -> bool {
        match self.rx.recv_timeout(timeout) {
            Ok(WakeUp::Rescan) => {
                tracing::debug!("event overflow: rescanning");
                true
            }
            Ok(w @ WakeUp::Changed { .. }) => {
                self.keep(w);
                true
            }
            Err(RecvTimeoutError::Timeout) => true,
            Err(RecvTimeoutError::Disconnected) => false,
        }
    }

    /// [`wait`](Self::wait), saying what woke it: one event's paths, so that a caller can
    /// tell the changes it has to look at from those it need not (its own staging files, a
    /// file it knows is no concern of its). Paths renamed in are kept for
    /// [`take_arrivals`](Self::take_arrivals) as by `wait`.
    pub fn wait_for(&self, timeout: Duration) -> Woke {
        match self.rx.recv_timeout(timeout) {
            Ok(WakeUp::Rescan) => {
                tracing::debug!("event overflow: rescanning");
                Woke::Unknown
            }
            Ok(WakeUp::Changed { paths, arrived }) => {
                let woke = if paths.is_empty() {
                    Woke::Unknown
                } else {
                    Woke::Changed(paths)
                };
                self.keep_arrival(arrived);
                woke
            }
            Err(RecvTimeoutError::Timeout) => Woke::Timeout,
            Err(RecvTimeoutError::Disconnected) => Woke::Died,
        }
    }
}

/// What woke a [`DirWatch::wait_for`].
#[derive(Debug, PartialEq, Eq)]
pub enum Woke {
    /// Entries at these paths were created, written, renamed (either side) or removed; or a
    /// watched directory itself changed (its own path).
    Changed(Vec<PathBuf>),
    /// Something changed that the event does not name, or events were lost (the kernel's
    /// queue overflowed): everything is to be looked at again.
    Unknown,
    /// Nothing happened within the timeout.
    Timeout,
    /// The watcher died: poll instead.
    Died,
}

/// Why a wait woke up.
#[derive(Debug, PartialEq, Eq)]
enum WakeUp {
    /// An entry changed: the paths the event names (none when it names none), and, for a file
    /// renamed into a watched directory, its new path.
    Changed {
        paths: Vec<PathBuf>,
        arrived: Option<PathBuf>,
    },
    Rescan,
}

/// What a filesystem event means to a waiter. `None`: nothing to look at.
fn wake_of(res: &notify::Result<notify::Event>) -> Option<WakeUp> {
    match res {
        // The kernel's queue overflowed (inotify IN_Q_OVERFLOW): events were lost, so the
        // directories must be listed again, which the next pass does in full.
        Ok(ev) if ev.need_rescan() => Some(WakeUp::Rescan),
        // Opening and reading a directory are events too (inotify's IN_OPEN, IN_CLOSE_NOWRITE):
        // the waiter's own listing must not wake it, or it would spin.
        Ok(ev) if matches!(ev.kind, notify::EventKind::Access(_)) => None,
        // A rename into the directory (`IN_MOVED_TO`; paired with its source, the new path
        // comes last): the file arrived whole.
        Ok(notify::Event {
            kind:
                notify::EventKind::Modify(notify::event::ModifyKind::Name(
                    notify::event::RenameMode::To | notify::event::RenameMode::Both,
                )),
            paths,
            ..
        }) if !paths.is_empty() => Some(WakeUp::Changed {
            paths: paths.clone(),
            arrived: Some(paths[paths.len() - 1].clone()),
        }),
        Ok(ev) => Some(WakeUp::Changed {
            paths: ev.paths.clone(),
            arrived: None,
        }),
        // A watcher error may mean lost events too: rescan.
        Err(_) => Some(WakeUp::Rescan),
    }
}

/// The sleep between two looks at some directories, for a loop that looks, decides, and sleeps
/// until something may have changed.
///
/// With a [`DirWatch`] it sleeps in the kernel until an event or the 30 s backstop; without one
/// it polls. Either way it wakes early for the instant a settling file may be looked at again,
/// and for the caller's deadline. It never spins while the watcher lives.
///
/// ```no_run
/// use std::time::{Duration, Instant};
/// use sigbox_client::Waiter;
///
/// let dir = std::path::Path::new("inbox");
/// let deadline = Instant::now() + Duration::from_secs(60);
/// let mut waiter = Waiter::new();
/// waiter.poll(Duration::from_millis(200));
/// let _ = waiter.watch(&[(dir, false)]); // no events here: it polls
/// loop {
///     waiter.drain();
///     if std::fs::read_dir(dir)?.next().is_some() {
///         break;
///     }
///     let now = Instant::now();
///     if now >= deadline {
///         break;
///     }
///     waiter.sleep(None, Some(deadline - now));
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Waiter {
    watch: Option<DirWatch>,
    poll: Duration,
    margin: Duration,
    backstop: Duration,
}

impl Default for Waiter {
    fn default() -> Waiter {
        Waiter::new()
    }
}

/// The instant `timeout` from now; `None` (no deadline) without a timeout. A timeout too far
/// away to represent (`--timeout 99999999999h`) saturates: the deadline is a hundred years
/// away, as good as for ever, and still a deadline (a wait with a timeout never becomes a
/// look without one).
pub fn deadline_after(timeout: Option<Duration>) -> Option<Instant> {
    const FAR: Duration = Duration::from_secs(100 * 365 * 86_400);
    timeout.map(|t| {
        let now = Instant::now();
        now.checked_add(t.min(FAR))
            .or_else(|| now.checked_add(Duration::from_secs(86_400)))
            .unwrap_or(now)
    })
}

impl Waiter {
    /// A waiter that polls until [`Waiter::watch`] succeeds.
    pub fn new() -> Waiter {
        Waiter {
            watch: None,
            poll: POLL,
            margin: Duration::from_millis(1),
            backstop: BACKSTOP,
        }
    }

    /// Sets how often it looks again without events. Default: 1 s; at least 10 ms (`MIN_POLL`).
    pub fn poll(&mut self, every: Duration) -> &mut Self {
        self.poll = every.max(MIN_POLL);
        self
    }

    /// Sets how long it sleeps at most while it waits on events (default 30 s): shorter where
    /// a change can come without an event in the watched directories (a root that is a
    /// symlink, pointed elsewhere). At least 10 ms (`MIN_POLL`).
    pub fn backstop(&mut self, every: Duration) -> &mut Self {
        self.backstop = every.max(MIN_POLL);
        self
    }

    /// Sets how long after a settling file's window ends it wakes, so that the next look finds
    /// the window over. Default: 1 ms.
    pub fn settle_margin(&mut self, margin: Duration) -> &mut Self {
        self.margin = margin;
        self
    }

    /// Starts waiting on events in `dirs` (each recursively or not), replacing any earlier
    /// watch. On failure it keeps what it had (polling, when it had nothing).
    pub fn watch(&mut self, dirs: &[(&Path, bool)]) -> notify::Result<()> {
        self.watch = Some(DirWatch::new(dirs)?);
        Ok(())
    }

    /// Stops waiting on events: it polls from now on.
    pub fn unwatch(&mut self) {
        self.watch = None;
    }

    /// True while it waits on events.
    pub fn is_watching(&self) -> bool {
        self.watch.is_some()
    }

    /// Forgets wake-ups that arrived so far: call right before looking, so that anything
    /// after the look ends the next [`Waiter::sleep`].
    pub fn drain(&self) {
        if let Some(w) = &self.watch {
            w.drain();
        }
    }

    /// The paths renamed into the watched directories since the last call (none while
    /// polling): see [`DirWatch::take_arrivals`].
    pub fn take_arrivals(&self) -> Vec<PathBuf> {
        self.watch
            .as_ref()
            .map(DirWatch::take_arrivals)
            .unwrap_or_default()
    }

    /// Sleeps for the backstop (with events) or the poll interval (without), but no later than
    /// `next_check` (plus the settle margin) and no longer than `left`, the time to the
    /// caller's deadline; with events it wakes at the first change.
    ///
    /// Returns false if the watcher died: it then returns at once until the caller calls
    /// [`Waiter::unwatch`] (or watches again), which is the caller's choice.
    pub fn sleep(&mut self, next_check: Option<SystemTime>, left: Option<Duration>) -> bool {
        let mut sleep = if self.watch.is_some() {
            self.backstop
        } else {
            self.poll
        };
        if let Some(at) = next_check {
            let until = at
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            sleep = sleep.min(until.saturating_add(self.margin));
        }
        if let Some(left) = left {
            sleep = sleep.min(left);
        }
        match &self.watch {
            Some(w) => w.wait(sleep),
            None => {
                std::thread::sleep(sleep);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{AccessKind, CreateKind, EventKind, Flag, ModifyKind, RenameMode};

    #[test]
    fn a_limit_reached_is_named_with_the_setting_that_raises_it() {
        let second = Duration::from_secs(1);
        let why = no_events_reason(
            &notify::Error::new(notify::ErrorKind::MaxFilesWatch),
            second,
        );
        assert!(why.contains("inotify watch limit is reached"), "{why}");
        assert!(why.contains("fs.inotify.max_user_watches"), "{why}");
        assert!(why.contains("looking every 1 s"), "{why}");
        assert!(!why.contains("no filesystem events"), "{why}");
        let emfile = std::io::Error::from_raw_os_error(libc_emfile());
        let why = no_events_reason(&notify::Error::io(emfile), Duration::from_millis(200));
        assert!(why.contains("fs.inotify.max_user_instances"), "{why}");
        assert!(why.contains("looking every 200 ms"), "{why}");
        let other = notify::Error::generic("not supported");
        let why = no_events_reason(&other, second);
        assert!(
            why.starts_with("no filesystem events here (not supported)"),
            "{why}"
        );
    }

    #[test]
    fn overflow_and_errors_rescan_reads_never_wake() {
        let ev = |k| Ok(notify::Event::new(k));
        assert_eq!(
            wake_of(&ev(EventKind::Any).map(|e| e.set_flag(Flag::Rescan))),
            Some(WakeUp::Rescan)
        );
        assert_eq!(
            wake_of(&Err(notify::Error::generic("queue overflow"))),
            Some(WakeUp::Rescan)
        );
        assert_eq!(wake_of(&ev(EventKind::Access(AccessKind::Any))), None);
        let changed = |paths: &[&str], arrived: Option<&str>| {
            Some(WakeUp::Changed {
                paths: paths.iter().map(PathBuf::from).collect(),
                arrived: arrived.map(PathBuf::from),
            })
        };
        assert_eq!(
            wake_of(&ev(EventKind::Create(CreateKind::File))),
            changed(&[], None)
        );
        assert_eq!(
            wake_of(&Ok(notify::Event::new(EventKind::Create(CreateKind::File))
                .add_path("/r/inputs/b".into()))),
            changed(&["/r/inputs/b"], None),
            "a file created names its path"
        );
        assert_eq!(
            wake_of(&ev(EventKind::Modify(ModifyKind::Name(RenameMode::To)))),
            changed(&[], None),
            "a rename without its path"
        );
        let moved = |mode, paths: &[&str]| {
            let mut e = notify::Event::new(EventKind::Modify(ModifyKind::Name(mode)));
            for p in paths {
                e = e.add_path(PathBuf::from(p));
            }
            wake_of(&Ok(e))
        };
        assert_eq!(
            moved(RenameMode::To, &["/r/inputs/a.yaml"]),
            changed(&["/r/inputs/a.yaml"], Some("/r/inputs/a.yaml"))
        );
        assert_eq!(
            moved(RenameMode::Both, &["/r/tmp/x", "/r/inputs/a.yaml"]),
            changed(&["/r/tmp/x", "/r/inputs/a.yaml"], Some("/r/inputs/a.yaml"))
        );
        assert_eq!(
            moved(RenameMode::From, &["/r/inputs/a.yaml"]),
            changed(&["/r/inputs/a.yaml"], None),
            "a rename out is no arrival"
        );
    }
}
