//! `doctor`: checks a mailbox root and explains every problem it finds, without changing
//! anything (spec/mailbox.md §1, §5, §8, §9.7). Every read goes through the seam.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::bridge_state::BridgeState;
use crate::clock::ns_of;
use crate::io::{Io, IoOptions};
use crate::mailbox::{LAYOUT, Layout, MailboxOptions, ProblemKind};
use crate::name::own;
use crate::name::{self, NameKind};
use crate::sys::EntryKind;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Something is wrong or will go wrong.
    Problem,
}

/// One thing `doctor` found.
#[derive(Clone, Debug)]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// The file or directory concerned.
    pub path: PathBuf,
    /// What is wrong, and what to do about it.
    pub message: String,
}

/// A directory changed further in the future than this: the filesystem's clock runs ahead.
const SKEW: Duration = Duration::from_secs(2);

/// Write attempts older than this are reported as stale.
const STALE: Duration = Duration::from_secs(3600);

/// Checks the mailbox at `root` without changing anything (but `tmp/`'s times, set to "now" to
/// read the filesystem's clock).
pub fn diagnose(root: &Path, opts: &MailboxOptions) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut problem = |path: &Path, message: String| {
        out.push(Finding {
            severity: Severity::Problem,
            path: path.to_path_buf(),
            message,
        })
    };
    let io = Io::new(&IoOptions::new());
    let layout = Layout::new(root);
    // The filesystem's clock against this machine's, both ways (a probe: `tmp/`'s times set to
    // "now" by the filesystem). sigbox itself decides by the filesystem's (spec/mailbox.md §5,
    // "Clocks"); tools beside it that compare file times with their own clock do not. Found,
    // it is said once, not again for each directory changed "in the future".
    let skew = crate::mailbox::measure_fs_skew(&io, &layout.tmp);
    // The root's own path may hold symlinks and be spelled `.` or `..` (spec §1.0), as for
    // every other command: it is followed. Only what lies below it is never followed.
    match std::fs::metadata(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            problem(
                root,
                "the root does not exist; create it with `sigbox init`".into(),
            );
            return out;
        }
        Err(e) => {
            problem(
                root,
                format!("cannot read the root ({e}); create it with `sigbox init`"),
            );
            return out;
        }
        Ok(m) if !m.is_dir() => {
            problem(root, "the root is not a directory".into());
            return out;
        }
        Ok(_) => {}
    }
    // Below the root, nothing is followed: what is planted there is seen as what it is.
    if io.set_root(root).is_err() {
        problem(root, "cannot open the root".into());
        return out;
    }
    let facts = crate::sys::fs_facts(root);
    if facts.read_only {
        problem(
            root,
            "on a filesystem mounted read-only: nothing can be sent, claimed or acknowledged \
             here (permissions are not the cause); remount it read-write, or point --root at \
             a writable directory"
                .into(),
        );
    }
    let now = ns_of(SystemTime::now());
    for dir in LAYOUT {
        let p = root.join(dir);
        match io.stamp(&p).ok().flatten().map(|m| m.kind) {
            None => problem(&p, "missing; run `sigbox init` to create the layout".into()),
            Some(kind @ (EntryKind::Symlink | EntryKind::File | EntryKind::Special)) => {
                problem(&p, not_a_directory(kind));
            }
            Some(EntryKind::Dir) => {
                if let Some(ahead) = io
                    .stamp(&p)
                    .ok()
                    .flatten()
                    .map(|m| m.changed_ns() - now)
                    .filter(|ahead| {
                        *ahead > SKEW.as_nanos() as i128 && skew.abs() <= SKEW.as_nanos() as i128
                    })
                {
                    problem(
                        &p,
                        format!(
                            "changed {} s in the future: the filesystem's clock (a network \
                             server's?) runs ahead of this machine's. Files written in place \
                             there settle that much later; fix the clocks (NTP)",
                            ahead / 1_000_000_000
                        ),
                    );
                }
                if !facts.read_only && !crate::sys::writable(&p) {
                    problem(
                        &p,
                        format!(
                            "not writable by this user ({}); agents and senders need write \
                             access here",
                            crate::sys::mode_string(&p)
                        ),
                    );
                }
            }
        }
    }
    // The directories below the layout's own: slots, buffers, ack directories; and the
    // presence locks, which must be plain files.
    let entries = |dir: &Path| io.list(dir, true).unwrap_or_default();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for top in [&layout.claimed, &layout.buffered, &layout.acks] {
        for e in entries(top) {
            dirs.push(top.join(&e.name));
            if top == &layout.claimed && e.kind == EntryKind::Dir {
                for slot in entries(&top.join(&e.name)) {
                    dirs.push(top.join(&e.name).join(&slot.name));
                }
            }
        }
    }
    for d in dirs {
        if let Some(kind @ (EntryKind::Symlink | EntryKind::File | EntryKind::Special)) =
            io.stamp(&d).ok().flatten().map(|m| m.kind)
        {
            problem(&d, not_a_directory(kind));
        }
    }
    // A buffer is made for an agent by the orchestrator; one under a name no agent can have
    // (made by hand) holds signals nobody will ever claim.
    for e in entries(&layout.buffered) {
        let named = e.name.to_str().is_some_and(crate::signal::valid_agent);
        let held = if e.kind == EntryKind::Dir && !named {
            entries(&layout.buffered.join(&e.name)).len()
        } else {
            0
        };
        // An empty one holds nothing back.
        if held > 0 {
            problem(
                &layout.buffered.join(&e.name),
                format!(
                    "a buffer under a name no agent can have: nobody claims the {held} \
                     file(s) it holds; move them back into inputs/, where they are routed \
                     again"
                ),
            );
        }
    }
    // An ack is a regular file: anything else under an ack's name never counts (the agent's
    // next pass quarantines it and delivers the broadcast).
    for e in entries(&layout.acks) {
        let dir = layout.acks.join(&e.name);
        for a in entries(&dir) {
            let agent = a.name.to_str().and_then(Layout::ack_agent);
            if a.kind != EntryKind::File && agent.is_some() {
                problem(
                    &dir.join(&a.name),
                    format!(
                        "is {} under an ack's name: it does not count as {}'s ack; that \
                         agent's next checkpoint quarantines it and delivers the broadcast",
                        a.kind.describe(),
                        agent.unwrap_or_default()
                    ),
                );
            }
        }
    }
    for e in entries(&layout.agents) {
        if e.kind != EntryKind::File && e.name.to_string_lossy().ends_with(".lock") {
            problem(
                &layout.agents.join(&e.name),
                format!(
                    "is {} where a presence lock (a plain file) belongs: sigbox refuses to open \
                     it, so that agent counts as absent; remove it",
                    e.kind.describe()
                ),
            );
        }
    }
    if let (Some(a), Some(b)) = (
        crate::sys::device(&layout.tmp),
        crate::sys::device(&layout.inputs),
    ) && a != b
    {
        problem(
            &layout.tmp,
            "on a different filesystem from inputs/: the atomic rename from tmp/ would fail \
                 (EXDEV); keep the whole root on one filesystem"
                .into(),
        );
    }
    if facts.memory {
        out.push(Finding {
            severity: Severity::Info,
            path: root.to_path_buf(),
            message: "on tmpfs (memory): every sync is a no-op and nothing here survives a \
                      reboot or power loss; fine for tests and one session, not for signals \
                      that must outlive the machine"
                .into(),
        });
    }
    if !facts.memory && io.link_claims() {
        out.push(Finding {
            severity: Severity::Info,
            path: root.to_path_buf(),
            message: "renames here are not atomic across directories (ext2, or ext3/ext4 \
                      without a journal): claims move by link, fsync, then removal of the \
                      source, so that a power loss never loses one (spec/mailbox.md §9.10)"
                .into(),
        });
    }
    if crate::sys::is_remote_fs(root) {
        out.push(Finding {
            severity: Severity::Info,
            path: root.to_path_buf(),
            message: "on a network or FUSE filesystem: waits poll instead of using events, and \
                      locking and rename atomicity are only as good as the server's"
                .into(),
        });
    }
    let Ok(mb) = opts.open(root) else {
        return out;
    };
    if skew.abs() > SKEW.as_nanos() as i128 {
        let secs = skew.abs() as f64 / 1e9;
        out.push(Finding {
            severity: Severity::Problem,
            path: root.to_path_buf(),
            message: format!(
                "this machine's clock is {secs:.1} s {} the filesystem's (an NFS client and its \
                 server, a container with a clock of its own?): sigbox settles and ages files \
                 by the filesystem's clock, but other programs here compare file times with \
                 this one's; fix the clocks (NTP)",
                if skew > 0 { "behind" } else { "ahead of" }
            ),
        });
    }
    // Quarantine is information: the bad files are out of the way, nothing is lost, and a
    // gate on `doctor` must not fail for ever after one bad drop.
    if let Ok(rejected) = mb.rejected() {
        let n = rejected.len();
        for r in rejected {
            out.push(Finding {
                severity: Severity::Info,
                path: r.path,
                message: format!("quarantined: {}", r.reason),
            });
        }
        if n > 0 {
            out.push(Finding {
                severity: Severity::Info,
                path: layout.rejected.clone(),
                message: format!(
                    "{n} file(s) quarantined, each with a .reason.json beside it (`sigbox ls \
                     --all` lists them); once read, `sigbox gc --rejected --older-than 0s` \
                     clears them"
                ),
            });
        }
    }
    if let Ok(problems) = mb.problems() {
        for p in problems {
            let reason = p.reason();
            let (severity, message) = match p.kind {
                ProblemKind::Settling { .. }
                | ProblemKind::Held { .. }
                | ProblemKind::Leftover { .. } => (Severity::Info, reason),
                ProblemKind::InFlight { .. } => (Severity::Problem, reason),
                _ => (
                    Severity::Problem,
                    format!("{reason}; the next checkpoint pass will quarantine it"),
                ),
            };
            out.push(Finding {
                severity,
                path: p.path,
                message,
            });
        }
    }
    bridge_findings(&mb, &io, &layout, &mut out);
    let old = |p: &Path| {
        io.stamp(p)
            .ok()
            .flatten()
            .is_some_and(|m| now - m.mtime_ns > STALE.as_nanos() as i128)
    };
    let mut stale_stages = 0;
    for e in io.list(&layout.inputs, true).unwrap_or_default() {
        let p = layout.inputs.join(&e.name);
        // A modification time in the future: copied with its times from a machine whose clock
        // runs ahead. Read by when it arrived, but worth knowing.
        if let Some(ahead) = io
            .stamp(&p)
            .ok()
            .flatten()
            .map(|m| m.mtime_ns - now)
            .filter(|ahead| *ahead > 2_000_000_000)
        {
            out.push(Finding {
                severity: Severity::Info,
                path: p.clone(),
                message: format!(
                    "modified {} s in the future (copied with its times from a machine whose \
                     clock runs ahead?); sigbox settles and orders it by when it arrived",
                    ahead / 1_000_000_000
                ),
            });
        }
        if name::classify(&e.name) != NameKind::InProgress || !old(&p) {
            continue;
        }
        if own::is_stage_name(&e.name) {
            // Its writer still running: a write in progress, not a leftover.
            if !crate::atomic::stage_writer_alive(&e.name) {
                stale_stages += 1;
            }
            continue;
        }
        out.push(Finding {
            severity: Severity::Problem,
            path: p,
            message: "a write in progress (dot-file or *.tmp) unchanged for over an hour: \
                      probably abandoned by a crashed writer; it is never delivered, remove \
                      it or rename it to a signal name"
                .into(),
        });
    }
    if let Ok(pending) = mb.pending() {
        for p in pending {
            if crate::signal::SignalType::parse(&p.type_name).is_none() {
                out.push(Finding {
                    severity: Severity::Info,
                    path: p.path,
                    message: format!(
                        "unknown type {:?}: no agent takes it; it stays in {}",
                        p.type_name,
                        match &p.buffered_for {
                            Some(a) => format!("buffered/{a}/"),
                            None => "inputs/".into(),
                        }
                    ),
                });
            }
        }
    }
    let stale_tmp = stale_stages
        + io.list(&layout.tmp, true)
            .unwrap_or_default()
            .iter()
            .filter(|e| old(&layout.tmp.join(&e.name)))
            .count();
    if stale_tmp > 0 {
        out.push(Finding {
            severity: Severity::Problem,
            path: layout.root.clone(),
            message: format!(
                "{stale_tmp} staging file(s) older than an hour, left by crashed writers; run \
                 `sigbox gc`"
            ),
        });
    }
    stopped_holders(&layout, &mut out);
    if let Ok(processed) = mb.processed() {
        for s in processed {
            match s {
                Ok(s) if s.handling().is_none() => out.push(Finding {
                    severity: Severity::Info,
                    path: s.path,
                    message: "claimed but never annotated: a consumer crashed between its claim \
                              and the hand-over; the signal may not have been acted on"
                        .into(),
                }),
                Ok(_) => {}
                Err(e) => out.push(Finding {
                    severity: Severity::Problem,
                    path: e.path().map(Path::to_path_buf).unwrap_or_default(),
                    message: format!("unreadable processed record: {}", e.reason()),
                }),
            }
        }
    }
    out
}

