//! The mailbox commands: init, send, poll, wait, ls, log, finish, gc, doctor.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use serde_json::json;
use sigbox::PassControl;
use sigbox::{NewSignal, OutboundPlace, ProblemKind, Severity, SignalType, Target};
use sigbox_client::{Checkpoint, WaitMode};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::{flag, low_level};

use crate::cli::{AgentArgs, SendArgs, WaitArgs};
use crate::output::{
    Out, age, age_ms, escape, instant_json, path_json, signal_human, signal_json, target_json,
};

pub(crate) fn init(root: &Path, shared: bool, out: &mut Out) -> anyhow::Result<ExitCode> {
    let mb = super::options().shared(shared).init(root)?;
    out.emit(
        &json!({"root": path_json(mb.root()), "initialized": true}),
        || format!("initialized {}", mb.root().display()),
    )?;
    Ok(ExitCode::SUCCESS)
}

fn parse_type(s: &str) -> anyhow::Result<SignalType> {
    SignalType::parse(s).with_context(|| {
        format!(
            "unknown signal type {s:?}: expected STEER, INFO, PAUSE, ABORT (or STOP), APPROVE, \
             SKIP or RESUME"
        )
    })
}

pub(crate) fn send(root: &Path, args: SendArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let mb = super::open(root)?;
    let ty = parse_type(&args.signal_type)?;
    let target = if args.no_target {
        Target::None
    } else if args.target.trim().is_empty() {
        anyhow::bail!("--target is empty: name an agent or ALL, or send with --no-target");
    } else {
        Target::parse_sent(&args.target).map_err(|e| {
            anyhow::anyhow!(
                "--target: {e}{}",
                if e.contains("names no agent") {
                    " (--no-target)"
                } else {
                    ""
                }
            )
        })?
    };
    let mut s = NewSignal::new(ty);
    s.target(target);
    match args.message.as_deref() {
        Some("-") => {
            let mut m = String::new();
            std::io::stdin()
                .read_to_string(&mut m)
                .context("cannot read the message from stdin")?;
            s.message(m.strip_suffix('\n').unwrap_or(&m));
        }
        Some(m) => {
            s.message(m);
        }
        None => {}
    }
    // `send` refuses a sender that is not text on one line; asked first, so that the refusal
    // names the option.
    if let Some(f) = args.from {
        if !sigbox::valid_sender(&f) {
            anyhow::bail!(
                "--from {f:?}: the sender's name must be non-empty text on one line, without \
                 control characters"
            );
        }
        s.from(f);
    }
    if let Some(i) = args.iteration {
        s.iteration(i);
    }
    let id = mb.send(&s)?;
    out.emit(&json!({"id": id}), || id.clone())?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn poll(root: &Path, args: &AgentArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    refuse_unread_output(args)?;
    let mut cp = checkpoint(root, args)?;
    let interrupts = Interrupts::install()?;
    out.stop_when(Arc::clone(&interrupts.stop));
    let control = interrupts.control(args.max);
    let polled = cp.poll_with(&control, &mut |group| interrupts.hand_over(out, group));
    // A stop signal that interrupted the hand-over ends the process by that signal, the
    // group it could not write put back.
    interrupts.finish(out)?;
    polled?;
    tell(&cp.take_notes());
    if let Some(e) = cp.take_error() {
        return Err(e.into());
    }
    Ok(ExitCode::SUCCESS)
}

/// Says on stderr what the passes did besides delivering (with `-v`, or when stderr is a
/// terminal): what was buffered for whom, archived, quarantined and why, and when a file
/// still settling becomes eligible. One line each; a JSON object each under `--json`.
fn tell(notes: &sigbox_client::Notes) {
    if !super::telling() {
        return;
    }
    let mut lines: Vec<(serde_json::Value, String)> = Vec::new();
    for b in &notes.buffered {
        lines.push((
            json!({"event": "buffered", "id": b.id, "agent": b.agent}),
            format!(
                "buffered {} for {}, who is absent: its next checkpoint gets it",
                b.id, b.agent
            ),
        ));
    }
    for a in &notes.archived {
        lines.push((
            json!({"event": "archived", "id": a.id, "path": path_json(&a.path)}),
            format!(
                "archived broadcast {} into {}: every quorum agent has acked it",
                a.id,
                a.path.display()
            ),
        ));
    }
    for r in &notes.rejected {
        lines.push((
            json!({"event": "rejected", "name": r.name, "path": path_json(&r.path), "reason": r.reason}),
            format!("quarantined {} into {}: {}", r.name, r.path.display(), r.reason),
        ));
    }
    for s in &notes.settling {
        let left = s
            .until
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        lines.push((
            json!({"event": "settling", "path": path_json(&s.path), "eligible_at": rfc3339(s.until)}),
            format!(
                "{} is still settling (written in place): eligible in {:.1} s if unchanged",
                s.path.display(),
                left.as_secs_f64()
            ),
        ));
    }
    for (v, line) in lines {
        warn_line(&v, &line);
    }
}

fn checkpoint(root: &Path, args: &AgentArgs) -> anyhow::Result<Checkpoint> {
    let mut cp = Checkpoint::with_options(&super::options(), root, &agent_name(&args.agent)?)?;
    cp.state(args.state.as_deref());
    Ok(cp)
}

/// Refuses, before anything is claimed, a `poll` or `wait` whose stdout reaches nobody: what
/// it printed would be acknowledged with no consumer (spec/cli.md, "Output nobody reads").
fn refuse_unread_output(args: &AgentArgs) -> anyhow::Result<()> {
    if args.discard {
        return Ok(());
    }
    if let Some(why) = crate::output::reaches_nobody() {
        // No `<file>: ` prefix: this names no file, and `--json` gives `"path": null`.
        anyhow::bail!(
            "{why}; the signals would be acknowledged with nobody to read them, so none was \
             taken; `sigbox ls` lists them without taking them, and --discard takes them \
             unread on purpose"
        );
    }
    Ok(())
}

/// Prints a group of delivered signals and flushes them: the hand-over of a pass.
fn print_signals(out: &mut Out, signals: &[sigbox::Signal]) -> std::io::Result<()> {
    for s in signals {
        out.emit(&signal_json(s), || signal_human(s))?;
    }
    out.flush()
}

pub(crate) fn wait(root: &Path, args: WaitArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    refuse_unread_output(&args.agent)?;
    let mut cp = checkpoint(root, &args.agent)?;
    if let Some(p) = args.poll_interval {
        cp.wait_mode(WaitMode::Poll(p));
    }
    let interrupts = Interrupts::install()?;
    out.stop_when(Arc::clone(&interrupts.stop));
    let control = interrupts.control(args.agent.max);
    let waited = cp.wait_with(args.timeout, &control, &mut |group| {
        interrupts.hand_over(out, group)
    });
    interrupts.finish(out)?;
    let delivered = waited?;
    tell(&cp.take_notes());
    if let Some(e) = cp.take_error() {
        return Err(e.into());
    }
    Ok(if delivered.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// SIGINT, SIGTERM and SIGHUP during `poll` and `wait` (spec/mailbox.md §9.2, "Hand-over"):
/// while a pass holds claims, a signal stops it from claiming more; it prints what it holds,
/// and then the process ends by that signal, as it would have. While no pass runs (a `wait`
/// sleeping), the signal ends the process at once: nothing is in hand.
struct Interrupts {
    /// Set while no pass holds a claim: the signal's default action may run.
    idle: Arc<AtomicBool>,
    /// Set by any of the signals: claim nothing more.
    stop: Arc<AtomicBool>,
    /// The last signal that arrived, or 0.
    which: Arc<AtomicUsize>,
}

impl Interrupts {
    const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

    fn install() -> anyhow::Result<Interrupts> {
        let me = Interrupts {
            idle: Arc::new(AtomicBool::new(true)),
            stop: Arc::new(AtomicBool::new(false)),
            which: Arc::new(AtomicUsize::new(0)),
        };
        for sig in Self::SIGNALS {
            // The default action first: while idle, it ends the process before the flags
            // matter. Then which signal, then the stop flag: whoever sees the flag set finds
            // the signal named (the actions run in this order).
            flag::register_conditional_default(sig, Arc::clone(&me.idle))
                .and_then(|_| flag::register_usize(sig, Arc::clone(&me.which), sig as usize))
                .and_then(|_| flag::register(sig, Arc::clone(&me.stop)))
                .with_context(|| format!("cannot install a handler for signal {sig}"))?;
        }
        Ok(me)
    }

    fn control(&self, max: Option<u64>) -> PassControl<'_> {
        let mut c = PassControl::new();
        c.stop_when(&self.stop).idle_flag(&self.idle);
        if let Some(n) = max {
            c.max(usize::try_from(n).unwrap_or(usize::MAX));
        }
        c
    }

    /// Prints a group ([`print_signals`]). A write that fails (a stop signal, a reader gone,
    /// a full disk) after part of the group went out ends the process here and now: someone
    /// may have read that part, so the claims stay in flight, never acknowledged, and the
    /// agent's next checkpoint delivers the group again, marked as redeliveries. The process
    /// ends by the stop signal if one came; else as a closed output ends it (exit 0), or
    /// with the error (exit 2). Failed before any byte went out, the group is refused, and
    /// the pass puts it back as it was.
    fn hand_over(&self, out: &mut Out, group: &[sigbox::Signal]) -> std::io::Result<()> {
        let Err(e) = print_signals(out, group) else {
            return Ok(());
        };
        if out.cut() == 0 {
            return Err(e);
        }
        let sig = self.which.load(Ordering::SeqCst);
        if sig != 0 {
            let _ = low_level::emulate_default_handler(sig as i32);
        }
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        warn_line(
            &json!({"error": format!("cannot hand the claimed signals over: {e}"), "path": null, "exit": 2}),
            &format!(
                "cannot hand the claimed signals over: {e}; part of the group was written, so \
                 it stays in flight: the next checkpoint delivers it again, marked"
            ),
        );
        std::process::exit(2);
    }

    /// After the last hand-over: ends the process by the signal that stopped it, if any.
    fn finish(&self, out: &mut Out) -> anyhow::Result<()> {
        let sig = self.which.load(Ordering::SeqCst);
        if sig != 0 {
            // Whatever the flush says (a group it cannot write is put back), the signal ends
            // the process.
            let _ = out.flush();
            low_level::emulate_default_handler(sig as i32)
                .with_context(|| format!("cannot end the process by signal {sig}"))?;
        }
        Ok(())
    }
}

pub(crate) fn ls(root: &Path, all: bool, out: &mut Out) -> anyhow::Result<ExitCode> {
    let mb = super::open(root)?;
    // What waits here on its way to another host, and why (spec/bridge.md §7).
    let outbound = mb.bridge().outbound()?;
    let bound = |p: &sigbox::Pending| {
        outbound
            .waiting
            .iter()
            .find(|o| o.place == OutboundPlace::Pending && o.signal.path == p.path)
    };
    let why = |o: &sigbox::OutboundSignal| {
        let to = match &o.host {
            Some(h) => format!("for {} on host {h}", o.agent),
            None => format!("for {}, an agent of no host known here", o.agent),
        };
        match o.place {
            OutboundPlace::Pending => {
                format!("{to}: waiting to be exported: {}", outbound.reason)
            }
            OutboundPlace::Outbox => format!(
                "{to}: taken for export into bridge/outbox/, not acknowledged by the server yet: {}",
                outbound.reason
            ),
        }
    };
    // Every pending signal, buffered ones marked: nothing waiting is hidden.
    for p in mb.pending()? {
        let away = bound(&p).map(|o| (o, why(o)));
        let kind = if p.buffered_for.is_some() {
            "buffered"
        } else {
            "pending"
        };
        let acked: Vec<String> = if p.target == Target::All {
            mb.acked_by(&p.id).unwrap_or_default()
        } else {
            Vec::new()
        };
        // The type as a pass delivers it (`stop` is ABORT); an unknown one as written.
        let known = SignalType::parse(&p.type_name);
        let type_name = known.map_or(p.type_name.clone(), |t| t.as_str().to_string());
        // The body's created_at as poll shows it (the sender's offset); else the instant it
        // is ordered by (the name's, or the file's mtime), in UTC.
        let body_instant = p.created_at.as_deref().and_then(|t| {
            let t = chrono::DateTime::parse_from_rfc3339(t).ok()?;
            t.timestamp_nanos_opt().map(i128::from)
        });
        let since = body_instant.unwrap_or(p.instant);
        let created_at = match (&p.created_at, body_instant) {
            (Some(t), Some(_)) => json!(t),
            _ => instant_json(p.instant),
        };
        let v = json!({
            "kind": kind, "id": p.id, "type": type_name, "known_type": known.is_some(),
            "target": target_json(&p.target),
            "buffered_for": p.buffered_for, "path": path_json(&p.path),
            "created_at": created_at, "age_ms": age_ms(since),
            "acked_by": acked,
            "outbound": away.as_ref().map(|(o, reason)| json!({
                "agent": o.agent, "host": o.host, "reason": reason,
            })),
        });
        out.emit(&v, || {
            let mut line = format!(
                "{:>4}  {:<7} {:<12} {}",
                age(since),
                type_name,
                p.target.to_string(),
                p.id
            );
            if known.is_none() {
                line.push_str(&match &p.buffered_for {
                    Some(a) => {
                        format!("  (unknown type: no agent takes it; it stays in buffered/{a}/)")
                    }
                    None => "  (unknown type: no agent takes it; it stays in inputs/)".into(),
                });
            }
            if let Some(a) = &p.buffered_for {
                line.push_str(&format!("  (buffered for {a})"));
            }
            if !acked.is_empty() {
                line.push_str(&format!("  (acked: {})", acked.join(", ")));
            }
            if let Some((_, reason)) = &away {
                line.push_str(&format!("  ({reason})"));
            }
            line
        })?;
    }
    // Taken for export and not acknowledged by the server yet.
    for o in outbound
        .waiting
        .iter()
        .filter(|o| o.place == OutboundPlace::Outbox)
    {
        let p = &o.signal;
        let known = SignalType::parse(&p.type_name);
        let type_name = known.map_or(p.type_name.clone(), |t| t.as_str().to_string());
        let reason = why(o);
        let v = json!({
            "kind": "outbound", "id": p.id, "type": type_name, "known_type": known.is_some(),
            "target": target_json(&p.target), "path": path_json(&p.path),
            "created_at": instant_json(p.instant), "age_ms": age_ms(p.instant),
            "agent": o.agent, "host": o.host, "reason": reason,
        });
        out.emit(&v, || {
            format!(
                "{:>4}  {:<7} {:<12} {}  ({reason})",
                age(p.instant),
                type_name,
                p.target.to_string(),
                p.id
            )
        })?;
    }
    // What is not deliverable yet, and why: settling (with when it becomes eligible), invalid
    // (the next pass quarantines it), in flight.
    for p in mb.problems()? {
        let path = path_json(&p.path);
        let (v, line) = match &p.kind {
            ProblemKind::Settling {
                until, second_link, ..
            } => {
                let left = until
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                (
                    json!({"kind": "settling", "path": path,
                           "eligible_at": rfc3339(*until), "reason": p.reason()}),
                    format!(
                        "  --  {}  (settling: {}, eligible in {:.1} s if unchanged)",
                        p.path.display(),
                        if *second_link {
                            "a second link, waiting for it to go"
                        } else {
                            "written in place"
                        },
                        left.as_secs_f64()
                    ),
                )
            }
            ProblemKind::Invalid { reason } => (
                json!({"kind": "invalid", "path": path, "reason": reason}),
                format!(
                    "  --  {}  (invalid: {reason}; the next pass moves it to rejected/)",
                    p.path.display()
                ),
            ),
            // Claimed and not yet handed over (by a running consumer, or one that stopped),
            // or a leftover second link the next pass resolves.
            kind => {
                let (agent, count, live) = match kind {
                    ProblemKind::Held { agent, count } => (Some(agent), Some(count), true),
                    ProblemKind::InFlight { agent, count } => (Some(agent), Some(count), false),
                    _ => (None, None, false),
                };
                (
                    json!({"kind": "in_flight", "path": path, "agent": agent, "count": count,
                           "live": live, "reason": p.reason()}),
                    format!("  --  {}  ({})", p.path.display(), p.reason()),
                )
            }
        };
        out.emit(&v, || line.clone())?;
    }
    if all {
        for r in mb.rejected()? {
            let v = json!({"kind": "rejected", "name": r.name, "path": path_json(&r.path), "reason": r.reason});
            out.emit(&v, || format!("  --  rejected  {}  ({})", r.name, r.reason))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An instant as RFC 3339 in UTC, with milliseconds.
fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub(crate) fn log(root: &Path, out: &mut Out) -> anyhow::Result<ExitCode> {
    let mb = super::open(root)?;
    let mut unreadable = 0usize;
    for rec in mb.processed()? {
        match rec {
            Ok(s) => {
                let h = s.handling().unwrap_or_default();
                let status = h.delivery_status.as_deref();
                let v = json!({
                    "id": s.id, "type": s.signal_type.as_str(), "target": target_json(&s.target),
                    "message": s.message, "handled_by": h.handled_by,
                    "handled_at": h.handled_at, "action_taken": h.action_taken,
                    "status": status, "unacked": h.unacked_agents,
                    "path": path_json(&s.path),
                });
                let shown = |v: &Option<String>| v.as_deref().unwrap_or("?").to_string();
                out.emit(&v, || {
                    let mut line = format!(
                        "{}  {:<12} {:<18} {:<7} {:<12} {}",
                        shown(&h.handled_at),
                        shown(&h.handled_by),
                        shown(&h.action_taken),
                        s.signal_type.as_str(),
                        s.target.to_string(),
                        s.id
                    );
                    if let Some(st) = status {
                        line.push_str(&format!("  [{st}]"));
                    }
                    line
                })?;
            }
            // A record it cannot read is said on stderr, the rest still listed; the exit
            // status then says the history shown is not whole.
            Err(e) => {
                unreadable += 1;
                warn_line(
                    &json!({"event": "unreadable", "path": e.path().map(path_json), "reason": e.to_string()}),
                    &format!("cannot read a record: {e}"),
                );
            }
        }
    }
    out.flush()?;
    if unreadable > 0 {
        anyhow::bail!("{unreadable} record(s) in processed/ could not be read (listed above)");
    }
    Ok(ExitCode::SUCCESS)
}

/// One line on stderr: `sigbox: <line>` (control characters escaped), or `v` under `--json`.
pub(crate) fn warn_line(v: &serde_json::Value, line: &str) {
    let text = if super::json() {
        v.to_string()
    } else {
        format!("sigbox: {}", escape(line))
    };
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

pub(crate) fn doctor(root: &Path, out: &mut Out) -> anyhow::Result<ExitCode> {
    let findings = sigbox::diagnose(root, &super::options());
    let problems = findings
        .iter()
        .filter(|f| f.severity == Severity::Problem)
        .count();
    for f in &findings {
        let sev = match f.severity {
            Severity::Problem => "problem",
            Severity::Info => "info",
        };
        out.emit(
            &json!({"severity": sev, "path": path_json(&f.path), "reason": f.message}),
            || format!("{sev}: {}: {}", f.path.display(), f.message),
        )?;
    }
    if !out.json() {
        out.line(&match problems {
            0 => format!("{}: healthy", root.display()),
            n => format!("{}: {n} problem(s)", root.display()),
        })?;
    }
    Ok(if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub(crate) fn finish(root: &Path, agent: &str, out: &mut Out) -> anyhow::Result<ExitCode> {
    let agent = agent_name(agent)?;
    let finished = super::open(root)?.finish(&agent)?;
    if finished.is_empty() && !out.json() {
        // Said, so that silence is never mistaken for a command that did not run; under
        // `--json` no line is the answer (one object per archived broadcast).
        out.line("nothing to archive: no broadcast is pending in inputs/")?;
    }
    for f in finished {
        out.emit(
            &json!({"id": f.id, "status": f.status.as_str(), "unacked": f.unacked}),
            || match f.unacked.len() {
                0 => format!("{}  {}", f.status, f.id),
                _ => format!("{}  {}  unacked: {}", f.status, f.id, f.unacked.join(", ")),
            },
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn gc(
    root: &Path,
    older_than: Duration,
    limit: usize,
    rejected: bool,
    out: &mut Out,
) -> anyhow::Result<ExitCode> {
    let mb = super::open(root)?;
    let stages = mb.gc(older_than, limit)?;
    let quarantined = if rejected {
        mb.clear_rejected(older_than)?
    } else {
        0
    };
    out.emit(
        &json!({"removed": stages + quarantined, "staging": stages, "rejected": quarantined}),
        || {
            let mut line = format!("removed {stages} stale staging file(s)");
            if rejected {
                line.push_str(&format!(" and {quarantined} quarantined file(s)"));
            }
            line
        },
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The agent an `--as` names: one of the known roles in any case (`executor` is the
/// Executor, as a target is read), or a name of its own; anything else is refused.
pub(crate) fn agent_name(name: &str) -> anyhow::Result<String> {
    let name = name.trim();
    if let Some(role) = sigbox::ROLES.iter().find(|r| r.eq_ignore_ascii_case(name)) {
        return Ok((*role).to_string());
    }
    match sigbox::agent_name_problem(name) {
        None => Ok(name.to_string()),
        Some(why) if name.eq_ignore_ascii_case("ALL") => {
            anyhow::bail!("invalid agent name {name:?} (--as): {why}")
        }
        Some(why) => anyhow::bail!(
            "invalid agent name {} (--as): {why}; the known roles ({}) are taken in any case",
            sigbox::quoted_name(name),
            sigbox::ROLES.join(", ")
        ),
    }
}
