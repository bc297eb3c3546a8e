//! `bridge/state.json`, the state a bridge on this root last wrote (spec/bridge.md §7): one
//! type for its writer (`sigbox-bridge`, every second) and its readers (`sigbox bridge
//! status`, [`diagnose`](crate::diagnose)).
//!
//! Reading is lenient, as a file another version wrote or a person edited may be: every
//! field may be missing, a field of the wrong type reads as missing, entries of the wrong
//! type in a list or in `claimed` are left out, JSON that is not an object reads as a state
//! with every field missing, and fields this version does not know are kept (in
//! [`BridgeState::other`]) and written back after the known ones. Only bytes that are not JSON
//! are an error.
//!
//! Writing gives the bytes the bridge always wrote: pretty JSON, the fields in the order
//! below, `last_error` always present (`null` when none), a newline at the end.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// What `bridge/state.json` holds. `None` is a field the file does not have (or has with the
/// wrong type); the bridge writes them all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BridgeState {
    /// The host name the bridge runs as.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub host: Option<String>,
    /// The NATS server (`--nats`): one URL, or several separated by commas.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub nats: Option<String>,
    /// The bridge's process id.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub pid: Option<u32>,
    /// False in the last state a bridge writes as it stops.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub running: Option<bool>,
    /// True once the streams are set up and presence is known.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub ready: Option<bool>,
    /// Whether the connection to the server was up at this write.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub connected: Option<bool>,
    /// The mailbox (`--mailbox`) the bridge joins.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub mailbox: Option<String>,
    /// When the bridge started (RFC 3339).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub started_at: Option<String>,
    /// When this state was written (RFC 3339).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub updated_at: Option<String>,
    /// The agents present here now.
    #[serde(
        default,
        deserialize_with = "strings",
        skip_serializing_if = "Option::is_none"
    )]
    pub present: Option<Vec<String>>,
    /// The agents of this host: their signals stay here (spec/bridge.md §1).
    #[serde(
        default,
        deserialize_with = "strings",
        skip_serializing_if = "Option::is_none"
    )]
    pub here: Option<Vec<String>>,
    /// The agents this host took whose hand-off is not over (spec/bridge.md §5).
    #[serde(
        default,
        deserialize_with = "strings",
        skip_serializing_if = "Option::is_none"
    )]
    pub arriving: Option<Vec<String>>,
    /// Each agent's lock-file mtime (nanoseconds since the Unix epoch) when this root's
    /// bridge last recorded it as this host's.
    #[serde(
        default,
        deserialize_with = "claimed",
        skip_serializing_if = "Option::is_none"
    )]
    pub claimed: Option<BTreeMap<String, i64>>,
    /// The last error, if any (written as `null` when none).
    #[serde(default, deserialize_with = "lenient")]
    pub last_error: Option<String>,
    /// Signals waiting in `bridge/outbox/`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub outbox: Option<u64>,
    /// Records in `bridge/sent/`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub sent: Option<u64>,
    /// Signals exported: the records in `bridge/sent/`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub exported: Option<u64>,
    /// Broadcasts exported: the markers in `bridge/broadcasts/`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub exported_broadcasts: Option<u64>,
    /// The counts that run on across restarts.
    #[serde(flatten)]
    pub counts: BridgeCounts,
    /// Fields this version does not know, kept as they were.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The counts a bridge keeps across restarts (from its last state).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BridgeCounts {
    /// Signals the server already had when published (dropped by id).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub duplicates_published: Option<u64>,
    /// Signals imported into this mailbox.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub imported: Option<u64>,
    /// Signals that came from the stream and were here already.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub already_here: Option<u64>,
    /// This host's own broadcasts, come back from the stream.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub own_broadcasts: Option<u64>,
    /// Broadcast acks of other hosts written here.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub acks_imported: Option<u64>,
    /// Messages refused for good.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub refused: Option<u64>,
    /// Signals too large to cross, quarantined here.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub refused_exports: Option<u64>,
    /// Errors, of any kind.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub errors: Option<u64>,
}

impl BridgeState {
    /// The state in `bytes`, as lenient as the module says; an error only when they are not
    /// JSON.
    pub fn from_json(bytes: &[u8]) -> Result<BridgeState, serde_json::Error> {
        match serde_json::from_slice::<Value>(bytes)? {
            v @ Value::Object(_) => BridgeState::deserialize(v),
            _ => Ok(BridgeState::default()),
        }
    }

