//! What the tools take and return (spec/mcp.md "Tools"), and their output schemas, written
//! by hand: every byte of the tool list is paid in tokens at every model call.

use std::sync::Arc;

use rmcp::handler::server::wrapper::Json;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sigbox::{Signal, Target};

/// `wait`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct WaitArgs {
    /// Seconds to wait at most (default 60, at most 600).
    pub(crate) timeout_s: Option<f64>,
}

/// `send`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct SendArgs {
    /// STEER, INFO, PAUSE, ABORT, APPROVE, SKIP or RESUME.
    #[serde(rename = "type")]
    pub(crate) signal_type: String,
    /// The text.
    pub(crate) message: Option<String>,
    /// An agent, or ALL (default).
    pub(crate) target: Option<String>,
}

/// What `check` and `wait` return.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(crate) struct Signals {
    /// The signals taken for you, oldest first; empty when none came.
    pub(crate) signals: Vec<SignalOut>,
}

/// A signal as a tool returns it: what a model acts on, nothing more.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(crate) struct SignalOut {
    /// Its id.
    pub(crate) id: String,
    /// ABORT: stop, end your turn. PAUSE: no tools, nothing new until a RESUME (call wait).
    /// STEER: change course as told. INFO: take note. RESUME: go on. APPROVE, SKIP: answers
    /// to an approval.
    #[serde(rename = "type")]
    pub(crate) signal_type: String,
    /// Its text, if any.
    pub(crate) message: Option<String>,
    /// Its sender.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) from: Option<String>,
    /// When it was sent (UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) created_at: Option<String>,
    /// ALL for a broadcast.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<String>,
    /// Given again: an earlier answer with it may not have reached you (a connection or
    /// server died). Act on it unless you already did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) redelivery: Option<u32>,
}

/// What `send` returns.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(crate) struct Sent {
    /// The id of the signal sent.
    pub(crate) id: String,
}

/// What `status` returns: counts, nothing taken.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(crate) struct Status {
    /// You, the agent this server is for.
    pub(crate) agent: String,
    /// Signals waiting for you (check or wait takes them).
    pub(crate) pending_for_agent: u64,
    /// Pending signals per target (an agent, ALL) or agent buffer.
    pub(crate) pending: std::collections::BTreeMap<String, u64>,
    /// Files dropped in and not yet settled.
    pub(crate) settling: u64,
    /// Files to be quarantined as invalid.
    pub(crate) invalid: u64,
    /// Signals taken by a consumer and not yet acknowledged.
    pub(crate) in_flight: u64,
    /// Files quarantined.
    pub(crate) quarantined: u64,
}

/// The output schemas, written by hand rather than derived: every byte of the tool list is
/// paid in tokens at every model call, so they say what a model needs and nothing more (no
/// `$schema`, no integer formats). Each describes what [`Json`] of its type serializes to.
pub(crate) fn schema(v: Value) -> Arc<rmcp::model::JsonObject> {
    match v {
        Value::Object(o) => Arc::new(o),
        _ => unreachable!("a schema is an object"),
    }
}

/// `check`'s and `wait`'s output: [`Signals`].
pub(crate) fn signals_schema() -> Arc<rmcp::model::JsonObject> {
    schema(
        json!({"type": "object", "required": ["signals"], "properties": {"signals": {
        "type": "array", "description": "Oldest first; empty: none came.",
        "items": {"type": "object", "required": ["id", "type", "message"], "properties": {
            "id": {"type": "string"},
            "type": {"type": "string",
                     "description": "ABORT, PAUSE, STEER, INFO, RESUME, APPROVE or SKIP"},
            "message": {"type": ["string", "null"]},
            "from": {"type": "string", "description": "sender"},
            "created_at": {"type": "string", "description": "sent at, with the sender's offset"},
            "target": {"const": "ALL", "description": "a broadcast"},
            "redelivery": {"type": "integer", "description": "given again: an earlier answer \
                with it may not have reached you (a connection or server died); act on it \
                unless you already did"}}}}}}),
    )
}

/// `send`'s output: [`Sent`].
pub(crate) fn sent_schema() -> Arc<rmcp::model::JsonObject> {
    schema(json!({"type": "object", "required": ["id"],
                  "properties": {"id": {"type": "string", "description": "the signal's id"}}}))
}

