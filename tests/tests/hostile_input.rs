//! Guards against bad input in the drop zone: every bad file gets a clear reason in
//! quarantine, nothing is deleted or followed, nothing hangs, and every good signal is still
//! delivered.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sigbox::{MailboxOptions, NewSignal, SignalType, Target};

fn send_exec(mb: &sigbox::Mailbox, msg: &str) -> String {
    mb.send(
        NewSignal::new(SignalType::Steer)
            .target(Target::Agent("Executor".into()))
            .message(msg),
    )
    .unwrap()
}

#[test]
fn every_kind_of_bad_file_is_quarantined_with_its_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let mut opts = MailboxOptions::new();
    opts.settle(Duration::ZERO);
    let mb = opts.init(&root).unwrap();
    let inputs = root.join("inputs");
    let first = send_exec(&mb, "before the bad files");

    let w = |name: &str, body: &[u8]| std::fs::write(inputs.join(name), body).unwrap();
    w("malformed.json", b"{\"type\": \"STEER\", \"target\": ");
    w("malformed.yaml", b"type: STEER\ntarget: [Executor\n");
    w("empty.yaml", b"");
    w("huge.json", &vec![b' '; 10 * 1024 * 1024]);
    w(
        "escape.yaml",
        b"type: STEER\ntarget: ../x\nmessage: climb out\n",
    );
    w(
        "nul.json",
        b"{\"type\": \"STEER\", \"target\": \"Exec\\u0000utor\"}",
    );
    // A valid signal outside the root, reachable only through a symlink or a hard link.
    let outside = tmp.path().join("outside.yaml");
    std::fs::write(
        &outside,
        b"type: STEER\ntarget: Executor\nmessage: secret\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, inputs.join("link.yaml")).unwrap();
    std::fs::hard_link(&outside, inputs.join("hardlink.yaml")).unwrap();
    std::fs::create_dir(inputs.join("adir.yaml")).unwrap();
    std::fs::write(inputs.join("adir.yaml/inner.yaml"), b"type: INFO\n").unwrap();
    let fifo = inputs.join("pipe.yaml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let bad_name = OsStr::from_bytes(b"bad\xffname.yaml");
    std::fs::write(inputs.join(bad_name), b"type: STEER\ntarget: Executor\n").unwrap();
    let last = send_exec(&mb, "after the bad files");

    // Run the pass on a thread so that a hang (say, opening the FIFO) fails the test instead of
    // blocking it forever.
    let (tx, rx) = std::sync::mpsc::channel();
    let root2 = root.clone();
    std::thread::spawn(move || {
        let mut o = MailboxOptions::new();
        o.settle(Duration::ZERO);
        let mb = o.open(&root2).unwrap();
        tx.send(mb.pass("Executor", None).unwrap()).unwrap();
    });
    let pass = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the pass hung on hostile input");

    let ids: Vec<&str> = pass.delivered.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids,
        [first.as_str(), last.as_str()],
        "good signals delivered, nothing else"
    );

    // The hard link is given the time to lose its other name (spec/mailbox.md §3.3): not
    // read, not refused yet, and the pass says when to look again; then refused.
    assert!(sigbox_tests::names(&inputs).contains("hardlink.yaml"));
    assert!(pass.next_check.is_some());
    std::thread::sleep(Duration::from_millis(2100));
    let later = mb.pass("Executor", None).unwrap();
    // (The first pass's handle is gone without acknowledging: its two come again, marked.)
    assert!(
        later
            .delivered
            .iter()
            .all(|s| s.message.as_deref() != Some("secret")),
        "{:?}",
        later.delivered
    );
    let mut rejected = pass.rejected;
    rejected.extend(later.rejected);

    let expect = [
        ("malformed.json", "invalid JSON"),
        ("malformed.yaml", "invalid YAML"),
        ("empty.yaml", "empty file"),
        ("huge.json", "over the 1048576 byte cap"),
        ("escape.yaml", "invalid target \"../x\""),
        ("nul.json", "invalid target"),
        ("link.yaml", "symlink"),
        ("hardlink.yaml", "hard links"),
        ("adir.yaml", "a directory"),
        ("pipe.yaml", "FIFO"),
    ];
    for (name, needle) in expect {
        let r = rejected
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("{name} not rejected: {rejected:?}"));
        assert!(r.reason.contains(needle), "{name}: {}", r.reason);
        assert_eq!(sigbox_tests::reason(&root, name), r.reason);
    }
    let non_utf8 = rejected
        .iter()
        .find(|r| r.reason.contains("not UTF-8"))
        .expect("non-UTF-8 name rejected");
    assert!(non_utf8.reason.contains("ff"), "{}", non_utf8.reason);
    assert_eq!(rejected.len(), expect.len() + 1);

    // Nothing deleted, nothing altered, nothing followed.
    let rej = root.join("rejected");
    assert_eq!(
        std::fs::metadata(rej.join("huge.json")).unwrap().len(),
        10 * 1024 * 1024
    );
    assert_eq!(std::fs::read_link(rej.join("link.yaml")).unwrap(), outside);
    assert!(
        std::fs::symlink_metadata(rej.join("pipe.yaml"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(rej.join("adir.yaml/inner.yaml").exists());
    assert!(rej.join(bad_name).exists());
    assert_eq!(std::fs::read(rej.join("empty.yaml")).unwrap(), b"");
    assert_eq!(
        std::fs::read(&outside).unwrap(),
        b"type: STEER\ntarget: Executor\nmessage: secret\n"
    );
    assert!(sigbox_tests::names(&inputs).is_empty());
    let listed = mb.rejected().unwrap();
    assert_eq!(listed.len(), expect.len() + 1);
    assert!(listed.iter().all(|r| r.reason != "(no reason recorded)"));
}

#[test]
fn a_file_written_in_two_steps_is_delivered_once_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    // The default settle window (2 s): a hand-written file is trusted once unchanged that long.
    let mb = sigbox::Mailbox::init(&root).unwrap();
    let path = root.join("inputs/signal.261122-101500Z.yaml");
    // A person writes half a signal; alone it would even parse (as a no-target STEER).
    std::fs::write(&path, "type: STEER\n").unwrap();
    for agent in ["Executor", "Orchestrator"] {
        let p = mb.pass(agent, None).unwrap();
        assert!(
            p.delivered.is_empty() && p.rejected.is_empty(),
            "{agent}: delivered early"
        );
        assert!(p.next_check.is_some(), "the pass says when to look again");
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    use std::io::Write;
    f.write_all(b"target: Executor\nmessage: finish the parser first\n")
        .unwrap();
    drop(f);
    let p = mb.pass("Orchestrator", None).unwrap();
    assert!(p.delivered.is_empty() && p.buffered.is_empty());
    let wait = p
        .next_check
        .unwrap()
        .duration_since(std::time::SystemTime::now());
    std::thread::sleep(wait.unwrap_or_default() + Duration::from_millis(50));
    let p = mb.pass("Executor", None).unwrap();
    assert_eq!(p.delivered.len(), 1);
    assert_eq!(
        p.delivered[0].message.as_deref(),
        Some("finish the parser first")
    );
    assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
}

#[test]
fn invalid_sender_input_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let mb = sigbox::Mailbox::init(tmp.path()).unwrap();
    for bad in ["../x", "a/b", "", "ALL", "x\0y", "1abc"] {
        let err = mb
            .send(NewSignal::new(SignalType::Info).target(Target::Agent(bad.into())))
            .unwrap_err();
        assert_eq!(err.kind(), sigbox::ErrorKind::InvalidName, "{bad:?}");
        let err = mb.pass(bad, None).unwrap_err();
        assert!(err.to_string().contains("invalid agent name"), "{err}");
    }
    assert!(sigbox_tests::names(&tmp.path().join("inputs")).is_empty());
    assert!(sigbox_tests::names(&tmp.path().join("tmp")).is_empty());
}

#[test]
fn a_sender_not_on_one_line_is_refused_by_send_and_nothing_is_written() {
    // The rule is the library's: every caller of `send` (the CLI, MCP, Python, hooks) gets it.
    let tmp = tempfile::tempdir().unwrap();
    let mb = sigbox::Mailbox::init(tmp.path()).unwrap();
    for bad in [
        "",
        "   ",
        "two\nlines",
        "cr\r",
        "tab\there",
        "esc\u{1b}[2J",
        "nul\0",
        "\u{85}",
    ] {
        let err = mb
            .send(NewSignal::new(SignalType::Info).from(bad))
            .unwrap_err();
        assert_eq!(err.kind(), sigbox::ErrorKind::InvalidName, "{bad:?}");
        assert!(err.to_string().contains("sender"), "{err}");
    }
    assert!(sigbox_tests::names(&tmp.path().join("inputs")).is_empty());
    // Any other text names a sender.
    for good in ["alice", "Ada Lovelace", "d\u{e9}j\u{e0} vu", "../x"] {
        mb.send(NewSignal::new(SignalType::Info).from(good))
            .unwrap();
    }
    assert_eq!(sigbox_tests::names(&tmp.path().join("inputs")).len(), 4);
}

#[test]
fn opening_a_missing_root_names_it() {
    let err = sigbox::Mailbox::open(Path::new("/nonexistent/sigbox-root")).unwrap_err();
    assert_eq!(err.kind(), sigbox::ErrorKind::NotInitialized);
    assert!(
        err.to_string().contains("/nonexistent/sigbox-root/inputs"),
        "{err}"
    );
}

fn settled_mailbox(root: &Path) -> sigbox::Mailbox {
    let mut o = MailboxOptions::new();
    o.settle(Duration::ZERO);
    o.init(root).unwrap()
}

/// Runs a pass on a thread, failing instead of hanging.
fn pass_within(root: &Path, agent: &'static str) -> sigbox::Pass {
    let (tx, rx) = std::sync::mpsc::channel();
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        let mb = settled_mailbox(&root);
        tx.send(mb.pass(agent, None).unwrap()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the pass hung")
}

#[test]
fn yaml_alias_bombs_and_deep_nesting_are_refused_quickly() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let mb = settled_mailbox(&root);
    // A billion laughs: each level doubles nine times.
    let mut bomb = String::from(
        "type: STEER\ntarget: Executor\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        bomb.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            [prev.as_str(); 9].join(", ")
        ));
    }
    std::fs::write(root.join("inputs/bomb.yaml"), &bomb).unwrap();
    let deep = format!(
        "type: STEER\nx: {}1{}\n",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    std::fs::write(root.join("inputs/deep.yaml"), deep).unwrap();
    let deep_json = format!(
        "{{\"type\": \"STEER\", \"x\": {}1{}}}",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    std::fs::write(root.join("inputs/deep.json"), deep_json).unwrap();
    let id = send_exec(&mb, "still delivered");
    // An unbounded alias expansion (9^10 nodes) would hang: `pass_within` fails the test then.
    let pass = pass_within(&root, "Executor");
    assert_eq!(pass.delivered.len(), 1);
    assert_eq!(pass.delivered[0].id, id);
    let names: Vec<&str> = pass.rejected.iter().map(|r| r.name.as_str()).collect();
    for n in ["bomb.yaml", "deep.yaml", "deep.json"] {
        assert!(names.contains(&n), "{n} not rejected: {:?}", pass.rejected);
    }
}

#[test]
fn sockets_control_characters_and_growing_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let mb = settled_mailbox(&root);
    let _sock = std::os::unix::net::UnixListener::bind(root.join("inputs/sock.yaml")).unwrap();
    std::fs::write(
        root.join("inputs/bell\u{7}.yaml"),
        "type: STEER\ntarget: Executor\n",
    )
    .unwrap();
    std::fs::write(
        root.join("inputs/new\nline.json"),
        r#"{"type": "STEER", "target": "Executor"}"#,
    )
    .unwrap();
    // A file that keeps growing while sigbox reads it: never read past the cap, never hang.
    let growing = root.join("inputs/growing.yaml");
    std::fs::write(&growing, "type: STEER\ntarget: Executor\nmessage: ").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let growing = growing.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(growing)
                .unwrap();
            let chunk = vec![b'x'; 64 * 1024];
            let mut written = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && written < 64 * 1024 * 1024 {
                use std::io::Write;
                f.write_all(&chunk).unwrap();
                written += chunk.len();
            }
        })
    };
    // Past the 1 MiB cap before the pass looks (a state waited for, not a time: a loaded
    // machine may take long to get there), and still growing while it reads.
    while std::fs::metadata(&growing).unwrap().len() <= 2 * 1024 * 1024 {
        assert!(!writer.is_finished(), "the writer stopped before the cap");
        std::thread::yield_now();
    }
    let id = send_exec(&mb, "good");
    let pass = pass_within(&root, "Executor");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(
        pass.delivered
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>(),
        [id.as_str()]
    );
    let reason = |n: &str| {
        pass.rejected
            .iter()
            .find(|r| r.name == n)
            .map(|r| r.reason.clone())
    };
    assert!(reason("sock.yaml").unwrap().contains("socket"));
    assert!(
        reason("bell\u{7}.yaml")
            .unwrap()
            .contains("control characters")
    );
    assert!(
        reason("new\nline.json")
            .unwrap()
            .contains("control characters")
    );
    assert!(reason("growing.yaml").unwrap().contains("byte cap"));
    assert!(root.join("rejected/growing.yaml").exists());
}

