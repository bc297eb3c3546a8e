//! Bytes to signals and back (spec/mailbox.md §3.2-3.4): the body formats (JSON canonical, JSON
//! and YAML accepted), the processed record (a body followed by the handling block sigbox
//! appends) and that block's schema. Pure: no filesystem access.

use std::path::Path;

use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use crate::clock::{self, Precision};
use crate::error::{Error, ErrorKind, Result};
use crate::name::{self, Format};
use crate::signal::{NewSignal, Signal, SignalType, Target};

/// What a body says, before its type is known to be routable.
#[derive(Clone, Debug)]
pub(crate) struct Body {
    pub(crate) type_name: String,
    pub(crate) target: std::result::Result<Target, String>,
    pub(crate) created_at: Option<DateTime<FixedOffset>>,
    pub(crate) fields: Map<String, Value>,
    /// For a JSON record read whole: the offset just past its first value (the object whose
    /// closing brace a claim's handling fields replace, [`annotation`]).
    pub(crate) end: Option<usize>,
}

/// Parses a body as `format`. The error is the reason, without the path.
pub(crate) fn parse_body(bytes: &[u8], format: Format) -> std::result::Result<Body, String> {
    let text = std::str::from_utf8(strip_bom(bytes)).map_err(|e| format!("not UTF-8: {e}"))?;
    if text.trim().is_empty() {
        return Err("empty file".into());
    }
    let value: Value = match format {
        Format::Json => parse_json(text)?,
        Format::Yaml => {
            yaml_printable(text)?;
            parse_yaml_body(text)?
        }
    };
    body_of(value)
}

/// YAML allows only printable characters in a document (YAML 1.2 §5.1: tab, line feed, carriage
/// return, and no other C0 control, DEL or C1 control but NEL): a NUL or an escape character is
/// refused by name instead of read one way by one parser and another way by the next (a record
/// is read up to its first NUL, §3.4).
fn yaml_printable(text: &str) -> std::result::Result<(), String> {
    let bad = |c: char| c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\u{85}');
    match text.char_indices().find(|&(_, c)| bad(c)) {
        None => Ok(()),
        Some((at, c)) => {
            let line = text[..at].matches('\n').count() + 1;
            Err(format!(
                "invalid YAML: control character U+{:04X} at line {line} (YAML allows only \
                 printable characters)",
                c as u32
            ))
        }
    }
}

/// `bytes` without a leading UTF-8 byte order mark (which editors on some systems write, and
/// which is no part of the document).
pub(crate) fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// Parses one JSON document, refusing duplicate keys at any depth: a second `"type"` or
/// `"target"` would otherwise silently win.
pub(crate) fn parse_json(text: &str) -> std::result::Result<Value, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde::Deserialize::deserialize(&mut de)
        .map(|Strict(v)| v)
        .map_err(|e| format!("invalid JSON: {e}"))?;
    de.end().map_err(|e| format!("invalid JSON: {e}"))?;
    Ok(value)
}

/// A JSON value whose objects have no duplicate keys (deserializing fails on one).
pub(crate) struct Strict(pub(crate) Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> std::result::Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        serde::Deserialize::deserialize(d).map(|Strict(v)| v)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(v) = map.next_value()?;
            if out.insert(key.clone(), v).is_some() {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key `{key}` (a field may appear once)"
                )));
            }
        }
        Ok(Value::Object(out))
    }
}

/// The [`Body`] of a parsed document.
fn body_of(value: Value) -> std::result::Result<Body, String> {
    let Value::Object(fields) = value else {
        return Err("the document is not a mapping of fields".into());
    };
    let type_name = match fields.get("type") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(_) => return Err("field `type` is not a non-empty string".into()),
        None => return Err("missing field `type`".into()),
    };
    let target = match fields.get("target") {
        None | Some(Value::Null) => Ok(Target::None),
        Some(Value::String(s)) => Target::parse(Some(s)),
        Some(other) => Err(format!("field `target` is not a string: {other}")),
    };
    let created_at = match fields.get("created_at") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(instant(s.trim()).ok_or_else(|| {
            format!(
                "field `created_at` is not an ISO-8601 instant ({s:?}); write it as \
                 2026-02-08T14:30:04Z"
            )
        })?),
        Some(other) => {
            return Err(format!(
                "field `created_at` must be an ISO-8601 instant as a string, not {other}"
            ));
        }
    };
    match fields.get("from") {
        None | Some(Value::Null | Value::String(_)) => {}
        Some(other) => return Err(format!("field `from` must be a string, not {other}")),
    }
    match fields.get("iteration") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.is_u64() => {}
        Some(Value::String(d))
            if d.len() > 1 && d.starts_with('0') && d.bytes().all(|b| b.is_ascii_digit()) =>
        {
            return Err(format!(
                "field `iteration` is {d}: a leading zero is octal to YAML 1.1 readers and \
                 decimal to YAML 1.2 ones; write the number without it"
            ));
        }
        Some(other) => {
            return Err(format!(
                "field `iteration` must be a whole number of 0 or more, not {other}"
            ));
        }
    }
    Ok(Body {
        type_name,
        target,
        created_at,
        fields,
        end: None,
    })
}

