//! `sigbox-ui`, the console: how soon a file renamed into `inputs/` reaches a Server-Sent
//! Events client of `/api/events`, beside a blocked `wait` delivering the same rename (durable
//! claim) in the same run; and `GET /api/state` on a root with 10,000 pending signals, beside
//! `sigbox ls --json` listing the same root.
//!
//! Usage: `cargo build --release -p sigbox-client -p sigbox-console -p sigbox-bench &&
//! ./target/release/console [DIR]`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sigbox::{Durability, MailboxOptions, NewSignal, SignalType, Target};
use sigbox_bench::{Staged, Stats, row, sigbox_bin, wait_latency, workdir};

const ROUNDS: usize = 300;

struct Ui {
    child: Child,
    port: u16,
    token: String,
}

impl Ui {
    fn start(root: &Path) -> Ui {
        let bin = sigbox_bench::shipped_bin("sigbox-ui");
        let mut child = Command::new(bin)
            .arg("--root")
            .arg(root)
            .args(["--listen", "127.0.0.1:0", "--settle", "0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let (addr, token) = line
            .trim()
            .trim_start_matches("http://")
            .split_once("/?token=")
            .unwrap();
        let port = addr.rsplit_once(':').unwrap().1.parse().unwrap();
        Ui {
            child,
            port,
            token: token.to_string(),
        }
    }

    fn connect(&self, path: &str) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_nodelay(true).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\n\
             Connection: close\r\n\r\n",
            self.port, self.token
        )
        .unwrap();
        s
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads SSE lines until a `data:` line containing `needle`.
fn until_event(r: &mut BufReader<TcpStream>, needle: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "the event stream ended"
        );
        if line.starts_with("data:") && line.contains(needle) {
            return;
        }
    }
}

fn sse_latency(root: &Path, rounds: usize) -> Stats {
    let ui = Ui::start(root);
    let s = ui.connect("/api/events");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s);
    until_event(&mut r, "\"seq\"");
    let mut samples = Vec::new();
    for i in 0..rounds + 20 {
        let name = format!("drop-{i:06}.json");
        let staged = root.join("tmp").join(&name);
        std::fs::write(&staged, br#"{"type":"INFO","target":"Executor"}"#).unwrap();
        let to = root.join("inputs").join(&name);
        let t0 = Instant::now();
        std::fs::rename(&staged, &to).unwrap();
        until_event(&mut r, &format!("\"moved_in\",\"path\":\"inputs/{name}\""));
        let t = t0.elapsed();
        std::fs::remove_file(&to).unwrap();
        until_event(&mut r, &format!("\"removed\",\"path\":\"inputs/{name}\""));
        if i >= 20 {
            samples.push(t);
        }
    }
    Stats::of(samples)
}

fn state_with_pending(root: &Path, n: usize, rounds: usize) -> (Stats, Stats) {
    let mut opts = MailboxOptions::new();
    opts.durability(Durability::RelaxedNoFsync);
    let mb = opts.init(root).unwrap();
    for i in 0..n {
        let mut s = NewSignal::new(SignalType::Steer);
        s.target(Target::Agent(format!("Agent{}", i % 50)))
            .message(format!("message {i}"));
        mb.send(&s).unwrap();
    }
    let ui = Ui::start(root);
    let ls = || {
        let out = Command::new(sigbox_bin())
            .arg("--root")
            .arg(root)
            .args(["ls", "--json"])
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        assert!(out.status.success());
        std::hint::black_box(out.stdout.len());
    };
    let get = || {
        let mut s = ui.connect("/api/state");
        let mut body = Vec::new();
        s.read_to_end(&mut body).unwrap();
        assert!(
            body.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&body[..80])
        );
        std::hint::black_box(body.len());
    };
    sigbox_bench::paired(rounds, 3, ls, get)
}

fn main() {
    let (_parent, tmp) = workdir("sigbox-console-bench-");
    let base = tmp.path();
    let wait_root = base.join("wait");
    let mut opts = MailboxOptions::new();
    opts.durability(Durability::Durable);
    opts.init(&wait_root).unwrap();
    let (_bare, wait) = wait_latency(base, &wait_root, Durability::Durable, ROUNDS, Staged::Sent);
    let sse_root = base.join("sse");
    sigbox::Mailbox::init(&sse_root).unwrap();
    let sse = sse_latency(&sse_root, ROUNDS);
    println!("| operation | baseline p50 / p99 | sigbox p50 / p99 | ratio p50 / p99 | target |");
    println!("|---|---|---|---|---|");
    row(
        "a file renamed into `inputs/` → its event received by an `/api/events` client, vs the \
         same rename delivered to a blocked `wait` (durable claim)",
        wait,
        sse,
        "",
    );
    let (ls, state) = state_with_pending(&base.join("state"), 10_000, 20);
    row(
        "`GET /api/state` with 10,000 pending (a new connection each), vs `sigbox ls --json` on \
         the same root",
        ls,
        state,
        "",
    );
}
