//! The `tap` table: the mailbox signal each Flux and Pilot stream signal becomes
//! (spec/streams.md, `sigbox tap`). Pure: no filesystem access; the caller sets the target and
//! the sender and sends.

use serde_json::{Value, json};

use crate::flux::{FluxSignal, Verdict};
use crate::pilot::PilotSignal;
use crate::signal::{NewSignal, SignalType};

/// The mailbox signal a Flux signal becomes: its type and message by the table, with the fields
/// `source` (`flux`) and `source_signal` (the parsed signal). Target and sender are left to the
/// caller.
pub fn from_flux(s: &FluxSignal) -> NewSignal {
    let (ty, message) = flux_row(s);
    signal(ty, message, "flux", s.to_json())
}

/// The mailbox signal a Pilot signal becomes: its type and message by the table, with the
/// fields `source` (`pilot`) and `source_signal` (the parsed signal). Target and sender are left
/// to the caller.
pub fn from_pilot(s: &PilotSignal) -> NewSignal {
    let (ty, message) = pilot_row(s);
    signal(ty, message, "pilot", s.to_json())
}

/// The first of two optional texts, else the empty one.
fn first_of(a: &Option<String>, b: &Option<String>) -> String {
    a.clone().or_else(|| b.clone()).unwrap_or_default()
}

/// A message without the space an empty detail leaves at its end.
fn trimmed(message: String) -> String {
    message.trim_end().to_string()
}

fn signal(ty: SignalType, message: String, source: &str, raw: Value) -> NewSignal {
    let mut s = NewSignal::new(ty);
    s.message(message)
        .field("source", json!(source))
        .field("source_signal", raw);
    s
}

/// The table's Flux rows.
fn flux_row(s: &FluxSignal) -> (SignalType, String) {
    let detail = first_of(&s.summary, &s.reason);
    match (s.verdict, s.reason.as_deref()) {
        (Verdict::Proceed, _) => (SignalType::Info, trimmed(format!("flux: proceed {detail}"))),
        (Verdict::Hold, Some("needs_human")) => (
            SignalType::Pause,
            s.question().map_or_else(
                || trimmed(format!("flux: needs a human {detail}")),
                str::to_string,
            ),
        ),
        (Verdict::Hold, Some("already_complete")) => (
            SignalType::Steer,
            format!(
                "flux: already complete; jump to {}",
                s.target_state().unwrap_or("?")
            ),
        ),
        (Verdict::Hold, _) => (SignalType::Pause, trimmed(format!("flux: hold {detail}"))),
        (Verdict::Rework, _) => (SignalType::Steer, trimmed(format!("flux: rework {detail}"))),
        (Verdict::Abort, _) => (SignalType::Abort, trimmed(format!("flux: abort {detail}"))),
    }
}

