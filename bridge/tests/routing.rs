//! The mailbox's routing rules across hosts (spec/bridge.md §4): a signal for an agent
//! present nowhere waits in the stream until it appears; APPROVE and SKIP reach only the
//! orchestrator, in its approval states, wherever it runs; a signal whose agent left after it
//! was imported crosses again; a dropped file crosses as it was written. And what the bridge
//! refuses: hostile messages on the stream, a planted `bridge/` symlink, a second bridge.

mod common;

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::{Host, Server};
use sigbox::{Mailbox, NewSignal, SignalType, Target};

/// Polls `agent` on `mb` (holding its presence) until `n` signals came or `within` passed.
fn take(
    mb: &Mailbox,
    agent: &str,
    state: Option<&str>,
    n: usize,
    within: Duration,
) -> Vec<sigbox::Signal> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        got.extend(mb.pass(agent, state).unwrap().delivered);
        thread::sleep(Duration::from_millis(10));
    }
    got
}

fn steer(target: &str, msg: &str) -> NewSignal {
    let mut s = NewSignal::new(SignalType::Steer);
    s.target(Target::Agent(target.into())).message(msg);
    s
}

/// Waits until `f` holds, up to 20 s.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn messages(got: &[sigbox::Signal]) -> Vec<String> {
    got.iter()
        .map(|s| s.message.clone().unwrap_or_default())
        .collect()
}

#[test]
fn a_signal_for_an_agent_present_nowhere_waits_in_the_stream_until_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let h0 = Host::start(dir.path(), "h0", &server.url(), "wait", &[]);
    let h1 = Host::start(dir.path(), "h1", &server.url(), "wait", &[]);
    let m0 = h0.mailbox();
    for i in 0..20 {
        m0.send(&steer("Zed", &format!("z{i}"))).unwrap();
    }
    // Exported from h0 (no Zed there), and nowhere to go: h1 has nothing.
    eventually("h0 exported the 20", || {
        m0.bridge().counts().unwrap().1 == 20
    });
    thread::sleep(Duration::from_millis(500));
    assert!(m0.pending().unwrap().is_empty());
    assert!(
        h1.mailbox().pending().unwrap().is_empty(),
        "nothing for Zed on h1 yet"
    );
    // Zed appears on h1: its signals come, once each, in order.
    let m1 = h1.mailbox();
    let _zed = m1.presence("Zed").unwrap();
    let got = take(&m1, "Zed", None, 20, Duration::from_secs(20));
    let want: Vec<String> = (0..20).map(|i| format!("z{i}")).collect();
    assert_eq!(messages(&got), want);
    thread::sleep(Duration::from_millis(500));
    assert!(take(&m1, "Zed", None, 1, Duration::from_millis(300)).is_empty());
    assert!(take(&m0, "Zed", None, 1, Duration::from_millis(300)).is_empty());
}

#[test]
fn approve_and_skip_reach_only_the_orchestrator_in_an_approval_state_on_its_host() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let h0 = Host::start(dir.path(), "h0", &server.url(), "approve", &[]);
    let h1 = Host::start(dir.path(), "h1", &server.url(), "approve", &[]);
    let (m0, m1) = (h0.mailbox(), h1.mailbox());
    let _exec = m0.presence("Executor").unwrap();
    let _orch = m1.presence("Orchestrator").unwrap();
    eventually("each bridge took its agent", || {
        h0.has_agent("Executor") && h1.has_agent("Orchestrator")
    });
    for (ty, target) in [
        (SignalType::Approve, Target::Agent("Executor".into())),
        (SignalType::Skip, Target::All),
        (SignalType::Info, Target::None),
    ] {
        let mut s = NewSignal::new(ty);
        s.target(target).message(format!("{ty:?}"));
        m0.send(&s).unwrap();
    }
    // The untargeted INFO reaches the orchestrator on h1 in any state; APPROVE and SKIP wait
    // there for an approval state.
    let working = take(
        &m1,
        "Orchestrator",
        Some("WORKING"),
        1,
        Duration::from_secs(20),
    );
    assert_eq!(messages(&working), ["Info"]);
    assert!(
        take(
            &m1,
            "Orchestrator",
            Some("WORKING"),
            1,
            Duration::from_millis(500)
        )
        .is_empty()
    );
    let approval = take(
        &m1,
        "Orchestrator",
        Some("KNOWLEDGE_APPROVAL"),
        2,
        Duration::from_secs(10),
    );
    assert_eq!(messages(&approval), ["Approve", "Skip"]);
    // The Executor, present where they were sent, never saw them.
    assert!(take(&m0, "Executor", None, 1, Duration::from_millis(300)).is_empty());
}

#[test]
fn a_signal_whose_agent_left_after_its_import_crosses_again_and_arrives_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let hosts: Vec<Host> = (0..3)
        .map(|i| Host::start(dir.path(), &format!("h{i}"), &server.url(), "move", &[]))
        .collect();
    let ms: Vec<Mailbox> = hosts.iter().map(Host::mailbox).collect();
    // The Planner is present on h1 but does not poll: its signals are imported there.
    let planner = ms[1].presence("Planner").unwrap();
    eventually("h1 took the Planner", || hosts[1].has_agent("Planner"));
    for i in 0..5 {
        ms[0].send(&steer("Planner", &format!("p{i}"))).unwrap();
    }
    eventually("imported on h1", || ms[1].pending().unwrap().len() == 5);
    // It moves to h2.
    drop(planner);
    let _planner = ms[2].presence("Planner").unwrap();
    let got = take(&ms[2], "Planner", None, 5, Duration::from_secs(20));
    assert_eq!(messages(&got), ["p0", "p1", "p2", "p3", "p4"]);
    eventually("h1 is empty again", || ms[1].pending().unwrap().is_empty());
    assert_eq!(ms[1].bridge().counts().unwrap().1, 5, "h1 sent the five on");
    thread::sleep(Duration::from_millis(500));
    assert!(take(&ms[2], "Planner", None, 1, Duration::from_millis(300)).is_empty());
    // Each carries its hops.
    let rec = std::fs::read_dir(hosts[2].root.join("processed"))
        .unwrap()
        .count();
    assert_eq!(rec, 5);
    assert!(
        got.iter().all(|s| s.fields["bridged"]["hops"] == 1),
        "{:?}",
        got[0].fields
    );
}

