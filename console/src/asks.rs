//! Approval requests (spec/asks.md) in the console: the `asks` section of `/api/state` (the
//! open requests with their deadlines, the ones answered or expired lately) and
//! `POST /api/asks/<id>/answer`, an answer exactly as `sigbox answer` gives it, refused with
//! its words.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sigbox::Mailbox;
use sigbox::asks::{AnswerAnywhere, AskState, Asks, Outcome, Refusal, Status, instant};

use crate::app::{Root, Shared};
use crate::http::{blocking, json_of, reply, root_at};
use crate::show::{path_text, shorten};
use crate::{auth, ids, send};

/// The open requests whose message the state carries (the oldest); the others are counted.
const OPEN_SHOWN: usize = 200;
/// The answered and expired requests the state carries (the newest).
const CLOSED_SHOWN: usize = 30;
/// Who answers through the console when the request does not say (`"from"`).
pub(crate) const DEFAULT_ANSWERER: &str = "console";

/// The `asks` section of a root: `{"error", "open", "open_total", "closed", "closed_total",
/// "invalid"}`, read through a fresh handle ([`Root::fresh`]). Reads only, as `sigbox asks
/// --all` does: a request past its deadline with no outcome is shown expired, and nothing is
/// written. When the requests cannot be read (a link in place of `asks/`), `error` says why,
/// in `sigbox asks`'s words, and the rest of the root is shown all the same.
pub(crate) fn section(root: &Root) -> Value {
    match root.fresh().and_then(|mb| listed(&mb)) {
        Ok(v) => v,
        Err(e) => json!({
            "error": send::library_refusal(&e), "open_total": 0, "open": [],
            "closed_total": 0, "closed": [], "invalid": [],
        }),
    }
}

fn listed(mb: &Mailbox) -> sigbox::Result<Value> {
    let listing = Asks::new(mb).list()?;
    let now = Utc::now();
    let (open, mut closed): (Vec<&AskState>, Vec<&AskState>) = listing
        .requests
        .iter()
        .partition(|s| s.status(now) == Status::Open);
    closed.sort_by_key(|s| std::cmp::Reverse(closed_at(s)));
    Ok(json!({
        "error": null,
        "open_total": open.len(),
        "open": open.iter().take(OPEN_SHOWN).map(|s| open_view(s)).collect::<Vec<_>>(),
        "closed_total": closed.len(),
        "closed": closed
            .iter()
            .take(CLOSED_SHOWN)
            .map(|s| closed_view(s, now))
            .collect::<Vec<_>>(),
        "invalid": listing
            .invalid
            .iter()
            .map(|(p, why)| json!({"path": path_text(p), "reason": why}))
            .collect::<Vec<_>>(),
    }))
}

/// When a request stopped being open: its answer, its recorded expiry, or its deadline.
fn closed_at(s: &AskState) -> Option<DateTime<Utc>> {
    match &s.outcome {
        Some(Outcome::Answered(a)) => Some(a.at),
        Some(Outcome::Expired { at, .. }) => Some(*at),
        None => s.request.deadline,
    }
}

/// Milliseconds since the epoch (what the page's clock counts).
fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// What every request shows, open or not.
fn request_view(s: &AskState) -> serde_json::Map<String, Value> {
    let r = &s.request;
    let context = r.context.as_ref().map(|c| {
        let text = serde_json::to_string_pretty(c).unwrap_or_default();
        shorten(&text)
    });
    let v = json!({
        "id": r.id, "from": r.from, "to": r.to, "message": shorten(&r.message),
        "choices": r.choices, "asked_at": instant(r.asked_at), "asked_ms": ms(r.asked_at),
        "deadline": r.deadline.map(instant), "deadline_ms": r.deadline.map(ms),
        "context": context,
    });
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

fn open_view(s: &AskState) -> Value {
    Value::Object(request_view(s))
}

fn closed_view(s: &AskState, now: DateTime<Utc>) -> Value {
    let mut m = request_view(s);
    m.insert("status".into(), json!(s.status(now).as_str()));
    let (choice, message, by, at, took, expired_at) = match &s.outcome {
        Some(Outcome::Answered(a)) => (
            Some(a.choice.clone()),
            a.message.as_deref().map(shorten),
            Some(a.by.clone()),
            Some(instant(a.at)),
            Some((a.at - s.request.asked_at).num_milliseconds().max(0)),
            None,
        ),
        Some(Outcome::Expired { at, .. }) => (None, None, None, None, None, Some(instant(*at))),
        // Past its deadline, not recorded yet: the deadline is when it expired.
        None => (
            None,
            None,
            None,
            None,
            None,
            s.request.deadline.map(instant),
        ),
    };
    for (k, v) in [
        ("choice", json!(choice)),
        ("answer_message", json!(message)),
        ("answered_by", json!(by)),
        ("answered_at", json!(at)),
        ("took_ms", json!(took)),
        ("expired_at", json!(expired_at)),
    ] {
        m.insert(k.into(), v);
    }
    Value::Object(m)
}

/// What `/api/asks/<id>/answer` takes, read from its JSON body.
#[derive(Debug)]
struct AnswerRequest {
    choice: String,
    message: Option<String>,
    from: String,
    root: usize,
}

/// Reads `{"choice", "message"?, "from"?, "root"?}`; unknown fields are refused by name.
fn parse(body: &Value) -> Result<AnswerRequest, String> {
    let Some(obj) = body.as_object() else {
        return Err("the request must be a JSON object: {\"choice\", \"message\"}".into());
    };
    for k in obj.keys() {
        if !["choice", "message", "from", "root"].contains(&k.as_str()) {
            return Err(format!(
                "unknown field {k:?}: an answer takes choice, message, from and root"
            ));
        }
    }
    let text = |k: &str| -> Result<Option<String>, String> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{k} must be a string")),
        }
    };
    let choice = text("choice")?.ok_or("choice is missing: one of the request's choices")?;
    let root = match obj.get("root") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .and_then(|r| usize::try_from(r).ok())
            .ok_or("root must be the index of a root in /api/state")?,
    };
    Ok(AnswerRequest {
        choice,
        message: text("message")?,
        from: text("from")?.unwrap_or_else(|| DEFAULT_ANSWERER.to_string()),
        root,
    })
}