#[test]
fn a_file_swapped_for_a_symlink_between_listing_and_opening_is_never_followed() {
    // A hostile process swaps a dropped file for a symlink to a secret, as fast as it can,
    // while passes run: the secret must never be delivered or copied, whatever the timing.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    settled_mailbox(&root);
    let secret = tmp.path().join("secret.yaml");
    std::fs::write(&secret, "type: STEER\ntarget: Executor\nmessage: SECRET\n").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, inputs, secret) = (stop.clone(), root.join("inputs"), secret.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let name = inputs.join(format!("swap{}.yaml", i % 4));
                let tmp = inputs.join(format!(".swap{i}.tmp"));
                let _ = std::fs::write(&tmp, "type: INFO\ntarget: Executor\nmessage: harmless\n");
                let _ = std::fs::rename(&tmp, &name);
                // Vary how long the regular file stays: every interleaving gets its turn.
                std::thread::sleep(Duration::from_micros((i % 7) * 40));
                let link = inputs.join(format!(".link{i}.tmp"));
                let _ = std::os::unix::fs::symlink(&secret, &link);
                let _ = std::fs::rename(&link, &name);
                i += 1;
            }
        })
    };
    let mb = settled_mailbox(&root);
    let (mut delivered, mut late_swaps) = (0, 0);
    let started = std::time::Instant::now();
    // At least 300 passes, and until both interleavings have happened (a harmless file
    // delivered; a file swapped after it was claimed, caught when read), or 20 s.
    let mut passes = 0;
    while (passes < 300 || delivered == 0 || late_swaps == 0)
        && started.elapsed() < Duration::from_secs(20)
    {
        passes += 1;
        let pass = mb.pass("Executor", None).unwrap();
        assert!(pass.interrupted.is_none(), "{:?}", pass.interrupted);
        for s in &pass.delivered {
            assert_ne!(s.message.as_deref(), Some("SECRET"), "followed a symlink");
            delivered += 1;
        }
        late_swaps += pass
            .rejected
            .iter()
            .filter(|r| r.reason == "a symlink, not a signal file")
            .count();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    for e in std::fs::read_dir(root.join("processed")).unwrap() {
        let p = e.unwrap().path();
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert!(
            meta.is_file(),
            "{} in processed/ is not a regular file: {:?}",
            p.display(),
            meta.file_type()
        );
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            !text.contains("SECRET"),
            "the secret was copied into processed/"
        );
    }
    assert!(
        delivered > 0,
        "the race really ran: some harmless files were delivered"
    );
    assert!(
        late_swaps > 0,
        "the race really ran: some files were swapped after their claim"
    );
}