#[test]
fn a_dropped_yaml_file_crosses_hosts_as_it_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let h0 = Host::start(dir.path(), "h0", &server.url(), "drop", &[]);
    let h1 = Host::start(dir.path(), "h1", &server.url(), "drop", &[]);
    let m1 = h1.mailbox();
    let _p = m1.presence("Planner").unwrap();
    eventually("h1 took the Planner", || h1.has_agent("Planner"));
    let inputs = h0.root.join("inputs");
    std::fs::write(
        inputs.join(".news.tmp"),
        "type: steer\ntarget: Planner\nmessage: no\ncreated_at: 2026-02-08T14:30:00Z\ntickets: [7, 9]\nnote: 'unknown fields travel'\n",
    )
    .unwrap();
    std::fs::rename(inputs.join(".news.tmp"), inputs.join("news.yaml")).unwrap();
    let got = take(&m1, "Planner", None, 1, Duration::from_secs(20));
    assert_eq!(got.len(), 1);
    let s = &got[0];
    assert_eq!(
        s.message.as_deref(),
        Some("no"),
        "the text \"no\", not false"
    );
    assert_eq!(s.fields["tickets"], serde_json::json!([7, 9]));
    assert_eq!(s.fields["note"], "unknown fields travel");
    assert_eq!(s.fields["bridged"]["from"], "h0");
    let origin = s.fields["bridged"]["id"].as_str().unwrap();
    assert!(origin.starts_with("news@"), "{origin}");
    // Its instant is the one it was written with (2026-02-08T14:30:00Z), in its name.
    assert!(
        s.id.starts_with("signal.20260208T143000.000000Z."),
        "{}",
        s.id
    );
    // The original is recorded exported on h0, under its own name.
    assert!(h0.root.join("bridge/sent/news.yaml").exists());
}

