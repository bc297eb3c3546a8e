//! `sigbox`: the command line for people and for agents that run shell commands.
//!
//! Exit codes: 0 success (an empty poll is a success), 1 a `wait` that timed out (and `doctor`
//! when it found problems), 2 an error, reported as one line on stderr naming the file and the
//! reason.

mod cli;
mod cmd;
mod output;
mod quick;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::CommandFactory;
use clap::Parser;

use crate::cli::{Cli, Command};
use crate::output::Out;

fn main() -> ExitCode {
    let args = cmd::ui::args_os();
    // The plain forms a checkpoint runs on every call, read without building clap's tree.
    let cli = match quick::parse(&args).map_or_else(|| Cli::try_parse_from(args), Ok) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let json = cli.json;
    // The options the environment gives when the command line does not: refused as a command
    // line is (a hook answers nothing).
    let options = sigbox_client::root_from(cli.root.clone()).and_then(|root| {
        let settle = sigbox_client::settle_from(cli.settle)?;
        Ok((
            root,
            settle,
            sigbox_client::durability_from(cli.durability.as_deref())?,
        ))
    });
    let (root, settle, durability) = match options {
        Ok(o) => o,
        Err(why) => return refused(json, &why),
    };
    cmd::set_options(settle, durability);
    match run(cli, root, settle) {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            let line = format!("{err:#}").replace('\n', " ");
            report_error(json, &line, error_path(&err).as_deref());
            ExitCode::from(2)
        }
    }
}

/// Writes an error to stderr: `sigbox: <reason>` on one line, or under `--json` one JSON
/// object `{"error": reason, "path": file or null, "exit": 2}` (spec/cli.md).
fn report_error(json: bool, line: &str, path: Option<&std::path::Path>) {
    let text = if json {
        serde_json::json!({
            "error": line,
            "path": path.map(output::path_json),
            "exit": 2,
        })
        .to_string()
    } else {
        format!("sigbox: {}", output::escape(line))
    };
    let _ = writeln!(io::stderr(), "{text}");
}

/// The file an error names: the library's, or else the path every CLI message starts with
/// (`<file>: <reason>`), when that prefix looks like one (it has a `/`, or it exists).
fn error_path(err: &anyhow::Error) -> Option<std::path::PathBuf> {
    if let Some(p) = err
        .chain()
        .find_map(|e| e.downcast_ref::<sigbox::Error>())
        .and_then(sigbox::Error::path)
    {
        return Some(p.to_path_buf());
    }
    let text = err.to_string();
    let (prefix, _) = text.split_once(": ")?;
    let p = std::path::Path::new(prefix);
    (!prefix.is_empty()
        && !prefix.contains(char::is_control)
        && (prefix.contains('/') || p.symlink_metadata().is_ok()))
    .then(|| p.to_path_buf())
}

/// A command line clap refused: help and version print as usual (exit 0); a usage error is
/// clap's message and exit 2, or under `--json` the JSON error object.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let wants_json = std::env::args_os().any(|a| a == "--json");
    let shown = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if !shown && hook_forgives() {
        return hook_skipped(wants_json, &clap_line(&e));
    }
    if !wants_json || shown {
        e.exit();
    }
    report_error(true, &clap_line(&e), None);
    ExitCode::from(2)
}

/// A command line whose options the environment gave badly (`SIGBOX_ROOT` empty,
/// `SIGBOX_SETTLE` refused): one line naming the variable, exit 2, or a hook that answers
/// nothing.
fn refused(json: bool, why: &str) -> ExitCode {
    if hook_forgives() {
        return hook_skipped(json, why);
    }
    report_error(json, why, None);
    ExitCode::from(2)
}

/// True for a `hook` without `--strict`: a hook never breaks the agent (spec/hooks.md), so a
/// command line this version refuses (written by another version, a bad `SIGBOX_SETTLE`)
/// answers nothing, exit 0.
fn hook_forgives() -> bool {
    is_hook() && !std::env::args_os().any(|a| a == "--strict")
}

/// Says why the hook answered nothing; exit 0.
fn hook_skipped(json: bool, why: &str) -> ExitCode {
    cmd::set_json(json);
    cmd::mailbox::warn_line(
        &serde_json::json!({"event": "hook_skipped", "reason": why}),
        &format!("hook: {why}"),
    );
    ExitCode::SUCCESS
}

/// clap's message without its usage and help hints, on one line.
fn clap_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let said: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect();
    let line = said.join(" ");
    let line = line.trim_start_matches("error: ");
    if line.is_empty() {
        "invalid command line".to_string()
    } else {
        line.to_string()
    }
}

/// True when the command line's subcommand is `hook` (the first word that is not a global
/// option or its value).
fn is_hook() -> bool {
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        let a = a.to_string_lossy();
        match a.as_ref() {
            "--root" | "--settle" | "--durability" => {
                args.next();
            }
            "--json" | "--verbose" => {}
            a if a.starts_with("--root=")
                || a.starts_with("--settle=")
                || a.starts_with("--durability=") => {}
            a if a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| c == 'v') => {}
            a => return a == "hook",
        }
    }
    false
}

