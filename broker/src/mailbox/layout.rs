//! The mailbox on disk (spec/mailbox.md §1): every directory and file name of a root, named
//! once. Pure: paths only, no filesystem access.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::name::own::NAME_MAX;

/// The directories of a mailbox root, in the order `init` creates them.
pub const LAYOUT: [&str; 8] = [
    "inputs",
    "claimed",
    "processed",
    "acks",
    "buffered",
    "rejected",
    "tmp",
    "agents",
];

/// The directories `open` requires: without them a root is not a mailbox.
pub(crate) const REQUIRED: [&str; 3] = ["inputs", "processed", "tmp"];

/// The paths of one mailbox root.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// The root.
    pub(crate) root: PathBuf,
    /// `inputs/`: pending signals, the drop zone.
    pub(crate) inputs: PathBuf,
    /// `claimed/<agent>/<slot>/`: claims in flight, not yet handed over.
    pub(crate) claimed: PathBuf,
    /// `processed/`: claimed signals with their handling records.
    pub(crate) processed: PathBuf,
    /// `acks/<id>/<agent>.ack`: broadcast acknowledgements.
    pub(crate) acks: PathBuf,
    /// `buffered/<agent>/`: durable buffers of absent agents.
    pub(crate) buffered: PathBuf,
    /// `rejected/`: quarantine, each file with its reason.
    pub(crate) rejected: PathBuf,
    /// `tmp/`: staging for atomic writes.
    pub(crate) tmp: PathBuf,
    /// `agents/<agent>.lock`: presence.
    pub(crate) agents: PathBuf,
    /// `bridge/`: a bridge's state, when one joins this mailbox to others (spec/bridge.md);
    /// not part of [`LAYOUT`]: the bridge makes it.
    pub(crate) bridge: PathBuf,
    /// `bridge/outbox/`: signals taken for export, not yet acknowledged by the server.
    pub(crate) outbox: PathBuf,
    /// `bridge/sent/`: signals exported, with their records.
    pub(crate) sent: PathBuf,
    /// `bridge/broadcasts/`: a marker per pending broadcast exported.
    pub(crate) broadcasts: PathBuf,
    /// `bridge/hold/<agent>`: an agent whose signals this host holds back from it while the
    /// bridge runs (it belongs to another host, or its hand-off is not over).
    pub(crate) hold: PathBuf,
    /// `bridge/hold.lock`: shared-locked by a running bridge; holds count only while it is.
    pub(crate) hold_lock: PathBuf,
}

impl Layout {
    /// The layout of the mailbox at `root`.
    pub(crate) fn new(root: &Path) -> Layout {
        let [
            inputs,
            claimed,
            processed,
            acks,
            buffered,
            rejected,
            tmp,
            agents,
        ] = LAYOUT.map(|d| root.join(d));
        let bridge = root.join("bridge");
        Layout {
            outbox: bridge.join("outbox"),
            sent: bridge.join("sent"),
            broadcasts: bridge.join("broadcasts"),
            hold: bridge.join("hold"),
            hold_lock: bridge.join("hold.lock"),
            bridge,
            root: root.to_path_buf(),
            inputs,
            claimed,
            processed,
            acks,
            buffered,
            rejected,
            tmp,
            agents,
        }
    }

    /// An agent's durable buffer, `buffered/<agent>/`.
    pub(crate) fn buffer_dir(&self, agent: &str) -> PathBuf {
        self.buffered.join(agent)
    }

    /// An agent's in-flight slots, `claimed/<agent>/`.
    pub(crate) fn claim_dir(&self, agent: &str) -> PathBuf {
        self.claimed.join(agent)
    }

    /// The marker of a broadcast in flight in a slot: `<16 hex>.broadcast`, a name no signal
    /// file has (§2.2), from a hash of the broadcast's identity (§2.4; the marker holds the
    /// identity and the file name).
    pub(crate) fn marker_name(broadcast: &OsStr) -> String {
        format!(
            "{:016x}{MARKER_SUFFIX}",
            fnv1a(broadcast.as_encoded_bytes())
        )
    }

    /// True for a broadcast marker's name in a slot.
    pub(crate) fn is_marker(name: &OsStr) -> bool {
        name.to_str().is_some_and(|n| n.ends_with(MARKER_SUFFIX))
    }

    /// A broadcast's ack directory, `acks/<id>/`.
    pub(crate) fn ack_dir(&self, id: &str) -> PathBuf {
        self.acks.join(id)
    }

