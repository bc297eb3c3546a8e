//! `sigbox mux ...`: write, wait for and verify mux-ospec signal files.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;
use sigbox::mux::{self, MuxFields, MuxFormat, MuxStatus};
use sigbox_client::Waiter;

use crate::cli::{MuxCmd, MuxSignalArgs};
use crate::output::{Out, path_json};

pub(crate) fn run(cmd: MuxCmd, out: &mut Out) -> anyhow::Result<ExitCode> {
    match cmd {
        MuxCmd::Signal(args) => signal(args, out),
        MuxCmd::Check {
            session,
            expected,
            signals_dir,
            timeout,
            require_pass,
            project_root,
        } => {
            let (session, dir) = session_dirs(&project_root, &session, signals_dir.as_deref())?;
            let deadline = sigbox_client::deadline_after(timeout);
            let mut waiter = Waiter::new();
            waiter.poll(Duration::from_millis(200));
            // Watched without recursion and only where a real directory is (a watch follows
            // paths): the session and the directory its signals go to, once it exists.
            let signals = dir.clone().unwrap_or_else(|| session.join(".signals"));
            let real = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
            let mut watching_signals = false;
            let mut told = false;
            loop {
                let want_signals = real(&signals);
                if deadline.is_some()
                    && real(&session)
                    && (!waiter.is_watching() || want_signals != watching_signals)
                {
                    let mut dirs: Vec<(&Path, bool)> = vec![(&session, false)];
                    if want_signals {
                        dirs.push((&signals, false));
                    }
                    match waiter.watch(&dirs) {
                        Ok(()) => watching_signals = want_signals,
                        Err(e) if !told => {
                            told = true;
                            tracing::warn!(
                                "{}",
                                sigbox_client::no_events_reason(&e, Duration::from_millis(200))
                            );
                        }
                        Err(_) => {}
                    }
                }
                waiter.drain();
                let found = mux::find(&session, dir.as_deref())?;
                warn_misplaced(&found);
                let mut report = mux::check(&found, expected, require_pass);
                let arrived = report.complete + report.failed >= expected;
                let now_i = Instant::now();
                let expired = deadline.is_none_or(|d| now_i >= d);
                if arrived || expired {
                    if !arrived && deadline.is_some() {
                        report.status = "timeout";
                    }
                    warn_missing(&session, dir.as_deref());
                    out.line(&mux::check_json(&report).to_string())?;
                    return Ok(if report.status == "complete" {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    });
                }
                waiter.sleep(None, deadline.map(|d| d.saturating_duration_since(now_i)));
            }
        }
        MuxCmd::Verify {
            session,
            action,
            signals_dir,
            project_root,
        } => {
            let (session, dir) = session_dirs(&project_root, &session, signals_dir.as_deref())?;
            warn_missing(&session, dir.as_deref());
            let found = mux::find(&session, dir.as_deref())?;
            warn_misplaced(&found);
            verify(&found, &action, out)
        }
    }
}

