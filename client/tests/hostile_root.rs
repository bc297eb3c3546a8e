//! Root safety (spec/guarantees.md, "Root safety"): at every path of the layout, a symlink to a
//! victim directory, a FIFO, a socket or a regular file is planted in place of what sigbox
//! expects, and every command runs against it under a watchdog. The victim stays byte for byte
//! the same, nothing hangs, no pending signal is lost, and `doctor` (or the command's own
//! error) names the path.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

/// How long one command may take before the test calls it a hang.
const WATCHDOG: Duration = Duration::from_secs(20);

/// Runs `sigbox --root <root> <args>` with stdin closed; kills it and fails at the watchdog.
fn sigbox(root: &Path, args: &[&str], what: &str) -> Output {
    let mut child = Command::new(BIN)
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > WATCHDOG {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: `sigbox {}` hung ({:?}); stderr: {}",
                args.join(" "),
                WATCHDOG,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every entry below `dir` (not following symlinks) with its kind and bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (String, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let ft = e.file_type().unwrap();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if ft.is_dir() {
                out.insert(rel, ("dir".into(), Vec::new()));
                stack.push(p);
            } else if ft.is_file() {
                out.insert(rel, ("file".into(), std::fs::read(&p).unwrap()));
            } else {
                out.insert(rel, (format!("{ft:?}"), Vec::new()));
            }
        }
    }
    out
}

/// A victim directory that looks like a mailbox directory: signal files, a subdirectory, an
/// ack-like file, so that a followed link would find something to claim, move or delete.
fn victim(dir: &Path) {
    std::fs::create_dir_all(dir.join("Executor/0")).unwrap();
    let body = r#"{"type":"STEER","target":"Executor","message":"victim"}"#;
    for name in [
        "signal.20260101T000000.000001Z.00000000000000000000000000000001.STEER.Executor.json",
        "victim.json",
        "Executor/0/signal.20260101T000000.000002Z.00000000000000000000000000000002.STEER.Executor.json",
    ] {
        std::fs::write(dir.join(name), body).unwrap();
    }
    std::fs::write(dir.join("Executor.lock"), b"").unwrap();
    std::fs::write(dir.join(".1.0123456789abcdef.send.tmp"), b"old").unwrap();
}

/// What is planted in place of a layout path.
#[derive(Clone, Copy, Debug)]
enum Plant {
    Symlink,
    Fifo,
    Socket,
    File,
}

fn plant(path: &Path, kind: Plant, victim: &Path) {
    if path.is_dir() && !path.is_symlink() {
        std::fs::remove_dir_all(path).unwrap();
    } else {
        let _ = std::fs::remove_file(path);
    }
    match kind {
        Plant::Symlink => std::os::unix::fs::symlink(victim, path).unwrap(),
        Plant::Fifo => rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap(),
        Plant::Socket => {
            // Bound and left: the socket file stays after the listener is dropped. Bound
            // through its directory's descriptor: a socket's address holds 108 bytes, which a
            // temporary directory's path can outgrow.
            let dir = std::fs::File::open(path.parent().unwrap()).unwrap();
            let name = path.file_name().unwrap().to_str().unwrap();
            let short = format!(
                "/proc/self/fd/{}/{name}",
                std::os::fd::AsRawFd::as_raw_fd(&dir)
            );
            let _ = std::os::unix::net::UnixListener::bind(short).unwrap();
        }
        Plant::File => std::fs::write(path, b"not a directory").unwrap(),
    }
}

