//! The exporter (spec/bridge.md §3): takes what no agent of this host can take, publishes it,
//! and marks each exported once the server acknowledged it; woken by filesystem events.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, anyhow};
use async_nats::HeaderMap;
use async_nats::jetstream::Context;
use serde_json::json;
use sigbox::Outgoing;
use sigbox_client::Woke;

use crate::names::header;
use crate::shared::{Bridge, RETRY, hold, lock};
use crate::streams::setup;

/// How many signals one export round takes and publishes before waiting for their acks.
pub(crate) const EXPORT_BATCH: usize = 256;

/// Room left for a message's headers under the server's `max_payload`.
pub(crate) const HEADROOM: usize = 1024;

/// How long the exporter sleeps when nothing was waiting and no filesystem events come (a
/// network or FUSE filesystem).
pub(crate) const EXPORT_IDLE: Duration = Duration::from_millis(20);

/// How long the exporter sleeps when nothing was waiting, with filesystem events: a file
/// written in place settles, an agent leaves.
pub(crate) const EXPORT_BACKSTOP: Duration = Duration::from_secs(1);

/// Takes what no agent here can take and publishes it; marks each exported once the server
/// acknowledged it.
pub(crate) async fn export_loop(b: Arc<Bridge>, js: Context) {
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

/// Wakes the exporter on the changes in `inputs/` and the buffers (inotify) that can give it
/// something to take, from a thread of its own; without events (a network filesystem), the
/// exporter polls. A change that can give it nothing (a staging file, a signal for an agent
/// here: `BridgeSide::no_export_work`) does not wake it, so a flood of signals imported for
/// the agents here does not list `inputs/` again at each; it is woken at least once per
/// [`EXPORT_BACKSTOP`] all the same.
pub(crate) fn watch_inputs(b: &Arc<Bridge>) {
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
        let mut woken = std::time::Instant::now();
        while !b.stop.load(Ordering::Relaxed) {
            let round = match watch.wait_for(EXPORT_BACKSTOP) {
                Woke::Died => {
                    b.watching.store(false, Ordering::Relaxed);
                    b.wake.notify_one();
                    return;
                }
                Woke::Changed(paths) => {
                    let here = lock(&b.here);
                    let here = |a: &str| here.contains(a);
                    !paths.iter().all(|p| b.mb.bridge().no_export_work(p, &here))
                }
                Woke::Unknown | Woke::Timeout => true,
            };
            // Files renamed in whole are read at once, as a waiting agent reads them.
            for p in watch.take_arrivals() {
                b.mb.arrived_whole(&p);
            }
            if round || woken.elapsed() >= EXPORT_BACKSTOP {
                woken = std::time::Instant::now();
                b.wake.notify_one();
            }
        }
    });
}

