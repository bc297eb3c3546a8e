//! `sigbox`: the command line for people and for agents that run shell commands.
//!
//! Exit codes: 0 success (an empty poll is a success), 1 a `wait` that timed out (and `doctor`
//! when it found problems), 2 an error, reported as one line on stderr naming the file and the
//! reason.

mod cli;
mod dialect_cmds;
mod mailbox_cmds;
mod output;
mod stream_cmds;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            let line = format!("{err:#}").replace('\n', " ");
            let _ = writeln!(io::stderr(), "sigbox: {line}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = cli::Cli::parse();
    init_tracing(cli.verbose);
    mailbox_cmds::dispatch(cli)
}

fn init_tracing(verbose: u8) {
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
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&io::stderr()))
        .with_target(false)
        .compact()
        .init();
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