/// Messages put on the stream by something other than a bridge: a path in the name, a name
/// and a body that disagree, a body that is not a signal, no name at all, a hand-off mark
/// without a revision. Each is refused
/// (never written, never redelivered), counted, and the next good one still arrives.
#[test]
fn hostile_messages_on_the_stream_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let h1 = Host::start(dir.path(), "h1", &server.url(), "hostile", &[]);
    let m1 = h1.mailbox();
    let _p = m1.presence("Planner").unwrap();
    eventually("the bridge is up", || h1.state()["connected"] == true);
    let good = "signal.20260208T143000.000000Z.0123456789abcdef0123456789abcdef.STEER.Planner";
    let body = |id: &str, target: &str| {
        format!(
            "{{\"id\": \"{id}\", \"type\": \"STEER\", \"target\": \"{target}\", \"message\": \"m\"}}"
        )
    };
    let other = "signal.20260208T143001.000000Z.0123456789abcdef0123456789abcdee.STEER.Planner";
    let cases: Vec<(Option<String>, String)> = vec![
        (
            Some("../../../../tmp/escaped.json".into()),
            body("x", "Planner"),
        ),
        (Some(format!("../{good}.json")), body(good, "Planner")),
        (Some(format!("{other}.json")), body(good, "Planner")),
        (Some(format!("{other}.json")), body(other, "Executor")),
        (Some(format!("{other}.json")), "not json at all".into()),
        (None, body(other, "Planner")),
        (Some(format!("{good}.json")), body(good, "Planner")),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        // A hand-off mark whose revision is not a number.
        let mut h = async_nats::HeaderMap::new();
        h.insert("Sigbox-Handoff", "soon");
        h.insert("Sigbox-Host", "mallory");
        js.publish_with_headers("sigbox.hostile.to.Planner", h, Default::default())
            .await
            .unwrap()
            .await
            .unwrap();
        for (name, payload) in cases {
            let mut h = async_nats::HeaderMap::new();
            if let Some(n) = &name {
                h.insert("Sigbox-Name", n.as_str());
            }
            h.insert("Sigbox-Host", "mallory");
            js.publish_with_headers("sigbox.hostile.to.Planner", h, payload.into_bytes().into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
    let got = take(&m1, "Planner", None, 1, Duration::from_secs(20));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, good);
    eventually("seven refused", || h1.state()["refused"] == 7);
    assert!(!Path::new("/tmp/escaped.json").exists());
    assert!(!dir.path().join(format!("{good}.json")).exists());
    let inputs: Vec<_> = std::fs::read_dir(h1.root.join("inputs")).unwrap().collect();
    assert!(inputs.is_empty(), "{inputs:?}");
    // Refused for good: none of them comes again.
    thread::sleep(Duration::from_millis(2500));
    assert_eq!(h1.state()["refused"], 7);
}

#[test]
fn a_planted_bridge_symlink_and_a_second_bridge_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let root = dir.path().join("r");
    Mailbox::init(&root).unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("bridge")).unwrap();
    let bridge = env!("CARGO_BIN_EXE_sigbox-bridge");
    let out = Command::new(bridge)
        .args(["--root", root.to_str().unwrap(), "--nats", &server.url()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bridge") && err.contains("symlink"), "{err}");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written outside"
    );
    std::fs::remove_file(root.join("bridge")).unwrap();
    // One bridge per root.
    let _first = Host::start(dir.path(), "r", &server.url(), "one", &[]);
    eventually("the first bridge is up", || {
        _first.state()["running"] == true
    });
    let out = Command::new(bridge)
        .args(["--root", root.to_str().unwrap(), "--nats", &server.url()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another bridge runs on this root"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn status_shows_every_host_and_the_lag_and_doctor_reports_a_stopped_bridges_outbox() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let mut h0 = Host::start(dir.path(), "h0", &server.url(), "status", &[]);
    let h1 = Host::start(dir.path(), "h1", &server.url(), "status", &[]);
    let _planner = h1.mailbox().presence("Planner").unwrap();
    let m0 = h0.mailbox();
    for i in 0..3 {
        m0.send(&steer("Zed", &format!("z{i}"))).unwrap();
    }
    eventually("exported", || m0.bridge().counts().unwrap().1 == 3);
    let status = || {
        let out = Command::new(env!("CARGO_BIN_EXE_sigbox-bridge"))
            .args([
                "--root",
                h1.root.to_str().unwrap(),
                "--mailbox",
                "status",
                "status",
                "--json",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    eventually(
        "both hosts in the bucket, the Planner present on h1",
        || {
            let s = status();
            s["cluster"]["hosts"]["h0"]["running"] == true
                && s["cluster"]["hosts"]["h1"]["present"] == serde_json::json!(["Planner"])
        },
    );
    let s = status();
    assert_eq!(s["running"], true);
    assert_eq!(s["state"]["host"], "h1");
    // Zed's three wait in the work stream; the Planner's consumer has nothing pending.
    assert_eq!(
        s["cluster"]["consumers"]["stream sigbox_status"]["messages"],
        3
    );
    assert_eq!(s["cluster"]["consumers"]["to-Planner"]["pending"], 0);
    // h0's bridge stops cleanly; a signal left in its outbox is reported by doctor.
    let exit = h0.stop().unwrap();
    assert!(exit.success(), "{exit:?}");
    assert_eq!(h0.state()["running"], false);
    // The other hosts see it stopped, not silent.
    let s = status();
    assert_eq!(
        s["cluster"]["hosts"]["h0"]["running"],
        false,
        "{s}\n{}",
        h0.log()
    );
    let sent = std::fs::read_dir(h0.root.join("bridge/sent"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    std::fs::copy(
        sent.path(),
        h0.root.join("bridge/outbox").join(sent.file_name()),
    )
    .unwrap();
    let findings = sigbox::diagnose(&h0.root, &sigbox::MailboxOptions::new());
    let f = findings
        .iter()
        .find(|f| f.path.ends_with("bridge/outbox"))
        .unwrap_or_else(|| panic!("{findings:?}"));
    assert_eq!(f.severity, sigbox::Severity::Problem);
    assert!(
        f.message.contains("1 signal(s) taken for export wait here"),
        "{}",
        f.message
    );
    // Started again, it publishes it (the stream drops the copy) and the outbox empties.
    h0.restart();
    eventually("the outbox drained", || {
        m0.bridge().counts().unwrap().0 == 0
    });
    eventually("counted as a duplicate the stream dropped", || {
        h0.state()["duplicates_published"] == 1
    });
}

/// One poll of `agent` on `mb`, as `sigbox poll` makes it: presence taken for the pass only.
fn poll_once(mb: &Mailbox, agent: &str) -> Vec<sigbox::Signal> {
    let _present = mb.presence(agent).unwrap();
    mb.pass(agent, None).unwrap().delivered
}

/// Polls `agent` every 200 ms until `n` signals came (or 20 s passed).
fn poll_now_and_then(mb: &Mailbox, agent: &str, n: usize) -> Vec<sigbox::Signal> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < n && Instant::now() < deadline {
        got.extend(poll_once(mb, agent));
        thread::sleep(Duration::from_millis(200));
    }
    got
}

#[test]
fn an_agent_that_polls_now_and_then_belongs_to_the_host_it_polled_on_last() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let hosts: Vec<Host> = (0..3)
        .map(|i| Host::start(dir.path(), &format!("h{i}"), &server.url(), "polls", &[]))
        .collect();
    let ms: Vec<Mailbox> = hosts.iter().map(Host::mailbox).collect();
    // Zed polls on h0 (a few milliseconds each time, far shorter than the bridges look).
    assert!(poll_once(&ms[0], "Zed").is_empty());
    eventually("h0 took Zed", || hosts[0].has_agent("Zed"));
    for i in 0..3 {
        ms[2].send(&steer("Zed", &format!("a{i}"))).unwrap();
    }
    let got = poll_now_and_then(&ms[0], "Zed", 3);
    assert_eq!(
        messages(&got),
        ["a0", "a1", "a2"],
        "delivered on h0, where Zed polls"
    );
    // Zed now polls on h1: what is sent to it from here on reaches it there, none on h0.
    assert!(poll_once(&ms[1], "Zed").is_empty());
    eventually("h1 took Zed from h0", || {
        hosts[1].has_agent("Zed") && !hosts[0].has_agent("Zed")
    });
    for i in 0..3 {
        ms[2].send(&steer("Zed", &format!("b{i}"))).unwrap();
    }
    let got = poll_now_and_then(&ms[1], "Zed", 3);
    assert_eq!(
        messages(&got),
        ["b0", "b1", "b2"],
        "delivered on h1, where Zed polls now"
    );
    assert!(
        ms[0].pending().unwrap().is_empty(),
        "nothing for Zed waits on h0"
    );
}

#[test]
fn two_bridges_under_one_host_name_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let first = Host::start(dir.path(), "same", &server.url(), "clash", &[]);
    eventually("the first bridge is up", || {
        first.state()["connected"] == true
    });
    let root = dir.path().join("b");
    Mailbox::init(&root).unwrap();
    let mut second = Command::new(env!("CARGO_BIN_EXE_sigbox-bridge"))
        .args(["--root", root.to_str().unwrap(), "--nats", &server.url()])
        .args(["--mailbox", "clash", "--host", "same"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Never a hang: a second bridge that runs on is killed, and the test fails.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = second.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = second.kill();
            panic!("the second bridge under the same host name kept running");
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(2));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("another bridge runs as host \"same\""),
        "{err}"
    );
    // The first runs on.
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(first.state()["running"], true);
}

#[test]
fn a_signal_larger_than_the_server_takes_is_quarantined_and_holds_up_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), "max_payload: 65536");
    let h0 = Host::start(dir.path(), "h0", &server.url(), "big", &[]);
    let h1 = Host::start(dir.path(), "h1", &server.url(), "big", &[]);
    let m1 = h1.mailbox();
    let _sam = m1.presence("Sam").unwrap();
    eventually("h1 took Sam", || h1.has_agent("Sam"));
    let m0 = h0.mailbox();
    m0.send(&steer("Sam", &"x".repeat(70_000))).unwrap();
    m0.send(&steer("Sam", "small")).unwrap();
    let got = take(&m1, "Sam", None, 1, Duration::from_secs(20));
    assert_eq!(messages(&got), ["small"]);
    let rejected = std::fs::read_dir(h0.root.join("rejected"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect::<Vec<_>>();
    let reason = rejected
        .iter()
        .find(|n| n.ends_with(".reason.json"))
        .expect("a reason file");
    let why = std::fs::read_to_string(h0.root.join("rejected").join(reason)).unwrap();
    assert!(why.contains("max_payload of 65536"), "{why}");
    assert_eq!(
        h0.mailbox().bridge().counts().unwrap().0,
        0,
        "nothing stuck in the outbox"
    );
}

#[test]
fn an_agent_that_moves_is_not_given_again_a_broadcast_it_acked_on_its_old_host() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let hosts: Vec<Host> = (0..3)
        .map(|i| Host::start(dir.path(), &format!("h{i}"), &server.url(), "acks", &[]))
        .collect();
    let ms: Vec<Mailbox> = hosts.iter().map(Host::mailbox).collect();
    // Mo has polled on h0 and on h1; a broadcast goes out from h2.
    assert!(poll_once(&ms[0], "Mo").is_empty());
    assert!(poll_once(&ms[1], "Mo").is_empty());
    let mut all = NewSignal::new(SignalType::Info);
    all.target(Target::All).message("to everyone");
    let id = ms[2].send(&all).unwrap();
    eventually("the broadcast reached h0 and h1", || {
        ms[0].pending().unwrap().len() == 1 && ms[1].pending().unwrap().len() == 1
    });
    let got = poll_once(&ms[0], "Mo");
    assert_eq!(messages(&got), ["to everyone"]);
    // Acknowledged (its marker gone: until then its consumer could die before acting on it,
    // and the ack is not shared), its ack on h0 reaches h1: there, the broadcast is not
    // given to Mo again.
    ms[0].ack("Mo").unwrap();
    eventually("the ack shared with h1", || {
        hosts[1].root.join("acks").join(&id).join("Mo.ack").exists()
    });
    assert!(poll_once(&ms[1], "Mo").is_empty());
    // Another agent on h1 still gets it.
    assert_eq!(messages(&poll_once(&ms[1], "Ann")), ["to everyone"]);
    // A hostile ack (a path for an id) is refused, nothing written.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
        let mut h = async_nats::HeaderMap::new();
        h.insert("Sigbox-Host", "mallory");
        let body = serde_json::json!({"id": "../../escape", "agent": "Mo"}).to_string();
        js.publish_with_headers("sigbox.acks.ack", h, body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    });
    eventually("refused on every host", || {
        hosts.iter().all(|h| h.state()["refused"] == 1)
    });
    assert!(!dir.path().join("escape").exists());
}

#[test]
fn a_claim_a_dead_consumer_never_handed_over_follows_its_agent_marked() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let hosts: Vec<Host> = (0..2)
        .map(|i| Host::start(dir.path(), &format!("h{i}"), &server.url(), "inflight", &[]))
        .collect();
    // Xen takes a signal on h0 and its consumer dies before acknowledging it: the claim stays
    // in its slot there.
    {
        let m0 = hosts[0].mailbox();
        let _xen = m0.presence("Xen").unwrap();
        m0.send(&steer("Xen", "in flight")).unwrap();
        let p = m0
            .pass_with(
                "Xen",
                None,
                sigbox::PassControl::new().ack_later(),
                &mut |_| Ok(()),
            )
            .unwrap();
        assert_eq!(messages(&p.delivered), ["in flight"]);
        // Dropped without an ack: the handle (and its slot lock) ends as a killed one would.
    }
    assert_eq!(
        std::fs::read_dir(hosts[0].root.join("claimed/Xen/0"))
            .unwrap()
            .count(),
        1
    );
    // Xen checks in on h1: the claim follows it there, marked as delivered again.
    let m1 = hosts[1].mailbox();
    let got = poll_now_and_then(&m1, "Xen", 1);
    assert_eq!(messages(&got), ["in flight"]);
    assert_eq!(got[0].redelivery(), 1, "{:?}", got[0].fields);
    eventually("h0's slot emptied", || {
        std::fs::read_dir(hosts[0].root.join("claimed/Xen/0"))
            .unwrap()
            .count()
            == 0
    });
    thread::sleep(Duration::from_millis(500));
    assert!(poll_once(&m1, "Xen").is_empty(), "delivered once on h1");
    assert!(
        take(
            &hosts[0].mailbox(),
            "Xen",
            None,
            1,
            Duration::from_millis(300)
        )
        .is_empty()
    );
}

