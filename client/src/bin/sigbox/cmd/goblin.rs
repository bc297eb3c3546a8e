//! `sigbox goblin ...`: write, watch, inspect and clean a worktree's `.goblin/` signal files.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use sigbox::goblin::{self, FileState, Goblin, GoblinSignal, Stage, Step};
use sigbox_client::Waiter;

use crate::cli::GoblinCmd;
use crate::output::{Out, path_json};

fn goblin_name(name: &str) -> anyhow::Result<GoblinSignal> {
    GoblinSignal::parse(name).with_context(|| {
        format!(
            "unknown Goblin signal {name:?}: expected scope-complete, build-complete, \
             review-approved, review-changes-requested, test-passed or test-failed"
        )
    })
}

fn parse_stage(s: &str) -> anyhow::Result<Stage> {
    Stage::parse(s).with_context(|| {
        format!("unknown stage {s:?}: expected SCOPE, BUILD, REVIEW, TEST, DONE or FAILED")
    })
}

pub(crate) fn run(cmd: GoblinCmd, out: &mut Out) -> anyhow::Result<ExitCode> {
    match cmd {
        GoblinCmd::Signal {
            name,
            body,
            file,
            worktree,
        } => {
            let signal = goblin_name(&name)?;
            let text = match (body.as_deref(), &file) {
                (Some("-"), _) => {
                    let mut s = String::new();
                    std::io::stdin()
                        .read_to_string(&mut s)
                        .context("cannot read the body from stdin")?;
                    Some((s, "stdin".to_string()))
                }
                (Some(b), _) => Some((b.to_string(), "the command line".to_string())),
                (None, Some(f)) => {
                    // Never blocks on a FIFO, never reads a device: a regular file or an error.
                    let bytes = super::streams::read_document(f)
                        .with_context(|| format!("{}", f.display()))?;
                    let text = String::from_utf8(bytes)
                        .with_context(|| format!("{}: not UTF-8", f.display()))?;
                    Some((text, f.display().to_string()))
                }
                (None, None) => None,
            };
            let body = match text {
                None => None,
                Some((t, _)) if t.trim().is_empty() => None,
                Some((t, from)) => match serde_json::from_str::<Value>(&t) {
                    Ok(Value::Object(m)) => Some(m),
                    Ok(_) => bail!("{from}: the body must be a JSON object"),
                    Err(e) => bail!("{from}: invalid JSON body: {e}"),
                },
            };
            let g = Goblin::open(&worktree)?;
            let path = g.write(signal, body)?;
            out.emit(
                &json!({"signal": signal.name(), "path": path_json(&path)}),
                || path.display().to_string(),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        GoblinCmd::Watch {
            worktree,
            stage,
            retries,
            timeout,
            once,
            settle,
        } => watch(&worktree, stage, retries, timeout, once, settle, out),
        GoblinCmd::Status { worktree } => {
            let g = Goblin::open(&worktree)?;
            let st = g.state();
            let mut signals = Vec::new();
            for o in g.scan()? {
                let (state, detail) = match &o.state {
                    FileState::Ready(goblin::Payload::Empty) => ("empty", Value::Null),
                    FileState::Ready(p) => ("ready", p.to_json()),
                    FileState::Settling(_) => ("settling", Value::Null),
                    FileState::Invalid(r) => ("invalid", json!(r)),
                };
                signals.push(
                    json!({"signal": o.signal.name(), "state": state, "detail": detail,
                                    "path": path_json(&o.path)}),
                );
            }
            let v = json!({
                "stage": st.map(|s| s.stage.as_str()),
                "retries": st.map(|s| s.retries),
                "signals": signals,
            });
            out.emit_lines(&v, || {
                let mut lines = vec![match st {
                    Some(st) => format!("stage: {} (retries {})", st.stage.as_str(), st.retries),
                    None => "stage: unknown (no watch has run here)".to_string(),
                }];
                for sig in &signals {
                    lines.push(format!(
                        "{:<26} {:<9} {}",
                        sig["signal"].as_str().unwrap_or(""),
                        sig["state"].as_str().unwrap_or(""),
                        match &sig["detail"] {
                            Value::Null => String::new(),
                            Value::String(r) => r.clone(),
                            other => other.to_string(),
                        }
                    ));
                }
                if signals.is_empty() {
                    lines.push("no signal files".into());
                }
                lines
            })?;
            Ok(ExitCode::SUCCESS)
        }
        GoblinCmd::Clean { worktree } => {
            let g = Goblin::open(&worktree)?;
            let removed = g.clean()?;
            // `removed` is a count in every command's JSON (as in `gc`); the paths beside it.
            let paths: Vec<_> = removed.iter().map(|p| path_json(p)).collect();
            if out.is_json() {
                out.emit(
                    &json!({"removed": removed.len(), "paths": paths}),
                    String::new,
                )?;
            } else {
                for p in &removed {
                    out.line(&format!("removed {}", p.display()))?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `watch`: the broker's watch rule ([`Goblin::step`]) in a loop, sleeping between steps until
/// `.goblin/` changes, a settling file's window ends, or the deadline. Its JSON lines are its
/// interface, whatever the output mode.
fn watch(
    worktree: &Path,
    stage: Option<String>,
    retries: Option<u32>,
    timeout: Option<Duration>,
    once: bool,
    settle: Duration,
    out: &mut Out,
) -> anyhow::Result<ExitCode> {
    let mut g = Goblin::open(worktree)?;
    g.settle(settle);
    let stage = stage.as_deref().map(parse_stage).transpose()?;
    let mut watch = g.start_watch(stage, retries)?;
    let mut waiter = Waiter::new();
    waiter.settle_margin(Duration::from_millis(5));
    if let Err(e) = waiter.watch(&[(g.dir(), false)]) {
        tracing::warn!(
            "{}",
            sigbox_client::no_events_reason(&e, Duration::from_secs(1))
        );
    }
    let deadline = sigbox_client::deadline_after(timeout);
    loop {
        let stage = watch.state().stage;
        if stage.is_terminal() && !watch.recovering() {
            out.flush()?;
            return Ok(ExitCode::from(if stage == Stage::Done { 0 } else { 3 }));
        }
        waiter.drain();
        let step = g.step(&mut watch, |e| {
            out.line(&e.to_json().to_string())?;
            if matches!(e, goblin::Event::Transition { .. }) {
                out.flush()?;
            }
            Ok::<_, anyhow::Error>(())
        })?;
        let next_check = match step {
            Step::Advanced if once => return Ok(ExitCode::SUCCESS),
            Step::Advanced => continue,
            Step::Waiting { next_check } => next_check,
        };
        out.flush()?;
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(ExitCode::from(1));
        }
        waiter.sleep(
            next_check,
            deadline.map(|d| d.saturating_duration_since(now)),
        );
    }
}
