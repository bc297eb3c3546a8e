//! The mailbox commands: init, send, poll, wait, ls, log, finish, gc, doctor, demo.

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::CommandFactory;
use serde_json::{Value, json};
use sigbox::{Mailbox, MailboxOptions, NewSignal, Severity, SignalType, Target};
use sigbox_client::{Checkpoint, WaitMode};

use crate::cli::{AgentArgs, Cli, Command, SendArgs, WaitArgs};
use crate::output::{Out, age, signal_human, signal_json, target_json};

pub(crate) fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    // `tap` writes the child's output from its own threads: it must not run while this thread
    // holds the stdout lock that `Out` keeps.
    if let Command::Tap { name, to, command } = &cli.command {
        return crate::stream_cmds::tap(&cli.root, name, to, command);
    }
    let mut out = Out::new(cli.json);
    let root = cli.root;
    let code = match cli.command {
        Command::Init { shared } => {
            let mb = MailboxOptions::new().shared(shared).init(&root)?;
            out.emit(&json!({"root": mb.root(), "initialized": true}), || {
                format!("initialized {}", mb.root().display())
            })?;
            ExitCode::SUCCESS
        }
        Command::Send(args) => send(&Mailbox::open(&root)?, args, &mut out)?,
        Command::Poll(args) => {
            let mut cp = checkpoint(&root, &args)?;
            let delivered = cp.poll()?;
            print_signals(&mut out, &delivered)?;
            if let Some(e) = cp.take_error() {
                return Err(e.into());
            }
            ExitCode::SUCCESS
        }
        Command::Wait(args) => wait(&root, args, &mut out)?,
        Command::Ls { all } => ls(&Mailbox::open(&root)?, all, &mut out)?,
        Command::Log => log(&Mailbox::open(&root)?, &mut out)?,
        Command::Finish { agent } => {
            for f in Mailbox::open(&root)?.finish(&agent)? {
                out.emit(
                    &json!({"id": f.id, "status": f.status.as_str(), "unacked": f.unacked}),
                    || match f.unacked.len() {
                        0 => format!("{}  {}", f.status, f.id),
                        _ => format!("{}  {}  unacked: {}", f.status, f.id, f.unacked.join(", ")),
                    },
                )?;
            }
            ExitCode::SUCCESS
        }
        Command::Gc { older_than, limit } => {
            let n = Mailbox::open(&root)?.gc(older_than, limit)?;
            out.emit(&json!({"removed": n}), || {
                format!("removed {n} stale staging file(s)")
            })?;
            ExitCode::SUCCESS
        }
        Command::Doctor => doctor(&root, &mut out)?,
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "sigbox", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Demo => demo(&mut out)?,
        Command::Goblin(cmd) => crate::dialect_cmds::goblin(cmd, &mut out)?,
        Command::Mux(cmd) => crate::dialect_cmds::mux_cmd(cmd, &mut out)?,
        Command::Flux(cmd) => crate::stream_cmds::flux(cmd, &mut out)?,
        Command::Pilot(cmd) => crate::stream_cmds::pilot(cmd, &mut out)?,
        Command::Tap { .. } => unreachable!("handled above"),
    };
    out.flush()?;
    Ok(code)
}

fn parse_type(s: &str) -> anyhow::Result<SignalType> {
    SignalType::parse(s).with_context(|| {
        format!(
            "unknown signal type {s:?}: expected STEER, INFO, PAUSE, ABORT (or STOP), APPROVE, \
             SKIP or RESUME"
        )
    })
}

