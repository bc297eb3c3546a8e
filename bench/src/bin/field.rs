//! sigbox beside the floor (bare syscalls), the Rust `maildir` crate, python-dirq, and the
//! upstream ways (`ls`, `mv` and shell redirection, a Python poll script, a 5 s polling loop),
//! in one run on one filesystem: checkpoint polls as the inbox grows, polls with a large
//! history, durable and relaxed send and claim, detection latency of a blocked wait, the same
//! through the `sigbox` CLI, and the peak RSS of a poll over 100,000 pending.
//!
//! Run: `cargo build --release -p sigbox-client && cargo run --release -p sigbox-bench --bin
//! field [-- DIR]` (or `bench/run.sh`, which also installs python-dirq). Prints one markdown
//! table; each row gives the ratio to the floor and to the best peer. Nothing is deleted until
//! the end (on ext4 without a journal, creating files right after mass deletions is slow: see
//! the `churn` benchmark).

use std::fs::{self, File};
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sigbox::{Durability, Mailbox, MailboxOptions, NewSignal, SignalType, Target};
use sigbox_bench::{Staged, Stats, bare_read_dir, sigbox_bin, wait_latency};

fn to(agent: &str) -> NewSignal {
    let mut s = NewSignal::new(SignalType::Info);
    s.target(Target::Agent(agent.into())).message("pending");
    s
}

/// Median of `n` runs of `f` (after 3 warm-up runs).
fn median(n: usize, mut f: impl FnMut()) -> Duration {
    median_with(n, || (), |()| f())
}

/// Median of `n` runs of `f`, each on what an untimed `setup` returns (after 3 warm-up runs).
fn median_with<T>(n: usize, mut setup: impl FnMut() -> T, mut f: impl FnMut(T)) -> Duration {
    for _ in 0..3 {
        f(setup());
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let x = setup();
        let t = Instant::now();
        f(x);
        v.push(t.elapsed());
    }
    Stats::of(v).p50
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} us")
    }
}

fn us(x: f64) -> Duration {
    Duration::from_secs_f64(x / 1e6)
}

/// One table row; `floor` and `sigbox` may be missing (`-`).
struct Row {
    op: String,
    floor: Option<Duration>,
    sigbox: Option<Duration>,
    peers: Vec<(String, Duration)>,
    note: String,
    reference: String,
}

impl Row {
    fn new(op: impl Into<String>, floor: Option<Duration>, sigbox: Option<Duration>) -> Row {
        Row {
            op: op.into(),
            floor,
            sigbox,
            peers: Vec::new(),
            note: String::new(),
            reference: String::new(),
        }
    }

    fn peer(mut self, name: impl Into<String>, d: Option<Duration>) -> Row {
        if let Some(d) = d {
            self.peers.push((name.into(), d));
        }
        self
    }

    /// A reference that is not a product a user would pick (so not a peer): named in the note
    /// with sigbox's ratio to it.
    fn like_for_like(mut self, name: &str, d: Option<Duration>) -> Row {
        if let (Some(d), Some(sb)) = (d, self.sigbox) {
            self.reference += &format!(
                "; like for like, {name}: {} (sigbox {:.2}x)",
                fmt(d),
                sb.as_secs_f64() / d.as_secs_f64()
            );
        }
        self
    }

    fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }

    fn print(&self) {
        let best = self.peers.iter().map(|p| p.1).min();
        let peers: Vec<String> = self
            .peers
            .iter()
            .map(|(n, d)| format!("{n} {}", fmt(*d)))
            .collect();
        let ratio = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => {
                let r = a.as_secs_f64() / b.as_secs_f64();
                if r >= 0.01 {
                    format!("{r:.2}x")
                } else {
                    format!("{r:.5}x")
                }
            }
            _ => "-".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {}{} |",
            self.op,
            self.floor.map_or("-".into(), fmt),
            self.sigbox.map_or("-".into(), fmt),
            if peers.is_empty() {
                "-".into()
            } else {
                peers.join("; ")
            },
            ratio(self.sigbox, self.floor),
            ratio(self.sigbox, best),
            self.note,
            self.reference,
        );
    }
}

/// python-dirq's figures, from bench/dirq_bench.py run on the same filesystem; `None` when
/// python3 or the dirq package is missing (bench/run.sh installs it).
struct Dirq {
    add: Duration,
    count_empty: Duration,
    count: Vec<(String, f64)>,
    claim: Duration,
}