/// A server that stalls (its answers come after the bridge gave up waiting) or comes back with
/// an empty store: the bridges carry on (their own late writes are not another bridge's), make
/// the streams and the bucket again, and signals flow.
#[test]
fn bridges_carry_on_through_a_stalled_server_and_a_wiped_one() {
    use rustix::process::Signal as Sig;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let h0 = Host::start(dir.path(), "h0", &server.url(), "stall", &[]);
    let h1 = Host::start(dir.path(), "h1", &server.url(), "stall", &[]);
    let m1 = h1.mailbox();
    let _ann = m1.presence("Ann").unwrap();
    eventually("both up", || {
        h0.state()["connected"] == true && h1.state()["connected"] == true
    });
    server.signal(Sig::STOP);
    thread::sleep(Duration::from_secs(8));
    server.signal(Sig::CONT);
    h0.mailbox().send(&steer("Ann", "after the stall")).unwrap();
    assert_eq!(
        messages(&take(&m1, "Ann", None, 1, Duration::from_secs(30))),
        ["after the stall"]
    );
    // The server loses its store.
    server.kill();
    std::fs::remove_dir_all(server.store()).unwrap();
    server.restart();
    h0.mailbox().send(&steer("Ann", "after the wipe")).unwrap();
    assert_eq!(
        messages(&take(&m1, "Ann", None, 1, Duration::from_secs(30))),
        ["after the wipe"]
    );
    thread::sleep(Duration::from_secs(2));
    for h in [&h0, &h1] {
        assert_eq!(h.state()["running"], true, "{}:\n{}", h.name, h.log());
    }
}

#[test]
fn a_signal_as_large_as_send_takes_crosses() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), "max_payload: 2097152");
    let h0 = Host::start(dir.path(), "h0", &server.url(), "cap", &[]);
    let h1 = Host::start(dir.path(), "h1", &server.url(), "cap", &[]);
    let m1 = h1.mailbox();
    let _bob = m1.presence("Bob").unwrap();
    eventually("h1 took Bob", || h1.has_agent("Bob"));
    // The largest message `send` takes, to the byte.
    let m0 = h0.mailbox();
    let mut n = 1_044_400;
    while m0.send(&steer("Bob", &"q".repeat(n))).is_err() {
        n -= 10;
    }
    let got = take(&m1, "Bob", None, 1, Duration::from_secs(20));
    assert_eq!(got.len(), 1, "{}", h1.log());
    assert_eq!(got[0].message.as_ref().map(String::len), Some(n));
}