/// A process stopped (Ctrl-Z, SIGSTOP, `docker pause`, a debugger) while it holds a lock of
/// the root: what it held waits for it (spec/mailbox.md §9.11). Other agents go on; its own
/// agent's consumers skip what it holds, or wait for it a bounded time.
fn stopped_holders(layout: &Layout, out: &mut Vec<Finding>) {
    for (pid, path, held) in crate::sys::stopped_holders_below(&layout.root, &LAYOUT) {
        let what = match path.strip_prefix(&layout.root) {
            Ok(p) if p.as_os_str().is_empty() => {
                "the root's fsync lock (others sync without it)".to_string()
            }
            Ok(p) => format!("a lock on {}", p.display()),
            Err(_) => format!("a lock on {}", path.display()),
        };
        let message = match held {
            crate::sys::Held::Stopped => format!(
                "process {pid} is stopped and holds {what}: what it holds waits for it (other \
                 agents go on without it); `kill -CONT {pid}` lets it go on, or end it"
            ),
            crate::sys::Held::Orphaned => format!(
                "{what} is held by a process that inherited it from process {pid}, which has \
                 ended (a command `flock` started?): nobody waits for it, but what it holds \
                 stays held; `fuser -v {}` names the holder; end it",
                path.display()
            ),
        };
        out.push(Finding {
            severity: Severity::Problem,
            path,
            message,
        });
    }
}

