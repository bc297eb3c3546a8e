//! Files with a second link for a moment (spec/mailbox.md §3.3, §5): a claim by link between
//! its link and its unlink, and the classic maildir delivery (`ln tmp/x inputs/x; rm tmp/x`).
//! Neither may be taken for a hostile hard link by another process: a regular file with more
//! than one link is given the time to lose its other name before it is refused. A link that
//! stays is still refused, once that time has passed.
//!
//! Claims by link are forced with `SIGBOX_LINK_CLAIMS=1`, so that these races run on every
//! filesystem.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

/// A `sigbox` command against `root`, claims by link forced.
fn sigbox(root: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.env("SIGBOX_ROOT", root)
        .env("SIGBOX_LINK_CLAIMS", "1")
        .env("SIGBOX_SETTLE", "2s")
        .env_remove("RUST_LOG")
        .args(args);
    c
}

/// A loop of `sigbox --json <args>` in a process group of its own, appending every line it
/// prints to `log`, until `stop` exists.
fn consumer_loop(root: &Path, args: &str, log: &Path, stop: &Path) -> Child {
    let script = format!(
        "while [ ! -e {stop} ]; do {BIN} --json {args} >> {log} || echo \"exit $?\" >> {log}.err; done",
        stop = stop.display(),
        log = log.display(),
    );
    let mut c = Command::new("bash");
    c.args(["-c", &script])
        .env("SIGBOX_ROOT", root)
        .env("SIGBOX_LINK_CLAIMS", "1")
        .env("SIGBOX_SETTLE", "2s")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    c.spawn().unwrap()
}

/// What was printed to each log: message → how many times, and every line's agent.
fn delivered(logs: &[(String, PathBuf)]) -> BTreeMap<String, Vec<String>> {
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (agent, log) in logs {
        for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let msg = v["message"].as_str().unwrap().to_string();
            got.entry(msg).or_default().push(agent.clone());
        }
    }
    got
}

fn rejected(root: &Path) -> Vec<String> {
    std::fs::read_dir(root.join("rejected"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".reason.json"))
        .map(|n| {
            let text = std::fs::read_to_string(root.join("rejected").join(&n)).unwrap();
            format!("{n}: {text}")
        })
        .collect()
}

fn errors(logs: &[(String, PathBuf)]) -> String {
    logs.iter()
        .filter_map(|(_, log)| std::fs::read_to_string(log.with_extension("log.err")).ok())
        .collect()
}

/// Waits until `want` messages were printed in all (or a generous minute passed), then stops
/// the loops and waits for them.
fn stop_once_delivered(logs: &[(String, PathBuf)], want: usize, stop: &Path, loops: Vec<Child>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while delivered(logs).len() < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(stop, b"").unwrap();
    for mut c in loops {
        c.wait().unwrap();
    }
}

#[test]
fn claims_by_link_under_way_are_never_taken_for_hostile_links() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let stage = tmp.path().join("stage");
    std::fs::create_dir(&stage).unwrap();
    assert!(sigbox(&root, &["init"]).status().unwrap().success());
    let stop = tmp.path().join("stop");
    let agents = ["Executor", "Planner", "Orchestrator"];
    let logs: Vec<(String, PathBuf)> = agents
        .iter()
        .map(|a| (a.to_string(), tmp.path().join(format!("{a}.log"))))
        .collect();
    let loops: Vec<Child> = logs
        .iter()
        .map(|(a, log)| consumer_loop(&root, &format!("poll --as {a}"), log, &stop))
        .collect();
    // Dropped files renamed in a few ms apart: for the three consumers, and for an absent
    // agent, whose signals the orchestrator moves into its buffer (by link too).
    let targets = ["Executor", "Planner", "Orchestrator", "Reviewer"];
    let n = 240;
    for i in 0..n {
        let target = targets[i % targets.len()];
        let f = stage.join(format!("d{i}.yaml"));
        std::fs::write(&f, format!("type: INFO\ntarget: {target}\nmessage: m{i}\n")).unwrap();
        std::fs::rename(&f, root.join("inputs").join(format!("d{i}.yaml"))).unwrap();
        std::thread::sleep(Duration::from_millis(3));
    }
    // Until every consumer's signal was printed (or a generous bound passed).
    stop_once_delivered(&logs, n - n / targets.len(), &stop, loops);
    assert_eq!(
        rejected(&root),
        Vec::<String>::new(),
        "valid files quarantined"
    );
    assert_eq!(errors(&logs), "", "a poll failed");
    let got = delivered(&logs);
    for i in 0..n {
        let target = targets[i % targets.len()];
        let msg = format!("m{i}");
        if target == "Reviewer" {
            assert!(
                !got.contains_key(&msg),
                "{msg} for the absent Reviewer was delivered"
            );
        } else {
            assert_eq!(
                got.get(&msg),
                Some(&vec![target.to_string()]),
                "{msg}: delivered once, to {target}"
            );
        }
    }
    // The absent agent's signals wait in its buffer, none lost.
    let buffered = std::fs::read_dir(root.join("buffered").join("Reviewer"))
        .map(|rd| rd.flatten().count())
        .unwrap_or(0);
    let pending = std::fs::read_dir(root.join("inputs"))
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .count();
    assert_eq!(
        buffered + pending,
        n / targets.len(),
        "the Reviewer's signals"
    );
}

