//! Producers after mass deletions. On ext4 without a journal, the inode allocator skips every
//! inode freed in the last 60 seconds (`recently_deleted` in the kernel's ialloc.c), reading its
//! inode-table entry for each: right after many unlinks, every file creation scans them all.
//! With a journal that check is off; `discard` plays no part in it.
//!
//! This measures what a producer (a relaxed `send`: create, write, rename) costs on the
//! filesystem holding DIR: at rest; after sigbox consumed 20,000 signals (claims are renames:
//! nothing is freed); after sigbox's gc removed 1,000 stale staging files (its per-call cap);
//! and after a consumer that deletes what it takes (as maildir's `delete`, dirq's `remove` or
//! an `rm` of handled files do) removed 20,000, then as those deletions age.
//!
//! Run: `cargo run --release -p sigbox-bench --bin churn -- DIR` (or `bench/run.sh`, which,
//! as root, runs it on fresh ext4 images with and without a journal and with and without
//! `discard`). Takes 1 to 8 minutes: the last phase samples every 30 s until producers are
//! back to their speed at rest.

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use sigbox::{Durability, Mailbox, MailboxOptions, NewSignal, SignalType, Target};
use sigbox_bench::{Stats, ratio, us};

const SAMPLE: usize = 1_000;
const MASS: usize = 20_000;

fn sends(mb: &Mailbox, n: usize) -> Stats {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = NewSignal::new(SignalType::Info);
        s.target(Target::Agent("Executor".into())).message("m");
        let t = Instant::now();
        mb.send(&s).unwrap();
        v.push(t.elapsed());
    }
    Stats::of(v)
}

/// The mount holding `dir`, from /proc/self/mountinfo: (source, fstype, options), and whether
/// an ext4 filesystem has a journal (from /sys/fs/ext4/<dev>/journal_task).
fn describe(dir: &Path) -> String {
    let dev = fs::metadata(dir).map(|m| m.dev()).unwrap_or(0);
    let (major, minor) = (((dev >> 8) & 0xfff) as u32, (dev & 0xff) as u32);
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 10 || f[2] != format!("{major}:{minor}") {
            continue;
        }
        let Some(sep) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        let (fstype, source, super_opts) = (f[sep + 1], f[sep + 2], f[sep + 3]);
        let journal = if fstype == "ext4" {
            let name = source.rsplit('/').next().unwrap_or(source);
            match fs::read_to_string(format!("/sys/fs/ext4/{name}/journal_task")) {
                Ok(t) if t.trim() == "<none>" => ", no journal",
                Ok(_) => ", journal",
                Err(_) => "",
            }
        } else {
            ""
        };
        let discard = if super_opts.split(',').any(|o| o == "discard") || f[5].contains("discard") {
            ", discard"
        } else {
            ", no discard"
        };
        return format!("{fstype} ({source}{journal}{discard}) at {}", f[4]);
    }
    "unknown filesystem".into()
}

fn main() {
    let (_, tmp) = sigbox_bench::workdir("sigbox-churn-");
    let root = tmp.path().join("signals");
    let mut opts = MailboxOptions::new();
    opts.durability(Durability::RelaxedNoFsync)
        .reuse_listings(false);
    let mb = opts.init(&root).unwrap();

    println!("filesystem: {}", describe(tmp.path()));
    println!();
    println!("| producer's relaxed send, {SAMPLE} in a row | p50 | p99 | p50 vs at rest |");
    println!("|---|---|---|---|");
    sends(&mb, SAMPLE); // warm-up: the first files of a fresh directory cost more
    mb.pass("Executor", None).unwrap();
    let rest = sends(&mb, SAMPLE);
    let row = |what: &str, s: Stats| {
        println!(
            "| {what} | {} | {} | {:.2}x |",
            us(s.p50),
            us(s.p99),
            ratio(s.p50, rest.p50)
        );
    };
    row("at rest", rest);
    // Drain what the sample sent, so the consumer phases start from an empty inbox.
    mb.pass("Executor", None).unwrap();

    // sigbox's consumer: 20,000 signals sent and claimed (renames into processed/).
    sends(&mb, MASS);
    let got = mb.pass("Executor", None).unwrap().delivered.len();
    assert_eq!(got, MASS);
    row(
        "right after sigbox consumed 20,000 signals",
        sends(&mb, SAMPLE),
    );
    mb.pass("Executor", None).unwrap();

    // sigbox's gc at its per-call cap: 1,000 stale staging files.
    for i in 0..1_000 {
        File::create_new(root.join("tmp").join(format!("stale{i}.tmp"))).unwrap();
    }
    let removed = mb.gc(Duration::ZERO, 1_000).unwrap();
    assert_eq!(removed, 1_000);
    row(
        "right after `sigbox gc` removed 1,000 staging files",
        sends(&mb, SAMPLE),
    );
    mb.pass("Executor", None).unwrap();

    // A consumer that deletes what it takes: 20,000 files in the same filesystem, unlinked.
    let q = tmp.path().join("deleting-queue");
    fs::create_dir(&q).unwrap();
    for i in 0..MASS {
        fs::write(q.join(format!("{i}")), b"pending").unwrap();
    }
    for i in 0..MASS {
        fs::remove_file(q.join(format!("{i}"))).unwrap();
    }
    let deleted_at = Instant::now();
    row(
        "right after a deleting consumer removed 20,000 messages",
        sends(&mb, SAMPLE),
    );
    // Then every 30 s until two samples in a row are back within 1.25x of at rest, or 7 min
    // have passed (the kernel's window is 60 s, 360 s while the inode table is not written).
    let mut calm = 0;
    for at in (30u64..=420).step_by(30) {
        if let Some(wait) = Duration::from_secs(at).checked_sub(deleted_at.elapsed()) {
            std::thread::sleep(wait);
        }
        mb.pass("Executor", None).unwrap();
        let s = sends(&mb, SAMPLE);
        row(&format!("{at} s after those deletions"), s);
        calm = if ratio(s.p50, rest.p50) <= 1.25 {
            calm + 1
        } else {
            0
        };
        if calm == 2 {
            break;
        }
    }
}
