//! Guards the reuse of an unchanged inbox's listing: a signal that arrives after a listing
//! was kept is always seen by the next pass, however soon it comes, and a dropped file edited
//! in place is read again.

use std::time::Duration;

use sigbox::{MailboxOptions, NewSignal, SignalType, Target};

fn to(agent: &str) -> NewSignal {
    let mut s = NewSignal::new(SignalType::Info);
    s.target(Target::Agent(agent.into()));
    s
}

#[test]
fn a_signal_right_after_a_kept_listing_is_seen_by_the_next_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = MailboxOptions::new();
    o.settle(Duration::ZERO);
    let mb = o.init(tmp.path()).unwrap();
    let other = o.open(tmp.path()).unwrap(); // another handle: no shared memory with `mb`
    for _ in 0..100 {
        mb.send(&to("Planner")).unwrap(); // something to list
    }
    for round in 0..40 {
        // Idle past the racy margin, so the next pass keeps its listing...
        std::thread::sleep(Duration::from_millis(60));
        assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
        assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
        // ...then a signal arrives at once, from another handle.
        let id = other.send(&to("Executor")).unwrap();
        let got: Vec<String> = mb
            .pass("Executor", None)
            .unwrap()
            .delivered
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(
            got,
            std::slice::from_ref(&id),
            "round {round}: the new signal was hidden"
        );
    }
}

#[test]
fn a_signal_from_another_process_right_after_a_kept_listing_is_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let mut o = MailboxOptions::new();
    o.settle(Duration::ZERO);
    let mb = o.init(&root).unwrap();
    let worker = env!("CARGO_BIN_EXE_race_worker");
    for round in 0..10 {
        std::thread::sleep(Duration::from_millis(60));
        assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
        let out = std::process::Command::new(worker)
            .args(["produce", root.to_str().unwrap(), "p", "1", "Executor"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let got = mb.pass("Executor", None).unwrap().delivered;
        assert_eq!(got.len(), 1, "round {round}: hidden");
    }
}

#[test]
fn a_dropped_file_edited_in_place_is_read_again() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = MailboxOptions::new();
    o.settle(Duration::from_millis(100));
    let mb = o.init(tmp.path()).unwrap();
    let f = tmp.path().join("inputs/note.yaml");
    std::fs::write(&f, "type: INFO\ntarget: Planner\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
    assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
    // Rewritten in place: the directory does not change, the file does.
    std::fs::write(&f, "type: INFO\ntarget: Executor\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let got = mb.pass("Executor", None).unwrap().delivered;
    assert_eq!(got.len(), 1);
    assert_eq!(sigbox_tests::stem(&got[0].id), "note");
}
