//! Guards the checkpoint library: presence while a handle lives, and PAUSE handling that
//! blocks until RESUME, ABORT or a new STEER/INFO, across threads.

use std::time::Duration;

use sigbox::{Mailbox, NewSignal, SignalType, Target};
use sigbox_client::{Checkpoint, WaitMode};

mod common;

fn to_exec(ty: SignalType, msg: &str) -> NewSignal {
    let mut s = NewSignal::new(ty);
    s.target(Target::Agent("Executor".into())).message(msg);
    s
}

#[test]
fn a_live_checkpoint_holds_presence_and_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let mb = Mailbox::init(dir.path()).unwrap();
    assert!(!mb.is_present("Executor"));
    let a = Checkpoint::open(dir.path(), "Executor").unwrap();
    let b = Checkpoint::open(dir.path(), "Executor").unwrap(); // several handles may coexist
    assert!(mb.is_present("Executor"));
    drop(a);
    assert!(mb.is_present("Executor"));
    drop(b);
    assert!(!mb.is_present("Executor"));
}

#[test]
fn pause_waits_through_another_pause_until_steer() {
    for mode in [WaitMode::Events, WaitMode::Poll(Duration::from_millis(20))] {
        let dir = tempfile::tempdir().unwrap();
        let mb = Mailbox::init(dir.path()).unwrap();
        let mut cp = Checkpoint::open(dir.path(), "Executor").unwrap();
        cp.wait_mode(mode);
        mb.send(&to_exec(SignalType::Pause, "hold")).unwrap();
        let got = cp.poll().unwrap();
        assert_eq!(got[0].signal_type, SignalType::Pause);
        let root = dir.path().to_path_buf();
        let sender = std::thread::spawn(move || {
            let mb = Mailbox::open(&root).unwrap();
            // A moment into the wait (a PAUSE at its first pass is handled alike).
            std::thread::sleep(Duration::from_millis(200));
            mb.send(&to_exec(SignalType::Pause, "still holding"))
                .unwrap();
            // The STEER comes once the wait has taken that PAUSE, in a round of its own: a
            // PAUSE that ended the wait would be returned alone.
            common::wait_until("the second PAUSE taken", Duration::from_secs(30), || {
                mb.pending().is_ok_and(|p| p.is_empty())
            });
            mb.send(&to_exec(SignalType::Steer, "new direction"))
                .unwrap();
        });
        let got = cp.wait_resume(Some(Duration::from_secs(30))).unwrap();
        sender.join().unwrap();
        let types: Vec<_> = got.iter().map(|s| s.signal_type).collect();
        assert_eq!(types, [SignalType::Pause, SignalType::Steer], "{mode:?}");
        assert_eq!(got[1].message.as_deref(), Some("new direction"));
    }
}

#[test]
fn wait_resume_times_out_empty() {
    let dir = tempfile::tempdir().unwrap();
    Mailbox::init(dir.path()).unwrap();
    let mut cp = Checkpoint::open(dir.path(), "Executor").unwrap();
    assert!(
        cp.wait_resume(Some(Duration::from_millis(100)))
            .unwrap()
            .is_empty()
    );
}

/// `wait_resume` gathers rounds before it returns: what an earlier round claimed is not
/// acknowledged by a later round's pass (a consumer killed while it waits gets it again).
#[test]
fn wait_resume_acknowledges_nothing_it_has_not_returned() {
    let dir = tempfile::tempdir().unwrap();
    let mb = Mailbox::init(dir.path()).unwrap();
    let root = dir.path().to_path_buf();
    let waiter = std::thread::spawn(move || {
        let mut cp = Checkpoint::open(&root, "Executor").unwrap();
        cp.wait_resume(Some(Duration::from_millis(1500))).unwrap()
    });
    common::wait_until(
        "the waiter holds its presence",
        Duration::from_secs(30),
        || mb.is_present("Executor"),
    );
    mb.send(&to_exec(SignalType::Pause, "hold")).unwrap();
    // Rounds after the PAUSE run now; none may acknowledge it.
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        mb.processed().unwrap().is_empty(),
        "acknowledged before it was returned"
    );
    let got = waiter.join().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].signal_type, SignalType::Pause);
}
