//! `sigbox demo`: a tour of the routing table on a fresh mailbox in a temporary directory.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use sigbox::{Mailbox, MailboxOptions, NewSignal, SignalType, Target};

use crate::output::{Out, signal_human, signal_json};

/// A tour of the routing table on a fresh mailbox in a temporary directory.
pub(crate) fn run(keep: bool, out: &mut Out) -> anyhow::Result<ExitCode> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let root = dir.path().join("signals");
    let mb = Mailbox::init(&root)?;
    let say = |out: &mut Out, s: String| -> anyhow::Result<()> {
        if !out.json() {
            // The demo's own text: its line breaks are line breaks.
            for line in s.split('\n') {
                out.line(line)?;
            }
        }
        Ok(())
    };
    say(
        out,
        if keep {
            format!("demo mailbox at {} (kept: --keep)", root.display())
        } else {
            "demo mailbox in a temporary directory, removed at the end (--keep keeps it)".into()
        },
    )?;
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
        mb.inputs_dir().join("signal.260208-143000Z.yaml"),
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
        // Shown: handed over.
        mb.ack(agent)?;
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
    if keep {
        let kept = dir.keep();
        let root = kept.join("signals");
        say(
            out,
            format!(
                "kept: look around with `sigbox --root {} ls --all` or `... log`",
                root.display()
            ),
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
