//! `sigbox-bridge`: joins the mailbox at a root to a NATS JetStream stream, so that mailboxes
//! on several hosts behave as one (spec/bridge.md). `sigbox bridge` runs it.
//!
//! - `run.rs`: the long-running bridge: starts its tasks, stops them.
//! - `shared.rs`: what the tasks share: the bridge, its counts, the holds.
//! - `streams.rs`: the streams and the hosts bucket, made when missing.
//! - `export.rs`: the exporter.
//! - `import.rs`: the importers.
//! - `acks.rs`: the sharing of this host's broadcast acks with the other hosts.
//! - `asks.rs`: requests to a person across hosts (their stream, export and import).
//! - `presence.rs`: which agents are here; importers started and stopped; hand-offs.
//! - `state.rs`: the state writer (`bridge/state.json`, this host's entry in the bucket).
//! - `hosts.rs`: the hosts bucket: this host's entry, each agent's host.
//! - `names.rs`: streams, subjects and consumers, named once.
//! - `status.rs`: `sigbox bridge status`.

mod acks;
mod asks;
mod export;
mod hosts;
mod import;
mod names;
mod presence;
mod run;
mod shared;
mod state;
mod status;
mod streams;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use sigbox_client::{parse_duration, parse_settle};

/// Joins the mailbox at --root to a NATS JetStream server, so that mailboxes on several hosts
/// behave as one: signals no agent here can take are published to the stream; signals for
/// the agents present here (and broadcasts, and the orchestrator's signals where it runs) are
/// written into this mailbox. See spec/bridge.md.
#[derive(Parser, Debug)]
#[command(
    name = "sigbox bridge",
    version,
    after_help = "Examples:\n  sigbox bridge --nats nats://10.0.0.5:4222 --root /srv/signals --mailbox pipeline\n  sigbox bridge --root /srv/signals status"
)]
pub(crate) struct Cli {
    /// The mailbox root [env: SIGBOX_ROOT] [default: signals]; the option wins over the
    /// variable.
    #[arg(long = "root", value_name = "ROOT", global = true)]
    root_flag: Option<PathBuf>,
    /// The mailbox root in force: `--root`, else `SIGBOX_ROOT`, else `signals`.
    #[arg(skip)]
    pub(crate) root: PathBuf,
    /// The NATS server (or several, comma-separated), e.g. nats://127.0.0.1:4222.
    #[arg(long, env = "SIGBOX_NATS", global = true)]
    pub(crate) nats: Option<String>,
    /// The mailbox's name in the stream: bridges with the same name form one mailbox
    /// (default: `default`; `status` takes the one the bridge of this root ran with).
    #[arg(long, env = "SIGBOX_MAILBOX", global = true)]
    pub(crate) mailbox: Option<String>,
    /// This host's name among the bridges (default: the system's host name).
    #[arg(long, env = "SIGBOX_HOST")]
    pub(crate) host: Option<String>,
    /// How long an agent that took its presence here (a poll, a wait, a hook) stays this
    /// host's after its handle ends, unless it is present on another host meanwhile.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub(crate) linger: Duration,
    /// Replicas of the streams when this bridge creates them (1, or 3 on a three-node cluster).
    #[arg(long, default_value_t = 1)]
    pub(crate) replicas: usize,
    /// How long the server waits for an import's acknowledgement before delivering it again.
    #[arg(long, default_value = "10s", value_parser = parse_nats_duration)]
    pub(crate) ack_wait: Duration,
    /// The stream's de-duplication window (by signal id) when this bridge creates it.
    #[arg(long, default_value = "24h", value_parser = parse_nats_duration)]
    pub(crate) dedup_window: Duration,
    /// How long broadcasts stay in the stream for hosts that join later.
    #[arg(long, default_value = "168h", value_parser = parse_nats_duration)]
    pub(crate) broadcast_age: Duration,
    /// The settle window for files written in place (as every sigbox command takes it).
    /// [env: SIGBOX_SETTLE] [default: 2s]; the option wins over the variable.
    #[arg(long = "settle", value_name = "SETTLE", value_parser = parse_settle, global = true)]
    settle_flag: Option<Duration>,
    /// The settle window in force: `--settle`, else `SIGBOX_SETTLE`, else 2 s.
    #[arg(skip)]
    pub(crate) settle: Duration,
    /// `SIGBOX_DURABILITY`: durable (the default), or relaxed (no fsync: no crash guarantee).
    #[arg(skip)]
    pub(crate) durability: sigbox::Durability,
    /// More logging on stderr (-v: progress, -vv: every signal). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Shows this host's bridge (running, counts, outbox) and, with a server, every host's
    /// presence and the lag of each consumer.
    #[command(
        after_help = "Examples:\n  sigbox bridge --root /srv/signals status\n  sigbox bridge --root /srv/signals --nats nats://10.0.0.5:4222 status --json\nSee spec/bridge.md."
    )]
    Status {
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// A duration the NATS server keeps (in nanoseconds, at most `i64::MAX`: 292 years): as every
/// sigbox duration reads it, one too long to send saturating at that, as good as for ever.
fn parse_nats_duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map(|d| d.min(Duration::from_nanos(i64::MAX as u64)))
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    let options = sigbox_client::root_from(cli.root_flag.take()).and_then(|root| {
        let settle = sigbox_client::settle_from(cli.settle_flag.take())?;
        Ok((root, settle, sigbox_client::durability_from(None)?))
    });
    match options {
        Ok((root, settle, durability)) => {
            (cli.root, cli.settle, cli.durability) = (root, settle, durability)
        }
        Err(why) => {
            eprintln!("sigbox bridge: {why}");
            return ExitCode::from(2);
        }
    }
    init_tracing(cli.verbose);
    let result = match &cli.command {
        Some(Command::Status { json }) => status::run(&cli, *json),
        None => run::run(&cli),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sigbox bridge: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Logging on stderr: `-v` and `RUST_LOG` choose how much.
fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => EnvFilter::new(v),
        _ => EnvFilter::new(match verbose {
            0 => "warn",
            1 => "info",
            _ => "debug",
        }),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .fmt_fields(sigbox_client::logfmt::text_fields())
        .init();
}
