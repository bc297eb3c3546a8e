//! Helpers shared by the CLI test files (each uses a part of them).
#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use sigbox::{Durability, MailboxOptions, NewSignal, SignalType, Target};

/// A new mailbox at `root` holding `n` STEER signals for the Executor; their ids.
pub(crate) fn mailbox_with(root: &Path, n: usize) -> HashSet<String> {
    let mb = MailboxOptions::new()
        .durability(Durability::RelaxedNoFsync)
        .init(root)
        .unwrap();
    (0..n)
        .map(|i| {
            mb.send(
                NewSignal::new(SignalType::Steer)
                    .target(Target::Agent("Executor".into()))
                    .message(format!("m{i}")),
            )
            .unwrap()
        })
        .collect()
}

/// Sends `sig` to the process `pid`, by the system call: the `kill` program is not used,
/// because some versions misread a negative argument (procps-ng 4.0.2 turns `kill -TERM -14`
/// into `kill(-1, SIGTERM)`, every process the caller may signal).
pub(crate) fn signal(pid: u32, sig: rustix::process::Signal) -> rustix::io::Result<()> {
    rustix::process::kill_process(checked_pid(pid), sig)
}

/// Sends `sig` to the process group `pgid` (see [`signal`]).
pub(crate) fn signal_group(pgid: u32, sig: rustix::process::Signal) -> rustix::io::Result<()> {
    rustix::process::kill_process_group(checked_pid(pgid), sig)
}

/// Whether this process ignores `sig` (its `SigIgn` in `/proc/self/status`): a disposition a
/// child keeps across `exec`, as a job started in the background by a shell without job
/// control ignores SIGINT and SIGQUIT. A program that leaves a signal to its default action
/// then does not stop on it, and a test must not wait for that.
pub(crate) fn ignored_here(sig: rustix::process::Signal) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .unwrap_or(0);
    mask & (1 << (sig.as_raw() - 1)) != 0
}

/// Waits at most `limit` for `child` to end; kills it and fails, naming `what`, when it has
/// not: a test never hangs on a process that did not stop.
pub(crate) fn wait_at_most(
    child: &mut std::process::Child,
    limit: std::time::Duration,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether the process `pid` still exists.
pub(crate) fn alive(pid: u32) -> bool {
    rustix::process::test_kill_process(checked_pid(pid)).is_ok()
}

/// `pid` as a process id, refusing 0 and 1, which no test ever means: `kill(0)` is the caller's
/// own group, and a group id of 1 would be init's.
fn checked_pid(pid: u32) -> rustix::process::Pid {
    assert!(pid > 1, "refusing to signal process {pid}");
    rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap()
}

/// Whether `tool` is on the PATH.
pub(crate) fn have(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `cmd` with `args` to the end; its output.
pub(crate) fn run(cmd: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(cmd).args(args).output().unwrap()
}

/// Runs `cmd` with `args`, which must succeed.
pub(crate) fn ok(cmd: &str, args: &[&str]) {
    let out = run(cmd, args);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sigbox --root <root> <args>` to the end; its output. (`bin`: the test's
/// `env!("CARGO_BIN_EXE_sigbox")`.)
pub(crate) fn sigbox_at(bin: &str, root: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin)
        .arg("--root")
        .arg(root)
        .args(args)
        .env_remove("SIGBOX_ROOT")
        .output()
        .unwrap()
}

/// The ids a `--json poll` printed, in order, each with its redelivery count.
pub(crate) fn printed(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            (
                v["id"].as_str().unwrap().to_string(),
                v["redelivery"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The inotify watches a process holds (`inotify wd:` lines of its descriptors' fdinfo).
pub(crate) fn inotify_watches(pid: u32) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(e.path()) {
            n += text
                .lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count();
        }
    }
    n
}

/// Waits until `cond` holds, looking every 10 ms; fails, naming `what`, when it has not within
/// `limit` (a bound on a hang, not a speed: a loaded machine may take long to get there).
pub(crate) fn wait_until(what: &str, limit: std::time::Duration, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "never within {limit:?}: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether the process `pid` watches the directory `dir` (an inotify watch on its device and
/// inode, among the `inotify wd:` lines of its descriptors' fdinfo): a waiter that watches it
/// is armed, and what arrives there from then on wakes it. False for a process that has
/// ended, or that this user cannot look at.
pub(crate) fn watches(pid: u32, dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(dir) else {
        return false;
    };
    // fdinfo names the device as the kernel holds it: the major number above 20 bits.
    let dev = (u64::from(rustix::fs::major(m.dev())) << 20) | u64::from(rustix::fs::minor(m.dev()));
    let on = format!(" ino:{:x} sdev:{dev:x} ", m.ino());
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return false;
    };
    fds.flatten().any(|e| {
        std::fs::read_to_string(e.path()).is_ok_and(|text| {
            text.lines()
                .any(|l| l.starts_with("inotify wd:") && l.contains(&on))
        })
    })
}

/// How many processes watch the directory `dir` (see [`watches`]), among those this user can
/// look at: for processes a test does not start itself (a helper that waits for their output).
pub(crate) fn watchers(dir: &Path) -> usize {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| watches(pid, dir))
        .count()
}

/// Whether the process `pid` holds a lock on the file at `path` (its line in `/proc/locks`,
/// by device and inode; a waiter's line, marked `->`, is not a holder's).
pub(crate) fn holds_lock(pid: u32, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(path) else {
        return false;
    };
    let on = format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(m.dev()),
        rustix::fs::minor(m.dev()),
        m.ino()
    );
    let pid = pid.to_string();
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() > 5 && w[1] != "->" && w[4] == pid && w[5] == on
        })
}

/// What a child writes to one of its pipes, read aside as it comes (so that the child never
/// blocks on a full pipe), for a test to look at while the child runs.
pub(crate) struct Aside {
    text: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Aside {
    pub(crate) fn new(mut from: impl std::io::Read + Send + 'static) -> Aside {
        let text = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let reader = std::thread::spawn({
            let text = text.clone();
            move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    text.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            }
        });
        Aside { text, reader }
    }

    /// What was read so far.
    pub(crate) fn now(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
    }

    /// Everything, once the pipe is closed (the child has ended).
    pub(crate) fn finish(self) -> String {
        self.reader.join().unwrap();
        String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
    }
}

/// Every file under `dir`, at any depth (nothing when `dir` cannot be read).
pub(crate) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}