/// What an agent took on one host: (send sequence, producer host) of each delivery, in order.
type Taken = Vec<(usize, usize)>;

/// Takes `agent`'s signals on `mb` (its presence held throughout) until `stop` is set, then
/// holds its presence without taking anything until `leave` is set; what it took.
fn consume_until(
    mb: Mailbox,
    agent: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    leave: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> thread::JoinHandle<Taken> {
    use std::sync::atomic::Ordering;
    thread::spawn(move || {
        let _present = mb.presence(&agent).unwrap();
        let mut got = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            got.extend(mb.pass(&agent, None).unwrap().delivered.iter().map(seq_of));
            thread::sleep(Duration::from_millis(3));
        }
        // What the last pass delivered is acknowledged before the agent leaves: left in
        // flight, it would reach the agent again on its next host, marked as delivered again.
        mb.ack(&agent).unwrap();
        while !leave.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(2));
        }
        got
    })
}

/// `(sequence, producer host)` of a signal whose message is `<run>:<seq>:<host>`.
fn seq_of(s: &sigbox::Signal) -> (usize, usize) {
    let m = s.message.clone().unwrap_or_default();
    let parts: Vec<usize> = m.split(':').map(|p| p.parse().unwrap()).collect();
    (parts[1], parts[2])
}

/// An agent takes its signals on h1 while every host sends to it, stops taking them (h1 goes
/// on importing them), and moves to h2 while every host goes on sending. Whatever it had not
/// taken on h1 (imported there and not delivered, sent on h1, still in the stream) reaches it
/// on h2 in the order sent, before anything sent after the move (sent on h2 itself, too); each
/// host's signals keep their order across the move; nothing is lost or delivered twice.
#[test]
fn an_agent_that_moves_host_gets_what_it_had_not_taken_first_in_the_order_sent() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let hosts: Vec<Host> = (0..3)
        .map(|i| Host::start(dir.path(), &format!("h{i}"), &server.url(), "handoff", &[]))
        .collect();
    let ms: Vec<Mailbox> = hosts.iter().map(Host::mailbox).collect();
    eventually("the bridges are up", || {
        hosts.iter().all(|h| h.state()["ready"] == true)
    });
    const BEFORE_STOP: usize = 24;
    const BEFORE_MOVE: usize = 54;
    const ALL: usize = 90;
    for run in 0..4 {
        let agent = format!("Mover{run}");
        let send = |seq: usize| {
            let host = seq % 3;
            ms[host]
                .send(&steer(&agent, &format!("{run}:{seq}:{host}")))
                .unwrap();
        };
        // It takes its signals on h1 while every host sends.
        let (stop, leave) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let on_h1 = consume_until(
            hosts[1].mailbox(),
            agent.clone(),
            stop.clone(),
            leave.clone(),
        );
        eventually("h1 took the agent", || hosts[1].has_agent(&agent));
        for seq in 0..BEFORE_STOP {
            send(seq);
            thread::sleep(Duration::from_millis(3));
        }
        thread::sleep(Duration::from_millis(300));
        // It stops taking them; h1 goes on importing what comes.
        stop.store(true, Ordering::SeqCst);
        thread::sleep(Duration::from_millis(50));
        for seq in BEFORE_STOP..BEFORE_MOVE {
            send(seq);
        }
        // Everything sent so far has left h0 and h2 (in the stream, or on h1).
        eventually("h0 and h2 exported what they sent", || {
            [0, 2].iter().all(|&i| {
                ms[i].pending().unwrap().is_empty() && ms[i].bridge().counts().unwrap().0 == 0
            })
        });
        // It moves to h2, while every host goes on sending.
        leave.store(true, Ordering::SeqCst);
        let took_on_h1 = on_h1.join().unwrap();
        let on_h2 = {
            let mb = hosts[2].mailbox();
            let agent = agent.clone();
            let owed = ALL - took_on_h1.len();
            thread::spawn(move || {
                let _present = mb.presence(&agent).unwrap();
                let mut got = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(60);
                while got.len() < owed && Instant::now() < deadline {
                    got.extend(mb.pass(&agent, None).unwrap().delivered.iter().map(seq_of));
                    thread::sleep(Duration::from_millis(3));
                }
                // Anything more would be a duplicate.
                let until = Instant::now() + Duration::from_millis(500);
                while Instant::now() < until {
                    got.extend(mb.pass(&agent, None).unwrap().delivered.iter().map(seq_of));
                    thread::sleep(Duration::from_millis(20));
                }
                got
            })
        };
        for seq in BEFORE_MOVE..ALL {
            send(seq);
            thread::sleep(Duration::from_millis(2));
        }
        let took_on_h2 = on_h2.join().unwrap();
        let show = || {
            let logs: Vec<String> = hosts
                .iter()
                .map(|h| {
                    let status = Command::new(env!("CARGO_BIN_EXE_sigbox-bridge"))
                        .args(["--root", h.root.to_str().unwrap(), "status"])
                        .output()
                        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                        .unwrap_or_default();
                    format!(
                        "--- {} ---\nstate {}\n{status}\n{}",
                        h.name,
                        h.state(),
                        common::tail(&h.log(), 4000)
                    )
                })
                .collect();
            format!(
                "run {run}: on h1 {took_on_h1:?}\non h2 {took_on_h2:?}\n{}",
                logs.join("\n")
            )
        };
        // Exactly once.
        let mut all: Vec<usize> = took_on_h1.iter().chain(&took_on_h2).map(|t| t.0).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..ALL).collect::<Vec<_>>(),
            "lost or twice: {}",
            show()
        );
        // Each host's signals in the order it sent them, across the move.
        for host in 0..3 {
            let order: Vec<usize> = took_on_h1
                .iter()
                .chain(&took_on_h2)
                .filter(|t| t.1 == host)
                .map(|t| t.0)
                .collect();
            assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "h{host}'s signals out of order: {}",
                show()
            );
        }
        // On h2: what it had not taken, in the order sent, then what was sent after the move.
        let seqs: Vec<usize> = took_on_h2.iter().map(|t| t.0).collect();
        let owed_before = seqs.iter().filter(|&&s| s < BEFORE_MOVE).count();
        assert!(
            seqs[..owed_before].iter().all(|&s| s < BEFORE_MOVE)
                && seqs[..owed_before].windows(2).all(|w| w[0] < w[1]),
            "signals sent before the move were overtaken: {}",
            show()
        );
        assert!(
            owed_before > 0,
            "nothing was left on h1 to hand over: {}",
            show()
        );
    }
    // Each time, h2 waited for h1's hand-off: it never gave up on it.
    let log = hosts[2].log();
    assert_eq!(log.matches("hand-off over").count(), 4, "{log}");
    assert!(!log.contains("delivering to it here"), "{log}");
}

