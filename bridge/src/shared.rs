//! What the bridge's tasks share: the [`Bridge`] they all hold, its [`Counters`], and the holds
//! that keep an agent's signals back here (spec/bridge.md §5).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use sigbox::Mailbox;
use sigbox::bridge_state::BridgeCounts;

use crate::names::Names;
use crate::streams::Setup;

/// How long a failed step waits before it is tried again.
pub(crate) const RETRY: Duration = Duration::from_millis(500);

/// The field of one count in the state file.
pub(crate) type CountField = fn(&mut BridgeCounts) -> &mut Option<u64>;

/// What the bridge counts, for `status` and `doctor`.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) duplicates_published: AtomicU64,
    pub(crate) imported: AtomicU64,
    pub(crate) already_here: AtomicU64,
    pub(crate) own_broadcasts: AtomicU64,
    pub(crate) acks_imported: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) refused_exports: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) last_error: Mutex<Option<String>>,
    pub(crate) present: Mutex<Vec<String>>,
}

impl Counters {
    /// The counts that run on across restarts, each with its field in the state file. What
    /// was exported is not among them: it is counted from what is durable (see
    /// [`state_of`](crate::state::state_of)).
    pub(crate) fn cumulative(&self) -> [(&AtomicU64, CountField); 8] {
        [
            (&self.duplicates_published, |c| &mut c.duplicates_published),
            (&self.imported, |c| &mut c.imported),
            (&self.already_here, |c| &mut c.already_here),
            (&self.own_broadcasts, |c| &mut c.own_broadcasts),
            (&self.acks_imported, |c| &mut c.acks_imported),
            (&self.refused, |c| &mut c.refused),
            (&self.refused_exports, |c| &mut c.refused_exports),
            (&self.errors, |c| &mut c.errors),
        ]
    }

    /// The counts as the state file holds them.
    pub(crate) fn snapshot(&self) -> BridgeCounts {
        let mut counts = BridgeCounts::default();
        for (counter, field) in self.cumulative() {
            *field(&mut counts) = Some(counter.load(Ordering::Relaxed));
        }
        counts
    }

    /// Runs on from the counts of the last state file (a missing one from 0).
    pub(crate) fn restore(&self, last: &BridgeCounts) {
        let mut last = last.clone();
        for (counter, field) in self.cumulative() {
            counter.store(field(&mut last).unwrap_or(0), Ordering::Relaxed);
        }
    }

    pub(crate) fn error(&self, what: &str, e: &dyn std::fmt::Display) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let msg = format!("{what}: {e}");
        tracing::warn!("{msg}");
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg);
    }
}

/// Everything the tasks share.
pub(crate) struct Bridge {
    pub(crate) mb: Arc<Mailbox>,
    pub(crate) names: Names,
    pub(crate) host: String,
    pub(crate) nats: String,
    pub(crate) ack_wait: Duration,
    pub(crate) linger: Duration,
    pub(crate) counts: Counters,
    /// The agents whose signals are for this host (present now, or lingering and present on
    /// no other host): the exporter leaves their signals here.
    pub(crate) here: Mutex<HashSet<String>>,
    /// Each agent's lock-file mtime when this bridge (or the last on this root) last recorded
    /// it as this host's.
    pub(crate) claimed: Mutex<HashMap<String, i128>>,
    /// When this bridge started, in nanoseconds since the Unix epoch (this host's clock, as
    /// lock-file mtimes are).
    pub(crate) started_ns: i128,
    /// The connection, once made: whether it is up now is in the state.
    pub(crate) client: std::sync::OnceLock<async_nats::Client>,
    /// How the streams are made when missing (again after a server lost them).
    pub(crate) setup: Setup,
    /// Why the bridge stops by itself (another bridge under its host name).
    pub(crate) fatal: Mutex<Option<String>>,
    pub(crate) stop_now: tokio::sync::Notify,
    pub(crate) started: String,
    pub(crate) stop: AtomicBool,
    /// Wakes the exporter: a change in `inputs/` or a buffer, or in which agents are here.
    pub(crate) wake: tokio::sync::Notify,
    /// True while filesystem events wake the exporter.
    pub(crate) watching: AtomicBool,
    /// True once the streams are set up and presence is known: the bridge works.
    pub(crate) ready: AtomicBool,
    /// The pending broadcasts the exporter has no more to do with.
    pub(crate) broadcasts_seen: Arc<Mutex<sigbox::BroadcastsSeen>>,
    /// Export rounds begun, and the last begun that ended without an error (numbered from 1):
    /// a round numbered past a change of `here` saw it.
    pub(crate) rounds_begun: AtomicU64,
    pub(crate) rounds_done: AtomicU64,
    /// Per consumer: the highest stream sequence imported here (`import::note_imported`).
    pub(crate) imported_seq: Mutex<HashMap<String, u64>>,
    /// Per consumer: when this process's last pull of it ended (`import::PULL_EXPIRES`).
    pub(crate) pulls_ended: Mutex<HashMap<String, std::time::Instant>>,
    /// Per consumer: the latest hand-off mark its stream carried (spec/bridge.md §5).
    pub(crate) handed_over: Mutex<HashMap<String, u64>>,
    /// The agents whose signals are held back from them here (`bridge/hold/<agent>`).
    pub(crate) held: Mutex<HashSet<String>>,
    /// The agents this host took whose hand-off is not over (what `status` shows).
    pub(crate) arriving: Mutex<Vec<String>>,
}

/// Holds `agent`'s signals back from it here (`bridge/hold/<agent>`), unless they are
/// already; `note` says why.
pub(crate) fn hold(b: &Bridge, agent: &str, note: &Value) {
    if lock(&b.held).contains(agent) {
        return;
    }
    rehold(b, agent, note);
}

/// Writes `agent`'s hold with `note`, held already or not.
pub(crate) fn rehold(b: &Bridge, agent: &str, note: &Value) {
    let mut bytes = serde_json::to_vec(note).unwrap_or_default();
    bytes.push(b'\n');
    match b.mb.bridge().hold(agent, &bytes) {
        Ok(()) => {
            lock(&b.held).insert(agent.to_string());
        }
        Err(e) => b
            .counts
            .error(&format!("cannot hold back {agent}'s signals"), &e),
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
