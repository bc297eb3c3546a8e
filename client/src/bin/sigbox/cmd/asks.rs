//! Asking a person (spec/asks.md): `ask`, `answer`, `asks`, and the requests in `log`.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use serde_json::{Value, json};
use sigbox::asks::{
    AnswerAnywhere, AskState, Asks, NewAsk, Outcome, ProposalStatus, Refusal, Request, Status,
    instant,
};
use sigbox_client::Waited;

use crate::cli::{AnswerArgs, AskArgs};
use crate::output::{Out, escape, path_json};

/// An agent name from `--as`: a known role in any case is that role.
fn agent_name(name: &str) -> anyhow::Result<String> {
    let name = name.trim();
    if let Some(role) = sigbox::ROLES.iter().find(|r| r.eq_ignore_ascii_case(name)) {
        return Ok((*role).to_string());
    }
    match sigbox::agent_name_problem(name) {
        None => Ok(name.to_string()),
        Some(why) => anyhow::bail!(
            "invalid agent name {} (--as): {why}",
            sigbox::quoted_name(name)
        ),
    }
}

fn took_ms(r: &Request, o: &Outcome) -> Option<i64> {
    match o {
        Outcome::Answered(a) => Some((a.at - r.asked_at).num_milliseconds().max(0)),
        Outcome::Expired { .. } => None,
    }
}

/// The `ask --json` object of an outcome.
fn outcome_json(r: &Request, o: &Outcome) -> Value {
    match o {
        Outcome::Answered(a) => json!({
            "id": r.id, "status": "answered", "choice": a.choice, "message": a.message,
            "answered_by": a.by, "answered_at": instant(a.at), "asked_at": instant(r.asked_at),
            "took_ms": took_ms(r, o),
        }),
        Outcome::Expired { at, .. } => json!({
            "id": r.id, "status": "expired", "choice": null, "message": null,
            "answered_by": null, "answered_at": null, "asked_at": instant(r.asked_at),
            "expired_at": instant(*at),
        }),
    }
}

