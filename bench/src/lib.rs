//! Shared measurement helpers for the benchmark programs.
#![deny(missing_docs)]

use std::time::{Duration, Instant};

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

/// Formats a duration in microseconds.
pub fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

/// `a / b` as a ratio.
pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}
