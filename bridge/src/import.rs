//! The importers (spec/bridge.md §4, §5): one per consumer this host pulls from, each writing
//! what it pulls into the mailbox before acknowledging it; and the sharing of this host's
//! broadcast acks with the other hosts.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, anyhow};
use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::{self, AckKind, Context};
use futures::StreamExt as _;
use serde_json::{Value, json};
use sigbox::Imported;

use crate::names::header;
use crate::shared::{Bridge, RETRY, lock};
use crate::streams::setup;

/// How often this host's broadcast acks are looked at, to share the new ones.
pub(crate) const ACKS_EVERY: Duration = Duration::from_millis(300);

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
    c.messages()
        .await
        .map_err(|e| anyhow!("consumer {consumer}: {e}"))
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
    let mut messages = one_at_a_time(b, js, stream, consumer, subject).await?;
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

/// Shares this host's broadcast acks with the other hosts, each once per run (the stream drops
/// what it already has, by id).
pub(crate) async fn ack_export_loop(b: Arc<Bridge>, js: Context) {
    let mut shared: HashSet<(String, String)> = HashSet::new();
    loop {
        let mb = b.mb.clone();
        match tokio::task::spawn_blocking(move || mb.bridge().acks()).await {
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
