//! The long-running bridge (spec/bridge.md §3): one exporter, one importer per consumer this
//! host pulls from (an agent present here, the orchestrator where it runs, this host's
//! broadcasts), a presence watcher that starts and stops importers, and the state writer.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use async_nats::jetstream::{self, AckKind, Context};
use futures::StreamExt as _;
use serde_json::{Value, json};
use sigbox::{Imported, Mailbox, MailboxOptions, Outgoing};
use tokio::task::JoinHandle;

use crate::Cli;
use crate::hosts::Hosts;
use crate::names::{self, Names, header};

/// The mailbox's name when `--mailbox` is not given.
pub(crate) const DEFAULT_MAILBOX: &str = "default";

/// How many signals one export round takes and publishes before waiting for their acks.
const EXPORT_BATCH: usize = 256;
/// Room left for a message's headers under the server's `max_payload`.
const HEADROOM: usize = 1024;
/// How long the exporter sleeps when nothing was waiting and no filesystem events come (a
/// network or FUSE filesystem).
const EXPORT_IDLE: Duration = Duration::from_millis(20);
/// How long the exporter sleeps when nothing was waiting, with filesystem events: a file
/// written in place settles, an agent leaves.
const EXPORT_BACKSTOP: Duration = Duration::from_secs(1);
/// How often presence is looked at.
const PRESENCE_EVERY: Duration = Duration::from_millis(100);
/// How often this host's broadcast acks are looked at, to share the new ones.
const ACKS_EVERY: Duration = Duration::from_millis(300);
/// How often the state file and this host's entry in the bucket are written.
const STATE_EVERY: Duration = Duration::from_secs(1);
/// How long a failed step waits before it is tried again.
const RETRY: Duration = Duration::from_millis(500);

/// What the bridge counts, for `status` and `doctor`.
#[derive(Default)]
struct Counters {
    exported: AtomicU64,
    exported_broadcasts: AtomicU64,
    duplicates_published: AtomicU64,
    imported: AtomicU64,
    already_here: AtomicU64,
    own_broadcasts: AtomicU64,
    acks_imported: AtomicU64,
    refused: AtomicU64,
    refused_exports: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
    present: Mutex<Vec<String>>,
}

impl Counters {
    /// The counts that run on across restarts, by their name in the state file.
    fn cumulative(&self) -> [(&'static str, &AtomicU64); 10] {
        [
            ("exported", &self.exported),
            ("exported_broadcasts", &self.exported_broadcasts),
            ("duplicates_published", &self.duplicates_published),
            ("imported", &self.imported),
            ("already_here", &self.already_here),
            ("own_broadcasts", &self.own_broadcasts),
            ("acks_imported", &self.acks_imported),
            ("refused", &self.refused),
            ("refused_exports", &self.refused_exports),
            ("errors", &self.errors),
        ]
    }

    fn error(&self, what: &str, e: &dyn std::fmt::Display) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let msg = format!("{what}: {e}");
        tracing::warn!("{msg}");
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg);
    }
}