/// What `status` counts exported is what `bridge/sent/` holds: a signal counts once the
/// server acknowledged it and its record is durable, so that a bridge SIGKILLed mid-stream
/// (twice) shows neither more nor less than the records, and the figure ends at every signal
/// sent (spec/bridge.md §7).
#[test]
fn exported_is_what_bridge_sent_holds_through_kills() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let mut h0 = Host::start(dir.path(), "h0", &server.url(), "counts", &[]);
    eventually("the bridge is ready", || h0.state()["ready"] == true);
    let total = 1500;
    let producer = {
        let root = h0.root.clone();
        thread::spawn(move || {
            let mb = common::open(&root);
            for i in 0..total {
                mb.send(&steer("Zed", &format!("z{i}"))).unwrap();
            }
        })
    };
    let root = h0.root.clone();
    let records = || {
        std::fs::read_dir(root.join("bridge/sent"))
            .map(|d| {
                d.filter(|e| e.as_ref().unwrap().file_name().as_encoded_bytes()[0] != b'.')
                    .count()
            })
            .unwrap_or(0)
    };
    let status = || {
        let out = Command::new(env!("CARGO_BIN_EXE_sigbox-bridge"))
            .args(["--root", root.to_str().unwrap(), "status", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let mut last = 0;
    for _ in 0..2 {
        eventually("exporting", || records() > last + 200);
        h0.kill();
        let n = records();
        assert!(n < total, "killed after the stream ended: {n}");
        let s = status();
        assert_eq!(s["state"]["exported"], n, "{s}");
        assert_eq!(s["sent"], n, "{s}");
        last = n;
        h0.restart();
    }
    producer.join().unwrap();
    eventually("every signal exported", || records() == total);
    eventually("the running bridge's state says so", || {
        h0.state()["exported"] == total
    });
    assert_eq!(status()["state"]["exported"], total);
    assert!(h0.stop().unwrap().success());
    assert_eq!(h0.state()["exported"], total, "{}", h0.log());
}

/// A batch an importer took and never acknowledged (its bridge was killed before it wrote it)
/// holds up what comes after it: the bridge that starts again writes nothing later before
/// the server delivers that batch again (after `ack_wait`), and the agent takes everything
/// once, in the order sent. Here the killed importer is the test itself: it pulls the first
/// 40 signals from the agent's consumer and drops them unacknowledged, while the bridge of
/// the agent's host is down and 260 more wait behind them.
#[test]
fn a_batch_a_killed_importer_took_comes_before_anything_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let h0 = Host::start(dir.path(), "h0", &server.url(), "taken", &[]);
    let mut h1 = Host::start(dir.path(), "h1", &server.url(), "taken", &[]);
    const N: usize = 300;
    let taker = {
        let mb = h1.mailbox();
        thread::spawn(move || {
            let _present = mb.presence("Taker").unwrap();
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(90);
            while got.len() < N && Instant::now() < deadline {
                got.extend(mb.pass("Taker", None).unwrap().delivered.iter().map(seq_of));
                thread::sleep(Duration::from_millis(3));
            }
            // Anything more would be a duplicate.
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                got.extend(mb.pass("Taker", None).unwrap().delivered.iter().map(seq_of));
                thread::sleep(Duration::from_millis(20));
            }
            got
        })
    };
    eventually("h1 imports for Taker", || {
        h1.log().contains("comes first consumer=to-Taker")
    });
    h1.kill();
    let m0 = h0.mailbox();
    for seq in 0..N {
        m0.send(&steer("Taker", &format!("0:{seq}:0"))).unwrap();
    }
    eventually("h0 exported them all", || {
        m0.pending().unwrap().is_empty() && m0.bridge().counts().unwrap().0 == 0
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
        let took = take_unacknowledged(&js, "sigbox_taken", "to-Taker", 40).await;
        assert_eq!(took.len(), 40, "the first batch, taken");
        // The bridge starts again while the batch is still out (kept so, as a slow importer
        // would, until the new importer has run a second): then it is dropped.
        h1.restart();
        let started = || h1.log().matches("comes first consumer=to-Taker").count();
        let mut until = None;
        while until.is_none_or(|u| Instant::now() < u) {
            for m in &took {
                m.ack_with(async_nats::jetstream::AckKind::Progress)
                    .await
                    .unwrap();
            }
            if until.is_none() && started() == 2 {
                until = Some(Instant::now() + Duration::from_secs(1));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let got: Vec<usize> = taker.join().unwrap().into_iter().map(|t| t.0).collect();
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "{}", h1.log());
}

/// A round whose atomic batch the server refuses because it holds some of its signals
/// already (a round published again after its acknowledgement was lost; here one of its
/// signals published beforehand, as the bridge would have) is published one signal at a
/// time: the stream drops the copy, and the agent on the other host gets each signal once
/// (spec/bridge.md §3).
#[test]
fn a_round_partly_in_the_stream_already_goes_one_by_one_and_each_signal_arrives_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let h1 = Host::start(dir.path(), "h1", &server.url(), "dups", &[]);
    let m1 = h1.mailbox();
    let _receiver = m1.presence("Receiver").unwrap();
    eventually("h1's bridge is up", || h1.state()["ready"] == true);
    let root0 = dir.path().join("h0");
    let m0 = sigbox::MailboxOptions::new().init(&root0).unwrap();
    let ids: Vec<String> = (0..6)
        .map(|i| m0.send(&steer("Receiver", &format!("m{i}"))).unwrap())
        .collect();
    // The fourth, in the stream already under the id the bridge publishes it with.
    let file = format!("{}.json", ids[3]);
    let body = std::fs::read(root0.join("inputs").join(&file)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", ids[3].as_str());
        h.insert("Sigbox-Name", file.as_str());
        h.insert("Sigbox-Host", "h0");
        h.insert("Sigbox-Id", ids[3].as_str());
        js.publish_with_headers("sigbox.dups.to.Receiver", h, body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    });
    let h0 = Host::start(dir.path(), "h0", &server.url(), "dups", &[]);
    let mut got: Vec<String> = take(&m1, "Receiver", None, 6, Duration::from_secs(30))
        .into_iter()
        .map(|s| s.id)
        .collect();
    // Anything more would be a duplicate.
    thread::sleep(Duration::from_millis(1500));
    got.extend(
        m1.pass("Receiver", None)
            .unwrap()
            .delivered
            .into_iter()
            .map(|s| s.id),
    );
    m1.ack("Receiver").unwrap();
    let log = h0.log();
    assert!(
        log.contains("publishing it one at a time"),
        "the batch was not refused as partly stored: {log}"
    );
    let mut sorted = got.clone();
    sorted.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(sorted, want, "lost or twice: {got:?}\n{log}");
    // Those the bridge published, in the order sent.
    let rest: Vec<&String> = got.iter().filter(|i| **i != ids[3]).collect();
    let sent: Vec<&String> = ids.iter().filter(|i| **i != ids[3]).collect();
    assert_eq!(rest, sent);
    eventually("h0's outbox is empty", || {
        h0.mailbox().bridge().counts().unwrap().0 == 0
    });
}

/// A work stream that takes no atomic batches (made by hand, or by a server before 2.12) gets
/// a round's signals one at a time: each once, in the order sent (spec/bridge.md §3).
#[test]
fn a_stream_without_atomic_batches_gets_each_signal_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let h1 = Host::start(dir.path(), "h1", &server.url(), "plain", &[]);
    let h0 = Host::start(dir.path(), "h0", &server.url(), "plain", &[]);
    let m1 = h1.mailbox();
    let _receiver = m1.presence("Receiver").unwrap();
    eventually("the bridges are up", || {
        h0.state()["ready"] == true && h1.state()["ready"] == true
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
        let mut s = js.get_stream("sigbox_plain").await.unwrap();
        let mut config = s.info().await.unwrap().config.clone();
        assert!(
            config.allow_atomic_publish,
            "the bridge made it without batches"
        );
        config.allow_atomic_publish = false;
        js.update_stream(config).await.unwrap();
    });
    let m0 = h0.mailbox();
    // Sent one after another as fast as they go: the rounds take several signals each.
    let ids: Vec<String> = (0..40)
        .map(|i| m0.send(&steer("Receiver", &format!("m{i}"))).unwrap())
        .collect();
    let got: Vec<String> = take(&m1, "Receiver", None, 40, Duration::from_secs(30))
        .into_iter()
        .map(|s| s.id)
        .collect();
    thread::sleep(Duration::from_millis(1000));
    let more = m1.pass("Receiver", None).unwrap().delivered;
    m1.ack("Receiver").unwrap();
    let log = h0.log();
    assert!(more.is_empty(), "delivered twice: {more:?}");
    assert_eq!(got, ids, "{log}");
    assert!(
        log.contains("the stream takes no atomic batches"),
        "no round of several signals met the stream: {log}"
    );
}

/// A bridge started on a fresh server, with nothing wrong, says nothing is wrong: its state
/// counts no error and names none, its log warns of nothing (a stream it makes itself is not
/// missing).
#[test]
fn a_fresh_bridge_on_a_fresh_server_reports_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let h0 = Host::start(dir.path(), "h0", &server.url(), "fresh", &[]);
    eventually("the bridge is up", || h0.state()["ready"] == true);
    // Past the first retry of every task.
    thread::sleep(Duration::from_millis(1500));
    let state = h0.state();
    let log = h0.log();
    assert_eq!(state["errors"], 0, "{state}\n{log}");
    assert!(state["last_error"].is_null(), "{state}");
    assert!(!log.contains("WARN"), "{log}");
}

