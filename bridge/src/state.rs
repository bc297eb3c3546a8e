//! The state writer (spec/bridge.md §7): `bridge/state.json` and this host's entry in the
//! hosts bucket, every second.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::Context;
use sigbox::bridge_state::BridgeState;

use crate::hosts::Hosts;
use crate::shared::{Bridge, lock};
use crate::streams::setup;

/// How often the state file and this host's entry in the bucket are written.
pub(crate) const STATE_EVERY: Duration = Duration::from_secs(1);

/// Writes `bridge/state.json` and this host's entry in the hosts bucket every second.
pub(crate) async fn state_loop(b: Arc<Bridge>, js: Context, hosts: Arc<Hosts>) {
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

/// This host's state, written to `bridge/state.json`; returned.
pub(crate) fn write_state(b: &Bridge, running: bool) -> BridgeState {
    let state = state_of(b, running);
    if let Err(e) = b.mb.bridge().write_state(&state) {
        tracing::warn!("cannot write the bridge's state: {e}");
    }
    state
}

/// This host's state now.
pub(crate) fn state_of(b: &Bridge, running: bool) -> BridgeState {
    let c = &b.counts;
    // Exported: the records in bridge/sent/ and the markers in bridge/broadcasts/, written
    // only once the server acknowledged each (spec/bridge.md §7): never more or less than
    // what is durable, whenever the bridge was killed.
    let (outbox, sent) = b.mb.bridge().counts().unwrap_or_default();
    let marked = b.mb.bridge().broadcasts_marked().unwrap_or_default();
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
