//! Asking a person (spec/asks.md), measured beside the waits it is built on, in the same run:
//!
//! 1. an answer given (`Asks::answer`, durable) -> the blocked ask (`wait_outcome`, another
//!    thread) returns it, beside a sent signal -> the blocked `wait` delivers it;
//! 2. the same, the answer given by a whole `sigbox answer` process;
//! 3. a `sigbox hook claude` process on a PermissionRequest whose request a person (a thread
//!    here) answers at once, beside an `ls` process and the same hook on a PreToolUse with an
//!    empty inbox.
//!
//! Run: `cargo build --release -p sigbox-client -p sigbox-bench && ./target/release/asks [DIR]`

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};
use sigbox::asks::{Asks, NewAsk};
use sigbox::{Durability, Mailbox};
use sigbox_bench::{Staged, Stats, paired, row, sigbox_bin, wait_latency, workdir};
use sigbox_client::Waited;

const ROUNDS: usize = 300;
const WARMUP: usize = 20;

/// Answer -> the blocked ask returns: from the start of the answer (`by_process`: the spawn
/// of a `sigbox answer` process; else the `Asks::answer` call) to the asker's return.
fn answer_latency(root: &Path, bin: &Path, by_process: bool) -> Stats {
    let (ready_tx, ready_rx) = mpsc::channel::<String>();
    let (done_tx, done_rx) = mpsc::channel::<Instant>();
    let root2 = root.to_path_buf();
    let tag = if by_process { "p" } else { "l" };
    let asker = std::thread::spawn(move || {
        let mb = Mailbox::open(&root2).unwrap();
        let asks = Asks::new(&mb);
        for i in 0..ROUNDS + WARMUP {
            let asked = asks
                .ask(&NewAsk::new("Executor", "go?").key(&format!("{tag}{i}")))
                .unwrap();
            ready_tx.send(asked.request.id.clone()).unwrap();
            let got =
                sigbox_client::wait_outcome(&mb, &asked.request.id, "Executor", None, &mut || {
                    false
                })
                .unwrap();
            let t = Instant::now();
            assert!(matches!(got, Waited::Outcome(_)));
            done_tx.send(t).unwrap();
        }
    });
    let mb = Mailbox::open(root).unwrap();
    let asks = Asks::new(&mb);
    let mut samples = Vec::new();
    for i in 0..ROUNDS + WARMUP {
        let id = ready_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(2)); // let the asker block
        let t0 = Instant::now();
        if by_process {
            let st = Command::new(bin)
                .arg("--root")
                .arg(root)
                .args(["answer", &id, "approve", "--from", "alice"])
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success());
        } else {
            asks.answer(&id, "approve", None, "alice").unwrap().unwrap();
        }
        let t1 = done_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        if i >= WARMUP {
            samples.push(t1 - t0);
        }
    }
    asker.join().unwrap();
    Stats::of(samples)
}

/// A person who answers every request in `root/asks/` `approve` as soon as it is there.
fn answer_everything(root: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        let mb = Mailbox::open(&root).unwrap();
        let asks = Asks::new(&mb);
        let dir = root.join("asks");
        std::fs::create_dir_all(&dir).unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        let mut w = notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
            let _ = tx.send(());
        })
        .unwrap();
        w.watch(&dir, RecursiveMode::NonRecursive).unwrap();
        let mut done: HashSet<String> = HashSet::new();
        while !stop.load(Ordering::Relaxed) {
            for e in std::fs::read_dir(&dir).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                if let Some(id) = name.strip_suffix(".request.json")
                    && !name.starts_with('.')
                    && done.insert(id.to_string())
                {
                    let _ = asks.answer(id, "approve", None, "alice").unwrap();
                }
            }
            let _ = rx.recv_timeout(Duration::from_millis(100));
        }
    })
}

/// One hook process, `event` on its stdin; its stdout.
fn hook(bin: &Path, root: &Path, event: &[u8]) -> Vec<u8> {
    let mut child = Command::new(bin)
        .arg("--root")
        .arg(root)
        .args(["hook", "claude", "--as", "Executor"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(event).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "hook failed");
    out.stdout
}

fn permission_event(i: usize) -> Vec<u8> {
    serde_json::json!({
        "session_id": "abc123", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
        "permission_mode": "default", "hook_event_name": "PermissionRequest",
        "tool_name": "Bash", "tool_input": {"command": "make deploy"},
        "tool_use_id": format!("toolu_{i}"),
    })
    .to_string()
    .into_bytes()
}

const PRE_TOOL: &[u8] = br#"{"session_id":"abc123","transcript_path":"/tmp/t.jsonl","cwd":"/tmp","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}"#;

fn main() {
    let (parent, tmp) = workdir("sigbox-bench-asks-");
    let root = tmp.path().join("signals");
    Mailbox::init(&root).unwrap();
    let bin = sigbox_bin();

    println!("| operation | baseline p50 / p99 | sigbox p50 / p99 | ratio p50 / p99 | target |");
    println!("|---|---|---|---|---|");
    let (_, sent) = wait_latency(tmp.path(), &root, Durability::Durable, ROUNDS, Staged::Sent);
    let lib = answer_latency(&root, &bin, false);
    row(
        "answer given (`Asks::answer`, durable: 2 fsyncs) -> the blocked ask returns it (fsync of asks/) vs rename into inputs/ -> the blocked `wait` delivers (durable claim)",
        sent,
        lib,
        "same order as the wait",
    );
    let whole = answer_latency(&root, &bin, true);
    row(
        "a whole `sigbox answer ID approve` process -> the blocked ask returns vs the same answer given in-process",
        lib,
        whole,
        "the process start-up, no more",
    );

    let hooks_root = tmp.path().join("hooks");
    Mailbox::init(&hooks_root).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let person = answer_everything(&hooks_root, stop.clone());
    let inputs = hooks_root.join("inputs");
    let mut n = 0;
    let (ls, perm) = paired(
        ROUNDS,
        WARMUP,
        || {
            let st = Command::new("ls")
                .arg(&inputs)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success());
        },
        || {
            n += 1;
            let out = hook(&bin, &hooks_root, &permission_event(n));
            assert!(out.starts_with(br#"{"hookSpecificOutput""#), "allowed");
        },
    );
    let empty: PathBuf = tmp.path().join("empty");
    Mailbox::init(&empty).unwrap();
    let (pre, _) = paired(
        ROUNDS,
        WARMUP,
        || {
            assert!(hook(&bin, &empty, PRE_TOOL).is_empty());
        },
        || {},
    );
    stop.store(true, Ordering::Relaxed);
    person.join().unwrap();
    row(
        "`sigbox hook claude` on a PermissionRequest answered at once (ask, wait, allow; whole process) vs an `ls` process of inputs/",
        ls,
        perm,
        "a few ms: a person takes seconds",
    );
    row(
        "the same PermissionRequest hook vs `sigbox hook claude` on a PreToolUse, empty inbox",
        pre,
        perm,
        "-",
    );
    println!();
    println!("filesystem: {parent}");
}
