//! Checkpoint pass and durable send, beside the bare syscalls for the same work.
//!
//! Run: `cargo run --release -p sigbox-bench --bin checkpoint [-- DIR]` (DIR: where to put
//! the mailbox; default a temporary directory under the current one, so the numbers are for
//! the filesystem you care about, not tmpfs).

use std::fs::{self, File};
use std::hint::black_box;
use std::io::Write;

use sigbox::{Mailbox, NewSignal, SignalType, Target};
use sigbox_bench::{bare_read_dir, paired, row};

fn main() {
    let (parent, tmp) = sigbox_bench::workdir("sigbox-bench-");
    let root = tmp.path().join("signals");
    // Passes that really list (listing reuse off), and a handle that reuses proven listings.
    let mb = sigbox::MailboxOptions::new()
        .reuse_listings(false)
        .init(&root)
        .unwrap();
    let keeping = Mailbox::open(&root).unwrap();
    let inputs = root.join("inputs");

    println!("| operation | baseline p50 / p99 | sigbox p50 / p99 | ratio p50 / p99 | target |");
    println!("|---|---|---|---|---|");

    // Empty inbox: one checkpoint pass for the Executor, listing inputs/ (the reuse of §5.1
    // off), vs its floor: a pass must look in three places that change apart, inputs/, the
    // agent's claim slots (what a consumer that died left claimed) and the agent's buffer
    // (what the orchestrator moved there), and neither of the last two exists here.
    let claims = root.join("claimed").join("Executor");
    let buffer = root.join("buffered").join("Executor");
    let probe = |p: &std::path::Path| black_box(fs::symlink_metadata(p).is_ok());
    let (base, sb) = paired(
        20_000,
        1_000,
        || {
            bare_read_dir(&inputs);
            probe(&claims);
            probe(&buffer);
        },
        || {
            black_box(mb.pass("Executor", None).unwrap());
        },
    );
    row(
        "empty pass vs its floor (read_dir of inputs/, lstat of the agent's slots and buffer)",
        base,
        sb,
        "p50 <= 1.1x",
    );
    let (base, sb) = paired(
        20_000,
        1_000,
        || bare_read_dir(&inputs),
        || {
            black_box(mb.pass("Executor", None).unwrap());
        },
    );
    row("empty pass vs read_dir alone", base, sb, "-");

    // 10,000 pending signals for other agents: routed from names, no file opened.
    for i in 0..10_000 {
        let who = ["Planner", "Reviewer", "Questioner", "Librarian"][i % 4];
        mb.send(
            NewSignal::new(SignalType::Info)
                .target(Target::Agent(who.into()))
                .message("pending"),
        )
        .unwrap();
    }
    let (base, sb) = paired(
        400,
        20,
        || bare_read_dir(&inputs),
        || {
            let p = mb.pass("Executor", None).unwrap();
            assert!(p.delivered.is_empty());
        },
    );
    row(
        "pass, 10,000 foreign pending vs read_dir",
        base,
        sb,
        "p99 <= 1.3x",
    );

    // The same inbox, unchanged since the last pass, for a checkpoint loop that has claimed
    // before (it holds its claim slot): the kept listings are proven current by one lstat of
    // each of the three places (spec/mailbox.md §5.1), its own slot is known empty.
    keeping
        .send(
            NewSignal::new(SignalType::Steer)
                .target(Target::Agent("Executor".into()))
                .message("m"),
        )
        .unwrap();
    assert_eq!(keeping.pass("Executor", None).unwrap().delivered.len(), 1);
    keeping.ack("Executor").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    keeping.pass("Executor", None).unwrap();
    let floor = || {
        probe(&inputs);
        probe(&claims);
        probe(&buffer);
    };
    let (base, sb) = paired(20_000, 1_000, floor, || {
        black_box(keeping.pass("Executor", None).unwrap());
    });
    row(
        "repeated pass, unchanged inbox of 10,000 foreign pending vs its floor (3 lstats)",
        base,
        sb,
        "p50 <= 1.2x",
    );
    let (base, sb) = paired(
        2_000,
        20,
        || bare_read_dir(&inputs),
        || {
            black_box(keeping.pass("Executor", None).unwrap());
        },
    );
    row(
        "repeated pass, unchanged inbox of 10,000 foreign pending vs read_dir",
        base,
        sb,
        "-",
    );

    // Durable send vs write + fsync + rename + fsync(dir) in the same directories.
    let floor_dir = tmp.path().join("floor");
    fs::create_dir_all(floor_dir.join("tmp")).unwrap();
    fs::create_dir_all(floor_dir.join("inputs")).unwrap();
    let body = br#"{"id":"x","type":"STEER","target":"Executor","message":"m","created_at":"2026-11-22T10:15:00.123456Z"}
"#;
    let mut k = 0usize;
    let (base, sb) = paired(
        300,
        20,
        || {
            k += 1;
            let (stage, name) = sigbox_bench::floor_names(k);
            let t = floor_dir.join("tmp").join(stage);
            let d = floor_dir.join("inputs").join(name);
            let mut f = File::create_new(&t).unwrap();
            f.write_all(body).unwrap();
            f.sync_all().unwrap();
            fs::rename(&t, &d).unwrap();
            File::open(floor_dir.join("inputs"))
                .unwrap()
                .sync_all()
                .unwrap();
        },
        || {
            mb.send(
                NewSignal::new(SignalType::Steer)
                    .target(Target::Agent("Executor".into()))
                    .message("m"),
            )
            .unwrap();
        },
    );
    row(
        "durable send vs write+fsync+rename+fsync(dir)",
        base,
        sb,
        "p50 <= 1.15x",
    );
    println!();
    println!("filesystem: {}", parent);
}
