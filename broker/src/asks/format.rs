//! The request and outcome files (spec/asks.md §3, §4) and what is checked when they are read
//! (§6). Pure: bytes in, values or reasons out.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use super::id;

/// The `kind` of a request file.
pub(crate) const REQUEST_KIND: &str = "sigbox.ask";
/// The `kind` of an outcome file.
pub(crate) const OUTCOME_KIND: &str = "sigbox.outcome";

/// A request (spec/asks.md §3).
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// `<agent>.<key>`.
    pub id: String,
    /// The asking agent.
    pub from: String,
    /// Whom it is for; `None`: anyone.
    pub to: Option<String>,
    /// The question.
    pub message: String,
    /// The answers offered.
    pub choices: Vec<String>,
    /// When it was asked.
    pub asked_at: DateTime<Utc>,
    /// When it expires; `None`: never.
    pub deadline: Option<DateTime<Utc>>,
    /// The key the asker gave, when it gave one.
    pub key: Option<String>,
    /// What the request is about (a tool and its input), or `None`.
    pub context: Option<Value>,
    /// The whole file as read, unknown fields included.
    pub fields: Map<String, Value>,
}

/// How a request ended (spec/asks.md §4).
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The one answer.
    Answered(Answer),
    /// The deadline passed with no answer.
    Expired {
        /// When the expiry was recorded.
        at: DateTime<Utc>,
        /// Who recorded it.
        by: String,
    },
}

/// An answer to a request.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The choice, one of the request's.
    pub choice: String,
    /// What the person said with it.
    pub message: Option<String>,
    /// Who answered.
    pub by: String,
    /// When.
    pub at: DateTime<Utc>,
}

/// An instant as every request and outcome file writes it: RFC 3339, UTC, microseconds.
pub fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn parse_instant(v: Option<&Value>, field: &str) -> Result<DateTime<Utc>, String> {
    let s = v
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{field}` is not an instant"))?;
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("`{field}` is not an RFC 3339 instant ({e})"))
}

fn opt_text(m: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{field}` is not text")),
    }
}

pub(crate) fn object(bytes: &[u8]) -> Result<Map<String, Value>, String> {
    let text = std::str::from_utf8(crate::body::strip_bom(bytes))
        .map_err(|_| "not UTF-8 text".to_string())?;
    match crate::body::parse_json(text)? {
        Value::Object(m) => Ok(m),
        _ => Err("not a JSON object".into()),
    }
}

impl Request {
    /// The file's bytes: one JSON object and a newline.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(&Value::Object(self.fields.clone())).unwrap_or_default();
        v.push(b'\n');
        v
    }

    /// A new request's fields, in the order of spec/asks.md §3.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: String,
        from: &str,
        to: Option<&str>,
        message: &str,
        choices: Vec<String>,
        asked_at: DateTime<Utc>,
        deadline: Option<DateTime<Utc>>,
        key: Option<&str>,
        context: Option<Value>,
    ) -> Request {
        let v = json!({
            "kind": REQUEST_KIND, "id": id, "from": from, "to": to, "message": message,
            "choices": choices, "asked_at": instant(asked_at),
            "deadline": deadline.map(instant), "key": key, "context": context,
        });
        let Value::Object(fields) = v else {
            unreachable!("a JSON object")
        };
        Request {
            id,
            from: from.to_string(),
            to: to.map(str::to_string),
            message: message.to_string(),
            choices,
            asked_at,
            deadline,
            key: key.map(str::to_string),
            context,
            fields,
        }
    }

    /// Reads a request file named for `id` (spec/asks.md §6), or why it is not one.
    pub(crate) fn parse(bytes: &[u8], id: &str) -> Result<Request, String> {
        let m = object(bytes)?;
        if m.get("kind").and_then(Value::as_str) != Some(REQUEST_KIND) {
            return Err(format!("`kind` is not {REQUEST_KIND:?}"));
        }
        let file_id = m.get("id").and_then(Value::as_str).unwrap_or_default();
        if file_id != id {
            return Err(format!(
                "its `id` {file_id:?} is not its file's name {id:?}"
            ));
        }
        let from = m.get("from").and_then(Value::as_str).unwrap_or_default();
        if from != id::agent_of(id) {
            return Err(format!("its `from` {from:?} is not the agent of its id"));
        }
        let to = opt_text(&m, "to")?;
        if let Some(why) = to.as_deref().and_then(id::person_problem) {
            return Err(format!("`to`: {why}"));
        }
        let message = m
            .get("message")
            .and_then(Value::as_str)
            .ok_or("`message` is not text")?
            .to_string();
        let choices: Vec<String> = match m.get("choices") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|c| c.as_str().map(str::to_string).ok_or("a choice is not text"))
                .collect::<Result<_, _>>()?,
            _ => return Err("`choices` is not a list".into()),
        };
        if let Some(why) = id::choices_problem(&choices) {
            return Err(format!("`choices`: {why}"));
        }
        let asked_at = parse_instant(m.get("asked_at"), "asked_at")?;
        let deadline = match m.get("deadline") {
            None | Some(Value::Null) => None,
            v => Some(parse_instant(v, "deadline")?),
        };
        if deadline.is_some_and(|d| d < asked_at) {
            return Err("`deadline` is before `asked_at`".into());
        }
        let key = opt_text(&m, "key")?;
        if let Some(k) = &key
            && k != id::key_of(id)
        {
            return Err(format!("its `key` {k:?} is not the key of its id"));
        }
        let context = match m.get("context") {
            None | Some(Value::Null) => None,
            Some(v @ Value::Object(_)) => Some(v.clone()),
            Some(_) => return Err("`context` is not an object".into()),
        };
        Ok(Request {
            id: id.to_string(),
            from: from.to_string(),
            to,
            message,
            choices,
            asked_at,
            deadline,
            key,
            context,
            fields: m,
        })
    }

    /// True when `other` asks the same question: the same asker, message, choices and `to`
    /// (what a re-attach must match, spec/asks.md §3).
    pub(crate) fn same_question(&self, other: &Request) -> bool {
        self.from == other.from
            && self.message == other.message
            && self.choices == other.choices
            && self.to == other.to
    }
}