/// Everything the tasks share.
struct Bridge {
    mb: Arc<Mailbox>,
    names: Names,
    host: String,
    nats: String,
    ack_wait: Duration,
    linger: Duration,
    counts: Counters,
    /// The agents whose signals are for this host (present now, or lingering and present on
    /// no other host): the exporter leaves their signals here.
    here: Mutex<HashSet<String>>,
    /// Each agent's lock-file mtime when this bridge last recorded it as this host's.
    claimed: Mutex<HashMap<String, i128>>,
    /// The connection, once made: whether it is up now is in the state.
    client: std::sync::OnceLock<async_nats::Client>,
    /// How the streams are made when missing (again after a server lost them).
    setup: Setup,
    /// Why the bridge stops by itself (another bridge under its host name).
    fatal: Mutex<Option<String>>,
    stop_now: tokio::sync::Notify,
    started: String,
    stop: AtomicBool,
    /// Wakes the exporter: a change in `inputs/` or a buffer, or in which agents are here.
    wake: tokio::sync::Notify,
    /// True while filesystem events wake the exporter.
    watching: AtomicBool,
    /// True once the streams are set up and presence is known: the bridge works.
    ready: AtomicBool,
    /// The pending broadcasts the exporter has no more to do with.
    broadcasts_seen: Arc<Mutex<sigbox::BroadcastsSeen>>,
}

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
    opts.settle(cli.settle);
    let mb = opts.open(&cli.root)?;
    let Some(_lock) = mb.bridge_lock()? else {
        bail!(
            "{}: another bridge runs on this root (it holds the lock on bridge/)",
            mb.bridge_dir().display()
        );
    };
    let counts = Counters::default();
    // Counts run on from where the last bridge on this root left them (its last state, at
    // most a second old when it was killed).
    if let Some(last) = mb
        .bridge_state()
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    {
        for (key, counter) in counts.cumulative() {
            counter.store(last[key].as_u64().unwrap_or(0), Ordering::Relaxed);
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
        claimed: Mutex::default(),
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
            Ok(kv) => Hosts::open(kv, &b.host, state_of(&b, true)).await,
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
    // restarts) must not send this host's signals away.
    loop {
        if let Some((here, present)) = look_at_presence(&b, &hosts).await {
            *lock(&b.here) = here;
            *lock(&b.counts.present) = present;
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
        )),
        tokio::spawn(ack_export_loop(b.clone(), js.clone())),
        tokio::spawn(import_loop(
            b.clone(),
            js.clone(),
            b.names.broadcast_stream(),
            names::acks_consumer(&b.host),
            b.names.ack_subject(),
            true,
        )),
    ];
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
        let last = state_of(&b, false);
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

/// How the streams and the bucket are made when missing.
struct Setup {
    replicas: usize,
    dedup_window: Duration,
    broadcast_age: Duration,
}

/// Creates what is missing on the server: the two streams and the hosts bucket.
async fn setup(js: &Context, names: &Names, cli: &Setup) -> Result<kv::Store> {
    js.get_or_create_stream(stream::Config {
        name: names.work_stream(),
        subjects: names.work_subjects(),
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::File,
        num_replicas: cli.replicas,
        duplicate_window: cli.dedup_window,
        ..Default::default()
    })
    .await
    .map_err(|e| anyhow!("stream {}: {e}", names.work_stream()))?;
    let all_subjects = vec![names.broadcast_subject(), names.ack_subject()];
    let mut all = js
        .get_or_create_stream(stream::Config {
            name: names.broadcast_stream(),
            subjects: all_subjects.clone(),
            retention: RetentionPolicy::Limits,
            storage: StorageType::File,
            num_replicas: cli.replicas,
            max_age: cli.broadcast_age,
            duplicate_window: cli.dedup_window.min(cli.broadcast_age),
            ..Default::default()
        })
        .await
        .map_err(|e| anyhow!("stream {}: {e}", names.broadcast_stream()))?;
    // A stream an earlier version made carries broadcasts only: acks join it.
    let mut config = all
        .info()
        .await
        .map_err(|e| anyhow!("stream {}: {e}", names.broadcast_stream()))?
        .config
        .clone();
    if !all_subjects.iter().all(|s| config.subjects.contains(s)) {
        config.subjects = all_subjects;
        js.update_stream(config)
            .await
            .map_err(|e| anyhow!("stream {}: {e}", names.broadcast_stream()))?;
    }
    let hosts = match js.get_key_value(names.hosts_bucket()).await {
        Ok(s) => s,
        Err(_) => js
            .create_key_value(kv::Config {
                bucket: names.hosts_bucket(),
                history: 1,
                storage: StorageType::File,
                num_replicas: cli.replicas,
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow!("bucket {}: {e}", names.hosts_bucket()))?,
    };
    Ok(hosts)
}

/// Takes what no agent here can take and publishes it; marks each exported once the server
/// acknowledged it.
async fn export_loop(b: Arc<Bridge>, js: Context) {
    while !b.stop.load(Ordering::Relaxed) {
        match export_round(&b, &js).await {
            Ok(0) => {
                let idle = if b.watching.load(Ordering::Relaxed) {
                    EXPORT_BACKSTOP
                } else {
                    EXPORT_IDLE
                };
                let _ = tokio::time::timeout(idle, b.wake.notified()).await;
            }
            Ok(_) => {}
            Err(e) => {
                b.counts.error("export", &format!("{e:#}"));
                tokio::time::sleep(RETRY).await;
                // A server that lost the streams (wiped, replaced) gets them again.
                if let Err(e) = setup(&js, &b.names, &b.setup).await {
                    b.counts
                        .error("cannot set up the streams", &format!("{e:#}"));
                }
            }
        }
    }
}

/// Wakes the exporter on every change in `inputs/` and the buffers (inotify), from a thread of
/// its own; without events (a network filesystem), the exporter polls.
fn watch_inputs(b: &Arc<Bridge>) {
    let dirs = b.mb.watch_dirs();
    let watch = match sigbox_client::DirWatch::new(&[(dirs[0], false), (dirs[1], true)]) {
        Ok(w) => w,
        Err(e) => {
            tracing::info!("no filesystem events ({e}): the exporter polls every {EXPORT_IDLE:?}");
            return;
        }
    };
    b.watching.store(true, Ordering::Relaxed);
    let b = b.clone();
    std::thread::spawn(move || {
        while !b.stop.load(Ordering::Relaxed) {
            if !watch.wait(EXPORT_BACKSTOP) {
                b.watching.store(false, Ordering::Relaxed);
                return;
            }
            // Files renamed in whole are read at once, as a waiting agent reads them.
            for p in watch.take_arrivals() {
                b.mb.arrived_whole(&p);
            }
            b.wake.notify_one();
        }
    });
}

/// One round: what the outbox holds (a round that failed, or a bridge that stopped), then
/// what is newly pending. Publishes them all, then waits for each acknowledgement in order.
async fn export_round(b: &Arc<Bridge>, js: &Context) -> Result<usize> {
    let mb = b.mb.clone();
    let host = b.host.clone();
    let here = lock(&b.here).clone();
    let seen = b.broadcasts_seen.clone();
    let out: Vec<Outgoing> = tokio::task::spawn_blocking(move || -> sigbox::Result<_> {
        let mut out = mb.bridge_outbox(&host)?;
        if out.len() < EXPORT_BATCH {
            let here = |a: &str| here.contains(a);
            let mut seen = lock(&seen);
            out.extend(mb.bridge_take(&host, EXPORT_BATCH - out.len(), &here, &mut seen)?);
        }
        Ok(out)
    })
    .await??;
    if out.is_empty() {
        return Ok(0);
    }
    // What the server would refuse for its size can never cross: it leaves the round (the
    // rest are not held up behind it), quarantined with the reason.
    let max = b
        .client
        .get()
        .map_or(usize::MAX, |c| c.server_info().max_payload);
    let (out, too_big): (Vec<Outgoing>, Vec<Outgoing>) = out
        .into_iter()
        .partition(|o| o.body.len() + HEADROOM <= max);
    for o in too_big {
        let reason = format!(
            "{} bytes as it would cross to another host, over the server's max_payload of {max} \
             bytes (with {HEADROOM} for headers)",
            o.body.len()
        );
        b.counts.refused_exports.fetch_add(1, Ordering::Relaxed);
        b.counts.error(&format!("cannot export {}", o.id), &reason);
        let (mb, host) = (b.mb.clone(), b.host.clone());
        tokio::task::spawn_blocking(move || mb.bridge_refuse(&o, &host, &reason)).await??;
    }
    if out.is_empty() {
        return Ok(1);
    }
    let mut acks = Vec::with_capacity(out.len());
    for o in &out {
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, o.msg_id.as_str());
        headers.insert(header::NAME, o.file_name.as_str());
        headers.insert(header::HOST, b.host.as_str());
        headers.insert(header::ID, o.id.as_str());
        let subject = b.names.subject_for(o.signal_type, &o.target);
        let ack = js
            .publish_with_headers(subject, headers, o.body.clone().into())
            .await
            .map_err(|e| anyhow!("cannot publish {}: {e}", o.id))?;
        acks.push(ack);
    }
    let n = out.len();
    let mut acked = Vec::with_capacity(n);
    let mut failed = None;
    for (o, ack) in out.into_iter().zip(acks) {
        // Stop at the first that failed: it and those after it stay where they are and are
        // published again (the stream drops the copies it already has, by id).
        match ack.await {
            Ok(ack) => {
                if ack.duplicate {
                    b.counts
                        .duplicates_published
                        .fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(id = %o.id, seq = ack.sequence, duplicate = ack.duplicate, "exported");
                acked.push(o);
            }
            Err(e) => {
                failed = Some(anyhow!("no acknowledgement for {}: {e}", o.id));
                break;
            }
        }
    }
    let broadcasts = acked.iter().filter(|o| o.is_broadcast()).count() as u64;
    let signals = acked.len() as u64 - broadcasts;
    let mb = b.mb.clone();
    tokio::task::spawn_blocking(move || mb.bridge_exported(&acked)).await??;
    b.counts
        .exported_broadcasts
        .fetch_add(broadcasts, Ordering::Relaxed);
    b.counts.exported.fetch_add(signals, Ordering::Relaxed);
    match failed {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

/// Which agents are this host's (spec/bridge.md §1): present here now, or seen here within
/// `--linger` and last seen on this host (the hosts bucket's `agent.<agent>`, in the server's
/// order); and those present now. Records in the bucket each agent whose presence was taken
/// here since the last look. `None` when presence cannot be read.
async fn look_at_presence(
    b: &Arc<Bridge>,
    hosts: &Hosts,
) -> Option<(HashSet<String>, Vec<String>)> {
    let mb = b.mb.clone();
    let linger = b.linger;
    let seen = match tokio::task::spawn_blocking(move || mb.agents_seen(linger)).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            b.counts.error("presence", &e);
            return None;
        }
        Err(e) => {
            b.counts.error("presence", &e);
            return None;
        }
    };
    for (agent, now, mtime) in &seen {
        let last = lock(&b.claimed).get(agent).copied();
        let fresh = last.is_none_or(|t| *mtime > t);
        let lost = *now && hosts.owner(agent).as_deref() != Some(b.host.as_str());
        // Taken here since the last look (a poll, a wait, a hook), or present here and
        // recorded elsewhere without having been taken here since.
        if fresh || (lost && last.is_none()) {
            match hosts.claim_agent(agent).await {
                Ok(()) => {
                    lock(&b.claimed).insert(agent.clone(), *mtime);
                }
                Err(e) => b
                    .counts
                    .error("cannot record an agent's host", &format!("{e:#}")),
            }
        }
    }
    let here = seen
        .iter()
        .filter(|(a, now, _)| *now || hosts.owner(a).is_none_or(|h| h == b.host))
        .map(|(a, _, _)| a.clone())
        .collect();
    let present = seen
        .iter()
        .filter(|(_, now, _)| *now)
        .map(|(a, _, _)| a.clone())
        .collect();
    Some((here, present))
}

/// Starts an importer for each agent present here (and for the orchestrator's signals where
/// it runs), and stops it when the agent leaves.
async fn presence_loop(b: Arc<Bridge>, js: Context, hosts: Arc<Hosts>) {
    let mut running: HashMap<String, JoinHandle<()>> = HashMap::new();
    loop {
        // On an error, what was known stays: an empty set would export every agent's signals.
        let Some((here, present)) = look_at_presence(&b, &hosts).await else {
            tokio::time::sleep(PRESENCE_EVERY).await;
            continue;
        };
        let mut wanted: HashMap<String, String> = here
            .iter()
            .map(|a| (names::agent_consumer(a), b.names.agent_subject(a)))
            .collect();
        if here.contains(b.mb.orchestrator()) {
            wanted.insert(names::ORCH_CONSUMER.to_string(), b.names.orch_subject());
        }
        let changed = *lock(&b.here) != here;
        *lock(&b.here) = here;
        if changed {
            // An agent left or came: what is its may now go, or stay.
            b.wake.notify_one();
        }
        running.retain(|consumer, task| {
            let keep = wanted.contains_key(consumer) && !task.is_finished();
            if !keep {
                tracing::info!(%consumer, "agent left: importer stopped");
                task.abort();
            }
            keep
        });
        for (consumer, subject) in wanted {
            if let std::collections::hash_map::Entry::Vacant(slot) = running.entry(consumer) {
                tracing::info!(consumer = %slot.key(), "agent present: importer started");
                let t = tokio::spawn(import_loop(
                    b.clone(),
                    js.clone(),
                    b.names.work_stream(),
                    slot.key().clone(),
                    subject,
                    false,
                ));
                slot.insert(t);
            }
        }
        *lock(&b.counts.present) = present;
        tokio::time::sleep(PRESENCE_EVERY).await;
    }
}

/// Pulls from one durable consumer and writes each signal into the mailbox, then
/// acknowledges it and waits for the server to confirm the acknowledgement. One signal at a
/// time (`max_ack_pending` 1): after a crash the signal that was not acknowledged comes
/// again before any later one, so each producer's order holds.
async fn import_loop(
    b: Arc<Bridge>,
    js: Context,
    stream: String,
    consumer: String,
    subject: String,
    broadcasts: bool,
) {
    loop {
        if let Err(e) = import_from(&b, &js, &stream, &consumer, &subject, broadcasts).await {
            b.counts
                .error(&format!("import from {consumer}"), &format!("{e:#}"));
            tokio::time::sleep(RETRY).await;
            if let Err(e) = setup(&js, &b.names, &b.setup).await {
                b.counts
                    .error("cannot set up the streams", &format!("{e:#}"));
            }
        }
    }
}

async fn import_from(
    b: &Arc<Bridge>,
    js: &Context,
    stream: &str,
    consumer: &str,
    subject: &str,
    broadcasts: bool,
) -> Result<()> {
    let stream = js
        .get_stream(stream)
        .await
        .map_err(|e| anyhow!("stream {stream}: {e}"))?;
    let c: async_nats::jetstream::consumer::PullConsumer = stream
        .get_or_create_consumer(
            consumer,
            pull::Config {
                durable_name: Some(consumer.to_string()),
                filter_subject: subject.to_string(),
                ack_policy: AckPolicy::Explicit,
                ack_wait: b.ack_wait,
                deliver_policy: DeliverPolicy::All,
                max_ack_pending: 1,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
    let mut messages = c
        .messages()
        .await
        .map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
    while let Some(m) = messages.next().await {
        let m = m.map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
        import_one(b, &m, broadcasts).await?;
    }
    Ok(())
}

/// One signal from the stream: written (or found here already), then acknowledged; refused
/// for good when it is not a signal; left unacknowledged on a local error, to come again.
async fn import_one(b: &Arc<Bridge>, m: &jetstream::Message, broadcasts: bool) -> Result<()> {
    let get = |h: &str| -> Option<String> {
        m.headers
            .as_ref()
            .and_then(|hs| hs.get(h))
            .map(|v| v.as_str().to_string())
    };
    let from = get(header::HOST).unwrap_or_else(|| "an unnamed host".into());
    if m.subject.as_str() == b.names.ack_subject() {
        return import_ack(b, m, &from).await;
    }
    if broadcasts && from == b.host {
        // This host's own broadcast: its agents have it from inputs/ already.
        b.counts.own_broadcasts.fetch_add(1, Ordering::Relaxed);
        return double_ack(m).await;
    }
    let Some(name) = get(header::NAME) else {
        let why = format!(
            "a message on {} without a {} header: dropped",
            m.subject,
            header::NAME
        );
        return refuse(b, m, &why).await;
    };
    let mb = b.mb.clone();
    let payload = m.payload.clone();
    let n = name.clone();
    let imported = tokio::task::spawn_blocking(move || mb.bridge_import(&n, &payload)).await?;
    match imported {
        Ok(Imported::Written) => {
            tracing::debug!(%name, %from, "imported");
            b.counts.imported.fetch_add(1, Ordering::Relaxed);
            double_ack(m).await
        }
        Ok(Imported::Here) => {
            tracing::debug!(%name, %from, "already here");
            b.counts.already_here.fetch_add(1, Ordering::Relaxed);
            double_ack(m).await
        }
        Ok(Imported::Refused(why)) => {
            refuse(b, m, &format!("{name} from {from} refused: {why}")).await
        }
        // Nothing written.
        Err(e) => retry_later(m, anyhow!("{name}: {e}")).await,
    }
}

/// A broadcast ack another host shares: written here (spec/bridge.md §5), unless it is this
/// host's own or here already.
async fn import_ack(b: &Arc<Bridge>, m: &jetstream::Message, from: &str) -> Result<()> {
    if from == b.host {
        return double_ack(m).await;
    }
    let v: Value = serde_json::from_slice(&m.payload).unwrap_or(Value::Null);
    let (Some(id), Some(agent)) = (v["id"].as_str(), v["agent"].as_str()) else {
        let why = format!("an ack from {from} without an id and an agent: dropped");
        return refuse(b, m, &why).await;
    };
    let (mb, id_, agent_, from_) = (
        b.mb.clone(),
        id.to_string(),
        agent.to_string(),
        from.to_string(),
    );
    match tokio::task::spawn_blocking(move || mb.bridge_import_ack(&id_, &agent_, &from_)).await? {
        Ok(written) => {
            if written {
                b.counts.acks_imported.fetch_add(1, Ordering::Relaxed);
            }
            double_ack(m).await
        }
        Err(e) if e.kind() == sigbox::ErrorKind::InvalidName => {
            refuse(b, m, &format!("an ack from {from} refused: {e}")).await
        }
        Err(e) => retry_later(m, anyhow!("an ack of {id} by {agent}: {e}")).await,
    }
}

/// Shares this host's broadcast acks with the other hosts, each once per run (the stream drops
/// what it already has, by id).
async fn ack_export_loop(b: Arc<Bridge>, js: Context) {
    let mut shared: HashSet<(String, String)> = HashSet::new();
    loop {
        let mb = b.mb.clone();
        match tokio::task::spawn_blocking(move || mb.bridge_acks()).await {
            Ok(Ok(acks)) => {
                let mut pending = Vec::new();
                for (id, agent) in acks.into_iter().filter(|a| !shared.contains(a)) {
                    let mut headers = HeaderMap::new();
                    headers.insert(
                        async_nats::header::NATS_MESSAGE_ID,
                        format!("ack~{id}~{agent}").as_str(),
                    );
                    headers.insert(header::HOST, b.host.as_str());
                    let body = json!({"id": id, "agent": agent}).to_string();
                    match js
                        .publish_with_headers(b.names.ack_subject(), headers, body.into())
                        .await
                    {
                        Ok(f) => pending.push(((id, agent), f)),
                        Err(e) => {
                            b.counts.error("cannot share an ack", &e);
                            break;
                        }
                    }
                }
                for (key, f) in pending {
                    match f.await {
                        Ok(_) => {
                            shared.insert(key);
                        }
                        Err(e) => b.counts.error("cannot share an ack", &e),
                    }
                }
            }
            Ok(Err(e)) => b.counts.error("acks", &e),
            Err(e) => b.counts.error("acks", &e),
        }
        tokio::time::sleep(ACKS_EVERY).await;
    }
}

/// Refuses a message for good (terminated: never delivered again), counted and logged.
async fn refuse(b: &Bridge, m: &jetstream::Message, why: &str) -> Result<()> {
    b.counts.refused.fetch_add(1, Ordering::Relaxed);
    b.counts.error("import", &why);
    m.ack_with(AckKind::Term)
        .await
        .map_err(|e| anyhow!("cannot acknowledge: {e}"))
}

/// Leaves a message unacknowledged after a local error: the server delivers it again after a
/// pause. Returns the error.
async fn retry_later(m: &jetstream::Message, e: anyhow::Error) -> Result<()> {
    let _ = m.ack_with(AckKind::Nak(Some(RETRY * 2))).await;
    Err(e)
}

async fn double_ack(m: &jetstream::Message) -> Result<()> {
    m.double_ack()
        .await
        .map_err(|e| anyhow!("acknowledgement not confirmed: {e}"))
}

/// Writes `bridge/state.json` and this host's entry in the hosts bucket every second.
async fn state_loop(b: Arc<Bridge>, js: Context, hosts: Arc<Hosts>) {
    while !b.stop.load(Ordering::Relaxed) {
        let state = write_state(&b, true);
        match hosts.publish(state).await {
            Ok(()) => {}
            Err(e) if e.downcast_ref::<crate::hosts::Clash>().is_some() => {
                tracing::error!("{e}");
                *lock(&b.fatal) = Some(e.to_string());
                b.stop_now.notify_one();
                return;
            }
            Err(e) => {
                b.counts
                    .error("cannot record this host in the bucket", &format!("{e:#}"));
                // A server that lost the bucket (wiped, replaced) gets it again.
                if let Err(e) = setup(&js, &b.names, &b.setup).await {
                    b.counts
                        .error("cannot set up the streams", &format!("{e:#}"));
                }
            }
        }
        tokio::time::sleep(STATE_EVERY).await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// This host's state, written to `bridge/state.json`; returned.
fn write_state(b: &Bridge, running: bool) -> Value {
    let state = state_of(b, running);
    let mut bytes = serde_json::to_vec_pretty(&state).unwrap_or_default();
    bytes.push(b'\n');
    if let Err(e) = b.mb.bridge_write_state(&bytes) {
        tracing::warn!("cannot write the bridge's state: {e}");
    }
    state
}

/// This host's state now.
fn state_of(b: &Bridge, running: bool) -> Value {
    let c = &b.counts;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (outbox, sent) = b.mb.bridge_counts().unwrap_or_default();
    let mut here: Vec<String> = lock(&b.here).iter().cloned().collect();
    here.sort();
    let state = json!({
        "host": b.host,
        "nats": b.nats,
        "pid": std::process::id(),
        "running": running,
        "ready": b.ready.load(Ordering::Relaxed),
        "connected": b.client.get().is_some_and(|c| {
            c.connection_state() == async_nats::connection::State::Connected
        }),
        "mailbox": b.names.mailbox(),
        "started_at": b.started,
        "updated_at": chrono::Utc::now().to_rfc3339(),
        "present": *lock(&c.present),
        "here": here,
        "last_error": *lock(&c.last_error),
        "outbox": outbox,
        "sent": sent,
    });
    let mut state = state;
    for (key, counter) in c.cumulative() {
        state[key] = json!(n(counter));
    }
    state
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
