//! The properties the fuzz targets check, shared with the test that replays the fuzz corpus
//! in the ordinary test run. Each takes arbitrary bytes and panics on a violation.

use sigbox::flux::{self, FluxParser};
use sigbox::pilot::PilotParser;

/// Splits `data` into chunks at points derived from its own bytes.
fn chunks(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut k = 0usize;
    while i < data.len() {
        let n = 1 + (data[k % data.len()] as usize % 17);
        let end = (i + n).min(data.len());
        out.push(&data[i..end]);
        i = end;
        k += 7;
    }
    out
}

/// Flux: never panics; any split gives the events of the whole stream; line numbers increase.
pub fn flux_stream(data: &[u8]) {
    let whole = {
        let mut p = FluxParser::new(64);
        let mut e = p.feed(data);
        e.extend(p.finish());
        e
    };
    let split = {
        let mut p = FluxParser::new(64);
        let mut e = Vec::new();
        for c in chunks(data) {
            e.extend(p.feed(c));
        }
        e.extend(p.finish());
        e
    };
    assert_eq!(whole, split);
    let lines: Vec<usize> = whole
        .iter()
        .map(|e| match e {
            flux::FluxEvent::Signal(s) => s.line,
            flux::FluxEvent::Error { line, .. } | flux::FluxEvent::TooLong { line, .. } => *line,
        })
        .collect();
    assert!(lines.windows(2).all(|w| w[0] < w[1]), "{lines:?}");
}

/// Pilot: never panics; any split gives the same events; progress stays in 0..=100.
pub fn pilot_stream(data: &[u8]) {
    let run = |pieces: Vec<&[u8]>| {
        let mut p = PilotParser::new(128);
        let mut e = Vec::new();
        for c in pieces {
            e.extend(p.feed(c));
        }
        e.extend(p.finish());
        e
    };
    let whole = run(vec![data]);
    assert_eq!(whole, run(chunks(data)));
    for e in &whole {
        if let sigbox::pilot::PilotEvent::Signal(s) = e {
            assert!((0..=100).contains(&s.progress));
            assert!(s.v != 0 && !s.signal_type.is_empty());
        }
    }
}

/// Flux result documents: never panics; valid exactly when there are no errors, and only a
/// valid document routes.
pub fn flux_result(data: &[u8]) {
    let r = flux::validate_result(data);
    assert_eq!(r.valid, r.errors.is_empty());
    assert_eq!(r.valid, r.routing.is_some());
    let _ = r.to_json();
}

/// Names: classification never panics; a canonical name round-trips through the codec.
pub fn names(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        let _ = sigbox::name::classify(std::ffi::OsStr::new(
            &String::from_utf8_lossy(data).into_owned(),
        ));
        return;
    };
    let _ = sigbox::name::classify(std::ffi::OsStr::new(s));
    let _ = sigbox::name::parse_ralph_instant(s);
    // An identity is always a usable name for its ack directory (`acks/<id>/`: one path
    // component within the 255-byte limit), and only a file sigbox wrote (its
    // body's `id` its name) goes by its stem alone.
    if s.len() <= 255 && !s.contains('/') && !s.contains('\0') {
        let stem = sigbox::name::signal_id(s);
        for (body_id, birth) in [(None, None), (Some(stem), Some(7)), (Some("x"), Some(-1))] {
            let id = sigbox::fuzzing::identity(s, body_id, 42, birth);
            assert!(
                !id.is_empty() && !id.contains('/') && id != "." && id != "..",
                "{id:?}"
            );
            assert!(id.len() <= 255, "{} bytes", id.len());
            let trusted = sigbox::name::parse_canonical(s).is_some() && body_id == Some(stem);
            assert_eq!(id == stem, trusted, "{s:?} as {id:?}");
        }
    }
    if let Some(c) = sigbox::name::parse_canonical(s) {
        assert!(sigbox::name::canonical_target(s).is_some());
        let secs = c.instant.div_euclid(1_000_000_000) as i64;
        let nanos = c.instant.rem_euclid(1_000_000_000) as u32;
        let at = sigbox_chrono_utc(secs, nanos);
        let again = sigbox::name::canonical_name(at, c.unique, c.type_name, &c.target());
        assert_eq!(again, s);
    }
}

fn sigbox_chrono_utc(secs: i64, nanos: u32) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(secs, nanos).expect("a canonical instant is representable")
}

