//! The hosts bucket (spec/bridge.md §2, §1): each bridge's entry under `host.<host>`, which
//! one process at a time may write (a second bridge under the same host name is refused), and
//! under `agent.<agent>` the host an agent last took its presence on, in the server's order,
//! so that an agent that polls now and then belongs to the host it polled on last, whatever
//! the hosts' clocks say.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use async_nats::jetstream::kv;
use futures::StreamExt as _;
use serde_json::{Value, json};

/// How long a bridge watches another's entry under its own host name before taking it: three
/// of that bridge's state writes, with room for a loaded machine.
const CLASH_WATCH: Duration = Duration::from_millis(3500);

pub(crate) struct Hosts {
    kv: kv::Store,
    host: String,
    /// This process's mark in its entry.
    instance: String,
    /// The revision of this host's entry as this process last wrote it.
    revision: Mutex<u64>,
    /// Agent → the host it last took its presence on.
    owners: Mutex<HashMap<String, Owner>>,
}

/// The host an agent last took its presence on (`agent.<agent>`), and from which host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The host it belongs to.
    pub(crate) host: String,
    /// The revision of the record, in the server's order.
    pub(crate) revision: u64,
    /// The host it came from when it last changed hosts (none: from nowhere), which hands
    /// it over; a host that records an agent of its own again keeps it.
    pub(crate) from: Option<String>,
}

/// Another bridge wrote this host's entry: two bridges run under one host name.
#[derive(Debug)]
pub(crate) struct Clash(pub(crate) String);

impl std::fmt::Display for Clash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Clash {}

pub(crate) fn host_key(host: &str) -> String {
    format!("host.{host}")
}

fn agent_key(agent: &str) -> String {
    format!("agent.{agent}")
}

impl Hosts {
    /// Takes this host's entry: refused when another bridge under the same host name wrote it
    /// within the last two seconds.
    pub(crate) async fn open(kv: kv::Store, host: &str, first: Value) -> Result<Hosts> {
        let instance = format!("{}-{:x}", std::process::id(), rand_u64());
        let key = host_key(host);
        let mut state = first;
        state["instance"] = json!(instance);
        let bytes = serde_json::to_vec(&state)?;
        let revision = match kv.entry(&key).await.map_err(|e| anyhow!("{key}: {e}"))? {
            None => kv
                .create(&key, bytes.clone().into())
                .await
                .map_err(|e| anyhow!("{key}: {e}"))?,
            Some(e) => {
                let other: Value = serde_json::from_slice(&e.value).unwrap_or(Value::Null);
                let mut rev = e.revision;
                if other["running"] == true && e.operation == kv::Operation::Put {
                    // Its last word was "running": alive, or killed. Alive writes again
                    // within a second.
                    tokio::time::sleep(CLASH_WATCH).await;
                    let now = kv.entry(&key).await.map_err(|e| anyhow!("{key}: {e}"))?;
                    if let Some(n) = now.filter(|n| n.revision != e.revision) {
                        let pid = serde_json::from_slice::<Value>(&n.value)
                            .map(|v| v["pid"].clone())
                            .unwrap_or(Value::Null);
                        bail!(
                            "another bridge runs as host {host:?} on this server (pid {pid} \
                             there): give this one its own --host"
                        );
                    }
                }
                rev = kv
                    .update(&key, bytes.into(), rev)
                    .await
                    .map_err(|e| anyhow!("{key}: {e}"))?;
                rev
            }
        };
        Ok(Hosts {
            kv,
            host: host.to_string(),
            instance,
            revision: Mutex::new(revision),
            owners: Mutex::default(),
        })
    }

    /// Writes this host's entry; a [`Clash`] when another process wrote it meanwhile.
    pub(crate) async fn publish(&self, mut state: Value) -> Result<()> {
        state["instance"] = json!(self.instance);
        let bytes = serde_json::to_vec(&state)?;
        let rev = *lock(&self.revision);
        match self
            .kv
            .update(host_key(&self.host), bytes.into(), rev)
            .await
        {
            Ok(r) => {
                *lock(&self.revision) = r;
                Ok(())
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                self.recover(state).await
            }
            Err(e) => Err(anyhow!("{}: {e}", host_key(&self.host))),
        }
    }

