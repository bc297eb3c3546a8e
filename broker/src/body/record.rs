//! The processed record (spec/mailbox.md §3.4): a body with the handling block a claim
//! splices into it, read back as the signal it holds, and repaired where a crash tore the
//! splice. Pure: no filesystem access.
/// The marker that starts the handling block appended to a processed YAML record.
pub(crate) const YAML_HANDLING_MARKER: &str = "\nhandling_metadata:";

use std::path::Path;

use serde_json::{Map, Value};

use super::codec::{Body, Strict, body_of, parse_body, parse_json, parse_yaml, strip_bom};
use super::handling::{HANDLING_KEYS, key, redelivery_of, strip_handling};
use crate::error::{Error, ErrorKind, Result};
use crate::name::{self, Format};
use crate::signal::Signal;

/// Parses a processed record: the original body followed by the handling block sigbox
/// appended (a second JSON object on its own line, or a YAML block). A torn or unreadable
/// handling block (a crash during the append) is ignored: the signal itself is still read.
pub(crate) fn parse_record(bytes: &[u8], format: Format) -> std::result::Result<Body, String> {
    match format {
        Format::Json => {
            // The first document is the signal (parsed once); the rest are handling blocks.
            let whole = bytes;
            let bytes = strip_bom(bytes);
            let mut stream = serde_json::Deserializer::from_slice(bytes).into_iter::<Strict>();
            let mut body = match stream.next() {
                Some(Ok(Strict(head))) => {
                    let mut b = body_of(head)?;
                    b.end = Some(whole.len() - bytes.len() + stream.byte_offset());
                    b
                }
                Some(Err(e)) => {
                    // Torn while its handling fields were written: the signal is what came
                    // before them.
                    let strict = |b: &[u8]| parse_json(&String::from_utf8_lossy(b)).is_ok();
                    return match torn_cut(bytes, strict) {
                        Some(at) => {
                            let mut closed = bytes[..at].to_vec();
                            closed.push(b'}');
                            body_of(parse_json(&String::from_utf8_lossy(&closed))?)
                        }
                        None => Err(format!("invalid JSON: {e}")),
                    };
                }
                None => return Err("empty file".into()),
            };
            for tail in stream {
                match tail {
                    Ok(Strict(Value::Object(extra))) => body.fields.extend(extra),
                    _ => break,
                }
            }
            Ok(body)
        }
        Format::Yaml => {
            if let Ok(body) = parse_body(bytes, Format::Yaml) {
                return Ok(body);
            }
            // A crash during the append can leave zeros (the size grew, the data never came)
            // or a partial block after the original: read up to the first NUL, split at the
            // block's marker, and drop an unterminated last line.
            let end = memchr::memchr(0, bytes).unwrap_or(bytes.len());
            let text = std::str::from_utf8(&bytes[..end]).map_err(|e| format!("not UTF-8: {e}"))?;
            if let Some(at) = text.rfind(YAML_HANDLING_MARKER) {
                let mut body = parse_body(&text.as_bytes()[..at + 1], Format::Yaml)?;
                if let Ok(Value::Object(extra)) = parse_yaml(&text[at + 1..]) {
                    body.fields.extend(extra);
                }
                return Ok(body);
            }
            // A flow mapping gets its handling fields inside its braces, as JSON does.
            let flow = |b: &[u8]| parse_body(b, Format::Yaml).is_ok();
            if strip_bom(bytes).trim_ascii_start().starts_with(b"{") {
                if let Some(at) = torn_cut(bytes, flow) {
                    let mut closed = bytes[..at].to_vec();
                    closed.push(b'}');
                    return parse_body(&closed, Format::Yaml);
                }
                // Pages landing out of order can leave the old closing brace and then any
                // part of the new fields: the mapping is the shortest prefix that closes.
                let text = &bytes[..end];
                if let Some(body) = memchr::memchr_iter(b'}', text)
                    .take(64)
                    .find_map(|i| parse_body(&text[..=i], Format::Yaml).ok())
                {
                    return Ok(body);
                }
            }
            match parse_body(text.as_bytes(), Format::Yaml) {
                Ok(body) => Ok(body),
                Err(e) => match text.rfind('\n') {
                    Some(nl) if nl + 1 < text.len() => {
                        parse_body(&text.as_bytes()[..nl + 1], Format::Yaml).map_err(|_| e)
                    }
                    _ => Err(e),
                },
            }
        }
    }
}

