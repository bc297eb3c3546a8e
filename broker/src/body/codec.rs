//! The body formats (spec/mailbox.md §3.2, §3.3): JSON canonical, JSON and YAML accepted,
//! parsed strictly into a [`Body`]; a body into a [`Signal`], and a new signal into its
//! canonical bytes. Pure: no filesystem access.

use std::path::Path;

use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use crate::error::{Error, ErrorKind, Result};
use crate::name::Format;
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
pub(super) fn body_of(value: Value) -> std::result::Result<Body, String> {
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

/// A body's `created_at` (in `fields`) as every output shows it
/// ([`Signal::created_at_rfc3339`]); `None` when there is none, or it is not an instant.
pub(crate) fn created_at_text(fields: &Map<String, Value>) -> Option<String> {
    let written = fields.get("created_at")?.as_str()?.trim();
    Some(crate::signal::rfc3339_as_written(
        instant(written)?,
        Some(written),
    ))
}

/// An instant: RFC 3339 with its offset, or (as upstream Ralph's names are read) a local time
/// without one.
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
        // `duplicate mapping key: type, set DuplicateKeyPolicy ...`, or a key in quotes.
        let key = line
            .split_once("key: ")
            .and_then(|(_, rest)| rest.split(", set ").next())
            .or_else(|| line.split('`').nth(1))
            .or_else(|| line.split('"').nth(1))
            .filter(|k| !k.is_empty())
            .map(|k| format!(" `{k}`"))
            .unwrap_or_default();
        return format!("duplicate key{key} (a field may appear once)");
    }
    if line.contains("budget") || line.to_ascii_lowercase().contains("multiple documents") {
        // `budget breached: Depth { .. }`: which limit, in sigbox's words.
        let why = [
            ("Documents", "more than one YAML document (a `---` line starts another): a signal file holds one"),
            ("MultipleDocuments", "more than one YAML document (a `---` line starts another): a signal file holds one"),
            ("multiple documents", "more than one YAML document (a `---` line starts another): a signal file holds one"),
            ("Depth", "nested deeper than 64 levels: too deep for a signal"),
            ("Aliases", "more than 64 aliases: too many for a signal (an alias bomb?)"),
            ("Anchors", "more than 64 anchors: too many for a signal"),
            ("Nodes", "more than 100,000 nodes: too large for a signal"),
            ("Events", "more than 100,000 nodes: too large for a signal"),
            ("ScalarBytes", "more than 2 MiB of text: too large for a signal"),
        ]
        .iter()
        .find(|(k, _)| line.contains(k))
        .map_or("too deep, too large or too many aliases for a signal", |(_, w)| w);
        return why.into();
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
