//! Three "hosts" (separate mailbox roots, each with its own `sigbox-bridge` process and its own
//! agents) joined through a real `nats-server`: every signal is delivered exactly once to each
//! agent it is for, in each producer's order, while bridges are SIGKILLed mid-relay, the server
//! is SIGKILLed and restarted mid-stream, and a node of a three-node cluster is lost.
//! spec/bridge.md says what is promised; these tests hold it to that.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{Host, Server};
use sigbox::{NewSignal, SignalType, Target};

/// Where each agent runs: host index → agents.
const AGENTS: [&[&str]; 3] = [
    &["Orchestrator", "Executor"],
    &["Planner", "Reviewer"],
    &["Questioner", "Librarian"],
];

fn all_agents() -> Vec<&'static str> {
    AGENTS.iter().flat_map(|a| a.iter().copied()).collect()
}

/// How a signal travels, for the order check: each producer's order holds per stream
/// subject (spec/bridge.md §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Class {
    Targeted,
    Orchestrator,
    Broadcast,
}

/// What producer `p` sends as its `seq`th signal: type, target, class.
fn plan(p: usize, seq: usize) -> (SignalType, Target, Class) {
    let agents = all_agents();
    if seq % 50 == 7 {
        (SignalType::Info, Target::All, Class::Broadcast)
    } else if seq % 40 == 3 {
        // APPROVE is the orchestrator's whatever its target.
        (
            SignalType::Approve,
            Target::Agent("Executor".into()),
            Class::Orchestrator,
        )
    } else if seq % 25 == 11 {
        (SignalType::Info, Target::None, Class::Orchestrator)
    } else {
        let a = agents[(seq * 7 + p) % agents.len()];
        (SignalType::Steer, Target::Agent(a.into()), Class::Targeted)
    }
}

/// Who is meant to receive a signal.
fn receivers(target: &Target, ty: SignalType) -> Vec<&'static str> {
    match target {
        _ if ty.is_approval() => vec!["Orchestrator"],
        Target::All => all_agents(),
        Target::None => vec!["Orchestrator"],
        Target::Agent(a) => vec![all_agents().into_iter().find(|x| x == a).unwrap()],
    }
}

/// One delivery an agent received: (producer, seq, class, redelivery count, id).
type Got = (usize, usize, Class, u32, String);

/// An agent: holds its presence on its host for the whole run and takes its signals until it
/// has `expected` of them or the deadline passes.
fn agent(
    root: &std::path::Path,
    name: &'static str,
    expected: usize,
    deadline: Instant,
    done: Arc<AtomicBool>,
) -> thread::JoinHandle<Vec<Got>> {
    let mb = common::open(root);
    thread::spawn(move || {
        let _present = mb.presence(name).unwrap();
        let state = (name == "Orchestrator").then_some("KNOWLEDGE_APPROVAL");
        let mut got = Vec::new();
        while Instant::now() < deadline && !(got.len() >= expected && done.load(Ordering::Relaxed))
        {
            let pass = match mb.pass(name, state) {
                Ok(p) => p,
                Err(e) => panic!("{name}: pass failed: {e}"),
            };
            if pass.delivered.is_empty() {
                thread::sleep(Duration::from_millis(5));
            }
            for s in pass.delivered {
                let msg = s.message.clone().unwrap_or_default();
                let (p, seq) = msg
                    .strip_prefix('P')
                    .and_then(|m| m.split_once('#'))
                    .map(|(p, q)| (p.parse().unwrap(), q.parse().unwrap()))
                    .unwrap_or_else(|| panic!("{name}: unexpected signal {msg:?}"));
                let class = plan(p, seq).2;
                got.push((p, seq, class, s.redelivery(), s.id.clone()));
            }
        }
        got
    })
}

/// What a run saw, for the assertions.
struct Outcome {
    sent: usize,
    deliveries: usize,
    lost: Vec<String>,
    duplicated: Vec<String>,
    out_of_order: Vec<String>,
}