/// Messages an earlier pull left unacknowledged come again in more than one go and not in the
/// order of the stream: those given back at once first (a bridge gives back what it held when
/// its connection is made again), those a lost pull was handed only after `ack_wait`. The
/// importer writes none of them before it has them all (spec/bridge.md §4). Here another
/// client holds ten signals unacknowledged while the bridge starts, then gives back the last
/// five at once and the first five a second later: the agent gets the ten in the order sent.
/// Before, the importer wrote the last five as soon as they came, and the agent got them first.
#[test]
fn messages_that_come_again_out_of_order_are_written_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let mut h1 = Host::start(dir.path(), "h1", &server.url(), "again", &[]);
    let m1 = h1.mailbox();
    let _receiver = m1.presence("Receiver").unwrap();
    eventually("h1's importer for the Receiver started", || {
        h1.log().contains("consumer=to-Receiver")
    });
    assert!(h1.stop().is_some_and(|s| s.success()));
    // Ten signals in the stream, from another host's mailbox, as its bridge publishes them.
    let root0 = dir.path().join("h0");
    let m0 = sigbox::MailboxOptions::new().init(&root0).unwrap();
    let ids: Vec<String> = (0..10)
        .map(|i| m0.send(&steer("Receiver", &format!("m{i}"))).unwrap())
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (js, held) = rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
        for id in &ids {
            let file = format!("{id}.json");
            let body = std::fs::read(root0.join("inputs").join(&file)).unwrap();
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", id.as_str());
            h.insert("Sigbox-Name", file.as_str());
            h.insert("Sigbox-Host", "h0");
            h.insert("Sigbox-Id", id.as_str());
            js.publish_with_headers("sigbox.again.to.Receiver", h, body.into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        let held = take_unacknowledged(&js, "sigbox_again", "to-Receiver", 10).await;
        (js, held)
    });
    assert_eq!(held.len(), 10);
    h1.restart();
    // Kept unacknowledged (ack_wait is 2 s) until the bridge's importer has begun, and sees
    // them pending.
    let began = Instant::now();
    while !h1.log().contains("consumer=to-Receiver pending=10 last=10") {
        assert!(began.elapsed() < Duration::from_secs(30), "{}", h1.log());
        rt.block_on(async {
            for m in &held {
                m.ack_with(async_nats::jetstream::AckKind::Progress)
                    .await
                    .unwrap();
            }
        });
        thread::sleep(Duration::from_millis(300));
    }
    rt.block_on(async {
        for (i, m) in held.iter().enumerate() {
            let delay = (i < 5).then_some(Duration::from_secs(1));
            m.ack_with(async_nats::jetstream::AckKind::Nak(delay))
                .await
                .unwrap();
        }
        // A request on the same connection: the server has the NAKs when it answers.
        js.get_stream("sigbox_again").await.unwrap();
    });
    let got = take(&m1, "Receiver", None, 10, Duration::from_secs(30));
    let want: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(messages(&got), want, "{}", h1.log());
}