#[test]
fn maildir_drops_are_read_once_their_other_name_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let maildir_tmp = tmp.path().join("tmp");
    std::fs::create_dir(&maildir_tmp).unwrap();
    assert!(sigbox(&root, &["init"]).status().unwrap().success());
    let stop = tmp.path().join("stop");
    // Blocked waits, woken by each link's event inside the two-link window.
    let logs: Vec<(String, PathBuf)> = (0..2)
        .map(|i| ("Executor".to_string(), tmp.path().join(format!("w{i}.log"))))
        .collect();
    let loops: Vec<Child> = logs
        .iter()
        .map(|(_, log)| consumer_loop(&root, "wait --as Executor --timeout 1s", log, &stop))
        .collect();
    common::wait_until(
        "both waits blocked on inputs/",
        Duration::from_secs(30),
        || common::watchers(&root.join("inputs")) >= 2,
    );
    let n = 30;
    for i in 0..n {
        let f = maildir_tmp.join(format!("x{i}.yaml"));
        std::fs::write(
            &f,
            format!("type: STEER\ntarget: Executor\nmessage: m{i}\n"),
        )
        .unwrap();
        // A writer's fsync takes a while: the link comes a clock tick after the last write.
        std::thread::sleep(Duration::from_millis(15));
        let dest = root.join("inputs").join(format!("x{i}.yaml"));
        std::fs::hard_link(&f, &dest).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        std::fs::remove_file(&f).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    stop_once_delivered(&logs, n, &stop, loops);
    assert_eq!(
        rejected(&root),
        Vec::<String>::new(),
        "maildir drops quarantined"
    );
    let got = delivered(&logs);
    let once: HashSet<&String> = got
        .iter()
        .filter(|(_, v)| v.len() == 1)
        .map(|(k, _)| k)
        .collect();
    assert_eq!(once.len(), n, "every maildir drop delivered once: {got:?}");
}

#[test]
fn a_second_link_that_stays_is_refused_once_its_time_has_passed() {
    let (tmp, root) = fresh_root();
    let outside = tmp.path().join("outside.yaml");
    std::fs::write(&outside, "type: STEER\ntarget: Executor\nmessage: secret\n").unwrap();
    // Linked in a clock tick after its last write: complete by the settle rule.
    std::thread::sleep(Duration::from_millis(15));
    std::fs::hard_link(&outside, root.join("inputs").join("planted.yaml")).unwrap();
    // At once: not read, not refused yet: it may be a delivery losing its other name.
    let out = sigbox(&root, &["poll", "--as", "Executor"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert_eq!(rejected(&root), Vec::<String>::new());
    let ls = sigbox(&root, &["--json", "ls"]).output().unwrap();
    let ls = String::from_utf8(ls.stdout).unwrap();
    assert!(
        ls.lines().any(|l| l.contains("planted.yaml")
            && l.contains("\"settling\"")
            && l.contains("second link")),
        "ls shows the file as settling, for its second link: {ls}"
    );
    // Once its links have not changed for the window: refused with the hard-link reason,
    // never read, the file outside untouched.
    std::thread::sleep(Duration::from_millis(2300));
    let out = sigbox(&root, &["poll", "--as", "Executor"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let refused = rejected(&root);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].contains("2 hard links"), "{refused:?}");
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "type: STEER\ntarget: Executor\nmessage: secret\n"
    );
}

/// A new mailbox in a temporary directory (kept while the first value lives) and its root.
fn fresh_root() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    assert!(sigbox(&root, &["init"]).status().unwrap().success());
    (tmp, root)
}