/// One round: what the outbox holds (a round that failed, or a bridge that stopped), then
/// what is newly pending. Publishes them all, then waits for each acknowledgement in order.
pub(crate) async fn export_round(b: &Arc<Bridge>, js: &Context) -> Result<usize> {
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
        let mut out = mb.bridge().outbox(&host)?;
        if out.len() < EXPORT_BATCH {
            let here = |a: &str| here.contains(a);
            let mut seen = lock(&seen);
            out.extend(
                mb.bridge()
                    .take(&host, EXPORT_BATCH - out.len(), &here, &mut seen)?,
            );
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
        tokio::task::spawn_blocking(move || mb.bridge().refuse(&o, &host, &reason)).await??;
    }
    if out.is_empty() {
        return done(1);
    }
    let n = out.len();
    let (acked, failed) = publish_in_order(b, js, out).await;
    // An agent whose signals left this host is held back here from now on: should it come
    // here, it takes nothing before what went ahead of it (spec/bridge.md §5).
    let away: HashSet<String> = acked
        .iter()
        .filter_map(|o| {
            b.mb.bridge()
                .consumer_agent(o.signal_type, &o.target)
                .map(str::to_string)
        })
        .collect();
    let mb = b.mb.clone();
    tokio::task::spawn_blocking(move || mb.bridge().exported(&acked)).await??;
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

/// Publishes a round's signals, each stream's in their order, and returns those the server
/// stored (in order) and the error that stopped the rest (spec/bridge.md §3). Each stream's
/// share goes as atomic batches (JetStream's ADR-50: stored whole at its last message, or
/// not at all) of at most [`BATCH_BYTES`], each sent once the one before it is stored, so
/// that a connection lost in the middle of a round (a server restarted, a network lost) can
/// never leave a later signal stored and an earlier one not:
/// the client sends again, on the new connection, what it had not written yet, and a
/// round's signals published one by one without waiting could be stored out of order. A
/// server that takes no batches (before 2.12, or a stream made without `allow_atomic`), and
/// a batch refused because the server has some of it already (a round published again after
/// its acknowledgement was lost), are published one at a time instead, each after the
/// server stored the one before: the stream drops what it has, by id.
async fn publish_in_order(
    b: &Bridge,
    js: &Context,
    out: Vec<Outgoing>,
) -> (Vec<Outgoing>, Option<anyhow::Error>) {
    let broadcast = b.names.broadcast_subject();
    let (broadcasts, signals): (Vec<Outgoing>, Vec<Outgoing>) = out
        .into_iter()
        .partition(|o| b.names.subject_for(o.signal_type, &o.target) == broadcast);
    let mut acked = Vec::new();
    let mut failed = None;
    for group in [signals, broadcasts] {
        if group.is_empty() {
            continue;
        }
        // Batches of at most BATCH_BYTES, one after the other: a batch is sent once the one
        // before it is stored, so what is stored is always a prefix of the group.
        let mut stored = 0;
        let mut err = None;
        while stored < group.len() && err.is_none() {
            let mut end = stored + 1;
            let mut bytes = group[stored].body.len();
            while end < group.len() && bytes + group[end].body.len() <= BATCH_BYTES {
                bytes += group[end].body.len();
                end += 1;
            }
            let chunk = &group[stored..end];
            match publish_batch(b, chunk).await {
                Batch::Stored => stored = end,
                Batch::Failed(e) => err = Some(e),
                Batch::OneByOne { stored: first } => {
                    let (n, e) = publish_one_by_one(b, js, &chunk[first..]).await;
                    stored += first + n;
                    err = e;
                }
            }
        }
        acked.extend(group.into_iter().take(stored));
        if failed.is_none() {
            failed = err;
        }
    }
    (acked, failed)
}

/// The most bytes of signals one atomic batch carries: the server holds a batch in memory
/// until its last message comes.
const BATCH_BYTES: usize = 8 << 20;

/// What became of an atomic batch.
enum Batch {
    /// The server stored it whole.
    Stored,
    /// Nothing of it was stored.
    Failed(anyhow::Error),
    /// It is to be published one by one from its `stored`th signal (the server stored those
    /// before it as plain messages: one that takes no batches).
    OneByOne { stored: usize },
}

/// The headers of a signal a bridge publishes.
fn headers_of(b: &Bridge, o: &Outgoing) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, o.msg_id.as_str());
    headers.insert(header::NAME, o.file_name.as_str());
    headers.insert(header::HOST, b.host.as_str());
    headers.insert(header::ID, o.id.as_str());
    headers
}

/// What a JetStream reply says: `Ok(None)` for the empty reply that acknowledges a batch's
/// message, `Ok(Some(ack))` for a publish acknowledgement, `Err((code, text))` for an error.
fn reply_of(payload: &[u8]) -> std::result::Result<Option<serde_json::Value>, (u64, String)> {
    if payload.is_empty() {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| (0, format!("a reply that is not JSON ({e})")))?;
    match v.get("error") {
        Some(err) => Err((
            err["err_code"].as_u64().unwrap_or(0),
            err["description"]
                .as_str()
                .unwrap_or("no description")
                .to_string(),
        )),
        None => Ok(Some(v)),
    }
}

/// The server's error codes a batch can meet (JetStream's ADR-50).
const ATOMIC_PUBLISH_DISABLED: u64 = 10174;
const ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE: u64 = 10201;