/// A mailbox with one signal of each kind in flight somewhere: pending for the Executor, one
/// buffered for the Planner, a broadcast with an ack, one processed, one claimed in a slot
/// whose consumer died.
fn mailbox(root: &Path) -> Vec<String> {
    let ok = |args: &[&str]| {
        let out = sigbox(root, args, "setup");
        assert!(
            out.status.success(),
            "setup {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    ok(&["init"]);
    ok(&["send", "steer", "first", "--target", "Executor"]);
    ok(&["poll", "--as", "Executor"]);
    ok(&["send", "info", "for the planner", "--target", "Planner"]);
    ok(&["poll", "--as", "Orchestrator"]);
    ok(&["send", "info", "everyone"]);
    ok(&["poll", "--as", "Executor"]);
    // A claim left in a slot, as a consumer killed before its acknowledgement leaves it.
    let slot = root.join("claimed/Executor/0");
    std::fs::create_dir_all(&slot).unwrap();
    let left =
        "signal.20260101T000000.000009Z.00000000000000000000000000000009.STEER.Executor.json";
    std::fs::write(
        slot.join(left),
        r#"{"type":"STEER","target":"Executor","message":"in flight"}"#,
    )
    .unwrap();
    let pending = vec![
        ok(&["send", "steer", "pending a", "--target", "Executor"]),
        ok(&["send", "pause", "pending b", "--target", "Executor"]),
    ];
    pending
}

/// Every path of the layout a hostile member can replace, relative to the root.
fn layout_paths(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [
        "inputs",
        "claimed",
        "claimed/Executor",
        "claimed/Executor/0",
        "processed",
        "acks",
        "buffered",
        "buffered/Planner",
        "rejected",
        "tmp",
        "agents",
        "agents/Executor.lock",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    for e in std::fs::read_dir(root.join("acks")).unwrap() {
        out.push(Path::new("acks").join(e.unwrap().file_name()));
    }
    out
}

/// The commands a user runs, each on a fresh copy of the hostile state.
const COMMANDS: &[&[&str]] = &[
    &["poll", "--as", "Executor"],
    &["poll", "--as", "Orchestrator"],
    &["poll", "--as", "Planner"],
    &["wait", "--as", "Executor", "--timeout", "300ms"],
    &["send", "steer", "new", "--target", "Executor"],
    &["send", "info", "new broadcast"],
    &["ls"],
    &["ls", "--all"],
    &["log"],
    &["finish"],
    &["gc"],
    &["--json", "doctor"],
    &["init"],
];

fn copy_tree(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .args(["-a", from.to_str().unwrap(), to.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn nothing_planted_in_the_layout_is_followed_blocks_or_loses_a_signal() {
    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("template");
    mailbox(&template);
    let paths = layout_paths(&template);
    let mut runs = 0;
    for rel in &paths {
        // A presence lock is a plain file: a file there is what belongs.
        let is_lock = rel.extension().is_some_and(|e| e == "lock");
        for kind in [Plant::Symlink, Plant::Fifo, Plant::Socket, Plant::File] {
            if is_lock && matches!(kind, Plant::File) {
                continue;
            }
            let case = tmp.path().join("case");
            let _ = std::fs::remove_dir_all(&case);
            std::fs::create_dir_all(&case).unwrap();
            let root = case.join("root");
            copy_tree(&template, &root);
            let victim_dir = case.join("victim");
            victim(&victim_dir);
            let before = snapshot(&victim_dir);
            let target = root.join(rel);
            // What was in the planted place, kept aside: it must come back whole.
            let kept = case.join("kept");
            let pending_before = snapshot_dir(&root.join("inputs"));
            if target.exists() {
                std::fs::rename(&target, &kept).unwrap();
            }
            plant(&target, kind, &victim_dir);
            let what = format!("{} as a {kind:?}", rel.display());
            for args in COMMANDS {
                let out = sigbox(&root, args, &what);
                // No panic, whatever the outcome.
                assert_ne!(
                    out.status.code(),
                    Some(101),
                    "{what}: `sigbox {}` panicked: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
                runs += 1;
                assert_eq!(
                    snapshot(&victim_dir),
                    before,
                    "{what}: `sigbox {}` changed the victim",
                    args.join(" ")
                );
            }
            // doctor names the planted path.
            let doctor = sigbox(&root, &["doctor"], &what);
            let said = String::from_utf8_lossy(&doctor.stdout).to_string()
                + &String::from_utf8_lossy(&doctor.stderr);
            assert!(
                said.contains(&target.display().to_string()),
                "{what}: doctor did not name {}: {said}",
                target.display()
            );
            assert!(!doctor.status.success(), "{what}: doctor said healthy");
            // Nothing pending was lost: each signal pending before is still somewhere in the
            // root (pending, buffered, in flight or processed; never followed out of it).
            // (When inputs/ itself was the planted path, its signals were kept aside.)
            if rel != Path::new("inputs") {
                let everywhere = snapshot(&root);
                for name in pending_before.keys() {
                    assert!(
                        everywhere
                            .keys()
                            .any(|p| p.file_name() == Some(name.as_os_str())),
                        "{what}: pending {} lost",
                        name.display()
                    );
                }
            } else {
                assert_eq!(
                    snapshot_dir(&kept).len(),
                    pending_before.len(),
                    "{what}: the kept inputs/ changed"
                );
            }
        }
    }
    eprintln!(
        "{} layout paths x 4 plants (3 for a lock): {runs} commands, the victim unchanged every time, no hang, \
         no panic, doctor named every plant",
        paths.len()
    );
}

/// The regular files directly in `dir` (empty when it is not a readable directory).
fn snapshot_dir(dir: &Path) -> BTreeMap<PathBuf, ()> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    rd.filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| (PathBuf::from(e.file_name()), ()))
        .collect()
}

#[test]
fn goblin_and_mux_directories_planted_as_links_are_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let victim_dir = tmp.path().join("victim");
    victim(&victim_dir);
    let before = snapshot(&victim_dir);
    // Goblin: `.goblin/.consumed` and `.goblin/.stale` as links to the victim.
    for sub in [".goblin/.consumed", ".goblin/.stale", ".goblin"] {
        let wt = tmp.path().join(format!("wt-{}", sub.replace('/', "_")));
        std::fs::create_dir_all(wt.join(".goblin")).unwrap();
        let out = sigbox(
            &wt,
            &[
                "goblin",
                "signal",
                "review-approved",
                "--worktree",
                wt.to_str().unwrap(),
            ],
            sub,
        );
        let _ = out;
        let target = wt.join(sub);
        if target.is_dir() && !target.is_symlink() {
            std::fs::remove_dir_all(&target).unwrap();
        }
        std::os::unix::fs::symlink(&victim_dir, &target).unwrap();
        for args in [
            vec!["goblin", "clean", "--worktree", wt.to_str().unwrap()],
            vec!["goblin", "status", "--worktree", wt.to_str().unwrap()],
            vec![
                "goblin",
                "watch",
                "--worktree",
                wt.to_str().unwrap(),
                "--once",
                "--timeout",
                "300ms",
            ],
            vec![
                "goblin",
                "signal",
                "review-approved",
                "--worktree",
                wt.to_str().unwrap(),
            ],
        ] {
            let out = sigbox(&wt, &args, sub);
            assert_ne!(out.status.code(), Some(101), "{sub}: {args:?} panicked");
            assert_eq!(
                snapshot(&victim_dir),
                before,
                "{sub}: {args:?} changed the victim"
            );
        }
    }
    // mux: the session's `.signals` as a link to the victim.
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join("session")).unwrap();
    std::os::unix::fs::symlink(&victim_dir, project.join("session/.signals")).unwrap();
    let proj = project.to_str().unwrap();
    // Each leaves the victim alone; check and verify refuse the planted `.signals` by name
    // instead of reading it as empty.
    let verify = vec!["mux", "verify", "session", "--project-root", proj];
    let check = vec![
        "mux",
        "check",
        "session",
        "--expected",
        "1",
        "--project-root",
        proj,
    ];
    let mut check_waiting = check.clone();
    check_waiting.extend(["--timeout", "300ms"]);
    let signal = vec![
        "mux",
        "signal",
        "session/step-1",
        "--status",
        "success",
        "--project-root",
        proj,
    ];
    for (args, refused) in [
        (signal, false),
        (verify, true),
        (check, true),
        (check_waiting, true),
    ] {
        let out = sigbox(&project, &args, "mux");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(101), "mux: {args:?} panicked");
        if refused {
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("session/.signals"), "{args:?}: {err}");
        }
        assert_eq!(
            snapshot(&victim_dir),
            before,
            "mux: {args:?} changed the victim"
        );
    }
}

/// The Goblin watch lock planted as a symlink to a victim's file, a FIFO or a directory:
/// `watch` and `clean` open it without following the link or blocking, refuse by name, and
/// leave the victim and the signal alone.
#[test]
fn a_planted_goblin_watch_lock_is_refused_by_name_and_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let victim_dir = tmp.path().join("victim");
    victim(&victim_dir);
    let before = snapshot(&victim_dir);
    for (plant, why) in [
        ("symlink", "a symlink"),
        ("fifo", "not a regular file"),
        ("dir", "directory"),
    ] {
        let wt = tmp.path().join(format!("wt-{plant}"));
        std::fs::create_dir_all(wt.join(".goblin")).unwrap();
        std::fs::write(wt.join(".goblin/build-complete"), b"{}").unwrap();
        let lock = wt.join(".goblin/.sigbox-watch.lock");
        match plant {
            "symlink" => std::os::unix::fs::symlink(victim_dir.join("victim.json"), &lock).unwrap(),
            "fifo" => rustix::fs::mknodat(
                rustix::fs::CWD,
                &lock,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o644),
                0,
            )
            .unwrap(),
            _ => std::fs::create_dir(&lock).unwrap(),
        }
        let w = wt.to_str().unwrap();
        for args in [
            vec![
                "goblin",
                "watch",
                "--worktree",
                w,
                "--stage",
                "BUILD",
                "--once",
                "--timeout",
                "300ms",
            ],
            vec!["goblin", "clean", "--worktree", w],
        ] {
            let out = sigbox(&wt, &args, plant);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{plant}: {args:?}: {err}");
            assert!(
                err.contains(".goblin/.sigbox-watch.lock") && err.contains(why),
                "{plant}: {args:?}: {err}"
            );
            assert!(out.stdout.is_empty(), "{plant}: {args:?}: acted");
            assert!(
                wt.join(".goblin/build-complete").exists(),
                "{plant}: {args:?}"
            );
            assert_eq!(
                snapshot(&victim_dir),
                before,
                "{plant}: {args:?} changed the victim"
            );
        }
    }
}