/// The marker that starts the handling block appended to a processed YAML record.
pub(crate) const YAML_HANDLING_MARKER: &str = "\nhandling_metadata:";

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

/// An instant: RFC 3339 with its offset, or (as upstream Ralph's names are read) a local time
/// without one.
/// A body's `created_at` (in `fields`) as every output shows it
/// ([`Signal::created_at_rfc3339`]); `None` when there is none, or it is not an instant.
pub(crate) fn created_at_text(fields: &Map<String, Value>) -> Option<String> {
    let written = fields.get("created_at")?.as_str()?.trim();
    Some(crate::signal::rfc3339_as_written(
        instant(written)?,
        Some(written),
    ))
}

fn instant(s: &str) -> Option<DateTime<FixedOffset>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t);
    }
    let naive = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f"))
        .ok()?;
    naive
        .and_local_timezone(chrono::Local)
        .earliest()
        .map(|t| t.fixed_offset())
}

/// The fields whose values are text: in YAML their scalars are kept exactly as written
/// (`message: no` is the text "no", `target: 017` is "017"), never read as booleans or numbers.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct TextFields {
    #[serde(rename = "type")]
    type_name: Option<String>,
    target: Option<String>,
    message: Option<String>,
    from: Option<String>,
    id: Option<String>,
    created_at: Option<String>,
}

/// A YAML body: the document as values, then its text fields read again as text.
fn parse_yaml_body(text: &str) -> std::result::Result<Value, String> {
    let mut value = parse_yaml(text)?;
    if let Value::Object(fields) = &mut value
        && let Ok(t) = serde_saphyr::from_str_with_options::<TextFields>(text, yaml_options())
    {
        let text_fields = [
            ("type", t.type_name),
            ("target", t.target),
            ("message", t.message),
            ("from", t.from),
            ("id", t.id),
            ("created_at", t.created_at),
        ];
        for (key, text) in text_fields {
            if let Some(text) = text
                && fields
                    .get(key)
                    .is_some_and(|v| !v.is_string() && !v.is_null())
            {
                fields.insert(key.to_string(), Value::String(text));
            }
        }
    }
    Ok(value)
}

/// YAML limits: a body is a handful of fields, so anything deep or alias-heavy is hostile.
/// YAML 1.2 booleans only (`yes`/`no`/`on`/`off` are text) and duplicate keys refused. A
/// non-finite number (`.inf`, `-.inf`, `.nan`, or a literal too large for a double such as
/// `1e999`), which JSON cannot hold, is read as the string of its canonical YAML spelling
/// (`.inf`, `-.inf`, `.nan`): kept in a field sigbox does not know, refused by name in one it
/// does (spec/mailbox.md §3.3).
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: 64,
            max_aliases: 64,
            max_anchors: 64,
            max_events: 100_000,
            max_nodes: 100_000,
            max_total_scalar_bytes: 2 * 1024 * 1024,
            max_documents: 1,
        },
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::Error,
        non_finite_float_policy: serde_saphyr::options::NonFiniteFloatPolicy::AsString,
    }
}

pub(crate) fn parse_yaml(text: &str) -> std::result::Result<Value, String> {
    serde_saphyr::from_str_with_options::<Value>(text, yaml_options())
        .map_err(|e| format!("invalid YAML: {}", yaml_reason(&e.to_string())))
}

