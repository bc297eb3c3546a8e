//! Repeats a checkpoint pass, for a profiler or `strace -c`.
//!
//! Run: `cargo run --release -p sigbox-bench --bin profile_pass [-- ITERATIONS [KIND]]`, KIND
//! one of `foreign` (the default: 10,000 pending for another agent, each pass lists them),
//! `empty` (an empty inbox, each pass lists it) or `repeated` (10,000 foreign pending, the
//! handle reusing its proven listing, as a checkpoint loop's does), or `claims` / `durable`
//! (each iteration sends 100 signals to the agent, then one pass claims them and an ack
//! settles them; relaxed durability, or durable), or `link` (durable claims by link, §9.10).

use sigbox::{Mailbox, MailboxOptions, NewSignal, SignalType, Target};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(200, |s| s.parse().unwrap());
    let kind = args.next().unwrap_or_else(|| "foreign".into());
    let tmp = tempfile::tempdir_in(".").unwrap();
    if kind == "claims" || kind == "durable" || kind == "link" {
        let mut opts = MailboxOptions::new();
        opts.link_claims(kind == "link");
        if kind == "claims" {
            opts.durability(sigbox::Durability::RelaxedNoFsync);
        }
        let mb = opts.init(tmp.path()).unwrap();
        let per = if kind == "claims" { 100 } else { 60 };
        for i in 0..=n {
            for _ in 0..per {
                mb.send(NewSignal::new(SignalType::Info).target(Target::Agent("Executor".into())))
                    .unwrap();
            }
            if i == 1 {
                eprintln!("passes start");
            }
            let got = mb.pass("Executor", None).unwrap().delivered.len();
            assert_eq!(mb.ack("Executor").unwrap(), got);
        }
        eprintln!("passes end");
        return;
    }
    let mb = match kind.as_str() {
        "repeated" => Mailbox::init(tmp.path()).unwrap(),
        "empty" | "foreign" => MailboxOptions::new()
            .reuse_listings(false)
            .init(tmp.path())
            .unwrap(),
        other => {
            panic!("unknown kind {other:?}: foreign, empty, repeated, claims, durable or link")
        }
    };
    if kind != "empty" {
        let mut opts = MailboxOptions::new();
        opts.durability(sigbox::Durability::RelaxedNoFsync);
        let fast = opts.open(tmp.path()).unwrap();
        for _ in 0..10_000 {
            fast.send(NewSignal::new(SignalType::Info).target(Target::Agent("Planner".into())))
                .unwrap();
        }
    }
    // The first pass makes what a checkpoint loop's first pass makes (its claim slot, with one
    // signal); a repeated pass needs its listing proven older than the clock's tick.
    mb.send(NewSignal::new(SignalType::Steer).target(Target::Agent("Executor".into())))
        .unwrap();
    assert_eq!(mb.pass("Executor", None).unwrap().delivered.len(), 1);
    mb.ack("Executor").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    mb.pass("Executor", None).unwrap();
    eprintln!("passes start");
    for _ in 0..n {
        std::hint::black_box(mb.pass("Executor", None).unwrap());
    }
    eprintln!("passes end");
}
