//! Flux: `flux:signal` lines on a stage's stdout, and the result document. See
//! `spec/streams.md`.

use serde_json::{Map, Value, json};

use crate::lines::{Line, LineSplitter};

/// The verdicts a stdout signal may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Go on.
    Proceed,
    /// Stop here (see the reason: `already_complete`, `needs_human`).
    Hold,
    /// Do the stage again.
    Rework,
    /// Give up.
    Abort,
}

impl Verdict {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Proceed => "proceed",
            Verdict::Hold => "hold",
            Verdict::Rework => "rework",
            Verdict::Abort => "abort",
        }
    }

    fn parse(s: &str) -> Option<Verdict> {
        Some(match s {
            "proceed" => Verdict::Proceed,
            "hold" => Verdict::Hold,
            "rework" => Verdict::Rework,
            "abort" => Verdict::Abort,
            _ => return None,
        })
    }
}

/// A `flux:signal` as upstream reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct FluxSignal {
    /// 1-based line of the stream.
    pub line: usize,
    /// The verdict.
    pub verdict: Verdict,
    /// `reason`, when a string.
    pub reason: Option<String>,
    /// `summary`, when a string.
    pub summary: Option<String>,
    /// `meta`, when an object (`targetState` for already_complete, `question` for needs_human).
    pub meta: Option<Map<String, Value>>,
    /// `cost_usd`, when a number.
    pub cost_usd: Option<f64>,
    /// `tokens_in`, when a number (floored).
    pub tokens_in: Option<i64>,
    /// `tokens_out`, when a number (floored).
    pub tokens_out: Option<i64>,
}

impl FluxSignal {
    /// `meta.targetState` of a `hold` with reason `already_complete`.
    pub fn target_state(&self) -> Option<&str> {
        self.meta.as_ref()?.get("targetState")?.as_str()
    }

    /// `meta.question` of a `hold` with reason `needs_human`.
    pub fn question(&self) -> Option<&str> {
        self.meta.as_ref()?.get("question")?.as_str()
    }

    /// The event as one JSON object (`sigbox flux parse` output).
    pub fn to_json(&self) -> Value {
        json!({
            "line": self.line,
            "verdict": self.verdict.as_str(),
            "reason": self.reason,
            "summary": self.summary,
            "meta": self.meta,
            "cost_usd": self.cost_usd,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        })
    }
}

/// What the parser reports.
#[derive(Clone, Debug, PartialEq)]
pub enum FluxEvent {
    /// A valid signal.
    Signal(FluxSignal),
    /// A line that is a signal but not a valid one (missing or unknown verdict).
    Error {
        /// 1-based line.
        line: usize,
        /// What is wrong.
        error: String,
    },
    /// A line over the length cap, skipped.
    TooLong {
        /// 1-based line.
        line: usize,
        /// Its length in bytes.
        len: usize,
    },
}

impl FluxEvent {
    /// The event as one JSON object.
    pub fn to_json(&self) -> Value {
        match self {
            FluxEvent::Signal(s) => s.to_json(),
            FluxEvent::Error { line, error } => json!({"line": line, "error": error}),
            FluxEvent::TooLong { line, len } => json!({
                "line": line,
                "error": format!("line of {len} bytes is over the line cap: skipped"),
            }),
        }
    }
}

/// Default line cap: 1 MiB.
pub const MAX_LINE: usize = 1024 * 1024;

/// An incremental `flux:signal` parser: any split of the stream gives the same events.
#[derive(Debug)]
pub struct FluxParser {
    lines: LineSplitter,
    last: Option<FluxSignal>,
    /// What every line that can carry a signal contains (see [`could_signal`]).
    needles: [memchr::memmem::Finder<'static>; 2],
}

impl Default for FluxParser {
    fn default() -> Self {
        FluxParser::new(MAX_LINE)
    }
}

impl FluxParser {
    /// A parser with a line cap of `max_line` bytes.
    pub fn new(max_line: usize) -> FluxParser {
        FluxParser {
            lines: LineSplitter::new(max_line),
            last: None,
            needles: [
                memchr::memmem::Finder::new(KEY).into_owned(),
                memchr::memmem::Finder::new(ESCAPE).into_owned(),
            ],
        }
    }