/// A YAML error's reason in sigbox's words, without the parser's internals.
fn yaml_reason(e: &str) -> String {
    let line = first_line(e);
    if line.to_ascii_lowercase().contains("duplicate") {
        let key = line
            .split('`')
            .nth(1)
            .or_else(|| line.split('"').nth(1))
            .map(|k| format!(" `{k}`"))
            .unwrap_or_default();
        return format!("duplicate key{key} (a field may appear once)");
    }
    if line.contains("budget") {
        return "too deep, too large or too many aliases for a signal".into();
    }
    line.to_string()
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

impl Signal {
    /// Builds a signal from a parsed body. Fails for unknown types and invalid targets.
    pub(crate) fn from_body(body: Body, id: &str, path: &Path) -> Result<Signal> {
        let signal_type = SignalType::parse(&body.type_name).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidSignal,
                Some(path),
                format!("unknown signal type {:?}", body.type_name),
            )
        })?;
        let target = body
            .target
            .map_err(|reason| Error::new(ErrorKind::InvalidName, Some(path), reason))?;
        let message = match body.fields.get("message") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        };
        let from = match body.fields.get("from") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        let iteration = body.fields.get("iteration").and_then(Value::as_u64);
        Ok(Signal {
            id: id.to_string(),
            signal_type,
            type_name: body.type_name,
            target,
            message,
            from,
            iteration,
            created_at: body.created_at,
            fields: body.fields,
            path: path.to_path_buf(),
            record: None,
        })
    }

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

/// The canonical body of a signal sigbox sends (spec §3.2): one JSON object on one line, its
/// fields in a fixed order (`id`, `type`, `target`, `message`, `from`, `iteration`,
/// `created_at`), then the sender's own fields, which never override these.
pub(crate) fn canonical_bytes(s: &NewSignal, id: &str, at: DateTime<Utc>) -> Vec<u8> {
    let mut body = Map::new();
    body.insert("id".into(), json!(id));
    body.insert("type".into(), json!(s.signal_type.as_str()));
    body.insert(
        "target".into(),
        match &s.target {
            Target::All => json!("ALL"),
            Target::None => Value::Null,
            Target::Agent(a) => json!(a),
        },
    );
    if let Some(m) = &s.message {
        body.insert("message".into(), json!(m));
    }
    if let Some(f) = &s.from {
        body.insert("from".into(), json!(f));
    }
    if let Some(i) = s.iteration {
        body.insert("iteration".into(), json!(i));
    }
    body.insert(
        "created_at".into(),
        json!(at.to_rfc3339_opts(SecondsFormat::Micros, true)),
    );
    for (k, v) in &s.extra {
        body.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let mut bytes = serde_json::to_vec(&Value::Object(body)).expect("a JSON map serializes");
    bytes.push(b'\n');
    bytes
}

/// The field names of the handling block (upstream's `handling_metadata` schema), named once.
pub(crate) mod key {
    /// The block itself: who handled the signal, when, and how.
    pub(crate) const HANDLING_METADATA: &str = "handling_metadata";
    /// A broadcast's archive status: `delivered` or `partial`.
    pub(crate) const DELIVERY_STATUS: &str = "delivery_status";
    /// The quorum agents that had not acked an archived broadcast.
    pub(crate) const UNACKED_AGENTS: &str = "unacked_agents";
    /// Inside the block: the agent.
    pub(crate) const HANDLED_BY: &str = "handled_by";
    /// Inside the block: when (RFC 3339, microseconds).
    pub(crate) const HANDLED_AT: &str = "handled_at";
    /// Inside the block: what was done.
    pub(crate) const ACTION_TAKEN: &str = "action_taken";
    /// Inside a redelivery's block: how many times the signal has been delivered again.
    pub(crate) const REDELIVERY: &str = "redelivery";
}

/// Fields sigbox adds to archived files; they are not part of the signal.
const HANDLING_KEYS: [&str; 3] = [
    key::HANDLING_METADATA,
    key::DELIVERY_STATUS,
    key::UNACKED_AGENTS,
];

/// How a broadcast was archived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Archived {
    /// Every quorum agent acked it.
    Delivered,
    /// Archived by `finish` before every quorum agent acked it.
    Partial,
}

impl Archived {
    /// The status as written in the record: `delivered` or `partial`.
    pub fn as_str(self) -> &'static str {
        match self {
            Archived::Delivered => "delivered",
            Archived::Partial => "partial",
        }
    }
}

impl std::fmt::Display for Archived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The handling block a claim appends: what it says, built once here.
#[derive(Debug)]
pub(crate) enum Handled<'a> {
    /// A claim delivered the signal to the agent.
    Delivered,
    /// A broadcast archived with its status and the quorum agents that had not acked.
    Archived(Archived, &'a [String]),
    /// A claim whose consumer died before handing it over, delivered again: the count.
    Redelivered(u32),
    /// Taken by a bridge and published to other hosts (spec/bridge.md).
    Exported,
}

