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
    for g in sigbox::goblin::GoblinSignal::ALL {
        let _ = sigbox::goblin::parse_payload(g, data);
    }
    let _ = sigbox::mux::parse_record(data);
}

/// Runs `check` on every file of `fuzz/corpus/<target>/`; returns how many it ran.
pub fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        // A running fuzzer may remove files from the corpus while this reads it.
        let Ok(data) = std::fs::read(&p) else {
            continue;
        };
        let r = std::panic::catch_unwind(|| check(&data));
        assert!(r.is_ok(), "corpus file {} fails {target}", p.display());
        n += 1;
    }
    n
}