    /// Feeds a chunk of the stream; returns the events of the lines it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<FluxEvent> {
        let mut out = Vec::new();
        let mut f = |l: Line<'_>| {
            if let Some(e) = event_of(l) {
                out.push(e);
            }
        };
        // Only the lines that could carry a signal need looking at (see `could_signal`).
        self.lines.feed_sparse(chunk, &self.needles, &mut f);
        self.remember(&out);
        out
    }

    /// Ends the stream (a last line without a newline counts).
    pub fn finish(&mut self) -> Vec<FluxEvent> {
        let mut out = Vec::new();
        self.lines.finish(&mut |l| {
            if let Some(e) = event_of(l) {
                out.push(e);
            }
        });
        self.remember(&out);
        out
    }

    fn remember(&mut self, events: &[FluxEvent]) {
        if let Some(s) = events.iter().rev().find_map(|e| match e {
            FluxEvent::Signal(s) => Some(s),
            _ => None,
        }) {
            self.last = Some(s.clone());
        }
    }

    /// The last valid signal so far: upstream acts on the last one.
    pub fn last(&self) -> Option<&FluxSignal> {
        self.last.as_ref()
    }
}

const KEY: &[u8] = b"flux:signal";
/// The start of a JSON `\u` escape.
const ESCAPE: &[u8] = b"\\u";

/// True when a line can carry a signal, to upstream as here: a signal's JSON holds the key
/// `flux:signal`, embedded ones too, whose characters appear as they are or as `\uXXXX`
/// escapes (JSON has no other escape for them; an embedded line's own escapes are escaped
/// again, `\\u`, and still hold `\u`). So a line holding neither is plain output.
fn could_signal(t: &[u8]) -> bool {
    memchr::memmem::find(t, KEY).is_some() || memchr::memmem::find(t, ESCAPE).is_some()
}

fn event_of(l: Line<'_>) -> Option<FluxEvent> {
    match l {
        Line::TooLong(line, len) => Some(FluxEvent::TooLong { line, len }),
        Line::Text(line, text) => parse_line(line, text),
        Line::Gap(_) => None,
    }
}

/// True for the characters JavaScript's `trim()` removes: its WhiteSpace (tab, vertical tab,
/// form feed, U+FEFF and every `Zs` space) and LineTerminator (LF, CR, U+2028, U+2029). That is
/// Unicode `White_Space` without U+0085 (NEL, which JavaScript keeps), plus U+FEFF.
fn js_space(c: char) -> bool {
    (c.is_whitespace() && c != '\u{85}') || c == '\u{feff}'
}

/// `bytes` without the white space JavaScript's `trim()` removes at either end; ASCII-only
/// trimming where the line is not UTF-8.
fn trim_like_js(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.trim_matches(js_space).as_bytes(),
        Err(_) => bytes.trim_ascii(),
    }
}

/// How a trimmed line starting with `{` reads, beside how upstream's `JSON.parse` reads it.
enum Parsed {
    /// A JSON object, each key once: read as upstream reads it.
    Object(Map<String, Value>),
    /// Not a JSON object to upstream either: plain output.
    Plain,
    /// A key twice: upstream would take the last one and act on it (`last`, read that way);
    /// here it is ambiguous.
    Ambiguous {
        /// The parser's message, naming the key.
        message: String,
        /// The object as upstream reads it (the last value of each key).
        last: Map<String, Value>,
    },
    /// JSON upstream reads and this parser cannot (a lone surrogate escape, nesting past 128
    /// levels).
    Unreadable(String),
}

fn parse_object(t: &[u8]) -> Parsed {
    match serde_json::from_slice(t) {
        Ok(crate::body::Strict(Value::Object(obj))) => Parsed::Object(obj),
        Ok(_) => Parsed::Plain,
        Err(e) => {
            let message = e.to_string();
            if let Ok(Value::Object(last)) = serde_json::from_slice(t) {
                Parsed::Ambiguous { message, last }
            } else if ["surrogate", "hex escape", "recursion limit"]
                .iter()
                .any(|m| message.contains(m))
            {
                Parsed::Unreadable(message)
            } else {
                Parsed::Plain
            }
        }
    }
}

