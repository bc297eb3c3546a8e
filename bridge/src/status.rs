//! `sigbox bridge status`: this host's bridge from its state file, and, with a server, every
//! host's presence and counts (from the hosts bucket) and each consumer's lag.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, anyhow};
use futures::StreamExt as _;
use serde_json::{Value, json};
use sigbox::MailboxOptions;

use crate::Cli;
use crate::names::Names;

pub(crate) fn run(cli: &Cli, as_json: bool) -> Result<ExitCode> {
    let names = Names::new(&cli.mailbox)?;
    let mut opts = MailboxOptions::new();
    opts.settle(cli.settle);
    let mb = opts.open(&cli.root)?;
    let state: Option<Value> = match mb.bridge_state()? {
        Some(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| {
            anyhow!(
                "{}: not valid JSON: {e}",
                mb.bridge_dir().join("state.json").display()
            )
        })?),
        None => None,
    };
    let running = mb.bridge_running()?;
    let (outbox, sent) = mb.bridge_counts()?;
    let url = cli
        .nats
        .clone()
        .or_else(|| state.as_ref()?.get("nats")?.as_str().map(str::to_string));
    let cluster = match &url {
        Some(u) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Some(
                rt.block_on(async {
                    tokio::time::timeout(Duration::from_secs(5), cluster_view(u, &names)).await
                })
                .unwrap_or_else(|_| Err(anyhow!("{u}: no answer within 5 s")))
                .unwrap_or_else(|e| json!({"error": format!("{e:#}")})),
            )
        }
        None => None,
    };
    let report = json!({
        "root": mb.root(),
        "running": running,
        "outbox": outbox,
        "sent": sent,
        "state": state,
        "server": url,
        "cluster": cluster,
    });
    if as_json {
        println!("{report}");
        return Ok(ExitCode::SUCCESS);
    }
    print_text(&report);
    Ok(ExitCode::SUCCESS)
}

/// Every host's entry in the bucket, and each consumer's lag.
async fn cluster_view(url: &str, names: &Names) -> Result<Value> {
    let client = async_nats::connect(crate::run::server_list(url))
        .await
        .map_err(|e| anyhow!("cannot connect ({})", e.kind()))?;
    let js = async_nats::jetstream::new(client);
    let mut hosts = serde_json::Map::new();
    if let Ok(kv) = js.get_key_value(names.hosts_bucket()).await {
        let mut keys = kv.keys().await?;
        while let Some(k) = keys.next().await {
            let k = k?;
            if let Some(v) = kv.get(&k).await? {
                hosts.insert(k, serde_json::from_slice(&v).unwrap_or(Value::Null));
            }
        }
    }
    let mut lag = serde_json::Map::new();
    for stream in [names.work_stream(), names.broadcast_stream()] {
        let Ok(mut s) = js.get_stream(&stream).await else {
            continue;
        };
        let mut consumers = s.consumers();
        while let Some(info) = consumers.next().await {
            let info = info?;
            lag.insert(
                info.name.clone(),
                json!({
                    "stream": stream,
                    "pending": info.num_pending,
                    "unacknowledged": info.num_ack_pending,
                    "redelivered": info.num_redelivered,
                }),
            );
        }
        let st = s.info().await?.state.clone();
        lag.insert(
            format!("stream {stream}"),
            json!({"messages": st.messages, "last_seq": st.last_sequence}),
        );
    }
    Ok(json!({"hosts": hosts, "consumers": lag}))
}

fn print_text(r: &Value) {
    let s = &r["state"];
    println!(
        "bridge on {}: {}",
        r["root"].as_str().unwrap_or("?"),
        if r["running"].as_bool() == Some(true) {
            "running"
        } else {
            "not running"
        }
    );
    if s.is_object() {
        let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
        println!(
            "  host {}, server {}, last update {}",
            text(&s["host"]),
            text(&s["nats"]),
            text(&s["updated_at"])
        );
        println!(
            "  exported {} (+{} broadcasts), imported {}, already here {}, refused {}, errors {}",
            s["exported"],
            s["exported_broadcasts"],
            s["imported"],
            s["already_here"],
            s["refused"],
            s["errors"]
        );
        if let Some(e) = s["last_error"].as_str() {
            println!("  last error: {e}");
        }
    } else {
        println!("  no bridge has run on this root");
    }
    println!("  outbox {} waiting, sent {}", r["outbox"], r["sent"]);
    let c = &r["cluster"];
    if let Some(e) = c["error"].as_str() {
        println!("server {}: {e}", r["server"].as_str().unwrap_or("?"));
        return;
    }
    if let Some(hosts) = c["hosts"].as_object() {
        println!("hosts:");
        for (h, v) in hosts {
            let present: Vec<&str> = v["present"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            println!(
                "  {h}: {} present [{}], exported {}, imported {}, updated {}",
                present.len(),
                present.join(", "),
                v["exported"],
                v["imported"],
                v["updated_at"].as_str().unwrap_or("?")
            );
        }
    }
    if let Some(cons) = c["consumers"].as_object() {
        println!("lag:");
        for (name, v) in cons {
            if let Some(p) = v.get("pending") {
                println!(
                    "  {name}: {p} pending, {} unacknowledged",
                    v["unacknowledged"]
                );
            } else {
                println!("  {name}: {} messages", v["messages"]);
            }
        }
    }
}
