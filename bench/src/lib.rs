//! Shared measurement helpers for the benchmark programs.
#![deny(missing_docs)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};
use sigbox::{Durability, MailboxOptions};
use sigbox_client::Checkpoint;

/// Percentiles of a set of samples.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Number of samples.
    pub n: usize,
}

impl Stats {
    /// Computes percentiles (nearest rank).
    pub fn of(mut samples: Vec<Duration>) -> Stats {
        samples.sort();
        let at = |q: f64| {
            samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1]
        };
        Stats {
            p50: at(0.50),
            p99: at(0.99),
            n: samples.len(),
        }
    }
}

/// Runs `a` and `b` alternately `n` times each (after `warmup` rounds), so that both see the
/// same machine conditions, and returns their timings.
pub fn paired(n: usize, warmup: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (Stats, Stats) {
    for _ in 0..warmup {
        a();
        b();
    }
    let mut ta = Vec::with_capacity(n);
    let mut tb = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        a();
        ta.push(t.elapsed());
        let t = Instant::now();
        b();
        tb.push(t.elapsed());
    }
    (Stats::of(ta), Stats::of(tb))
}

/// The floor of a poll: list a directory and touch every name, nothing else.
pub fn bare_read_dir(dir: &std::path::Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        std::hint::black_box(e.unwrap().file_name());
    }
}

/// The directory to measure in: the first command-line argument (default: the current
/// directory), so the numbers are for the filesystem that matters, not tmpfs; and a fresh
/// temporary directory in it, named `prefix…`, removed when dropped.
pub fn workdir(prefix: &str) -> (String, tempfile::TempDir) {
    let parent = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let tmp = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&parent)
        .unwrap();
    (parent, tmp)
}

/// The `sigbox` binary as shipped: see [`shipped_bin`].
pub fn sigbox_bin() -> PathBuf {
    shipped_bin("sigbox")
}

/// One of the programs a user ships (`sigbox`, `sigbox-mcp`, `sigbox-ui`, `sigbox-bridge`):
/// in `$SIGBOX_BIN_DIR` when set (`bench/run.sh` sets it to where `cargo ship` puts them,
/// `target/<host>/release/`), else beside the running benchmark (`cargo build --release -p
/// <crate>`).
pub fn shipped_bin(name: &str) -> PathBuf {
    let bin = match std::env::var_os("SIGBOX_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => std::env::current_exe().unwrap().with_file_name(name),
    };
    assert!(
        bin.exists(),
        "{} not found: run `cargo ship -p <crate>` (README, \"Installing what you ship\") and set SIGBOX_BIN_DIR, \
         or `cargo build --release -p <crate>`",
        bin.display()
    );
    bin
}

/// Prints a table row: `what`, baseline and sigbox p50 / p99, their ratios, the target; and
/// records the row's verdict for the summary (see [`verdict`]).
pub fn row(what: &str, base: Stats, sigbox: Stats, target: &str) {
    verdict(
        what,
        ratio(sigbox.p50, base.p50),
        ratio(sigbox.p99, base.p99),
        target,
    );
    println!(
        "| {what} | {} / {} | {} / {} | {:.2}x / {:.2}x | {target} |",
        us(base.p50),
        us(base.p99),
        us(sigbox.p50),
        us(sigbox.p99),
        ratio(sigbox.p50, base.p50),
        ratio(sigbox.p99, base.p99),
    );
}

/// Formats a duration in microseconds.
pub fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

/// `a / b` as a ratio.
pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}

/// The `k`-th name a floor uses, shaped like sigbox's: `(staging name, signal name)`. The
/// floors do the same filesystem work as sigbox, name lengths included (a directory entry's
/// size and its hash depend on the name).
pub fn floor_names(k: usize) -> (String, String) {
    (
        format!("{}.{k:016x}.send.tmp", std::process::id()),
        format!(
            "signal.20261122T101500.{:06}Z.{:032x}.INFO.Executor.json",
            k % 1_000_000,
            k
        ),
    )
}