/// Sends a STEER with message `msg` to the Executor; the name of its file in `inputs/`.
fn send_to_executor(root: &Path, msg: &str) -> String {
    let out = sigbox(root, &["send", "steer", msg, "--target", "Executor"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    format!("{}.json", String::from_utf8(out.stdout).unwrap().trim())
}

/// The id of a process that has ended.
fn dead_pid() -> u32 {
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    gone.id()
}

/// The state a crash leaves in the middle of the orchestrator's move of `file` into the
/// Executor's buffer by link (§9.10): linked into the buffer, the source moved aside beside it
/// by a process that is gone. The moved-aside name.
fn leave_in_buffer(root: &Path, file: &str) -> PathBuf {
    let buffer = root.join("buffered").join("Executor");
    std::fs::create_dir_all(&buffer).unwrap();
    let twin = buffer.join(format!(".{}.0123456789abcdef.claim.tmp", dead_pid()));
    std::fs::hard_link(root.join("inputs").join(file), buffer.join(file)).unwrap();
    std::fs::rename(root.join("inputs").join(file), &twin).unwrap();
    twin
}

/// One `sigbox --json poll --as Executor` claiming by `rule`: each signal's message and
/// redelivery count.
fn poll_by(root: &Path, rule: &str) -> Vec<(String, u64)> {
    let out = sigbox(root, &["--json", "poll", "--as", "Executor"])
        .env("SIGBOX_LINK_CLAIMS", rule)
        .output()
        .unwrap();
    assert!(out.status.success(), "rule {rule}: {out:?}");
    messages_of(&out.stdout)
}

/// One pass of the Executor by the library (not acknowledged): each signal's message and
/// redelivery count.
fn pass_messages(mb: &sigbox::Mailbox) -> Vec<(String, u64)> {
    mb.pass("Executor", None)
        .unwrap()
        .delivered
        .iter()
        .map(|s| (s.message.clone().unwrap(), u64::from(s.redelivery())))
        .collect()
}

/// Each JSON line's message and redelivery count.
fn messages_of(stdout: &[u8]) -> Vec<(String, u64)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let msg = v["message"].as_str().unwrap().to_string();
            (msg, v["redelivery"].as_u64().unwrap())
        })
        .collect()
}

/// A claim by link that moved a signal into a buffer (the orchestrator's move, spec/mailbox.md
/// §9.10) and was cut off after it moved the source aside, before it unlinked it, leaves two
/// links to one file: the signal in the buffer and `.<pid>.<hex>.claim.tmp` beside it. Whatever
/// rule the next reader claims by, by link or by rename (the root read on another filesystem,
/// or with `SIGBOX_LINK_CLAIMS=0`), the signal is delivered once, first, unmarked; nothing is
/// refused, and the leftover name goes. Claiming by rename, the reader once moved the file on
/// into its slot without looking at its links, and then refused it as a hard link.
#[test]
fn a_claim_by_links_leftover_in_a_buffer_is_resolved_whatever_the_readers_rule() {
    for rule in ["0", "1"] {
        let (_tmp, root) = fresh_root();
        let first = send_to_executor(&root, "first");
        send_to_executor(&root, "second");
        let twin = leave_in_buffer(&root, &first);
        let got = poll_by(&root, rule);
        assert_eq!(
            got,
            [("first".to_string(), 0), ("second".to_string(), 0)],
            "rule {rule}: both, in the order sent, neither marked as delivered before"
        );
        assert_eq!(rejected(&root), Vec::<String>::new(), "rule {rule}");
        assert!(!twin.exists(), "rule {rule}: the leftover name stays");
        let again = sigbox(&root, &["poll", "--as", "Executor"])
            .env("SIGBOX_LINK_CLAIMS", rule)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&again.stdout), "", "rule {rule}");
    }
}

