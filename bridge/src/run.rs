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
use sigbox::bridge_state::{BridgeCounts, BridgeState};
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
/// How long a host that took an agent from another waits for the other's hand-off before it
/// delivers to the agent anyway (spec/bridge.md §5), while the other's bridge runs.
const HANDOFF_WAIT: Duration = Duration::from_secs(30);
/// How long a host's entry may go unwritten before its bridge counts as not running (as
/// `status` shows it silent).
const SILENT: Duration = Duration::from_secs(10);

/// The field of one count in the state file.
type CountField = fn(&mut BridgeCounts) -> &mut Option<u64>;

/// What the bridge counts, for `status` and `doctor`.
#[derive(Default)]
struct Counters {
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
    /// The counts that run on across restarts, each with its field in the state file. What
    /// was exported is not among them: it is counted from what is durable (see [`state_of`]).
    fn cumulative(&self) -> [(&AtomicU64, CountField); 8] {
        [
            (&self.duplicates_published, |c| &mut c.duplicates_published),
            (&self.imported, |c| &mut c.imported),
            (&self.already_here, |c| &mut c.already_here),
            (&self.own_broadcasts, |c| &mut c.own_broadcasts),
            (&self.acks_imported, |c| &mut c.acks_imported),
            (&self.refused, |c| &mut c.refused),
            (&self.refused_exports, |c| &mut c.refused_exports),
            (&self.errors, |c| &mut c.errors),
        ]
    }

    /// The counts as the state file holds them.
    fn snapshot(&self) -> BridgeCounts {
        let mut counts = BridgeCounts::default();
        for (counter, field) in self.cumulative() {
            *field(&mut counts) = Some(counter.load(Ordering::Relaxed));
        }
        counts
    }