#[test]
fn a_planted_fifo_socket_or_file_at_a_layout_path_is_named_by_the_warning() {
    for (kind, what) in [
        (Plant::Symlink, "is a symlink"),
        (Plant::File, "is a regular file"),
        (Plant::Fifo, "is a FIFO, socket or device"),
        (Plant::Socket, "is a FIFO, socket or device"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        mailbox(&root);
        let victim_dir = tmp.path().join("victim");
        victim(&victim_dir);
        let target = root.join("buffered/Planner");
        plant(&target, kind, &victim_dir);
        // The agent's own buffer refused alone (spec/mailbox.md §8): the pass goes on, and
        // says why in one line.
        let out = sigbox(&root, &["poll", "--as", "Planner"], "buffered/Planner");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{kind:?}: {err}");
        assert!(
            err.contains(&target.display().to_string()) && err.contains(what),
            "{kind:?}: the error does not name the path and what is there: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{kind:?}: one line: {err}");
    }
}

#[test]
fn names_that_are_not_utf8_in_every_directory_never_panic_or_stop_a_command() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let pending = mailbox(&root);
    let bad = std::ffi::OsStr::from_bytes(b"sig\xff\xfenal.json");
    let bad_dir = std::ffi::OsStr::from_bytes(b"Ag\xffent");
    let body = r#"{"type":"INFO","target":"Executor","message":"x"}"#;
    let mut dirs: Vec<PathBuf> = layout_paths(&root)
        .into_iter()
        .map(|rel| root.join(rel))
        .filter(|p| p.is_dir())
        .collect();
    dirs.push(root.clone());
    for d in &dirs {
        std::fs::write(d.join(bad), body).unwrap();
        std::fs::create_dir_all(d.join(bad_dir)).unwrap();
        std::fs::write(d.join(bad_dir).join(bad), body).unwrap();
    }
    for args in COMMANDS {
        let out = sigbox(&root, args, "non-UTF-8 names");
        assert_ne!(
            out.status.code(),
            Some(101),
            "`sigbox {}` panicked: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        if args.contains(&"--json") {
            for line in String::from_utf8(out.stdout)
                .expect("JSON output is UTF-8")
                .lines()
            {
                serde_json::from_str::<serde_json::Value>(line)
                    .unwrap_or_else(|e| panic!("`sigbox {}`: {e}: {line}", args.join(" ")));
            }
        }
    }
    // The signals that were pending were delivered by the polls above, or are still pending.
    let everywhere = snapshot(&root);
    for id in &pending {
        assert!(
            everywhere
                .keys()
                .any(|p| p.to_string_lossy().contains(id.as_str())),
            "{id} lost"
        );
    }
}