/// `status`'s output: [`Status`].
pub(crate) fn status_schema() -> Arc<rmcp::model::JsonObject> {
    let n = json!({"type": "integer"});
    schema(json!({"type": "object",
        "required": ["agent", "pending_for_agent", "pending", "settling", "invalid", "in_flight",
                     "quarantined"],
        "properties": {
            "agent": {"type": "string", "description": "you"},
            "pending_for_agent": {"type": "integer", "description": "waiting for you"},
            "pending": {"type": "object", "additionalProperties": n,
                        "description": "per target (an agent, ALL) or agent buffer"},
            "settling": {"type": "integer", "description": "dropped files not yet settled"},
            "invalid": {"type": "integer", "description": "to be quarantined"},
            "in_flight": {"type": "integer", "description": "taken, not yet acknowledged"},
            "quarantined": n}}))
}

/// A signal as a tool returns it.
pub(crate) fn signal_out(s: &Signal) -> SignalOut {
    SignalOut {
        id: s.id.clone(),
        signal_type: s.signal_type.as_str().to_string(),
        message: s.message.clone(),
        from: s.from.clone(),
        // As the sender wrote it (its offset kept, spec/cli.md), to the second: fewer tokens.
        created_at: s.created_at_rfc3339_secs(),
        target: (s.target == Target::All).then(|| "ALL".to_string()),
        redelivery: (s.redelivery() > 0).then(|| s.redelivery()),
    }
}

/// `check`'s and `wait`'s result: structured (its schema is the tool's output schema), and
/// the same JSON as text.
pub(crate) fn signals_result(signals: &[Signal]) -> Json<Signals> {
    Json(Signals {
        signals: signals.iter().map(signal_out).collect(),
    })
}

/// `ask`'s arguments (spec/asks.md §3).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct AskArgs {
    /// The question.
    pub(crate) message: String,
    /// The answers offered (default approve, deny).
    pub(crate) choices: Option<Vec<String>>,
    /// Whom it is for (a person's name); default anyone.
    pub(crate) to: Option<String>,
    /// A stable key: asking again with it (the same question) waits for the same request.
    pub(crate) key: Option<String>,
    /// The request's deadline in seconds; past it, it expires with no answer (default none).
    pub(crate) timeout_s: Option<f64>,
    /// How long this call waits (default 60, at most 600); the request stays open after.
    pub(crate) wait_s: Option<f64>,
}

/// What `ask` returns.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(crate) struct AskOut {
    /// The request's id.
    pub(crate) id: String,
    /// Its key: ask again with it (and the same question) to go on waiting.
    pub(crate) key: String,
    /// `answered`, `expired` (no answer before the deadline) or `open` (still waiting).
    pub(crate) status: String,
    /// The choice given, when answered.
    pub(crate) choice: Option<String>,
    /// What the person said with it.
    pub(crate) message: Option<String>,
    /// Who answered.
    pub(crate) answered_by: Option<String>,
    /// When (UTC).
    pub(crate) answered_at: Option<String>,
}

/// `ask`'s output: [`AskOut`].
pub(crate) fn ask_schema() -> Arc<rmcp::model::JsonObject> {
    let text = json!({"type": ["string", "null"]});
    schema(json!({"type": "object",
        "required": ["id", "key", "status", "choice", "message", "answered_by", "answered_at"],
        "properties": {
            "id": {"type": "string"},
            "key": {"type": "string", "description": "ask again with it to go on waiting"},
            "status": {"enum": ["answered", "expired", "open"], "description": "expired: no \
                answer before the deadline, act as if denied; open: not answered yet"},
            "choice": text, "message": text, "answered_by": text, "answered_at": text}}))
}

/// `ask`'s result for `request` and its outcome (`None`: still open).
pub(crate) fn ask_result(
    request: &sigbox::asks::Request,
    outcome: Option<&sigbox::asks::Outcome>,
) -> Json<AskOut> {
    use sigbox::asks::{Outcome, instant};
    let key = request
        .key
        .clone()
        .unwrap_or_else(|| sigbox::asks::key_of(&request.id).to_string());
    let mut out = AskOut {
        id: request.id.clone(),
        key,
        status: "open".into(),
        choice: None,
        message: None,
        answered_by: None,
        answered_at: None,
    };
    match outcome {
        Some(Outcome::Answered(a)) => {
            out.status = "answered".into();
            out.choice = Some(a.choice.clone());
            out.message = a.message.clone();
            out.answered_by = Some(a.by.clone());
            out.answered_at = Some(instant(a.at));
        }
        Some(Outcome::Expired { .. }) => out.status = "expired".into(),
        None => {}
    }
    Json(out)
}