/// Publishes `group` (one stream's signals, in order) as one atomic batch: its first message
/// as a request (the server answers that the batch began), the others without a reply, its
/// last with the commit, whose acknowledgement says the batch is stored whole.
async fn publish_batch(b: &Bridge, group: &[Outgoing]) -> Batch {
    let Some(client) = b.client.get() else {
        return Batch::OneByOne { stored: 0 };
    };
    if group.len() == 1 {
        return Batch::OneByOne { stored: 0 };
    }
    // A unique id: the client's own unique token (a NUID) from a fresh inbox name.
    let inbox = client.new_inbox();
    let id = inbox.rsplit('.').next().unwrap_or(&inbox).to_string();
    let n = group.len();
    for (i, o) in group.iter().enumerate() {
        let mut headers = headers_of(b, o);
        headers.insert(async_nats::header::NATS_BATCH_ID, id.as_str());
        headers.insert(
            async_nats::header::NATS_BATCH_SEQUENCE,
            (i + 1).to_string().as_str(),
        );
        let subject = b.names.subject_for(o.signal_type, &o.target);
        if i == 0 || i + 1 == n {
            if i + 1 == n {
                headers.insert(
                    async_nats::header::NATS_BATCH_COMMIT,
                    async_nats::header::NATS_BATCH_COMMIT_FINAL,
                );
            }
            let reply = match client
                .request_with_headers(subject, headers, o.body.clone().into())
                .await
            {
                Ok(m) => reply_of(&m.payload),
                Err(e) => return Batch::Failed(anyhow!("cannot publish {}: {e}", o.id)),
            };
            match reply {
                // The batch began.
                Ok(None) if i == 0 => {}
                // A server that knows no batches stored the first as a plain message.
                Ok(Some(ack)) if i == 0 && ack.get("batch").is_none() => {
                    tracing::info!("the server takes no atomic batches: publishing one by one");
                    return Batch::OneByOne { stored: 1 };
                }
                Ok(Some(ack)) if i + 1 == n => {
                    let count = ack["count"].as_u64();
                    if count != Some(n as u64) {
                        return Batch::Failed(anyhow!(
                            "a batch of {n} acknowledged as {count:?} stored"
                        ));
                    }
                    tracing::debug!(batch = %id, n, seq = ack["seq"].as_u64(), first = %group[0].id, last = %group[n - 1].id, "exported a batch");
                    return Batch::Stored;
                }
                Ok(_) => {
                    return Batch::Failed(anyhow!(
                        "an unexpected reply to message {} of a batch of {n}",
                        i + 1
                    ));
                }
                Err((ATOMIC_PUBLISH_DISABLED, _)) if i == 0 => {
                    tracing::info!("the stream takes no atomic batches: publishing one by one");
                    return Batch::OneByOne { stored: 0 };
                }
                Err((ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE, _)) => {
                    // Some of it is in the stream already: one by one, the stream drops those.
                    tracing::info!(
                        n,
                        first = %group[0].id,
                        "a batch holds signals the stream has already: publishing it one at a time"
                    );
                    return Batch::OneByOne { stored: 0 };
                }
                Err((code, why)) => {
                    return Batch::Failed(anyhow!(
                        "a batch of {n} from {} refused: {why} ({code})",
                        group[0].id
                    ));
                }
            }
        } else if let Err(e) = client
            .publish_with_headers(subject, headers, o.body.clone().into())
            .await
        {
            return Batch::Failed(anyhow!("cannot publish {}: {e}", o.id));
        }
    }
    Batch::Failed(anyhow!("an empty batch"))
}

/// Publishes `group` one signal at a time, each once the server stored the one before;
/// returns how many were stored, and the error that stopped the rest.
async fn publish_one_by_one(
    b: &Bridge,
    js: &Context,
    group: &[Outgoing],
) -> (usize, Option<anyhow::Error>) {
    for (i, o) in group.iter().enumerate() {
        let subject = b.names.subject_for(o.signal_type, &o.target);
        let ack = match js
            .publish_with_headers(subject, headers_of(b, o), o.body.clone().into())
            .await
        {
            Ok(f) => f.await,
            Err(e) => return (i, Some(anyhow!("cannot publish {}: {e}", o.id))),
        };
        match ack {
            Ok(ack) => {
                if ack.duplicate {
                    b.counts
                        .duplicates_published
                        .fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(id = %o.id, seq = ack.sequence, duplicate = ack.duplicate, "exported");
            }
            Err(e) => return (i, Some(anyhow!("no acknowledgement for {}: {e}", o.id))),
        }
    }
    (group.len(), None)
}