/// Sends `per_producer` signals from one producer on each host (paced by `pace`), while
/// `chaos` runs; waits until every agent has what it is owed; returns what was seen.
fn run_workload(
    hosts: &[PathBuf],
    per_producer: usize,
    pace: Duration,
    deadline: Duration,
    chaos: impl FnOnce() + Send,
) -> Outcome {
    let deadline = Instant::now() + deadline;
    let mut expected: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    for p in 0..hosts.len() {
        for seq in 0..per_producer {
            let (ty, target, _) = plan(p, seq);
            for r in receivers(&target, ty) {
                expected.entry(r).or_default().push((p, seq));
            }
        }
    }
    let done = Arc::new(AtomicBool::new(false));
    let mut agents = Vec::new();
    for (i, names) in AGENTS.iter().enumerate() {
        for name in *names {
            let n = expected.get(name).map_or(0, Vec::len);
            agents.push((*name, agent(&hosts[i], name, n, deadline, done.clone())));
        }
    }
    // Every agent's presence is seen by its bridge before anything is sent.
    common::wait_until(
        "every bridge took its agents",
        Duration::from_secs(60),
        || {
            hosts.iter().zip(AGENTS).all(|(root, names)| {
                let here = common::agents_of(root);
                names.iter().all(|n| here.iter().any(|h| h == n))
            })
        },
    );
    thread::scope(|s| {
        for (p, host) in hosts.iter().enumerate() {
            let mb = common::open(host);
            s.spawn(move || {
                for seq in 0..per_producer {
                    let (ty, target, _) = plan(p, seq);
                    let mut sig = NewSignal::new(ty);
                    sig.target(target).message(format!("P{p}#{seq}"));
                    mb.send(&sig).unwrap();
                    if !pace.is_zero() {
                        thread::sleep(pace);
                    }
                }
            });
        }
        s.spawn(chaos);
    });
    done.store(true, Ordering::Relaxed);
    let mut outcome = Outcome {
        sent: hosts.len() * per_producer,
        deliveries: 0,
        lost: Vec::new(),
        duplicated: Vec::new(),
        out_of_order: Vec::new(),
    };
    for (name, h) in agents {
        let got = h.join().unwrap();
        outcome.deliveries += got.len();
        let mut counts: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for g in &got {
            *counts.entry((g.0, g.1)).or_default() += 1;
        }
        for want in expected.get(name).into_iter().flatten() {
            match counts.remove(want) {
                None => outcome.lost.push(format!("{name}: P{}#{}", want.0, want.1)),
                Some(1) => {}
                Some(n) => outcome
                    .duplicated
                    .push(format!("{name}: P{}#{} {n} times", want.0, want.1)),
            }
        }
        for ((p, q), n) in counts {
            outcome
                .duplicated
                .push(format!("{name}: P{p}#{q} not meant for it, {n} times"));
        }
        // Each producer's order, per class.
        // (Each delivery's id and redelivery count are in the report: they name the files and
        // the log lines to look for.)
        let mut last: HashMap<(usize, Class), &Got> = HashMap::new();
        for g in &got {
            let (p, seq, class, again, id) = g;
            if let Some(prev) = last.insert((*p, *class), g)
                && prev.1 > *seq
            {
                outcome.out_of_order.push(format!(
                    "{name}: P{p}#{seq} after P{p}#{} ({class:?}; {id} delivered {again} times before, after {} delivered {} times before)",
                    prev.1, prev.4, prev.3
                ));
            }
        }
    }
    outcome
}