/// What a latency round renames into `inputs/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staged {
    /// A file as `sigbox send` writes it: a canonical name, its body's `id` the name.
    Sent,
    /// A file a person or an upstream writer drops: a YAML file under a name of its own,
    /// written elsewhere and renamed in (spec/mailbox.md §5: read at once).
    Dropped,
}

/// A file for the Executor, staged in `tmp/`, ready to be renamed into `inputs/`.
fn stage(root: &Path, k: usize, what: Staged) -> (PathBuf, PathBuf) {
    let (_, canonical) = floor_names(k);
    let (name, body) = match what {
        Staged::Sent => {
            let id = canonical.trim_end_matches(".json");
            let body =
                format!(r#"{{"id":"{id}","type":"INFO","target":"Executor","message":"ping"}}"#);
            (canonical.clone(), body)
        }
        Staged::Dropped => (
            format!("note-{k:08}.yaml"),
            "type: INFO\ntarget: Executor\nmessage: ping\n".to_string(),
        ),
    };
    let tmp = root.join("tmp").join(&name);
    fs::write(&tmp, body).unwrap();
    (tmp, root.join("inputs").join(name))
}

/// Detection latency of a blocked wait: from the rename of a signal into `root/inputs/` to its
/// delivery by [`Checkpoint::wait`] in another thread, beside a bare inotify watch on a
/// directory under `tmp` seeing the same rename. `rounds` measured rounds after 20 warm-up ones.
pub fn wait_latency(
    tmp: &Path,
    root: &Path,
    durability: Durability,
    rounds: usize,
    what: Staged,
) -> (Stats, Stats) {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<Instant>();
    let root2 = root.to_path_buf();
    let waiter = std::thread::spawn(move || {
        let mut opts = MailboxOptions::new();
        opts.durability(durability);
        let mut cp = Checkpoint::with_options(&opts, &root2, "Executor").unwrap();
        while go_rx.recv().is_ok() {
            let got = cp.wait(Some(Duration::from_secs(10))).unwrap();
            let t = Instant::now();
            assert_eq!(got.len(), 1);
            // Acted on: acknowledged now, not left for this handle's next pass (a later
            // round's handle would otherwise take it over as a redelivery).
            cp.ack().unwrap();
            done_tx.send(t).unwrap();
        }
    });
    // Baseline: a bare watch on the same directory sees the rename.
    let bare_root = tmp.join(format!("bare-{durability:?}"));
    fs::create_dir_all(bare_root.join("tmp")).unwrap();
    fs::create_dir_all(bare_root.join("inputs")).unwrap();
    let (ev_tx, ev_rx) = mpsc::channel::<Instant>();
    let mut watcher = notify::recommended_watcher(move |r: notify::Result<notify::Event>| {
        if let Ok(ev) = r
            && (matches!(
                ev.kind,
                notify::EventKind::Modify(notify::event::ModifyKind::Name(_))
            ) || matches!(ev.kind, notify::EventKind::Create(_)))
        {
            let _ = ev_tx.send(Instant::now());
        }
    })
    .unwrap();
    watcher
        .watch(&bare_root.join("inputs"), RecursiveMode::NonRecursive)
        .unwrap();
    let mut bare = Vec::new();
    let mut sb = Vec::new();
    // Names never repeat within a process: a signal whose name and body match one already in
    // processed/ is taken for an interrupted claim and finished as one (spec §9.6), a slower
    // path than a claim.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    for i in 0..rounds + 20 {
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (from, to) = stage(&bare_root, k, what);
        while ev_rx.try_recv().is_ok() {}
        let t0 = Instant::now();
        fs::rename(&from, &to).unwrap();
        let t1 = ev_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        fs::remove_file(&to).unwrap();

        let (from, to) = stage(root, k, what);
        go_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(2)); // let the waiter block
        let s0 = Instant::now();
        fs::rename(&from, &to).unwrap();
        let s1 = done_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        if i >= 20 {
            bare.push(t1 - t0);
            sb.push(s1 - s0);
        }
    }
    drop(go_tx);
    waiter.join().unwrap();
    (Stats::of(bare), Stats::of(sb))
}