impl Handled<'_> {
    /// The fields appended for `agent`, now.
    pub(crate) fn fields(&self, agent: &str) -> Map<String, Value> {
        let action = match self {
            Handled::Delivered => "delivered",
            Handled::Archived(..) => "broadcast archived",
            Handled::Redelivered(_) => "redelivered",
            Handled::Exported => "exported",
        };
        let mut extra = Map::new();
        extra.insert(
            key::HANDLING_METADATA.into(),
            json!({
                key::HANDLED_BY: agent,
                key::HANDLED_AT: clock::now_rfc3339(Precision::Micros),
                key::ACTION_TAKEN: action,
            }),
        );
        match self {
            Handled::Archived(status, unacked) => {
                extra.insert(key::DELIVERY_STATUS.into(), json!(status.as_str()));
                extra.insert(key::UNACKED_AGENTS.into(), json!(unacked));
            }
            Handled::Redelivered(n) => {
                if let Some(Value::Object(block)) = extra.get_mut(key::HANDLING_METADATA) {
                    block.insert(key::REDELIVERY.into(), json!(n));
                }
            }
            Handled::Delivered | Handled::Exported => {}
        }
        extra
    }
}

/// The handling block of a processed record, as [`Signal::handling`] reads it back.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Handling {
    /// The agent that claimed or archived it.
    pub handled_by: Option<String>,
    /// When (RFC 3339).
    pub handled_at: Option<String>,
    /// What was done: `delivered`, `redelivered`, `broadcast archived`, `exported`.
    pub action_taken: Option<String>,
    /// For an archived broadcast: `delivered` or `partial`.
    pub delivery_status: Option<String>,
    /// For an archived broadcast: the quorum agents that had not acked.
    pub unacked_agents: Option<Vec<String>>,
    /// How many times the signal was delivered again because a consumer died before handing
    /// it over (0: never).
    pub redelivery: u32,
}

impl Signal {
    /// The handling block of a record read from `processed/` ([`crate::Mailbox::processed`]);
    /// `None` for a signal that carries none (claimed, but the annotation never landed).
    pub fn handling(&self) -> Option<Handling> {
        let meta = self.fields.get(key::HANDLING_METADATA)?;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(String::from);
        Some(Handling {
            handled_by: text(meta.get(key::HANDLED_BY)),
            handled_at: text(meta.get(key::HANDLED_AT)),
            action_taken: text(meta.get(key::ACTION_TAKEN)),
            redelivery: redelivery_of(meta),
            delivery_status: text(self.fields.get(key::DELIVERY_STATUS)),
            unacked_agents: self
                .fields
                .get(key::UNACKED_AGENTS)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                }),
        })
    }
}

impl Signal {
    /// 0 for a first delivery; n when this is the n-th time the signal is delivered again
    /// because a consumer died (or lost power) after claiming it and before handing it over
    /// (spec/mailbox.md §9.2). A consumer that keeps the ids it has acted on never acts twice.
    pub fn redelivery(&self) -> u32 {
        let here = self
            .fields
            .get(key::HANDLING_METADATA)
            .map_or(0, redelivery_of);
        // Delivered again on another host after a consumer there died (spec/bridge.md §5).
        let crossed = self
            .fields
            .get(crate::mailbox::BRIDGED)
            .map_or(0, redelivery_of);
        here.max(crossed)
    }
}

fn redelivery_of(block: &Value) -> u32 {
    block
        .get(key::REDELIVERY)
        .and_then(Value::as_u64)
        .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// The redelivery count a record's last handling block holds (0 when none).
pub(crate) fn redeliveries(bytes: &[u8], file_name: &str) -> u32 {
    parse_record(bytes, name::format_of(file_name))
        .ok()
        .and_then(|b| b.fields.get(key::HANDLING_METADATA).map(redelivery_of))
        .unwrap_or(0)
}

/// Removes the handling block from a record's fields, leaving the signal as it was sent.
pub(crate) fn strip_handling(fields: &mut Map<String, Value>) {
    for k in HANDLING_KEYS {
        fields.remove(k);
    }
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

#[cfg(test)]
mod record_tests {
    //! A processed record is one document in its own format (spec/mailbox.md §3.4), whatever
    //! was claimed and however often, and a crash while its handling fields are written leaves
    //! the signal readable.

    use super::*;

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
                    record.starts_with(
                        &original.as_bytes()[..a.at.min(original.len() as u64) as usize]
                    )
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
}