    /// After a write refused for its revision: this process's own earlier write the server
    /// applied late (a stall, a timeout), or an entry a wiped server no longer has, is taken
    /// up again; only another process's entry is a [`Clash`].
    async fn recover(&self, state: Value) -> Result<()> {
        let key = host_key(&self.host);
        let bytes = serde_json::to_vec(&state)?;
        let entry = self
            .kv
            .entry(&key)
            .await
            .map_err(|e| anyhow!("{key}: {e}"))?;
        let rev = match entry {
            Some(e) if e.operation == kv::Operation::Put => {
                let theirs: Value = serde_json::from_slice(&e.value).unwrap_or(Value::Null);
                if theirs["instance"] != json!(self.instance) {
                    return Err(anyhow::Error::new(Clash(format!(
                        "another bridge (pid {} there) wrote the entry of host {:?}: two \
                         bridges run under one host name; this one stops (give each its own \
                         --host)",
                        theirs["pid"], self.host
                    ))));
                }
                self.kv
                    .update(&key, bytes.into(), e.revision)
                    .await
                    .map_err(|e| anyhow!("{key}: {e}"))?
            }
            // Gone (a wiped or replaced server, a deleted bucket): written anew.
            _ => self
                .kv
                .put(&key, bytes.into())
                .await
                .map_err(|e| anyhow!("{key}: {e}"))?,
        };
        *lock(&self.revision) = rev;
        Ok(())
    }

    /// Records that `agent` took its presence on this host now, over the record it replaces
    /// (compare and set, so that the host it is taken from is known exactly): the record, and
    /// whether it was another host's (or nobody's) until now.
    pub(crate) async fn claim_agent(&self, agent: &str) -> Result<(Owner, bool)> {
        let key = agent_key(agent);
        let mut known = lock(&self.owners).get(agent).cloned();
        for _ in 0..8 {
            // A deleted record counts as none; one of this host keeps where it came from.
            let taken = known.as_ref().is_none_or(|o| o.host != self.host);
            let from = match &known {
                Some(o) if o.host == self.host => o.from.clone(),
                Some(o) => Some(o.host.clone()).filter(|h| !h.is_empty()),
                None => None,
            };
            let v = json!({"host": self.host, "from": from, "at": chrono::Utc::now().to_rfc3339()});
            let bytes = serde_json::to_vec(&v)?;
            let written = match &known {
                Some(o) => self
                    .kv
                    .update(&key, bytes.into(), o.revision)
                    .await
                    .map_err(|e| anyhow!("{key}: {e}")),
                None => self
                    .kv
                    .create(&key, bytes.into())
                    .await
                    .map_err(|e| anyhow!("{key}: {e}")),
            };
            match written {
                Ok(revision) => {
                    let mine = Owner {
                        host: self.host.clone(),
                        revision,
                        from,
                    };
                    self.learn(agent, mine.clone());
                    return Ok((mine, taken));
                }
                // Another host recorded it meanwhile (or the server lost the bucket): over the
                // record as it is now.
                Err(written) => {
                    known = match self.kv.entry(&key).await {
                        Ok(Some(e)) if e.operation == kv::Operation::Put => {
                            let v: Value = serde_json::from_slice(&e.value).unwrap_or(Value::Null);
                            Some(Owner {
                                host: v["host"].as_str().unwrap_or_default().to_string(),
                                revision: e.revision,
                                from: v["from"].as_str().map(str::to_string),
                            })
                        }
                        // Deleted: replaced from nowhere.
                        Ok(Some(e)) => Some(Owner {
                            host: String::new(),
                            revision: e.revision,
                            from: None,
                        }),
                        Ok(None) => None,
                        Err(_) => return Err(written),
                    };
                }
            }
        }
        Err(anyhow!("{key}: changed by other hosts at every attempt"))
    }

    /// Takes `owner` as `agent`'s record, unless a later one is known.
    fn learn(&self, agent: &str, owner: Owner) {
        let mut owners = lock(&self.owners);
        if owners
            .get(agent)
            .is_none_or(|o| o.revision < owner.revision)
        {
            owners.insert(agent.to_string(), owner);
        }
    }