/// `gc` clears such a leftover in a buffer once its file has gone on (here, delivered and in
/// `processed/`); a file alone under such a name (one that took a claimed name, whose claimer
/// died before it put it back) is quarantined, kept whole, where a person sees it.
#[test]
fn gc_clears_a_claim_by_links_leftover_in_a_buffer_and_quarantines_one_alone() {
    let (_tmp, root) = fresh_root();
    let name = send_to_executor(&root, "done");
    assert!(
        sigbox(&root, &["poll", "--as", "Executor"])
            .status()
            .unwrap()
            .success()
    );
    let record = root.join("processed").join(&name);
    assert!(record.exists());
    let buffer = root.join("buffered").join("Executor");
    std::fs::create_dir_all(&buffer).unwrap();
    let gone = dead_pid();
    let linked = buffer.join(format!(".{}.0123456789abcdef.claim.tmp", gone));
    let alone = buffer.join(format!(".{}.fedcba9876543210.claim.tmp", gone));
    std::fs::hard_link(&record, &linked).unwrap();
    std::fs::write(&alone, "type: INFO\nmessage: took the name\n").unwrap();
    let out = sigbox(&root, &["gc", "--older-than", "0s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The second link removed; the file alone quarantined, not counted as removed.
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("removed 1 "),
        "{out:?}"
    );
    assert!(!linked.exists(), "the second link stays");
    assert!(!alone.exists(), "a file alone under that name stays hidden");
    let refused = rejected(&root);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("took the name of the file being claimed")
            && refused[0].contains(alone.file_name().unwrap().to_str().unwrap()),
        "the reason names the file as it was found: {refused:?}"
    );
    let kept: Vec<String> = std::fs::read_dir(root.join("rejected"))
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".reason.json"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert_eq!(kept, ["type: INFO\nmessage: took the name\n"]);
    let st = std::fs::metadata(&record).expect("the record went");
    assert_eq!(std::os::unix::fs::MetadataExt::nlink(&st), 1);
}

/// A moved-aside name in a buffer whose other link is nowhere in the root a signal is kept
/// (planted by hand, here to a file outside the root): `gc` does not remove it, which would
/// leave the signal's content outside the root only; it quarantines it, kept whole, and the
/// file outside is untouched.
#[test]
fn gc_quarantines_a_leftover_whose_other_link_is_outside_the_root() {
    let (tmp, root) = fresh_root();
    let name = send_to_executor(&root, "kept");
    let outside = tmp.path().join("outside.json");
    std::fs::hard_link(root.join("inputs").join(&name), &outside).unwrap();
    let buffer = root.join("buffered").join("Executor");
    std::fs::create_dir_all(&buffer).unwrap();
    let twin = buffer.join(format!(".{}.bbbbbbbbbbbbbbbb.claim.tmp", dead_pid()));
    std::fs::rename(root.join("inputs").join(&name), &twin).unwrap();
    let before = std::fs::read(&outside).unwrap();
    let out = sigbox(&root, &["gc", "--older-than", "0s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("removed 0 "),
        "{out:?}"
    );
    assert!(!twin.exists());
    let refused = rejected(&root);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].contains("outside the root"), "{refused:?}");
    assert_eq!(std::fs::read(&outside).unwrap(), before);
    // Still two names: the one in rejected/ and the one outside.
    let st = std::fs::metadata(&outside).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::nlink(&st), 2);
}

