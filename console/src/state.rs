//! `GET /api/state`: what the page shows, read from each root through the library's public
//! views (what `sigbox ls`, `log`, `doctor` and `bridge status` read). Blocking: the handler
//! runs it on tokio's blocking pool.
//!
//! Each root's object is built by one function per section ([`root_view`]); a new section is
//! one more function and one more key.

use std::path::Path;

use serde_json::{Value, json};
use sigbox::{Mailbox, Pending, ProblemKind, Signal, SignalType, Target};

use crate::app::Root;
use crate::show::{path_text, shorten};

/// The pending signals whose message the state carries (the newest); the others are counted.
const PENDING_SHOWN: usize = 200;
/// The newest records of `processed/` the timeline shows.
const RECENT: usize = 100;

/// The state of every root.
pub(crate) fn snapshot(roots: &[Root], last_seq: u64) -> Value {
    let roots: Vec<Value> = roots
        .iter()
        .enumerate()
        .map(|(i, r)| match root_view(i, r) {
            Ok(v) => v,
            Err(e) => json!({"index": i, "root": path_text(&r.path), "error": e.to_string()}),
        })
        .collect();
    json!({
        "now": now_text(),
        "seq": last_seq,
        "roots": roots,
    })
}

/// One root: agents, pending, broadcasts, problems, quarantine, bridge, timeline, requests.
fn root_view(index: usize, r: &Root) -> sigbox::Result<Value> {
    let mb = &r.mb;
    let pending = mb.pending()?;
    let problems = mb.problems()?;
    let broadcasts = broadcasts(mb, &pending)?;
    let agents = agents(mb, &pending, &problems, &broadcasts)?;
    Ok(json!({
        "index": index,
        "root": path_text(&r.path),
        "error": null,
        "orchestrator": mb.orchestrator(),
        "agents": agents,
        "pending_total": pending.len(),
        "pending": pending_view(mb, &pending),
        "broadcasts": broadcasts.iter().map(|b| &b.view).collect::<Vec<_>>(),
        "problems": problems_view(&problems),
        "quarantine": quarantine(mb, &r.path)?,
        "bridge": bridge(mb)?,
        "timeline": timeline(mb, &pending)?,
        "asks": crate::asks::section(r),
    }))
}

/// A pending broadcast and who acked it.
struct Broadcast {
    from: Option<String>,
    acked: Vec<String>,
    view: Value,
}

fn broadcasts(mb: &Mailbox, pending: &[Pending]) -> sigbox::Result<Vec<Broadcast>> {
    let quorum = sigbox::DEFAULT_QUORUM;
    let mut out = Vec::new();
    for p in pending.iter().filter(|p| p.target == Target::All) {
        let acked = mb.acked_by(&p.id).unwrap_or_default();
        let waiting: Vec<&str> = quorum
            .iter()
            .copied()
            .filter(|a| !acked.iter().any(|x| x == a) && p.from.as_deref() != Some(*a))
            .collect();
        let message = mb.peek(p).ok().flatten().and_then(|s| s.message);
        out.push(Broadcast {
            from: p.from.clone(),
            acked: acked.clone(),
            view: json!({
                "id": p.id, "type": type_shown(&p.type_name), "from": p.from,
                "created_at": p.created_at.clone().unwrap_or_else(|| instant_text(p.instant)),
                "message": message.as_deref().map(shorten),
                "acked_by": acked, "waiting_for": waiting,
            }),
        });
    }
    Ok(out)
}

fn agents(
    mb: &Mailbox,
    pending: &[Pending],
    problems: &[sigbox::Problem],
    broadcasts: &[Broadcast],
) -> sigbox::Result<Vec<Value>> {
    let mut names = mb.agents_known()?;
    for p in pending {
        if let Target::Agent(a) = &p.target {
            names.push(a.clone());
        }
    }
    names.sort();
    names.dedup();
    let orchestrator = mb.orchestrator();
    let mut out = Vec::new();
    for a in names {
        if !sigbox::valid_agent(&a) {
            continue;
        }
        let direct = pending
            .iter()
            .filter(|p| p.buffered_for.is_none())
            .filter(|p| match &p.target {
                Target::Agent(t) => *t == a,
                Target::None => a == orchestrator,
                Target::All => false,
            })
            .count();
        let buffered = pending
            .iter()
            .filter(|p| p.buffered_for.as_deref() == Some(a.as_str()))
            .count();
        let unacked = broadcasts
            .iter()
            .filter(|b| !b.acked.contains(&a) && b.from.as_deref() != Some(a.as_str()))
            .count();
        let (mut in_flight, mut redelivery) = (0, 0);
        for p in problems {
            match &p.kind {
                ProblemKind::Held { agent, count } if *agent == a => in_flight += count,
                ProblemKind::InFlight { agent, count } if *agent == a => redelivery += count,
                _ => {}
            }
        }
        out.push(json!({
            "name": a,
            "present": mb.is_present(&a),
            "paused": mb.paused(&a).ok().flatten(),
            "pending": direct,
            "buffered": buffered,
            "broadcasts": unacked,
            "in_flight": in_flight,
            "redelivery": redelivery,
            "orchestrator": a == orchestrator,
        }));
    }
    Ok(out)
}