impl Signal {
    /// Parses a signal file's bytes; a handling block appended by sigbox (in `processed/`) is
    /// read into `fields`.
    pub fn parse_file_bytes(bytes: &[u8], path: &Path) -> Result<Signal> {
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::new(ErrorKind::InvalidName, Some(path), "name is not UTF-8"))?;
        let format = name::format_of(file_name);
        let body = parse_record(bytes, format)
            .map_err(|reason| Error::new(ErrorKind::InvalidSignal, Some(path), reason))?;
        Signal::from_body(body, name::signal_id(file_name), path)
    }
}

/// The redelivery count a record's last handling block holds (0 when none).
pub(crate) fn redeliveries(bytes: &[u8], file_name: &str) -> u32 {
    parse_record(bytes, name::format_of(file_name))
        .ok()
        .and_then(|b| b.fields.get(key::HANDLING_METADATA).map(redelivery_of))
        .unwrap_or(0)
}

/// Reads a record (a body, or a body with a handling block) as the signal it holds, without
/// the block: what a claim delivers. The error is the reason, without the path.
pub(crate) fn read_signal(
    bytes: &[u8],
    file_name: &str,
    path: &Path,
) -> std::result::Result<Signal, String> {
    read_signal_end(bytes, file_name, path).map(|(s, _)| s)
}

/// [`read_signal`], with where a JSON record's first value ends when it was read whole (the
/// hint [`annotation`] takes instead of parsing the record again).
pub(crate) fn read_signal_end(
    bytes: &[u8],
    file_name: &str,
    path: &Path,
) -> std::result::Result<(Signal, Option<usize>), String> {
    let format = name::format_of(file_name);
    let mut body = parse_record(bytes, format)?;
    let end = body.end;
    strip_handling(&mut body.fields);
    let signal = Signal::from_body(body, name::signal_id(file_name), path)
        .map_err(|e| e.reason().to_string())?;
    // A canonical name routes before the body is read: the two must say the same thing, or
    // the file goes where its name says with what its body says (an ABORT for the Planner
    // reaching the Executor).
    if let Some(c) = name::parse_canonical(file_name) {
        let (name_type, name_target) = (c.signal_type(), c.target());
        if name_type != Some(signal.signal_type) || name_target != signal.target {
            return Err(format!(
                "the name says {} for {} but the body says {} for {}: the file is ambiguous",
                c.type_name,
                name_target,
                signal.signal_type.as_str(),
                signal.target
            ));
        }
    }
    Ok((signal, end))
}

/// How many bytes of a record are the signal: up to where the handling block a claim wrote
/// starts (§3.4; inside a JSON mapping, or after a YAML block mapping), else all of it. Only
/// the size cap asks (spec/mailbox.md §3.3): a record may outgrow the cap by its block.
pub(crate) fn signal_len(record: &[u8]) -> usize {
    let json = memchr::memmem::rfind(record, JSON_HANDLING_MARKER);
    let yaml = memchr::memmem::rfind(record, YAML_HANDLING_MARKER.as_bytes()).map(|at| at + 1);
    json.into_iter().chain(yaml).max().unwrap_or(record.len())
}

/// How a claim records its handling in the file: the bytes from `at` to the end are replaced
/// by `tail` (spec/mailbox.md §3.4), so that the record stays one document in its own format
/// for any reader.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Annotation {
    /// Where the replaced part starts: the closing brace of a JSON (or YAML flow) mapping, or
    /// the start of the handling block an earlier claim wrote, or the end of a YAML file.
    pub(crate) at: u64,
    /// What replaces it: the handling fields, and the closing brace again where there was one.
    pub(crate) tail: Vec<u8>,
}

impl Annotation {
    /// The part replaced, as [`crate::io::Io::replace_tail`] takes it: from `at` to the end of
    /// `read`, the bytes as read.
    pub(crate) fn span(&self, read: &[u8]) -> (u64, u64) {
        (self.at, read.len() as u64)
    }
}