#[test]
fn waits_never_watch_through_a_planted_link() {
    let tmp = tempfile::tempdir().unwrap();
    let victim_dir = tmp.path().join("victim");
    for i in 0..200 {
        std::fs::create_dir_all(victim_dir.join(format!("d{i}"))).unwrap();
    }
    // A mailbox whose buffered/ holds a link to a tree of 200 directories.
    let root = tmp.path().join("root");
    mailbox(&root);
    // The Reviewer takes the broadcast now, so that its wait below blocks.
    assert!(
        sigbox(&root, &["poll", "--as", "Reviewer"], "setup")
            .status
            .success()
    );
    std::os::unix::fs::symlink(&victim_dir, root.join("buffered/Zed")).unwrap();
    // A mux session whose .signals/sub is such a link.
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join("s/.signals")).unwrap();
    std::os::unix::fs::symlink(&victim_dir, project.join("s/.signals/sub")).unwrap();
    let proj = project.to_str().unwrap();
    let runs: [(&Path, Vec<&str>); 2] = [
        (&root, vec!["wait", "--as", "Reviewer", "--timeout", "30s"]),
        (
            &project,
            vec![
                "mux",
                "check",
                "s",
                "--expected",
                "1",
                "--project-root",
                proj,
                "--timeout",
                "30s",
            ],
        ),
    ];
    for (dir, args) in runs {
        let mut child = Command::new(BIN)
            .arg("--root")
            .arg(dir)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Once it watches at all (it arms before its first pass), count what it watches.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut watches = common::inotify_watches(child.id());
        while watches == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            watches = common::inotify_watches(child.id());
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.is_empty(), "{args:?}: {err}");
        // Its own few directories, never the 200 behind the link.
        assert!(watches < 10, "{args:?} holds {watches} inotify watches");
        assert!(
            watches > 0,
            "{args:?} watches nothing: the test proves nothing"
        );
    }
}

