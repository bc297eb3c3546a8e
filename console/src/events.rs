//! What changed: every filesystem event under a root (from `notify`), and every presence that
//! came or went, as one [`Change`] each, broadcast to every `/api/events` client.
//!
//! Writes, renames and removals arrive as events. A presence is a lock (spec/mailbox.md §7),
//! and a lock released by a process that exits makes no filesystem event: presence alone is
//! looked at, once a second, and a change is sent like any other.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, ModifyKind, RenameMode};
use notify::{RecursiveMode, Watcher};
use serde::Serialize;
use tokio::sync::broadcast;

/// How long after a new directory appears its contents are looked at again (a `rescan`).
const NEW_DIR_SETTLE: Duration = Duration::from_millis(300);
/// How often presence is looked at.
const PRESENCE_EVERY: Duration = Duration::from_secs(1);

/// One change under a root.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Change {
    /// Counts every change the console saw since it started, from 1.
    pub(crate) seq: u64,
    /// The root's index in `/api/state`'s `roots`.
    pub(crate) root: usize,
    /// `created`, `changed`, `removed`, `moved_in`, `moved_out`, `presence` (an agent came or
    /// went), or `rescan` (events were lost: read the whole state again).
    pub(crate) kind: &'static str,
    /// The file, relative to the root (`inputs/<name>`); empty for `rescan`.
    pub(crate) path: String,
    /// For a signal under its canonical name, its id (spec/mailbox.md §2.4).
    pub(crate) id: Option<String>,
    /// For `presence`: whether the agent is present now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) present: Option<bool>,
    /// When the console saw it (RFC 3339, UTC, microseconds).
    pub(crate) at: String,
}

/// Numbers the changes.
static SEQ: AtomicU64 = AtomicU64::new(0);

fn change(
    root: usize,
    kind: &'static str,
    path: String,
    id: Option<String>,
    present: Option<bool>,
) -> Change {
    Change {
        seq: SEQ.fetch_add(1, Ordering::Relaxed) + 1,
        root,
        kind,
        path,
        id,
        present,
        at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
    }
}

/// The last change numbered (0 before the first).
pub(crate) fn last_seq() -> u64 {
    SEQ.load(Ordering::Relaxed)
}

/// What keeps the watches alive: dropped, they stop.
pub(crate) struct Watches {
    _watchers: Vec<notify::RecommendedWatcher>,
}

/// Watches every root (`dirs`, already resolved) recursively and sends each change to `tx`;
/// starts the presence thread over `mailboxes`.
pub(crate) fn watch(
    dirs: &[PathBuf],
    mailboxes: Vec<Arc<sigbox::Mailbox>>,
    tx: broadcast::Sender<Change>,
) -> anyhow::Result<Watches> {
    let mut watchers = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let tx = tx.clone();
        let base = dir.clone();
        let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            let changes = match ev {
                Ok(ev) => {
                    if ev.kind == EventKind::Create(CreateKind::Folder) {
                        rescan_new_dir(i, &base, &ev, &tx);
                    }
                    changes_of(i, &base, &ev)
                }
                Err(_) => vec![change(i, "rescan", String::new(), None, None)],
            };
            for c in changes {
                // No receiver is no client: nothing to tell.
                let _ = tx.send(c);
            }
        })
        .map_err(|e| anyhow::anyhow!("{}: cannot watch: {e}", dir.display()))?;
        w.watch(dir, RecursiveMode::Recursive)
            .map_err(|e| anyhow::anyhow!("{}: cannot watch: {e}", dir.display()))?;
        watchers.push(w);
    }
    std::thread::Builder::new()
        .name("presence".into())
        .spawn(move || presence_loop(&mailboxes, &tx))?;
    Ok(Watches {
        _watchers: watchers,
    })
}

/// A directory made under a root (the first `ask` makes `asks/`) is watched only once its
/// creation has been read: a file written into it before that (the first request) makes no
/// event. So, a moment later, once the watch is in place, a `rescan` names the directory: what
/// came before the watch is read with the state, what comes after makes its own events.
fn rescan_new_dir(root: usize, base: &Path, ev: &notify::Event, tx: &broadcast::Sender<Change>) {
    let dirs: Vec<String> = ev.paths.iter().filter_map(|p| shown(base, p)).collect();
    if dirs.is_empty() {
        return;
    }
    let tx = tx.clone();
    let _ = std::thread::Builder::new()
        .name("new-dir".into())
        .spawn(move || {
            std::thread::sleep(NEW_DIR_SETTLE);
            for d in dirs {
                let _ = tx.send(change(root, "rescan", d, None, None));
            }
        });
}

/// The changes one filesystem event makes, without the console's own reads (opens and
/// closes), staging files (dot-files, `*.tmp`) and `tmp/`.
fn changes_of(root: usize, base: &Path, ev: &notify::Event) -> Vec<Change> {
    if ev.need_rescan() {
        return vec![change(root, "rescan", String::new(), None, None)];
    }
    let kinds: Vec<&'static str> = match ev.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => vec!["changed"],
        EventKind::Access(_) => return Vec::new(),
        EventKind::Create(_) => vec!["created"],
        EventKind::Remove(_) => vec!["removed"],
        EventKind::Modify(ModifyKind::Name(RenameMode::From)) => vec!["moved_out"],
        EventKind::Modify(ModifyKind::Name(RenameMode::To)) => vec!["moved_in"],
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => vec!["moved_out", "moved_in"],
        _ => vec!["changed"],
    };
    let mut out = Vec::new();
    for (n, p) in ev.paths.iter().enumerate() {
        let kind = kinds.get(n).or(kinds.last()).copied().unwrap_or("changed");
        let Some(rel) = shown(base, p) else {
            continue;
        };
        let id = p
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| sigbox::name::parse_canonical(n).is_some())
            .map(|n| sigbox::name::signal_id(n).to_string());
        out.push(change(root, kind, rel, id, None));
    }
    out
}

/// `p` relative to the root, or `None` for what is not the mailbox's news: `tmp/`, and
/// writes in progress (dot-files, `*.tmp`).
fn shown(base: &Path, p: &Path) -> Option<String> {
    let rel = p.strip_prefix(base).ok()?;
    let mut parts = rel.components();
    if let Some(Component::Normal(first)) = parts.next()
        && first == "tmp"
    {
        return None;
    }
    let name = rel.file_name()?.to_string_lossy();
    if name.starts_with('.') || name.ends_with(".tmp") {
        return None;
    }
    Some(rel.to_string_lossy().into_owned())
}

/// Once a second: which agents hold their presence; a change each time one comes or goes.
fn presence_loop(mailboxes: &[Arc<sigbox::Mailbox>], tx: &broadcast::Sender<Change>) {
    let mut last: Vec<Vec<String>> = vec![Vec::new(); mailboxes.len()];
    loop {
        for (i, mb) in mailboxes.iter().enumerate() {
            let now: Vec<String> = mb
                .agents_seen(Duration::ZERO)
                .unwrap_or_default()
                .into_iter()
                .filter(|(_, present, _)| *present)
                .map(|(a, _, _)| a)
                .collect();
            for a in now.iter().filter(|a| !last[i].contains(a)) {
                let _ = tx.send(change(i, "presence", lock_path(a), None, Some(true)));
            }
            for a in last[i].iter().filter(|a| !now.contains(a)) {
                let _ = tx.send(change(i, "presence", lock_path(a), None, Some(false)));
            }
            last[i] = now;
        }
        std::thread::sleep(PRESENCE_EVERY);
    }
}

fn lock_path(agent: &str) -> String {
    format!("agents/{agent}.lock")
}
