//! `sigbox bridge status`: this host's bridge from its state file, and, with a server, every
//! host's presence and counts (from the hosts bucket) and each consumer's lag.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, anyhow};
use futures::StreamExt as _;
use serde_json::{Value, json};
use sigbox::MailboxOptions;
use sigbox::bridge_state::BridgeState;

use crate::Cli;
use crate::names::Names;

pub(crate) fn run(cli: &Cli, as_json: bool) -> Result<ExitCode> {
    let mut opts = MailboxOptions::new();
    opts.settle(cli.settle).durability(cli.durability);
    let mb = opts.open(&cli.root)?;
    let state: Option<BridgeState> = mb.bridge().state()?;
    let running = mb.bridge().running()?;
    // The mailbox this root's bridge ran with, unless one is named.
    let mailbox = cli
        .mailbox
        .clone()
        .or_else(|| state.as_ref()?.mailbox.clone())
        .unwrap_or_else(|| crate::run::DEFAULT_MAILBOX.to_string());
    let names = Names::new(&mailbox)?;
    let (outbox, sent) = mb.bridge().counts()?;
    // What was exported is what is durable now (the records in bridge/sent/, the markers in
    // bridge/broadcasts/), not what the state file said up to a second before a kill.
    let marked = mb.bridge().broadcasts_marked()?;
    let mut state = state;
    if let Some(s) = state.as_mut() {
        s.exported = Some(sent as u64);
        s.exported_broadcasts = Some(marked as u64);
    }
    let url = cli.nats.clone().or_else(|| state.as_ref()?.nats.clone());
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
        "mailbox": mailbox,
        "cluster": cluster,
    });
    if as_json {
        emit(&format!("{report}\n"));
        return Ok(ExitCode::SUCCESS);
    }
    print_text(&report, state.as_ref());
    Ok(ExitCode::SUCCESS)
}

/// Every host's entry in the bucket, and each consumer's lag.
async fn cluster_view(url: &str, names: &Names) -> Result<Value> {
    let client = async_nats::connect(crate::run::server_list(url))
        .await
        .map_err(|e| anyhow!("cannot connect ({})", e.kind()))?;
    let js = async_nats::jetstream::new(client);
    let mut hosts = serde_json::Map::new();
    let mut agents = serde_json::Map::new();
    if let Ok(kv) = js.get_key_value(names.hosts_bucket()).await {
        let mut keys = kv.keys().await?;
        while let Some(k) = keys.next().await {
            let k = k?;
            let Some(v) = kv.get(&k).await? else { continue };
            let v: Value = serde_json::from_slice(&v).unwrap_or(Value::Null);
            if let Some(h) = k.strip_prefix("host.") {
                hosts.insert(h.to_string(), v);
            } else if let Some(a) = k.strip_prefix("agent.") {
                agents.insert(a.to_string(), v["host"].clone());
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
    Ok(json!({"hosts": hosts, "agents": agents, "consumers": lag}))
}

/// A value as text: a string as it is, a number as digits, anything else `?`.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => clean(s),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => "?".into(),
    }
}

/// `s` with its control characters escaped (`\u{1b}`): what other hosts and files say is shown,
/// never obeyed by the terminal.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                format!("\\u{{{:x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// How long ago an RFC 3339 instant was, by this machine's clock.
fn age(v: &Value) -> Option<i64> {
    let t = chrono::DateTime::parse_from_rfc3339(v.as_str()?).ok()?;
    Some((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds())
}

/// A field of the state as text: `?` when missing, control characters escaped.
fn field<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "?".into(), |v| clean(&v.to_string()))
}

fn print_text(r: &Value, state: Option<&BridgeState>) {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "bridge on {} (mailbox {}): {}",
        text(&r["root"]),
        text(&r["mailbox"]),
        if r["running"] == true {
            "running"
        } else {
            "not running"
        }
    );
    if let Some(s) = state {
        let _ = writeln!(
            o,
            "  host {}, server {}, last update {}",
            field(&s.host),
            field(&s.nats),
            field(&s.updated_at)
        );
        let _ = writeln!(
            o,
            "  exported {} (+{} broadcasts), imported {}, already here {}, refused {}, errors {}",
            field(&s.exported),
            field(&s.exported_broadcasts),
            field(&s.counts.imported),
            field(&s.counts.already_here),
            field(&s.counts.refused),
            field(&s.counts.errors)
        );
        if let Some(a) = s.arriving.as_ref().filter(|a| !a.is_empty()) {
            let names: Vec<String> = a.iter().map(|n| clean(n)).collect();
            let _ = writeln!(
                o,
                "  arriving (their signals held back until the hand-off is over): {}",
                names.join(", ")
            );
        }
        if let Some(e) = &s.last_error {
            let _ = writeln!(o, "  last error: {}", clean(e));
        }
    } else {
        let _ = writeln!(o, "  no bridge has run on this root");
    }
    let _ = writeln!(
        o,
        "  outbox {} waiting, sent {}",
        text(&r["outbox"]),
        text(&r["sent"])
    );
    let c = &r["cluster"];
    if let Some(e) = c["error"].as_str() {
        let _ = writeln!(o, "server {}: {}", text(&r["server"]), clean(e));
    }
    if let Some(hosts) = c["hosts"].as_object() {
        let _ = writeln!(o, "hosts:");
        if hosts.is_empty() {
            let _ = writeln!(
                o,
                "  none in mailbox {} on this server",
                text(&r["mailbox"])
            );
        }
        for (h, v) in hosts {
            let present: Vec<String> = v["present"]
                .as_array()
                .map(|a| a.iter().map(text).collect())
                .unwrap_or_default();
            let how = match (v["running"] == true, age(&v["updated_at"])) {
                (false, _) => "stopped".to_string(),
                (true, Some(a)) if a > 10 => format!("silent for {a} s (killed, or cut off?)"),
                (true, _) => "running".to_string(),
            };
            let _ = writeln!(
                o,
                "  {}: {how}; {} present [{}]; exported {}, imported {}; updated {}",
                clean(h),
                present.len(),
                present.join(", "),
                text(&v["exported"]),
                text(&v["imported"]),
                text(&v["updated_at"])
            );
        }
    }
    if let Some(agents) = c["agents"].as_object().filter(|a| !a.is_empty()) {
        let _ = writeln!(o, "agents (the host each last took its presence on):");
        for (a, h) in agents {
            let _ = writeln!(o, "  {}: {}", clean(a), text(h));
        }
    }
    if let Some(cons) = c["consumers"].as_object() {
        let _ = writeln!(o, "lag:");
        for (name, v) in cons {
            if let Some(p) = v.get("pending") {
                let _ = writeln!(
                    o,
                    "  {}: {} pending, {} unacknowledged",
                    clean(name),
                    text(p),
                    text(&v["unacknowledged"])
                );
            } else {
                let _ = writeln!(o, "  {}: {} messages", clean(name), text(&v["messages"]));
            }
        }
    }
    emit(&o);
}

/// Writes `s` to stdout; a closed pipe (`| head`) ends quietly.
fn emit(s: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes()).and_then(|()| out.flush());
}
