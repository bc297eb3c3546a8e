//! Guards against treating a moment as a property of a file: a pass that runs out of file
//! descriptors in the middle of its claims hands over what it committed, leaves every other
//! signal where it was, and quarantines nothing; the next pass, with descriptors free again,
//! delivers the rest, each signal once. (The test fills its process's descriptor table: it runs
//! in a process of its own, never beside the other tests of the suite.)

use std::collections::HashSet;
use std::fs::File;

use sigbox::{Mailbox, NewSignal, SignalType, Target};

use crate::shared_suite::in_own_process;

/// Opens `/dev/null` until the table is full, then closes `free` of them again. The soft limit
/// is first lowered to 256, so that filling the table is quick whatever the machine allows.
fn fill_descriptor_table(free: usize) -> Vec<File> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current.is_none_or(|n| n > 256) {
        limit.current = Some(256);
        setrlimit(Resource::Nofile, limit).expect("lowering a soft limit is always allowed");
    }
    let mut held = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(24), "expected EMFILE, got {e}");
                break;
            }
        }
        assert!(held.len() <= 256, "the descriptor limit was not reached");
    }
    held.truncate(held.len() - free);
    held
}

#[test]
fn running_out_of_descriptors_mid_pass_loses_and_quarantines_nothing() {
    in_own_process(
        module_path!(),
        "running_out_of_descriptors_mid_pass_loses_and_quarantines_nothing",
        || {
            let tmp = tempfile::tempdir().unwrap();
            let mb = Mailbox::init(tmp.path().join("signals")).unwrap();
            let mut sent = HashSet::new();
            for i in 0..20 {
                let mut s = NewSignal::new(SignalType::Steer);
                s.target(Target::Agent("Executor".into()))
                    .message(format!("m{i}"));
                sent.insert(mb.send(&s).unwrap());
            }
            // Another handle: its first pass below is the one short of descriptors.
            let reader = Mailbox::open(mb.root()).unwrap();
            let mut delivered = HashSet::new();
            let mut short_passes = 0;
            // Six descriptors, then fewer, down to none. A pass needs the claim slot's lock (held by
            // the handle from its first claim on), the directories the commit needs (the slot,
            // inputs/), where claims move by link the rename lock's directory (spec/mailbox.md
            // §9.10), and, for a moment, each claimed file; it holds no claimed file open until its
            // commit, so a pass short of descriptors fails at one fixed point, never after claims
            // have piled up.
            let mut failed = 0;
            for free in [6, 5, 4, 3, 2, 1, 0] {
                let held = fill_descriptor_table(free);
                let result = reader.pass("Executor", None);
                drop(held);
                reader.ack("Executor").unwrap();
                match result {
                    Ok(pass) => {
                        failed += usize::from(pass.interrupted.is_some());
                        assert!(pass.rejected.is_empty(), "{:?}", pass.rejected);
                        for s in pass.delivered {
                            assert!(delivered.insert(s.id), "delivered twice");
                        }
                    }
                    Err(e) => {
                        let io = e.io_error().expect("an OS error");
                        assert_eq!(io.raw_os_error(), Some(24), "{e}");
                        failed += 1;
                    }
                }
                short_passes += 1;
                assert!(
                    mb.rejected().unwrap().is_empty(),
                    "a signal was quarantined for the moment's lack of descriptors"
                );
                // Everything is delivered or still pending: nothing sits claimed and undelivered.
                let processed: HashSet<String> = mb
                    .processed()
                    .unwrap()
                    .into_iter()
                    .map(|s| s.unwrap().id)
                    .collect();
                assert_eq!(processed, delivered, "a claim was made and not handed over");
                let pending: HashSet<String> =
                    mb.pending().unwrap().into_iter().map(|p| p.id).collect();
                assert_eq!(pending.len() + delivered.len(), sent.len());
            }
            assert_eq!(short_passes, 7);
            assert!(
                failed > 0,
                "every pass had descriptors enough: the test proves nothing"
            );
            assert!(
                !delivered.is_empty(),
                "no short pass got as far as a claim: the test proves nothing"
            );
            let rest = reader.pass("Executor", None).unwrap();
            reader.ack("Executor").unwrap();
            assert!(rest.interrupted.is_none());
            for s in rest.delivered {
                assert!(delivered.insert(s.id), "delivered twice");
            }
            assert_eq!(delivered, sent);
        },
    );
}
