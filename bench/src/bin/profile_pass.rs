//! Repeats a checkpoint pass over 10,000 foreign pending signals, for a profiler.
//!
//! Run: `cargo run --release -p sigbox-bench --bin profile_pass [-- ITERATIONS]`.

use sigbox::{Mailbox, NewSignal, SignalType, Target};

fn main() {
    let n: usize = std::env::args().nth(1).map_or(200, |s| s.parse().unwrap());
    let tmp = tempfile::tempdir_in(".").unwrap();
    let mb = Mailbox::init(tmp.path()).unwrap();
    let mut opts = sigbox::MailboxOptions::new();
    opts.durability(sigbox::Durability::RelaxedNoFsync);
    let fast = opts.open(tmp.path()).unwrap();
    for _ in 0..10_000 {
        fast.send(NewSignal::new(SignalType::Info).target(Target::Agent("Planner".into())))
            .unwrap();
    }
    for _ in 0..n {
        std::hint::black_box(mb.pass("Executor", None).unwrap());
    }
}