/// A planted link at one broadcast's ack directory, or at one agent's buffer, refuses that one
/// broadcast or that one buffer (named on stderr and by `doctor`): every other signal is
/// delivered, ABORT included, and every poll exits 0.
#[test]
fn one_planted_link_refuses_one_broadcast_or_one_buffer_not_the_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let victim_dir = tmp.path().join("victim");
    victim(&victim_dir);
    let before = snapshot(&victim_dir);
    let ok = |args: &[&str]| -> (String, String) {
        let out = sigbox(&root, args, "one planted link");
        assert!(
            out.status.success(),
            "`sigbox {}` exit {:?}: {}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    ok(&["init"]);
    let broadcast = ok(&["send", "info", "everyone"]).0.trim().to_string();
    ok(&["send", "steer", "steer one", "--target", "Executor"]);
    ok(&["send", "abort", "stop now", "--target", "Executor"]);
    let acks = root.join("acks").join(&broadcast);
    std::os::unix::fs::symlink(&victim_dir, &acks).unwrap();
    let (got, said) = ok(&["poll", "--as", "Executor"]);
    assert!(
        got.contains("steer one") && got.contains("stop now"),
        "{got}"
    );
    assert!(!got.contains("everyone"), "{got}");
    assert!(said.contains(&acks.display().to_string()), "stderr: {said}");
    let (got, said) = ok(&["poll", "--as", "Planner"]);
    assert_eq!(got, "");
    assert!(said.contains(&acks.display().to_string()), "stderr: {said}");
    // One buffer planted as a link: the orchestrator's pass goes on, the absent agent's
    // signal stays pending, and that agent's own pass takes it from inputs/.
    ok(&["send", "steer", "for the reviewer", "--target", "Reviewer"]);
    ok(&[
        "send",
        "steer",
        "for the orchestrator",
        "--target",
        "Orchestrator",
    ]);
    let buffer = root.join("buffered/Reviewer");
    std::fs::create_dir_all(root.join("buffered")).unwrap();
    std::os::unix::fs::symlink(&victim_dir, &buffer).unwrap();
    let (got, said) = ok(&["poll", "--as", "Orchestrator"]);
    assert!(got.contains("for the orchestrator"), "{got}");
    assert!(
        said.contains(&buffer.display().to_string()),
        "stderr: {said}"
    );
    let (got, said) = ok(&["poll", "--as", "Reviewer"]);
    assert!(got.contains("for the reviewer"), "{got}");
    assert!(
        said.contains(&buffer.display().to_string()),
        "stderr: {said}"
    );
    // doctor names both; nothing outside the root changed.
    let doctor = sigbox(&root, &["doctor"], "doctor");
    let told = String::from_utf8_lossy(&doctor.stdout).to_string()
        + &String::from_utf8_lossy(&doctor.stderr);
    assert!(!doctor.status.success());
    for p in [&acks, &buffer] {
        assert!(told.contains(&p.display().to_string()), "{told}");
    }
    assert_eq!(snapshot(&victim_dir), before);
}