fn send(mb: &Mailbox, args: SendArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let ty = parse_type(&args.signal_type)?;
    let target = if args.no_target {
        Target::None
    } else {
        Target::parse(Some(&args.target)).map_err(anyhow::Error::msg)?
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
    if let Some(f) = args.from {
        s.from(f);
    }
    if let Some(i) = args.iteration {
        s.iteration(i);
    }
    let id = mb.send(&s)?;
    out.emit(&json!({"id": id}), || id.clone())?;
    Ok(ExitCode::SUCCESS)
}

fn checkpoint(root: &std::path::Path, args: &AgentArgs) -> anyhow::Result<Checkpoint> {
    let mut cp = Checkpoint::open(root, &args.agent)?;
    cp.state(args.state.as_deref());
    Ok(cp)
}

fn print_signals(out: &mut Out, signals: &[sigbox::Signal]) -> anyhow::Result<()> {
    for s in signals {
        out.emit(&signal_json(s), || signal_human(s))?;
    }
    Ok(())
}

fn wait(root: &std::path::Path, args: WaitArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let mut cp = checkpoint(root, &args.agent)?;
    if let Some(p) = args.poll_interval {
        cp.wait_mode(WaitMode::Poll(p));
    }
    let delivered = cp.wait(args.timeout)?;
    print_signals(out, &delivered)?;
    if let Some(e) = cp.take_error() {
        return Err(e.into());
    }
    Ok(if delivered.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn ls(mb: &Mailbox, all: bool, out: &mut Out) -> anyhow::Result<ExitCode> {
    for p in mb.pending()? {
        if p.buffered_for.is_some() && !all {
            continue;
        }
        let kind = if p.buffered_for.is_some() {
            "buffered"
        } else {
            "pending"
        };
        let acked: Vec<String> = if all && p.target == Target::All {
            acks_of(mb, &p.id)
        } else {
            Vec::new()
        };
        let v = json!({
            "kind": kind, "id": p.id, "type": p.type_name, "target": target_json(&p.target),
            "buffered_for": p.buffered_for, "path": p.path,
            "created_ns": p.instant.to_string(), "age": age(p.instant), "acked_by": acked,
        });
        out.emit(&v, || {
            let mut line = format!(
                "{:>4}  {:<7} {:<12} {}",
                age(p.instant),
                p.type_name,
                p.target.to_string(),
                p.id
            );
            if let Some(a) = &p.buffered_for {
                line.push_str(&format!("  (buffered for {a})"));
            }
            if !acked.is_empty() {
                line.push_str(&format!("  (acked: {})", acked.join(", ")));
            }
            line
        })?;
    }
    if all {
        for p in mb.problems()? {
            let (path, reason) = (p.path.clone(), p.reason());
            let v = json!({"kind": "settling_or_invalid", "path": path, "reason": reason});
            out.emit(&v, || format!("  --  {}  ({reason})", path.display()))?;
        }
        for r in mb.rejected()? {
            let v = json!({"kind": "rejected", "name": r.name, "path": r.path, "reason": r.reason});
            out.emit(&v, || format!("  --  rejected  {}  ({})", r.name, r.reason))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn acks_of(mb: &Mailbox, id: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(mb.root().join("acks").join(id))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".ack")
                .or_else(|| n.strip_suffix(".ack.yaml"))
                .map(String::from)
        })
        .collect();
    v.sort();
    v
}

fn log(mb: &Mailbox, out: &mut Out) -> anyhow::Result<ExitCode> {
    for rec in mb.processed()? {
        match rec {
            Ok(s) => {
                let meta = s
                    .fields
                    .get("handling_metadata")
                    .cloned()
                    .unwrap_or(Value::Null);
                let get = |k: &str| {
                    meta.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_string()
                };
                let status = s.fields.get("delivery_status").and_then(Value::as_str);
                let v = json!({
                    "id": s.id, "type": s.signal_type.as_str(), "target": target_json(&s.target),
                    "message": s.message, "handled_by": meta.get("handled_by"),
                    "handled_at": meta.get("handled_at"), "action_taken": meta.get("action_taken"),
                    "delivery_status": status, "unacked_agents": s.fields.get("unacked_agents"),
                });
                out.emit(&v, || {
                    let mut line = format!(
                        "{}  {:<12} {:<18} {:<7} {:<12} {}",
                        get("handled_at"),
                        get("handled_by"),
                        get("action_taken"),
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
            Err(e) => {
                out.emit(&json!({"error": e.to_string()}), || format!("error: {e}"))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn doctor(root: &std::path::Path, out: &mut Out) -> anyhow::Result<ExitCode> {
    let findings = sigbox::diagnose(root, &MailboxOptions::new());
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
            &json!({"severity": sev, "path": f.path, "message": f.message}),
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

/// A tour of the routing table on a fresh mailbox in a temporary directory.
fn demo(out: &mut Out) -> anyhow::Result<ExitCode> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let root = dir.path().join("signals");
    let mb = Mailbox::init(&root)?;
    let say = |out: &mut Out, s: String| -> anyhow::Result<()> {
        if !out.json() {
            out.line(&s)?;
        }
        Ok(())
    };
    say(out, format!("mailbox at {}", root.display()))?;
    let send = |ty, target: Target, msg: &str| -> anyhow::Result<String> {
        Ok(mb.send(NewSignal::new(ty).target(target).message(msg))?)
    };
    let exec = Target::Agent("Executor".into());
    send(SignalType::Steer, exec.clone(), "prefer the v2 API")?;
    send(SignalType::Info, Target::All, "CI is green again")?;
    send(
        SignalType::Steer,
        Target::Agent("Planner".into()),
        "split task 3",
    )?;
    send(
        SignalType::Approve,
        Target::Agent("Orchestrator".into()),
        "ship it",
    )?;
    std::fs::write(
        root.join("inputs/signal.260208-143000Z.yaml"),
        "type: INFO\ntarget: Executor\nmessage: a person wrote this by hand\n",
    )?;
    send(SignalType::Pause, exec.clone(), "hold on")?;
    send(SignalType::Resume, exec, "carry on")?;
    say(
        out,
        "sent 6 signals and dropped 1 hand-written YAML file\n".into(),
    )?;

    let mut opts = MailboxOptions::new();
    opts.settle(Duration::ZERO); // the hand-written file above is complete: no need to wait
    let executor_present = opts.open(&root)?.presence("Executor")?;
    let steps: [(&str, Option<&str>, &str); 6] = [
        (
            "Executor",
            None,
            "the executor's checkpoint (PAUSE ends the pass)",
        ),
        (
            "Orchestrator",
            Some("PLANNING"),
            "the orchestrator (Planner absent: buffered)",
        ),
        ("Executor", None, "the executor again (after the PAUSE)"),
        ("Planner", None, "the planner comes back (its buffer first)"),
        (
            "Orchestrator",
            Some("KNOWLEDGE_APPROVAL"),
            "the orchestrator in KNOWLEDGE_APPROVAL",
        ),
        ("Executor", None, "the executor once more: nothing twice"),
    ];
    let mb = opts.open(&root)?;
    for (agent, state, what) in steps {
        let pass = mb.pass(agent, state)?;
        say(out, format!("== {what}"))?;
        for s in &pass.delivered {
            let mut v = signal_json(s);
            v["agent"] = json!(agent);
            out.emit(&v, || format!("  {agent:<12} <- {}", signal_human(s)))?;
        }
        for b in &pass.buffered {
            say(out, format!("  buffered for {}: {}", b.agent, b.id))?;
        }
        if pass.delivered.is_empty() && pass.buffered.is_empty() {
            say(out, "  (nothing)".into())?;
        }
    }
    drop(executor_present);
    let left = mb.pending()?.len();
    say(
        out,
        format!("\npending now: {left} (the broadcast, until every quorum agent has acked)"),
    )?;
    if left > 1 {
        bail!("demo: expected only the broadcast to remain, found {left} pending");
    }
    Ok(ExitCode::SUCCESS)
}
