//! The importers (spec/bridge.md §4, §5): one per consumer this host pulls from, each writing
//! what it pulls into the mailbox before acknowledging it, and the broadcast acks other hosts
//! share (`acks.rs` shares this host's).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::{self, AckKind, Context};
use futures::FutureExt as _;
use futures::StreamExt as _;
use serde_json::Value;
use sigbox::Imported;

use crate::names::header;
use crate::shared::{Bridge, RETRY, lock};
use crate::streams::setup;

/// Pulls from one durable consumer and writes each signal into the mailbox, then
/// acknowledges it and waits for the server to confirm the acknowledgement. One signal at a
/// time (`max_ack_pending` 1): after a crash the signal that was not acknowledged comes
/// again before any later one, so each producer's order holds. `stop` ends it between two
/// messages.
pub(crate) async fn import_loop(
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
        // The last pull of this consumer in this process, if any, has no request left on the
        // server.
        let ended = lock(&b.pulls_ended).get(&consumer).copied();
        if let Some(ended) = ended {
            let clear = tokio::time::sleep_until(
                (ended + PULL_EXPIRES + Duration::from_millis(250)).into(),
            );
            match stop.clone() {
                // An importer stopped meanwhile (its agent left) ends at once.
                Some(mut s) => tokio::select! {
                    _ = clear => {}
                    _ = s.wait_for(|s| *s) => return,
                },
                None => clear.await,
            }
        }
        let pulled = import_from(
            &b,
            &js,
            &stream,
            &consumer,
            &subject,
            broadcasts,
            stop.clone(),
        )
        .await;
        lock(&b.pulls_ended).insert(consumer.clone(), Instant::now());
        match pulled {
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

/// The most messages an importer writes as one group before it acknowledges them
/// (spec/bridge.md §4).
pub(crate) const IMPORT_BATCH: usize = 128;

/// Its consumer's `max_ack_pending`: room for the next batch to come while one is written.
pub(crate) const IMPORT_PENDING: usize = 2 * IMPORT_BATCH;

/// The longest a pull request of an importer lives on the server: the consumer's
/// `max_expires`, and what each pull asks for. A pull that ended (an error, a connection made
/// again, an importer stopped) may have left a request on the server, which can still be
/// handed a message nobody reads any more: that message stays unacknowledged until
/// `ack_wait` and comes again after later ones. So no new pull of a consumer begins before
/// the last one's requests have expired; then whatever they were handed is pending, and the
/// new pull waits for it before writing anything later (spec/bridge.md §4).
pub(crate) const PULL_EXPIRES: Duration = Duration::from_secs(2);

/// The messages of `subject` in `stream` through the durable consumer `consumer`: every one
/// from the start, each acknowledged explicitly, one in flight at a time (so their order is
/// kept).
pub(crate) async fn one_at_a_time(
    b: &Bridge,
    js: &Context,
    stream: &str,
    consumer: &str,
    subject: &str,
) -> Result<pull::Stream> {
    let c = durable(b, js, stream, consumer, subject, 1).await?;
    c.messages()
        .await
        .map_err(|e| anyhow!("consumer {consumer}: {e}"))
}

/// The durable consumer `consumer` of `subject` in `stream`: every message from the start,
/// each acknowledged explicitly, at most `max_ack_pending` delivered and not acknowledged. One
/// made with another `max_ack_pending` (an earlier version's 1) is updated; a server that
/// cannot update it keeps its own, which the importers work with too.
async fn durable(
    b: &Bridge,
    js: &Context,
    stream: &str,
    consumer: &str,
    subject: &str,
    max_ack_pending: i64,
) -> Result<async_nats::jetstream::consumer::PullConsumer> {
    let stream = js
        .get_stream(stream)
        .await
        .map_err(|e| anyhow!("stream {stream}: {e}"))?;
    let config = pull::Config {
        durable_name: Some(consumer.to_string()),
        filter_subject: subject.to_string(),
        ack_policy: AckPolicy::Explicit,
        ack_wait: b.ack_wait,
        deliver_policy: DeliverPolicy::All,
        max_ack_pending,
        max_expires: PULL_EXPIRES,
        ..Default::default()
    };
    let c: async_nats::jetstream::consumer::PullConsumer = stream
        .get_or_create_consumer(consumer, config.clone())
        .await
        .map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
    let had = &c.cached_info().config;
    if had.max_ack_pending == max_ack_pending && had.max_expires == PULL_EXPIRES {
        return Ok(c);
    }
    match stream.create_consumer(config).await {
        Ok(c) => Ok(c),
        Err(e) => {
            tracing::info!(%consumer, "cannot update the consumer's max_ack_pending ({e}): kept");
            Ok(c)
        }
    }
}

/// What an earlier pull of a consumer left delivered and not acknowledged when this one began
/// (a bridge killed in the middle of a batch, an acknowledgement lost with the connection, an
/// importer stopped): it comes again once `ack_wait` passes, and nothing after it is written
/// before it is (spec/bridge.md §4).
struct Earlier {
    /// How many messages are still to come again.
    left: usize,
    /// The last stream sequence delivered before this pull began: an earlier message is at
    /// or before it.
    last: u64,
}

impl Earlier {
    fn is_earlier(&self, seq: u64) -> bool {
        self.left > 0 && seq <= self.last
    }
}

/// Records that `consumer`'s messages were imported here up to stream sequence `last`; never
/// lowers what was recorded. Batches do not come in the order of the stream: when an agent
/// moves, the importer of its old host gives back what it had taken and not written, and those
/// messages come here after later ones (in their own order by name, spec/bridge.md §4). A
/// record that went back would keep an arriving agent waiting for ever for a fence it had
/// passed (`presence::arrival_over`); that every message up to the fence was written is the
/// acknowledgement floor's to say.
fn note_imported(seen: &mut HashMap<String, u64>, consumer: &str, last: u64) {
    let at = seen.entry(consumer.to_string()).or_insert(last);
    *at = (*at).max(last);
}

/// True when `m` may have been written on a host already, and taken there: the server
/// delivered it before (its delivery count is over 1) to an importer that did not acknowledge
/// it, which this host cannot tell from one that wrote it and was killed before its
/// acknowledgement reached the server (spec/bridge.md §8). If it is not here already it is
/// written marked as delivered again: wherever its agent takes it,
/// `Signal::redelivery()` says it may have had it. (One that importer had taken and given back
/// unwritten, as an importer that stops gives back what it holds, comes marked too.)
fn maybe_written_elsewhere(m: &jetstream::Message) -> bool {
    m.info().is_ok_and(|i| i.delivered > 1)
}

/// `payload` (a signal's body as it crosses) with `bridged.redelivery` one more than it says;
/// `None` when it is not a body with a `bridged` object (then it is written as it came).
fn marked_again(payload: &[u8]) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let bridged = v.get_mut("bridged")?.as_object_mut()?;
    let count = bridged
        .get("redelivery")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    bridged.insert("redelivery".into(), (count + 1).into());
    let mut out = serde_json::to_vec(&v).ok()?;
    if payload.ends_with(b"\n") {
        out.push(b'\n');
    }
    Some(out)
}

/// A message's stream sequence (0 when its reply subject does not say).
fn seq_of(m: &jetstream::Message) -> u64 {
    m.info().map_or(0, |i| i.stream_sequence)
}

pub(crate) async fn import_from(
    b: &Arc<Bridge>,
    js: &Context,
    stream: &str,
    consumer: &str,
    subject: &str,
    broadcasts: bool,
    mut stop: Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<()> {
    let c = durable(b, js, stream, consumer, subject, IMPORT_PENDING as i64).await?;
    // The connection this pull began on: after a reconnection (a server restarted, whose
    // consumer may deliver later messages before those it had delivered here and not had
    // acknowledged) the consumer is looked at again, as at a start.
    let connects = || {
        b.client
            .get()
            .map_or(0, |c| c.statistics().connects.load(Ordering::SeqCst))
    };
    let connected = connects();
    let info = c
        .get_info()
        .await
        .map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
    let mut earlier = Earlier {
        left: info.num_ack_pending,
        last: info.delivered.stream_sequence,
    };
    // What an earlier pull left (logged: the tests look for it).
    tracing::info!(%consumer, pending = info.num_ack_pending, last = info.delivered.stream_sequence, "importing; what an earlier pull left unacknowledged comes first");
    let mut messages = c
        .stream()
        .max_messages_per_batch(IMPORT_BATCH)
        .expires(PULL_EXPIRES)
        .heartbeat(PULL_EXPIRES / 4)
        .messages()
        .await
        .map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
    // Taken and not written yet, by stream sequence (a message delivered again replaces the
    // delivery it had).
    let mut held: BTreeMap<u64, jetstream::Message> = BTreeMap::new();
    // The acknowledgements of the last run written, sent and not confirmed yet.
    let mut confirming: Option<Confirming> = None;
    let mut look_again = Instant::now() + RETRY;
    let result = async {
        loop {
            // While earlier messages are awaited, the consumer is looked at every half second
            // (whatever comes meanwhile): those another importer acknowledged (an agent's old
            // host, before its hand-off) or that left the stream never come here.
            if earlier.left > 0 && Instant::now() >= look_again {
                let info = c
                    .get_info()
                    .await
                    .map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
                if info.ack_floor.stream_sequence >= earlier.last
                    || info.num_ack_pending <= held.len()
                {
                    earlier.left = 0;
                }
                look_again = Instant::now() + RETRY;
            }
            // Stopped only while waiting for a message: a batch taken is written and
            // acknowledged.
            let wait = if earlier.left > 0 && !held.is_empty() {
                look_again.saturating_duration_since(Instant::now())
            } else if earlier.left > 0 {
                RETRY
            } else {
                Duration::from_secs(3600)
            };
            // A message delivered already is taken at once. Before waiting for one, the last
            // run's acknowledgements are confirmed: an importer that waits, or stops, has
            // nothing unconfirmed, and a confirmation that failed ends the pull at once.
            let now = match &stop {
                Some(s) if *s.borrow() => None,
                _ => messages.next().now_or_never(),
            };
            let next = match now {
                Some(m) => Ok(Some(m)),
                None => {
                    confirmed(&mut confirming).await?;
                    tokio::time::timeout(wait, async {
                        match stop.as_mut() {
                            Some(stop) => tokio::select! {
                                biased;
                                _ = stop.wait_for(|s| *s) => None,
                                m = messages.next() => Some(m),
                            },
                            None => Some(messages.next().await),
                        }
                    })
                    .await
                }
            };
            match next {
                Err(_) => continue,
                Ok(None) | Ok(Some(None)) => return Ok(()),
                Ok(Some(Some(m))) => {
                    let m = m.map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
                    held.insert(seq_of(&m), m);
                }
            }
            // What else has come meanwhile joins the batch: nothing is waited for.
            while held.len() < IMPORT_BATCH {
                match messages.next().now_or_never() {
                    Some(Some(m)) => {
                        let m = m.map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
                        held.insert(seq_of(&m), m);
                    }
                    _ => break,
                }
            }
            let ready: Vec<(u64, jetstream::Message)> = if earlier.left > 0 {
                // All of them, or none yet: they come again in more than one go (those this
                // process gave back at once, those a dead pull was handed after `ack_wait`),
                // and not in the order of the stream. One written before an earlier one had
                // come would be delivered before it.
                if held.range(..=earlier.last).count() < earlier.left {
                    Vec::new()
                } else {
                    let later = held.split_off(&earlier.last.saturating_add(1));
                    std::mem::replace(&mut held, later).into_iter().collect()
                }
            } else {
                std::mem::take(&mut held).into_iter().collect()
            };
            if connects() != connected {
                held.extend(ready);
                return Err(anyhow!(
                    "consumer {consumer}: the connection was made again: its consumer is looked at again"
                ));
            }
            let Some(&(last, _)) = ready.last() else {
                continue;
            };
            let came_again = ready.iter().filter(|(s, _)| earlier.is_earlier(*s)).count();
            let batch: Vec<jetstream::Message> = ready.into_iter().map(|(_, m)| m).collect();
            import_batch(b, batch, consumer, broadcasts, &mut confirming).await?;
            earlier.left = earlier.left.saturating_sub(came_again);
            note_imported(&mut lock(&b.imported_seq), consumer, last);
        }
    }
    .await;
    // Nothing ends with acknowledgements unconfirmed (an importer that stops for a hand-off
    // has its batches written and acknowledged); the first error is the one returned.
    let last = confirmed(&mut confirming).await;
    let result = match (result, last) {
        (Err(e), Err(also)) => {
            b.counts
                .error(&format!("import from {consumer}"), &format!("{also:#}"));
            Err(e)
        }
        (result, last) => result.and(last),
    };
    // What was taken and not written comes again at once, in order, for this importer or for
    // the next (another host's, after a hand-off).
    while let Some(Some(Ok(m))) = messages.next().now_or_never() {
        held.insert(seq_of(&m), m);
    }
    for m in held.into_values() {
        let _ = m.ack_with(AckKind::Nak(None)).await;
    }
    result
}

/// The confirmations of one run's acknowledgements, sent together (spec/bridge.md §4): they
/// proceed while the next batch is written.
type Confirming = tokio::task::JoinHandle<Result<()>>;

/// Waits for the confirmations of the acknowledgements in flight, if any: an error when one
/// was not confirmed.
async fn confirmed(confirming: &mut Option<Confirming>) -> Result<()> {
    match confirming.take() {
        Some(c) => c.await?,
        None => Ok(()),
    }
}

/// Writes a batch of messages taken from `consumer`, in order (spec/bridge.md §4): the runs of
/// signals as one group each (written, `inputs/` fsynced once), each run acknowledged once it
/// is durable, its confirmations awaited once the next run is written (in `confirming`); the
/// other messages (hand-off marks, shared acks, this host's own broadcasts, refusals) one by
/// one in their place, once every acknowledgement before them is confirmed. On a local error,
/// what was not acknowledged comes again after a pause, and the error is returned.
async fn import_batch(
    b: &Arc<Bridge>,
    batch: Vec<jetstream::Message>,
    consumer: &str,
    broadcasts: bool,
    confirming: &mut Option<Confirming>,
) -> Result<()> {
    let mut run: Vec<(jetstream::Message, String, String)> = Vec::new();
    let mut rest = batch.into_iter();
    loop {
        let next = rest.next();
        if let Some(m) = &next {
            let from = header_of(m, header::HOST).unwrap_or_else(|| "an unnamed host".into());
            let plain = m.subject.as_str() != b.names.ack_subject()
                && !(broadcasts && from == b.host)
                && (broadcasts || header_of(m, header::HANDOFF).is_none());
            if let (true, Some(name)) = (plain, header_of(m, header::NAME)) {
                if let Some(m) = next {
                    run.push((m, name, from));
                }
                continue;
            }
        }
        if let Err(e) = import_run(b, std::mem::take(&mut run), confirming).await {
            // Nothing after the run's failure is acknowledged: it all comes again.
            for m in next.into_iter().chain(rest) {
                let _ = m.ack_with(AckKind::Nak(Some(RETRY * 2))).await;
            }
            return Err(e);
        }
        let Some(m) = next else { return Ok(()) };
        if let Err(e) = confirmed(confirming).await {
            for m in std::iter::once(m).chain(rest) {
                let _ = m.ack_with(AckKind::Nak(Some(RETRY * 2))).await;
            }
            return Err(e);
        }
        if let Err(e) = import_one(b, &m, consumer, broadcasts).await {
            for m in rest {
                let _ = m.ack_with(AckKind::Nak(Some(RETRY * 2))).await;
            }
            return Err(e);
        }
    }
}

/// One run of signals from a batch: written as one group, then acknowledged together once the
/// group is durable (refused ones terminated). The confirmations of the run before are awaited
/// then, and this run's are left in `confirming`: the server confirms them while the next batch
/// is written. What a local error stopped is not acknowledged: it comes again after a pause;
/// what came before it is acknowledged and confirmed before the error is returned.
async fn import_run(
    b: &Arc<Bridge>,
    run: Vec<(jetstream::Message, String, String)>,
    confirming: &mut Option<Confirming>,
) -> Result<()> {
    if run.is_empty() {
        return Ok(());
    }
    let mb = b.mb.clone();
    // What the server gave before to another importer is written marked (when it is not here
    // already: then nothing is written).
    let items: Vec<(String, Vec<u8>)> = run
        .iter()
        .map(|(m, name, _)| {
            let marked = maybe_written_elsewhere(m)
                .then(|| marked_again(&m.payload))
                .flatten();
            let payload = match marked {
                Some(marked) => {
                    tracing::debug!(%name, seq = seq_of(m), "delivered before to an importer that did not acknowledge it: marked as delivered again if written");
                    marked
                }
                None => m.payload.to_vec(),
            };
            (name.clone(), payload)
        })
        .collect();
    let (done, end) = tokio::task::spawn_blocking(move || {
        let items: Vec<(&str, &[u8])> = items.iter().map(|(n, p)| (n.as_str(), &p[..])).collect();
        mb.bridge().import_batch(&items)
    })
    .await?;
    let mut acks = Vec::with_capacity(done.len());
    let mut run = run.into_iter();
    for (imported, (m, name, from)) in done.into_iter().zip(run.by_ref()) {
        match imported {
            Imported::Written => {
                tracing::debug!(%name, %from, seq = seq_of(&m), "imported");
                b.counts.imported.fetch_add(1, Ordering::Relaxed);
                acks.push((m, None));
            }
            Imported::Here => {
                tracing::debug!(%name, %from, seq = seq_of(&m), "already here");
                b.counts.already_here.fetch_add(1, Ordering::Relaxed);
                acks.push((m, None));
            }
            Imported::Refused(why) => {
                acks.push((m, Some(format!("{name} from {from} refused: {why}"))));
            }
        }
    }
    let before = confirmed(confirming).await;
    let bridge = b.clone();
    let confirm = tokio::spawn(async move {
        let b = &bridge;
        let confirmed = futures::future::join_all(acks.iter().map(|(m, why)| async move {
            match why {
                None => double_ack(m).await,
                Some(why) => refuse(b, m, why).await,
            }
        }))
        .await;
        confirmed.into_iter().collect::<Result<()>>()
    });
    if let Err(e) = end {
        // What was acknowledged is confirmed (or comes again, found here) before the error
        // ends the pull: the error returned is the write's, the others are logged.
        for r in [
            before,
            confirm.await.map_err(anyhow::Error::from).and_then(|r| r),
        ] {
            if let Err(e) = r {
                b.counts.error("import", &format!("{e:#}"));
            }
        }
        // The signal it concerns, when one of the run: nothing written of it or after it.
        let failed = run.as_slice().first().map(|(_, name, _)| name.clone());
        for (m, _, _) in run {
            let _ = m.ack_with(AckKind::Nak(Some(RETRY * 2))).await;
        }
        return Err(match failed {
            Some(name) => anyhow!("{name}: {e}"),
            None => anyhow!("{e}"),
        });
    }
    *confirming = Some(confirm);
    before
}

fn header_of(m: &jetstream::Message, h: &str) -> Option<String> {
    m.headers
        .as_ref()
        .and_then(|hs| hs.get(h))
        .map(|v| v.as_str().to_string())
}

/// One signal from the stream: written (or found here already), then acknowledged; refused
/// for good when it is not a signal; left unacknowledged on a local error, to come again.
/// A hand-off mark is noted for `consumer` and acknowledged.
pub(crate) async fn import_one(
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
    let imported = tokio::task::spawn_blocking(move || mb.bridge().import(&n, &payload)).await?;
    match imported {
        Ok(Imported::Written) => {
            tracing::debug!(%name, %from, seq = seq_of(m), "imported");
            b.counts.imported.fetch_add(1, Ordering::Relaxed);
            double_ack(m).await
        }
        Ok(Imported::Here) => {
            tracing::debug!(%name, %from, seq = seq_of(m), "already here");
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
pub(crate) async fn import_ack(b: &Arc<Bridge>, m: &jetstream::Message, from: &str) -> Result<()> {
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
    match tokio::task::spawn_blocking(move || mb.bridge().import_ack(&id_, &agent_, &from_)).await?
    {
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

/// Refuses a message for good (terminated: never delivered again), counted and logged.
pub(crate) async fn refuse(b: &Bridge, m: &jetstream::Message, why: &str) -> Result<()> {
    b.counts.refused.fetch_add(1, Ordering::Relaxed);
    b.counts.error("import", &why);
    m.ack_with(AckKind::Term)
        .await
        .map_err(|e| anyhow!("cannot acknowledge: {e}"))
}

/// Leaves a message unacknowledged after a local error: the server delivers it again after a
/// pause. Returns the error.
pub(crate) async fn retry_later(m: &jetstream::Message, e: anyhow::Error) -> Result<()> {
    let _ = m.ack_with(AckKind::Nak(Some(RETRY * 2))).await;
    Err(e)
}

pub(crate) async fn double_ack(m: &jetstream::Message) -> Result<()> {
    m.double_ack()
        .await
        .map_err(|e| anyhow!("acknowledgement not confirmed: {e}"))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::note_imported;

    #[test]
    fn what_was_imported_never_goes_back() {
        let mut seen = HashMap::new();
        // An agent's new host imports 295..=301, then what its old host gave back, 246..=294.
        for last in [301, 294, 250, 302] {
            note_imported(&mut seen, "to-Mover2", last);
        }
        assert_eq!(seen["to-Mover2"], 302);
        note_imported(&mut seen, "to-Other", 7);
        assert_eq!((seen["to-Mover2"], seen["to-Other"]), (302, 7));
    }
}
