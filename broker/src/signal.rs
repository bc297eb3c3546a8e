//! Signals: types, targets, and the body formats (JSON canonical, JSON and YAML accepted).

use std::fmt;
use std::path::{Path, PathBuf};

use chrono::{DateTime, FixedOffset};
use serde_json::{Map, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::name::{self, Format};

/// The kinds of signal a mailbox routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SignalType {
    /// Change direction.
    Steer,
    /// Information; never restarts, halts or escalates.
    Info,
    /// Finish the atomic step, then wait for RESUME, ABORT or a new signal.
    Pause,
    /// Stop the session. `STOP` is an old alias.
    Abort,
    /// Orchestrator only, in an approval state.
    Approve,
    /// Orchestrator only, in an approval state.
    Skip,
    /// Ends a PAUSE. A sigbox extension: upstream Ralph has no RESUME.
    Resume,
}

impl SignalType {
    /// All types, in a stable order.
    pub const ALL: [SignalType; 7] = [
        SignalType::Steer,
        SignalType::Info,
        SignalType::Pause,
        SignalType::Abort,
        SignalType::Approve,
        SignalType::Skip,
        SignalType::Resume,
    ];

    /// Parses a type name, case-insensitively; `STOP` is `ABORT`. `None` for unknown types.
    pub fn parse(s: &str) -> Option<SignalType> {
        let s = s.trim();
        Some(match () {
            _ if s.eq_ignore_ascii_case("STEER") => SignalType::Steer,
            _ if s.eq_ignore_ascii_case("INFO") => SignalType::Info,
            _ if s.eq_ignore_ascii_case("PAUSE") => SignalType::Pause,
            _ if s.eq_ignore_ascii_case("ABORT") || s.eq_ignore_ascii_case("STOP") => {
                SignalType::Abort
            }
            _ if s.eq_ignore_ascii_case("APPROVE") => SignalType::Approve,
            _ if s.eq_ignore_ascii_case("SKIP") => SignalType::Skip,
            _ if s.eq_ignore_ascii_case("RESUME") => SignalType::Resume,
            _ => return None,
        })
    }

    /// The canonical upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            SignalType::Steer => "STEER",
            SignalType::Info => "INFO",
            SignalType::Pause => "PAUSE",
            SignalType::Abort => "ABORT",
            SignalType::Approve => "APPROVE",
            SignalType::Skip => "SKIP",
            SignalType::Resume => "RESUME",
        }
    }

    /// True for APPROVE and SKIP, which only the orchestrator takes, in an approval state.
    pub fn is_approval(self) -> bool {
        matches!(self, SignalType::Approve | SignalType::Skip)
    }

    /// True for PAUSE and ABORT, after which a checkpoint pass stops.
    pub fn stops_pass(self) -> bool {
        matches!(self, SignalType::Pause | SignalType::Abort)
    }
}

impl fmt::Display for SignalType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a signal is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Every agent, once each (a broadcast).
    All,
    /// No target: the orchestrator consumes it.
    None,
    /// One agent, by name.
    Agent(String),
}

/// The upstream Ralph roles; a target naming one of them in another case is read as the role.
pub const ROLES: [&str; 6] = [
    "Orchestrator",
    "Executor",
    "Planner",
    "Questioner",
    "Reviewer",
    "Librarian",
];

impl Target {
    /// Parses a target as written in a body: `ALL` (any case), an agent name, or empty/absent
    /// for none. Names that could escape the root or break canonical names are refused.
    pub fn parse(s: Option<&str>) -> std::result::Result<Target, String> {
        let Some(s) = s.map(str::trim).filter(|s| !s.is_empty()) else {
            return Ok(Target::None);
        };
        if s.eq_ignore_ascii_case("ALL") {
            return Ok(Target::All);
        }
        if let Some(role) = ROLES.iter().find(|r| r.eq_ignore_ascii_case(s)) {
            return Ok(Target::Agent((*role).to_string()));
        }
        if name::valid_agent(s) {
            Ok(Target::Agent(s.to_string()))
        } else {
            Err(format!(
                "invalid target {s:?}: an agent name is a letter then up to 63 letters, digits, \
                 '_' or '-' (no '/', '..', dots or control characters)"
            ))
        }
    }

    /// The agent name, for an agent target.
    pub fn agent(&self) -> Option<&str> {
        match self {
            Target::Agent(a) => Some(a),
            _ => None,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::All => f.write_str("ALL"),
            Target::None => f.write_str("-"),
            Target::Agent(a) => f.write_str(a),
        }
    }
}

