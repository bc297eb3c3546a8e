//! `sigbox flux ...` and `sigbox pilot ...`: the stream dialects' parsers on a file or stdin.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;
use sigbox::flux::{self, FluxParser};
use sigbox::pilot::{PilotEvent, PilotParser, PilotSummary, phase_progress};

use crate::cli::{FluxCmd, PilotCmd};
use crate::output::Out;

/// Reads `file` (or stdin for `None`/`-`) in chunks, as a stream.
fn for_each_chunk(
    file: Option<&Path>,
    mut f: impl FnMut(&[u8]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut reader: Box<dyn Read> = match file {
        None => Box::new(std::io::stdin().lock()),
        Some(p) if p == Path::new("-") => Box::new(std::io::stdin().lock()),
        Some(p) => Box::new(std::fs::File::open(p).with_context(|| format!("{}", p.display()))?),
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let name = file.map_or("stdin".into(), |p| p.display().to_string());
                return Err(anyhow::Error::new(e).context(name));
            }
        };
        f(&buf[..n])?;
    }
}

/// The largest result document read.
const MAX_DOCUMENT: u64 = 16 * 1024 * 1024;

/// Reads a document the user names: a regular file (symlinks to one are fine: the path is the
/// user's own), opened without blocking, so that a FIFO or device is refused instead of hanging.
pub(crate) fn read_document(path: &Path) -> std::io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket, device or directory)",
        ));
    }
    if meta.len() > MAX_DOCUMENT {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} bytes, over the {MAX_DOCUMENT} byte cap", meta.len()),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_DOCUMENT + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

pub(crate) fn flux(cmd: FluxCmd, out: &mut Out) -> anyhow::Result<ExitCode> {
    match cmd {
        FluxCmd::Parse { file } => {
            // Exit 1 when a `flux:signal` line was not a valid signal (each is printed as an
            // error event), as `flux result` does for an invalid document.
            let mut p = FluxParser::default();
            let mut invalid = 0usize;
            let mut print = |e: &sigbox::flux::FluxEvent, out: &mut Out| {
                if !matches!(e, sigbox::flux::FluxEvent::Signal(_)) {
                    invalid += 1;
                }
                out.line(&e.to_json().to_string())
            };
            for_each_chunk(file.as_deref(), |chunk| {
                for e in p.feed(chunk) {
                    print(&e, out)?;
                }
                Ok(())
            })?;
            for e in p.finish() {
                print(&e, out)?;
            }
            Ok(if invalid == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        FluxCmd::Result { path } => {
            let bytes = read_document(&path)
                .with_context(|| format!("{}: cannot read the result document", path.display()))?;
            let r = flux::validate_result(&bytes);
            out.line(&r.to_json().to_string())?;
            Ok(if r.valid {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

pub(crate) fn pilot(cmd: PilotCmd, out: &mut Out) -> anyhow::Result<ExitCode> {
    let PilotCmd::Parse { file } = cmd;
    let mut p = PilotParser::default();
    let mut summary = PilotSummary::default();
    let mut warnings = Vec::new();
    let mut fold = |events: Vec<PilotEvent>, summary: &mut PilotSummary| {
        for e in events {
            summary.update(&e);
            if let PilotEvent::Warning { line, message } = e {
                warnings.push((line, message));
            }
        }
    };
    for_each_chunk(file.as_deref(), |chunk| {
        fold(p.feed(chunk), &mut summary);
        Ok(())
    })?;
    fold(p.finish(), &mut summary);
    if out.json() {
        let mut v = summary.to_json();
        v["warning_details"] = json!(
            warnings
                .iter()
                .map(|(l, m)| json!({"line": l, "message": m}))
                .collect::<Vec<_>>()
        );
        out.line(&v.to_string())?;
    } else {
        out.line(&format!("signals: {}", summary.signals))?;
        out.line(&match summary.progress {
            -1 => "progress: none (no status signal)".to_string(),
            p => format!("progress: {p}%"),
        })?;
        out.line(
            &match (summary.phase.as_str(), phase_progress(&summary.phase)) {
                ("", _) => "phase: none".to_string(),
                (ph, Some(pp)) => format!("phase: {ph} ({pp}%)"),
                (ph, None) => format!("phase: {ph}"),
            },
        )?;
        out.line(&format!(
            "exit: {}",
            match (summary.exit, summary.success) {
                (false, _) => "no",
                (true, Some(true)) => "yes (success)",
                (true, Some(false)) => "yes (failure)",
                (true, None) => "yes",
            }
        ))?;
        for (l, m) in &warnings {
            out.line(&format!("warning: line {l}: {m}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
