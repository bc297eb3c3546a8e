//! The sharing of this host's broadcast acks with the other hosts (spec/bridge.md §5): each
//! one found under `acks/` once its broadcast was handed over is published, once per run;
//! the importers write those of the other hosts (`import.rs`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::Context;
use serde_json::json;

use crate::names::header;
use crate::shared::Bridge;

/// How often this host's broadcast acks are looked at, to share the new ones.
pub(crate) const ACKS_EVERY: Duration = Duration::from_millis(300);

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
