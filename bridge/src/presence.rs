//! The presence watcher (spec/bridge.md §1, §5): which agents are this host's, an importer
//! for each, the hand-off of an agent another host took, and the wait of one this host took.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::anyhow;
use async_nats::HeaderMap;
use async_nats::jetstream::Context;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::hosts::Hosts;
use crate::import::import_loop;
use crate::names::{self, header};
use crate::shared::{Bridge, RETRY, hold, lock, rehold};
use crate::state::write_state;

/// How often presence is looked at.
pub(crate) const PRESENCE_EVERY: Duration = Duration::from_millis(100);

/// How long a host that took an agent from another waits for the other's hand-off before it
/// delivers to the agent anyway (spec/bridge.md §5), while the other's bridge runs.
pub(crate) const HANDOFF_WAIT: Duration = Duration::from_secs(30);

/// How long a host's entry may go unwritten before its bridge counts as not running (as
/// `status` shows it silent).
pub(crate) const SILENT: Duration = Duration::from_secs(10);

/// The consumers `agent`'s signals travel by, with their subjects: its own, and the
/// orchestrator's when it is the orchestrator.
pub(crate) fn consumers_of(b: &Bridge, agent: &str) -> Vec<(String, String)> {
    let mut out = vec![(names::agent_consumer(agent), b.names.agent_subject(agent))];
    if agent == b.mb.orchestrator() {
        out.push((names::ORCH_CONSUMER.to_string(), b.names.orch_subject()));
    }
    out
}

/// What [`look_at_presence`] found: the agents of this host, those present now, and the
/// records this look wrote of agents that were another host's (or nobody's) until then.
pub(crate) struct Presence {
    pub(crate) here: HashSet<String>,
    pub(crate) present: Vec<String>,
    pub(crate) claims: Vec<(String, crate::hosts::Owner)>,
}

/// Which agents are this host's (spec/bridge.md §1): present here now or seen here within
/// `--linger`, and recorded on no other host since (the hosts bucket's `agent.<agent>`, in
/// the server's order); and those present now. Records in the bucket each agent whose presence was taken
/// here since the last look. `None` when presence cannot be read.
pub(crate) async fn look_at_presence(b: &Arc<Bridge>, hosts: &Hosts) -> Option<Presence> {
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
pub(crate) struct Arrival {
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
pub(crate) struct Importer {
    task: JoinHandle<()>,
    stop: tokio::sync::watch::Sender<bool>,
}

/// Starts an importer for each agent present here (and for the orchestrator's signals where
/// it runs), and stops it when the agent leaves; hands over to the host that took an agent
/// what this host held for it; holds back an agent's signals here while it belongs to another
/// host, and, when it comes here, until what went ahead of them is here (spec/bridge.md §5).
pub(crate) async fn presence_loop(b: Arc<Bridge>, js: Context, hosts: Arc<Hosts>) {
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
            match b.mb.bridge().release(&agent) {
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
pub(crate) fn arrive(
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
pub(crate) async fn arrival_over(
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
            } else if !answers(b, from).await {
                Some(format!(
                    "nobody answers for the bridge of {from} (its process is gone)"
                ))
            } else if waited >= Duration::from_secs(1) && !hosts.running(from, SILENT).await {
                Some(format!(
                    "the bridge of {from} does not run (its entry says stopped, or is silent)"
                ))
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
    let fence = a.fence.clone().unwrap_or_default();
    let imported_here = {
        let imported = lock(&b.imported_seq);
        fence
            .iter()
            .all(|(c, seq)| imported.get(c).is_some_and(|s| s >= seq))
    };
    if !imported_here {
        return false;
    }
    // Imported here past the fence is not enough: the old host's importer, before it stopped,
    // may have been delivered earlier messages (a batch, spec/bridge.md §4) and given them
    // back since, unwritten. Every message up to the fence must be acknowledged, by whoever.
    let Ok(stream) = js.get_stream(b.names.work_stream()).await else {
        return false;
    };
    for (consumer, seq) in &fence {
        match stream.consumer_info(consumer).await {
            Ok(info) if info.ack_floor.stream_sequence >= *seq => {}
            _ => return false,
        }
    }
    true
}

/// How long a liveness request waits for its answer: a bridge that runs answers within
/// milliseconds; one stopped (SIGSTOP) or stalled does not, and counts as running.
const ALIVE_WAIT: Duration = Duration::from_millis(500);

/// False only when the server says nobody answers on `host`'s liveness subject: that host's
/// bridge process is gone (its connection closed with it), though its entry may not have gone
/// silent yet (spec/bridge.md §5). A bridge that does not answer in time (stopped, stalled)
/// counts as running, as does any other failure: the entry decides then.
async fn answers(b: &Bridge, host: &str) -> bool {
    let Some(client) = b.client.get() else {
        return true;
    };
    let ask = client.request(b.names.alive_subject(host), Default::default());
    match tokio::time::timeout(ALIVE_WAIT, ask).await {
        Ok(Err(e)) => e.kind() != async_nats::RequestErrorKind::NoResponders,
        Ok(Ok(_)) | Err(_) => true,
    }
}

/// Hands `agent` over to the host that took it by `revision` (spec/bridge.md §5): once its
/// importers here have stopped, the exporter sends on everything this host holds for it (it
/// is not an agent here any more), and then a hand-off mark on each of its subjects tells the
/// new host that nothing more is on its way from here.
pub(crate) async fn hand_off(
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
        match tokio::task::spawn_blocking(move || mb.bridge().holding(&a)).await {
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
