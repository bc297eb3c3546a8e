//! `--channel`: each signal pushed into the session as it arrives, as a Claude Code channel
//! notification (spec/mcp.md "Pushing signals").

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use sigbox_client::Checkpoint;

use crate::stdio::{CLOSE_GRACE, Taken, stdout_taken};

/// `--channel`: waits for signals on its own handle and pushes each as a channel
/// notification; acknowledges them once stdout shows the client read them ([`Taken`]: a pipe
/// drained; a socket still open [`CLOSE_GRACE`] later, or closed with nothing unread), and
/// stops when the connection is gone or the pushes were never read (what it claimed and
/// could not hand over is given again, marked).
pub(crate) async fn push_channel(peer: rmcp::Peer<rmcp::RoleServer>, cp: Checkpoint) {
    use rmcp::model::{CustomNotification, ServerNotification};
    let cp = Arc::new(Mutex::new(cp));
    loop {
        let handle = Arc::clone(&cp);
        let got = tokio::task::spawn_blocking(move || {
            handle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .wait(Some(Duration::from_secs(1)))
        })
        .await;
        let signals = match got {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "channel: a wait failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(_) => return,
        };
        if signals.is_empty() {
            if peer.is_transport_closed() {
                return;
            }
            continue;
        }
        for s in &signals {
            let mut meta = serde_json::Map::new();
            meta.insert("id".into(), json!(s.id));
            meta.insert("type".into(), json!(s.signal_type.as_str()));
            if let Some(f) = &s.from {
                meta.insert("from".into(), json!(f));
            }
            if s.redelivery() > 0 {
                meta.insert("redelivery".into(), json!(s.redelivery().to_string()));
            }
            let content = format!(
                "{}: {}",
                s.signal_type.as_str(),
                s.message.as_deref().unwrap_or("(no message)")
            );
            let n = CustomNotification::new(
                "notifications/claude/channel",
                Some(json!({"content": content, "meta": meta})),
            );
            if peer
                .send_notification(ServerNotification::CustomNotification(n))
                .await
                .is_err()
            {
                return;
            }
        }
        // Written is not read: wait for stdout to show the client took them.
        let since = Instant::now();
        loop {
            match stdout_taken() {
                Taken::Read => break,
                Taken::Unknown if since.elapsed() >= CLOSE_GRACE => break,
                Taken::Unread => {
                    tracing::warn!(
                        "channel: the client left without reading a push: it comes again, \
                         marked, at the agent's next checkpoint"
                    );
                    return;
                }
                Taken::Pending | Taken::Unknown => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        let handle = Arc::clone(&cp);
        let _ = tokio::task::spawn_blocking(move || {
            if let Err(e) = handle.lock().unwrap_or_else(|e| e.into_inner()).ack() {
                tracing::warn!(error = %e, "channel: cannot acknowledge what was pushed");
            }
        })
        .await;
    }
}