/// The finding for a layout directory that is something else.
fn not_a_directory(kind: EntryKind) -> String {
    let why = if kind == EntryKind::Symlink {
        "a security problem (a link here could lead outside the root)"
    } else {
        "planted or left by something other than sigbox"
    };
    format!(
        "is {} where sigbox expects a directory: {why}; sigbox refuses it and touches nothing \
         through it; remove it (sigbox makes the directory again)",
        kind.describe()
    )
}

/// A bridge's state files (spec/bridge.md §6): whether one runs, whether it reaches its
/// server, and what waits in its outbox.
fn bridge_findings(mb: &crate::Mailbox, io: &Io, layout: &Layout, out: &mut Vec<Finding>) {
    let bridge = mb.bridge();
    let dir = bridge.dir().to_path_buf();
    let Ok(Some(st)) = io.stamp(&dir) else {
        return; // no bridge ever ran here
    };
    let mut push = |severity, path: &Path, message: String| {
        out.push(Finding {
            severity,
            path: path.to_path_buf(),
            message,
        })
    };
    if st.kind != EntryKind::Dir {
        push(Severity::Problem, &dir, not_a_directory(st.kind));
        return;
    }
    for p in [
        &layout.outbox,
        &layout.sent,
        &layout.broadcasts,
        &layout.hold,
    ] {
        if let Ok(Some(st)) = io.stamp(p)
            && st.kind != EntryKind::Dir
        {
            push(Severity::Problem, p, not_a_directory(st.kind));
        }
    }
    let state_path = bridge.state_path();
    let state: Option<BridgeState> = match bridge.state_file() {
        Ok(None) => None,
        Ok(Some(bytes)) => match BridgeState::from_json(&bytes) {
            Ok(v) => Some(v),
            Err(e) => {
                push(
                    Severity::Problem,
                    &state_path,
                    format!(
                        "not valid JSON ({e}); the bridge rewrites it every second while it runs"
                    ),
                );
                None
            }
        },
        Err(e) => {
            push(Severity::Problem, &state_path, e.reason().to_string());
            None
        }
    };
    let text = |field: fn(&BridgeState) -> &Option<String>| {
        state
            .as_ref()
            .and_then(|s| field(s).as_deref())
            .unwrap_or("?")
            .to_string()
    };
    let ago = |t: Option<&String>| {
        t.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds())
    };
    let (outbox, sent) = bridge.counts().unwrap_or_default();
    let marked = bridge.broadcasts_marked().unwrap_or_default();
    let running = bridge.running().unwrap_or(false);
    let age = ago(state.as_ref().and_then(|s| s.updated_at.as_ref()));
    if running {
        push(
            Severity::Info,
            &dir,
            format!(
                "a bridge runs here as host {} with server {}: exported {}, imported {}; {outbox} \
                 waiting in bridge/outbox/",
                text(|s| &s.host),
                text(|s| &s.nats),
                sent + marked,
                state.as_ref().and_then(|s| s.counts.imported).unwrap_or(0)
            ),
        );
        if age.is_some_and(|a| a > 30) {
            push(
                Severity::Problem,
                &state_path,
                format!(
                    "the bridge holds its lock but has not written its state for {} s: is it \
                     stuck? (`sigbox bridge status` asks the server)",
                    age.unwrap_or(0)
                ),
            );
        }
        let connected = state.as_ref().and_then(|s| s.connected);
        let ready = state.as_ref().and_then(|s| s.ready);
        let since = ago(state.as_ref().and_then(|s| s.started_at.as_ref()));
        if connected == Some(true) && ready == Some(false) && since.is_some_and(|s| s > 15) {
            push(
                Severity::Problem,
                &state_path,
                format!(
                    "the bridge reaches its server {} but cannot set up its streams: {}",
                    text(|s| &s.nats),
                    text(|s| &s.last_error)
                ),
            );
        }
        if connected == Some(false) {
            push(
                Severity::Problem,
                &state_path,
                format!(
                    "the bridge cannot reach its server {}: {}; signals for other hosts wait \
                     here until it can",
                    text(|s| &s.nats),
                    match text(|s| &s.last_error).as_str() {
                        "?" => "the connection is down".to_string(),
                        e => e.to_string(),
                    }
                ),
            );
        }
    } else {
        stranded(
            mb,
            layout,
            &text(|s| &s.updated_at),
            &text(|s| &s.nats),
            state.is_some(),
            out,
        );
    }
}

