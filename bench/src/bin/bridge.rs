//! Cross-host delivery through `sigbox bridge`: a signal sent on one root and delivered to an
//! agent waiting on another (each root with its own `sigbox-bridge`, one `nats-server` with
//! JetStream syncing every write), beside a bare JetStream round trip on the same server in
//! the same run (publish, wait for the server's ack, consume, double-ack). Then throughput:
//! a burst of signals sent at once, until the last is delivered, beside the same burst
//! through bare JetStream with the bridge's consumer settings (one unacknowledged at a time).
//!
//! The server is `$SIGBOX_NATS_SERVER`, else the `nats-server` beside `$SIGBOX_PYTHON`, else
//! `target/py-tools/bin/nats-server` (`.ci/run` installs it).
//!
//! Usage: `cargo build --release -p sigbox-bridge -p sigbox-bench && ./target/release/bridge [DIR]`

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt as _;
use sigbox::{Mailbox, MailboxOptions, NewSignal, SignalType, Target};
use sigbox_bench::{Stats, row, us, workdir};
use sigbox_client::Checkpoint;

struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn nats_server() -> PathBuf {
    if let Some(p) = std::env::var_os("SIGBOX_NATS_SERVER").filter(|p| !p.is_empty()) {
        return p.into();
    }
    if let Some(py) = std::env::var_os("SIGBOX_PYTHON").filter(|p| !p.is_empty()) {
        return Path::new(&py).with_file_name("nats-server");
    }
    PathBuf::from("target/py-tools/bin/nats-server")
}

fn port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn main() {
    let (_, tmp) = workdir("sigbox-bench-bridge-");
    let dir = tmp.path();
    let server = nats_server();
    if !server.exists() {
        println!(
            "(no nats-server at {}: run .ci/run once, or set SIGBOX_NATS_SERVER)",
            server.display()
        );
        return;
    }
    let p = port();
    let conf = dir.join("server.conf");
    std::fs::write(
        &conf,
        format!(
            "listen: 127.0.0.1:{p}\njetstream {{ store_dir: {:?}, sync_interval: always }}\n",
            dir.join("js")
        ),
    )
    .unwrap();
    let mut children = Killed(vec![
        Command::new(&server)
            .arg("-c")
            .arg(&conf)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ]);
    while TcpStream::connect(("127.0.0.1", p)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("nats://127.0.0.1:{p}");
    let bridge = std::env::current_exe()
        .unwrap()
        .with_file_name("sigbox-bridge");
    assert!(bridge.exists(), "{}: build it first", bridge.display());
    let roots: Vec<PathBuf> = ["a", "b"].iter().map(|h| dir.join(h)).collect();
    for (root, host) in roots.iter().zip(["a", "b"]) {
        Mailbox::init(root).unwrap();
        children.0.push(
            Command::new(&bridge)
                .arg("--root")
                .arg(root)
                .args([
                    "--nats",
                    &url,
                    "--host",
                    host,
                    "--mailbox",
                    "bench",
                    "--settle",
                    "0",
                ])
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    let mut opts = MailboxOptions::new();
    opts.settle(Duration::ZERO);
    let sender = opts.open(&roots[0]).unwrap();
    let mut cp = Checkpoint::with_options(&opts, &roots[1], "Executor").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let js = rt.block_on(async {
        let c = async_nats::connect(&url).await.unwrap();
        jetstream::new(c)
    });
    let bare = rt.block_on(bare_consumer(&js));
    // Warm-up: the bridges are connected and see the Executor on b.
    std::thread::sleep(Duration::from_millis(800));
    let steer = |i: usize| {
        let mut s = NewSignal::new(SignalType::Steer);
        s.target(Target::Agent("Executor".into()))
            .message(format!("m{i}"));
        s
    };
    let (n, warm) = (300, 30);
    let mut base = Vec::with_capacity(n);
    let mut over = Vec::with_capacity(n);
    for i in 0..n + warm {
        let t = Instant::now();
        rt.block_on(bare_round_trip(&js, &bare, i));
        let b = t.elapsed();
        let t = Instant::now();
        sender.send(&steer(i)).unwrap();
        let mut got = Vec::new();
        while got.is_empty() {
            got = cp.wait(Some(Duration::from_secs(30))).unwrap();
        }
        let o = t.elapsed();
        assert_eq!(got.len(), 1);
        if i >= warm {
            base.push(b);
            over.push(o);
        }
    }
    println!("| operation | baseline p50 / p99 | sigbox p50 / p99 | ratio p50 / p99 | target |");
    println!("|---|---|---|---|---|");
    row(
        "signal sent on one root, delivered to an agent waiting on another, vs a bare JetStream round trip (publish + ack, consume + double ack)",
        Stats::of(base),
        Stats::of(over),
        "sigbox p50 under 10 ms",
    );
    // Throughput: a burst.
    let burst = 2000;
    let t = Instant::now();
    rt.block_on(bare_burst(&js, &bare, burst));
    let bare_t = t.elapsed();
    let t = Instant::now();
    for i in 0..burst {
        sender.send(&steer(i)).unwrap();
    }
    let sent_t = t.elapsed();
    let mut got = 0;
    while got < burst {
        got += cp.wait(Some(Duration::from_secs(60))).unwrap().len();
    }
    let all_t = t.elapsed();
    println!();
    println!(
        "throughput, {burst} signals sent at once on one root to an agent on another: {:.0} signals/s \
         (sent in {}, all delivered in {}); bare JetStream, the same burst published then consumed \
         one unacknowledged at a time with double acks: {:.0} messages/s",
        burst as f64 / all_t.as_secs_f64(),
        us(sent_t),
        us(all_t),
        burst as f64 / bare_t.as_secs_f64()
    );
}

async fn bare_consumer(js: &jetstream::Context) -> consumer::PullConsumer {
    let s = js
        .get_or_create_stream(stream::Config {
            name: "bare".into(),
            subjects: vec!["bare".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
    s.get_or_create_consumer(
        "bare",
        consumer::pull::Config {
            durable_name: Some("bare".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            max_ack_pending: 1,
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

async fn bare_round_trip(js: &jetstream::Context, c: &consumer::PullConsumer, i: usize) {
    js.publish("bare", format!("m{i}").into())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut batch = c
        .batch()
        .max_messages(1)
        .expires(Duration::from_secs(5))
        .messages()
        .await
        .unwrap();
    let m = batch.next().await.unwrap().unwrap();
    m.double_ack().await.unwrap();
}

async fn bare_burst(js: &jetstream::Context, c: &consumer::PullConsumer, n: usize) {
    let mut acks = Vec::with_capacity(n);
    for i in 0..n {
        acks.push(js.publish("bare", format!("m{i}").into()).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }
    let mut messages = c.messages().await.unwrap();
    for _ in 0..n {
        let m = messages.next().await.unwrap().unwrap();
        m.double_ack().await.unwrap();
    }
}
