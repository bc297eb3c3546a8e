//! Guards processed records against torn appends: a record whose handling block was cut at
//! any byte (a crash during the append) or followed by garbage still reads as the signal.

use std::path::Path;

use sigbox::Signal;

fn check(name: &str, original: &str, block: &str) {
    let full = format!("{original}{block}");
    let want = Signal::parse_file_bytes(original.as_bytes(), Path::new(name)).unwrap();
    let whole = Signal::parse_file_bytes(full.as_bytes(), Path::new(name)).unwrap();
    assert_eq!(whole.fields["handling_metadata"]["handled_by"], "Executor");
    for cut in original.len()..=full.len() {
        let torn = &full.as_bytes()[..cut];
        let got = Signal::parse_file_bytes(torn, Path::new(name))
            .unwrap_or_else(|e| panic!("{name}: cut at {cut}: {e}"));
        assert_eq!(
            (got.signal_type, &got.target, &got.message),
            (want.signal_type, &want.target, &want.message),
            "cut at {cut}"
        );
        // What a torn append leaves: a prefix of the block (the cut above), then possibly
        // zeros where the size grew but the data never came.
        for garbage in ["\0", "\0\0\0\0\0\0\0\0"] {
            let mut g = torn.to_vec();
            g.extend_from_slice(garbage.as_bytes());
            let got = Signal::parse_file_bytes(&g, Path::new(name))
                .unwrap_or_else(|e| panic!("{name}: cut at {cut} + {garbage:?}: {e}"));
            assert_eq!(got.message, want.message, "cut at {cut} + {garbage:?}");
        }
    }
}

#[test]
fn torn_json_records_still_read() {
    check(
        "signal.20261122T101500.000001Z.00000000000000000000000000000001.STEER.Executor.json",
        "{\"type\":\"STEER\",\"target\":\"Executor\",\"message\":\"m\"}\n",
        "{\"handling_metadata\":{\"handled_by\":\"Executor\",\"handled_at\":\"2026-11-22T10:15:01Z\",\"action_taken\":\"delivered\"}}\n",
    );
}

#[test]
fn torn_yaml_records_still_read() {
    check(
        "signal.260208-143000Z.yaml",
        "type: STEER\ntarget: Executor\nmessage: m\n",
        "handling_metadata:\n  handled_by: Executor\n  handled_at: 2026-11-22T10:15:01Z\n  action_taken: delivered\n",
    );
    // A flow-style original: the block cannot merge into it, and is read beside it.
    check(
        "flow.yaml",
        "{type: STEER, target: Executor, message: m}\n",
        "handling_metadata:\n  handled_by: Executor\n  action_taken: delivered\n",
    );
}