/// The same leftover, after a consumer claimed the signal from the buffer into its slot by
/// rename and was killed before handing it over: the next pass, by either rule, takes over
/// the slot, removes the leftover, and delivers the signal first, marked as delivered again,
/// then the later ones. Before, it was held back for the hard-link rule's time and came
/// passes later, after the later ones.
#[test]
fn a_dead_consumers_claim_with_a_leftover_in_its_buffer_comes_first() {
    for rule in ["0", "1"] {
        let (_tmp, root) = fresh_root();
        let first = send_to_executor(&root, "m1");
        send_to_executor(&root, "m2");
        send_to_executor(&root, "m3");
        let twin = leave_in_buffer(&root, &first);
        // Claimed into a slot, by a consumer that died there.
        let slot = root.join("claimed").join("Executor").join("0");
        std::fs::create_dir_all(&slot).unwrap();
        std::fs::rename(
            root.join("buffered").join("Executor").join(&first),
            slot.join(&first),
        )
        .unwrap();
        let got = poll_by(&root, rule);
        assert_eq!(
            got,
            [
                ("m1".to_string(), 1),
                ("m2".to_string(), 0),
                ("m3".to_string(), 0)
            ],
            "rule {rule}"
        );
        assert_eq!(rejected(&root), Vec::<String>::new(), "rule {rule}");
        assert!(!twin.exists(), "rule {rule}: the leftover name stays");
    }
}

/// A consumer that died while it claimed leaves claims whose mtimes are not their order: one
/// whose handling block was written carries the claim's time, one cut off before carries the
/// send's. The next pass delivers them again in the order they were sent (their names'
/// instants), as the listing they were claimed from ordered them. Before, it went by mtime,
/// and a later signal came first.
#[test]
fn a_dead_consumers_claims_come_again_in_the_order_they_were_sent() {
    for rule in ["0", "1"] {
        let (_tmp, root) = fresh_root();
        let files: Vec<String> = ["m1", "m2", "m3"]
            .iter()
            .map(|m| send_to_executor(&root, m))
            .collect();
        // Claimed into a slot by a consumer that died there; the first claim's block was
        // written (its mtime the claim's, later than the others').
        let slot = root.join("claimed").join("Executor").join("0");
        std::fs::create_dir_all(&slot).unwrap();
        for f in &files {
            std::fs::rename(root.join("inputs").join(f), slot.join(f)).unwrap();
        }
        let later = std::time::SystemTime::now() + Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(slot.join(&files[0]))
            .unwrap()
            .set_modified(later)
            .unwrap();
        let got = poll_by(&root, rule);
        assert_eq!(
            got,
            [
                ("m1".to_string(), 1),
                ("m2".to_string(), 1),
                ("m3".to_string(), 1)
            ],
            "rule {rule}"
        );
    }
}

/// Freely named dropped files are ordered by the `created_at` of their body, else by their
/// mtime (spec/mailbox.md §4). A consumer that claimed them with a sent signal and died
/// before acknowledging: the next pass delivers the three again in the order the first did,
/// as the handling block each claim wrote (and the redelivery's after it) leaves the order
/// where it was. Before, a dropped file came again by the claim's time, after the sent one.
#[test]
fn a_dead_consumers_dropped_files_come_again_in_their_place() {
    use sigbox::{MailboxOptions, NewSignal, SignalType, Target};
    for rule in ["0", "1"] {
        let (_tmp, root) = fresh_root();
        let hour = Duration::from_secs(3600);
        let drop_whole = |name: &str, body: String, age: Duration| {
            let stage = root.join(format!("stage-{name}"));
            std::fs::write(&stage, body).unwrap();
            std::fs::File::options()
                .write(true)
                .open(&stage)
                .unwrap()
                .set_modified(std::time::SystemTime::now() - age)
                .unwrap();
            std::fs::rename(&stage, root.join("inputs").join(name)).unwrap();
        };
        let three_hours_ago = (chrono::Utc::now() - chrono::Duration::hours(3)).to_rfc3339();
        drop_whole(
            "first.json",
            format!(
                r#"{{"type": "INFO", "target": "Executor", "message": "first", "created_at": "{three_hours_ago}"}}"#
            ),
            hour,
        );
        drop_whole(
            "second.yaml",
            "type: INFO\ntarget: Executor\nmessage: second\n".into(),
            2 * hour,
        );
        let mut o = MailboxOptions::new();
        o.link_claims(rule == "1");
        let mb = o.open(&root).unwrap();
        let mut third = NewSignal::new(SignalType::Info);
        third
            .target(Target::Agent("Executor".into()))
            .message("third");
        mb.send(&third).unwrap();
        let first: Vec<String> = pass_messages(&mb).into_iter().map(|m| m.0).collect();
        assert_eq!(first, ["first", "second", "third"], "rule {rule}");
        drop(mb); // gone before acknowledging
        let want = |n| {
            ["first", "second", "third"]
                .iter()
                .map(|m| (m.to_string(), n))
                .collect::<Vec<_>>()
        };
        // Delivered again by a second consumer that dies too, then by `poll`.
        let mb = o.open(&root).unwrap();
        assert_eq!(pass_messages(&mb), want(1), "rule {rule}");
        drop(mb);
        assert_eq!(poll_by(&root, rule), want(2), "rule {rule}");
    }
}

