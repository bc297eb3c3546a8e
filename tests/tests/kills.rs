//! Guards the durability contract against real crashes: sender and consumer processes are
//! killed with SIGKILL at random moments, over and over; after each round the mailbox is
//! reopened and checked. A signal whose `send` returned is never lost (some consumer prints
//! it), a signal printed twice is marked as a redelivery the second time, and no partial file
//! is ever visible.

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sigbox::{Durability, MailboxOptions};

const WORKER: &str = env!("CARGO_BIN_EXE_race_worker");

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn output_of(mut c: Child) -> (bool, String) {
    let out = std::mem::take(&mut c.stdout);
    let mut text = String::new();
    if let Some(mut o) = out {
        std::io::Read::read_to_string(&mut o, &mut text).unwrap();
    }
    let status = c.wait().unwrap();
    (status.success(), text)
}

#[test]
fn a_thousand_sigkills_lose_nothing_and_duplicate_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    sigbox::Mailbox::init(&root).unwrap();
    let never = tmp.path().join("never"); // consumers run until killed
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut sent: HashSet<String> = HashSet::new();
    let mut delivered: HashSet<String> = HashSet::new();
    // Printed a second time; printed marked as a redelivery (first time or not).
    let mut again = [0, 0];
    let (mut kills, mut rounds) = (0, 0);
    let start = Instant::now();
    let check = |root: &std::path::Path, round: usize| {
        // Recovery: a fresh handle sees no partial file: nothing in inputs/ is rejected.
        let mut o = MailboxOptions::new();
        o.settle(Duration::ZERO)
            .durability(Durability::RelaxedNoFsync);
        let mb = o.open(root).unwrap();
        let pending = mb.pending().unwrap();
        for p in &pending {
            assert!(p.type_name == "INFO", "round {round}: {p:?}");
        }
        // Claims of killed consumers wait in their slots for the next pass, and a claim by
        // link killed before its source went leaves a second link the next pass resolves
        // (spec/mailbox.md §9.10): not problems of the files.
        let problems: Vec<_> = mb
            .problems()
            .unwrap()
            .into_iter()
            .filter(|p| {
                !matches!(
                    p.kind,
                    sigbox::ProblemKind::InFlight { .. } | sigbox::ProblemKind::Leftover { .. }
                )
            })
            .collect();
        assert!(problems.is_empty(), "round {round}: {problems:?}");
        assert!(
            mb.rejected().unwrap().is_empty(),
            "round {round}: {:?}",
            mb.rejected()
        );
        pending.len()
    };
    // Signals waiting: where sends are fast and consumers are killed before they take much
    // (tmpfs), a round sends only while fewer than 400 wait, so that the backlog, which each
    // round's check lists, stays bounded.
    let mut waiting = 0;
    while kills < 1000 {
        rounds += 1;
        let producers: Vec<Child> = (0..if waiting < 400 { 2 } else { 0 })
            .map(|p| {
                Command::new(WORKER)
                    .args([
                        "produce",
                        root.to_str().unwrap(),
                        &format!("r{rounds}p{p}"),
                        "40",
                        "Executor",
                    ])
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let consumers: Vec<Child> = (0..2)
            .map(|_| {
                Command::new(WORKER)
                    .args([
                        "consume",
                        root.to_str().unwrap(),
                        "Executor",
                        never.to_str().unwrap(),
                    ])
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_micros(rng.below(20_000)));
        for mut c in producers.into_iter().chain(consumers) {
            std::thread::sleep(Duration::from_micros(rng.below(3_000)));
            if c.try_wait().unwrap().is_none() {
                c.kill().unwrap();
                kills += 1;
            }
            let (_, text) = output_of(c);
            for line in text.lines() {
                if let Some(id) = line.strip_prefix("SENT ") {
                    sent.insert(id.to_string());
                } else {
                    take(line, &mut delivered, &mut again, rounds);
                }
            }
        }
        waiting = check(&root, rounds);
    }
    // Drain what is left with a live consumer, then account for every signal.
    let done = tmp.path().join("done");
    std::fs::write(&done, b"").unwrap();
    let c = Command::new(WORKER)
        .args([
            "consume",
            root.to_str().unwrap(),
            "Executor",
            done.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (ok, text) = output_of(c);
    assert!(ok);
    for line in text.lines() {
        take(line, &mut delivered, &mut again, rounds + 1);
    }
    let processed: HashSet<String> = sigbox_tests::names(&root.join("processed"))
        .into_iter()
        .map(|n| n.strip_suffix(".json").unwrap().to_string())
        .collect();
    // Killed senders may leave their staging files (dot-files, never read; `gc` removes them).
    let pending: Vec<String> = sigbox_tests::names(&root.join("inputs"))
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert!(pending.is_empty(), "{pending:?}");
    // Every signal whose send returned was printed; everything printed was acknowledged into
    // processed/, and nothing is left in flight.
    let lost: Vec<_> = sent.difference(&delivered).collect();
    assert!(
        lost.is_empty(),
        "{} sent signals lost: {lost:?}",
        lost.len()
    );
    assert_eq!(delivered, processed);
    assert_eq!(sigbox_tests::in_flight(&root), 0, "left in flight");
    eprintln!(
        "{kills} SIGKILLs in {rounds} rounds ({:.1} s): {} signals sent and acknowledged, {} delivered, {} redelivered (marked) after their consumer was killed before acknowledging them, {} of them printed twice, 0 lost, 0 duplicated unmarked",
        start.elapsed().as_secs_f64(),
        sent.len(),
        delivered.len(),
        again[1],
        again[0],
    );
}

/// Takes one consumer line: `<id> <message>`, or `AGAIN <n> <id> <message>` for a
/// redelivery. A signal printed a second time must be a marked redelivery.
fn take(line: &str, delivered: &mut HashSet<String>, again: &mut [usize; 2], round: usize) {
    let (marked, rest) = match line.strip_prefix("AGAIN ") {
        Some(r) => (true, r.split_once(' ').unwrap().1),
        None => (false, line),
    };
    again[1] += usize::from(marked);
    let (id, _) = rest.split_once(' ').unwrap();
    if !delivered.insert(id.to_string()) {
        assert!(marked, "round {round}: {id} delivered twice, unmarked");
        again[0] += 1;
    }
}
