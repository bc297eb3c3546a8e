//! sigbox's relaxed claim against its own syscalls done bare: where a claim's time goes beyond
//! the kernel's part. Three sides, each on roots sigbox sent to (the same files and names):
//! sigbox's pass and acknowledgement; the same syscalls a claim makes (`renameat2` with
//! `RENAME_NOREPLACE` into the slot, `openat` with sigbox's flags, `fstat`, `read`, the body
//! parsed, the record written with `pwrite`, an `lstat` of its name in `processed/`, then
//! `renameat2` there), with no other work; and the plainest form of them (`renameat`, an
//! appending open, no `fstat`). Rounds of 100 claims, the sides interleaved.
//!
//! Run: `cargo run --release -p sigbox-bench --bin claimfloor -- DIR [ROUNDS]`. For a
//! profiler, one side alone: `PHASE=prepare claimfloor DIR N`, then `PHASE=0 claimfloor DIR N`
//! (sigbox) or `PHASE=1` (its syscalls bare), under `perf record` or `strace -c`.
use std::fs;
use std::hint::black_box;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use sigbox::{Durability, Mailbox, MailboxOptions, NewSignal, SignalType, Target};

fn to() -> NewSignal {
    let mut s = NewSignal::new(SignalType::Info);
    s.target(Target::Agent("Executor".into()))
        .message("pending");
    s
}

fn dirfd(p: &Path) -> OwnedFd {
    rustix::fs::open(
        p,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

fn bare(root: &Path, exact: bool) -> usize {
    let inputs = dirfd(&root.join("inputs"));
    let slot = dirfd(&root.join("claimed/Executor/0"));
    let processed = dirfd(&root.join("processed"));
    let mut names: Vec<_> = fs::read_dir(root.join("inputs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| !n.as_encoded_bytes().starts_with(b"."))
        .collect();
    names.sort();
    let mut buf = vec![0u8; 4096];
    for n in &names {
        if exact {
            rustix::fs::renameat_with(&inputs, n, &slot, n, RenameFlags::NOREPLACE).unwrap();
            let f = rustix::fs::openat(
                &slot,
                n,
                OFlags::RDWR
                    | OFlags::NOFOLLOW
                    | OFlags::NOATIME
                    | OFlags::NONBLOCK
                    | OFlags::CLOEXEC
                    | OFlags::NOCTTY,
                Mode::empty(),
            )
            .unwrap();
            let st = rustix::fs::fstat(&f).unwrap();
            let len = st.st_size as usize;
            let got = rustix::io::read(&f, &mut buf[..len + 1]).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&buf[..got]).unwrap();
            black_box(v);
            let rec = format!(
                ",\"handling_metadata\":{{\"handled_by\":\"Executor\",\"handled_at\":\"{}\",\"action_taken\":\"delivered\"}}}}\n",
                chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            );
            rustix::io::pwrite(&f, rec.as_bytes(), (got - 2) as u64).unwrap();
        } else {
            rustix::fs::renameat(&inputs, n, &slot, n).unwrap();
            let f = rustix::fs::openat(
                &slot,
                n,
                OFlags::RDWR | OFlags::APPEND | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            let got = rustix::io::read(&f, &mut buf).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&buf[..got]).unwrap();
            black_box(v);
            let rec = format!(
                ",\"handling_metadata\":{{\"handled_by\":\"Executor\",\"handled_at\":\"{}\",\"action_taken\":\"delivered\"}}}}\n",
                chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            );
            rustix::io::write(&f, rec.as_bytes()).unwrap();
        }
    }
    for n in &names {
        if exact {
            assert!(rustix::fs::statat(&processed, n, AtFlags::SYMLINK_NOFOLLOW).is_err());
            rustix::fs::renameat_with(&slot, n, &processed, n, RenameFlags::NOREPLACE).unwrap();
        } else {
            assert!(rustix::fs::statat(&processed, n, AtFlags::SYMLINK_NOFOLLOW).is_err());
            rustix::fs::renameat(&slot, n, &processed, n).unwrap();
        }
    }
    names.len()
}

fn main() {
    let base = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let rounds: usize = std::env::args().nth(2).map_or(30, |s| s.parse().unwrap());
    let phase = std::env::var("PHASE").unwrap_or_default();
    if phase.is_empty() {
        let tmp = tempfile::tempdir_in(base).unwrap();
        prepare(tmp.path(), rounds);
        claim(tmp.path(), rounds, None);
    } else {
        let root = Path::new(&base).join("fixed");
        if phase == "prepare" {
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(&root).unwrap();
            prepare(&root, rounds);
        } else {
            claim(&root, rounds, Some(phase.parse().unwrap()));
        }
    }
}

const PER: usize = 100;
const SIDES: usize = 3;

fn prepare(root: &Path, rounds: usize) {
    let mut o = MailboxOptions::new();
    o.link_claims(false);
    o.durability(Durability::RelaxedNoFsync);
    let mbs: Vec<Vec<Mailbox>> = (0..SIDES)
        .map(|s| {
            (0..rounds)
                .map(|r| o.init(root.join(format!("s{s}-{r}"))).unwrap())
                .collect()
        })
        .collect();
    for side in &mbs {
        for mb in side {
            mb.send(&to()).unwrap();
            assert_eq!(mb.pass("Executor", None).unwrap().delivered.len(), 1);
            assert_eq!(mb.ack("Executor").unwrap(), 1);
        }
    }
    for k in 0..rounds * PER {
        for side in &mbs {
            side[k % rounds].send(&to()).unwrap();
        }
    }
}

fn claim(root: &Path, rounds: usize, only: Option<usize>) {
    let mut o = MailboxOptions::new();
    o.link_claims(false);
    o.durability(Durability::RelaxedNoFsync);
    let mbs: Vec<Mailbox> = (0..rounds)
        .map(|r| o.open(root.join(format!("s0-{r}"))).unwrap())
        .collect();
    let mut total = [Duration::ZERO; SIDES];
    let mut each: Vec<[f64; SIDES]> = vec![[0.0; SIDES]; rounds];
    for r in 0..rounds {
        for i in 0..SIDES {
            let s = (r + i) % SIDES;
            if only.is_some_and(|o| o != s) {
                continue;
            }
            let t = Instant::now();
            let got = match s {
                0 => {
                    let n = mbs[r].pass("Executor", None).unwrap().delivered.len();
                    assert_eq!(mbs[r].ack("Executor").unwrap(), n);
                    n
                }
                1 => bare(&root.join(format!("s1-{r}")), true),
                _ => bare(&root.join(format!("s2-{r}")), false),
            };
            total[s] += t.elapsed();
            each[r][s] = t.elapsed().as_secs_f64();
            assert_eq!(got, PER);
        }
    }
    let mut r01: Vec<f64> = each.iter().map(|e| e[0] / e[1]).collect();
    r01.sort_by(f64::total_cmp);
    println!(
        "median of per-round ratios sigbox/bare: {:.3}",
        r01[r01.len() / 2]
    );
    let per_claim = |s: usize| total[s].as_secs_f64() * 1e6 / (rounds * PER) as f64;
    println!(
        "sigbox {:.1} us, bare same syscalls {:.1} us, bare plain syscalls {:.1} us; sigbox/bare {:.2}x, exact/plain {:.2}x",
        per_claim(0),
        per_claim(1),
        per_claim(2),
        per_claim(0) / per_claim(1),
        per_claim(1) / per_claim(2)
    );
}