/// A dead consumer's broadcasts come again in their place among its other claims: by the
/// instant of the broadcast each marker names, not the marker's own (written at the
/// delivery). Before, every targeted signal came again before every broadcast.
#[test]
fn a_dead_consumers_broadcasts_come_again_in_their_place() {
    use sigbox::{MailboxOptions, NewSignal, SignalType, Target};
    for rule in ["0", "1"] {
        let (_tmp, root) = fresh_root();
        let mut o = MailboxOptions::new();
        o.link_claims(rule == "1");
        let mb = o.open(&root).unwrap();
        let order = ["b1", "t2", "b3", "b4", "t5"];
        for m in order {
            let mut s = NewSignal::new(SignalType::Info);
            let to = if m.starts_with('b') {
                Target::All
            } else {
                Target::Agent("Executor".into())
            };
            s.target(to).message(m);
            mb.send(&s).unwrap();
        }
        let first: Vec<String> = pass_messages(&mb).into_iter().map(|m| m.0).collect();
        assert_eq!(first, order, "rule {rule}");
        drop(mb); // gone before acknowledging
        let want: Vec<(String, u64)> = order.iter().map(|m| (m.to_string(), 1)).collect();
        assert_eq!(poll_by(&root, rule), want, "rule {rule}");
    }
}

/// A claim by link cut off after it moved its source aside beside the claimed file, before it
/// unlinked that name (§9.10), by a consumer that died: the file in its slot has two links,
/// the other one sigbox's own. `ls` and `doctor` count it as a signal to come again (not as an invalid
/// file, as they did for a moment), and the next pass delivers it once, marked.
#[test]
fn a_claim_by_link_cut_off_in_a_dead_slot_is_counted_as_coming_again() {
    let (_tmp, root) = fresh_root();
    let file = send_to_executor(&root, "moved aside");
    let slot = root.join("claimed").join("Executor").join("0");
    std::fs::create_dir_all(&slot).unwrap();
    std::fs::hard_link(root.join("inputs").join(&file), slot.join(&file)).unwrap();
    // Step 3 of the claim: the source moved aside beside the claimed file, not yet unlinked.
    let twin = slot.join(format!(".{}.0123456789abcdef.claim.tmp", dead_pid()));
    std::fs::rename(root.join("inputs").join(&file), &twin).unwrap();
    let out = sigbox(&root, &["--json", "ls", "--all"]).output().unwrap();
    let ls: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!ls.iter().any(|v| v["kind"] == "invalid"), "{ls:?}");
    assert!(
        ls.iter()
            .any(|v| v["kind"] == "in_flight" && v["agent"] == "Executor" && v["count"] == 1),
        "{ls:?}"
    );
    let mut got = Vec::new();
    for rule in ["0", "1"] {
        got.extend(poll_by(&root, rule));
    }
    assert_eq!(got, [("moved aside".to_string(), 1)]);
    assert!(!twin.exists());
    let rejected = sigbox(&root, &["--json", "ls", "--all"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&rejected.stdout).contains("\"rejected\""),
        "{rejected:?}"
    );
    assert!(sigbox(&root, &["doctor"]).status().unwrap().success());
}