/// The marker that starts the handling fields inside a JSON (or YAML flow) record: the
/// fields sigbox writes are always the last ones of the mapping, compact, starting here.
pub(crate) const JSON_HANDLING_MARKER: &[u8] = b",\"handling_metadata\":";

/// The annotation that records `extra` (the handling fields, `handling_metadata` first) in
/// `original`, the file's bytes as read; `end`, where its first JSON value ends, when the read
/// knows ([`read_signal_end`]).
///
/// - A mapping in braces (every JSON signal; a YAML flow mapping): the fields go inside it,
///   before its closing brace, as `,"handling_metadata":{...}}`; the record is one JSON (or
///   YAML) object. A handling block an earlier claim wrote (a redelivery, a signal put back
///   and claimed again) is replaced, not repeated; so is the second document of a record from
///   an earlier version (the signal, then the block as a second JSON object).
/// - A YAML block mapping: the fields are top-level keys after the original text, replacing
///   an earlier block (`handling_metadata:` and what follows it).
///
/// Only the bytes from `at` on change: a crash while they are written leaves the signal's own
/// bytes as they were, and [`parse_record`] reads it back.
pub(crate) fn annotation(
    original: &[u8],
    format: Format,
    extra: &Map<String, Value>,
    end: Option<usize>,
) -> Annotation {
    let braced = match format {
        Format::Json => true,
        Format::Yaml => strip_bom(original).trim_ascii_start().starts_with(b"{"),
    };
    // Where the first value ends, when the read that came before says so (a whole JSON
    // record): no second parse.
    let known = end.filter(|&e| e > 0 && original.get(e - 1) == Some(&b'}'));
    if braced && let Some(close) = known.map(|e| e - 1).or_else(|| closing_brace(original)) {
        let at = earlier_block(original, close).unwrap_or(close);
        let opened = original[..at]
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .is_some_and(|i| original[i] == b'{');
        let mut tail = Vec::with_capacity(256);
        for (i, (k, v)) in extra.iter().enumerate() {
            if i > 0 || !opened {
                tail.push(b',');
            }
            serde_json::to_writer(&mut tail, k).expect("JSON serializes");
            tail.push(b':');
            serde_json::to_writer(&mut tail, v).expect("JSON serializes");
        }
        tail.extend_from_slice(b"}\n");
        return Annotation {
            at: at as u64,
            tail,
        };
    }
    let text = String::from_utf8_lossy(original);
    let at = match text.rfind(YAML_HANDLING_MARKER) {
        // An earlier block, if what follows it is only handling fields (sigbox wrote it).
        Some(m) if only_handling_yaml(&text[m + 1..]) => m + 1,
        _ => original.len(),
    };
    let mut tail = Vec::new();
    if at > 0 && !original[..at].ends_with(b"\n") {
        tail.push(b'\n');
    }
    let block = serde_saphyr::to_string(extra).unwrap_or_else(|_| {
        // Metadata sigbox builds is plain strings and lists of agent names: this cannot
        // fail, but a record must never be lost to a formatting problem.
        format!(
            "{}: {}\n",
            key::HANDLING_METADATA,
            Value::Object(extra.clone())
        )
    });
    tail.extend_from_slice(block.as_bytes());
    if !block.ends_with('\n') {
        tail.push(b'\n');
    }
    Annotation {
        at: at as u64,
        tail,
    }
}

/// True when `a` leaves `original` one document of its format with one handling block. YAML
/// has shapes no appended block or inserted field can join (a `...` document end, an indented
/// or tagged mapping, a flow mapping with a trailing comma or a comment after it), and a
/// sender may have a `handling_metadata` of its own: such a record is left as it is (the
/// claim stands, without its record) rather than made unreadable to other readers. Checked by
/// parsing the result: for YAML always, for JSON only when the body names the block.
pub(crate) fn records_whole(original: &[u8], format: Format, a: &Annotation) -> bool {
    let needs_check = match format {
        Format::Yaml => true,
        Format::Json => memchr::memmem::find(original, key::HANDLING_METADATA.as_bytes()).is_some(),
    };
    if !needs_check {
        return true;
    }
    let mut record = original[..(a.at as usize).min(original.len())].to_vec();
    record.extend_from_slice(&a.tail);
    let Ok(text) = std::str::from_utf8(strip_bom(&record)) else {
        return false;
    };
    let parsed = match format {
        Format::Json => parse_json(text),
        Format::Yaml => parse_yaml(text),
    };
    matches!(parsed, Ok(Value::Object(m)) if m.contains_key(key::HANDLING_METADATA))
}

