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
                // A live peer: what it has not read is the socket's outgoing queue, where the
                // kernel tells it (a local socket, as Node's stdio is).
                return match unix_unread(stat.st_ino) {
                    Some(0) => Taken::Read,
                    Some(_) => Taken::Pending,
                    None => Taken::Unknown,
                };
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

/// What the peer of the local (`AF_UNIX`) socket with inode `ino` has not read of what was
/// written to it: the socket's outgoing queue as the kernel's socket diagnostics report it
/// (`NETLINK_SOCK_DIAG`, `UNIX_DIAG_RQLEN`: what `ss -x` shows as Send-Q), in bytes of
/// kernel memory, 0 when everything was read. `None` when it cannot tell: not a local socket,
/// no socket diagnostics in this kernel, or no answer within 100 ms.
fn unix_unread(ino: u64) -> Option<u32> {
    use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketType, netlink, sockopt};
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    const NLMSG_ERROR: u16 = 2;
    const AF_UNIX: u8 = 1;
    const UDIAG_SHOW_RQLEN: u32 = 0x10;
    const UNIX_DIAG_RQLEN: u16 = 4;
    let ino = u32::try_from(ino).ok()?;
    let diag = rustix::net::socket(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        Some(netlink::SOCK_DIAG),
    )
    .ok()?;
    sockopt::set_socket_timeout(
        &diag,
        sockopt::Timeout::Recv,
        Some(Duration::from_millis(100)),
    )
    .ok()?;
    // struct nlmsghdr, then struct unix_diag_req (linux/unix_diag.h): 16 + 24 bytes.
    let mut req = Vec::with_capacity(40);
    req.extend_from_slice(&40u32.to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    req.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    req.extend_from_slice(&[AF_UNIX, 0, 0, 0]); // family, protocol, padding
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    req.extend_from_slice(&ino.to_ne_bytes());
    req.extend_from_slice(&UDIAG_SHOW_RQLEN.to_ne_bytes());
    req.extend_from_slice(&[0xff; 8]); // no cookie
    rustix::net::send(&diag, &req, SendFlags::empty()).ok()?;
    let mut buf = [0u8; 1024];
    let (got, _) = rustix::net::recv(&diag, &mut buf[..], RecvFlags::empty()).ok()?;
    let msg = buf.get(..got)?;
    let u16_at = |at: usize| Some(u16::from_ne_bytes(msg.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_ne_bytes(msg.get(at..at + 4)?.try_into().ok()?));
    if u16_at(4)? == NLMSG_ERROR || u32_at(20)? != ino {
        return None;
    }
    let end = usize::try_from(u32_at(0)?).ok()?.min(msg.len());
    // After struct unix_diag_msg (16 bytes), the attributes: length, type, data, each padded
    // to 4 bytes; UNIX_DIAG_RQLEN holds the receive queue, then the outgoing one.
    let mut at = 32;
    while at + 4 <= end {
        let len = usize::from(u16_at(at)?);
        if len < 4 {
            return None;
        }
        if u16_at(at + 2)? == UNIX_DIAG_RQLEN {
            return u32_at(at + 8);
        }
        at += (len + 3) & !3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::unix_unread;
    use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

    /// The unread part of a local socket, as the kernel reports it: some while the peer has
    /// not read, none once it has.
    #[test]
    fn what_a_local_socket_s_peer_has_not_read_is_seen() {
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::empty(),
            None,
        )
        .unwrap();
        let ino = rustix::fs::fstat(&ours).unwrap().st_ino;
        let Some(before) = unix_unread(ino) else {
            eprintln!("no socket diagnostics in this kernel: skipped");
            return;
        };
        assert_eq!(before, 0);
        rustix::net::send(&ours, &[b'x'; 1500], SendFlags::empty()).unwrap();
        assert!(unix_unread(ino).unwrap() > 0, "unread bytes not seen");
        let mut buf = [0u8; 2048];
        let mut read = 0;
        while read < 1500 {
            read += rustix::net::recv(&theirs, &mut buf[..], RecvFlags::empty())
                .unwrap()
                .0;
        }
        assert_eq!(unix_unread(ino), Some(0));
    }
}
