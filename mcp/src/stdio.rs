//! The two halves of stdio as the server watches them: stdin noting when the client closed
//! it ([`Input`]), and stdout telling whether what was written to it was read ([`Taken`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a server whose client closed its input waits for stdout to show that the last
/// answers were read (a pipe drained, or its reader gone; a socket closed by its peer).
pub(crate) const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// The client's half of stdio, noting when it ends: a client that closed its end reads no
/// more answers, so nothing claimed from then on is returned (or acknowledged at exit). A
/// read that fails with a reset (stdin and stdout one socket, closed by a client that left
/// answers unread) is noted apart.
pub(crate) struct Input<R> {
    pub(crate) inner: R,
    pub(crate) closed: Arc<AtomicBool>,
    pub(crate) reset: Arc<AtomicBool>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Input<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(res) = &r
            && (res.is_err() || buf.filled().len() == before)
        {
            if res
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
            {
                self.reset.store(true, Ordering::SeqCst);
            }
            self.closed.store(true, Ordering::SeqCst);
        }
        r
    }
}

/// The server's half of stdio, noting the id of each response written whole: an answer is
/// acknowledged only once it was written, never while it waits to be (a client that sends
/// its next call before reading, spec/mcp.md "Delivery").
pub(crate) struct Output<W> {
    pub(crate) inner: W,
    /// The line being written, until its newline.
    pub(crate) line: Vec<u8>,
    /// The ids (as JSON text) of the responses written whole so far and not yet forgotten.
    pub(crate) written: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// The `id` of a JSON-RPC message, read without the rest.
#[derive(serde::Deserialize)]
struct MessageId {
    id: Option<serde_json::Value>,
}

/// A request id as [`Output`] notes it: its JSON text.
pub(crate) fn id_key(id: &rmcp::model::RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

impl<W: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Output<W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &r {
            let mut rest = &buf[..*n];
            while let Some(end) = rest.iter().position(|&b| b == b'\n') {
                self.line.extend_from_slice(&rest[..end]);
                rest = &rest[end + 1..];
                let line = std::mem::take(&mut self.line);
                if let Ok(MessageId { id: Some(id) }) = serde_json::from_slice(&line) {
                    self.written
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id.to_string());
                }
            }
            self.line.extend_from_slice(rest);
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What stdout says, at one look, of the bytes written to it so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// All read: a pipe with nothing left in it; a socket its peer closed with nothing unread;
    /// or something that is not a pipe or a socket (a file, a terminal: written is handed
    /// over, as `sigbox poll` counts it).
    Read,
    /// Never read: a pipe whose reader has gone with bytes left in it; a socket its peer
    /// closed with bytes unread (the kernel reports `ECONNRESET` then).
    Unread,
    /// A pipe with bytes left in it, its reader still there.
    Pending,
    /// A socket its peer keeps open: no socket tells how much its peer has taken.
    Unknown,
}

/// One look at stdout ([`Taken`]).
pub(crate) fn stdout_taken() -> Taken {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::fs::FileType;
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let fd = stdout.as_fd();
    let Ok(stat) = rustix::fs::fstat(fd) else {
        return Taken::Unread;
    };
    let events = |flags: PollFlags| {
        let mut fds = [PollFd::new(&fd, flags)];
        match poll(&mut fds, Some(&Timespec::default())) {
            Ok(_) => fds[0].revents(),
            Err(_) => PollFlags::ERR,
        }
    };
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Fifo => match rustix::io::ioctl_fionread(fd) {
            Ok(0) => Taken::Read,
            // A pipe's writer sees POLLERR once no reader is left.
            Ok(_) if !events(PollFlags::OUT).contains(PollFlags::ERR) => Taken::Pending,
            _ => Taken::Unread,
        },
        FileType::Socket => {
            if !events(PollFlags::empty()).intersects(PollFlags::HUP | PollFlags::ERR) {
                return Taken::Unknown;
            }
            match rustix::net::sockopt::socket_error(fd) {
                Ok(Ok(())) => Taken::Read,
                _ => Taken::Unread,
            }
        }
        _ => Taken::Read,
    }
}

/// Whether the client read everything written to stdout, once it closed its input, waiting
/// up to `grace` for stdout to tell ([`Taken`]): a pipe still holding bytes after `grace`
/// was not read; a socket whose peer keeps it open past `grace` is a client shutting down
/// cleanly (it closed its input and waits for the server to exit, reading meanwhile), taken
/// as read, since a client that dies closes its socket at once.
pub(crate) fn answers_read(grace: Duration) -> bool {
    let deadline = Instant::now() + grace;
    loop {
        match stdout_taken() {
            Taken::Read => return true,
            Taken::Unread => return false,
            Taken::Pending if Instant::now() >= deadline => return false,
            Taken::Unknown if Instant::now() >= deadline => return true,
            Taken::Pending | Taken::Unknown => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}
