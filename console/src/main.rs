//! `sigbox-ui`: the console, one live page for a person beside their agents (spec/console.md).
//! Serves every `--root` as a web page and a small JSON API: what waits for whom, broadcasts
//! and their acks, the quarantine, the bridge, open approval requests, a drawn timeline; and
//! sending STEER, INFO, PAUSE, RESUME and ABORT, and answering requests.
//!
//! | module | owns |
//! |---|---|
//! | `app` | the state every handler shares |
//! | `asks` | approval requests: the state's `asks`, answering them |
//! | `auth` | the token, `Host`, `Origin`, the security headers |
//! | `events` | filesystem events and presence as changes |
//! | `ids` | ids in a request's path |
//! | `send` | `/api/send`, with `sigbox send`'s checks and words |
//! | `state` | `/api/state` |
//! | `routes` | the routes, the page's files |

mod app;
mod asks;
mod auth;
mod events;
mod http;
mod ids;
mod routes;
mod send;
mod show;
mod state;

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use crate::app::{Console, Root};

/// A live web console for sigbox mailboxes.
#[derive(Debug, Parser)]
#[command(name = "sigbox-ui", version)]
#[command(after_help = "Examples:
  sigbox ui --root /srv/signals
  sigbox-ui --root a/signals --root b/signals --listen 127.0.0.1:8700
The first line on stdout is the address to open, with its access token.
See spec/console.md.")]
struct Args {
    /// A mailbox root to serve; repeat for several [env: SIGBOX_ROOT] [default: signals].
    #[arg(long, value_name = "ROOT")]
    root: Vec<PathBuf>,
    /// How long a dropped file must be unchanged before it is read (spec/mailbox.md §5): a
    /// number and its unit (250ms, 2s), or 0 [env: SIGBOX_SETTLE] [default: 2s].
    #[arg(long, value_parser = sigbox_client::parse_settle)]
    settle: Option<Duration>,
    /// The address and port to listen on; port 0 takes a free one. Anything but a loopback
    /// address lets other machines reach the console (a warning says so).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Another name the console answers to as `Host` (a host name of this machine, when it
    /// listens on another address than loopback); repeatable.
    #[arg(long, value_name = "NAME")]
    allow_host: Vec<String>,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let line = format!("{e:#}").replace('\n', " ");
            let _ = writeln!(
                std::io::stderr(),
                "sigbox-ui: {}",
                sigbox_client::logfmt::escape_controls(&line)
            );
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .fmt_fields(sigbox_client::logfmt::text_fields())
        .init();
    let settle = sigbox_client::settle_from(args.settle).map_err(anyhow::Error::msg)?;
    let durability = sigbox_client::durability_from(None).map_err(anyhow::Error::msg)?;
    let mut opts = sigbox::MailboxOptions::new();
    opts.settle(settle).durability(durability);
    let paths = if args.root.is_empty() {
        vec![sigbox_client::root_from(None).map_err(anyhow::Error::msg)?]
    } else {
        args.root.clone()
    };
    let mut roots = Vec::new();
    let mut watched = Vec::new();
    for p in &paths {
        let mb = opts.open(p)?;
        let real = std::fs::canonicalize(p)
            .map_err(|e| anyhow::anyhow!("{}: cannot resolve: {e}", p.display()))?;
        watched.push(real);
        roots.push(Root {
            path: p.clone(),
            mb: Arc::new(mb),
            opts: opts.clone(),
        });
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve(args, roots, watched))
}

async fn serve(args: Args, roots: Vec<Root>, watched: Vec<PathBuf>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("--listen {}: cannot listen: {e}", args.listen))?;
    let listen = listener.local_addr()?;
    let ip = listen.ip();
    if !ip.is_loopback() {
        eprintln!(
            "sigbox-ui: WARNING: listening on {listen}, which other machines can reach: anyone \
             with the token can steer these agents, and the traffic is not encrypted (plain \
             HTTP). Prefer the default, 127.0.0.1, with an SSH tunnel."
        );
    }
    let port = listen.port();
    let mut hosts = vec![host_of(ip, port)];
    if ip.is_loopback() || ip.is_unspecified() {
        hosts.push(format!("localhost:{port}"));
    }
    if ip.is_unspecified() {
        hosts.push(host_of(IpAddr::from([127, 0, 0, 1]), port));
    }
    for h in &args.allow_host {
        hosts.push(format!("{}:{port}", h.to_ascii_lowercase()));
    }
    let shown_ip = if ip.is_unspecified() {
        IpAddr::from([127, 0, 0, 1])
    } else {
        ip
    };
    let (tx, _) = tokio::sync::broadcast::channel(4096);
    let mailboxes = roots.iter().map(|r| r.mb.clone()).collect();
    let _watches = events::watch(&watched, mailboxes, tx.clone())?;
    let console = Arc::new(Console {
        roots,
        token: auth::new_token()?,
        listen,
        hosts,
        any_ip: ip.is_unspecified(),
        cookie: format!("sigbox_console_{port}"),
        changes: tx,
    });
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "http://{}/?token={}",
            host_of(shown_ip, port),
            console.token
        )?;
        out.flush()?;
    }
    for r in &console.roots {
        eprintln!("sigbox-ui: serving {}", r.path.display());
    }
    axum::serve(listener, routes::router(console)).await?;
    Ok(())
}

/// `ip:port` as a `Host` header writes it (an IPv6 address in brackets), in lower case.
fn host_of(ip: IpAddr, port: u16) -> String {
    SocketAddr::new(ip, port).to_string().to_ascii_lowercase()
}