/// A signal read from a file.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub struct Signal {
    /// The file name without its extension.
    pub id: String,
    /// The type.
    pub signal_type: SignalType,
    /// The type as written (`STOP` stays `STOP` here).
    pub type_name: String,
    /// The target.
    pub target: Target,
    /// The message, when there is one (non-string messages are rendered as JSON).
    pub message: Option<String>,
    /// The sender, when recorded.
    pub from: Option<String>,
    /// The iteration the sender meant, when recorded.
    pub iteration: Option<u64>,
    /// When it was created, from the body.
    pub created_at: Option<DateTime<FixedOffset>>,
    /// The whole body, unknown fields included, in their original order.
    pub fields: Map<String, Value>,
    /// Where the file is now.
    pub path: PathBuf,
}

/// What a body says, before its type is known to be routable.
#[derive(Clone, Debug)]
pub(crate) struct Body {
    pub(crate) type_name: String,
    pub(crate) target: std::result::Result<Target, String>,
    pub(crate) created_at: Option<DateTime<FixedOffset>>,
    pub(crate) fields: Map<String, Value>,
}

/// Parses a body as `format`. The error is the reason, without the path.
pub(crate) fn parse_body(bytes: &[u8], format: Format) -> std::result::Result<Body, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    if text.trim().is_empty() {
        return Err("empty file".into());
    }
    let value: Value = match format {
        Format::Json => serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?,
        Format::Yaml => parse_yaml(text)?,
    };
    body_of(value)
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
        Some(Value::String(s)) => Some(
            DateTime::parse_from_rfc3339(s.trim())
                .map_err(|e| format!("field `created_at` is not an ISO-8601 instant: {e}"))?,
        ),
        _ => None,
    };
    Ok(Body {
        type_name,
        target,
        created_at,
        fields,
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
            let mut stream = serde_json::Deserializer::from_slice(bytes).into_iter::<Value>();
            let mut body = match stream.next() {
                Some(Ok(head)) => body_of(head)?,
                Some(Err(e)) => return Err(format!("invalid JSON: {e}")),
                None => return Err("empty file".into()),
            };
            for tail in stream {
                match tail {
                    Ok(Value::Object(extra)) => body.fields.extend(extra),
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

/// YAML limits: a body is a handful of fields, so anything deep or alias-heavy is hostile.
fn parse_yaml(text: &str) -> std::result::Result<Value, String> {
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: 64,
            max_aliases: 64,
            max_anchors: 64,
            max_events: 100_000,
            max_nodes: 100_000,
            max_total_scalar_bytes: 2 * 1024 * 1024,
            max_documents: 1,
        },
    };
    serde_saphyr::from_str_with_options::<Value>(text, options)
        .map_err(|e| format!("invalid YAML: {}", first_line(&e.to_string())))
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
        })
    }

    /// Parses a signal file's bytes; a handling block appended by sigbox (in `processed/`) is
    /// read into `fields`.
    pub fn parse_file_bytes(bytes: &[u8], path: &Path) -> Result<Signal> {
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::new(ErrorKind::InvalidName, Some(path), "name is not UTF-8"))?;
        let format = format_of(file_name);
        let body = parse_record(bytes, format)
            .map_err(|reason| Error::new(ErrorKind::InvalidSignal, Some(path), reason))?;
        Signal::from_body(body, name::signal_id(file_name), path)
    }
}

/// The body format a file name implies (canonical and `.json` names are JSON).
pub(crate) fn format_of(file_name: &str) -> Format {
    if file_name.ends_with(".yaml") || file_name.ends_with(".yml") {
        Format::Yaml
    } else {
        Format::Json
    }
}

/// A signal to send.
#[derive(Clone, Debug)]
pub struct NewSignal {
    pub(crate) signal_type: SignalType,
    pub(crate) target: Target,
    pub(crate) message: Option<String>,
    pub(crate) from: Option<String>,
    pub(crate) iteration: Option<u64>,
    pub(crate) extra: Map<String, Value>,
}

impl NewSignal {
    /// A new signal of `signal_type` for everyone (`ALL`) with no message.
    pub fn new(signal_type: SignalType) -> NewSignal {
        NewSignal {
            signal_type,
            target: Target::All,
            message: None,
            from: None,
            iteration: None,
            extra: Map::new(),
        }
    }

    /// Sets the target. Default: [`Target::All`].
    pub fn target(&mut self, target: Target) -> &mut Self {
        self.target = target;
        self
    }

    /// Sets the message. Default: none.
    pub fn message(&mut self, message: impl Into<String>) -> &mut Self {
        self.message = Some(message.into());
        self
    }

    /// Sets the sender's name. Default: none.
    pub fn from(&mut self, from: impl Into<String>) -> &mut Self {
        self.from = Some(from.into());
        self
    }

    /// Sets the iteration the signal is meant for. Default: none.
    pub fn iteration(&mut self, iteration: u64) -> &mut Self {
        self.iteration = Some(iteration);
        self
    }

    /// Adds a field of the sender's own; kept end to end. Default: none. Reserved names
    /// (`id`, `type`, `target`, `message`, `from`, `iteration`, `created_at`) are ignored here.
    pub fn field(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        self.extra.insert(key.into(), value);
        self
    }
}
