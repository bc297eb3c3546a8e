//! The settings of a mailbox handle: a builder whose every setter names its default. Data
//! only; `open` and `init` live with the handle in `mod.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::DEFAULT_MAX_FILE_SIZE;
use crate::io::{Durability, FsHook, IoOptions};

/// The default broadcast quorum (the Librarian is episodic and not part of it).
pub const DEFAULT_QUORUM: [&str; 5] = [
    "Orchestrator",
    "Executor",
    "Planner",
    "Questioner",
    "Reviewer",
];

/// Settings of a mailbox handle. Every setter names its default.
#[derive(Clone)]
pub struct MailboxOptions {
    pub(super) settle: Duration,
    pub(super) max_file_size: u64,
    pub(super) quorum: Vec<String>,
    pub(super) approval_states: Vec<String>,
    pub(super) orchestrator: String,
    pub(super) io: IoOptions,
    pub(super) shared: bool,
    pub(super) reuse_listings: bool,
}

/// Directory mode of a shared mailbox: group read/write/enter, setgid (files keep the root's
/// group), nothing for others.
pub const SHARED_DIR_MODE: u32 = 0o2770;
/// File mode of a shared mailbox.
pub const SHARED_FILE_MODE: u32 = 0o660;

impl Default for MailboxOptions {
    fn default() -> Self {
        MailboxOptions {
            settle: Duration::from_secs(2),
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            quorum: DEFAULT_QUORUM.iter().map(|s| s.to_string()).collect(),
            approval_states: vec!["KNOWLEDGE_APPROVAL".to_string()],
            orchestrator: "Orchestrator".to_string(),
            io: IoOptions::new(),
            shared: false,
            reuse_listings: true,
        }
    }
}

impl std::fmt::Debug for MailboxOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailboxOptions")
            .field("settle", &self.settle)
            .field("max_file_size", &self.max_file_size)
            .field("quorum", &self.quorum)
            .field("approval_states", &self.approval_states)
            .field("orchestrator", &self.orchestrator)
            .field("io", &self.io)
            .field("shared", &self.shared)
            .field("reuse_listings", &self.reuse_listings)
            .finish()
    }
}

impl MailboxOptions {
    /// Default options.
    pub fn new() -> MailboxOptions {
        MailboxOptions::default()
    }

    /// How long a dropped (non-canonical) file must stay unchanged before it is read: a file
    /// still being written is never delivered half-way, and one that does not parse is
    /// quarantined only after this window. Default: 2 s.
    pub fn settle(&mut self, d: Duration) -> &mut Self {
        self.settle = d;
        self
    }

    /// Files larger than this are quarantined unread. Default: 1 MiB.
    pub fn max_file_size(&mut self, bytes: u64) -> &mut Self {
        self.max_file_size = bytes;
        self
    }

    /// The agents whose acks archive a broadcast. Default: Orchestrator, Executor, Planner,
    /// Questioner, Reviewer.
    pub fn quorum<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, agents: I) -> &mut Self {
        self.quorum = agents.into_iter().map(Into::into).collect();
        self
    }

    /// The orchestrator states in which APPROVE and SKIP are delivered. Default:
    /// `KNOWLEDGE_APPROVAL`.
    pub fn approval_states<I: IntoIterator<Item = S>, S: Into<String>>(
        &mut self,
        states: I,
    ) -> &mut Self {
        self.approval_states = states.into_iter().map(Into::into).collect();
        self
    }

    /// The orchestrator's agent name. Default: `Orchestrator`.
    pub fn orchestrator(&mut self, name: impl Into<String>) -> &mut Self {
        self.orchestrator = name.into();
        self
    }

    /// fsync or not. Default: [`Durability::Durable`].
    pub fn durability(&mut self, d: Durability) -> &mut Self {
        self.io.durability(d);
        self
    }

    /// Observes every filesystem effect; for fault-injection tests. Default: none.
    pub fn hook(&mut self, hook: Arc<dyn FsHook>) -> &mut Self {
        self.io.hook(hook);
        self
    }

    /// Never use `renameat2(RENAME_NOREPLACE)`: the portable no-clobber rename that
    /// filesystems refusing the flag get (spec/mailbox.md §9.9), on any filesystem. For tests.
    /// Default: false, or true when `SIGBOX_PORTABLE_RENAME=1`.
    pub fn portable_rename(&mut self, on: bool) -> &mut Self {
        self.io.portable_rename(on);
        self
    }

    /// Claims by link (`true`) or by rename (`false`) whatever the filesystem
    /// (spec/mailbox.md §9.10). Default: by link where the root's filesystem does not commit
    /// a rename between two directories whole (ext2, ext3/ext4 without a journal), or as
    /// `SIGBOX_LINK_CLAIMS` (`1` or `0`) says.
    pub fn link_claims(&mut self, on: bool) -> &mut Self {
        self.io.link_claims(on);
        self
    }

    /// Sets durability and hook at once, as [`crate::goblin::Goblin::open_with`] and
    /// [`crate::mux::write_signal_with`] take them. Default: durable, no hook.
    pub fn io(&mut self, io: IoOptions) -> &mut Self {
        self.io = io;
        self
    }

    /// With `init`: create a shared layout: directories `2770` (group members read, write and
    /// enter; setgid so every file keeps the root's group; others nothing), set explicitly
    /// whatever the umask. Existing directories are never changed. Default: off (the umask
    /// decides). A root that is setgid and group-writable is treated as shared when opened:
    /// what sigbox creates in it is group-writable.
    pub fn shared(&mut self, shared: bool) -> &mut Self {
        self.shared = shared;
        self
    }

    /// Reuse a directory listing while the directory's `lstat` stamp proves it current (see
    /// `spec/mailbox.md` §5.1). Always off on network and FUSE filesystems, whose attribute
    /// caches can serve a stale directory timestamp. Default: on.
    pub fn reuse_listings(&mut self, reuse: bool) -> &mut Self {
        self.reuse_listings = reuse;
        self
    }
}