/// Signal bodies (JSON and YAML), Goblin payloads and mux records: never panic, never hang.
pub fn bodies(data: &[u8]) {
    for name in [
        "x.json",
        "x.yaml",
        "signal.20260101T000000.000000Z.00000000000000000000000000000000.INFO.ALL.json",
    ] {
        let _ = sigbox::Signal::parse_file_bytes(data, std::path::Path::new(name));
    }
    // One reading: JSON is YAML too, and where both read a file they agree on what it is, who
    // gets it and (where JSON says text) what it says.
    let json = sigbox::Signal::parse_file_bytes(data, std::path::Path::new("x.json"));
    let yaml = sigbox::Signal::parse_file_bytes(data, std::path::Path::new("x.yaml"));
    if let (Ok(j), Ok(y)) = (json, yaml) {
        assert_eq!(j.signal_type, y.signal_type, "type");
        assert_eq!(j.target, y.target, "target");
        if j.fields
            .get("message")
            .is_some_and(serde_json::Value::is_string)
        {
            assert_eq!(j.message, y.message, "message");
        }
        assert_eq!(j.iteration, y.iteration, "iteration");
    }
    for g in sigbox::goblin::GoblinSignal::ALL {
        let _ = sigbox::goblin::parse_payload(g, data);
    }
    let _ = sigbox::mux::parse_record(data);
    records(data);
}

/// A claim's record (spec/mailbox.md §3.4): whatever a signal file holds, the record claims
/// leave of it (a claim, then two redeliveries) reads back as the same signal, also torn at
/// any byte; a JSON record is one strict JSON document.
fn records(data: &[u8]) {
    use sigbox::fuzzing::{is_dropped_signal, one_document, record_after_claims};
    for name in ["x.json", "x.yaml"] {
        let path = std::path::Path::new(name);
        if !is_dropped_signal(data, name) {
            continue;
        }
        let want =
            sigbox::Signal::parse_file_bytes(data, path).expect("a signal reads as a record");
        let (record, at) = record_after_claims(data, name, 2);
        let got = sigbox::Signal::parse_file_bytes(&record, path).expect("a record reads");
        let same = |s: &sigbox::Signal| (s.signal_type, s.target.clone(), s.message.clone());
        assert_eq!(
            same(&got),
            same(&want),
            "{name}: the record reads as the signal"
        );
        assert_eq!(got.redelivery(), 2, "{name}: the last block is read");
        let own = ["handling_metadata", "delivery_status", "unacked_agents"]
            .iter()
            .any(|k| want.fields.contains_key(*k));
        if name == "x.json" && !own {
            let doc = one_document(&record, name).expect("a JSON record is one document");
            assert_eq!(doc["handling_metadata"]["redelivery"], 2);
        }
        // Torn: the new bytes up to a cut, then zeros.
        for cut in [at, at + 1, at + 7, at + 23, record.len() - 1] {
            if cut >= record.len() {
                continue;
            }
            let mut torn = record[..cut].to_vec();
            torn.extend_from_slice(&[0; 4]);
            let got = sigbox::Signal::parse_file_bytes(&torn, path)
                .unwrap_or_else(|e| panic!("{name}: torn at {cut}: {e}"));
            assert_eq!(same(&got), same(&want), "{name}: torn at {cut}");
        }
    }
}