    /// The host `agent` last took its presence on, as far as this bridge has heard.
    pub(crate) fn owner(&self, agent: &str) -> Option<String> {
        lock(&self.owners).get(agent).map(|o| o.host.clone())
    }

    /// Every agent's record, as far as this bridge has heard.
    pub(crate) fn owners(&self) -> HashMap<String, Owner> {
        lock(&self.owners).clone()
    }

    /// True when `host`'s bridge runs: its entry says running and was written within
    /// `within` by this machine's clock. False when it cannot be read.
    pub(crate) async fn running(&self, host: &str, within: Duration) -> bool {
        let Ok(Some(e)) = self.kv.entry(host_key(host)).await else {
            return false;
        };
        let v: Value = serde_json::from_slice(&e.value).unwrap_or(Value::Null);
        let fresh = v["updated_at"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|t| {
                chrono::Utc::now()
                    .signed_duration_since(t)
                    .to_std()
                    .unwrap_or_default()
                    < within
            });
        e.operation == kv::Operation::Put && v["running"] == true && fresh
    }

    /// Reads every `agent.<agent>` record now: what the watch says comes later, and a bridge
    /// that starts must not take for its own an agent another host took meanwhile.
    pub(crate) async fn load_owners(&self) -> Result<()> {
        let mut keys = self
            .kv
            .keys()
            .await
            .map_err(|e| anyhow!("listing agent.*: {e}"))?;
        let mut agents = Vec::new();
        while let Some(k) = keys.next().await {
            let k = k.map_err(|e| anyhow!("listing agent.*: {e}"))?;
            if let Some(agent) = k.strip_prefix("agent.") {
                agents.push(agent.to_string());
            }
        }
        for agent in agents {
            let key = agent_key(&agent);
            if let Some(e) = self
                .kv
                .entry(&key)
                .await
                .map_err(|e| anyhow!("{key}: {e}"))?
                && e.operation == kv::Operation::Put
            {
                let v: Value = serde_json::from_slice(&e.value).unwrap_or(Value::Null);
                if let Some(h) = v["host"].as_str() {
                    self.learn(
                        &agent,
                        Owner {
                            host: h.to_string(),
                            revision: e.revision,
                            from: v["from"].as_str().map(str::to_string),
                        },
                    );
                }
            }
        }
        Ok(())
    }

    /// Follows every `agent.<agent>` entry (with history first) until it fails. What the
    /// history says replaces what was known once it is read in whole (a server that lost the
    /// bucket numbers its records anew).
    pub(crate) async fn watch_owners(&self) -> Result<()> {
        let mut w = self
            .kv
            .watch_with_history("agent.*")
            .await
            .map_err(|e| anyhow!("watching agent.*: {e}"))?;
        let mut replay: Option<HashMap<String, Owner>> = Some(HashMap::new());
        while let Some(e) = w.next().await {
            let e = e.map_err(|e| anyhow!("watching agent.*: {e}"))?;
            let Some(agent) = e.key.strip_prefix("agent.") else {
                continue;
            };
            let owner = match e.operation {
                kv::Operation::Put => {
                    let v: Value = serde_json::from_slice(&e.value).unwrap_or(Value::Null);
                    v["host"].as_str().map(|h| Owner {
                        host: h.to_string(),
                        revision: e.revision,
                        from: v["from"].as_str().map(str::to_string),
                    })
                }
                _ => None,
            };
            match (&mut replay, owner) {
                (Some(r), Some(o)) => {
                    r.insert(agent.to_string(), o);
                }
                (Some(r), None) => {
                    r.remove(agent);
                }
                (None, Some(o)) => self.learn(agent, o),
                (None, None) => {
                    lock(&self.owners).remove(agent);
                }
            }
            if e.delta == 0
                && let Some(r) = replay.take()
            {
                // A record this bridge writes meanwhile comes through the watch too.
                *lock(&self.owners) = r;
            }
        }
        Err(anyhow!("the watch of agent.* ended"))
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