/// A target a ratio can be checked against: `[p50|p99] (<=|≤|>=|≥) N x`, as the tables write
/// them (`p50 <= 1.2x`, `≤ 1.1x`, `p99 >= 0.6x`). `None` for a target in words.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Target {
    /// Checked on the p99 ratio (else the p50 one).
    pub p99: bool,
    /// At most `bound` (else at least).
    pub at_most: bool,
    /// The bound, a ratio.
    pub bound: f64,
}

impl Target {
    /// Reads a target as the tables write it.
    pub fn parse(text: &str) -> Option<Target> {
        let t = text.trim();
        let (p99, t) = match t.strip_prefix("p99") {
            Some(rest) => (true, rest.trim_start()),
            None => (false, t.strip_prefix("p50").unwrap_or(t).trim_start()),
        };
        let (at_most, t) = if let Some(r) = t.strip_prefix("<=").or_else(|| t.strip_prefix('≤')) {
            (true, r)
        } else if let Some(r) = t.strip_prefix(">=").or_else(|| t.strip_prefix('≥')) {
            (false, r)
        } else {
            return None;
        };
        let bound = t.trim().strip_suffix('x')?.trim().parse().ok()?;
        Some(Target {
            p99,
            at_most,
            bound,
        })
    }

    /// Whether a row with these ratios meets the target.
    pub fn met(&self, p50: f64, p99: f64) -> bool {
        let r = if self.p99 { p99 } else { p50 };
        if self.at_most {
            r <= self.bound
        } else {
            r >= self.bound
        }
    }
}

/// Records a row's verdict for `bench/run.sh`'s summary: one markdown line (the row, the
/// ratio its target is about, the target, met or missed) appended to the file named by
/// `SIGBOX_BENCH_SUMMARY`, when set. A target in words is listed without a verdict.
pub fn verdict(what: &str, p50: f64, p99: f64, target: &str) {
    let Some(path) = std::env::var_os("SIGBOX_BENCH_SUMMARY") else {
        return;
    };
    let line = match Target::parse(target) {
        Some(t) => format!(
            "| {what} | {:.2}x | {target} | {} |\n",
            if t.p99 { p99 } else { p50 },
            if t.met(p50, p99) { "met" } else { "**missed**" }
        ),
        None => format!("| {what} | {p50:.2}x | {target} | (no bound) |\n"),
    };
    use std::io::Write;
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(line.as_bytes()).unwrap();
}

#[cfg(test)]
mod tests {
    use super::Target;

    #[test]
    fn targets_read_as_the_tables_write_them() {
        // (target, (on p99, at most, bound))
        type Row = (&'static str, Option<(bool, bool, f64)>);
        let rows: &[Row] = &[
            ("p50 <= 2x", Some((false, true, 2.0))),
            ("≤ 1.1x", Some((false, true, 1.1))),
            ("p99 <= 1.3x", Some((true, true, 1.3))),
            (">= 0.6x", Some((false, false, 0.6))),
            ("p50 ≥ 0.6x", Some((false, false, 0.6))),
            ("far below read_dir", None),
            ("<= 2", None),
            ("", None),
        ];
        for (text, want) in rows {
            let got = Target::parse(text).map(|t| (t.p99, t.at_most, t.bound));
            assert_eq!(got, *want, "{text:?}");
        }
        let t = Target::parse("<= 1.2x").unwrap();
        assert!(t.met(1.2, 9.0) && !t.met(1.21, 0.0));
        let t = Target::parse("p99 >= 0.6x").unwrap();
        assert!(t.met(0.0, 0.6) && !t.met(9.0, 0.59));
    }
}