/// Prints an outcome: the choice alone on stdout (exit 0), who answered on stderr; an expiry
/// says so on stderr (exit 1).
fn print_outcome(out: &mut Out, r: &Request, o: &Outcome) -> anyhow::Result<ExitCode> {
    // Text: the choice alone on stdout (`choice=$(sigbox ask ...)`), nothing when no answer
    // came; the line for a person goes to stderr.
    match o {
        Outcome::Answered(a) => out.emit(&outcome_json(r, o), || a.choice.clone())?,
        Outcome::Expired { .. } if out.is_json() => out.emit(&outcome_json(r, o), String::new)?,
        Outcome::Expired { .. } => {}
    }
    out.flush()?;
    if !out.is_json() {
        let said = match o {
            Outcome::Answered(a) => format!(
                "{}: answered {} by {} at {}{}",
                r.id,
                a.choice,
                a.by,
                instant(a.at),
                a.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
            Outcome::Expired { .. } => format!(
                "{}: expired at {} with no answer",
                r.id,
                r.deadline.map(instant).unwrap_or_default()
            ),
        };
        let _ = writeln!(std::io::stderr(), "sigbox: {}", escape(&said));
    }
    Ok(match o {
        Outcome::Answered(_) => ExitCode::SUCCESS,
        Outcome::Expired { .. } => ExitCode::from(1),
    })
}

pub(crate) fn ask(root: &Path, args: AskArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let agent = agent_name(&args.agent)?;
    let message = if args.message == "-" {
        let mut m = String::new();
        std::io::stdin()
            .read_to_string(&mut m)
            .context("cannot read the message from stdin")?;
        m.strip_suffix('\n').unwrap_or(&m).to_string()
    } else {
        args.message
    };
    let mut new = NewAsk::new(&agent, &message).choices(args.choices);
    if let Some(to) = &args.to {
        new = new.to(to);
    }
    if let Some(t) = args.timeout {
        new = new.timeout(t);
    }
    if let Some(k) = &args.key {
        new = new.key(k);
    }
    let mb = super::open(root)?;
    let asks = Asks::new(&mb);
    let asked = asks.ask(&new)?;
    let r = asked.request;
    if let Some(o) = &asked.outcome {
        return print_outcome(out, &r, o);
    }
    if args.no_wait {
        out.emit(
            &json!({"id": r.id, "attached": asked.attached, "status": "open",
                    "deadline": r.deadline.map(instant)}),
            || r.id.clone(),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    // A stop signal ends the process as its default action does: the request is durable and
    // stays open; `ask --key` re-attaches.
    match sigbox_client::wait_outcome(&mb, &r.id, &agent, None, &mut || false)? {
        Waited::Outcome(o) => print_outcome(out, &r, &o),
        Waited::Stopped => Ok(ExitCode::from(1)),
    }
}

pub(crate) fn answer(root: &Path, args: AnswerArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let by = match args.from {
        Some(f) => f,
        None => std::env::var("USER")
            .ok()
            .filter(|u| sigbox::asks::person_problem(u).is_none())
            .unwrap_or_else(|| "person".to_string()),
    };
    let mb = super::open(root)?;
    let asks = Asks::new(&mb);
    let p = match asks.answer_anywhere(&args.id, &args.choice, args.message.as_deref(), &by)? {
        AnswerAnywhere::Recorded(o) => return print_answer(out, &args.id, &o, None),
        AnswerAnywhere::Refused(refusal) => return Err(anyhow::anyhow!("{refusal}")),
        AnswerAnywhere::Proposed(p) => p,
    };
    // Asked on another host, which decides (spec/asks.md §8): the proposal is durable here;
    // the bridge carries it there and brings the outcome back.
    let until = Instant::now() + args.wait;
    let waited = sigbox_client::wait_outcome(
        &mb,
        &p.id,
        &by,
        Some(Duration::from_millis(250)),
        &mut || Instant::now() >= until,
    )?;
    match waited {
        Waited::Outcome(o) => match asks.proposal_status(&p)? {
            ProposalStatus::Won => print_answer(out, &args.id, &o, Some(&p.home)),
            _ => {
                let r = asks.request_checked(&p.id)?;
                Err(anyhow::anyhow!("{}", Refusal::of(&r, o)))
            }
        },
        Waited::Stopped => anyhow::bail!(
            "{}: proposed {:?} to host {}, where it was asked and which decides; no outcome came \
             back within {:?} (is the bridge running on both hosts?): it may still be taken, \
             `sigbox asks --all` shows it when it comes",
            p.id,
            p.choice,
            p.home,
            args.wait
        ),
    }
}

/// Prints the one answer `answer` gave (exit 0); an expiry is an error.
fn print_answer(
    out: &mut Out,
    id: &str,
    o: &Outcome,
    decided_on: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let Outcome::Answered(a) = o else {
        anyhow::bail!("{id}: expired with no answer");
    };
    let mut v = json!({"id": id, "choice": a.choice, "message": a.message,
                       "answered_by": a.by, "answered_at": instant(a.at)});
    if let Some(h) = decided_on {
        v["decided_on"] = json!(h);
    }
    out.emit(&v, || match decided_on {
        Some(h) => format!(
            "{id}: answered {} by {} (taken on host {h})",
            a.choice, a.by
        ),
        None => format!("{id}: answered {} by {}", a.choice, a.by),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// One request as `asks` and `log` show it.
fn state_json(s: &AskState, now: chrono::DateTime<Utc>) -> Value {
    let r = &s.request;
    let (choice, message, by, at) = match &s.outcome {
        Some(Outcome::Answered(a)) => (
            Some(a.choice.clone()),
            a.message.clone(),
            Some(a.by.clone()),
            Some(instant(a.at)),
        ),
        _ => (None, None, None, None),
    };
    json!({
        "id": r.id, "from": r.from, "to": r.to, "message": r.message, "choices": r.choices,
        "asked_at": instant(r.asked_at), "deadline": r.deadline.map(instant),
        "status": s.status(now).as_str(), "choice": choice, "answer_message": message,
        "answered_by": by, "answered_at": at,
        "took_ms": s.outcome.as_ref().and_then(|o| took_ms(r, o)),
        "context": r.context, "path": path_json(&s.path), "home": s.home,
        "proposals": s.proposals.iter().map(|(p, st)| json!({
            "proposal": p.proposal, "choice": p.choice, "message": p.message,
            "answered_by": p.by, "proposed_at": instant(p.at), "status": st.as_str(),
        })).collect::<Vec<_>>(),
    })
}

fn state_human(s: &AskState, now: chrono::DateTime<Utc>) -> String {
    let r = &s.request;
    let mut line = format!(
        "{}  {:<8} {} -> {}  asked {}  deadline {}  [{}]  {}",
        r.id,
        s.status(now).as_str(),
        r.from,
        r.to.as_deref().unwrap_or("anyone"),
        instant(r.asked_at),
        r.deadline.map(instant).unwrap_or_else(|| "none".into()),
        r.choices.join(","),
        r.message
    );
    if let Some(Outcome::Answered(a)) = &s.outcome {
        line.push_str(&format!(
            "  => {} by {} at {}",
            a.choice,
            a.by,
            instant(a.at)
        ));
    }
    if let Some(h) = &s.home {
        line.push_str(&format!("  (asked on {h})"));
    }
    for (p, st) in &s.proposals {
        line.push_str(&format!(
            "  proposed {} by {}: {}",
            p.choice,
            p.by,
            st.as_str()
        ));
    }
    escape(&line).into_owned()
}

pub(crate) fn list(root: &Path, all: bool, out: &mut Out) -> anyhow::Result<ExitCode> {
    let mb = super::open(root)?;
    let listing = Asks::new(&mb).list()?;
    let now = Utc::now();
    for s in &listing.requests {
        if all || s.status(now) == Status::Open {
            out.emit(&state_json(s, now), || state_human(s, now))?;
        }
    }
    if all {
        for (path, why) in &listing.invalid {
            out.emit(
                &json!({"id": null, "status": "invalid", "path": path_json(path), "reason": why}),
                || escape(&format!("{}  invalid  {why}", path.display())).into_owned(),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The requests, after the signal records of `log`: each with its outcome, who answered,
/// when, and how long it took.
pub(crate) fn log(root: &Path, out: &mut Out) -> anyhow::Result<()> {
    let mb = super::open(root)?;
    let listing = Asks::new(&mb).list()?;
    let now = Utc::now();
    for s in &listing.requests {
        let mut v = state_json(s, now);
        v["kind"] = json!("ask");
        out.emit(&v, || {
            let r = &s.request;
            let what = match &s.outcome {
                Some(Outcome::Answered(a)) => format!(
                    "answered {} by {} at {} after {:.1} s",
                    a.choice,
                    a.by,
                    instant(a.at),
                    took_ms(
                        r,
                        s.outcome.as_ref().unwrap_or(&Outcome::Answered(a.clone()))
                    )
                    .unwrap_or(0) as f64
                        / 1000.0
                ),
                Some(Outcome::Expired { at, .. }) => format!("expired at {}", instant(*at)),
                None => s.status(now).as_str().to_string(),
            };
            escape(&format!(
                "{}  {:<12} ask                {}  {}: {}",
                instant(r.asked_at),
                r.from,
                r.id,
                r.message,
                what
            ))
            .into_owned()
        })?;
    }
    Ok(())
}