/// The status of a refusal: the request is not there (404); it has its outcome, or its file
/// is not a request that can be answered (409); the answer itself is wrong (400).
fn refusal_status(r: &Refusal) -> StatusCode {
    match r {
        Refusal::Unknown { .. } => StatusCode::NOT_FOUND,
        Refusal::Answered { .. }
        | Refusal::Expired { .. }
        | Refusal::InvalidRequest { .. }
        | Refusal::Elsewhere { .. } => StatusCode::CONFLICT,
        Refusal::InvalidId { .. } | Refusal::InvalidName { .. } | Refusal::NotOffered { .. } => {
            StatusCode::BAD_REQUEST
        }
    }
}

/// `POST /api/asks/<id>/answer`: the one answer, durable before the reply `{"id", "choice",
/// "message", "answered_by", "answered_at", "root"}`; every answer `sigbox answer` refuses is
/// refused with its words (`{"error"}`).
pub(crate) async fn post_answer(
    State(c): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // Before anything is read, and long before the library makes a path of it.
    if let Err(why) = ids::check(&id) {
        return auth::refusal(StatusCode::BAD_REQUEST, &why);
    }
    let v = match json_of(&headers, &body, "an answer") {
        Ok(v) => v,
        Err((status, why)) => return auth::refusal(status, &why),
    };
    let req = match parse(&v) {
        Ok(r) => r,
        Err(why) => return auth::refusal(StatusCode::BAD_REQUEST, &why),
    };
    let root = match root_at(&c.roots, req.root) {
        Ok(root) => root,
        Err(why) => return auth::refusal(StatusCode::BAD_REQUEST, &why),
    };
    let (path, opts) = (root.path.clone(), root.opts.clone());
    let index = req.root;
    let asked = id.clone();
    // A fresh handle, as `sigbox answer` opens one (see `Root::fresh`).
    let answered = blocking(move || {
        let mb = opts.open(&path)?;
        Asks::new(&mb).answer_anywhere(&id, &req.choice, req.message.as_deref(), &req.from)
    })
    .await;
    match answered {
        Ok(Ok(AnswerAnywhere::Recorded(Outcome::Answered(a)))) => reply(
            StatusCode::OK,
            &json!({"id": asked, "choice": a.choice, "message": a.message,
                    "answered_by": a.by, "answered_at": instant(a.at), "root": index}),
        ),
        // `answer` returns its own answer or a refusal; an expiry comes as a refusal.
        Ok(Ok(AnswerAnywhere::Recorded(Outcome::Expired { .. }))) => auth::refusal(
            StatusCode::CONFLICT,
            &format!("{asked}: expired with no answer"),
        ),
        // Asked on another host, which decides (spec/asks.md §8): the proposal is durable
        // here and the bridge carries it there; the outcome shows in the state when it comes
        // back, this answer's or another's.
        Ok(Ok(AnswerAnywhere::Proposed(p))) => reply(
            StatusCode::ACCEPTED,
            &json!({"id": asked, "proposed": p.choice, "message": p.message,
                    "answered_by": p.by, "home": p.home, "root": index}),
        ),
        Ok(Ok(AnswerAnywhere::Refused(refusal))) => {
            auth::refusal(refusal_status(&refusal), &refusal.to_string())
        }
        Ok(Err(e)) => {
            let status = if e.kind() == sigbox::ErrorKind::Conflict {
                StatusCode::CONFLICT
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            auth::refusal(status, &send::library_refusal(&e))
        }
        Err(r) => r,
    }
}