/// Routes the parsed command line to its command.
fn run(
    cli: Cli,
    root: std::path::PathBuf,
    settle: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    init_tracing(cli.verbose, cli.json);
    cmd::set_verbose(cli.verbose > 0);
    cmd::set_json(cli.json);
    // `tap` writes the child's output from its own threads: it must not run while this thread
    // holds the stdout lock that `Out` keeps.
    if let Command::Tap { name, to, command } = &cli.command {
        return cmd::tap::run(&root, name, to, command, cli.json);
    }
    let root_given = cli.root.is_some();
    let mut out = Out::new(cli.json);
    let code = match cli.command {
        Command::Init { shared } => cmd::mailbox::init(&root, shared, &mut out)?,
        Command::Send(args) => cmd::mailbox::send(&root, args, &mut out)?,
        Command::Poll(args) => cmd::mailbox::poll(&root, &args, &mut out)?,
        Command::Wait(args) => cmd::mailbox::wait(&root, args, &mut out)?,
        Command::Ls { all } => cmd::mailbox::ls(&root, all, &mut out)?,
        Command::Log => {
            // The requests are listed also when a record could not be read (said, exit 2).
            let code = cmd::mailbox::log(&root, &mut out);
            cmd::asks::log(&root, &mut out)?;
            code?
        }
        Command::Ask(args) => cmd::asks::ask(&root, args, &mut out)?,
        Command::Answer(args) => cmd::asks::answer(&root, args, &mut out)?,
        Command::Asks { all } => cmd::asks::list(&root, all, &mut out)?,
        Command::Finish { agent } => cmd::mailbox::finish(&root, &agent, &mut out)?,
        Command::Gc {
            older_than,
            limit,
            rejected,
        } => cmd::mailbox::gc(&root, older_than, limit, rejected, &mut out)?,
        Command::Doctor => cmd::mailbox::doctor(&root, &mut out)?,
        Command::Completions { shell } => {
            // Generated whole, then written: a closed pipe (`| head`) is then an error that ends
            // quietly instead of a panic inside the generator.
            let mut grammar = Cli::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut grammar, "sigbox", &mut script);
            out.write_all(&script)?;
            ExitCode::SUCCESS
        }
        Command::Demo { keep } => cmd::demo::run(keep, &mut out)?,
        Command::Hook(args) => {
            // The hook writes its answer itself, once, after the pass.
            drop(out);
            return hook(&root, &args);
        }
        Command::Hooks(c) => cmd::hooks::run(&root, c, &mut out)?,
        Command::Mcp {
            agent,
            state,
            channel,
        } => {
            drop(out);
            return cmd::launch::exec_mcp(&root, &agent, state.as_deref(), channel, settle);
        }
        Command::Bridge { args } => {
            drop(out);
            return cmd::launch::exec_bridge(&root, &args, settle);
        }
        Command::Ui { args } => {
            drop(out);
            return cmd::ui::exec(&root, root_given, &args, settle);
        }
        Command::Goblin(c) => cmd::goblin::run(c, &mut out)?,
        Command::Mux(c) => cmd::mux::run(c, &mut out)?,
        Command::Flux(c) => cmd::streams::flux(c, &mut out)?,
        Command::Pilot(c) => cmd::streams::pilot(c, &mut out)?,
        Command::Tap { .. } => unreachable!("handled above"),
    };
    out.flush()?;
    Ok(code)
}

/// `sigbox hook`: a panic (said on stderr by the panic hook) answers nothing, exit 0, as
/// every other reason does (exit 2 with `--strict`); what the call claimed and did not hand
/// over comes again, marked, at the agent's next call.
fn hook(root: &std::path::Path, args: &cli::HookArgs) -> anyhow::Result<ExitCode> {
    let strict = args.strict;
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cmd::hook::run(root, args))) {
        Ok(done) => done,
        Err(_) if strict => anyhow::bail!("hook: an internal error (said above)"),
        Err(_) => Ok(ExitCode::SUCCESS),
    }
}

/// Logging on stderr: `-v` and `RUST_LOG` choose how much; under `--json`, one JSON object per
/// line like everything else there (values escaped by JSON, a path a plain string), else text
/// whose values are written with their control characters escaped.
fn init_tracing(verbose: u8, json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => EnvFilter::new(v),
        _ => EnvFilter::new(match verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }),
    };
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_target(false);
    if json {
        fmt.json().flatten_event(true).init();
    } else {
        fmt.with_ansi(std::io::IsTerminal::is_terminal(&io::stderr()))
            .compact()
            .fmt_fields(sigbox_client::logfmt::text_fields())
            .init();
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
