//! The long-running bridge (spec/bridge.md §3): connects, sets up the streams, learns which
//! agents are here, then runs its tasks until SIGINT or SIGTERM: one exporter (`export.rs`),
//! one importer per consumer this host pulls from (`import.rs`: an agent present here, the
//! orchestrator where it runs, this host's broadcasts), a presence watcher that starts and
//! stops importers (`presence.rs`), and the state writer (`state.rs`).

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use async_nats::jetstream::{self};
use sigbox::MailboxOptions;
use tokio::task::JoinHandle;

use crate::Cli;
use crate::acks::ack_export_loop;
use crate::asks::{asks_export_loop, asks_import_loop};
use crate::export::{export_loop, watch_inputs};
use crate::hosts::Hosts;
use crate::import::import_loop;
use crate::names::{self, Names};
use crate::presence::{look_at_presence, presence_loop};
use crate::shared::{Bridge, Counters, RETRY, lock};
use crate::state::{STATE_EVERY, state_loop, state_of, write_state};
use crate::streams::{Setup, setup};

/// The mailbox's name when `--mailbox` is not given.
pub(crate) const DEFAULT_MAILBOX: &str = "default";

/// Runs the bridge until SIGINT or SIGTERM.
pub(crate) fn run(cli: &Cli) -> Result<ExitCode> {
    let Some(url) = cli.nats.clone() else {
        bail!("--nats URL is needed (or SIGBOX_NATS): the NATS server to join");
    };
    for u in server_list(&url) {
        if let Err(e) = u.parse::<async_nats::ServerAddr>() {
            bail!("--nats {u:?}: not a NATS server address ({e}); e.g. nats://10.0.0.5:4222");
        }
    }
    if server_list(&url).is_empty() {
        bail!("--nats is empty: name the NATS server, e.g. nats://10.0.0.5:4222");
    }
    let names = Names::new(cli.mailbox.as_deref().unwrap_or(DEFAULT_MAILBOX))?;
    let host = names::host_name(cli.host.as_deref())?;
    let mut opts = MailboxOptions::new();
    opts.settle(cli.settle).durability(cli.durability);
    let mb = opts.open(&cli.root)?;
    let Some(_lock) = mb.bridge().lock()? else {
        bail!(
            "{}: another bridge runs on this root (it holds the lock on bridge/)",
            mb.bridge().dir().display()
        );
    };
    // The holds count while this lock is held: the root is a plain mailbox again when the
    // bridge ends.
    let _holds = mb.bridge().hold_lock()?;
    let held: HashSet<String> = mb.bridge().held()?.into_iter().map(|(a, _)| a).collect();
    let counts = Counters::default();
    let mut claimed: HashMap<String, i128> = HashMap::new();
    // Counts run on from where the last bridge on this root left them (its last state, at
    // most a second old when it was killed), and so does what it recorded of each agent's
    // presence here: an agent that lingers here and was taken elsewhere since is not taken
    // back by a bridge that starts again.
    if let Some(last) = mb.bridge().state().ok().flatten() {
        counts.restore(&last.counts);
        for (agent, t) in last.claimed.unwrap_or_default() {
            claimed.insert(agent, i128::from(t));
        }
    }
    let bridge = Arc::new(Bridge {
        mb: Arc::new(mb),
        names,
        host,
        nats: url,
        ack_wait: cli.ack_wait,
        linger: cli.linger,
        counts,
        here: Mutex::default(),
        claimed: Mutex::new(claimed),
        started_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128),
        client: std::sync::OnceLock::new(),
        setup: Setup {
            replicas: cli.replicas,
            dedup_window: cli.dedup_window,
            broadcast_age: cli.broadcast_age,
        },
        fatal: Mutex::default(),
        stop_now: tokio::sync::Notify::new(),
        started: chrono::Utc::now().to_rfc3339(),
        stop: AtomicBool::new(false),
        wake: tokio::sync::Notify::new(),
        watching: AtomicBool::new(false),
        ready: AtomicBool::new(false),
        broadcasts_seen: Arc::default(),
        rounds_begun: AtomicU64::new(0),
        rounds_done: AtomicU64::new(0),
        imported_seq: Mutex::default(),
        pulls_ended: Mutex::default(),
        handed_over: Mutex::default(),
        held: Mutex::new(held),
        arriving: Mutex::default(),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(serve(bridge.clone()))?;
    // The last state, written with the lock still held: not running from here on.
    write_state(&bridge, false);
    Ok(ExitCode::SUCCESS)
}

async fn serve(b: Arc<Bridge>) -> Result<()> {
    tracing::info!(host = %b.host, mailbox = %b.names.mailbox(), nats = %b.nats, root = %b.mb.root().display(), "bridge starting");
    let client = loop {
        match async_nats::ConnectOptions::new()
            .name(format!("sigbox-bridge {}", b.host))
            .connect(server_list(&b.nats))
            .await
        {
            Ok(c) => break c,
            Err(e) => {
                b.counts
                    .error(&format!("cannot connect to the NATS server {}", b.nats), &e);
                write_state(&b, true);
                if wait_or_stop(RETRY * 4).await {
                    return Ok(());
                }
            }
        }
    };
    let _ = b.client.set(client.clone());
    let js = jetstream::new(client);
    let hosts = loop {
        let made = match setup(&js, &b.names, &b.setup).await {
            Ok(kv) => Hosts::open(kv, &b.host, state_of(&b, true).to_value()).await,
            Err(e) => Err(e),
        };
        match made {
            Ok(h) => break Arc::new(h),
            Err(e) if e.to_string().contains("another bridge runs as host") => return Err(e),
            Err(e) => {
                b.counts
                    .error("cannot set up the streams", &format!("{e:#}"));
                write_state(&b, true);
                if wait_or_stop(RETRY * 4).await {
                    return Ok(());
                }
            }
        }
    };
    tracing::info!(host = %b.host, "bridge running");
    // Answers "does this host's bridge run?" while this process lives (spec/bridge.md §5).
    let alive = tokio::spawn(answer_alive(
        b.client.get().cloned(),
        b.names.alive_subject(&b.host),
    ));
    {
        let h = hosts.clone();
        let b = b.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = h.watch_owners().await {
                    b.counts.error("agents' hosts", &format!("{e:#}"));
                }
                tokio::time::sleep(RETRY).await;
            }
        });
    }
    // Nothing is exported before it is known which agents are here: a bridge that starts (or
    // restarts) must not send this host's signals away, nor take another host's agents.
    loop {
        match hosts.load_owners().await {
            Ok(()) => break,
            Err(e) => b.counts.error("agents' hosts", &format!("{e:#}")),
        }
        if wait_or_stop(RETRY).await {
            return Ok(());
        }
    }
    loop {
        // What it records meanwhile is looked at again by the presence loop: an agent held
        // back here and now this host's arrives there.
        if let Some(p) = look_at_presence(&b, &hosts).await {
            *lock(&b.here) = p.here;
            *lock(&b.counts.present) = p.present;
            break;
        }
        if wait_or_stop(RETRY).await {
            return Ok(());
        }
    }
    b.ready.store(true, Ordering::Relaxed);
    watch_inputs(&b);
    let mut tasks: Vec<JoinHandle<()>> = vec![
        tokio::spawn(export_loop(b.clone(), js.clone())),
        tokio::spawn(import_loop(
            b.clone(),
            js.clone(),
            b.names.broadcast_stream(),
            names::host_consumer(&b.host),
            b.names.broadcast_subject(),
            true,
            None,
        )),
        tokio::spawn(ack_export_loop(b.clone(), js.clone())),
        tokio::spawn(import_loop(
            b.clone(),
            js.clone(),
            b.names.broadcast_stream(),
            names::acks_consumer(&b.host),
            b.names.ack_subject(),
            true,
            None,
        )),
    ];
    // Requests to a person: the asker's host decides (spec/asks.md §8).
    tasks.push(tokio::spawn(asks_export_loop(b.clone(), js.clone())));
    tasks.push(tokio::spawn(asks_import_loop(b.clone(), js.clone())));
    let hosts_final = hosts.clone();
    let state_task = tokio::spawn(state_loop(b.clone(), js.clone(), hosts.clone()));
    tasks.push(tokio::spawn(presence_loop(b.clone(), js.clone(), hosts)));
    tokio::select! {
        () = shutdown_signal() => {}
        () = b.stop_now.notified() => {}
    }
    tracing::info!("stopping");
    b.stop.store(true, Ordering::Relaxed);
    // The exporter finishes the round it is in (what it published is marked exported), the
    // others stop where they are: what they had not acknowledged comes again.
    alive.abort();
    let exporter = tasks.remove(0);
    let _ = tokio::time::timeout(Duration::from_secs(10), exporter).await;
    for t in tasks {
        t.abort();
    }
    // The state writer ends at its next turn (it looks at the stop flag), so that no write of
    // its own comes after the last one below.
    if tokio::time::timeout(STATE_EVERY * 3, state_task)
        .await
        .is_err()
    {
        tracing::warn!("the state writer did not end");
    }
    // The other hosts see this one stopped, not silent.
    if lock(&b.fatal).is_none() {
        let last = state_of(&b, false).to_value();
        match tokio::time::timeout(Duration::from_secs(5), hosts_final.publish(last)).await {
            Ok(Ok(())) => tracing::info!("recorded this host stopped"),
            Ok(Err(e)) => tracing::warn!("cannot record this host stopped: {e:#}"),
            Err(_) => tracing::warn!("cannot record this host stopped: no answer within 5 s"),
        }
    }
    match lock(&b.fatal).take() {
        Some(why) => Err(anyhow!(why)),
        None => Ok(()),
    }
}

/// The servers of `--nats`: one URL, or several separated by commas (a cluster's nodes).
pub(crate) fn server_list(urls: &str) -> Vec<String> {
    urls.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .collect()
}

/// Sleeps `d`; true when a stop was asked for meanwhile.
async fn wait_or_stop(d: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => false,
        () = shutdown_signal() => true,
    }
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Answers every request on `subject` (this host's liveness subject) with an empty reply, for
/// as long as the bridge runs; a subscription that cannot be made is retried.
async fn answer_alive(client: Option<async_nats::Client>, subject: String) {
    use futures::StreamExt;
    let Some(client) = client else { return };
    loop {
        match client.subscribe(subject.clone()).await {
            Ok(mut sub) => {
                while let Some(m) = sub.next().await {
                    if let Some(reply) = m.reply {
                        let _ = client.publish(reply, Default::default()).await;
                    }
                }
            }
            Err(e) => tracing::debug!(%subject, "cannot answer liveness requests: {e}"),
        }
        tokio::time::sleep(RETRY).await;
    }
}
