//! The Rust side of the Python benchmark (`bench/py_poll.py`): `Checkpoint::poll` on an empty
//! inbox at ROOT, N times after a warm-up; prints `{"p50_us", "p99_us"}`.

use std::time::Instant;

use sigbox_bench::Stats;
use sigbox_client::Checkpoint;

fn main() {
    let mut args = std::env::args().skip(1);
    let root = args.next().expect("ROOT");
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5000);
    let mut cp = Checkpoint::open(&root, "Executor").unwrap();
    for _ in 0..200 {
        assert!(cp.poll().unwrap().is_empty());
    }
    let mut t = Vec::with_capacity(n);
    for _ in 0..n {
        let s = Instant::now();
        assert!(cp.poll().unwrap().is_empty());
        t.push(s.elapsed());
    }
    let s = Stats::of(t);
    println!(
        "{{\"p50_us\": {:.3}, \"p99_us\": {:.3}}}",
        s.p50.as_secs_f64() * 1e6,
        s.p99.as_secs_f64() * 1e6
    );
}
