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