    /// The names of an agent's ack for a broadcast: sigbox's `<agent>.ack`, then upstream's
    /// `<agent>.ack.yaml`.
    pub(crate) fn ack_names(agent: &str) -> [String; 2] {
        [format!("{agent}.ack"), format!("{agent}.ack.yaml")]
    }

    /// The agent an ack file name is for, when it is one (either form of
    /// [`Layout::ack_names`]).
    pub(crate) fn ack_agent(file_name: &str) -> Option<&str> {
        file_name
            .strip_suffix(".ack")
            .or_else(|| file_name.strip_suffix(".ack.yaml"))
    }

    /// An agent's presence lock, `agents/<agent>.lock`.
    pub(crate) fn lock_path(&self, agent: &str) -> PathBuf {
        self.agents.join(format!("{agent}.lock"))
    }

    /// The record of the PAUSE in force for `agent`: `agents/<agent>.paused.json`.
    pub(crate) fn paused_path(&self, agent: &str) -> PathBuf {
        self.agents.join(format!("{agent}.paused.json"))
    }

    /// The reason file beside a quarantined file: `rejected/<name>.reason.json`.
    pub(crate) fn reason_path(quarantined: &Path) -> PathBuf {
        let name = quarantined
            .file_name()
            .unwrap_or_default()
            .as_encoded_bytes();
        if name.len() + REASON_SUFFIX.len() <= NAME_MAX {
            let mut why = quarantined.as_os_str().to_os_string();
            why.push(REASON_SUFFIX);
            return PathBuf::from(why);
        }
        // A name too long to take the suffix: a prefix of it and a hash of all of it, so that
        // two long names sharing a prefix still get two reason files.
        let hash = format!(".{:016x}", fnv1a(name));
        let keep = NAME_MAX - REASON_SUFFIX.len() - hash.len();
        let mut why = name[..keep].to_vec();
        why.extend_from_slice(hash.as_bytes());
        why.extend_from_slice(REASON_SUFFIX.as_bytes());
        // Bytes cut from an OS string's own bytes are an OS string on Unix (any bytes but
        // `/` and NUL, neither of which a cut makes).
        quarantined.with_file_name(std::ffi::OsString::from(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&why),
        ))
    }

    /// True for a reason file's name in `rejected/`.
    pub(crate) fn is_reason_file(name: &OsStr) -> bool {
        name.to_string_lossy().ends_with(REASON_SUFFIX)
    }
}

const REASON_SUFFIX: &str = ".reason.json";

/// FNV-1a, 64 bits: stable across versions and platforms, unlike std's hasher.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
const MARKER_SUFFIX: &str = ".broadcast";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_directory_is_named_under_the_root() {
        let l = Layout::new(Path::new("/r"));
        let all = [
            &l.inputs,
            &l.claimed,
            &l.processed,
            &l.acks,
            &l.buffered,
            &l.rejected,
            &l.tmp,
            &l.agents,
        ];
        for (dir, name) in all.iter().zip(LAYOUT) {
            assert_eq!(**dir, Path::new("/r").join(name));
        }
        assert_eq!(l.buffer_dir("Planner"), Path::new("/r/buffered/Planner"));
        assert_eq!(l.lock_path("Planner"), Path::new("/r/agents/Planner.lock"));
        assert_eq!(l.ack_dir("x"), Path::new("/r/acks/x"));
        assert_eq!(l.claim_dir("Planner"), Path::new("/r/claimed/Planner"));
    }

    #[test]
    fn ack_names_read_back_as_their_agent() {
        for n in Layout::ack_names("Executor") {
            assert_eq!(Layout::ack_agent(&n), Some("Executor"));
        }
        assert_eq!(Layout::ack_agent("Executor.lock"), None);
    }

    #[test]
    fn reason_files_sit_beside_what_they_explain() {
        let why = Layout::reason_path(Path::new("/r/rejected/a.yaml"));
        assert_eq!(why, Path::new("/r/rejected/a.yaml.reason.json"));
        assert!(Layout::is_reason_file(why.file_name().unwrap()));
        assert!(!Layout::is_reason_file(OsStr::new("a.yaml")));
    }

    #[test]
    fn broadcast_markers_are_never_signal_names() {
        let m = Layout::marker_name(OsStr::new("2026-x-INFO-ALL-1.json"));
        assert_eq!(m.len(), 16 + ".broadcast".len());
        assert!(Layout::is_marker(OsStr::new(&m)));
        assert_ne!(m, Layout::marker_name(OsStr::new("2026-x-INFO-ALL-2.json")));
        assert!(matches!(
            crate::name::classify(OsStr::new(&m)),
            crate::name::NameKind::Stray
        ));
    }
}