/// Runs `check` on every file of `fuzz/corpus/<target>/`; returns how many it ran. The files
/// are checked on several threads at once ([`crate::par_each`]): each check is independent of
/// the others, and the mailbox model's wait on `fsync`.
pub fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    let n = std::sync::atomic::AtomicUsize::new(0);
    crate::par_each(&files, |p| {
        // A running fuzzer may remove files from the corpus while this reads it.
        let Ok(data) = std::fs::read(p) else {
            return;
        };
        let r = std::panic::catch_unwind(|| check(&data));
        assert!(r.is_ok(), "corpus file {} fails {target}", p.display());
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    n.into_inner()
}

/// Model-based: an arbitrary sequence of mailbox operations, with crashes (the filesystem
/// frozen at an arbitrary effect, then only what was durable kept), checked against a model of
/// what was sent and delivered:
/// - nothing is delivered twice to one agent, ever, across crashes;
/// - a signal whose `send` returned is delivered to its target exactly once by the end
///   (targeted and no-target signals), and a broadcast at most once per agent;
/// - no partial file is ever visible (nothing sigbox wrote is ever quarantined).
pub fn mailbox_model(data: &[u8]) {
    use crate::crash::{Model, Recorder};
    use sigbox::{MailboxOptions, NewSignal, SignalType, Target};
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;
    use std::time::Duration;

    const AGENTS: [&str; 3] = ["Executor", "Planner", "Orchestrator"];
    let tmp = tempfile::tempdir().unwrap();
    let mut generation = 0usize;
    let mut root = tmp.path().join("r0");
    let mut opts = MailboxOptions::new();
    opts.settle(Duration::ZERO).quorum(AGENTS);
    opts.init(&root).unwrap();
    // Model.
    let mut sent: BTreeMap<String, Target> = BTreeMap::new(); // send returned Ok
    let mut delivered: BTreeSet<(String, String)> = BTreeSet::new();
    // Acknowledged: never delivered again, also after a crash.
    let mut acked: BTreeSet<(String, String)> = BTreeSet::new();
    let mut finished = false;
    let mut bytes = data.iter().copied();
    let mut next = move || bytes.next();
    while let Some(op) = next() {
        // A crash point for this operation, or none.
        let crash_at = if op & 0x80 != 0 {
            next().map(|b| (b % 24) as usize)
        } else {
            None
        };
        let rec = Arc::new(match crash_at {
            Some(n) => Recorder::freezing_at(n),
            None => Recorder::new(),
        });
        let model_before = crash_at.map(|_| Model::snapshot(&root));
        let mut o = opts.clone();
        o.hook(rec.clone());
        let mb = o.open(&root).unwrap();
        match op % 6 {
            0 | 1 => {
                let target = match next().unwrap_or(0) % 4 {
                    0 => Target::Agent("Executor".into()),
                    1 => Target::Agent("Planner".into()),
                    2 => Target::All,
                    _ => Target::None,
                };
                let ty = if next().unwrap_or(0) % 5 == 0 {
                    SignalType::Pause
                } else {
                    SignalType::Info
                };
                if finished && target == Target::All {
                    continue; // after finish, a broadcast would just be archived again
                }
                let mut s = NewSignal::new(ty);
                s.target(target.clone());
                if let Ok(id) = mb.send(&s) {
                    sent.insert(id, target);
                }
            }
            2 | 3 => {
                let agent = AGENTS[next().unwrap_or(0) as usize % 3];
                if let Ok(p) = mb.pass(agent, None) {
                    assert!(
                        p.rejected.is_empty(),
                        "a partial file was visible: {:?}",
                        p.rejected
                    );
                    let ok = mb.ack(agent).is_ok();
                    for s in p.delivered {
                        let key = (agent.to_string(), s.id.clone());
                        assert!(
                            !acked.contains(&key),
                            "{} delivered again after its ack",
                            s.id
                        );
                        assert!(
                            delivered.insert(key.clone()) || s.redelivery() > 0,
                            "{} delivered twice to {agent}, unmarked",
                            s.id
                        );
                        if ok {
                            acked.insert(key);
                        }
                    }
                }
            }
            4 => {
                if mb.finish("Orchestrator").is_ok() {
                    finished = true;
                }
            }
            _ => {
                let _ = mb.gc(Duration::ZERO, 10);
            }
        }
        drop(mb);
        if let Some(mut m) = model_before {
            // The crash: keep only what was durable, and go on from there.
            for o in rec.ops() {
                m.apply(&o);
            }
            generation += 1;
            let next_root = tmp.path().join(format!("r{generation}"));
            m.durable(&next_root);
            std::fs::remove_dir_all(&root).unwrap();
            root = next_root;
        }
    }
    // Drain: every agent until nothing more (PAUSE ends a pass, so loop).
    let mb = opts.open(&root).unwrap();
    for agent in AGENTS {
        for _ in 0..1000 {
            let p = mb.pass(agent, None).unwrap();
            assert!(
                p.rejected.is_empty(),
                "a partial file was visible: {:?}",
                p.rejected
            );
            if p.delivered.is_empty() {
                break;
            }
            for s in p.delivered {
                let key = (agent.to_string(), s.id.clone());
                assert!(
                    !acked.contains(&key),
                    "{} delivered again after its ack",
                    s.id
                );
                assert!(
                    delivered.insert(key.clone()) || s.redelivery() > 0,
                    "{} delivered twice to {agent}, unmarked",
                    s.id
                );
                acked.insert(key);
            }
        }
    }
    for (id, target) in &sent {
        let to = match target {
            Target::Agent(a) => a.as_str(),
            Target::None => "Orchestrator",
            Target::All => continue,
        };
        assert!(
            delivered.contains(&(to.to_string(), id.clone())),
            "{id} for {to} was lost"
        );
    }
}
