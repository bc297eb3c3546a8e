//! The six Goblin signals (spec/goblin.md, "Names and bodies"): their file names, their
//! documented fields, and how a file's bytes parse into a payload. Pure: no filesystem access.

use chrono::DateTime;
use serde_json::{Map, Value};

/// The six Goblin signals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GoblinSignal {
    /// Written by the scoper; SCOPE → BUILD.
    ScopeComplete,
    /// Written by the builder; BUILD → REVIEW.
    BuildComplete,
    /// Written by the reviewer; REVIEW → TEST.
    ReviewApproved,
    /// Written by the reviewer; REVIEW → BUILD (a retry).
    ReviewChangesRequested,
    /// Written by the tester; TEST → DONE.
    TestPassed,
    /// Written by the tester; TEST → REVIEW (a retry).
    TestFailed,
}

/// The type a documented field must have.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Timestamp,
    Str,
    Count,
    Strings,
    Issues,
}

impl GoblinSignal {
    /// All six, in pipeline order.
    pub const ALL: [GoblinSignal; 6] = [
        GoblinSignal::ScopeComplete,
        GoblinSignal::BuildComplete,
        GoblinSignal::ReviewApproved,
        GoblinSignal::ReviewChangesRequested,
        GoblinSignal::TestPassed,
        GoblinSignal::TestFailed,
    ];

    /// The file name.
    pub fn name(self) -> &'static str {
        match self {
            GoblinSignal::ScopeComplete => "scope-complete",
            GoblinSignal::BuildComplete => "build-complete",
            GoblinSignal::ReviewApproved => "review-approved",
            GoblinSignal::ReviewChangesRequested => "review-changes-requested",
            GoblinSignal::TestPassed => "test-passed",
            GoblinSignal::TestFailed => "test-failed",
        }
    }

    /// Parses a file name; `None` for anything but the six names.
    pub fn parse(name: &str) -> Option<GoblinSignal> {
        GoblinSignal::ALL.into_iter().find(|s| s.name() == name)
    }

    fn fields(self) -> &'static [(&'static str, Kind)] {
        use Kind::*;
        match self {
            GoblinSignal::ScopeComplete => {
                &[("completed_at", Timestamp), ("scope_result_hash", Str)]
            }
            GoblinSignal::BuildComplete => &[
                ("completed_at", Timestamp),
                ("commits", Count),
                ("files_changed", Count),
                ("lines_added", Count),
                ("lines_removed", Count),
            ],
            GoblinSignal::ReviewApproved => &[
                ("completed_at", Timestamp),
                ("critical_issues", Count),
                ("informational_issues", Count),
                ("auto_fixes", Count),
            ],
            GoblinSignal::ReviewChangesRequested => &[
                ("completed_at", Timestamp),
                ("issues", Issues),
                ("summary", Str),
            ],
            GoblinSignal::TestPassed => &[
                ("completed_at", Timestamp),
                ("qa_steps_total", Count),
                ("qa_steps_passed", Count),
                ("bugs_found", Count),
                ("bugs_fixed", Count),
                ("screenshots", Strings),
            ],
            GoblinSignal::TestFailed => &[
                ("completed_at", Timestamp),
                ("failing_steps", Strings),
                ("reason", Str),
                ("attempts", Count),
                ("screenshots", Strings),
            ],
        }
    }

    /// Checks a JSON body against this signal's documented fields (unknown fields are fine).
    /// The error names the field and what it should be.
    pub fn validate(self, body: &Map<String, Value>) -> std::result::Result<(), String> {
        for (field, kind) in self.fields() {
            let Some(v) = body.get(*field) else { continue };
            let ok = match kind {
                Kind::Timestamp => v
                    .as_str()
                    .is_some_and(|s| DateTime::parse_from_rfc3339(s).is_ok()),
                Kind::Str => v.is_string(),
                Kind::Count => v.as_u64().is_some(),
                Kind::Strings => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
                Kind::Issues => v.as_array().is_some_and(|a| a.iter().all(valid_issue)),
            };
            if !ok {
                let want = match kind {
                    Kind::Timestamp => "an ISO-8601 instant such as 2024-01-15T10:30:00Z",
                    Kind::Str => "a string",
                    Kind::Count => "a non-negative integer",
                    Kind::Strings => "an array of strings",
                    Kind::Issues => {
                        "an array of issues {type, category, file, line, fixed, description}"
                    }
                };
                return Err(format!(
                    "{}: field `{field}` must be {want}, got {v}",
                    self.name()
                ));
            }
        }
        Ok(())
    }
}

fn valid_issue(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    let s = |k: &str| o.get(k).is_none_or(Value::is_string);
    s("type")
        && s("category")
        && s("file")
        && s("description")
        && o.get("line").is_none_or(|l| l.as_u64().is_some())
        && o.get("fixed").is_none_or(Value::is_boolean)
}

/// What a signal file holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    /// An empty file: a valid signal, as written by `touch`.
    Empty,
    /// A JSON object.
    Json(Map<String, Value>),
}

impl Payload {
    /// The payload as JSON (`null` for an empty signal).
    pub fn to_json(&self) -> Value {
        match self {
            Payload::Empty => Value::Null,
            Payload::Json(m) => Value::Object(m.clone()),
        }
    }
}

/// Parses a Goblin file's bytes: empty (or only whitespace) is [`Payload::Empty`]; otherwise a
/// JSON object valid for `signal`.
pub fn parse_payload(signal: GoblinSignal, bytes: &[u8]) -> std::result::Result<Payload, String> {
    let bytes = crate::body::strip_bom(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Payload::Empty);
    }
    match serde_json::from_slice::<crate::body::Strict>(bytes).map(|s| s.0) {
        Ok(Value::Object(m)) => {
            signal.validate(&m)?;
            Ok(Payload::Json(m))
        }
        Ok(_) => Err(format!("{}: not a JSON object", signal.name())),
        Err(e) => Err(format!("{}: invalid JSON: {e}", signal.name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads() {
        use GoblinSignal::*;
        assert_eq!(parse_payload(BuildComplete, b""), Ok(Payload::Empty));
        assert_eq!(parse_payload(BuildComplete, b" \n"), Ok(Payload::Empty));
        assert!(parse_payload(BuildComplete, br#"{"commits": 5}"#).is_ok());
        let e = parse_payload(BuildComplete, br#"{"commits": "five"}"#).unwrap_err();
        assert!(
            e.contains("`commits` must be a non-negative integer"),
            "{e}"
        );
        assert!(parse_payload(BuildComplete, br#"{"commits": 5"#).is_err());
        assert!(parse_payload(TestFailed, br#"{"failing_steps": ["QA-2", 5]}"#).is_err());
        let issues = br#"{"issues": [{"type": "critical", "line": 45, "fixed": false}]}"#;
        assert!(parse_payload(ReviewChangesRequested, issues).is_ok());
        let bad = br#"{"issues": [{"line": "45"}]}"#;
        assert!(parse_payload(ReviewChangesRequested, bad).is_err());
        assert!(parse_payload(ScopeComplete, br#"{"completed_at": "yesterday"}"#).is_err());
        assert!(
            parse_payload(ScopeComplete, br#"{"mine": [1, 2]}"#).is_ok(),
            "unknown kept"
        );
    }
}
