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
    owners: Mutex<HashMap<String, String>>,
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

    /// Records that `agent` took its presence on this host now.
    pub(crate) async fn claim_agent(&self, agent: &str) -> Result<()> {
        let v = json!({"host": self.host, "at": chrono::Utc::now().to_rfc3339()});
        self.kv
            .put(agent_key(agent), serde_json::to_vec(&v)?.into())
            .await
            .map_err(|e| anyhow!("{}: {e}", agent_key(agent)))?;
        lock(&self.owners).insert(agent.to_string(), self.host.clone());
        Ok(())
    }

    /// The host `agent` last took its presence on, as far as this bridge has heard.
    pub(crate) fn owner(&self, agent: &str) -> Option<String> {
        lock(&self.owners).get(agent).cloned()
    }

    /// Follows every `agent.<agent>` entry (with history first) until it fails.
    pub(crate) async fn watch_owners(&self) -> Result<()> {
        let mut w = self
            .kv
            .watch_with_history("agent.*")
            .await
            .map_err(|e| anyhow!("watching agent.*: {e}"))?;
        while let Some(e) = w.next().await {
            let e = e.map_err(|e| anyhow!("watching agent.*: {e}"))?;
            let Some(agent) = e.key.strip_prefix("agent.") else {
                continue;
            };
            let mut owners = lock(&self.owners);
            match e.operation {
                kv::Operation::Put => {
                    let v: Value = serde_json::from_slice(&e.value).unwrap_or(Value::Null);
                    if let Some(h) = v["host"].as_str() {
                        owners.insert(agent.to_string(), h.to_string());
                    }
                }
                _ => {
                    owners.remove(agent);
                }
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