impl Outcome {
    /// The file's bytes for `request` (whose file holds `request_bytes`).
    #[cfg(test)]
    pub(crate) fn bytes(&self, request: &Request, request_bytes: &[u8]) -> Vec<u8> {
        self.bytes_with(request, request_bytes, &Map::new())
    }

    /// [`Outcome::bytes`] with `extra` fields after the outcome's own (an answer proposed on
    /// another host: `proposal`, `answered_on`, spec/asks.md §8).
    pub(crate) fn bytes_with(
        &self,
        request: &Request,
        request_bytes: &[u8],
        extra: &Map<String, Value>,
    ) -> Vec<u8> {
        let base = json!({
            "kind": OUTCOME_KIND, "id": request.id, "request": id::digest(request_bytes),
        });
        let Value::Object(mut m) = base else {
            unreachable!("a JSON object")
        };
        match self {
            Outcome::Answered(a) => {
                m.insert("status".into(), "answered".into());
                m.insert("choice".into(), a.choice.clone().into());
                m.insert("message".into(), a.message.clone().into());
                m.insert("answered_by".into(), a.by.clone().into());
                m.insert("answered_at".into(), instant(a.at).into());
            }
            Outcome::Expired { at, by } => {
                m.insert("status".into(), "expired".into());
                m.insert("expired_at".into(), instant(*at).into());
                m.insert("expired_by".into(), by.clone().into());
            }
        }
        for (k, v) in extra {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let mut v = serde_json::to_vec(&Value::Object(m)).unwrap_or_default();
        v.push(b'\n');
        v
    }

    /// Reads an outcome file and checks that it is the outcome of `request` (whose file holds
    /// `request_bytes`): spec/asks.md §6. `Err` is why it is not; such a file is quarantined.
    pub(crate) fn parse(
        bytes: &[u8],
        request: &Request,
        request_bytes: &[u8],
    ) -> Result<Outcome, String> {
        let m = object(bytes)?;
        if m.get("kind").and_then(Value::as_str) != Some(OUTCOME_KIND) {
            return Err(format!("`kind` is not {OUTCOME_KIND:?}"));
        }
        let oid = m.get("id").and_then(Value::as_str).unwrap_or_default();
        if oid != request.id {
            return Err(format!("its `id` {oid:?} is not the request's"));
        }
        let want = id::digest(request_bytes);
        let got = m.get("request").and_then(Value::as_str).unwrap_or_default();
        if got != want {
            return Err(format!(
                "its `request` digest {got:?} is not the request's ({want}): an outcome of \
                 another request"
            ));
        }
        match m.get("status").and_then(Value::as_str) {
            Some("answered") => {
                let choice = m
                    .get("choice")
                    .and_then(Value::as_str)
                    .ok_or("`choice` is not text")?;
                if !request.choices.iter().any(|c| c == choice) {
                    return Err(format!(
                        "the choice {choice:?} is not offered ({})",
                        request.choices.join(", ")
                    ));
                }
                let by = m
                    .get("answered_by")
                    .and_then(Value::as_str)
                    .ok_or("`answered_by` is not text")?;
                if let Some(why) = id::person_problem(by) {
                    return Err(format!("`answered_by`: {why}"));
                }
                let message = opt_text(&m, "message")?;
                let at = parse_instant(m.get("answered_at"), "answered_at")?;
                if at < request.asked_at {
                    return Err(format!(
                        "answered at {} before it was asked, {}",
                        instant(at),
                        instant(request.asked_at)
                    ));
                }
                if let Some(d) = request.deadline
                    && at > d
                {
                    return Err(format!(
                        "answered at {} after the deadline {}",
                        instant(at),
                        instant(d)
                    ));
                }
                Ok(Outcome::Answered(Answer {
                    choice: choice.to_string(),
                    message,
                    by: by.to_string(),
                    at,
                }))
            }
            Some("expired") => {
                let Some(d) = request.deadline else {
                    return Err("expired, but the request has no deadline".into());
                };
                let at = parse_instant(m.get("expired_at"), "expired_at")?;
                if at < d {
                    return Err(format!(
                        "expired at {} before the deadline {}",
                        instant(at),
                        instant(d)
                    ));
                }
                let by = m
                    .get("expired_by")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                Ok(Outcome::Expired { at, by })
            }
            _ => Err("`status` is neither \"answered\" nor \"expired\"".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn request(deadline: Option<&str>) -> (Request, Vec<u8>) {
        let r = Request::new(
            "Executor.k1".into(),
            "Executor",
            None,
            "deploy?",
            vec!["approve".into(), "deny".into()],
            at("2026-01-01T10:00:00Z"),
            deadline.map(at),
            Some("k1"),
            None,
        );
        let b = r.bytes();
        (r, b)
    }

    #[test]
    fn a_request_reads_back_as_written() {
        let (r, b) = request(Some("2026-01-01T10:10:00Z"));
        assert_eq!(Request::parse(&b, "Executor.k1").unwrap(), r);
    }

    #[test]
    fn requests_that_are_not_what_their_name_says_are_refused() {
        let (_, b) = request(None);
        let good: Value = serde_json::from_slice(&b).unwrap();
        let table: [(&str, Value, &str); 8] = [
            ("kind", json!("x"), "`kind`"),
            ("id", json!("Executor.k2"), "file's name"),
            ("from", json!("Planner"), "`from`"),
            ("choices", json!([]), "no choices"),
            ("choices", json!(["a", "a"]), "twice"),
            ("asked_at", json!(17), "asked_at"),
            ("deadline", json!("2025-01-01T00:00:00Z"), "before"),
            ("key", json!("k2"), "key of its id"),
        ];
        for (field, value, why) in table {
            let mut v = good.clone();
            v[field] = value;
            let e = Request::parse(&serde_json::to_vec(&v).unwrap(), "Executor.k1").unwrap_err();
            assert!(e.contains(why), "{field}: {e}");
        }
        assert!(
            Request::parse(b"{\"kind\":\"sigbox.ask\",\"kind\":\"x\"}", "Executor.k1")
                .unwrap_err()
                .contains("duplicate")
        );
    }

    #[test]
    fn only_the_outcome_of_this_open_request_counts() {
        let (r, b) = request(Some("2026-01-01T10:10:00Z"));
        let answer = |choice: &str, when: &str| {
            Outcome::Answered(Answer {
                choice: choice.into(),
                message: Some("ok".into()),
                by: "alice".into(),
                at: at(when),
            })
        };
        let ok = answer("approve", "2026-01-01T10:05:00Z");
        assert_eq!(Outcome::parse(&ok.bytes(&r, &b), &r, &b).unwrap(), ok);
        let expired = Outcome::Expired {
            at: at("2026-01-01T10:10:00Z"),
            by: "Executor".into(),
        };
        assert_eq!(
            Outcome::parse(&expired.bytes(&r, &b), &r, &b).unwrap(),
            expired
        );
        let (other, ob) = request(None);
        let table: [(Vec<u8>, &str); 5] = [
            (
                answer("maybe", "2026-01-01T10:05:00Z").bytes(&r, &b),
                "not offered",
            ),
            (
                answer("approve", "2026-01-01T10:11:00Z").bytes(&r, &b),
                "after the deadline",
            ),
            (ok.bytes(&other, &ob), "another request"),
            (
                Outcome::Expired {
                    at: at("2026-01-01T10:09:00Z"),
                    by: "x".into(),
                }
                .bytes(&r, &b),
                "before the deadline",
            ),
            (b"[]".to_vec(), "not a JSON object"),
        ];
        for (bytes, why) in table {
            let e = Outcome::parse(&bytes, &r, &b).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
        // An expiry of a request without a deadline.
        let e = Outcome::parse(&expired.bytes(&other, &ob), &other, &ob).unwrap_err();
        assert!(e.contains("no deadline"), "{e}");
    }
}
