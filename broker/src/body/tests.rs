//! A processed record is one document in its own format (spec/mailbox.md §3.4), whatever
//! was claimed and however often, and a crash while its handling fields are written leaves
//! the signal readable.

use serde_json::{Map, Value};

use super::codec::*;
use super::handling::*;
use super::record::*;
use crate::name::{self, Format};

const JSON: &str =
    "signal.20261122T101500.000001Z.00000000000000000000000000000001.STEER.Executor.json";

/// Originals a claim meets, by file name.
fn originals() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            JSON,
            "{\"type\":\"STEER\",\"target\":\"Executor\",\"message\":\"m\"}\n",
        ),
        (
            "pretty.json",
            "\u{feff}{\n  \"type\": \"STEER\",\n  \"target\": \"Executor\",\n  \"message\": \"m, }\"\n}  \n\n",
        ),
        ("block.yaml", "type: STEER\ntarget: Executor\nmessage: m\n"),
        ("unended.yaml", "type: STEER\ntarget: Executor\nmessage: m"),
        ("flow.yaml", "{type: STEER, target: Executor, message: m}\n"),
    ]
}

/// The file after `a` was written over `bytes`.
fn apply(bytes: &[u8], a: &Annotation) -> Vec<u8> {
    let mut out = bytes[..a.at as usize].to_vec();
    out.extend_from_slice(&a.tail);
    out
}

/// `bytes` as one document of its format, strictly (no duplicate key, nothing after it).
fn one_document(name: &str, bytes: &[u8]) -> Map<String, Value> {
    let text = std::str::from_utf8(strip_bom(bytes)).unwrap();
    let v = match name::format_of(name) {
        Format::Json => parse_json(text),
        Format::Yaml => parse_yaml(text),
    };
    match v {
        Ok(Value::Object(m)) => m,
        other => panic!("{name}: not one document: {other:?}\n{text}"),
    }
}

fn signal_of(name: &str, bytes: &[u8]) -> (String, Option<String>) {
    let b = parse_record(bytes, name::format_of(name))
        .unwrap_or_else(|e| panic!("{name}: {e}: {:?}", String::from_utf8_lossy(bytes)));
    let msg = b
        .fields
        .get("message")
        .and_then(Value::as_str)
        .map(String::from);
    (b.type_name, msg)
}

#[test]
fn every_record_is_one_document_with_one_handling_block() {
    for (name, original) in originals() {
        let want = signal_of(name, original.as_bytes());
        let format = name::format_of(name);
        // Claimed, then delivered again twice, then archived: one block, the last.
        let mut record = original.as_bytes().to_vec();
        for (i, h) in [
            Handled::Delivered,
            Handled::Redelivered(1),
            Handled::Redelivered(2),
            Handled::Archived(Archived::Partial, &["Planner".to_string()]),
        ]
        .iter()
        .enumerate()
        {
            // With the hint a claim's read gives, and without it: the same annotation.
            let hint = parse_record(&record, format).ok().and_then(|b| b.end);
            let a = annotation(&record, format, &h.fields("Executor"), hint);
            assert_eq!(
                a.at,
                annotation(&record, format, &h.fields("Executor"), None).at,
                "{name} {i}"
            );
            record = apply(&record, &a);
            let doc = one_document(name, &record);
            assert_eq!(
                doc["handling_metadata"]["handled_by"], "Executor",
                "{name} {i}"
            );
            assert_eq!(signal_of(name, &record), want, "{name} {i}");
            assert!(
                record
                    .starts_with(&original.as_bytes()[..a.at.min(original.len() as u64) as usize])
            );
        }
        let doc = one_document(name, &record);
        assert_eq!(doc["delivery_status"], "partial", "{name}");
        assert_eq!(
            doc["handling_metadata"]["action_taken"],
            "broadcast archived"
        );
    }
}

#[test]
fn an_earlier_versions_two_document_record_becomes_one() {
    let old = format!(
        "{}{}",
        "{\"type\":\"STEER\",\"target\":\"Executor\"}\n",
        "{\"handling_metadata\":{\"handled_by\":\"Executor\",\"action_taken\":\"delivered\"}}\n"
    );
    let a = annotation(
        old.as_bytes(),
        Format::Json,
        &Handled::Redelivered(1).fields("Planner"),
        None,
    );
    let record = apply(old.as_bytes(), &a);
    let doc = one_document(JSON, &record);
    assert_eq!(doc["handling_metadata"]["redelivery"], 1);
    assert_eq!(doc["handling_metadata"]["handled_by"], "Planner");
}

