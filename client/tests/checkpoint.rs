//! Guards the checkpoint library: presence while a handle lives, and PAUSE handling that
//! blocks until RESUME, ABORT or a new STEER/INFO, across threads.

use std::time::Duration;

use sigbox::{Mailbox, NewSignal, SignalType, Target};
use sigbox_client::{Checkpoint, WaitMode};

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
            std::thread::sleep(Duration::from_millis(200));
            mb.send(&to_exec(SignalType::Pause, "still holding"))
                .unwrap();
            std::thread::sleep(Duration::from_millis(200));
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
