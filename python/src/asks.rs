//! Asking a person (spec/asks.md) from Python: `ask` blocks with the GIL released until the
//! request's one answer or its expiry; `answer` gives the one answer or says why it was refused.
//! The Python side (`Checkpoint.ask`, `sigbox.answer`) turns the dicts into typed objects.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use sigbox::asks::{Asks, NewAsk, Outcome, Refusal, Request, instant};
use sigbox_client::Waited;

use crate::{SLICE, error, to_py};

/// An outcome as a dict: `status` `answered` or `expired`, the answer's fields or None.
fn outcome_dict<'py>(
    py: Python<'py>,
    r: &Request,
    o: &Outcome,
    attached: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", &r.id)?;
    d.set_item("asked_at", instant(r.asked_at))?;
    d.set_item("deadline", r.deadline.map(instant))?;
    d.set_item("attached", attached)?;
    match o {
        Outcome::Answered(a) => {
            d.set_item("status", "answered")?;
            d.set_item("choice", &a.choice)?;
            d.set_item("message", &a.message)?;
            d.set_item("answered_by", &a.by)?;
            d.set_item("answered_at", instant(a.at))?;
            d.set_item("expired_at", None::<String>)?;
        }
        Outcome::Expired { at, .. } => {
            d.set_item("status", "expired")?;
            d.set_item("choice", None::<String>)?;
            d.set_item("message", None::<String>)?;
            d.set_item("answered_by", None::<String>)?;
            d.set_item("answered_at", None::<String>)?;
            d.set_item("expired_at", instant(*at))?;
        }
    }
    Ok(d)
}

/// What the native `ask` ended with.
enum Ended {
    Done(Box<Request>, Outcome, bool),
    Interrupted(PyErr),
}

/// Asks as `agent` and blocks (GIL released) until the request's outcome: its one answer, or
/// its expiry at the deadline. A KeyboardInterrupt (or any exception a signal handler raises)
/// ends the wait within 0.1 s and is raised; the request is durable and stays open, and an ask
/// with the same key re-attaches to it.
#[pyfunction]
#[pyo3(signature = (root, agent, message, to=None, choices=None, timeout=None, key=None, context=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn ask<'py>(
    py: Python<'py>,
    root: PathBuf,
    agent: &str,
    message: &str,
    to: Option<String>,
    choices: Option<Vec<String>>,
    timeout: Option<f64>,
    key: Option<String>,
    context: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut new = NewAsk::new(agent, message);
    if let Some(to) = &to {
        new = new.to(to);
    }
    if let Some(c) = choices {
        new = new.choices(c);
    }
    if let Some(t) = timeout {
        // Finite and not negative (checked by the Python side too); past what a Duration
        // holds, the deadline is as late as an instant goes.
        if !(t.is_finite() && t >= 0.0) {
            return Err(error(
                py,
                format!("timeout {t}: a number of seconds, 0 or more, or None"),
                None,
                true,
            ));
        }
        new = new.timeout(Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX));
    }
    if let Some(k) = &key {
        new = new.key(k);
    }
    if let Some(c) = context {
        let v: serde_json::Value = serde_json::from_str(&c)
            .map_err(|e| error(py, format!("the context is not JSON: {e}"), None, true))?;
        new = new.context(v);
    }
    let ended = py.detach(|| -> sigbox::Result<Ended> {
        let mb = sigbox::Mailbox::open(&root)?;
        let asks = Asks::new(&mb);
        let asked = asks.ask(&new)?;
        if let Some(o) = asked.outcome {
            return Ok(Ended::Done(Box::new(asked.request), o, asked.attached));
        }
        let mut interrupt: Option<PyErr> = None;
        let waited =
            sigbox_client::wait_outcome(&mb, &asked.request.id, agent, Some(SLICE), &mut || {
                match Python::attach(|py| py.check_signals()) {
                    Ok(()) => false,
                    Err(e) => {
                        interrupt = Some(e);
                        true
                    }
                }
            })?;
        Ok(match waited {
            Waited::Outcome(o) => Ended::Done(Box::new(asked.request), o, asked.attached),
            Waited::Stopped => {
                Ended::Interrupted(interrupt.unwrap_or_else(|| {
                    pyo3::exceptions::PyKeyboardInterrupt::new_err("interrupted")
                }))
            }
        })
    });
    match ended.map_err(|e| to_py(py, e))? {
        Ended::Done(r, o, attached) => outcome_dict(py, &r, &o, attached),
        Ended::Interrupted(e) => Err(e),
    }
}

/// The kind of a refusal, for the Python side's `AnswerRefused.kind`.
fn refusal_kind(r: &Refusal) -> &'static str {
    match r {
        Refusal::InvalidId { .. } => "invalid_id",
        Refusal::InvalidName { .. } => "invalid_name",
        Refusal::Unknown { .. } => "unknown",
        Refusal::InvalidRequest { .. } => "invalid_request",
        Refusal::Answered { .. } => "answered",
        Refusal::Expired { .. } => "expired",
        Refusal::NotOffered { .. } => "not_offered",
        Refusal::Elsewhere { .. } => "elsewhere",
    }
}

/// Answers the request `id` with `choice` as `by`: `{"refused": None, ...the outcome}` for the
/// one answer (durable before this returns), `{"refused": <one line>, "kind": ...}` otherwise.
#[pyfunction]
#[pyo3(signature = (root, id, choice, message, by))]
pub(crate) fn answer<'py>(
    py: Python<'py>,
    root: PathBuf,
    id: &str,
    choice: &str,
    message: Option<String>,
    by: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let r = py.detach(|| {
        let mb = sigbox::Mailbox::open(&root)?;
        let asks = Asks::new(&mb);
        let took = asks.answer(id, choice, message.as_deref(), by)?;
        let request = match &took {
            Ok(_) => Some(asks.request_checked(id)?),
            Err(_) => None,
        };
        Ok::<_, sigbox::Error>((took, request))
    });
    let (took, request) = r.map_err(|e| to_py(py, e))?;
    match (took, request) {
        (Ok(o), Some(request)) => {
            let d = outcome_dict(py, &request, &o, false)?;
            d.set_item("refused", None::<String>)?;
            d.set_item("kind", None::<String>)?;
            Ok(d)
        }
        (Err(refusal), _) => {
            let d = PyDict::new(py);
            d.set_item("refused", refusal.to_string())?;
            d.set_item("kind", refusal_kind(&refusal))?;
            d.set_item("id", id)?;
            Ok(d)
        }
        (Ok(_), None) => Err(error(
            py,
            format!("{id}: answered, then unreadable"),
            None,
            false,
        )),
    }
}