/// `signal`: writes the file and prints its path relative to the project root.
fn signal(args: MuxSignalArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let status = if args.status == "success" {
        MuxStatus::Success
    } else {
        MuxStatus::Fail
    };
    let fields = MuxFields {
        path: args.path,
        size: args.size,
        error: args.error,
        trace_id: args.trace_id,
        version: args.version,
        previous: args.previous,
        grade: args.grade,
        phase_num: args.phase_num,
        duration_seconds: args.duration_seconds,
        artifacts: args.artifact,
    };
    let format = if args.format == "kv" {
        MuxFormat::Kv
    } else {
        MuxFormat::Json
    };
    let root = &args.project_root;
    let file = mux::write_signal(root, &args.signal, status, &fields, format)?;
    let shown = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
    out.emit(
        &json!({"path": path_json(&shown), "status": status.as_str()}),
        || shown.display().to_string(),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// A session directory and an optional signals directory, both kept inside the project root.
fn session_dirs(
    root: &Path,
    session: &Path,
    signals_dir: Option<&Path>,
) -> anyhow::Result<(PathBuf, Option<PathBuf>)> {
    let session = mux::resolve(root, session)?;
    let dir = signals_dir.map(|d| mux::resolve(root, d)).transpose()?;
    Ok((session, dir))
}

/// Where the session (or the `--signals-dir` given) is not a directory, upstream's
/// `check-signals.py` and `verify.py` count nothing and say nothing: their output and exit status
/// are kept, and this says why on stderr, since a typo in a session's name must not read as
/// "nothing done yet" in silence.
fn warn_missing(session: &Path, signals_dir: Option<&Path>) {
    let (what, dir) = match signals_dir {
        Some(d) => ("signals directory", d),
        None => ("session directory", session),
    };
    // One line whatever the name holds: a newline in it would forge another.
    let shown = dir.display().to_string().escape_debug().to_string();
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => eprintln!("WARNING: {shown}: not a directory, so no {what}: nothing counted"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("WARNING: {shown}: no such {what}: nothing counted (is the name right?)")
        }
        Err(e) => eprintln!("WARNING: {shown}: the {what} cannot be read ({e}): nothing counted"),
    }
}

fn warn_misplaced(found: &mux::Found) {
    for (p, what) in &found.refused {
        eprintln!(
            "WARNING: {}: {what} under a signal file's name: not read, not counted (a signal \
             file is a regular file)",
            p.display()
        );
    }
    if !found.misplaced.is_empty() {
        let names: Vec<String> = found
            .misplaced
            .iter()
            .map(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        eprintln!(
            "WARNING: Found {} misplaced signal(s) outside .signals/: {names:?}",
            names.len()
        );
    }
}

fn verify(found: &mux::Found, action: &str, out: &mut Out) -> anyhow::Result<ExitCode> {
    let mut malformed: Vec<(PathBuf, String)> = Vec::new();
    let mut read = |p: &Path| match mux::read_record(p) {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("WARNING: malformed signal {}: {e}", p.display());
            malformed.push((p.to_path_buf(), e));
            None
        }
    };
    let done: Vec<_> = found.done.iter().map(|p| (p, read(p))).collect();
    let fails: Vec<(String, String, String)> = found
        .fail
        .iter()
        .map(|p| {
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            match read(p) {
                Some(r) => (
                    name,
                    r.path.unwrap_or_default(),
                    r.error.unwrap_or_else(|| "unknown".into()),
                ),
                None => (name, String::new(), "unknown".into()),
            }
        })
        .collect();
    let paths: Vec<String> = done
        .iter()
        .filter_map(|(_, r)| r.as_ref()?.path.clone())
        .collect();
    let sizes: Vec<(String, u64)> = done
        .iter()
        .filter_map(|(p, r)| {
            let stem = p
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            Some((stem, r.as_ref()?.size?))
        })
        .collect();
    let total: u64 = sizes.iter().map(|(_, s)| s).sum();
    if out.json() {
        let v = json!({
            "completed": found.done.len(),
            "failed": fails.len(),
            "total_size": total,
            "paths": paths,
            "sizes": sizes.iter().map(|(n, s)| json!({"signal": n, "size": s})).collect::<Vec<_>>(),
            "failures": fails.iter().map(|(s, p, e)| json!({"signal": s, "path": p, "error": e})).collect::<Vec<_>>(),
            "malformed": malformed.iter().map(|(p, e)| json!({"file": path_json(p), "reason": e})).collect::<Vec<_>>(),
        });
        out.line(&v.to_string())?;
        return Ok(ExitCode::SUCCESS);
    }
    match action {
        "count" => out.line(&found.done.len().to_string())?,
        "failures" => {
            if fails.is_empty() {
                out.line("No failures")?;
            }
            for (s, _, e) in &fails {
                out.line(&format!("{s}: {e}"))?;
            }
        }
        "paths" => {
            for p in &paths {
                out.line(p)?;
            }
        }
        "sizes" => {
            for (n, s) in &sizes {
                out.line(&format!("{n}: {s}"))?;
            }
        }
        "total-size" => out.line(&total.to_string())?,
        _ => {
            out.line(&format!("completed: {}", found.done.len()))?;
            out.line(&format!("failed: {}", fails.len()))?;
            out.line(&format!("total_size: {total}"))?;
            out.line(&format!("paths: {}", paths.len()))?;
            if !fails.is_empty() {
                out.line("failures:")?;
                for (s, _, e) in &fails {
                    out.line(&format!("  - {s}: {e}"))?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