/// Up to `n` messages of the durable consumer `consumer` of `stream`, taken as another client
/// would and not acknowledged: pending on the server until `ack_wait`.
async fn take_unacknowledged(
    js: &async_nats::jetstream::Context,
    stream: &str,
    consumer: &str,
    n: usize,
) -> Vec<async_nats::jetstream::Message> {
    use futures::StreamExt as _;
    let c: async_nats::jetstream::consumer::PullConsumer = js
        .get_stream(stream)
        .await
        .unwrap()
        .get_consumer(consumer)
        .await
        .unwrap();
    let mut batch = c.fetch().max_messages(n).messages().await.unwrap();
    let mut took = Vec::new();
    while let Some(m) = batch.next().await {
        took.push(m.unwrap());
    }
    took
}

/// A bridge killed after it wrote a signal that its agent then took, before the server had its
/// acknowledgement, with the agent moving to another host at once (spec/bridge.md §8): the
/// server gives the signal again, to the new host, which has no trace of it. It comes marked as
/// delivered again, and the new host does not wait for the dead bridge's hand-off (the server
/// says nobody answers for it). The acknowledgement is lost for certain: the old host's bridge
/// reaches the server through a proxy that forwards nothing more of what the bridge sends from
/// the moment the signal is sent (what the server sends still comes through).
#[test]
fn a_signal_a_killed_bridge_wrote_and_never_acknowledged_reaches_the_agents_new_host_marked() {
    use rustix::process::Signal as Sig;
    let dir = common::test_dir();
    let server = Server::start(dir.path());
    let proxy = common::Proxy::start(server.port);
    let mut h0 = Host::start(dir.path(), "h0", &proxy.url(), "unacked", &[]);
    let h1 = Host::start(dir.path(), "h1", &server.url(), "unacked", &[]);
    let (m0, m1) = (h0.mailbox(), h1.mailbox());
    let inputs = h0.root.join("inputs");
    let (mut caught, mut rounds) = (0, 0);
    while caught < 2 {
        rounds += 1;
        assert!(
            rounds <= 8,
            "in {rounds} rounds the signal reached h0 only once its cut connection had closed"
        );
        let agent = format!("Xen{rounds}");
        let present = m0.presence(&agent).unwrap();
        // Its importer waits for the agent's signals: nothing more that h0 sends is needed
        // for the server to deliver the signal to it.
        let importing = format!("consumer=to-{agent} ");
        common::wait_until(
            "h0 imports the agent's signals",
            Duration::from_secs(30),
            || {
                h0.has_agent(&agent)
                    && h0
                        .log()
                        .lines()
                        .any(|l| l.contains("importing;") && l.contains(&importing))
            },
        );
        let cuts = proxy.cuts();
        // Nothing more of what h0 sends reaches the server (for 20 s, then the connection
        // closes); what the server sends it still comes.
        proxy.cut_after_holding(0, Duration::from_secs(20));
        m1.send(&steer(&agent, "once")).unwrap();
        common::wait_until("h0 imports the signal", Duration::from_secs(40), || {
            !sigbox_names(&inputs).is_empty()
        });
        // Killed with its acknowledgement unsent, after its agent took the signal.
        h0.signal(Sig::STOP);
        // Came on the connection being cut (still open): its acknowledgement never went out.
        // Came only after that connection closed (its pull request had not reached the server
        // before the cut, on a loaded machine): it went out on the next one; another round.
        let on_the_cut = proxy.cuts() == cuts;
        let first = m0.pass(&agent, None).unwrap().delivered;
        assert_eq!(messages(&first), ["once"]);
        assert_eq!(first[0].redelivery(), 0);
        drop(present);
        h0.kill();
        if on_the_cut {
            // The agent moves to h1: the server gives the signal again there, marked.
            let _moved = m1.presence(&agent).unwrap();
            let again = take(&m1, &agent, None, 1, Duration::from_secs(40));
            assert_eq!(
                messages(&again),
                ["once"],
                "{}",
                common::tail(&h1.log(), 3000)
            );
            assert!(
                again[0].redelivery() >= 1,
                "given again on the agent's new host, unmarked: {:?}",
                again[0].fields
            );
            caught += 1;
        }
        common::wait_until(
            "the proxy cut h0's connection",
            Duration::from_secs(30),
            || proxy.cuts() > cuts,
        );
        h0.restart();
    }
}

/// The canonical names in `dir` (dot-files, stages, left out).
fn sigbox_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// An agent whose host's bridge was killed moves to another host: the new host does not wait
/// for the dead bridge's entry to go silent (10 s) before it delivers, since the server says
/// nobody answers for that bridge any more; what was sent to the agent reaches it there.
#[test]
fn an_agent_whose_old_hosts_bridge_was_killed_is_served_without_waiting_for_its_entry() {
    let dir = common::test_dir();
    let server = Server::start(dir.path());
    let mut h0 = Host::start(dir.path(), "h0", &server.url(), "gone", &[]);
    let h1 = Host::start(dir.path(), "h1", &server.url(), "gone", &[]);
    let (m0, m1) = (h0.mailbox(), h1.mailbox());
    {
        let _present = m0.presence("Yan").unwrap();
        common::wait_until("h0 takes the agent", Duration::from_secs(30), || {
            h0.has_agent("Yan")
        });
        h0.kill();
    }
    // Sent on h1 while Yan is h0's: it goes to the stream, for Yan's host.
    m1.send(&steer("Yan", "after the kill")).unwrap();
    let inputs = h1.root.join("inputs");
    common::wait_until("h1 exports the signal", Duration::from_secs(30), || {
        sigbox_names(&inputs).is_empty()
    });
    let _moved = m1.presence("Yan").unwrap();
    let got = take(&m1, "Yan", None, 1, Duration::from_secs(30));
    assert_eq!(messages(&got), ["after the kill"]);
    assert_eq!(got[0].redelivery(), 0);
    let log = h1.log();
    assert!(
        log.contains("nobody answers for the bridge of h0"),
        "the hand-off was waited for by another rule: {}",
        common::tail(&log, 3000)
    );
    assert!(!log.contains("the bridge of h0 does not run (its entry"));
}