#[test]
fn a_fifo_or_symlink_at_a_presence_lock_never_hangs_or_is_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let mb = settled_mailbox(&root);
    let agents = root.join("agents");
    for agent in ["Executor", "Planner"] {
        let fifo = agents.join(format!("{agent}.lock"));
        assert!(
            Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
    }
    let outside = tmp.path().join("outside.lock");
    std::fs::write(&outside, b"keep").unwrap();
    std::os::unix::fs::symlink(&outside, agents.join("Reviewer.lock")).unwrap();
    for agent in ["Planner", "Reviewer"] {
        let mut s = NewSignal::new(SignalType::Steer);
        s.target(Target::Agent(agent.into()));
        mb.send(&s).unwrap();
    }
    // The orchestrator's presence probe neither blocks on the FIFO nor follows the link: both
    // agents count as absent, and their signals are buffered.
    let p = pass_within(&root, "Orchestrator");
    let mut buffered: Vec<&str> = p.buffered.iter().map(|b| b.agent.as_str()).collect();
    buffered.sort();
    assert_eq!(buffered, ["Planner", "Reviewer"]);
    // An agent's own presence refuses them with the reason, at once.
    let (tx, rx) = std::sync::mpsc::channel();
    let r = root.clone();
    std::thread::spawn(move || {
        let mb = sigbox::Mailbox::open(&r).unwrap();
        let errs: Vec<String> = ["Executor", "Reviewer"]
            .iter()
            .map(|a| mb.presence(a).unwrap_err().to_string())
            .collect();
        tx.send(errs).unwrap();
    });
    let errs = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("taking a presence hung on a FIFO");
    assert!(errs[0].contains("not a regular file"), "{}", errs[0]);
    assert!(errs[0].contains("Executor.lock"), "{}", errs[0]);
    assert!(errs[1].contains("Reviewer.lock"), "{}", errs[1]);
    assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
}