/// The newest pending signals, each with its message; oldest first.
fn pending_view(mb: &Mailbox, pending: &[Pending]) -> Vec<Value> {
    let from = pending.len().saturating_sub(PENDING_SHOWN);
    pending[from..]
        .iter()
        .map(|p| {
            let s = mb.peek(p).ok().flatten();
            json!({
                "id": p.id, "type": type_shown(&p.type_name),
                "known_type": SignalType::parse(&p.type_name).is_some(),
                "target": target_json(&p.target), "from": p.from,
                "buffered_for": p.buffered_for,
                "created_at": p.created_at.clone().unwrap_or_else(|| instant_text(p.instant)),
                "instant_ms": ms(p.instant),
                "message": s.and_then(|s| s.message).as_deref().map(shorten),
            })
        })
        .collect()
}

fn problems_view(problems: &[sigbox::Problem]) -> Vec<Value> {
    problems
        .iter()
        .map(|p| {
            let (kind, agent, count) = match &p.kind {
                ProblemKind::Settling { .. } => ("settling", None, None),
                ProblemKind::Invalid { .. } => ("invalid", None, None),
                ProblemKind::Held { agent, count } => ("in_flight", Some(agent), Some(count)),
                ProblemKind::InFlight { agent, count } => ("redelivery", Some(agent), Some(count)),
                _ => ("leftover", None, None),
            };
            json!({"kind": kind, "path": path_text(&p.path), "reason": p.reason(),
                   "agent": agent, "count": count})
        })
        .collect()
}

/// The quarantine: each file with its reason and the command that removes it; the command
/// that clears them all.
fn quarantine(mb: &Mailbox, root: &Path) -> sigbox::Result<Value> {
    let items: Vec<Value> = mb
        .rejected()?
        .into_iter()
        .map(|r| {
            let reason_file = {
                let mut p = r.path.clone().into_os_string();
                p.push(".reason.json");
                std::path::PathBuf::from(p)
            };
            json!({
                "name": r.name, "path": path_text(&r.path), "reason": r.reason,
                "clear": format!("rm -- {} {}", shell_quote(&path_text(&r.path)),
                                 shell_quote(&path_text(&reason_file))),
            })
        })
        .collect();
    Ok(json!({
        "items": items,
        "clear_all": format!(
            "sigbox --root {} gc --rejected --older-than 0s",
            shell_quote(&path_text(root))
        ),
    }))
}

/// The bridge of this root, when one ever ran here: running or not, and its last state
/// (`bridge/state.json`: host, server, connected, agents here, agents claimed by hosts).
fn bridge(mb: &Mailbox) -> sigbox::Result<Value> {
    let Some(bytes) = mb.bridge().state_file()? else {
        return Ok(Value::Null);
    };
    let state: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok(json!({"running": mb.bridge().running()?, "state": state}))
}

/// Recent signals: the newest records of `processed/` (sent, then delivered or archived, with
/// the latency) and the signals still pending (sent, not delivered yet); oldest first.
fn timeline(mb: &Mailbox, pending: &[Pending]) -> sigbox::Result<Vec<Value>> {
    let mut out: Vec<(i128, Value)> = Vec::new();
    for s in mb.recent_processed(RECENT)? {
        out.push(record(&s));
    }
    let from = pending.len().saturating_sub(RECENT);
    for p in &pending[from..] {
        out.push((
            p.instant,
            json!({
                "id": p.id, "type": type_shown(&p.type_name), "target": target_json(&p.target),
                "sent_ms": ms(p.instant), "delivered_ms": null, "latency_ms": null,
                "handled_by": null, "action": null, "status": "pending", "redelivery": 0,
            }),
        ));
    }
    out.sort_by_key(|(at, _)| *at);
    let from = out.len().saturating_sub(RECENT);
    Ok(out.split_off(from).into_iter().map(|(_, v)| v).collect())
}

/// A record of `processed/` on the timeline.
fn record(s: &Signal) -> (i128, Value) {
    let h = s.handling().unwrap_or_default();
    let sent = sigbox::name::parse_canonical(&format!("{}.json", s.id))
        .map(|c| c.instant)
        .or_else(|| {
            s.created_at
                .and_then(|t| t.timestamp_nanos_opt())
                .map(i128::from)
        });
    let delivered = h
        .handled_at
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .and_then(|t| t.timestamp_nanos_opt())
        .map(i128::from);
    let latency = match (sent, delivered) {
        (Some(a), Some(b)) => Some(((b - a) / 1_000_000) as i64),
        _ => None,
    };
    let at = sent.or(delivered).unwrap_or(0);
    (
        at,
        json!({
            "id": s.id, "type": s.signal_type.as_str(), "target": target_json(&s.target),
            "sent_ms": sent.map(ms), "delivered_ms": delivered.map(ms), "latency_ms": latency,
            "handled_by": h.handled_by, "action": h.action_taken,
            "status": h.delivery_status.unwrap_or_else(|| "delivered".into()),
            "redelivery": h.redelivery,
            "message": s.message.as_deref().map(shorten),
        }),
    )
}

/// The type as a pass delivers it (`stop` is ABORT); an unknown one as written.
fn type_shown(t: &str) -> String {
    SignalType::parse(t).map_or(t.to_string(), |t| t.as_str().to_string())
}

fn target_json(t: &Target) -> Value {
    match t {
        Target::None => Value::Null,
        other => json!(other.to_string()),
    }
}

/// Nanoseconds since the epoch as milliseconds (what the page's clock counts).
fn ms(ns: i128) -> i64 {
    i64::try_from(ns / 1_000_000).unwrap_or(0)
}

fn instant_text(ns: i128) -> String {
    let secs = i64::try_from(ns.div_euclid(1_000_000_000)).unwrap_or(0);
    let nanos = u32::try_from(ns.rem_euclid(1_000_000_000)).unwrap_or(0);
    chrono::DateTime::from_timestamp(secs, nanos)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn now_text() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `s` quoted for a POSIX shell: one word, whatever it holds.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}
