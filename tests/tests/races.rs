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
            // No consumer dies here: a mark would say one had the signal before, falsely.
            assert!(
                !line.starts_with("AGAIN "),
                "marked as a redelivery with no consumer killed: {line}"
            );
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

/// One consumer's stream: `(id, producer, seq)` per delivery.
fn deliveries(text: &str) -> Vec<(String, String, i64)> {
    text.lines()
        .map(|line| {
            // No consumer dies in the soak: a mark would say one had the signal before, falsely.
            assert!(
                !line.starts_with("AGAIN "),
                "marked as a redelivery with no consumer killed: {line}"
            );
            let (id, msg) = line.split_once(' ').unwrap();
            let (producer, seq) = msg.split_once(':').unwrap();
            (id.to_string(), producer.to_string(), seq.parse().unwrap())
        })
        .collect()
}

/// Several producers and consumers across several agents, broadcasts included, 20,000 signals:
/// each delivered exactly once per intended agent, FIFO per producer, nothing left behind.
#[test]
fn soak_twenty_thousand_signals_across_agents_with_broadcasts() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    sigbox::Mailbox::init(&root).unwrap();
    let done = tmp.path().join("done");
    let agents = ["Orchestrator", "Executor", "Executor", "Planner", "Planner"];
    let quorum = "Orchestrator,Executor,Planner";
    let start = std::time::Instant::now();
    let consumers: Vec<_> = agents
        .iter()
        .map(|a| {
            let c = Command::new(WORKER)
                .args(["consume", root.to_str().unwrap(), a, done.to_str().unwrap()])
                .env("RACE_QUORUM", quorum)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            (a.to_string(), c)
        })
        .collect();
    // Four producers, 5,000 each; every fifth signal a broadcast.
    let producers: Vec<_> = (0..4)
        .map(|p| {
            Command::new(WORKER)
                .args([
                    "produce",
                    root.to_str().unwrap(),
                    &format!("p{p}"),
                    "5000",
                    "Executor,Planner,Executor,ALL,Planner",
                ])
                .env("RACE_QUORUM", quorum)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut sent = HashSet::new();
    for p in producers {
        let out = p.wait_with_output().unwrap();
        assert!(out.status.success());
        for l in String::from_utf8(out.stdout).unwrap().lines() {
            sent.insert(l.strip_prefix("SENT ").unwrap().to_string());
        }
    }
    assert_eq!(sent.len(), 20_000);
    std::fs::write(&done, b"").unwrap();
    let mut per_agent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (agent, c) in consumers {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        let mut last: BTreeMap<String, i64> = BTreeMap::new();
        for (id, producer, seq) in deliveries(&String::from_utf8(out.stdout).unwrap()) {
            let prev = last.insert(producer.clone(), seq).unwrap_or(-1);
            assert!(seq > prev, "{agent}: {producer}:{seq} after {prev}");
            per_agent.entry(agent.clone()).or_default().push(id);
        }
    }
    let elapsed = start.elapsed();
    let ids_for = |target: &str| -> HashSet<&String> {
        sent.iter()
            .filter(|id| id.ends_with(&format!(".{target}")))
            .collect()
    };
    let broadcasts = ids_for("ALL");
    for (agent, want_targeted) in [("Executor", 8000), ("Planner", 8000), ("Orchestrator", 0)] {
        let got = &per_agent[agent];
        let unique: HashSet<&String> = got.iter().collect();
        assert_eq!(
            unique.len(),
            got.len(),
            "{agent}: something delivered twice"
        );
        let targeted: HashSet<&String> = ids_for(agent);
        assert_eq!(targeted.len(), want_targeted);
        let expected: HashSet<&String> = targeted.union(&broadcasts).copied().collect();
        assert_eq!(
            unique, expected,
            "{agent}: exactly its own signals and every broadcast"
        );
    }
    // Session end: broadcasts whose last ack came after the orchestrator's last pass are
    // archived by `finish`, and every one of them had its full quorum.
    let mut o = sigbox::MailboxOptions::new();
    o.quorum(quorum.split(','));
    let finished = o.open(&root).unwrap().finish("Orchestrator").unwrap();
    assert!(
        finished
            .iter()
            .all(|f| f.status == sigbox::Archived::Delivered),
        "{finished:?}"
    );
    // Nothing left behind: every broadcast archived, no staging files, no buffers.
    assert!(
        sigbox_tests::names(&root.join("inputs")).is_empty(),
        "{:?}",
        sigbox_tests::names(&root.join("inputs"))
    );
    assert!(sigbox_tests::names(&root.join("tmp")).is_empty());
    for d in sigbox_tests::names(&root.join("buffered")) {
        assert!(sigbox_tests::names(&root.join("buffered").join(d)).is_empty());
    }
    assert_eq!(sigbox_tests::names(&root.join("processed")).len(), 20_000);
    let total: usize = per_agent.values().map(Vec::len).sum();
    eprintln!(
        "soak: 20000 signals ({} broadcasts), {total} deliveries to 5 consumer processes of 3 agents in {:.1} s: {:.0} deliveries/s (durable)",
        broadcasts.len(),
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
}