fn assert_exact(o: &Outcome, hosts: &[Host]) {
    let logs = || {
        hosts
            .iter()
            .map(|h| format!("--- {} ---\n{}", h.name, common::tail(&h.log(), 3000)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        o.lost.is_empty(),
        "{} of {} deliveries lost, e.g. {:?}\n{}",
        o.lost.len(),
        o.deliveries + o.lost.len(),
        &o.lost[..o.lost.len().min(10)],
        logs()
    );
    assert!(
        o.duplicated.is_empty(),
        "duplicated: {:?}\n{}",
        &o.duplicated[..o.duplicated.len().min(10)],
        logs()
    );
    assert!(
        o.out_of_order.is_empty(),
        "out of order: {:?}\n{}",
        &o.out_of_order[..o.out_of_order.len().min(10)],
        logs()
    );
    // Most signals crossed hosts (two agents of six on each host): the bridges carried them.
    let exported: usize = hosts
        .iter()
        .map(|h| h.mailbox().bridge().counts().unwrap().1)
        .sum();
    assert!(
        exported > o.sent / 2,
        "only {exported} of {} signals were exported",
        o.sent
    );
    // A bridge killed between the server's acknowledgement and its own record leaves the
    // signal in its outbox (delivered already): its next round publishes it again, the
    // stream drops the copy, and it is recorded.
    for h in hosts {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (outbox, _) = h.mailbox().bridge().counts().unwrap();
            if outbox == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: the outbox still holds {outbox} signals\n{}",
                h.name,
                common::tail(&h.log(), 3000)
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

fn hosts_on(dir: &std::path::Path, urls: &[String], mailbox: &str, extra: &[&str]) -> Vec<Host> {
    (0..3)
        .map(|i| {
            // Each bridge knows every server, its own first.
            let mut list: Vec<&str> = urls.iter().map(String::as_str).collect();
            list.rotate_left(i % urls.len());
            Host::start(dir, &format!("h{i}"), &list.join(","), mailbox, extra)
        })
        .collect()
}

/// More than 10,000 signals from three hosts, a broadcast every 50th, with bridges SIGKILLed
/// mid-relay and the server SIGKILLed and restarted mid-stream.
#[test]
fn ten_thousand_signals_across_three_hosts_through_kills_and_a_server_restart() {
    let dir = common::test_dir();
    let server = Mutex::new(Server::start(dir.path()));
    let url = server.lock().unwrap().url();
    let hosts = Mutex::new(hosts_on(dir.path(), &[url], "soak", &[]));
    let roots = roots_of(&hosts.lock().unwrap());
    let chaos = || {
        thread::sleep(Duration::from_millis(700));
        restart_bridges(&hosts, &[1], Duration::from_millis(300));
        thread::sleep(Duration::from_millis(700));
        {
            let mut s = server.lock().unwrap();
            s.kill();
            thread::sleep(Duration::from_millis(800));
            s.restart();
        }
        thread::sleep(Duration::from_millis(900));
        restart_bridges(&hosts, &[2, 0], Duration::from_millis(200));
    };
    let outcome = run_workload(
        &roots,
        3_400,
        Duration::from_micros(300),
        Duration::from_secs(240),
        chaos,
    );
    report(&outcome);
    assert!(outcome.sent > 10_000);
    assert_exact(&outcome, &hosts.lock().unwrap());
}

/// Three producers sending as fast as they can while one host's bridge is down, so that its
/// agents' signals pile up in the stream and its importers, started again, write full
/// batches; that bridge SIGKILLed again and again while it writes and acknowledges them (on two
/// hosts in turn), then every bridge at once, and the server once. Nothing lost, nothing twice, each
/// producer's order kept per agent; and at least one bridge started again to find a batch an
/// earlier pull had left unacknowledged (the kills landed in the middle of batches).
#[test]
fn bridges_killed_in_the_middle_of_batches_lose_duplicate_and_reorder_nothing() {
    let dir = common::test_dir();
    let server = Mutex::new(Server::start(dir.path()));
    let url = server.lock().unwrap().url();
    let hosts = Mutex::new(hosts_on(dir.path(), &[url], "batches", &[]));
    let roots = roots_of(&hosts.lock().unwrap());
    let chaos = || {
        // A host's bridge down while the others send: its agents' signals pile up in the
        // stream, and its importers, started again, pull full batches; each time it is killed
        // while it writes and acknowledges them.
        for (h, round) in [1, 2, 1].into_iter().zip(0u64..) {
            let runs = |hs: &Mutex<Vec<Host>>| {
                hs.lock().unwrap()[h]
                    .log()
                    .matches("importing; what an earlier pull left unacknowledged comes first consumer=to-")
                    .count()
            };
            let before = runs(&hosts);
            hosts.lock().unwrap()[h].kill();
            thread::sleep(Duration::from_millis(600));
            hosts.lock().unwrap()[h].restart();
            let deadline = Instant::now() + Duration::from_secs(30);
            while runs(&hosts) == before && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(10));
            }
            thread::sleep(Duration::from_millis(20 + 30 * round));
        }
        restart_bridges(&hosts, &[0, 1, 2], Duration::from_millis(150));
        thread::sleep(Duration::from_millis(400));
        {
            let mut s = server.lock().unwrap();
            s.kill();
            thread::sleep(Duration::from_millis(500));
            s.restart();
        }
    };
    let outcome = run_workload(
        &roots,
        3_000,
        Duration::from_millis(2),
        Duration::from_secs(240),
        chaos,
    );
    report(&outcome);
    let hs = hosts.lock().unwrap();
    assert_exact(&outcome, &hs);
    assert!(
        hs.iter().any(|h| h
            .log()
            .lines()
            .any(|l| l.contains("earlier pull") && !l.contains("pending=0 "))),
        "no bridge was killed in the middle of a batch"
    );
}

/// A three-node cluster with every stream replicated three times: one node is SIGKILLed
/// mid-stream and never comes back; the bridges carry on through the other two.
#[test]
fn a_three_node_cluster_losing_a_node_loses_and_duplicates_nothing() {
    let dir = common::test_dir();
    let nodes = Mutex::new(common::cluster(dir.path()));
    let urls: Vec<String> = nodes.lock().unwrap().iter().map(Server::url).collect();
    let hosts = Mutex::new(hosts_on(dir.path(), &urls, "cluster", &["--replicas", "3"]));
    let roots = roots_of(&hosts.lock().unwrap());
    let chaos = || {
        thread::sleep(Duration::from_millis(1500));
        nodes.lock().unwrap()[1].kill();
    };
    let outcome = run_workload(
        &roots,
        1_200,
        Duration::from_micros(1500),
        Duration::from_secs(240),
        chaos,
    );
    report(&outcome);
    assert_exact(&outcome, &hosts.lock().unwrap());
}

fn report(o: &Outcome) {
    eprintln!(
        "sent {} signals, {} deliveries; lost {}, duplicated {}, out of order {}",
        o.sent,
        o.deliveries,
        o.lost.len(),
        o.duplicated.len(),
        o.out_of_order.len()
    );
}

/// SIGKILLs the bridges of `which`, waits `down`, starts them again.
fn restart_bridges(hosts: &Mutex<Vec<Host>>, which: &[usize], down: Duration) {
    let mut hs = hosts.lock().unwrap();
    for &i in which {
        hs[i].kill();
    }
    thread::sleep(down);
    for &i in which {
        hs[i].restart();
    }
}

fn roots_of(hosts: &[Host]) -> Vec<PathBuf> {
    hosts.iter().map(|h| h.root.clone()).collect()
}

/// A connection lost in the middle of an export round (a server restarted, a network lost;
/// here a proxy that stops forwarding after 2 MB and then drops the connection) never leaves
/// the stream with a round's later signals and without its earlier ones: the client sends
/// again, on its next connection, what it had not written, and those must not be stored before
/// the ones lost with the connection (spec/bridge.md §3). 200 signals of 100 KB wait on h0 for
/// an agent on h1 before h0's bridge starts, so that its first round publishes them all at
/// once; the agent gets each once, in the order sent.
#[test]
fn a_connection_lost_in_the_middle_of_an_export_round_reorders_nothing() {
    const N: usize = 200;
    let dir = common::test_dir();
    let server = Server::start(dir.path());
    let proxy = common::Proxy::start(server.port);
    let h1 = Host::start(dir.path(), "h1", &server.url(), "cut", &[]);
    let m1 = h1.mailbox();
    let root0 = dir.path().join("h0");
    let m0 = sigbox::MailboxOptions::new().init(&root0).unwrap();
    let pad = "x".repeat(100_000);
    for i in 0..N {
        let mut sig = NewSignal::new(SignalType::Steer);
        sig.target(Target::Agent("Receiver".into()))
            .message(format!("{i:04} {pad}"));
        m0.send(&sig).unwrap();
    }
    proxy.cut_after(2 << 20);
    let h0 = Host::start(dir.path(), "h0", &proxy.url(), "cut", &[]);
    let _receiver = m1.presence("Receiver").unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut got: Vec<usize> = Vec::new();
    while got.len() < N && Instant::now() < deadline {
        for s in m1.pass("Receiver", None).unwrap().delivered {
            let m = s.message.unwrap_or_default();
            got.push(m[..4].parse().unwrap());
        }
        thread::sleep(Duration::from_millis(20));
    }
    // Anything more would be a duplicate.
    thread::sleep(Duration::from_millis(500));
    for s in m1.pass("Receiver", None).unwrap().delivered {
        let m = s.message.unwrap_or_default();
        got.push(m[..4].parse().unwrap());
    }
    m1.ack("Receiver").unwrap();
    assert_eq!(proxy.cuts(), 1, "the connection was not cut\n{}", h0.log());
    let mut sorted = got.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        N,
        "lost or duplicated: got {} deliveries\n{}",
        got.len(),
        h0.log()
    );
    let inversions: Vec<(usize, usize)> = got
        .windows(2)
        .filter(|w| w[0] > w[1])
        .map(|w| (w[0], w[1]))
        .collect();
    assert!(
        inversions.is_empty(),
        "out of order (earlier after later): {inversions:?}\n{}",
        h0.log()
    );
    assert_eq!(got.len(), N);
}

/// The server SIGKILLed and restarted three times and both bridges SIGKILLed once, in the
/// middle of three producers' bursts of large signals (150 KB: export rounds and import
/// batches of many megabytes) to one agent on another host: each signal arrives once, each
/// producer's in order. Pulls end often here (connections made again, a bridge restarted),
/// and a pull that ended could leave a request on the server that was handed a message
/// nobody read: it came again only after `ack_wait`, after later ones (spec/bridge.md §4).
/// Without the wait for a pull's requests to expire, this test failed three runs of three
/// (e.g. "P1 14 after 39").
#[test]
fn kills_during_bursts_of_large_signals_reorder_nothing() {
    const PER: usize = 120;
    let dir = common::test_dir();
    let mut server = Server::start(dir.path());
    let mut h0 = Host::start(dir.path(), "h0", &server.url(), "large", &[]);
    let mut h1 = Host::start(dir.path(), "h1", &server.url(), "large", &[]);
    let m0 = h0.mailbox();
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let done = done.clone();
        thread::spawn(move || {
            let _present = m0.presence("Remote").unwrap();
            let mut got: Vec<(usize, usize)> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(150);
            while Instant::now() < deadline
                && !(got.len() >= 3 * PER && done.load(Ordering::SeqCst))
            {
                let pass = m0.pass("Remote", None).unwrap();
                if pass.delivered.is_empty() {
                    thread::sleep(Duration::from_millis(10));
                }
                for s in pass.delivered {
                    let m = s.message.unwrap_or_default();
                    got.push((m[1..2].parse().unwrap(), m[3..7].parse().unwrap()));
                }
            }
            m0.ack("Remote").unwrap();
            got
        })
    };
    // The Remote is h0's before the bursts begin.
    common::wait_until("h0 took the Remote", Duration::from_secs(60), || {
        h0.has_agent("Remote")
    });
    let pad = "x".repeat(150_000);
    thread::scope(|s| {
        for p in 0..3 {
            let m1 = h1.mailbox();
            let pad = &pad;
            s.spawn(move || {
                for i in 0..PER {
                    let mut sig = NewSignal::new(SignalType::Steer);
                    sig.target(Target::Agent("Remote".into()))
                        .message(format!("P{p} {i:04} {pad}"));
                    m1.send(&sig).unwrap();
                }
            });
        }
        let pause = |ms| thread::sleep(Duration::from_millis(ms));
        pause(2000);
        server.kill();
        pause(800);
        server.restart();
        pause(2000);
        server.kill();
        pause(500);
        server.restart();
        pause(1500);
        h1.kill();
        pause(200);
        h1.restart();
        pause(1500);
        server.kill();
        pause(500);
        server.restart();
        pause(1500);
        h0.kill();
        pause(200);
        h0.restart();
    });
    // Anything more than all of them would be a duplicate: a second's more passes.
    let all_sent = Instant::now();
    while h0.mailbox().pending().unwrap().len() + h1.mailbox().bridge().counts().unwrap().0 > 0
        && all_sent.elapsed() < Duration::from_secs(60)
    {
        thread::sleep(Duration::from_millis(100));
    }
    thread::sleep(Duration::from_secs(1));
    done.store(true, Ordering::SeqCst);
    let got = receiver.join().unwrap();
    let logs = || {
        format!(
            "--- h0 ---\n{}\n--- h1 ---\n{}",
            common::tail(&h0.log(), 3000),
            common::tail(&h1.log(), 3000)
        )
    };
    let mut counts: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for g in &got {
        *counts.entry(*g).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}\n{}", logs());
    assert_eq!(
        counts.len(),
        3 * PER,
        "lost: got {} of {}\n{}",
        counts.len(),
        3 * PER,
        logs()
    );
    let mut last: HashMap<usize, usize> = HashMap::new();
    let mut out_of_order = Vec::new();
    for (p, i) in &got {
        if let Some(prev) = last.insert(*p, *i)
            && prev > *i
        {
            out_of_order.push(format!("P{p} {i} after {prev}"));
        }
    }
    assert!(
        out_of_order.is_empty(),
        "out of order: {out_of_order:?}\n{}",
        logs()
    );
}