/// The table's Pilot rows.
fn pilot_row(s: &PilotSignal) -> (SignalType, String) {
    let msg = first_of(&s.message, &s.reason);
    if s.is_exit() {
        return match s.success {
            Some(false) => (
                SignalType::Abort,
                trimmed(format!("pilot: exit, failed: {msg}")),
            ),
            _ => (SignalType::Info, trimmed(format!("pilot: exit {msg}"))),
        };
    }
    match s.signal_type.as_str() {
        "stagnation" => (
            SignalType::Pause,
            trimmed(format!(
                "pilot: stagnation at iteration {}/{} {}",
                s.iteration.map_or("?".into(), |i| i.to_string()),
                s.max_iterations.map_or("?".into(), |i| i.to_string()),
                s.indicators
                    .as_ref()
                    .map_or(String::new(), |i| Value::Object(i.clone()).to_string())
            )),
        ),
        "status" => (
            SignalType::Info,
            trimmed(format!(
                "pilot: {} {}% {msg}",
                if s.phase.is_empty() { "-" } else { &s.phase },
                s.progress
            )),
        ),
        other => (
            SignalType::Info,
            format!("pilot: {other} {} {msg}", s.phase)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flux::{FluxEvent, FluxParser};
    use crate::pilot::{PilotEvent, PilotParser};

    /// The one Flux signal in a `flux:signal` line carrying `fields`.
    fn flux(fields: &str) -> NewSignal {
        let line = format!("{{\"flux:signal\": {fields}}}\n");
        match FluxParser::default().feed(line.as_bytes()).as_slice() {
            [FluxEvent::Signal(s)] => from_flux(s),
            other => panic!("not one Flux signal: {other:?}"),
        }
    }

    /// The one Pilot signal in a `pilot-signal` block holding `body`.
    fn pilot(body: &str) -> NewSignal {
        let block = format!("```pilot-signal\n{body}\n```\n");
        let mut p = PilotParser::default();
        let mut events = p.feed(block.as_bytes());
        events.extend(p.finish());
        match events.as_slice() {
            [PilotEvent::Signal(s)] => from_pilot(s),
            other => panic!("not one Pilot signal: {other:?}"),
        }
    }

    /// One test per row of the table in spec/streams.md: the stream signal, then the mailbox
    /// signal's type and message.
    macro_rules! rows {
        ($($name:ident: $signal:expr => $ty:ident, $message:expr;)*) => {$(
            #[test]
            fn $name() {
                let s = $signal;
                assert_eq!(s.signal_type, SignalType::$ty);
                assert_eq!(s.message.as_deref(), Some($message));
            }
        )*};
    }

    rows! {
        flux_proceed:
            flux(r#"{"verdict": "proceed", "summary": "tests pass"}"#)
            => Info, "flux: proceed tests pass";
        flux_hold_needs_human:
            flux(r#"{"verdict": "hold", "reason": "needs_human", "meta": {"question": "ship?"}}"#)
            => Pause, "ship?";
        flux_hold_needs_human_without_a_question:
            flux(r#"{"verdict": "hold", "reason": "needs_human"}"#)
            => Pause, "flux: needs a human needs_human";
        flux_hold_already_complete:
            flux(r#"{"verdict": "hold", "reason": "already_complete", "meta": {"targetState": "DEPLOY"}}"#)
            => Steer, "flux: already complete; jump to DEPLOY";
        flux_hold_other_reason:
            flux(r#"{"verdict": "hold", "reason": "rate_limited"}"#)
            => Pause, "flux: hold rate_limited";
        flux_rework:
            flux(r#"{"verdict": "rework", "summary": "two tests fail"}"#)
            => Steer, "flux: rework two tests fail";
        flux_abort:
            flux(r#"{"verdict": "abort", "reason": "budget"}"#)
            => Abort, "flux: abort budget";
        pilot_exit_failed:
            pilot(r#"{"type": "exit", "success": false, "message": "gave up"}"#)
            => Abort, "pilot: exit, failed: gave up";
        pilot_exit_otherwise:
            pilot(r#"{"exit_signal": true, "reason": "done"}"#)
            => Info, "pilot: exit done";
        pilot_stagnation:
            pilot(r#"{"type": "stagnation", "iteration": 4, "max_iterations": 10, "indicators": {"same_diff": true}}"#)
            => Pause, r#"pilot: stagnation at iteration 4/10 {"same_diff":true}"#;
        pilot_status:
            pilot(r#"{"type": "status", "phase": "IMPL", "progress": 50, "message": "halfway"}"#)
            => Info, "pilot: IMPL 50% halfway";
        pilot_other_type:
            pilot(r#"{"type": "phase", "phase": "VERIFY"}"#)
            => Info, "pilot: phase VERIFY";
    }

    #[test]
    fn the_stream_signal_travels_in_the_fields() {
        let s = flux(r#"{"verdict": "proceed"}"#);
        assert_eq!(s.message.as_deref(), Some("flux: proceed"));
        assert_eq!(s.extra["source"], json!("flux"));
        assert_eq!(s.extra["source_signal"]["verdict"], json!("proceed"));
        assert_eq!(
            s.target,
            crate::signal::Target::All,
            "the caller sets the target"
        );
        let p = pilot(r#"{"type": "status"}"#);
        assert_eq!(p.message.as_deref(), Some("pilot: - 0%"));
        assert_eq!(p.extra["source"], json!("pilot"));
    }
}
