//! Requests to a person across hosts (spec/asks.md §8, spec/bridge.md §2): the host a request
//! was asked on decides its one outcome. Each bridge publishes the requests asked on its host
//! and their outcomes, and the answers proposed on its host for requests asked elsewhere; it
//! imports the other hosts' requests and outcomes (byte for byte, no clobber) and applies the
//! proposals for its own requests with `answer`'s steps. The files and what is checked are
//! `sigbox::asks` (`remote.rs`); this moves them.
//!
//! | name | what |
//! |---|---|
//! | stream `sigbox_<mailbox>_asks` | limits, file storage, `max_age` `--broadcast-age`: `sigbox.<mailbox>.ask.request`, `.outcome`, `.answer` |
//! | consumer `asks-<host>` | every message of that stream, for one host |

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, anyhow};
use async_nats::HeaderMap;
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use async_nats::jetstream::{self, Context};
use futures::StreamExt as _;
use sigbox::asks::{Asks, ImportedAsk, digest};

use crate::import::{double_ack, one_at_a_time, refuse, retry_later};
use crate::names::header;
use crate::shared::{Bridge, RETRY};

/// How often `asks/` is looked at for what to publish.
pub(crate) const ASKS_EVERY: Duration = Duration::from_millis(200);

/// On a proposal: the host the request was asked on, which applies it.
const HOME: &str = "Sigbox-Home";

fn stream_name(b: &Bridge) -> String {
    format!("sigbox_{}_asks", b.names.mailbox())
}

fn subject(b: &Bridge, what: &str) -> String {
    format!("sigbox.{}.ask.{what}", b.names.mailbox())
}

/// Creates the stream of requests, outcomes and proposals when missing.
pub(crate) async fn setup_asks(b: &Bridge, js: &Context) -> Result<()> {
    js.get_or_create_stream(stream::Config {
        name: stream_name(b),
        subjects: vec![subject(b, ">")],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        num_replicas: b.setup.replicas,
        max_age: b.setup.broadcast_age,
        duplicate_window: b.setup.dedup_window.min(b.setup.broadcast_age),
        ..Default::default()
    })
    .await
    .map_err(|e| anyhow!("stream {}: {e}", stream_name(b)))?;
    Ok(())
}

/// One message to publish: its subject's last token, its de-duplication id, the home of a
/// proposal, the file's bytes.
struct Out {
    what: &'static str,
    msg_id: String,
    home: Option<String>,
    body: Vec<u8>,
}

/// Publishes what this host has to tell the others, every [`ASKS_EVERY`]: its requests, their
/// outcomes, and the proposals made here for requests asked elsewhere that have no outcome
/// here yet. What the server acknowledged is not published again by this run (a restart
/// publishes again: the stream drops what it has, by id, and an import finds it there).
pub(crate) async fn asks_export_loop(b: Arc<Bridge>, js: Context) {
    let mut sent: HashSet<String> = HashSet::new();
    let mut ready = false;
    while !b.stop.load(Ordering::Relaxed) {
        if !ready {
            match setup_asks(&b, &js).await {
                Ok(()) => ready = true,
                Err(e) => b
                    .counts
                    .error("cannot set up the asks stream", &format!("{e:#}")),
            }
        }
        if ready && let Err(e) = export_round(&b, &js, &mut sent).await {
            b.counts.error("asks export", &format!("{e:#}"));
            ready = false;
            tokio::time::sleep(RETRY).await;
        }
        tokio::time::sleep(ASKS_EVERY).await;
    }
}

async fn export_round(b: &Arc<Bridge>, js: &Context, sent: &mut HashSet<String>) -> Result<()> {
    let mb = b.mb.clone();
    let files = tokio::task::spawn_blocking(move || Asks::new(&mb).files()).await??;
    let mut out = Vec::new();
    for f in files {
        match f.home {
            None => {
                out.push(Out {
                    what: "request",
                    msg_id: format!("askreq~{}~{}", f.id, digest(&f.request)),
                    home: None,
                    body: f.request,
                });
                if let Some(o) = f.outcome {
                    out.push(Out {
                        what: "outcome",
                        msg_id: format!("askout~{}~{}", f.id, digest(&o)),
                        home: None,
                        body: o,
                    });
                }
            }
            Some(home) if f.outcome.is_none() => {
                for (pid, body) in f.proposals {
                    out.push(Out {
                        what: "answer",
                        msg_id: format!("askans~{}~{pid}", f.id),
                        home: Some(home.clone()),
                        body,
                    });
                }
            }
            Some(_) => {}
        }
    }
    // Requests before outcomes: a host imports a request before its outcome.
    out.sort_by_key(|o| match o.what {
        "request" => 0,
        "answer" => 1,
        _ => 2,
    });
    out.retain(|o| !sent.contains(&o.msg_id));
    for o in out {
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, o.msg_id.as_str());
        headers.insert(header::HOST, b.host.as_str());
        if let Some(h) = &o.home {
            headers.insert(HOME, h.as_str());
        }
        let ack = js
            .publish_with_headers(subject(b, o.what), headers, o.body.into())
            .await
            .map_err(|e| anyhow!("cannot publish {}: {e}", o.msg_id))?
            .await
            .map_err(|e| anyhow!("no acknowledgement for {}: {e}", o.msg_id))?;
        tracing::debug!(id = %o.msg_id, seq = ack.sequence, duplicate = ack.duplicate, "ask published");
        sent.insert(o.msg_id);
    }
    Ok(())
}