/// Names as long as a filesystem takes (255 bytes) are quarantined with their reason like any
/// other, twice under the same name too: the reason file and the `.dup-` name stay within the
/// limit instead of failing every pass that sees the file.
#[test]
fn names_at_the_length_limit_are_quarantined_with_their_reasons() {
    let tmp = tempfile::tempdir().unwrap();
    let mb = settled_mailbox(tmp.path());
    let yaml = format!("{}.yaml", "y".repeat(250));
    let bare = "z".repeat(255);
    let good = mb
        .send(
            sigbox::NewSignal::new(SignalType::Steer)
                .target(Target::Agent("Executor".into()))
                .message("good"),
        )
        .unwrap();
    for round in 0..2 {
        std::fs::write(tmp.path().join("inputs").join(&yaml), "type: [broken\n").unwrap();
        std::fs::write(tmp.path().join("inputs").join(&bare), "{}").unwrap();
        let pass = mb.pass("Executor", None).unwrap();
        mb.ack("Executor").unwrap();
        assert_eq!(pass.rejected.len(), 2, "round {round}: {:?}", pass.rejected);
        if round == 0 {
            assert_eq!(pass.delivered.len(), 1);
            assert_eq!(pass.delivered[0].id, good);
        }
    }
    let rejected = mb.rejected().unwrap();
    assert_eq!(rejected.len(), 4, "{rejected:?}");
    for r in &rejected {
        assert!(
            r.path.file_name().unwrap().len() <= 255,
            "{}",
            r.path.display()
        );
        assert!(
            r.reason.contains("YAML") || r.reason.contains("not a signal file"),
            "{}: {}",
            r.path.display(),
            r.reason
        );
    }
}

