//! `sigbox-mcp` over stdio: a `check` round trip on an empty inbox beside the same checkpoint
//! pass in process (what the server adds: JSON-RPC, the pipe, the thread hand-off), the start-up
//! to the first answer, and the bytes of the tool list (paid in tokens on every model call).
//!
//! Usage: `cargo build --release -p sigbox-mcp -p sigbox-bench && ./target/release/mcp [DIR]`

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use serde_json::{Value, json};
use sigbox::Mailbox;
use sigbox_bench::{Stats, row, us, workdir};
use sigbox_client::Checkpoint;

struct Conn {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    id: u64,
}

impl Conn {
    fn start(root: &std::path::Path) -> Conn {
        let bin = sigbox_bench::shipped_bin("sigbox-mcp");
        let mut child = Command::new(bin)
            .arg("--root")
            .arg(root)
            .args(["--as", "Executor"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Conn {
            child,
            stdin,
            stdout,
            id: 0,
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    }

    fn initialize(&mut self) -> Value {
        let r = self.call(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}),
        );
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        r
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() {
    let (_, tmp) = workdir("sigbox-bench-mcp-");
    let root = tmp.path().join("signals");
    Mailbox::init(&root).unwrap();
    let mut conn = Conn::start(&root);
    conn.initialize();
    let tools = conn.call("tools/list", json!({}));
    let tool_bytes = tools["result"].to_string().len();
    let mut cp = Checkpoint::open(&root, "Planner").unwrap();
    let (n, warm) = (2000, 100);
    let mut base = Vec::with_capacity(n);
    let mut over = Vec::with_capacity(n);
    for i in 0..n + warm {
        let t = Instant::now();
        assert!(cp.poll().unwrap().is_empty());
        let b = t.elapsed();
        let t = Instant::now();
        let r = conn.call("tools/call", json!({"name": "check", "arguments": {}}));
        let o = t.elapsed();
        assert_eq!(r["result"]["content"][0]["text"], "{\"signals\":[]}", "{r}");
        if i >= warm {
            base.push(b);
            over.push(o);
        }
    }
    drop(conn);
    let mut starts = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        let mut c = Conn::start(&root);
        c.initialize();
        let r = c.call("tools/call", json!({"name": "check", "arguments": {}}));
        starts.push(t.elapsed());
        assert!(r["result"].is_object());
    }
    println!("| operation | baseline p50 / p99 | sigbox p50 / p99 | ratio p50 / p99 | target |");
    println!("|---|---|---|---|---|");
    row(
        "`check` over stdio on an empty inbox (JSON-RPC round trip) vs the same pass in process",
        Stats::of(base),
        Stats::of(over),
        "sigbox p50 under 1 ms",
    );
    let s = Stats::of(starts);
    println!();
    println!(
        "start-up to the first `check` answer (process start, initialize, call): p50 {}, p99 {}",
        us(s.p50),
        us(s.p99)
    );
    println!("tool list: {tool_bytes} bytes of JSON (4 tools)");
}