    /// Runs on from the counts of the last state file (a missing one from 0).
    fn restore(&self, last: &BridgeCounts) {
        let mut last = last.clone();
        for (counter, field) in self.cumulative() {
            counter.store(field(&mut last).unwrap_or(0), Ordering::Relaxed);
        }
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
    /// Each agent's lock-file mtime when this bridge (or the last on this root) last recorded
    /// it as this host's.
    claimed: Mutex<HashMap<String, i128>>,
    /// When this bridge started, in nanoseconds since the Unix epoch (this host's clock, as
    /// lock-file mtimes are).
    started_ns: i128,
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
    /// Export rounds begun, and the last begun that ended without an error (numbered from 1):
    /// a round numbered past a change of `here` saw it.
    rounds_begun: AtomicU64,
    rounds_done: AtomicU64,
    /// Per consumer: the stream sequence of the last message acknowledged.
    imported_seq: Mutex<HashMap<String, u64>>,
    /// Per consumer: the latest hand-off mark its stream carried (spec/bridge.md §5).
    handed_over: Mutex<HashMap<String, u64>>,
    /// The agents whose signals are held back from them here (`bridge/hold/<agent>`).
    held: Mutex<HashSet<String>>,
    /// The agents this host took whose hand-off is not over (what `status` shows).
    arriving: Mutex<Vec<String>>,
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
    opts.settle(cli.settle).durability(cli.durability);
    let mb = opts.open(&cli.root)?;
    let Some(_lock) = mb.bridge_lock()? else {
        bail!(
            "{}: another bridge runs on this root (it holds the lock on bridge/)",
            mb.bridge_dir().display()
        );
    };
    // The holds count while this lock is held: the root is a plain mailbox again when the
    // bridge ends.
    let _holds = mb.bridge_hold_lock()?;
    let held: HashSet<String> = mb.bridge_held()?.into_iter().map(|(a, _)| a).collect();
    let counts = Counters::default();
    let mut claimed: HashMap<String, i128> = HashMap::new();
    // Counts run on from where the last bridge on this root left them (its last state, at
    // most a second old when it was killed), and so does what it recorded of each agent's
    // presence here: an agent that lingers here and was taken elsewhere since is not taken
    // back by a bridge that starts again.
    if let Some(last) = mb
        .bridge_state()
        .ok()
        .flatten()
        .and_then(|b| BridgeState::from_json(&b).ok())
    {
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
    // Numbered before it looks at `here`: a round numbered past a change saw it.
    let round = b.rounds_begun.fetch_add(1, Ordering::SeqCst) + 1;
    let done = |n: usize| {
        b.rounds_done.store(round, Ordering::SeqCst);
        Ok(n)
    };
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
        return done(0);
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
        return done(1);
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
    // An agent whose signals left this host is held back here from now on: should it come
    // here, it takes nothing before what went ahead of it (spec/bridge.md §5).
    let away: HashSet<String> = acked
        .iter()
        .filter_map(|o| consumer_agent(b, o.signal_type, &o.target))
        .collect();
    let mb = b.mb.clone();
    tokio::task::spawn_blocking(move || mb.bridge_exported(&acked)).await??;
    for agent in away {
        hold(
            b,
            &agent,
            &json!({"why": "its signals were sent on from here"}),
        );
    }
    match failed {
        Some(e) => Err(e),
        None => done(n),
    }
}

/// The agent whose consumer a signal travels by: its target's, the orchestrator's for APPROVE,
/// SKIP and no target; none for a broadcast.
fn consumer_agent(b: &Bridge, ty: sigbox::SignalType, target: &sigbox::Target) -> Option<String> {
    match target {
        _ if ty.is_approval() => Some(b.mb.orchestrator().to_string()),
        sigbox::Target::All => None,
        sigbox::Target::None => Some(b.mb.orchestrator().to_string()),
        sigbox::Target::Agent(a) => Some(a.clone()),
    }
}

/// The consumers `agent`'s signals travel by, with their subjects: its own, and the
/// orchestrator's when it is the orchestrator.
fn consumers_of(b: &Bridge, agent: &str) -> Vec<(String, String)> {
    let mut out = vec![(names::agent_consumer(agent), b.names.agent_subject(agent))];
    if agent == b.mb.orchestrator() {
        out.push((names::ORCH_CONSUMER.to_string(), b.names.orch_subject()));
    }
    out
}

/// Holds `agent`'s signals back from it here (`bridge/hold/<agent>`), unless they are
/// already; `note` says why.
fn hold(b: &Bridge, agent: &str, note: &Value) {
    if lock(&b.held).contains(agent) {
        return;
    }
    rehold(b, agent, note);
}

/// Writes `agent`'s hold with `note`, held already or not.
fn rehold(b: &Bridge, agent: &str, note: &Value) {
    let mut bytes = serde_json::to_vec(note).unwrap_or_default();
    bytes.push(b'\n');
    match b.mb.bridge_hold(agent, &bytes) {
        Ok(()) => {
            lock(&b.held).insert(agent.to_string());
        }
        Err(e) => b
            .counts
            .error(&format!("cannot hold back {agent}'s signals"), &e),
    }
}

/// What [`look_at_presence`] found: the agents of this host, those present now, and the
/// records this look wrote of agents that were another host's (or nobody's) until then.
struct Presence {
    here: HashSet<String>,
    present: Vec<String>,
    claims: Vec<(String, crate::hosts::Owner)>,
}

/// Which agents are this host's (spec/bridge.md §1): present here now or seen here within
/// `--linger`, and recorded on no other host since (the hosts bucket's `agent.<agent>`, in
/// the server's order); and those present now. Records in the bucket each agent whose presence was taken
/// here since the last look. `None` when presence cannot be read.
async fn look_at_presence(b: &Arc<Bridge>, hosts: &Hosts) -> Option<Presence> {
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
    let mut claims = Vec::new();
    let mut wrote = false;
    for (agent, now, mtime) in &seen {
        let last = lock(&b.claimed).get(agent).copied();
        // Taken here since this host last recorded it; one it never recorded, when present
        // now or taken since this bridge started (one that only lingers from before may have
        // been taken elsewhere since).
        let fresh = last.map_or(*now || *mtime >= b.started_ns, |t| *mtime > t);
        let lost = *now && hosts.owner(agent).as_deref() != Some(b.host.as_str());
        // Taken here since the last look (a poll, a wait, a hook), or present here and
        // recorded elsewhere without having been taken here since.
        if fresh || (lost && last.is_none()) {
            match hosts.claim_agent(agent).await {
                Ok((record, taken)) => {
                    lock(&b.claimed).insert(agent.clone(), *mtime);
                    if taken {
                        claims.push((agent.clone(), record));
                    }
                    wrote = true;
                }
                Err(e) => b
                    .counts
                    .error("cannot record an agent's host", &format!("{e:#}")),
            }
        }
    }
    // Present or lingering, and recorded on no other host: an agent present here too but
    // recorded elsewhere since it was last taken here takes its signals there (its signals
    // here are sent on to it).
    let here = seen
        .iter()
        .filter(|(a, _, _)| hosts.owner(a).is_none_or(|h| h == b.host))
        .map(|(a, _, _)| a.clone())
        .collect();
    let present = seen
        .iter()
        .filter(|(_, now, _)| *now)
        .map(|(a, _, _)| a.clone())
        .collect();
    if wrote {
        // What was recorded survives a restart (see `run`).
        write_state(b, true);
    }
    Some(Presence {
        here,
        present,
        claims,
    })
}

/// An agent this host took from another (or from nowhere), whose signals are held back from
/// it here until everything that went ahead of them is here too (spec/bridge.md §5).
struct Arrival {
    /// The record that made it this host's.
    revision: u64,
    /// The host it was taken from: it hands over what it held for the agent.
    from: Option<String>,
    since: std::time::Instant,
    /// The last export round begun before it was an agent here: once a later round ended,
    /// none of its signals leaves this host any more.
    round: u64,
    /// Per consumer: the last stream sequence of its subject once the above held.
    fence: Option<Vec<(String, u64)>>,
    /// True once it was said that the old host's hand-off is not waited for.
    gave_up: bool,
}

/// An importer's task and the switch that stops it between two messages.
struct Importer {
    task: JoinHandle<()>,
    stop: tokio::sync::watch::Sender<bool>,
}

/// Starts an importer for each agent present here (and for the orchestrator's signals where
/// it runs), and stops it when the agent leaves; hands over to the host that took an agent
/// what this host held for it; holds back an agent's signals here while it belongs to another
/// host, and, when it comes here, until what went ahead of them is here (spec/bridge.md §5).
async fn presence_loop(b: Arc<Bridge>, js: Context, hosts: Arc<Hosts>) {
    let mut running: HashMap<String, Importer> = HashMap::new();
    // Importers told to stop, until they have.
    let mut stopping: HashMap<String, JoinHandle<()>> = HashMap::new();
    let mut arrivals: HashMap<String, Arrival> = HashMap::new();
    // The record each agent that left was handed over at, from here.
    let mut handed: HashMap<String, u64> = HashMap::new();
    // The agents that were this host's at the last look.
    let mut mine_before: HashSet<String> = HashSet::new();
    loop {
        // On an error, what was known stays: an empty set would export every agent's signals.
        let Some(Presence {
            here,
            present,
            claims,
        }) = look_at_presence(&b, &hosts).await
        else {
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
        *lock(&b.here) = here.clone();
        // Rounds numbered past this one see `here` as it is now.
        let round = b.rounds_begun.load(Ordering::SeqCst);
        if changed {
            // An agent left or came: what is its may now go, or stay.
            b.wake.notify_one();
        }
        let owners = hosts.owners();
        // Taken from another host, or from nowhere: held back until the hand-off is over.
        for (agent, record) in claims {
            if !arrivals.contains_key(&agent) {
                arrive(&b, &mut arrivals, &agent, &record, round);
            }
        }
        for (agent, o) in &owners {
            if o.host != b.host {
                // Another host's: held back here, and no longer arriving.
                arrivals.remove(agent);
                hold(
                    &b,
                    agent,
                    &json!({"why": "an agent of another host", "host": o.host}),
                );
            } else if lock(&b.held).contains(agent) && !arrivals.contains_key(agent) {
                // This host's and held back (a record this look did not write, a bridge that
                // stopped during a hand-off): what went ahead of its signals comes first.
                arrive(&b, &mut arrivals, agent, o, round);
            }
        }
        stopping.retain(|_, t| !t.is_finished());
        let leaving: Vec<String> = running
            .iter()
            .filter(|(c, i)| !wanted.contains_key(*c) || i.task.is_finished())
            .map(|(c, _)| c.clone())
            .collect();
        for consumer in leaving {
            if let Some(importer) = running.remove(&consumer) {
                tracing::info!(%consumer, "agent left: importer stopping");
                // It stops between two messages: what it wrote is acknowledged.
                let _ = importer.stop.send(true);
                stopping.insert(consumer, importer.task);
            }
        }
        for (consumer, subject) in wanted {
            if let std::collections::hash_map::Entry::Vacant(slot) = running.entry(consumer) {
                tracing::info!(consumer = %slot.key(), "agent present: importer started");
                let (stop, stopped) = tokio::sync::watch::channel(false);
                let task = tokio::spawn(import_loop(
                    b.clone(),
                    js.clone(),
                    b.names.work_stream(),
                    slot.key().clone(),
                    subject,
                    false,
                    Some(stopped),
                ));
                slot.insert(Importer { task, stop });
            }
        }
        // Taken from this host: hand over what is here for it.
        for (agent, o) in &owners {
            if o.host == b.host {
                handed.remove(agent);
                continue;
            }
            if here.contains(agent) {
                continue;
            }
            // Seen leaving at the last look, or taken from here by a record this bridge did not
            // see change hands (it was not running, or the record changed again since).
            let was_mine = mine_before.contains(agent)
                || (o.from.as_deref() == Some(b.host.as_str()) && !handed.contains_key(agent));
            if !was_mine {
                continue;
            }
            let importers: Vec<JoinHandle<()>> = consumers_of(&b, agent)
                .iter()
                .filter_map(|(c, _)| stopping.remove(c))
                .collect();
            handed.insert(agent.clone(), o.revision);
            tracing::info!(%agent, to = %o.host, revision = o.revision, "agent taken by another host: handing over");
            tokio::spawn(hand_off(
                b.clone(),
                js.clone(),
                agent.clone(),
                o.revision,
                importers,
            ));
        }
        mine_before = owners
            .iter()
            .filter(|(_, o)| o.host == b.host)
            .map(|(a, _)| a.clone())
            .collect();
        // Arriving agents whose wait is over take their signals.
        let mut arrived = Vec::new();
        for (agent, a) in &mut arrivals {
            if here.contains(agent) && arrival_over(&b, &js, &hosts, agent, a).await {
                arrived.push(agent.clone());
            }
        }
        for agent in arrived {
            arrivals.remove(&agent);
            match b.mb.bridge_release(&agent) {
                Ok(()) => {
                    lock(&b.held).remove(&agent);
                    tracing::info!(%agent, "hand-off over: its signals are delivered here");
                }
                Err(e) => b
                    .counts
                    .error(&format!("cannot release {agent}'s signals"), &e),
            }
        }
        let mut waiting: Vec<String> = arrivals.keys().cloned().collect();
        waiting.sort();
        *lock(&b.arriving) = waiting;
        *lock(&b.counts.present) = present;
        tokio::time::sleep(PRESENCE_EVERY).await;
    }
}

/// Records `agent` as arriving here by `record`, its signals held back meanwhile.
fn arrive(
    b: &Bridge,
    arrivals: &mut HashMap<String, Arrival>,
    agent: &str,
    record: &crate::hosts::Owner,
    round: u64,
) {
    rehold(
        b,
        agent,
        &json!({"why": "arriving: waiting for what went ahead of its signals", "from": record.from, "revision": record.revision}),
    );
    tracing::info!(%agent, from = record.from.as_deref().unwrap_or("none"), revision = record.revision, "agent taken here: its signals are held back until the hand-off is over");
    arrivals.insert(
        agent.to_string(),
        Arrival {
            revision: record.revision,
            from: record.from.clone(),
            since: std::time::Instant::now(),
            round,
            fence: None,
            gave_up: false,
        },
    );
    b.wake.notify_one();
}

/// True once everything that went ahead of an arriving agent's signals is here (spec/bridge.md
/// §5): the host it came from handed over what it held (or its bridge does not run, or
/// [`HANDOFF_WAIT`] passed); no export round that could still send its signals away is
/// unfinished; and its consumers were imported up to the last message their subjects held
/// after that.
async fn arrival_over(
    b: &Bridge,
    js: &Context,
    hosts: &Hosts,
    agent: &str,
    a: &mut Arrival,
) -> bool {
    let consumers = consumers_of(b, agent);
    if let Some(from) = a.from.as_deref().filter(|f| *f != b.host) {
        let handed = {
            let seen = lock(&b.handed_over);
            consumers
                .iter()
                .all(|(c, _)| seen.get(c).is_some_and(|r| *r >= a.revision))
        };
        if !handed && !a.gave_up {
            let waited = a.since.elapsed();
            let why = if waited >= HANDOFF_WAIT {
                Some(format!("no hand-off from {from} within {HANDOFF_WAIT:?}"))
            } else if waited >= Duration::from_secs(1) && !hosts.running(from, SILENT).await {
                Some(format!("the bridge of {from} does not run"))
            } else {
                None
            };
            let Some(why) = why else { return false };
            tracing::warn!(%agent, %from, "{why}: delivering to it here; what {from} holds for it comes when its bridge sends it");
            a.gave_up = true;
        }
    }
    if b.rounds_done.load(Ordering::SeqCst) <= a.round {
        return false;
    }
    if a.fence.is_none() {
        let Ok(stream) = js.get_stream(b.names.work_stream()).await else {
            return false;
        };
        let mut fence = Vec::new();
        for (consumer, subject) in &consumers {
            match stream.get_last_raw_message_by_subject(subject).await {
                Ok(m) => fence.push((consumer.clone(), m.sequence)),
                Err(e)
                    if e.kind()
                        == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {}
                Err(_) => return false,
            }
        }
        a.fence = Some(fence);
    }
    let imported = lock(&b.imported_seq);
    a.fence
        .iter()
        .flatten()
        .all(|(c, seq)| imported.get(c).is_some_and(|s| s >= seq))
}

/// Hands `agent` over to the host that took it by `revision` (spec/bridge.md §5): once its
/// importers here have stopped, the exporter sends on everything this host holds for it (it
/// is not an agent here any more), and then a hand-off mark on each of its subjects tells the
/// new host that nothing more is on its way from here.
async fn hand_off(
    b: Arc<Bridge>,
    js: Context,
    agent: String,
    revision: u64,
    importers: Vec<JoinHandle<()>>,
) {
    for t in importers {
        let _ = t.await;
    }
    loop {
        if lock(&b.here).contains(&agent) {
            tracing::info!(%agent, "back here before its hand-off was over");
            return;
        }
        let begun = b.rounds_begun.load(Ordering::SeqCst);
        b.wake.notify_one();
        while b.rounds_done.load(Ordering::SeqCst) <= begun {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mb = b.mb.clone();
        let a = agent.clone();
        match tokio::task::spawn_blocking(move || mb.bridge_holding(&a)).await {
            Ok(Ok(false)) => break,
            // Still some (settling, or taken by another consumer first): the next round.
            Ok(Ok(true)) => tokio::time::sleep(Duration::from_millis(20)).await,
            Ok(Err(e)) => {
                b.counts.error(&format!("hand-off of {agent}"), &e);
                tokio::time::sleep(RETRY).await;
            }
            Err(e) => {
                b.counts.error(&format!("hand-off of {agent}"), &e);
                tokio::time::sleep(RETRY).await;
            }
        }
    }
    for (_, subject) in consumers_of(&b, &agent) {
        loop {
            let mut headers = HeaderMap::new();
            headers.insert(
                async_nats::header::NATS_MESSAGE_ID,
                format!("handoff~{agent}~{revision}~{subject}").as_str(),
            );
            headers.insert(header::HOST, b.host.as_str());
            headers.insert(header::HANDOFF, revision.to_string().as_str());
            let sent = match js
                .publish_with_headers(subject.clone(), headers, Default::default())
                .await
            {
                Ok(ack) => ack.await.map(|_| ()).map_err(|e| anyhow!("{e}")),
                Err(e) => Err(anyhow!("{e}")),
            };
            match sent {
                Ok(()) => break,
                Err(e) => {
                    b.counts.error(
                        &format!("cannot mark the hand-off of {agent} on {subject}"),
                        &e,
                    );
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }
    tracing::info!(%agent, revision, "handed over");
}

/// Pulls from one durable consumer and writes each signal into the mailbox, then
/// acknowledges it and waits for the server to confirm the acknowledgement. One signal at a
/// time (`max_ack_pending` 1): after a crash the signal that was not acknowledged comes
/// again before any later one, so each producer's order holds. `stop` ends it between two
/// messages.
async fn import_loop(
    b: Arc<Bridge>,
    js: Context,
    stream: String,
    consumer: String,
    subject: String,
    broadcasts: bool,
    stop: Option<tokio::sync::watch::Receiver<bool>>,
) {
    let stopped =
        |s: &Option<tokio::sync::watch::Receiver<bool>>| s.as_ref().is_some_and(|s| *s.borrow());
    loop {
        if stopped(&stop) {
            return;
        }
        match import_from(
            &b,
            &js,
            &stream,
            &consumer,
            &subject,
            broadcasts,
            stop.clone(),
        )
        .await
        {
            Ok(()) if stopped(&stop) => return,
            Ok(()) => {}
            Err(e) => {
                b.counts
                    .error(&format!("import from {consumer}"), &format!("{e:#}"));
                tokio::time::sleep(RETRY).await;
                if stopped(&stop) {
                    return;
                }
                if let Err(e) = setup(&js, &b.names, &b.setup).await {
                    b.counts
                        .error("cannot set up the streams", &format!("{e:#}"));
                }
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
    mut stop: Option<tokio::sync::watch::Receiver<bool>>,
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
    loop {
        // Stopped only while waiting for a message: one taken is written and acknowledged.
        let next = match stop.as_mut() {
            Some(stop) => tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return Ok(()),
                m = messages.next() => m,
            },
            None => messages.next().await,
        };
        let Some(m) = next else { return Ok(()) };
        let m = m.map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
        import_one(b, &m, consumer, broadcasts).await?;
        if let Ok(info) = m.info() {
            lock(&b.imported_seq).insert(consumer.to_string(), info.stream_sequence);
        }
    }
}

/// One signal from the stream: written (or found here already), then acknowledged; refused
/// for good when it is not a signal; left unacknowledged on a local error, to come again.
/// A hand-off mark is noted for `consumer` and acknowledged.
async fn import_one(
    b: &Arc<Bridge>,
    m: &jetstream::Message,
    consumer: &str,
    broadcasts: bool,
) -> Result<()> {
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
    if let Some(mark) = get(header::HANDOFF).filter(|_| !broadcasts) {
        let Ok(revision) = mark.trim().parse::<u64>() else {
            let why = format!("a hand-off mark from {from} with revision {mark:?}: dropped");
            return refuse(b, m, &why).await;
        };
        tracing::debug!(%consumer, %from, revision, "hand-off mark");
        let r = double_ack(m).await;
        if r.is_ok() {
            let mut seen = lock(&b.handed_over);
            let at = seen.entry(consumer.to_string()).or_default();
            *at = (*at).max(revision);
        }
        return r;
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
        match hosts.publish(state.to_value()).await {
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
fn write_state(b: &Bridge, running: bool) -> BridgeState {
    let state = state_of(b, running);
    if let Err(e) = b.mb.bridge_write_state(&state.to_json()) {
        tracing::warn!("cannot write the bridge's state: {e}");
    }
    state
}

/// This host's state now.
fn state_of(b: &Bridge, running: bool) -> BridgeState {
    let c = &b.counts;
    // Exported: the records in bridge/sent/ and the markers in bridge/broadcasts/, written
    // only once the server acknowledged each (spec/bridge.md §7): never more or less than
    // what is durable, whenever the bridge was killed.
    let (outbox, sent) = b.mb.bridge_counts().unwrap_or_default();
    let marked = b.mb.bridge_broadcasts_marked().unwrap_or_default();
    let mut here: Vec<String> = lock(&b.here).iter().cloned().collect();
    here.sort();
    BridgeState {
        host: Some(b.host.clone()),
        nats: Some(b.nats.clone()),
        pid: Some(std::process::id()),
        running: Some(running),
        ready: Some(b.ready.load(Ordering::Relaxed)),
        connected: Some(
            b.client
                .get()
                .is_some_and(|c| c.connection_state() == async_nats::connection::State::Connected),
        ),
        mailbox: Some(b.names.mailbox().to_string()),
        started_at: Some(b.started.clone()),
        updated_at: Some(chrono::Utc::now().to_rfc3339()),
        present: Some(lock(&c.present).clone()),
        here: Some(here),
        arriving: Some(lock(&b.arriving).clone()),
        claimed: Some(
            lock(&b.claimed)
                .iter()
                .map(|(a, t)| (a.clone(), i64::try_from(*t).unwrap_or(i64::MAX)))
                .collect(),
        ),
        last_error: lock(&c.last_error).clone(),
        outbox: Some(outbox as u64),
        sent: Some(sent as u64),
        exported: Some(sent as u64),
        exported_broadcasts: Some(marked as u64),
        counts: c.snapshot(),
        other: serde_json::Map::new(),
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