/// The offset of the closing brace of the mapping that `bytes` (a JSON object or a YAML flow
/// mapping, perhaps followed by an earlier version's handling document) starts with; for a
/// record torn while its handling fields were written, where they began ([`torn_cut`]).
fn closing_brace(bytes: &[u8]) -> Option<usize> {
    let body = strip_bom(bytes);
    let skip = bytes.len() - body.len();
    // The first JSON value's end (a record of an earlier version has a second one after it).
    let mut stream =
        serde_json::Deserializer::from_slice(body).into_iter::<serde::de::IgnoredAny>();
    let end = match stream.next() {
        Some(Ok(_)) => skip + stream.byte_offset(),
        // YAML flow syntax is not JSON: the last non-blank byte.
        _ => bytes.iter().rposition(|b| !b.is_ascii_whitespace())? + 1,
    };
    if end > 0 && bytes[end - 1] == b'}' {
        return Some(end - 1);
    }
    torn_cut(bytes, |b| parse_json(&String::from_utf8_lossy(b)).is_ok())
}

/// Where the handling fields of a torn record began: a crash while they were written leaves
/// the signal's bytes, then a prefix of `,"handling_metadata":...}` (perhaps only its comma),
/// then what was there before (blanks after the brace, an earlier block) or zeros (the size
/// grew, the data never came). The candidates are the end of the text when it ends in a
/// prefix of the marker, then every whole marker from the last; the first at which the text
/// before it, closed with a brace, reads (`reads`) is the cut. The marker is compact JSON with
/// unescaped quotes, so it never occurs inside a string. (Pages that land out of order can
/// also leave the old closing brace, then part of the new fields: a JSON reader takes the
/// first value and ignores the rest; [`parse_record`] does the same for a YAML flow mapping.)
pub(crate) fn torn_cut(bytes: &[u8], reads: impl Fn(&[u8]) -> bool) -> Option<usize> {
    let text = &bytes[..memchr::memchr(0, bytes).unwrap_or(bytes.len())];
    // What followed the brace the marker's comma replaced (blanks) may still be there.
    let text = text.trim_ascii_end();
    let partial = (1..JSON_HANDLING_MARKER.len())
        .rev()
        .find(|&k| text.ends_with(&JSON_HANDLING_MARKER[..k]))
        .map(|k| text.len() - k);
    let whole = memchr::memmem::rfind_iter(text, JSON_HANDLING_MARKER);
    partial.into_iter().chain(whole).find(|&at| {
        let mut closed = text[..at].to_vec();
        closed.push(b'}');
        reads(&closed)
    })
}

/// Where the handling fields an earlier claim wrote inside the mapping start (their marker),
/// when the mapping closing at `close` ends with them: everything from the marker to the
/// brace is handling fields, nothing of the signal.
fn earlier_block(bytes: &[u8], close: usize) -> Option<usize> {
    let at = memchr::memmem::rfind(&bytes[..close], JSON_HANDLING_MARKER)?;
    let mut inner = b"{".to_vec();
    inner.extend_from_slice(&bytes[at + 1..=close]);
    match serde_json::from_slice::<Map<String, Value>>(&inner) {
        Ok(m) if m.keys().all(|k| HANDLING_KEYS.contains(&k.as_str())) => Some(at),
        _ => None,
    }
}

/// True when `text` (from a `handling_metadata:` line on) is a YAML mapping of handling fields
/// only.
fn only_handling_yaml(text: &str) -> bool {
    matches!(parse_yaml(text), Ok(Value::Object(m))
        if m.keys().all(|k| HANDLING_KEYS.contains(&k.as_str())))
}
