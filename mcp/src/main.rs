//! `sigbox-mcp --as AGENT`: the mailbox as a Model Context Protocol server over stdio, on the
//! official Rust SDK (`rmcp`). Four tools: `check`, `wait`, `send`, `status` (spec/mcp.md).
//!
//! The server holds the agent's presence while it lives (the orchestrator leaves its signals in
//! `inputs/` instead of buffering them), and releases it when it exits. Signals a tool returned
//! are acknowledged by the next tool call, or when the client closes the connection with no
//! call running once stdout shows that it read the answers ([`answers_read`](stdio::answers_read)); otherwise, or
//! when the server dies first, its successor's first call gives them again, marked as
//! redeliveries (spec/mailbox.md §9.2, spec/mcp.md "Delivery").
//!
//! - `main.rs`: the arguments; the server started, and what is acknowledged when it ends.
//! - `server.rs`: the tools and what the server tracks between calls.
//! - `wire.rs`: what the tools take and return, and their output schemas.
//! - `stdio.rs`: stdin noting the client's close; stdout telling what was read.
//! - `channel.rs`: `--channel`, signals pushed as they arrive.

mod channel;
mod server;
mod stdio;
mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Parser;

use crate::channel::push_channel;
use crate::server::Server;
use crate::stdio::{CLOSE_GRACE, Input, Output, answers_read};
use rmcp::ServiceExt;
use sigbox_client::Checkpoint;

/// The mailbox as an MCP server for one agent, over stdio.
#[derive(Debug, Parser)]
#[command(name = "sigbox-mcp", version)]
struct Args {
    /// The agent this server checks in for.
    #[arg(long = "as")]
    agent: String,
    /// Mailbox root directory [env: SIGBOX_ROOT] [default: signals]; the option wins over
    /// the variable.
    #[arg(long)]
    root: Option<PathBuf>,
    /// The agent's state (the orchestrator's approval states admit APPROVE and SKIP).
    #[arg(long)]
    state: Option<String>,
    /// How long a dropped file must be unchanged before it is read (spec/mailbox.md §5): a
    /// number and its unit (250ms, 2s), or 0 [env: SIGBOX_SETTLE] [default: 2s]; the option
    /// wins over the variable.
    #[arg(long, value_parser = sigbox_client::parse_settle)]
    settle: Option<Duration>,
    /// Push each signal into the session as it arrives, as a Claude Code channel
    /// (`notifications/claude/channel`, experimental capability `claude/channel`).
    #[arg(long)]
    channel: bool,
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line naming the file and the reason, as the `sigbox` CLI says it; exit 2.
            let line = format!("{e:#}").replace('\n', " ");
            eprintln!("sigbox-mcp: {line}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    // stdout is the protocol: logs go to stderr, warnings only unless RUST_LOG says more.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .fmt_fields(sigbox_client::logfmt::text_fields())
        .init();
    let agent = args.agent.trim().to_string();
    if let Some(why) = sigbox::agent_name_problem(&agent) {
        anyhow::bail!(
            "invalid agent name {} (--as): {why}",
            sigbox::quoted_name(&agent)
        );
    }
    let root = sigbox_client::root_from(args.root.clone()).map_err(anyhow::Error::msg)?;
    let settle = sigbox_client::settle_from(args.settle).map_err(anyhow::Error::msg)?;
    let durability = sigbox_client::durability_from(None).map_err(anyhow::Error::msg)?;
    let mut opts = sigbox::MailboxOptions::new();
    opts.settle(settle).durability(durability);
    let mut cp =
        Checkpoint::with_options(&opts, &root, &agent).map_err(|e| anyhow::anyhow!("{e}"))?;
    cp.state(args.state.as_deref());
    // The channel's own handle: its claims are exclusive with the tools' (one rename each).
    let pusher = if args.channel {
        let mut p =
            Checkpoint::with_options(&opts, &root, &agent).map_err(|e| anyhow::anyhow!("{e}"))?;
        p.state(args.state.as_deref());
        Some(p)
    } else {
        None
    };
    let asks_mailbox = opts.open(&root).map_err(|e| anyhow::anyhow!("{e}"))?;
    let server = Server::new(cp, asks_mailbox, agent, args.channel);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let service = server
            .clone()
            .serve({
                let (read, write) = rmcp::transport::stdio_pipes();
                (
                    Input {
                        inner: read,
                        closed: Arc::clone(&server.closed),
                        reset: Arc::clone(&server.reset),
                    },
                    Output {
                        inner: write,
                        line: Vec::new(),
                        written: Arc::clone(&server.written),
                    },
                )
            })
            .await
            .map_err(|e| anyhow::anyhow!("MCP initialization failed: {e}"))?;
        if let Some(p) = pusher {
            tokio::spawn(push_channel(service.peer().clone(), p));
        }
        let _ = service.waiting().await;
        anyhow::Ok(())
    })?;
    // The client closed its input. The answers it had not confirmed by calling again are
    // handed over only if no call was running and stdout shows they were read; otherwise the
    // next server gives them again, marked.
    let unreturned = server
        .unreturned
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_empty();
    if server.busy.load(Ordering::SeqCst) == 0
        && unreturned
        && server.unacked.load(Ordering::SeqCst)
    {
        let all_written = {
            let answered = server.answered.lock().unwrap_or_else(|e| e.into_inner());
            let written = server.written.lock().unwrap_or_else(|e| e.into_inner());
            answered
                .iter()
                .all(|(id, _)| written.contains(&stdio::id_key(id)))
        };
        if all_written && !server.reset.load(Ordering::SeqCst) && answers_read(CLOSE_GRACE) {
            let cp = server.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = cp.ack() {
                tracing::warn!(error = %e, "cannot acknowledge the last answers");
            }
        } else {
            tracing::warn!(
                "the client closed the connection without reading the last answers: their \
                 signals come again, marked, at the agent's next checkpoint"
            );
        }
    }
    // Exit without waiting for the blocking pool (a stdin read may still be parked there).
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}
