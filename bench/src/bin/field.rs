//! sigbox beside the floor (bare syscalls), the Rust `maildir` crate and `ls` from a shell, in
//! one run on one filesystem: checkpoint polls as the inbox grows, polls with a large history,
//! durable and relaxed send and claim, and the peak RSS of a poll over 100,000 pending.
//!
//! Run: `cargo run --release -p sigbox-bench --bin field [-- DIR]` (or `bench/run.sh`).
//! Prints one markdown table; each row gives the ratio to the floor and to the best peer.

use std::fs::{self, File};
use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use sigbox::{Durability, Mailbox, MailboxOptions, NewSignal, SignalType, Target};
use sigbox_bench::{Stats, bare_read_dir};

fn to(agent: &str) -> NewSignal {
    let mut s = NewSignal::new(SignalType::Info);
    s.target(Target::Agent(agent.into())).message("pending");
    s
}

/// Median of `n` runs of `f` (after 3 warm-up runs).
fn median(n: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..3 {
        f();
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        v.push(t.elapsed());
    }
    Stats::of(v).p50
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} us")
    }
}

struct Row {
    op: String,
    floor: Duration,
    sigbox: Duration,
    peers: Vec<(&'static str, Duration)>,
    note: &'static str,
}

impl Row {
    fn print(&self) {
        let best = self.peers.iter().map(|p| p.1).min();
        let peers: Vec<String> = self
            .peers
            .iter()
            .map(|(n, d)| format!("{n} {}", fmt(*d)))
            .collect();
        println!(
            "| {} | {} | {} | {} | {:.2}x | {} | {} |",
            self.op,
            fmt(self.floor),
            fmt(self.sigbox),
            if peers.is_empty() {
                "-".into()
            } else {
                peers.join("; ")
            },
            self.sigbox.as_secs_f64() / self.floor.as_secs_f64(),
            best.map_or("-".into(), |b| format!(
                "{:.2}x",
                self.sigbox.as_secs_f64() / b.as_secs_f64()
            )),
            self.note,
        );
    }
}

fn fill(relaxed: &Mailbox, maildir: &maildir::Maildir, n: usize) {
    for i in 0..n {
        relaxed
            .send(&to(["Planner", "Reviewer", "Questioner"][i % 3]))
            .unwrap();
        maildir.store_new(b"pending").unwrap();
    }
}

fn main() {
    let parent = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    if std::env::args().nth(1).as_deref() == Some("--rss-probe") {
        return rss_probe(&std::env::args().nth(2).unwrap());
    }
    let tmp = tempfile::Builder::new()
        .prefix("sigbox-field-")
        .tempdir_in(&parent)
        .unwrap();
    let root = tmp.path().join("signals");
    let fresh = MailboxOptions::new()
        .reuse_listings(false)
        .init(&root)
        .unwrap();
    let keeping = Mailbox::open(&root).unwrap();
    let relaxed = MailboxOptions::new()
        .durability(Durability::RelaxedNoFsync)
        .open(&root)
        .unwrap();
    let md = maildir::Maildir::from(tmp.path().join("maildir"));
    md.create_dirs().unwrap();
    let inputs = root.join("inputs");

    println!("| operation | floor | sigbox | peers | sigbox / floor | sigbox / best peer | note |");
    println!("|---|---|---|---|---|---|---|");
    let mut have = 0;
    for n in [0usize, 100, 1_000, 10_000, 100_000] {
        fill(&relaxed, &md, n - have);
        have = n;
        let runs = if n >= 10_000 { 30 } else { 300 };
        let floor = median(runs, || bare_read_dir(&inputs));
        let sb = median(runs, || {
            black_box(fresh.pass("Executor", None).unwrap());
        });
        let mdt = median(runs, || {
            black_box(md.list_new().count());
        });
        let ls = median(if n >= 10_000 { 10 } else { 50 }, || {
            let st = Command::new("ls")
                .arg(&inputs)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(st.success());
        });
        Row {
            op: format!("checkpoint poll, {n} pending for other agents"),
            floor,
            sigbox: sb,
            peers: vec![
                ("maildir list_new", mdt),
                ("`ls` process (upstream Ralph)", ls),
            ],
            note: "floor: read_dir",
        }
        .print();
        std::thread::sleep(Duration::from_millis(100));
        keeping.pass("Executor", None).unwrap();
        let kept = median(runs, || {
            black_box(keeping.pass("Executor", None).unwrap());
        });
        Row {
            op: format!("repeated poll, {n} pending, inbox unchanged"),
            floor,
            sigbox: kept,
            peers: vec![("maildir list_new", mdt)],
            note: "one lstat proves the kept listing current",
        }
        .print();
    }

    // History must not slow a poll: 100,000 files in processed/ (written directly: this
    // measures the poll, not the claims).
    let processed = root.join("processed");
    let empty_root = tmp.path().join("history");
    let hist = MailboxOptions::new()
        .reuse_listings(false)
        .init(&empty_root)
        .unwrap();
    let hist_inputs = empty_root.join("inputs");
    let before = median(300, || {
        black_box(hist.pass("Executor", None).unwrap());
    });
    for i in 0..100_000 {
        fs::write(
            empty_root
                .join("processed")
                .join(format!("signal.{i}.json")),
            b"{}",
        )
        .unwrap();
    }
    let after = median(300, || {
        black_box(hist.pass("Executor", None).unwrap());
    });
    let floor = median(300, || bare_read_dir(&hist_inputs));
    Row {
        op: "checkpoint poll, empty inbox, 100,000 files in processed/".into(),
        floor,
        sigbox: after,
        peers: vec![],
        note: if after.as_secs_f64() < before.as_secs_f64() * 1.5 {
            "history does not slow a poll"
        } else {
            "history slows the poll"
        },
    }
    .print();
    let _ = processed;

    // Send and claim, durable and relaxed.
    for durable in [true, false] {
        let dir = tmp.path().join(if durable { "d" } else { "r" });
        let mut o = MailboxOptions::new();
        if !durable {
            o.durability(Durability::RelaxedNoFsync);
        }
        let mb = o.init(dir.join("signals")).unwrap();
        let fl = dir.join("floor");
        fs::create_dir_all(fl.join("tmp")).unwrap();
        fs::create_dir_all(fl.join("inputs")).unwrap();
        fs::create_dir_all(fl.join("processed")).unwrap();
        let md = maildir::Maildir::from(dir.join("maildir"));
        md.create_dirs().unwrap();
        let body = br#"{"type":"INFO","target":"Executor","message":"m"}"#;
        let n = if durable { 300 } else { 3000 };
        let mut k = 0u64;
        let floor_send = median(n, || {
            k += 1;
            let t = fl.join(format!("tmp/{k}"));
            let d = fl.join(format!("inputs/{k}.json"));
            let mut f = File::create_new(&t).unwrap();
            f.write_all(body).unwrap();
            if durable {
                f.sync_all().unwrap();
            }
            fs::rename(&t, &d).unwrap();
            if durable {
                File::open(fl.join("inputs")).unwrap().sync_all().unwrap();
            }
        });
        let sb_send = median(n, || {
            mb.send(&to("Executor")).unwrap();
        });
        let md_send = median(n, || {
            md.store_new(body).unwrap();
        });
        let kind = if durable { "durable" } else { "relaxed" };
        Row {
            op: format!("send ({kind})"),
            floor: floor_send,
            sigbox: sb_send,
            peers: vec![("maildir store_new", md_send)],
            note: if durable {
                "floor: write+fsync+rename+fsync(dir); maildir fsyncs the file but not the directory (a crash can lose the name)"
            } else {
                "floor: write+rename"
            },
        }
        .print();
        // Claims: drain what the sends above left (the same count in each), per claim.
        let names: Vec<PathBuf> = fs::read_dir(fl.join("inputs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let per = |total: Duration, n: usize| total / n.max(1) as u32;
        let t = Instant::now();
        for src in &names {
            let dst = fl.join("processed").join(src.file_name().unwrap());
            fs::rename(src, &dst).unwrap();
            if durable {
                File::open(fl.join("processed"))
                    .unwrap()
                    .sync_all()
                    .unwrap();
                File::open(fl.join("inputs")).unwrap().sync_all().unwrap();
            }
        }
        let floor_claim = per(t.elapsed(), names.len());
        let t = Instant::now();
        let got = mb.pass("Executor", None).unwrap().delivered.len();
        let sb_claim = per(t.elapsed(), got);
        let ids: Vec<String> = md.list_new().map(|e| e.unwrap().id().to_string()).collect();
        let t = Instant::now();
        for id in &ids {
            md.move_new_to_cur(id).unwrap();
        }
        let md_claim = per(t.elapsed(), ids.len());
        assert_eq!(
            (names.len(), got),
            (ids.len(), ids.len()),
            "the same work for each"
        );
        Row {
            op: format!("claim ({kind})"),
            floor: floor_claim,
            sigbox: sb_claim,
            peers: vec![("maildir move_new_to_cur", md_claim)],
            note: if durable {
                "floor: rename+fsync both dirs; sigbox also appends its handling record (+1 fdatasync); maildir does not fsync"
            } else {
                "floor: rename"
            },
        }
        .print();
    }

    // Upstream mux's poll: a Python script counting .done/.fail files (as check-signals.py
    // does), a whole process each time, beside `sigbox mux check` on the same session.
    let session = tmp.path().join("mux/s1");
    fs::create_dir_all(session.join(".signals")).unwrap();
    for i in 0..50 {
        fs::write(
            session.join(format!(".signals/{i}.done")),
            b"status: success\n",
        )
        .unwrap();
    }
    let script = "import json,os,sys\nd=sys.argv[1]\nn=os.listdir(d)\nc=sum(f.endswith('.done') for f in n)\nf=sum(f.endswith('.fail') for f in n)\nprint(json.dumps({'complete':c,'failed':f,'expected':50,'status':'complete' if c+f>=50 and not f else 'incomplete'}))";
    let py = median(20, || {
        let st = Command::new("python3")
            .args(["-c", script])
            .arg(session.join(".signals"))
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    });
    let sigbox_bin = std::env::current_exe().unwrap().with_file_name("sigbox");
    let sb = median(20, || {
        let st = Command::new(&sigbox_bin)
            .args(["mux", "check", "s1", "--expected", "50", "--project-root"])
            .arg(tmp.path().join("mux"))
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    });
    println!(
        "| mux check of 50 signals, whole process | - | {} | python3 poll script (upstream) {} | - | {:.2}x | upstream runs check-signals.py under `uv run` (slower still) |",
        fmt(sb),
        fmt(py),
        sb.as_secs_f64() / py.as_secs_f64()
    );

    // Upstream Ralph's claim: `mv` from a shell, one process per signal.
    let mvdir = tmp.path().join("mv");
    fs::create_dir_all(mvdir.join("inputs")).unwrap();
    fs::create_dir_all(mvdir.join("processed")).unwrap();
    for i in 0..60 {
        fs::write(mvdir.join(format!("inputs/{i}.yaml")), b"type: INFO\n").unwrap();
    }
    let mut i = 0;
    let mv = median(50, || {
        let st = Command::new("mv")
            .arg(mvdir.join(format!("inputs/{i}.yaml")))
            .arg(mvdir.join("processed"))
            .status()
            .unwrap();
        assert!(st.success());
        i += 1;
    });
    println!(
        "| claim by `mv` from a shell (upstream Ralph), no fsync | - | - | mv {} | - | - | one process per signal |",
        fmt(mv)
    );

    // ext4 with `discard`: creating files right after many deletions is slow for a while.
    // Measure it, beside the same creation before the deletions; sigbox's claims delete
    // nothing and gc deletes at most 1,000 files per call, so producers are kept out of it.
    // One directory throughout (new directories may land in other block groups, where nothing
    // was freed): creation rate, then 20,000 files created and unlinked one by one, then the
    // creation rate again at once.
    let churn = tmp.path().join("churn");
    fs::create_dir_all(&churn).unwrap();
    let mut k = 0u64;
    let mut create = |n: usize| -> Duration {
        median(n, || {
            k += 1;
            File::create_new(churn.join(format!("keep{k}"))).unwrap();
        })
    };
    let before = create(500);
    for i in 0..20_000 {
        File::create_new(churn.join(format!("doomed{i}"))).unwrap();
    }
    for i in 0..20_000 {
        fs::remove_file(churn.join(format!("doomed{i}"))).unwrap();
    }
    let right_after = create(500);
    println!(
        "| create a file, right after 20,000 unlinks in the same directory, vs before | {} | {} | - | {:.2}x | - | uncontrolled: deletions by earlier runs on this filesystem weigh on both sides; sigbox claims unlink nothing, gc unlinks at most 1,000 per call |",
        fmt(before),
        fmt(right_after),
        right_after.as_secs_f64() / before.as_secs_f64()
    );

    // Peak RSS of a poll over 100,000 pending (a fresh process, so the peak is the poll's).
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--rss-probe", root.to_str().unwrap()])
        .output()
        .unwrap();
    let rss = String::from_utf8_lossy(&out.stdout).trim().to_string();
    println!(
        "| peak RSS of a poll over 100,000 pending (whole process) | - | {rss} | - | - | - | VmHWM of a fresh process |"
    );
    println!();
    println!(
        "filesystem: {parent}; the Goblin upstream polls every 5 s: 2.5 s mean detection latency (see `wait` for sigbox's)"
    );
}

fn rss_probe(root: &str) {
    let mb = MailboxOptions::new()
        .reuse_listings(false)
        .open(root)
        .unwrap();
    let p = mb.pass("Executor", None).unwrap();
    black_box(p);
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .map_or("?".to_string(), |l| {
            l.trim_start_matches("VmHWM:").trim().to_string()
        });
    println!("{hwm}");
}
