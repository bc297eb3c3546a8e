//! Guards the protocol: runs every conformance vector in `spec/vectors/` (a mailbox's files in,
//! the deliveries per agent and state and the resulting layout out).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use sigbox::{Mailbox, MailboxOptions};
use sigbox_tests::stem;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/vectors")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected an array, got {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn run_vector(v: &Value) -> Result<(), String> {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    let mut opts = MailboxOptions::new();
    opts.settle(Duration::ZERO);
    if let Some(o) = v.get("options") {
        if let Some(q) = o.get("quorum") {
            opts.quorum(strings(q));
        }
        if let Some(s) = o.get("approval_states") {
            opts.approval_states(strings(s));
        }
    }
    let mb: Mailbox = opts.init(&root).unwrap();
    for f in v["files"].as_array().unwrap() {
        let dir = root.join(f.get("dir").and_then(Value::as_str).unwrap_or("inputs"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(f["name"].as_str().unwrap());
        std::fs::write(&path, f["body"].as_str().unwrap()).unwrap();
        if let Some(m) = f.get("mtime").and_then(Value::as_str) {
            let t = chrono_free_parse(m);
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(t).unwrap();
        }
    }
    let _present: Vec<_> = v
        .get("present")
        .map(strings)
        .unwrap_or_default()
        .iter()
        .map(|a| mb.presence(a).unwrap())
        .collect();
    for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
        let ctx = format!("step {i} {step}");
        if let Some(agent) = step.get("pass").and_then(Value::as_str) {
            let state = step.get("state").and_then(Value::as_str);
            let pass = mb.pass(agent, state).map_err(|e| format!("{ctx}: {e}"))?;
            // The runner acts on what it got at once: acknowledged, so into processed/.
            mb.ack(agent).map_err(|e| format!("{ctx}: ack: {e}"))?;
            let got: Vec<String> = pass.delivered.iter().map(|s| stem(&s.id)).collect();
            let want = strings(&step["delivered"]);
            if got != want {
                return Err(format!("{ctx}: delivered {got:?}, want {want:?}"));
            }
            if let Some(t) = step.get("types") {
                let got: Vec<String> = pass
                    .delivered
                    .iter()
                    .map(|s| s.signal_type.to_string())
                    .collect();
                if got != strings(t) {
                    return Err(format!("{ctx}: types {got:?}"));
                }
            }
            if let Some(s) = step.get("stopped").and_then(Value::as_bool)
                && pass.stopped != s
            {
                return Err(format!("{ctx}: stopped = {}", pass.stopped));
            }
            if let Some(b) = step.get("buffered") {
                let want: Vec<(String, String)> = b
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        let p = strings(p);
                        (p[0].clone(), p[1].clone())
                    })
                    .collect();
                let got: Vec<(String, String)> = pass
                    .buffered
                    .iter()
                    .map(|b| (stem(&b.id), b.agent.clone()))
                    .collect();
                if got != want {
                    return Err(format!("{ctx}: buffered {:?}", pass.buffered));
                }
            }
            if let Some(a) = step.get("archived")
                && pass
                    .archived
                    .iter()
                    .map(|a| stem(&a.id))
                    .collect::<Vec<_>>()
                    != strings(a)
            {
                return Err(format!("{ctx}: archived {:?}", pass.archived));
            }
            if let Some(r) = step.get("rejected") {
                let want = r.as_array().unwrap();
                if pass.rejected.len() != want.len() {
                    return Err(format!("{ctx}: rejected {:?}", pass.rejected));
                }
                for w in want {
                    let name = w["name"].as_str().unwrap();
                    let needle = w["reason_contains"].as_str().unwrap();
                    let Some(got) = pass.rejected.iter().find(|r| r.name == name) else {
                        return Err(format!("{ctx}: {name} not rejected: {:?}", pass.rejected));
                    };
                    if !got.reason.contains(needle) {
                        return Err(format!("{ctx}: {name}: reason {:?}", got.reason));
                    }
                    let on_disk = sigbox_tests::reason(&root, name);
                    if on_disk != got.reason {
                        return Err(format!("{ctx}: reason file says {on_disk:?}"));
                    }
                }
            }
            if pass.interrupted.is_some() {
                return Err(format!("{ctx}: interrupted: {:?}", pass.interrupted));
            }
        } else if let Some(agent) = step.get("finish").and_then(Value::as_str) {
            let got = mb.finish(agent).map_err(|e| format!("{ctx}: {e}"))?;
            let want = step["finished"].as_array().unwrap();
            if got.len() != want.len() {
                return Err(format!("{ctx}: finished {got:?}"));
            }
            for (g, w) in got.iter().zip(want) {
                if g.id != w["id"].as_str().unwrap()
                    || g.status.as_str() != w["status"].as_str().unwrap()
                    || g.unacked != strings(&w["unacked"])
                {
                    return Err(format!("{ctx}: finished {got:?}"));
                }
            }
        } else if let Some(expect) = step.get("expect").and_then(Value::as_object) {
            for (dir, want) in expect {
                let got: BTreeSet<String> = if dir == "rejected" {
                    sigbox_tests::rejected(&root)
                } else {
                    sigbox_tests::names(&root.join(dir))
                };
                let want: BTreeSet<String> = strings(want).into_iter().collect();
                if got != want {
                    return Err(format!("{ctx}: {dir} holds {got:?}, want {want:?}"));
                }
            }
        } else if let Some(id) = step.get("processed").and_then(Value::as_str) {
            let all = mb.processed().unwrap();
            let Some(sig) = all.iter().flatten().find(|s| stem(&s.id) == id) else {
                return Err(format!("{ctx}: {id} not in processed/"));
            };
            for (k, want) in step["fields"].as_object().unwrap() {
                if sig.fields.get(k) != Some(want) {
                    return Err(format!("{ctx}: field {k} = {:?}", sig.fields.get(k)));
                }
            }
            let meta = &sig.fields["handling_metadata"];
            for k in ["handled_by", "handled_at", "action_taken"] {
                if !meta.get(k).is_some_and(Value::is_string) {
                    return Err(format!("{ctx}: handling_metadata lacks {k}: {meta}"));
                }
            }
            if let Some(by) = step.get("handled_by")
                && &meta["handled_by"] != by
            {
                return Err(format!("{ctx}: handled_by {}", meta["handled_by"]));
            }
        } else {
            panic!("unknown step {step}");
        }
    }
    Ok(())
}

/// Parses `YYYY-MM-DDTHH:MM:SSZ` without another dependency.
fn chrono_free_parse(s: &str) -> std::time::SystemTime {
    let n = |r: std::ops::Range<usize>| s[r].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19);
    std::time::UNIX_EPOCH + Duration::from_secs(secs as u64)
}

fn run_file(file: &str) {
    let path = vectors_dir().join(file);
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let vectors = doc["vectors"].as_array().unwrap();
    assert!(!vectors.is_empty());
    let mut failures = Vec::new();
    for v in vectors {
        if let Err(e) = run_vector(v) {
            failures.push(format!("{}: {e}", v["name"].as_str().unwrap()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors failed:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
    eprintln!("{file}: {} vectors passed", vectors.len());
}

#[test]
fn routing_vectors() {
    run_file("routing.json");
}

#[test]
fn name_and_order_vectors() {
    run_file("names.json");
}

#[test]
fn every_vector_file_is_run() {
    let mut files: Vec<String> = std::fs::read_dir(vectors_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["names.json", "routing.json"],
        "add a #[test] for each new vector file"
    );
}