/// Two consumers of one agent at the same moment, one claiming by link and one by rename
/// (`SIGBOX_LINK_CLAIMS` set differently for each): a file both took has a link in each one's
/// slot. The first to resolve it yields its link and the other delivers it, in the same
/// pass: every signal once, none marked, nothing refused, nothing left for a later pass.
/// Before, each yielded or waited: up to nine in ten stayed in the slots, and a later pass
/// refused them as hard links.
#[test]
fn consumers_claiming_by_link_and_by_rename_at_once_deliver_each_signal_once() {
    for round in 0..3 {
        let (_tmp, root) = fresh_root();
        let n = 100;
        let script = format!(
            "for i in $(seq 1 {n}); do {BIN} send steer m$i --target Executor >/dev/null || exit 1; done"
        );
        let sent = Command::new("bash")
            .args(["-c", &script])
            .env("SIGBOX_ROOT", &root)
            .status()
            .unwrap();
        assert!(sent.success());
        let polls: Vec<Child> = ["0", "1"]
            .iter()
            .map(|rule| {
                sigbox(&root, &["--json", "poll", "--as", "Executor"])
                    .env("SIGBOX_LINK_CLAIMS", rule)
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut got: Vec<(String, u64)> = Vec::new();
        for p in polls {
            let out = p.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}: {out:?}");
            got.extend(messages_of(&out.stdout));
        }
        let mut once: Vec<&str> = got.iter().map(|(m, _)| m.as_str()).collect();
        once.sort_unstable();
        once.dedup();
        assert_eq!(once.len(), got.len(), "round {round}: delivered twice");
        assert_eq!(got.len(), n, "round {round}: not all delivered at once");
        assert!(got.iter().all(|(_, r)| *r == 0), "round {round}: marked");
        assert_eq!(rejected(&root), Vec::<String>::new(), "round {round}");
        let again = sigbox(&root, &["poll", "--as", "Executor"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&again.stdout), "", "round {round}");
    }
}

/// An archive by link's moved-aside source left beside its record in `processed/` (a crash
/// before its unlink): `log` and `doctor` name it and say that `gc` removes it (they said
/// "unreadable", and read the staging name as a record too); `gc` removes it, and the record
/// is read again.
#[test]
fn an_archives_leftover_in_processed_is_named_and_gc_removes_it() {
    let (_tmp, root) = fresh_root();
    let out = sigbox(&root, &["send", "info", "to all"]).output().unwrap();
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(sigbox(&root, &["finish"]).status().unwrap().success());
    let record = root.join("processed").join(format!("{id}.json"));
    assert!(record.exists(), "archived");
    let gone = dead_pid();
    let twin = root
        .join("processed")
        .join(format!(".{}.0123456789abcdef.claim.tmp", gone));
    std::fs::hard_link(&record, &twin).unwrap();
    for args in [&["log"][..], &["doctor"][..]] {
        let out = sigbox(&root, args).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{args:?}: {text}");
        assert!(
            text.contains("left by an interrupted claim") && text.contains("sigbox gc"),
            "{args:?}: {text}"
        );
        assert_eq!(text.matches("claim.tmp").count(), 1, "{args:?}: {text}");
    }
    let out = sigbox(&root, &["gc", "--older-than", "0s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!twin.exists());
    let out = sigbox(&root, &["log"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&id));
}

/// Every file under `dir` whose name ends with `suffix`.
fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    common::files_under(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect()
}

/// A consumer that dies in the middle of acknowledging a broadcast, between the two steps of
/// removing its marker by link claims' rule (emptied and synced, then unlinked): the next pass
/// finishes the removal, delivers nothing again and says nothing of an unreadable marker (it
/// is sigbox's own state, not something broken).
#[test]
fn a_broadcast_marker_emptied_by_an_acknowledgement_cut_short_is_removed_quietly() {
    use sigbox::{MailboxOptions, NewSignal, SignalType, Target};
    let (_tmp, root) = fresh_root();
    let mut o = MailboxOptions::new();
    o.link_claims(true);
    let mb = o.open(&root).unwrap();
    let mut all = NewSignal::new(SignalType::Info);
    all.target(Target::All).message("all hands").from("alice");
    mb.send(&all).unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    assert_eq!(pass.delivered.len(), 1, "{pass:?}");
    let markers = files_ending(&root, ".broadcast");
    assert_eq!(markers.len(), 1, "{markers:?}");
    // The acknowledgement's first step, then the consumer is gone (its slot lock with it).
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&markers[0])
        .unwrap();
    drop(mb);
    for _ in 0..2 {
        let out = sigbox(&root, &["--json", "poll", "--as", "Executor"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "nothing again");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "no warning");
    }
    assert!(files_ending(&root, ".broadcast").is_empty());
    let out = sigbox(&root, &["doctor"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
}