/// Imports every message of the asks stream, one at a time, in the order published: the other
/// hosts' requests and outcomes, and the proposals for this host's requests.
pub(crate) async fn asks_import_loop(b: Arc<Bridge>, js: Context) {
    // Made before the first pull: a fresh server has no such stream yet, which is no error.
    if let Err(e) = setup_asks(&b, &js).await {
        b.counts
            .error("cannot set up the asks stream", &format!("{e:#}"));
    }
    while !b.stop.load(Ordering::Relaxed) {
        if let Err(e) = import_asks(&b, &js).await {
            b.counts
                .error("import of requests to a person", &format!("{e:#}"));
            tokio::time::sleep(RETRY).await;
            if let Err(e) = setup_asks(&b, &js).await {
                b.counts
                    .error("cannot set up the asks stream", &format!("{e:#}"));
            }
        }
    }
}

async fn import_asks(b: &Arc<Bridge>, js: &Context) -> Result<()> {
    let name = stream_name(b);
    let consumer = format!("asks-{}", b.host);
    let mut messages = one_at_a_time(b, js, &name, &consumer, &subject(b, ">")).await?;
    while let Some(m) = messages.next().await {
        let m = m.map_err(|e| anyhow!("consumer {consumer}: {e}"))?;
        import_one(b, &m).await?;
    }
    Ok(())
}

/// One message: written or applied here, then acknowledged; refused for good when it is not
/// what it says; left unacknowledged on a local error, to come again.
async fn import_one(b: &Arc<Bridge>, m: &jetstream::Message) -> Result<()> {
    let get = |h: &str| -> Option<String> {
        m.headers
            .as_ref()
            .and_then(|hs| hs.get(h))
            .map(|v| v.as_str().to_string())
    };
    let from = get(header::HOST).unwrap_or_default();
    if from == b.host {
        return double_ack(m).await;
    }
    let what = m.subject.as_str().rsplit('.').next().unwrap_or_default();
    let body = m.payload.to_vec();
    let mb = b.mb.clone();
    let from_ = from.clone();
    match what {
        "request" | "outcome" => {
            let request = what == "request";
            let done = tokio::task::spawn_blocking(move || {
                let asks = Asks::new(&mb);
                if request {
                    asks.import_request(&from_, &body)
                } else {
                    asks.import_outcome(&body)
                }
            })
            .await?;
            match done {
                Ok(ImportedAsk::Written) => {
                    tracing::info!(%from, what, "imported");
                    double_ack(m).await
                }
                Ok(ImportedAsk::AlreadyHere) => double_ack(m).await,
                Ok(ImportedAsk::Refused(why)) => {
                    refuse(b, m, &format!("{what} from {from} refused: {why}")).await
                }
                Err(e) => retry_later(m, anyhow!("{what} from {from}: {e}")).await,
            }
        }
        "answer" => {
            if get(HOME).as_deref() != Some(b.host.as_str()) {
                return double_ack(m).await;
            }
            let done =
                tokio::task::spawn_blocking(move || Asks::new(&mb).apply_proposal(&body, &from_))
                    .await?;
            match done {
                Ok(Ok(_)) => {
                    tracing::info!(%from, "an answer given on another host taken");
                    double_ack(m).await
                }
                // A second or late answer: refused here as anywhere; its host learns it from
                // the outcome, which the next round publishes.
                Ok(Err(why)) => {
                    tracing::info!(%from, %why, "an answer given on another host refused");
                    double_ack(m).await
                }
                Err(e) => retry_later(m, anyhow!("answer from {from}: {e}")).await,
            }
        }
        other => {
            refuse(
                b,
                m,
                &format!("{other:?} from {from}: not a message of asks"),
            )
            .await
        }
    }
}