fn run_dirq(dir: &Path) -> Result<Dirq, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/dirq_bench.py");
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let out = Command::new("python3")
        .arg(script)
        .arg(dir)
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("failed").to_string());
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("dirq_bench.py output: {e}"))?;
    let f = |x: &serde_json::Value| x.as_f64().ok_or("dirq_bench.py: missing figure");
    let counts = v["count_us"]
        .as_object()
        .ok_or("dirq_bench.py: no counts")?;
    Ok(Dirq {
        add: us(f(&v["add_us"])?),
        count_empty: us(f(&counts["0"])?),
        count: counts
            .iter()
            .map(|(k, x)| (k.clone(), x.as_f64().unwrap_or(f64::NAN)))
            .collect(),
        claim: us(f(&v["claim_us"])?),
    })
}

fn run_quiet(cmd: &mut Command) {
    let st = cmd.stdout(Stdio::null()).status().unwrap();
    assert!(st.success(), "{cmd:?} failed");
}

/// One `sigbox poll --as Executor` on `root`, a whole process.
fn cli_poll(bin: &Path, root: &Path) {
    run_quiet(Command::new(bin).arg("--root").arg(root).args([
        "poll",
        "--as",
        "Executor",
        "--discard",
    ]));
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
    if std::env::args().nth(1).as_deref() == Some("--rss-probe") {
        return rss_probe(&std::env::args().nth(2).unwrap());
    }
    // `field --claims DIR`: the send and claim rows alone (seconds instead of minutes), to set
    // two builds side by side in one period.
    if std::env::args().nth(1).as_deref() == Some("--claims") {
        let parent = std::env::args().nth(2).unwrap_or_else(|| ".".into());
        let tmp = tempfile::Builder::new()
            .prefix("sigbox-field-")
            .tempdir_in(&parent)
            .unwrap();
        let mut rows = Vec::new();
        for durable in [false, true] {
            send_and_claim(tmp.path(), durable, None, &mut rows);
        }
        link_claims(tmp.path(), &mut rows);
        println!(
            "| operation | floor | sigbox | peers | sigbox / floor | sigbox / best peer | note |"
        );
        println!("|---|---|---|---|---|---|---|");
        for r in &rows {
            r.print();
        }
        println!("filesystem: {parent}");
        return;
    }
    let (parent, tmp) = sigbox_bench::workdir("sigbox-field-");
    let bin = sigbox_bin();
    let mut rows = Vec::new();

    // python-dirq first: its files stay until the end, like everyone's.
    let dirq = run_dirq(&tmp.path().join("dirq"));
    let dq = dirq.as_ref().ok();

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
            run_quiet(Command::new("ls").arg(&inputs));
        });
        rows.push(
            Row::new(
                format!("checkpoint poll, {n} pending for other agents"),
                Some(floor),
                Some(sb),
            )
            .peer("maildir list_new", Some(mdt))
            .peer("dirq count, own queue", dq.map(|d| d.count_empty))
            .peer("`ls` process (upstream Ralph)", Some(ls))
            .note("floor: read_dir; with dirq (no routing) each agent has its own queue, so others' signals are never listed"),
        );
        std::thread::sleep(Duration::from_millis(100));
        keeping.pass("Executor", None).unwrap();
        let kept = median(runs, || {
            black_box(keeping.pass("Executor", None).unwrap());
        });
        rows.push(
            Row::new(
                format!("repeated poll, {n} pending, inbox unchanged"),
                Some(floor),
                Some(kept),
            )
            .peer("maildir list_new", Some(mdt))
            .peer("dirq count, own queue", dq.map(|d| d.count_empty))
            .note("one lstat proves the kept listing current"),
        );
        if n == 1_000 {
            // The same poll through the CLI, a whole process, beside `ls`.
            let cli = median(50, || cli_poll(&bin, &root));
            rows.push(
                Row::new(
                    "`sigbox poll`, whole process, 1000 pending for other agents",
                    None,
                    Some(cli),
                )
                .peer("`ls` process", Some(ls))
                .note("the CLI pays process start-up and the presence lock"),
            );
        }
    }

    // History must not slow a poll: 100,000 files in processed/ (written directly: this
    // measures the poll, not the claims).
    let hist_root = tmp.path().join("history");
    let hist = MailboxOptions::new()
        .reuse_listings(false)
        .init(&hist_root)
        .unwrap();
    let hist_inputs = hist_root.join("inputs");
    let before = median(300, || {
        black_box(hist.pass("Executor", None).unwrap());
    });
    for i in 0..100_000 {
        fs::write(
            hist_root.join("processed").join(format!("signal.{i}.json")),
            b"{}",
        )
        .unwrap();
    }
    let after = median(300, || {
        black_box(hist.pass("Executor", None).unwrap());
    });
    let floor = median(300, || bare_read_dir(&hist_inputs));
    rows.push(
        Row::new(
            "checkpoint poll, empty inbox, 100,000 files in processed/",
            Some(floor),
            Some(after),
        )
        .note(format!(
            "{} (before: {})",
            if after.as_secs_f64() < before.as_secs_f64() * 1.5 {
                "history does not slow a poll"
            } else {
                "history slows the poll"
            },
            fmt(before)
        )),
    );

    // Send and claim, durable and relaxed.
    for durable in [true, false] {
        send_and_claim(tmp.path(), durable, dq, &mut rows);
    }
    link_claims(tmp.path(), &mut rows);

    // Detection latency of a blocked wait, beside a bare inotify watch and the upstream 5 s
    // polling loop (a signal arrives at a uniformly random moment of the 5 s period: the delay
    // is uniform on [0, 5 s], median 2.5 s, p99 4.95 s).
    let wait_root = tmp.path().join("wait");
    Mailbox::init(&wait_root).unwrap();
    for (durability, kind) in [
        (Durability::Durable, "durable"),
        (Durability::RelaxedNoFsync, "relaxed"),
    ] {
        let (bare, sb) = wait_latency(tmp.path(), &wait_root, durability, 200, Staged::Sent);
        rows.push(
            Row::new(
                format!("blocked `wait`: rename into inputs/ -> delivered ({kind})"),
                Some(bare.p50),
                Some(sb.p50),
            )
            .peer("5 s polling loop (upstream Goblin, computed)", Some(Duration::from_millis(2500)))
            .note(format!(
                "floor: a bare inotify watch seeing the rename; p99: floor {}, sigbox {}, polling loop 4.95 s; maildir and dirq have no blocking wait",
                fmt(bare.p99),
                fmt(sb.p99)
            )),
        );
    }

    // The CLI: a durable send, a whole process, beside upstream Ralph's shell redirection; a
    // claim of one signal by `sigbox poll`, beside `mv`.
    let cli_root = tmp.path().join("cli");
    let cli_relaxed = MailboxOptions::new()
        .durability(Durability::RelaxedNoFsync)
        .init(&cli_root)
        .unwrap();
    let upstream = tmp.path().join("upstream");
    fs::create_dir_all(upstream.join("inputs")).unwrap();
    fs::create_dir_all(upstream.join("processed")).unwrap();
    let mut k = 0;
    let redirect = median(50, || {
        k += 1;
        let f = upstream.join(format!("inputs/signal-{k}.yaml"));
        run_quiet(Command::new("sh").arg("-c").arg(format!(
            "printf 'type: INFO\\ntarget: Executor\\nmessage: m\\n' > '{}'",
            f.display()
        )));
    });
    let cli_send = median(50, || {
        run_quiet(
            Command::new(&bin)
                .arg("--root")
                .arg(&cli_root)
                .args(["send", "INFO", "m", "--target", "Planner"]),
        );
    });
    rows.push(
        Row::new("send, whole process (durable)", None, Some(cli_send))
            .peer("shell `printf > inputs/F` (upstream Ralph)", Some(redirect))
            .note("the shell writes in place, with no fsync: a reader can see a partial file"),
    );
    let mut i = 0;
    let mv = median(50, || {
        i += 1;
        run_quiet(
            Command::new("mv")
                .arg(upstream.join(format!("inputs/signal-{i}.yaml")))
                .arg(upstream.join("processed")),
        );
    });
    let cli_claim = median_with(
        50,
        || cli_relaxed.send(&to("Executor")).unwrap(),
        |_| cli_poll(&bin, &cli_root),
    );
    rows.push(
        Row::new(
            "claim one signal, whole process (durable)",
            None,
            Some(cli_claim),
        )
        .peer("`mv` (upstream Ralph, no fsync)", Some(mv))
        .note("`sigbox poll` reads, records and fsyncs the claim"),
    );

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
        run_quiet(
            Command::new("python3")
                .args(["-c", script])
                .arg(session.join(".signals")),
        );
    });
    let sb = median(20, || {
        run_quiet(
            Command::new(&bin)
                .args(["mux", "check", "s1", "--expected", "50", "--project-root"])
                .arg(tmp.path().join("mux")),
        );
    });
    rows.push(
        Row::new("mux check of 50 signals, whole process", None, Some(sb))
            .peer("python3 poll script (upstream)", Some(py))
            .note("upstream runs check-signals.py under `uv run` (slower still)"),
    );

    // Peak RSS of a poll over 100,000 pending (a fresh process, so the peak is the poll's).
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--rss-probe", root.to_str().unwrap()])
        .output()
        .unwrap();
    let rss = String::from_utf8_lossy(&out.stdout).trim().to_string();

    println!("| operation | floor | sigbox | peers | sigbox / floor | sigbox / best peer | note |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        r.print();
    }
    println!(
        "| peak RSS of a poll over 100,000 pending (whole process) | - | {rss} | - | - | - | VmHWM of a fresh process |"
    );
    println!();
    println!("filesystem: {parent}");
    match &dirq {
        Ok(d) => {
            let c: Vec<String> = d
                .count
                .iter()
                .map(|(n, x)| format!("{n} queued {x:.1} us"))
                .collect();
            println!(
                "python-dirq (never fsyncs): add {}, lock+get+remove {}, count with {}",
                fmt(d.add),
                fmt(d.claim),
                c.join(", ")
            );
        }
        Err(e) => println!("python-dirq not measured: {e} (bench/run.sh installs it)"),
    }
    if std::env::var_os("SIGBOX_BENCH_KEEP").is_some() {
        let kept = tmp.keep();
        println!("kept {}", kept.display());
    }
}

