//! Flux and Pilot parse throughput over a generated 100 MB stream with a few signals, beside a
//! bare newline scan (memchr) of the same bytes in the same run.
//!
//! Run: `cargo run --release -p sigbox-bench --bin streams [-- MEGABYTES]`.

use std::hint::black_box;
use std::time::Instant;

use sigbox::flux::FluxParser;
use sigbox::pilot::PilotParser;

fn stream(mb: usize) -> Vec<u8> {
    let lines = [
        "[info] compiling crate sigbox v0.1.0 (/work/main/broker) with 2 jobs\n",
        "{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"Looking at the parser now.\"}]}}\n",
        "test mailbox::tests::claim_is_exclusive ... ok\n",
        "    Finished `release` profile [optimized] target(s) in 12.34s\r\n",
        "\n",
    ];
    let mut out = Vec::with_capacity(mb * 1024 * 1024 + 4096);
    let mut i = 0usize;
    while out.len() < mb * 1024 * 1024 {
        out.extend_from_slice(lines[i % lines.len()].as_bytes());
        i += 1;
        if i.is_multiple_of(200_000) {
            out.extend_from_slice(
                b"{\"flux:signal\": {\"verdict\": \"proceed\", \"summary\": \"checkpoint\"}}\n",
            );
            out.extend_from_slice(b"```pilot-signal\n{\"v\": 2, \"type\": \"status\", \"phase\": \"IMPL\", \"progress\": 50}\n```\n");
        }
    }
    out
}

fn best_of<T>(rounds: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::MAX;
    let mut last = None;
    for _ in 0..rounds {
        let t = Instant::now();
        let r = f();
        best = best.min(t.elapsed().as_secs_f64());
        last = Some(r);
    }
    (best, last.expect("at least one round"))
}

fn main() {
    let mb: usize = std::env::args().nth(1).map_or(100, |s| s.parse().unwrap());
    let data = stream(mb);
    let size = data.len() as f64 / 1e6;
    let chunk = 64 * 1024;
    let (bare, lines) = best_of(5, || memchr::memchr_iter(b'\n', black_box(&data)).count());
    let (flux_t, flux_n) = best_of(5, || {
        let mut p = FluxParser::default();
        let mut n = 0;
        for c in data.chunks(chunk) {
            n += p.feed(c).len();
        }
        n + p.finish().len()
    });
    let (pilot_t, pilot_n) = best_of(5, || {
        let mut p = PilotParser::default();
        let mut n = 0;
        for c in data.chunks(chunk) {
            n += p.feed(c).len();
        }
        n + p.finish().len()
    });
    println!("stream: {size:.1} MB, {lines} lines, fed in 64 KiB chunks; best of 5 runs");
    println!();
    println!("| parser | MB/s | events | ratio to bare newline scan | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| bare newline scan (memchr) | {:.0} | - | 1.00 | |",
        size / bare
    );
    println!(
        "| Flux | {:.0} | {flux_n} | {:.2} | >= 0.5 |",
        size / flux_t,
        bare / flux_t
    );
    println!(
        "| Pilot | {:.0} | {pilot_n} | {:.2} | >= 0.5 |",
        size / pilot_t,
        bare / pilot_t
    );
}