/// What a crash while the handling fields are written can leave, byte by byte: where the
/// write got to, the new bytes; past it, the bytes that were there (the end of the signal,
/// or the block an earlier claim wrote), then, where the file grew, zeros (the size came,
/// the data did not) or nothing. Pages can also land out of order: the new bytes from some
/// point on, and the old ones before it.
#[test]
fn a_record_torn_at_any_byte_still_reads_as_its_signal() {
    for (name, original) in originals() {
        let want = signal_of(name, original.as_bytes());
        let format = name::format_of(name);
        let first = annotation(
            original.as_bytes(),
            format,
            &Handled::Delivered.fields("Executor"),
            None,
        );
        let claimed = apply(original.as_bytes(), &first);
        let again = annotation(
            &claimed,
            format,
            &Handled::Redelivered(1).fields("Executor"),
            None,
        );
        let redelivered = apply(&claimed, &again);
        for (before, a, after) in [
            (original.as_bytes(), &first, &claimed),
            (claimed.as_slice(), &again, &redelivered),
        ] {
            let old = |i: usize| before.get(i).copied();
            for cut in a.at as usize..=after.len() {
                // Written up to `cut`; the old bytes after it; the grown part zeros or gone.
                let mut torn: Vec<u8> = after[..cut].to_vec();
                torn.extend((cut..before.len()).filter_map(old));
                let mut zeros = torn.clone();
                zeros.resize(after.len().max(torn.len()), 0);
                // Written from `cut` on only.
                let mut late: Vec<u8> = (0..cut).map(|i| old(i).unwrap_or(0)).collect();
                late.extend_from_slice(&after[cut..]);
                for bytes in [torn, zeros, late] {
                    assert_eq!(
                        signal_of(name, &bytes),
                        want,
                        "{name}: cut at {cut}: {:?}",
                        String::from_utf8_lossy(&bytes)
                    );
                }
            }
        }
    }
}

/// YAML shapes no block can join, and a sender's own block: the record is written only
/// when it stays one document (else the signal's file stays as it was, valid).
#[test]
fn a_record_is_written_only_when_it_stays_one_document() {
    for (name, body) in [
        ("end.yaml", "type: STEER\ntarget: Executor\n...\n"),
        ("indented.yaml", "  type: STEER\n  target: Executor\n"),
        ("comma.yaml", "{type: STEER, target: Executor,}\n"),
        ("start.yaml", "--- {type: STEER, target: Executor}\n"),
        ("tagged.yaml", "!!map {type: STEER, target: Executor}\n"),
        ("comment.yaml", "{type: STEER, target: Executor} # }\n"),
        ("flowend.yaml", "{type: STEER,\n target: Executor\n}\n# c\n"),
        (
            "own.json",
            "{\"type\":\"INFO\",\"handling_metadata\":{\"x\":1},\"target\":\"Executor\"}\n",
        ),
        ("plain.yaml", "type: STEER\ntarget: Executor\n"),
    ] {
        let format = name::format_of(name);
        let Ok(b) = parse_body(body.as_bytes(), format) else {
            continue; // not a signal at all: never claimed
        };
        let a = annotation(
            body.as_bytes(),
            format,
            &Handled::Delivered.fields("E"),
            b.end,
        );
        if records_whole(body.as_bytes(), format, &a) {
            let doc = one_document(name, &apply(body.as_bytes(), &a));
            assert_eq!(doc["handling_metadata"]["handled_by"], "E", "{name}");
        } else {
            assert_ne!(name, "plain.yaml");
        }
    }
}

/// A sender's own `handling_metadata` in the middle of its body is its field: the
/// annotation never cuts the body there.
#[test]
fn a_senders_own_handling_field_is_never_cut() {
    let body = "{\"type\":\"INFO\",\"handling_metadata\":{\"x\":1},\"target\":\"Executor\",\"message\":\"kept\"}\n";
    let a = annotation(
        body.as_bytes(),
        Format::Json,
        &Handled::Delivered.fields("Executor"),
        None,
    );
    assert_eq!(a.at as usize, body.rfind('}').unwrap());
    let record = apply(body.as_bytes(), &a);
    assert_eq!(
        signal_of(JSON, &record),
        ("INFO".into(), Some("kept".into()))
    );
}

/// A YAML body refused says why in sigbox's words: the key given twice by name, a second
/// document as that (it once read "too deep"), each limit by what it limits.
#[test]
fn yaml_refusals_name_the_key_the_document_and_the_limit() {
    let reason = |text: &str| parse_yaml(text).unwrap_err();
    assert_eq!(
        reason("type: STEER\ntype: ABORT\ntarget: Executor\n"),
        "invalid YAML: duplicate key `type` (a field may appear once)"
    );
    assert_eq!(
        reason("type: STEER\ntarget: Executor\n---\ntype: ABORT\n"),
        "invalid YAML: more than one YAML document (a `---` line starts another): a signal \
         file holds one"
    );
    let deep: String = (0..100)
        .map(|i| format!("{}a:\n", "  ".repeat(i)))
        .collect();
    let deep_flow = "[".repeat(100) + &"]".repeat(100);
    for text in [deep.as_str(), deep_flow.as_str()] {
        let r = reason(text);
        assert!(
            r.contains("nested deeper than 64 levels") || r.contains("too deep"),
            "{r}"
        );
    }
    let bomb =
        "a: &a [x, x]\n".to_string() + &(0..70).map(|i| format!("b{i}: *a\n")).collect::<String>();
    let r = reason(&bomb);
    assert!(r.contains("aliases"), "{r}");
}