/// Send and claim through sigbox, the floor and maildir (and dirq, relaxed only: it never
/// fsyncs), the same number of each.
///
/// The signals are spread over `rounds` inboxes per side, `per` in each: a checkpoint that
/// finds `per` signals. The claims then run round by round, each round timing every side on
/// its own inbox in an order that rotates, so that no side always runs first (right after
/// the sends, while the disk writes back) or last.
fn send_and_claim(tmp: &Path, durable: bool, dq: Option<&Dirq>, rows: &mut Vec<Row>) {
    let dir = tmp.join(if durable { "d" } else { "r" });
    // Durable rounds stay under one group commit (64).
    let (rounds, per) = if durable { (5, 60) } else { (30, 100) };
    let mut o = MailboxOptions::new();
    // Claims by rename, whatever the filesystem: claims by link have their own rows.
    o.link_claims(false);
    if !durable {
        o.durability(Durability::RelaxedNoFsync);
    }
    let mbs: Vec<Mailbox> = (0..rounds)
        .map(|r| o.init(dir.join(format!("signals{r}"))).unwrap())
        .collect();
    // A checkpoint loop's first pass makes the agent's claim slot (two new directories, each
    // synced with its parent); every later pass reuses it. Each mailbox makes its slot before
    // anything is timed, as the floor makes its in-flight directory in its set-up.
    for mb in &mbs {
        mb.send(&to("Executor")).unwrap();
        assert_eq!(mb.pass("Executor", None).unwrap().delivered.len(), 1);
        assert_eq!(mb.ack("Executor").unwrap(), 1);
    }
    let fls: Vec<PathBuf> = (0..rounds)
        .map(|r| {
            let fl = dir.join(format!("floor{r}"));
            for d in ["tmp", "inputs", "processed"] {
                fs::create_dir_all(fl.join(d)).unwrap();
            }
            fl
        })
        .collect();
    let mds: Vec<maildir::Maildir> = (0..rounds)
        .map(|r| {
            let md = maildir::Maildir::from(dir.join(format!("maildir{r}")));
            md.create_dirs().unwrap();
            md
        })
        .collect();
    // Relaxed only: maildir doing what a sigbox claim does besides the move and the read
    // (parse the body, append a handling record), the same work for a like-for-like figure.
    let mds_rec: Vec<maildir::Maildir> = (0..if durable { 0 } else { rounds })
        .map(|r| {
            let md = maildir::Maildir::from(dir.join(format!("maildir-rec{r}")));
            md.create_dirs().unwrap();
            md
        })
        .collect();
    let body = br#"{"type":"INFO","target":"Executor","message":"m"}"#;
    let n = rounds * per;
    let mut k = 0usize;
    let floor_send = median(n, || {
        k += 1;
        let fl = &fls[k % rounds];
        let (stage, name) = sigbox_bench::floor_names(k);
        let t = fl.join("tmp").join(stage);
        let d = fl.join("inputs").join(name);
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
    let mut k = 0usize;
    let sb_send = median(n, || {
        k += 1;
        mbs[k % rounds].send(&to("Executor")).unwrap();
    });
    let mut k = 0usize;
    let md_send = median(n, || {
        k += 1;
        mds[k % rounds].store_new(body).unwrap();
    });
    // The same number (n + 3 warm-up runs), untimed.
    for k in 1..=(if durable { 0 } else { n + 3 }) {
        mds_rec[k % rounds].store_new(body).unwrap();
    }
    let kind = if durable { "durable" } else { "relaxed" };
    rows.push(
        Row::new(format!("send ({kind})"), Some(floor_send), Some(sb_send))
            .peer("maildir store_new", Some(md_send))
            .peer(
                "dirq add (no fsync)",
                if durable { None } else { dq.map(|d| d.add) },
            )
            .note(if durable {
                "floor: write+fsync+rename+fsync(dir); maildir fsyncs the file but not the directory (a crash can lose the name)"
            } else {
                "floor: write+rename; maildir fsyncs the file even here"
            }),
    );

    // Claims: each side lists its inbox, moves and reads what it takes. The floor does the
    // syscalls sigbox's delivery contract needs (spec/mailbox.md §9.2), in the plainest order:
    // rename into an in-flight directory and read; when durable, fsync the in-flight
    // directory, then inputs/; hand over; rename into processed/ and fsync it.
    // Durable only: the floor's inboxes for the same claims with the handling record appended
    // to each file, as sigbox's contract has every processed file carry one (spec §9.2).
    let fls_rec: Vec<PathBuf> = (0..if durable { rounds } else { 0 })
        .map(|r| {
            let fl = dir.join(format!("floor-rec{r}"));
            for d in ["tmp", "inputs", "processed"] {
                fs::create_dir_all(fl.join(d)).unwrap();
            }
            fl
        })
        .collect();
    for k in 1..=(if durable { n + 3 } else { 0 }) {
        let fl = &fls_rec[k % rounds];
        let p = fl.join("inputs").join(sigbox_bench::floor_names(k).1);
        let mut f = File::create_new(&p).unwrap();
        f.write_all(body).unwrap();
        f.sync_all().unwrap();
    }
    for fl in &fls_rec {
        File::open(fl.join("inputs")).unwrap().sync_all().unwrap();
    }
    let floor_claim = |fl: &Path| floor_claim_with(fl, durable, false);
    let floor_rec_claim = |fl: &Path| floor_claim_with(fl, durable, true);
    // A delivery: the pass, then its acknowledgement.
    let sb_claim = |mb: &Mailbox| {
        let n = mb.pass("Executor", None).unwrap().delivered.len();
        assert_eq!(mb.ack("Executor").unwrap(), n);
        n
    };
    let md_claim = |md: &maildir::Maildir| -> usize {
        let ids: Vec<String> = md.list_new().map(|e| e.unwrap().id().to_string()).collect();
        for id in &ids {
            md.move_new_to_cur(id).unwrap();
            black_box(fs::read(md.path().join("cur").join(format!("{id}:2,"))).unwrap());
        }
        ids.len()
    };
    // Relaxed only: the same, then a second move of each file (into a directory of its own),
    // as sigbox's contract moves a claim twice: into the consumer's slot before it is handed
    // over (what lets a consumer that dies have it delivered again), then into processed/ on
    // its acknowledgement. The floor of a claim that keeps that promise, like for like.
    let mds_rec2: Vec<(maildir::Maildir, PathBuf)> = (0..if durable { 0 } else { rounds })
        .map(|r| {
            let md = maildir::Maildir::from(dir.join(format!("maildir-rec2-{r}")));
            md.create_dirs().unwrap();
            let done = dir.join(format!("maildir-rec2-{r}-done"));
            fs::create_dir_all(&done).unwrap();
            (md, done)
        })
        .collect();
    for k in 1..=(if durable { 0 } else { n + 3 }) {
        mds_rec2[k % rounds].0.store_new(body).unwrap();
    }
    let md_rec_claim = |md: &maildir::Maildir| -> usize {
        let ids: Vec<String> = md.list_new().map(|e| e.unwrap().id().to_string()).collect();
        for id in &ids {
            md.move_new_to_cur(id).unwrap();
            append_record(&md.path().join("cur").join(format!("{id}:2,")));
        }
        ids.len()
    };
    // Before the second move, each record's name is looked up where it goes, as sigbox names a
    // claim's record before handing it over, so that the path it shows is where the file will
    // be (a name taken there gets a fresh one).
    let md_rec2_claim = |(md, done): &(maildir::Maildir, PathBuf)| -> usize {
        let n = md_rec_claim(md);
        for e in fs::read_dir(md.path().join("cur")).unwrap() {
            let e = e.unwrap();
            let to = done.join(e.file_name());
            assert!(fs::symlink_metadata(&to).is_err(), "a fresh name");
            fs::rename(e.path(), to).unwrap();
        }
        n
    };
    let sides = if durable { 4 } else { 5 };
    let mut total = [Duration::ZERO; 5];
    let mut claimed = [0usize; 5];
    for r in 0..rounds {
        for i in 0..sides {
            let side = (r + i) % sides;
            let t = Instant::now();
            let got = match side {
                0 => floor_claim(&fls[r]),
                1 => sb_claim(&mbs[r]),
                2 => md_claim(&mds[r]),
                3 if durable => floor_rec_claim(&fls_rec[r]),
                3 => md_rec_claim(&mds_rec[r]),
                _ => md_rec2_claim(&mds_rec2[r]),
            };
            total[side] += t.elapsed();
            claimed[side] += got;
        }
    }
    // Each side sent n + 3 (the warm-up runs), all claimed.
    assert!(
        claimed[..sides].iter().all(|&c| c == claimed[0] && c >= n),
        "the same work for each: {claimed:?}"
    );
    let per_claim = |side: usize| total[side] / claimed[side] as u32;
    let ratio = |a: usize, b: usize| per_claim(a).as_secs_f64() / per_claim(b).as_secs_f64();
    if durable {
        let r = ratio(1, 0);
        sigbox_bench::verdict(
            &format!("claim (durable), {per} per pass, vs rename, read, 3 syncs"),
            r,
            r,
            "- (the contract also appends each file's handling record: next row)",
        );
        let r = ratio(1, 3);
        sigbox_bench::verdict(
            &format!(
                "claim (durable), {per} per pass, vs its floor (3 syncs, the record appended)"
            ),
            r,
            r,
            "p50 <= 1.2x",
        );
    } else {
        let r = ratio(1, 3);
        sigbox_bench::verdict(
            "claim (relaxed) vs maildir like for like (list, move, read, parse, append the record)",
            r,
            r,
            "- (one move; the contract's floor is two: next row)",
        );
        let r = ratio(1, 4);
        sigbox_bench::verdict(
            "claim (relaxed) vs maildir like for like with the contract's second move (its name checked first)",
            r,
            r,
            "p50 <= 1.1x",
        );
    }
    rows.push(
        Row::new(
            format!("claim ({kind}), {per} per pass, {rounds} passes"),
            Some(per_claim(0)),
            Some(per_claim(1)),
        )
        .peer("maildir list+move+read", Some(per_claim(2)))
        .like_for_like(
            "maildir list+move+read, then parse and append the same record",
            (!durable).then(|| per_claim(3)),
        )
        .like_for_like(
            "the same, then a second move, its name looked up first (sigbox moves a claim into its slot, then into processed/, under a record's name it checks before the hand-over)",
            (!durable).then(|| per_claim(4)),
        )
        .like_for_like(
            "the floor with each file's handling record appended",
            durable.then(|| per_claim(3)),
        )
        .peer(
            "dirq lock+get+remove (no fsync)",
            if durable { None } else { dq.map(|d| d.claim) },
        )
        .note(if durable {
            "a delivery = pass + acknowledgement; floor: list, rename into flight, read, fsync flight dir then inputs/, rename into processed/, fsync it (the 3 syncs of spec §9.2); sigbox: the same plus parsing and its handling record (appended, not synced); maildir does not fsync; passes interleaved"
        } else {
            "floor: list, rename, read; sigbox also parses the signal and appends its handling record; passes interleaved"
        }),
    );
    if durable {
        // A checkpoint usually finds one signal: one claim per pass, beside the floor's
        // rename + fsync of both directories + read of one file.
        let fl = &fls[0];
        let mut k = 0usize;
        let floor_one = median_with(
            100,
            || {
                k += 1;
                let p = fl
                    .join("inputs")
                    .join(sigbox_bench::floor_names(n + 1000 + k).1);
                // Sent durably, as a send leaves it.
                let mut f = File::create(&p).unwrap();
                f.write_all(body).unwrap();
                f.sync_data().unwrap();
                p
            },
            |src| {
                let flight = fl.join("claimed");
                let held = flight.join(src.file_name().unwrap());
                fs::rename(&src, &held).unwrap();
                black_box(fs::read(&held).unwrap());
                File::open(&flight).unwrap().sync_all().unwrap();
                File::open(fl.join("inputs")).unwrap().sync_all().unwrap();
                let dst = fl.join("processed").join(src.file_name().unwrap());
                fs::rename(&held, &dst).unwrap();
                File::open(fl.join("processed"))
                    .unwrap()
                    .sync_all()
                    .unwrap();
            },
        );
        let sb_one = median_with(
            100,
            || mbs[0].send(&to("Executor")).unwrap(),
            |_| {
                assert_eq!(mbs[0].pass("Executor", None).unwrap().delivered.len(), 1);
                assert_eq!(mbs[0].ack("Executor").unwrap(), 1);
            },
        );
        rows.push(
            Row::new("claim (durable), one signal per pass", Some(floor_one), Some(sb_one))
                .note("a delivery = pass + acknowledgement of a durably sent signal; floor: rename into flight+read, fsync flight dir, fsync inputs/, rename into processed/, fsync it (3 syncs, spec §9.2); sigbox: the same plus parsing and its handling record; maildir has no durable claim"),
        );
    }
}

/// Durable claims by link (spec/mailbox.md §9.10, for filesystems whose rename is not atomic
/// across directories) beside their floor, and sigbox's claims by rename in the same run: a
/// delivery (pass + acknowledgement) per signal, `per` signals per pass.
fn link_claims(tmp: &Path, rows: &mut Vec<Row>) {
    for per in [1usize, 60] {
        let dir = tmp.join(format!("link{per}"));
        let open = |name: &str, link: bool| {
            let mut o = MailboxOptions::new();
            o.link_claims(link);
            let mb = o.init(dir.join(name)).unwrap();
            // The agent's slot is made before anything is timed.
            mb.send(&to("Executor")).unwrap();
            assert_eq!(mb.pass("Executor", None).unwrap().delivered.len(), 1);
            assert_eq!(mb.ack("Executor").unwrap(), 1);
            mb
        };
        let (by_link, by_rename) = (open("link", true), open("rename", false));
        // One floor directory per side: the bare link+unlink, and the floor with the move
        // aside and the record appended.
        let floors = [dir.join("floor"), dir.join("floor-aside")];
        for (fl, d) in floors
            .iter()
            .flat_map(|f| ["inputs", "claimed", "processed"].map(|d| (f, d)))
        {
            fs::create_dir_all(fl.join(d)).unwrap();
        }
        let runs = if per == 1 { 100 } else { 15 };
        let mut k = 0usize;
        // The four sides in turn, their order rotated each round, each round's signals sent
        // (durably) before its claims are timed: 0 the floor, 1 the floor with the move aside,
        // 2 sigbox's claim by link, 3 sigbox's claim by rename. Three rounds of warm-up.
        let mut samples: [Vec<Duration>; 4] = Default::default();
        for round in 0..runs + 3 {
            for i in 0..4 {
                let side = (round + i) % 4;
                if side < 2 {
                    for _ in 0..per {
                        k += 1;
                        let p = floors[side]
                            .join("inputs")
                            .join(sigbox_bench::floor_names(k).1);
                        let mut f = File::create(&p).unwrap();
                        f.write_all(LINK_BODY).unwrap();
                        f.sync_data().unwrap();
                    }
                    File::open(floors[side].join("inputs"))
                        .unwrap()
                        .sync_all()
                        .unwrap();
                } else {
                    let mb = if side == 2 { &by_link } else { &by_rename };
                    for _ in 0..per {
                        mb.send(&to("Executor")).unwrap();
                    }
                }
                let t = Instant::now();
                if side < 2 {
                    assert_eq!(floor_link_claim(&floors[side], side == 1), per);
                } else {
                    let mb = if side == 2 { &by_link } else { &by_rename };
                    assert_eq!(mb.pass("Executor", None).unwrap().delivered.len(), per);
                    assert_eq!(mb.ack("Executor").unwrap(), per);
                }
                if round >= 3 {
                    samples[side].push(t.elapsed());
                }
            }
        }
        let [floor, floor_aside, link, rename] = samples.map(|v| Stats::of(v).p50);
        let each = |d: Duration| d / per as u32;
        if per > 1 {
            let r = link.as_secs_f64() / floor.as_secs_f64();
            sigbox_bench::verdict(
                &format!("claim by link (durable), {per} per pass, vs link+unlink"),
                r,
                r,
                "- (the contract moves each source aside first and appends each record: next row)",
            );
            let r = link.as_secs_f64() / floor_aside.as_secs_f64();
            sigbox_bench::verdict(
                &format!(
                    "claim by link (durable), {per} per pass, vs its floor with the move aside and the record appended"
                ),
                r,
                r,
                "p50 <= 1.3x",
            );
        }
        rows.push(
            Row::new(
                format!("claim by link (durable), {per} per pass"),
                Some(each(floor)),
                Some(each(link)),
            )
            .peer("sigbox claim by rename", Some(each(rename)))
            .like_for_like(
                "the floor with each source moved aside before its removal (§9.10) and each file's handling record appended (§9.2)",
                Some(each(floor_aside)),
            )
            .note("for filesystems whose rename is not atomic across directories (mailbox.md §9.10); a delivery = pass + acknowledgement; floor: list, link into flight, fsync it, unlink each source and read, fsync inputs/, rename into processed/, fsync it; sigbox also takes the rename lock and checks the link count, and moves each source aside and checks it before unlinking it (a name used again is never removed); the four sides interleaved, their order rotated each pass"),
        );
    }
}

/// What the claim-by-link floors send: the same body as sigbox's signals carry.
const LINK_BODY: &[u8] = br#"{"type":"INFO","target":"Executor","message":"m"}"#;

/// The floor of a durable claim by link (spec/mailbox.md §9.10), in the plainest order: list
/// `inputs/`, link each file into the in-flight directory, fsync it, remove each source (with
/// `aside`: moved aside first, then removed, as §9.10 has a claim do, and the record appended
/// to the claimed file; without: the file only read), fsync `inputs/`, rename each into
/// `processed/`, fsync it. How many it claimed.
fn floor_link_claim(fl: &Path, aside: bool) -> usize {
    let flight = fl.join("claimed");
    let names = paths_in(&fl.join("inputs"));
    let mut held = Vec::with_capacity(names.len());
    for src in &names {
        let dst = flight.join(src.file_name().unwrap());
        fs::hard_link(src, &dst).unwrap();
        held.push(dst);
    }
    File::open(&flight).unwrap().sync_all().unwrap();
    for (src, dst) in names.iter().zip(&held) {
        if aside {
            let twin = flight.join(".aside");
            fs::rename(src, &twin).unwrap();
            fs::remove_file(&twin).unwrap();
            append_record(dst);
        } else {
            fs::remove_file(src).unwrap();
            black_box(fs::read(dst).unwrap());
        }
    }
    File::open(fl.join("inputs")).unwrap().sync_all().unwrap();
    for f in &held {
        fs::rename(f, fl.join("processed").join(f.file_name().unwrap())).unwrap();
    }
    File::open(fl.join("processed"))
        .unwrap()
        .sync_all()
        .unwrap();
    names.len()
}

/// Reads a signal file, parses it and appends a handling record to it, as sigbox's claim does
/// (not synced, as sigbox's is not).
fn append_record(path: &Path) {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(path)
        .unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut bytes).unwrap();
    black_box(serde_json::from_slice::<serde_json::Value>(&bytes).unwrap());
    let record = serde_json::json!({"handling_metadata": {
        "handled_by": "Executor",
        "handled_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "action_taken": "delivered",
    }});
    let mut tail = b"\n".to_vec();
    serde_json::to_writer(&mut tail, &record).unwrap();
    tail.push(b'\n');
    f.write_all(&tail).unwrap();
}

/// The paths of what `dir` holds, as a bare listing returns them.
fn paths_in(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

/// The floor of a claim (spec/mailbox.md §9.2), in the plainest order: list `inputs/`, rename
/// each file into an in-flight directory and read it (with `record`: read it, parse it and
/// append its handling record, as sigbox does); when `durable`, fsync the in-flight directory,
/// then `inputs/`; then rename each into `processed/` and fsync it. How many it claimed.
fn floor_claim_with(fl: &Path, durable: bool, record: bool) -> usize {
    let flight = fl.join("claimed");
    fs::create_dir_all(&flight).unwrap();
    let names = paths_in(&fl.join("inputs"));
    let mut held = Vec::with_capacity(names.len());
    for src in &names {
        let dst = flight.join(src.file_name().unwrap());
        fs::rename(src, &dst).unwrap();
        if record {
            append_record(&dst);
        } else {
            black_box(fs::read(&dst).unwrap());
        }
        held.push(dst);
    }
    if durable {
        File::open(&flight).unwrap().sync_all().unwrap();
        File::open(fl.join("inputs")).unwrap().sync_all().unwrap();
    }
    for f in &held {
        fs::rename(f, fl.join("processed").join(f.file_name().unwrap())).unwrap();
    }
    if durable {
        File::open(fl.join("processed"))
            .unwrap()
            .sync_all()
            .unwrap();
    }
    names.len()
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
