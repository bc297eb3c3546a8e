//! What every request handler shares: the roots, the token, the addresses the console answers
//! to, and the channel of changes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::broadcast;

use crate::events::Change;

/// One mailbox the console serves.
pub(crate) struct Root {
    /// The root as given on the command line (shown, and used in the commands the page
    /// suggests).
    pub(crate) path: PathBuf,
    /// Its handle.
    pub(crate) mb: Arc<sigbox::Mailbox>,
    /// The options it was opened with, for [`Root::fresh`].
    pub(crate) opts: sigbox::MailboxOptions,
}

impl Root {
    /// A new handle on the root, opened as `sigbox` opens it at every command. A handle keeps
    /// the descriptors of the directories it has used and looks again at them only in a
    /// checkpoint pass, which the console never runs: so signals are sent, and requests read
    /// and answered, through a fresh one, which refuses a link planted in place of a
    /// directory and sees one made again, where the kept one would still read and write the
    /// directory that was there before, wherever it was moved.
    pub(crate) fn fresh(&self) -> sigbox::Result<sigbox::Mailbox> {
        self.opts.open(&self.path)
    }
}

/// The console's shared state.
pub(crate) struct Console {
    /// The roots, in the order of `--root`.
    pub(crate) roots: Vec<Root>,
    /// The access token (64 hex digits: 256 bits).
    pub(crate) token: String,
    /// The address it listens on.
    pub(crate) listen: SocketAddr,
    /// The `Host` header values it answers to (lower case, with the port).
    pub(crate) hosts: Vec<String>,
    /// Listening on every address (`0.0.0.0`, `::`): it also answers to any IP address with
    /// its port as `Host` (no name: nothing a DNS rebinding can use).
    pub(crate) any_ip: bool,
    /// The cookie the page keeps the token in (the port is in its name: cookies do not tell
    /// ports apart, and two consoles on one host must not take each other's).
    pub(crate) cookie: String,
    /// Every change, to every `/api/events` client.
    pub(crate) changes: broadcast::Sender<Change>,
}

/// The shared state as the handlers take it.
pub(crate) type Shared = Arc<Console>;