    /// The bytes of `state.json` for this state: pretty JSON and a newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// The state as a JSON object (the fields in the order they are written).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A field of the wrong type reads as missing.
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    Ok(T::deserialize(Value::deserialize(d)?).ok())
}

/// A list of names: its entries that are not strings are left out.
fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(a) => Some(
            a.into_iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s),
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    })
}

/// `claimed`: its entries whose value is not an integer are left out.
fn claimed<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, i64>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Object(m) => Some(
            m.into_iter()
                .filter_map(|(k, v)| v.as_i64().map(|t| (k, t)))
                .collect(),
        ),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state file as the bridge wrote it before this type existed (the old writer's output,
    /// `claimed` sorted).
    const WRITTEN: &str = r#"{
  "host": "alpha",
  "nats": "nats://127.0.0.1:4222",
  "pid": 4242,
  "running": true,
  "ready": true,
  "connected": true,
  "mailbox": "default",
  "started_at": "2026-02-08T14:30:00.123456789+00:00",
  "updated_at": "2026-02-08T14:30:04.000000001+00:00",
  "present": [
    "Executor"
  ],
  "here": [
    "Executor",
    "Planner"
  ],
  "arriving": [],
  "claimed": {
    "Executor": 1770561000123456789,
    "Planner": 1770561000000000000
  },
  "last_error": null,
  "outbox": 2,
  "sent": 7,
  "exported": 7,
  "exported_broadcasts": 1,
  "duplicates_published": 0,
  "imported": 3,
  "already_here": 1,
  "own_broadcasts": 0,
  "acks_imported": 0,
  "refused": 0,
  "refused_exports": 0,
  "errors": 2
}
"#;

    #[test]
    fn a_state_the_bridge_wrote_reads_and_writes_back_the_same_bytes() {
        let s = BridgeState::from_json(WRITTEN.as_bytes()).unwrap();
        assert_eq!(s.host.as_deref(), Some("alpha"));
        assert_eq!(s.pid, Some(4242));
        assert_eq!(s.connected, Some(true));
        assert_eq!(
            s.here.as_deref(),
            Some(&["Executor".to_string(), "Planner".into()][..])
        );
        assert_eq!(
            s.claimed.as_ref().unwrap()["Executor"],
            1_770_561_000_123_456_789
        );
        assert_eq!(s.last_error, None);
        assert_eq!(s.counts.imported, Some(3));
        assert_eq!(s.counts.errors, Some(2));
        assert!(s.other.is_empty(), "{:?}", s.other);
        assert_eq!(String::from_utf8(s.to_json()).unwrap(), WRITTEN);
        let v = s.to_value();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.first(), Some(&"host"));
        assert_eq!(keys.last(), Some(&"errors"));
    }

    #[test]
    fn reading_is_as_lenient_as_the_readers_were() {
        // Missing fields, wrong types, unknown fields.
        let s = BridgeState::from_json(
            br#"{"host": 7, "connected": "yes", "imported": -1, "errors": 1.5,
                "present": ["A", 3, null, "B"], "claimed": {"A": 5, "B": "x"},
                "last_error": "boom", "future": {"x": [1]}}"#,
        )
        .unwrap();
        assert_eq!(s.host, None);
        assert_eq!(s.connected, None);
        assert_eq!(s.counts.imported, None);
        assert_eq!(s.counts.errors, None);
        assert_eq!(s.present, Some(vec!["A".to_string(), "B".into()]));
        assert_eq!(s.claimed, Some(BTreeMap::from([("A".to_string(), 5)])));
        assert_eq!(s.last_error.as_deref(), Some("boom"));
        assert_eq!(s.here, None);
        // What this version does not know is kept, and written back after what it knows.
        assert_eq!(s.other["future"], serde_json::json!({"x": [1]}));
        let back = String::from_utf8(s.to_json()).unwrap();
        assert!(back.find("\"future\"").unwrap() > back.find("\"last_error\"").unwrap());
        // JSON that is not an object: nothing known.
        for other in ["[]", "42", "null", "\"state\""] {
            assert_eq!(
                BridgeState::from_json(other.as_bytes()).unwrap(),
                BridgeState::default(),
                "{other}"
            );
        }
        // Bytes that are not JSON: an error.
        assert!(BridgeState::from_json(b"{\"host\": ").is_err());
        assert!(BridgeState::from_json(b"").is_err());
    }
}
