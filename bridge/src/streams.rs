//! The server's side, made when missing (spec/bridge.md §2): the work stream, the stream of
//! broadcasts and acks, and the hosts bucket.

use std::time::Duration;

use anyhow::{Result, anyhow};
use async_nats::jetstream::Context;
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};

use crate::names::Names;

/// How the streams and the bucket are made when missing.
pub(crate) struct Setup {
    pub(crate) replicas: usize,
    pub(crate) dedup_window: Duration,
    pub(crate) broadcast_age: Duration,
}

/// Creates what is missing on the server: the two streams and the hosts bucket.
pub(crate) async fn setup(js: &Context, names: &Names, cli: &Setup) -> Result<kv::Store> {
    let mut work = js
        .get_or_create_stream(stream::Config {
            name: names.work_stream(),
            subjects: names.work_subjects(),
            retention: RetentionPolicy::WorkQueue,
            storage: StorageType::File,
            num_replicas: cli.replicas,
            duplicate_window: cli.dedup_window,
            allow_atomic_publish: true,
            ..Default::default()
        })
        .await
        .map_err(|e| anyhow!("stream {}: {e}", names.work_stream()))?;
    allow_atomic(js, &mut work).await;
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
            allow_atomic_publish: true,
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
    allow_atomic(js, &mut all).await;
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

/// Lets a stream an earlier version made take atomic batches (spec/bridge.md §3), where the
/// server can: one that cannot keeps its stream as it is, and the exporter publishes one
/// signal at a time.
async fn allow_atomic(js: &Context, s: &mut stream::Stream) {
    let Ok(info) = s.info().await else { return };
    if info.config.allow_atomic_publish {
        return;
    }
    let mut config = info.config.clone();
    config.allow_atomic_publish = true;
    if let Err(e) = js.update_stream(config).await {
        tracing::info!(stream = %info.config.name, "cannot let the stream take atomic batches ({e}): its signals go one at a time");
    }
}