/// A consumer's held claim slot moved away and a symlink to a directory outside the root
/// planted at its name, while the handle lives and keeps claiming: nothing is ever written
/// outside the root, and every signal is delivered exactly once (by the handle, or again,
/// marked, by the agent's next consumer once the handle is gone).
#[test]
fn a_held_slot_moved_and_replaced_by_a_symlink_loses_nothing_and_writes_nothing_outside() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("r");
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let mb = MailboxOptions::new().init(&root).unwrap();
    let mut sent = vec![send_exec(&mb, "first")];
    let mut got: Vec<String> = Vec::new();
    let p = mb.pass("Executor", None).unwrap();
    got.extend(p.delivered.iter().map(|s| s.id.clone()));
    mb.ack("Executor").unwrap();
    let slot = root.join("claimed/Executor/0");
    assert!(slot.is_dir(), "the handle's slot");
    std::fs::rename(&slot, root.join("claimed/Executor/7")).unwrap();
    std::os::unix::fs::symlink(&outside, &slot).unwrap();
    // Passes at once (the kept descriptor of the slot is still trusted) and after its check
    // (more than a second later): each either delivers or refuses, never writes outside.
    for round in 0..3 {
        for i in 0..3 {
            sent.push(send_exec(&mb, &format!("r{round}-{i}")));
        }
        if let Ok(p) = mb.pass("Executor", None) {
            got.extend(p.delivered.iter().map(|s| s.id.clone()));
        }
        let _ = mb.ack("Executor");
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "written outside the root"
        );
        std::thread::sleep(Duration::from_millis(1100));
    }
    drop(mb);
    // The symlink removed: the agent's next consumer takes what is left, marked when it was
    // claimed before.
    std::fs::remove_file(&slot).unwrap();
    let next = MailboxOptions::new().open(&root).unwrap();
    takes_the_rest_once_each(&next, got, sent);
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