/// Signals for other hosts stranded here with no bridge running (spec/bridge.md §7): in
/// `bridge/outbox/` or pending for agents that are not of this host. A problem naming how
/// many, for which agents and hosts, and what to do; without any, a bridge that ran here is
/// only information.
fn stranded(
    mb: &crate::Mailbox,
    layout: &Layout,
    seen: &str,
    server: &str,
    ran: bool,
    out: &mut Vec<Finding>,
) {
    let outbound = match mb.bridge().outbound() {
        Ok(o) => o,
        Err(e) => {
            out.push(Finding {
                severity: Severity::Problem,
                path: layout.bridge.clone(),
                message: format!("cannot tell what waits here for other hosts: {e}"),
            });
            return;
        }
    };
    let start = match server {
        "?" => "start `sigbox bridge --nats <server>` on this root".to_string(),
        s => format!("start `sigbox bridge --nats {s}` on this root"),
    };
    let outbox = outbound
        .waiting
        .iter()
        .filter(|o| o.place == crate::OutboundPlace::Outbox)
        .count();
    let pending = outbound.waiting.len() - outbox;
    // How many for each agent and host, in order of the agents' names.
    let mut per: std::collections::BTreeMap<(String, Option<String>), usize> =
        std::collections::BTreeMap::new();
    for o in &outbound.waiting {
        *per.entry((o.agent.clone(), o.host.clone())).or_default() += 1;
    }
    let whom: Vec<String> = per
        .iter()
        .map(|((agent, host), n)| match host {
            Some(h) => format!("{n} for {agent} on host {h}"),
            None => format!("{n} for {agent} (no host known here)"),
        })
        .collect();
    if outbox > 0 {
        out.push(Finding {
            severity: Severity::Problem,
            path: layout.outbox.clone(),
            message: format!(
                "{outbox} signal(s) taken for export wait here, and no bridge runs (last seen \
                 {seen}): {start} and it publishes them (the stream drops what it already has)"
            ),
        });
    }
    if !outbound.waiting.is_empty() {
        out.push(Finding {
            severity: Severity::Problem,
            path: layout.bridge.clone(),
            message: format!(
                "{} signal(s) for other hosts are stranded here ({pending} pending in inputs/ \
                 or a buffer, {outbox} in bridge/outbox/: {}), and no bridge runs (last seen \
                 {seen}): {start}; they reach their hosts once it runs",
                outbound.waiting.len(),
                whom.join(", ")
            ),
        });
    } else if ran {
        out.push(Finding {
            severity: Severity::Info,
            path: layout.bridge.clone(),
            message: format!(
                "a bridge ran here (last seen {seen}) and does not now; nothing waits here for \
                 other hosts"
            ),
        });
    }
}