/// Parses one line; `None` for plain output.
pub fn parse_line(line: usize, text: &[u8]) -> Option<FluxEvent> {
    // Trimmed as upstream's JavaScript `trim()` trims: its white space and the byte order
    // mark, at both ends.
    let t = trim_like_js(text);
    // Fast path: a signal line is a JSON object mentioning the key (or escaping characters
    // that could spell it), directly or embedded in a stream-json tool result.
    if t.first() != Some(&b'{') || !could_signal(t) {
        return None;
    }
    // Upstream decodes the stream lossily (an invalid byte becomes U+FFFD) before parsing.
    let decoded;
    let t = match std::str::from_utf8(t) {
        Ok(_) => t,
        Err(_) => {
            decoded = String::from_utf8_lossy(t).into_owned();
            decoded.as_bytes()
        }
    };
    // A key twice (upstream's JSON.parse would take the last one and act on it), or JSON
    // upstream reads and this parser does not, on a line that names the key (or, read as
    // upstream reads it, holds a signal): reported, never dropped in silence.
    let names_key = memchr::memmem::find(t, KEY).is_some();
    let obj = match parse_object(t) {
        Parsed::Object(obj) => obj,
        Parsed::Plain => return None,
        Parsed::Ambiguous { last, .. }
            if !names_key
                && signal_of(&last, line).is_none()
                && embedded(&last, line).is_none() =>
        {
            return None;
        }
        Parsed::Unreadable(_) if !names_key => return None,
        Parsed::Ambiguous { message, .. } => {
            return Some(FluxEvent::Error {
                line,
                error: format!("{message}; the signal is ambiguous, so it is not taken"),
            });
        }
        Parsed::Unreadable(message) => {
            return Some(FluxEvent::Error {
                line,
                error: format!(
                    "{message}; upstream reads this line, this parser cannot, so it is not taken"
                ),
            });
        }
    };
    match signal_of(&obj, line) {
        Some(r) => Some(r.unwrap_or_else(|error| FluxEvent::Error { line, error })),
        None => embedded(&obj, line),
    }
}

/// `Some(Ok)` for a valid signal, `Some(Err)` for a signal with a bad verdict, `None` when the
/// object holds no `flux:signal` object. An array is an object to upstream (`typeof [] ===
/// 'object'`): it has no verdict.
fn signal_of(obj: &Map<String, Value>, line: usize) -> Option<Result<FluxEvent, String>> {
    let data = match obj.get("flux:signal") {
        Some(Value::Object(data)) => data,
        Some(Value::Array(_)) => {
            return Some(Err(
                "invalid flux:signal verdict: missing (flux:signal is an array, not an object); \
                 must be one of: proceed, hold, rework, abort"
                    .to_string(),
            ));
        }
        _ => return None,
    };
    let verdict = match data.get("verdict") {
        Some(Value::String(v)) => Verdict::parse(v),
        _ => None,
    };
    let Some(verdict) = verdict else {
        let got = data
            .get("verdict")
            .map_or("missing".to_string(), Value::to_string);
        return Some(Err(format!(
            "invalid flux:signal verdict: {got}; must be one of: proceed, hold, rework, abort"
        )));
    };
    let string = |k: &str| data.get(k).and_then(Value::as_str).map(str::to_string);
    let floor = |k: &str| {
        data.get(k)
            .and_then(Value::as_f64)
            .map(|f| f.floor() as i64)
    };
    Some(Ok(FluxEvent::Signal(FluxSignal {
        line,
        verdict,
        reason: string("reason"),
        summary: string("summary"),
        meta: data.get("meta").and_then(Value::as_object).cloned(),
        cost_usd: data.get("cost_usd").and_then(Value::as_f64),
        tokens_in: floor("tokens_in"),
        tokens_out: floor("tokens_out"),
    })))
}