/// A consumer's held claim slot moved out of the root while the handle lives and keeps
/// claiming: no claim follows the slot out of the root (each is made beneath the root by
/// path), and every signal is delivered exactly once.
#[test]
fn a_held_slot_moved_out_of_the_root_takes_no_claim_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("r");
    let moved = tmp.path().join("moved");
    let mb = MailboxOptions::new().init(&root).unwrap();
    let mut sent = vec![send_exec(&mb, "first")];
    let mut got: Vec<String> = Vec::new();
    got.extend(
        mb.pass("Executor", None)
            .unwrap()
            .delivered
            .iter()
            .map(|s| s.id.clone()),
    );
    mb.ack("Executor").unwrap();
    std::fs::rename(root.join("claimed/Executor/0"), &moved).unwrap();
    for i in 0..3 {
        sent.push(send_exec(&mb, &format!("after {i}")));
        if let Ok(p) = mb.pass("Executor", None) {
            got.extend(p.delivered.iter().map(|s| s.id.clone()));
        }
        // Looked at while the claims are in flight, before their acknowledgement moves them.
        assert_eq!(
            std::fs::read_dir(&moved).unwrap().count(),
            0,
            "a claim followed the slot out of the root"
        );
        let _ = mb.ack("Executor");
    }
    drop(mb);
    let next = MailboxOptions::new().open(&root).unwrap();
    takes_the_rest_once_each(&next, got, sent);
}

/// The slot moved out of the root while a pass hands its first group over (the pass holds
/// the slot's directory for one group of claims and its commit, never across a hand-over):
/// the pass's later claims do not follow the slot out, and what it did not hand over comes
/// once each to the agent's next consumer.
#[test]
fn a_slot_moved_during_a_hand_over_takes_no_later_claim_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("r");
    let moved = tmp.path().join("moved");
    let mb = MailboxOptions::new().init(&root).unwrap();
    // More than one group commit's worth (64), so that the pass claims again after the move.
    let sent: Vec<String> = (0..150).map(|i| send_exec(&mb, &format!("s{i}"))).collect();
    let mut got: Vec<String> = Vec::new();
    let mut groups = 0;
    let mut first = 0;
    let slot = root.join("claimed/Executor/0");
    let result = mb.pass_with(
        "Executor",
        None,
        sigbox::PassControl::new().ack_later(),
        &mut |signals| {
            groups += 1;
            got.extend(signals.iter().map(|s| s.id.clone()));
            if groups == 1 {
                first = signals.len();
                std::fs::rename(&slot, &moved)?;
            }
            Ok(())
        },
    );
    let in_moved = std::fs::read_dir(&moved).unwrap().count();
    assert!(
        groups >= 1 && in_moved > 0,
        "{groups} groups, {in_moved} moved"
    );
    assert!(
        in_moved < sent.len(),
        "every claim followed the slot: {result:?}"
    );
    // Exactly the group handed over before the move went with the slot.
    assert_eq!(
        in_moved, first,
        "a claim after the hand-over followed the slot out"
    );
    drop(mb);
    let next = MailboxOptions::new().open(&root).unwrap();
    takes_the_rest_once_each(&next, got, sent);
}

