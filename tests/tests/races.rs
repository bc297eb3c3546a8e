//! Guards exactly-once delivery and per-producer FIFO when several processes (not threads)
//! produce and consume the same agent's signals at the same time.

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, Stdio};

const WORKER: &str = env!("CARGO_BIN_EXE_race_worker");

fn run_race(producers: usize, per_producer: u64, consumers: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    sigbox::Mailbox::init(&root).unwrap();
    let done = tmp.path().join("done");
    let consumer_procs: Vec<_> = (0..consumers)
        .map(|_| {
            Command::new(WORKER)
                .args([
                    "consume",
                    root.to_str().unwrap(),
                    "Executor",
                    done.to_str().unwrap(),
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let producer_procs: Vec<_> = (0..producers)
        .map(|p| {
            Command::new(WORKER)
                .args([
                    "produce",
                    root.to_str().unwrap(),
                    &format!("p{p}"),
                    &per_producer.to_string(),
                    "Executor",
                ])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut p in producer_procs {
        assert!(p.wait().unwrap().success());
    }
    std::fs::write(&done, b"").unwrap();
    let mut seen = HashSet::new();
    let mut per_consumer_counts = Vec::new();
    for c in consumer_procs {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        // FIFO per producer: within one consumer's stream, each producer's sequence numbers
        // only go up (a consumer's passes see signals oldest first).
        let mut last: BTreeMap<String, i64> = BTreeMap::new();
        let mut n = 0;
        for line in text.lines() {
            let (id, msg) = line.split_once(' ').unwrap();
            let (producer, seq) = msg.split_once(':').unwrap();
            let seq: i64 = seq.parse().unwrap();
            let prev = last.insert(producer.to_string(), seq).unwrap_or(-1);
            assert!(seq > prev, "{producer}: {seq} delivered after {prev}");
            assert!(seen.insert(id.to_string()), "{id} delivered twice");
            n += 1;
        }
        per_consumer_counts.push(n);
    }
    let total = producers as u64 * per_producer;
    assert_eq!(
        seen.len() as u64,
        total,
        "every signal delivered exactly once"
    );
    assert!(sigbox_tests::names(&root.join("inputs")).is_empty());
    assert_eq!(
        sigbox_tests::names(&root.join("processed")).len() as u64,
        total
    );
    eprintln!("{total} signals, {consumers} consumer processes: {per_consumer_counts:?}");
}

#[test]
fn four_consumer_processes_two_thousand_signals() {
    run_race(2, 1000, 4);
}
