//! `POST /api/send`: a signal exactly as `sigbox send` makes it, with its checks and its
//! refusal messages word for word (the console's tests compare the two).

use serde_json::Value;
use sigbox::{NewSignal, SignalType, Target};

/// What `/api/send` takes, read from its JSON body.
#[derive(Debug)]
pub(crate) struct SendRequest {
    /// Which root (its index in `/api/state`); 0 when absent.
    pub(crate) root: usize,
    /// The signal.
    pub(crate) signal: NewSignal,
}

/// Why a request is refused: the CLI's message for the same input.
pub(crate) type Refusal = String;

/// Reads `{"type", "message"?, "target"?, "from"?, "iteration"?, "root"?}`. `target` absent
/// is `ALL`, as `sigbox send` without `--target`; `null` is no target (`--no-target`).
pub(crate) fn parse(body: &Value) -> Result<SendRequest, Refusal> {
    let Some(obj) = body.as_object() else {
        return Err(
            "the request must be a JSON object: {\"type\", \"message\", \"target\"}".into(),
        );
    };
    for k in obj.keys() {
        if !["type", "message", "target", "from", "iteration", "root"].contains(&k.as_str()) {
            return Err(format!(
                "unknown field {k:?}: a send takes type, message, target, from, iteration and root"
            ));
        }
    }
    let text = |k: &str| -> Result<Option<&str>, Refusal> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(format!("{k} must be a string")),
        }
    };
    let type_name = text("type")?.ok_or("type is missing: STEER, INFO, PAUSE, RESUME, ABORT")?;
    let ty = parse_type(type_name)?;
    let target = match obj.get("target") {
        None => parse_target("ALL")?,
        Some(Value::Null) => Target::None,
        Some(Value::String(t)) => parse_target(t)?,
        Some(_) => return Err("target must be a string (an agent or ALL) or null".into()),
    };
    let mut s = NewSignal::new(ty);
    s.target(target);
    if let Some(m) = text("message")? {
        s.message(m);
    }
    if let Some(f) = text("from")? {
        if !sigbox::valid_sender(f) {
            return Err(format!(
                "--from {f:?}: the sender's name must be non-empty text on one line, without \
                 control characters"
            ));
        }
        s.from(f);
    }
    match obj.get("iteration") {
        None | Some(Value::Null) => {}
        Some(v) => {
            let i = v
                .as_u64()
                .ok_or("iteration must be a whole number, 0 or more")?;
            s.iteration(i);
        }
    }
    let root = match obj.get("root") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .and_then(|r| usize::try_from(r).ok())
            .ok_or("root must be the index of a root in /api/state")?,
    };
    Ok(SendRequest { root, signal: s })
}

/// The type, as `sigbox send TYPE` reads it.
fn parse_type(s: &str) -> Result<SignalType, Refusal> {
    SignalType::parse(s).ok_or_else(|| {
        format!(
            "unknown signal type {s:?}: expected STEER, INFO, PAUSE, ABORT (or STOP), APPROVE, \
             SKIP or RESUME"
        )
    })
}

/// The target, as `sigbox send --target T` reads it.
fn parse_target(t: &str) -> Result<Target, Refusal> {
    if t.trim().is_empty() {
        return Err("--target is empty: name an agent or ALL, or send with --no-target".into());
    }
    Target::parse_sent(t).map_err(|e| {
        format!(
            "--target: {e}{}",
            if e.contains("names no agent") {
                " (--no-target)"
            } else {
                ""
            }
        )
    })
}

/// A refusal of the library (`Mailbox::send`) as the CLI words it: the error and its causes
/// on one line.
pub(crate) fn library_refusal(e: &sigbox::Error) -> Refusal {
    let mut line = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        line.push_str(": ");
        line.push_str(&s.to_string());
        src = s.source();
    }
    line.replace('\n', " ")
}