/// JavaScript's truthiness of a JSON value: `null`, `false`, `0` and `""` are falsy.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// A signal echoed by a tool inside a stream-json `user` event, read as upstream reads it
/// (spec/streams.md, "Stream-json events"): nothing unless `message` is present and truthy;
/// then `tool_use_result.stdout`, then the string `content` of each `tool_result` part of
/// `message.content`, in order, each scanned line by line, the first signal found winning.
/// Where upstream reads a signal's line differently, the line is an error event, never a
/// signal and never dropped in silence: a `user` event without `message` whose
/// `tool_use_result.stdout` holds a signal (upstream takes nothing from it), and a `null`
/// part reached before a signal (upstream's parser fails on it).
fn embedded(obj: &Map<String, Value>, line: usize) -> Option<FluxEvent> {
    if obj.get("type").and_then(Value::as_str) != Some("user") {
        return None;
    }
    let stdout = obj
        .get("tool_use_result")
        .and_then(|t| t.get("stdout"))
        .and_then(Value::as_str);
    let Some(message) = obj.get("message").filter(|m| truthy(m)) else {
        return stdout
            .and_then(|t| scan_text(t, line))
            .map(|_| FluxEvent::Error {
                line,
                error:
                    "not taken: a stream-json `user` event without `message` (upstream's parser \
                    reads nothing of it); its tool_use_result.stdout holds a flux:signal"
                        .to_string(),
            });
    };
    if let Some(found) = stdout.and_then(|t| scan_text(t, line)) {
        return Some(found);
    }
    let parts = message.get("content").and_then(Value::as_array)?;
    for (i, p) in parts.iter().enumerate() {
        if p.is_null() {
            return Some(FluxEvent::Error {
                line,
                error: format!(
                    "not taken: message.content[{i}] is null (upstream's parser fails on it, \
                     a TypeError, and takes nothing from this line)"
                ),
            });
        }
        if p.get("type").and_then(Value::as_str) == Some("tool_result")
            && let Some(found) = p
                .get("content")
                .and_then(Value::as_str)
                .and_then(|t| scan_text(t, line))
        {
            return Some(found);
        }
    }
    None
}

/// The first signal in a tool's output, as upstream's `extractSignalFromText` finds it: each
/// line split at `\n`, trimmed as JavaScript trims, starting with `{`, parsed, holding a
/// `flux:signal`. A signal line read ambiguously or not at all (as at the top level) is an
/// error event.
fn scan_text(text: &str, line: usize) -> Option<FluxEvent> {
    for l in text.split('\n') {
        let t = l.trim_matches(js_space);
        if !t.starts_with('{') {
            continue;
        }
        let (obj, problem) = match parse_object(t.as_bytes()) {
            Parsed::Object(obj) => (obj, None),
            Parsed::Plain => continue,
            Parsed::Ambiguous { message, last } => (
                last,
                Some(format!(
                    "{message}; the signal is ambiguous, so it is not taken"
                )),
            ),
            Parsed::Unreadable(message) if t.contains("flux:signal") => {
                return Some(FluxEvent::Error {
                    line,
                    error: format!(
                        "{message}; upstream reads this line, this parser cannot, so it is not \
                         taken"
                    ),
                });
            }
            Parsed::Unreadable(_) => continue,
        };
        if let Some(r) = signal_of(&obj, line) {
            return Some(match (problem, r) {
                (Some(error), _) | (None, Err(error)) => FluxEvent::Error { line, error },
                (None, Ok(event)) => event,
            });
        }
    }
    None
}

/// Where a result document routes the issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// `pass`: gate rules are evaluated, then `onPass` routing applies.
    OnPass,
    /// `fail`: `onFail` routing applies.
    OnFail,
    /// `blocked`: gate rules are skipped; `fallback` routing applies.
    Fallback,
}

/// A validated (or rejected) result document.
#[derive(Clone, Debug, PartialEq)]
pub struct ResultReport {
    /// True when the document is valid.
    pub valid: bool,
    /// Every problem found (empty when valid).
    pub errors: Vec<String>,
    /// The verdict, when it is one of pass, fail, blocked.
    pub verdict: Option<String>,
    /// The summary, when a string.
    pub summary: Option<String>,
    /// The routing a valid document implies; `None` for an invalid one (never "proceed").
    pub routing: Option<Routing>,
    /// The document, when it parsed.
    pub document: Option<Value>,
}