/// While a pass hands its first group over (a reader slow to take it), a layout directory is
/// moved out of the root and something planted at its name: `claimed/` (a symlink to a
/// directory outside), the slot itself (a new, unlocked directory of the same name), or
/// `processed/` (a symlink outside). The pass's later claims and its acknowledgement go to
/// none of them: nothing beyond the first group reaches the moved directory or the outside
/// one, and every signal not handed over comes once to the agent's next consumer.
#[test]
fn layout_directories_swapped_during_a_hand_over_take_nothing_more() {
    for what in ["claimed", "slot", "processed"] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("r");
        let (moved, outside) = (tmp.path().join("moved"), tmp.path().join("outside"));
        std::fs::create_dir(&outside).unwrap();
        let mb = MailboxOptions::new().init(&root).unwrap();
        let sent: Vec<String> = (0..150).map(|i| send_exec(&mb, &format!("s{i}"))).collect();
        let mut got: Vec<String> = Vec::new();
        let (mut groups, mut first) = (0, 0);
        let swap = || -> std::io::Result<()> {
            match what {
                "claimed" => {
                    std::fs::rename(root.join("claimed"), &moved)?;
                    std::os::unix::fs::symlink(&outside, root.join("claimed"))
                }
                "slot" => {
                    std::fs::rename(root.join("claimed/Executor/0"), &moved)?;
                    std::fs::create_dir(root.join("claimed/Executor/0"))
                }
                _ => {
                    std::fs::rename(root.join("processed"), &moved)?;
                    std::os::unix::fs::symlink(&outside, root.join("processed"))
                }
            }
        };
        let mut control = sigbox::PassControl::new();
        if what != "processed" {
            control.ack_later();
        }
        let result = mb.pass_with("Executor", None, &control, &mut |signals| {
            groups += 1;
            got.extend(signals.iter().map(|s| s.id.clone()));
            if groups == 1 {
                first = signals.len();
                swap()?;
            }
            Ok(())
        });
        let result = result.map(|p| p.delivered.len()).map_err(|e| e.to_string());
        assert_eq!(
            walk_files(&outside),
            0,
            "{what}: written outside the root: {result:?}"
        );
        let in_moved = walk_files(&moved);
        assert!(first > 0 && groups >= 1, "{what}: {groups} groups");
        if what == "processed" {
            // The first group's acknowledgement went nowhere: it is still in flight.
            assert_eq!(in_moved, 0, "{what}: acknowledged into the moved directory");
        } else {
            assert_eq!(
                in_moved, first,
                "{what}: a later claim followed the slot: {result:?}"
            );
        }
        drop(mb);
        // Put back as it was, but for what was moved away with what it held.
        match what {
            "claimed" | "processed" => std::fs::remove_file(root.join(what)).unwrap(),
            _ => std::fs::remove_dir(root.join("claimed/Executor/0")).unwrap(),
        }
        if what == "processed" {
            std::fs::rename(&moved, root.join("processed")).unwrap();
        }
        let next = MailboxOptions::new().open(&root).unwrap();
        let taken_away = if what == "processed" { 0 } else { first };
        takes_the_rest_once_each(&next, got[..taken_away].to_vec(), sent);
    }
}

/// `inputs/` moved out of the root and a new one made in its place, just before a bridge's
/// export round (well within the second between two checks of the kept layout directories):
/// the round neither takes what the moved directory holds nor writes anything outside.
#[test]
fn an_export_round_just_after_inputs_moved_away_takes_nothing_from_outside() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("r");
    let moved = tmp.path().join("moved");
    let mb = MailboxOptions::new().init(&root).unwrap();
    let here = |a: &str| a == "Executor";
    let mut seen = sigbox::BroadcastsSeen::default();
    // A first round keeps the layout's directories open.
    assert!(
        mb.bridge()
            .take("h0", 64, &here, &mut seen)
            .unwrap()
            .is_empty()
    );
    for i in 0..3 {
        mb.send(
            NewSignal::new(SignalType::Steer)
                .target(Target::Agent("Remote".into()))
                .message(format!("r{i}")),
        )
        .unwrap();
    }
    std::fs::rename(root.join("inputs"), &moved).unwrap();
    std::fs::create_dir(root.join("inputs")).unwrap();
    let taken = mb.bridge().take("h0", 64, &here, &mut seen).unwrap();
    assert!(taken.is_empty(), "taken from outside the root: {taken:?}");
    assert_eq!(
        walk_files(&moved),
        3,
        "the moved directory keeps what it held"
    );
}

/// Regular files anywhere below `d` (0 when it does not exist).
fn walk_files(d: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(d) else {
        return 0;
    };
    rd.map(|e| e.unwrap())
        .map(|e| {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                walk_files(&e.path())
            } else {
                usize::from(t.is_file())
            }
        })
        .sum()
}

/// Passes of `next` for the Executor until every id of `sent` came (a process another test
/// starts may hold a copy of a dropped handle's slot lock for a moment, between its fork and
/// its exec), then checks that, with `got` (what earlier passes delivered), each came once.
fn takes_the_rest_once_each(next: &sigbox::Mailbox, mut got: Vec<String>, mut sent: Vec<String>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let p = next.pass("Executor", None).unwrap();
        got.extend(p.delivered.iter().map(|s| s.id.clone()));
        next.ack("Executor").unwrap();
        let mut seen = got.clone();
        seen.sort();
        seen.dedup();
        if seen.len() >= sent.len() || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut unique = got.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), got.len(), "delivered twice: {got:?}");
    sent.sort();
    assert_eq!(unique, sent, "lost");
}