impl ResultReport {
    /// `{"valid", "errors", "verdict", "summary", "routing": {"route", "gates"}}`.
    pub fn to_json(&self) -> Value {
        let routing = self.routing.map(|r| match r {
            Routing::OnPass => json!({"route": "onPass", "gates": "evaluated"}),
            Routing::OnFail => json!({"route": "onFail", "gates": "evaluated"}),
            Routing::Fallback => json!({"route": "fallback", "gates": "skipped"}),
        });
        let d = self.document.as_ref();
        json!({
            "valid": self.valid,
            "errors": self.errors,
            "verdict": self.verdict,
            "summary": self.summary,
            "routing": routing,
            "comment": d.and_then(|d| d.get("comment")),
            "blockers": d.and_then(|d| d.get("blockers")),
            "artifacts": d.and_then(|d| d.get("artifacts")),
            "meta": d.and_then(|d| d.get("meta")),
        })
    }
}

/// Validates a result document (`$RESULT_DOC_PATH`): required `verdict` (pass|fail|blocked) and
/// a non-empty `summary`; optional `comment` (string), `blockers` (array of
/// `{title, description}` strings), `artifacts` (array of strings), `meta` (`model` string,
/// `input_tokens`/`output_tokens` non-negative integers). Unlike upstream, an invalid document is
/// never treated as proceed.
pub fn validate_result(bytes: &[u8]) -> ResultReport {
    let mut errors = Vec::new();
    let doc = match serde_json::from_slice::<crate::body::Strict>(crate::body::strip_bom(bytes))
        .map(|s| s.0)
    {
        Ok(v) => v,
        Err(e) => {
            return ResultReport {
                valid: false,
                errors: vec![format!("invalid JSON: {e}")],
                verdict: None,
                summary: None,
                routing: None,
                document: None,
            };
        }
    };
    let Some(obj) = doc.as_object() else {
        return ResultReport {
            valid: false,
            errors: vec!["the document is not a JSON object".into()],
            verdict: None,
            summary: None,
            routing: None,
            document: Some(doc),
        };
    };
    let verdict = match obj.get("verdict") {
        Some(Value::String(v)) if ["pass", "fail", "blocked"].contains(&v.as_str()) => {
            Some(v.clone())
        }
        Some(v) => {
            errors.push(format!(
                "`verdict` must be \"pass\", \"fail\" or \"blocked\", got {v}"
            ));
            None
        }
        None => {
            errors.push("missing required `verdict`".into());
            None
        }
    };
    let summary = match obj.get("summary") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(Value::String(_)) => {
            errors.push("`summary` must not be empty".into());
            None
        }
        Some(v) => {
            errors.push(format!("`summary` must be a string, got {v}"));
            None
        }
        None => {
            errors.push("missing required `summary`".into());
            None
        }
    };
    if let Some(c) = obj.get("comment")
        && !c.is_string()
    {
        errors.push(format!("`comment` must be a string, got {c}"));
    }
    if let Some(b) = obj.get("blockers") {
        match b.as_array() {
            None => errors.push(format!("`blockers` must be an array, got {b}")),
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    let ok = item.as_object().is_some_and(|o| {
                        o.get("title").is_some_and(Value::is_string)
                            && o.get("description").is_none_or(Value::is_string)
                    });
                    if !ok {
                        errors.push(format!(
                            "`blockers[{i}]` must be {{\"title\": string, \"description\": string}}, got {item}"
                        ));
                    }
                }
            }
        }
    }
    if let Some(a) = obj.get("artifacts")
        && !a.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    {
        errors.push(format!(
            "`artifacts` must be an array of file names, got {a}"
        ));
    }
    if let Some(m) = obj.get("meta") {
        match m.as_object() {
            None => errors.push(format!("`meta` must be an object, got {m}")),
            Some(meta) => {
                if let Some(v) = meta.get("model")
                    && !v.is_string()
                {
                    errors.push(format!("`meta.model` must be a string, got {v}"));
                }
                for k in ["input_tokens", "output_tokens"] {
                    if let Some(v) = meta.get(k)
                        && v.as_u64().is_none()
                    {
                        errors.push(format!(
                            "`meta.{k}` must be a non-negative integer, got {v}"
                        ));
                    }
                }
            }
        }
    }
    let valid = errors.is_empty();
    let routing = if valid {
        match verdict.as_deref() {
            Some("pass") => Some(Routing::OnPass),
            Some("fail") => Some(Routing::OnFail),
            Some("blocked") => Some(Routing::Fallback),
            _ => None,
        }
    } else {
        None
    };
    ResultReport {
        valid,
        errors,
        verdict,
        summary,
        routing,
        document: Some(doc),
    }
}
