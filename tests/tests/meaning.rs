//! What a signal means (spec/mailbox.md §3.3): one reading of a file, whatever wrote it. Each
//! row is a file dropped in `inputs/` and what the Executor's pass must make of it: the
//! message it delivers as text exactly as written, or the reason it quarantines with, naming
//! the field. Rows run in JSON and in YAML wherever both can say the same.

use std::time::Duration;

use sigbox::MailboxOptions;

/// What a row expects.
enum Outcome {
    /// Delivered with this message (exactly this text).
    Message(&'static str),
    /// Delivered with this `iteration`.
    Iteration(u64),
    /// Quarantined, the reason containing each of these.
    Rejected(Vec<&'static str>),
}
use Outcome::{Iteration, Message, Rejected};

/// A fresh mailbox that reads dropped files at once (no settle window), with `file` dropped in
/// its `inputs/`.
fn dropped(file: &str, bytes: &[u8]) -> (tempfile::TempDir, sigbox::Mailbox) {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = MailboxOptions::new();
    o.settle(Duration::ZERO);
    let mb = o.init(tmp.path()).unwrap();
    std::fs::write(tmp.path().join("inputs").join(file), bytes).unwrap();
    (tmp, mb)
}

/// Runs one file through a pass; fails with the row's name when the outcome differs.
fn check(name: &str, file: &str, bytes: &[u8], want: &Outcome) {
    let (_tmp, mb) = dropped(file, bytes);
    let pass = mb.pass("Executor", None).unwrap();
    mb.ack("Executor").unwrap();
    match want {
        Message(m) => {
            assert!(
                pass.rejected.is_empty(),
                "{name}: rejected {:?}",
                pass.rejected
            );
            assert_eq!(pass.delivered.len(), 1, "{name}");
            assert_eq!(pass.delivered[0].message.as_deref(), Some(*m), "{name}");
        }
        Iteration(i) => {
            assert!(
                pass.rejected.is_empty(),
                "{name}: rejected {:?}",
                pass.rejected
            );
            assert_eq!(pass.delivered[0].iteration, Some(*i), "{name}");
        }
        Rejected(words) => {
            assert!(
                pass.delivered.is_empty(),
                "{name}: delivered {:?}",
                pass.delivered
            );
            assert_eq!(pass.rejected.len(), 1, "{name}");
            let reason = &pass.rejected[0].reason;
            for w in words {
                assert!(reason.contains(w), "{name}: reason {reason:?} lacks {w:?}");
            }
            // Sigbox's words, not the parser's internals.
            for internal in ["DuplicateKeyPolicy", "Options", "budget breached"] {
                assert!(!reason.contains(internal), "{name}: reason {reason:?}");
            }
        }
    }
}

#[test]
fn yaml_text_fields_keep_their_text() {
    for (scalar, text) in [
        ("no", "no"),
        ("yes", "yes"),
        ("off", "off"),
        ("017", "017"),
        ("1.10", "1.10"),
        ("0x10", "0x10"),
        ("1e3", "1e3"),
        ("~x", "~x"),
        ("true", "true"),
        ("12:30", "12:30"),
    ] {
        let yaml = format!("type: STEER\ntarget: Executor\nmessage: {scalar}\n");
        check(
            &format!("message: {scalar}"),
            "m.yaml",
            yaml.as_bytes(),
            &Message(text),
        );
    }
    // JSON says what it means: a string is text.
    check(
        "json string",
        "m.json",
        br#"{"type":"STEER","target":"Executor","message":"no"}"#,
        &Message("no"),
    );
}

#[test]
fn duplicate_keys_are_refused_in_every_format() {
    for (file, body) in [
        (
            "d.json",
            &br#"{"type":"STEER","target":"Executor","type":"ABORT"}"#[..],
        ),
        (
            "d.yaml",
            &b"type: STEER\ntarget: Executor\ntype: ABORT\n"[..],
        ),
        (
            "t.json",
            &br#"{"type":"STEER","target":"Executor","message":"m","target":"Planner"}"#[..],
        ),
        (
            "n.json",
            &br#"{"type":"STEER","target":"Executor","meta":{"a":1,"a":2}}"#[..],
        ),
    ] {
        check(file, file, body, &Rejected(vec!["duplicate key"]));
    }
}

#[test]
fn a_byte_order_mark_is_no_part_of_the_document() {
    let bom = "\u{feff}";
    check(
        "json",
        "b.json",
        format!(r#"{bom}{{"type":"STEER","target":"Executor","message":"bom"}}"#).as_bytes(),
        &Message("bom"),
    );
    check(
        "yaml",
        "b.yaml",
        format!("{bom}type: STEER\ntarget: Executor\nmessage: bom\n").as_bytes(),
        &Message("bom"),
    );
}

#[test]
fn typed_fields_are_what_they_say_or_the_file_is_refused_naming_them() {
    for (field, json, yaml) in [
        ("iteration", r#""3""#, r#""3""#),
        ("iteration", "-5", "-5"),
        ("iteration", "3.5", "3.5"),
        ("iteration", "true", "true"),
        ("created_at", "1700000000", "1700000000"),
        ("created_at", r#""yesterday""#, "yesterday"),
        ("from", "42", "42"),
    ] {
        // `from` in YAML is text (`from: 42` is the text "42"): only JSON can say a number.
        let body = format!(r#"{{"type":"STEER","target":"Executor","{field}":{json}}}"#);
        check(
            &format!("json {field}: {json}"),
            "f.json",
            body.as_bytes(),
            &Rejected(vec![field]),
        );
        if field != "from" && !(field == "created_at" && yaml == "1700000000") {
            let body = format!("type: STEER\ntarget: Executor\n{field}: {yaml}\n");
            check(
                &format!("yaml {field}: {yaml}"),
                "f.yaml",
                body.as_bytes(),
                &Rejected(vec![field]),
            );
        }
    }
    // A leading zero: octal to some YAML readers, decimal to others; refused, naming it.
    check(
        "yaml iteration: 010",
        "z.yaml",
        b"type: STEER\ntarget: Executor\niteration: 010\n",
        &Rejected(vec!["iteration", "leading zero"]),
    );
    for (json, yaml) in [("7", "7"), ("0", "0")] {
        let n = json.parse().unwrap();
        let body = format!(r#"{{"type":"STEER","target":"Executor","iteration":{json}}}"#);
        check("json iteration", "i.json", body.as_bytes(), &Iteration(n));
        let body = format!("type: STEER\ntarget: Executor\niteration: {yaml}\n");
        check("yaml iteration", "i.yaml", body.as_bytes(), &Iteration(n));
    }
    // An instant without an offset is local time, as upstream names are read; it is not
    // refused.
    let body = r#"{"type":"STEER","target":"Executor","message":"local","created_at":"2026-02-08T14:30:04"}"#;
    check(
        "created_at without offset",
        "c.json",
        body.as_bytes(),
        &Message("local"),
    );
}

/// The same content as JSON and as YAML reads the same: a property over generated messages.
#[test]
fn the_same_content_reads_the_same_in_json_and_yaml() {
    let texts = [
        "plain",
        "no",
        "0x1F",
        "007",
        "1.50",
        "null",
        "~",
        "a: b",
        "- item",
        "#hash",
        "ünï",
        "'quoted'",
        "tab\there",
        " spaced ",
    ];
    for text in texts {
        let json = serde_json::json!({"type": "STEER", "target": "Executor", "message": text});
        let yaml = format!(
            "type: STEER\ntarget: Executor\nmessage: {}\n",
            serde_json::to_string(text).unwrap()
        );
        let read = |file: &str, bytes: &[u8]| {
            let (_tmp, mb) = dropped(file, bytes);
            let pass = mb.pass("Executor", None).unwrap();
            assert!(
                pass.rejected.is_empty(),
                "{text:?} in {file}: {:?}",
                pass.rejected
            );
            pass.delivered[0].message.clone()
        };
        let a = read("x.json", json.to_string().as_bytes());
        let b = read("x.yaml", yaml.as_bytes());
        assert_eq!(a.as_deref(), Some(text), "JSON {text:?}");
        assert_eq!(a, b, "JSON and YAML read {text:?} differently");
    }
}

/// The streams and documents read the same way: a byte order mark or Unicode white space
/// around a Flux line is trimmed as upstream's `trim()` trims it (the line is not lost), and a
/// duplicate key makes a result document or a Goblin body invalid.
#[test]
fn streams_and_documents_strip_a_bom_and_refuse_duplicate_keys() {
    use sigbox::flux;
    let line = r#"{"flux:signal": {"verdict": "abort", "reason": "stop"}}"#;
    for framed in [
        format!("\u{feff}{line}"),
        format!("\u{a0}{line}\u{3000}"),
        format!("  {line}\r"),
    ] {
        assert!(
            flux::parse_line(1, framed.as_bytes()).is_some(),
            "the abort in {framed:?} was lost"
        );
    }
    // A key twice: reported as an error event naming it, never taken, never dropped.
    let dup_line = r#"{"flux:signal": {"verdict": "proceed", "verdict": "abort"}}"#;
    match flux::parse_line(1, dup_line.as_bytes()) {
        Some(flux::FluxEvent::Error { error, .. }) => {
            assert!(error.contains("duplicate key `verdict`"), "{error}");
        }
        other => panic!("a line with a key twice gave {other:?}"),
    }
    // Lines upstream reads: an invalid UTF-8 byte in `summary` (decoded lossily, as upstream
    // does) is a signal; a lone surrogate escape or nesting past the parser's depth is an error
    // event, never silence.
    let mut bad_utf8 = br#"{"flux:signal": {"verdict": "abort", "summary": "x"#.to_vec();
    bad_utf8.extend_from_slice(b"\xff\xfe");
    bad_utf8.extend_from_slice(br#""}}"#);
    assert!(
        matches!(
            flux::parse_line(1, &bad_utf8),
            Some(flux::FluxEvent::Signal(_))
        ),
        "an invalid byte in summary lost the abort"
    );
    let surrogate = r#"{"flux:signal": {"verdict": "abort", "summary": "\ud800"}}"#;
    let deep = format!(
        r#"{{"flux:signal": {{"verdict": "abort", "meta": {}1{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    for line in [surrogate.to_string(), deep] {
        assert!(
            matches!(
                flux::parse_line(1, line.as_bytes()),
                Some(flux::FluxEvent::Signal(_) | flux::FluxEvent::Error { .. })
            ),
            "dropped without an event: {}",
            &line[..60.min(line.len())]
        );
    }
    let doc = r#"{"verdict": "pass", "summary": "ok"}"#;
    assert!(flux::validate_result(format!("\u{feff}{doc}").as_bytes()).valid);
    let dup = r#"{"verdict": "pass", "summary": "ok", "verdict": "fail"}"#;
    assert!(!flux::validate_result(dup.as_bytes()).valid);

    let sig = sigbox::goblin::GoblinSignal::parse("test-failed").unwrap();
    assert!(
        sigbox::goblin::parse_payload(sig, "\u{feff}{\"reason\": \"flaky\"}".as_bytes()).is_ok()
    );
    let err = sigbox::goblin::parse_payload(sig, br#"{"reason": "a", "reason": "b"}"#).unwrap_err();
    assert!(err.contains("duplicate key"), "{err}");
}

/// A file whose modification time is in the future (copied with its times from a machine whose
/// clock runs ahead) settles and is ordered by when it arrived: it is neither blocked until
/// that future nor moved behind what was dropped after it.
#[test]
fn a_future_modification_time_neither_blocks_nor_reorders() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = MailboxOptions::new();
    o.settle(Duration::ZERO);
    let mb = o.init(tmp.path()).unwrap();
    let inputs = tmp.path().join("inputs");
    let ahead = inputs.join("ahead.yaml");
    std::fs::write(&ahead, "type: STEER\ntarget: Executor\nmessage: first\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&ahead)
        .unwrap()
        .set_modified(std::time::SystemTime::now() + Duration::from_secs(7200))
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(
        inputs.join("later.yaml"),
        "type: STEER\ntarget: Executor\nmessage: second\n",
    )
    .unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    let got: Vec<_> = pass
        .delivered
        .iter()
        .map(|s| s.message.clone().unwrap())
        .collect();
    assert_eq!(got, ["first", "second"]);
}

/// A canonical name routes before the body is read: when the name and the body disagree on
/// the type or the target, the file is quarantined with both, never delivered as a mix.
#[test]
fn a_canonical_name_and_its_body_must_agree() {
    for (name, body, agent) in [
        (
            "signal.20260101T000000.000001Z.00000000000000000000000000000001.ABORT.Planner.json",
            r#"{"type":"ABORT","target":"Executor"}"#,
            "Planner",
        ),
        (
            "signal.20260101T000000.000002Z.00000000000000000000000000000002.INFO.Executor.json",
            r#"{"type":"ABORT","target":"Executor"}"#,
            "Executor",
        ),
    ] {
        let (_tmp, mb) = dropped(name, body.as_bytes());
        for a in ["Executor", "Planner"] {
            let pass = mb.pass(a, None).unwrap();
            mb.ack(a).unwrap();
            assert!(pass.delivered.is_empty(), "{a} got {:?}", pass.delivered);
            if a == agent {
                assert_eq!(pass.rejected.len(), 1, "{name}");
                assert!(
                    pass.rejected[0].reason.contains("the name says"),
                    "{}",
                    pass.rejected[0].reason
                );
            }
        }
    }
    // Agreeing name and body: delivered.
    check(
        "agreeing",
        "signal.20260101T000000.000003Z.00000000000000000000000000000003.STEER.Executor.json",
        br#"{"type":"STEER","target":"Executor","message":"ok"}"#,
        &Message("ok"),
    );
}

/// A mailbox whose dropped files settle within `settle`, and its root.
fn mailbox(settle: Duration) -> (tempfile::TempDir, sigbox::Mailbox) {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = MailboxOptions::new();
    o.settle(settle);
    let mb = o.init(tmp.path()).unwrap();
    (tmp, mb)
}

/// Every quorum agent's pass, acknowledged; what each was delivered, by agent.
fn everyone(mb: &sigbox::Mailbox) -> Vec<(&'static str, Vec<sigbox::Signal>)> {
    [
        "Executor",
        "Planner",
        "Questioner",
        "Reviewer",
        "Orchestrator",
    ]
    .into_iter()
    .map(|a| {
        let pass = mb.pass(a, None).unwrap();
        mb.ack(a).unwrap();
        (a, pass.delivered)
    })
    .collect()
}

/// Identity (spec §2.4): two dropped broadcasts with one stem are two signals, each with its
/// own acks; every agent gets both, and both are archived as delivered only then.
#[test]
fn two_files_with_one_stem_never_share_acks() {
    let (tmp, mb) = mailbox(Duration::ZERO);
    let inputs = tmp.path().join("inputs");
    std::fs::write(
        inputs.join("news.yaml"),
        "type: INFO\ntarget: ALL\nmessage: yaml\n",
    )
    .unwrap();
    std::fs::write(
        inputs.join("news.json"),
        r#"{"type":"INFO","target":"ALL","message":"json"}"#,
    )
    .unwrap();
    for (agent, got) in everyone(&mb) {
        let mut messages: Vec<_> = got.iter().filter_map(|s| s.message.clone()).collect();
        messages.sort();
        assert_eq!(messages, ["json", "yaml"], "{agent}");
        assert_ne!(got[0].id, got[1].id, "{agent}");
        assert!(got.iter().all(|s| s.id.starts_with("news@")), "{got:?}");
    }
    // The orchestrator's pass archived both, each as delivered by the whole quorum.
    let pass = mb.pass("Orchestrator", None).unwrap();
    mb.ack("Orchestrator").unwrap();
    assert!(pass.delivered.is_empty());
    assert!(mb.pending().unwrap().is_empty(), "{:?}", mb.pending());
    let log: Vec<_> = mb
        .processed()
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(log.len(), 2);
    for s in &log {
        assert_eq!(mb.acked_by(&s.id).unwrap().len(), 5, "{}", s.id);
        assert_eq!(s.fields["delivery_status"], "delivered");
    }
}

/// Identity: a broadcast name used again (the same `news.yaml` the next day) is a new
/// signal, delivered to every agent again, and not archived before they ack it.
#[test]
fn a_name_used_again_is_a_new_signal() {
    let (tmp, mb) = mailbox(Duration::ZERO);
    let news = tmp.path().join("inputs").join("news.yaml");
    let body = "type: INFO\ntarget: ALL\nmessage: daily\n";
    std::fs::write(&news, body).unwrap();
    let first: Vec<String> = everyone(&mb)
        .into_iter()
        .map(|(a, got)| {
            assert_eq!(got.len(), 1, "{a}");
            got[0].id.clone()
        })
        .collect();
    assert!(
        first.windows(2).all(|w| w[0] == w[1]),
        "one identity: {first:?}"
    );
    mb.pass("Orchestrator", None).unwrap();
    assert!(!news.exists(), "archived once the quorum acked");
    // The next day: the same name, the same content.
    std::fs::write(&news, body).unwrap();
    let pass = mb.pass("Orchestrator", None).unwrap();
    mb.ack("Orchestrator").unwrap();
    assert!(
        news.exists(),
        "archived at once as already acked: {:?}",
        pass.archived
    );
    assert_eq!(pass.delivered.len(), 1);
    let second = pass.delivered[0].id.clone();
    assert_ne!(second, first[0]);
    let pass = mb.pass("Executor", None).unwrap();
    mb.ack("Executor").unwrap();
    assert_eq!(pass.delivered.len(), 1, "the Executor gets the new one");
    assert_eq!(pass.delivered[0].id, second);
    assert_eq!(mb.acked_by(&second).unwrap(), ["Executor", "Orchestrator"]);
}

/// Identity: the id a dropped file is listed under is the one it is delivered under, the one
/// a redelivery carries, and the one `processed/` shows.
#[test]
fn a_dropped_file_keeps_its_identity_for_its_whole_life() {
    let (tmp, mb) = mailbox(Duration::ZERO);
    let inputs = tmp.path().join("inputs");
    std::fs::write(inputs.join("steer.yaml"), "type: STEER\ntarget: Executor\n").unwrap();
    std::fs::write(
        inputs.join("news.json"),
        r#"{"type":"INFO","target":"ALL"}"#,
    )
    .unwrap();
    let mut listed: Vec<String> = mb.pending().unwrap().into_iter().map(|p| p.id).collect();
    listed.sort();
    // Delivered, then the consumer dies before its acknowledgement (the handle goes).
    let pass = mb.pass("Executor", None).unwrap();
    let mut delivered: Vec<String> = pass.delivered.iter().map(|s| s.id.clone()).collect();
    delivered.sort();
    assert_eq!(listed, delivered);
    drop(mb);
    let mb = MailboxOptions::new().open(tmp.path()).unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    mb.ack("Executor").unwrap();
    let mut again: Vec<(String, u32)> = pass
        .delivered
        .iter()
        .map(|s| (s.id.clone(), s.redelivery()))
        .collect();
    again.sort();
    assert_eq!(
        again,
        delivered.iter().map(|d| (d.clone(), 1)).collect::<Vec<_>>()
    );
    let steer = delivered.iter().find(|d| d.starts_with("steer@")).unwrap();
    let log: Vec<String> = mb
        .processed()
        .unwrap()
        .into_iter()
        .map(|s| s.unwrap().id)
        .collect();
    assert_eq!(log, std::slice::from_ref(steer));
}

/// Identity: a canonical-looking name is trusted only for what sigbox wrote. Written in place
/// in two steps, such a file is neither delivered nor quarantined half-written: it settles
/// like a dropped file, then is delivered once, whole, and the writer's second step leaves no
/// second file behind.
#[test]
fn a_canonical_name_written_in_place_settles_like_a_dropped_file() {
    use std::io::Write;
    let settle = Duration::from_millis(400);
    let (tmp, mb) = mailbox(settle);
    let name =
        "signal.20260101T000000.000001Z.0000000000000000000000000000000a.ABORT.Executor.json";
    let path = tmp.path().join("inputs").join(name);
    std::fs::write(&path, br#"{"type":"ABORT","#).unwrap();
    for agent in ["Executor", "Orchestrator"] {
        let pass = mb.pass(agent, None).unwrap();
        assert!(
            pass.delivered.is_empty() && pass.rejected.is_empty(),
            "{agent}: {pass:?}"
        );
        assert!(
            pass.next_check.is_some(),
            "{agent} is told when to look again"
        );
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(br#""target":"Executor","message":"stop now"}"#)
        .unwrap();
    drop(f);
    let pass = mb.pass("Executor", None).unwrap();
    assert!(
        pass.delivered.is_empty(),
        "complete but not settled: {pass:?}"
    );
    std::thread::sleep(settle + Duration::from_millis(100));
    let pass = mb.pass("Executor", None).unwrap();
    mb.ack("Executor").unwrap();
    assert!(pass.rejected.is_empty(), "{:?}", pass.rejected);
    assert_eq!(pass.delivered.len(), 1);
    assert_eq!(pass.delivered[0].message.as_deref(), Some("stop now"));
    assert!(
        pass.delivered[0].id.contains('@'),
        "not sigbox's: {}",
        pass.delivered[0].id
    );
    assert!(
        std::fs::read_dir(tmp.path().join("inputs"))
            .unwrap()
            .next()
            .is_none()
    );
    assert!(sigbox_tests::rejected(tmp.path()).is_empty());
}

/// Identity: what sigbox sends is trusted at once (no settle window) and identified by its
/// name alone, the id `send` printed.
#[test]
fn what_sigbox_sends_is_its_name() {
    let (_tmp, mb) = mailbox(Duration::from_secs(3600));
    let mut s = sigbox::NewSignal::new(sigbox::SignalType::Steer);
    s.target(sigbox::Target::Agent("Executor".into()));
    let id = mb.send(&s).unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    mb.ack("Executor").unwrap();
    assert_eq!(pass.delivered.len(), 1);
    assert_eq!(pass.delivered[0].id, id);
    assert!(!id.contains('@'));
}

/// Identity: a claim takes only the file it decided on. When the name is used again between
/// the scan and the claim's rename (the first file taken by another consumer, a new one
/// written in place under the same name), the new file is put back, neither delivered as the
/// old one's routing said nor quarantined half-written; once settled it is routed as what it
/// is (here a broadcast).
#[test]
fn a_name_used_again_under_a_claim_is_put_back() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Before the claim's rename of `x.json`, takes the file away (as another consumer
    /// would) and writes the first half of a broadcast under the same name.
    struct Swap {
        inputs: std::path::PathBuf,
        done: AtomicBool,
        taken: Mutex<Option<std::path::PathBuf>>,
    }
    impl sigbox::FsHook for Swap {
        fn before(&self, op: &sigbox::FsOp<'_>) -> std::io::Result<()> {
            if let sigbox::FsOp::Rename { from, .. } = op
                && *from == self.inputs.join("x.json")
                && !self.done.swap(true, Ordering::SeqCst)
            {
                let away = self.inputs.parent().unwrap().join("taken.json");
                std::fs::rename(from, &away)?;
                *self.taken.lock().unwrap() = Some(away);
                std::fs::write(from, br#"{"type":"INFO","target":"ALL","#)?;
            }
            Ok(())
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let inputs = tmp.path().join("inputs");
    let settle = Duration::from_millis(300);
    let mut o = MailboxOptions::new();
    o.settle(settle);
    o.init(tmp.path()).unwrap();
    let x = inputs.join("x.json");
    std::fs::write(&x, br#"{"type":"STEER","target":"Executor"}"#).unwrap();
    std::thread::sleep(settle + Duration::from_millis(50));
    let hook = std::sync::Arc::new(Swap {
        inputs: inputs.clone(),
        done: AtomicBool::new(false),
        taken: Mutex::new(None),
    });
    // By rename: the hook stages the race at the claim's rename. Claims by link meet a name
    // used again at the source's removal instead (atomic::remove_linked_source), where the
    // file that took the name goes back the same way.
    let mb = o
        .clone()
        .hook(hook.clone())
        .link_claims(false)
        .open(tmp.path())
        .unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    mb.ack("Executor").unwrap();
    assert!(hook.done.load(Ordering::SeqCst), "the race was staged");
    assert!(pass.delivered.is_empty(), "delivered: {:?}", pass.delivered);
    assert!(pass.rejected.is_empty(), "quarantined: {:?}", pass.rejected);
    assert_eq!(
        std::fs::read(&x).unwrap(),
        br#"{"type":"INFO","target":"ALL","#,
        "put back as it was"
    );
    // Put back, it does not look renamed in whole to anyone (its ctime changed): another
    // handle's pass leaves it settling too.
    let other = o.open(tmp.path()).unwrap();
    let pass = other.pass("Planner", None).unwrap();
    assert!(
        pass.delivered.is_empty() && pass.rejected.is_empty(),
        "{pass:?}"
    );
    assert!(pass.next_check.is_some());
    // The writer finishes in place; once settled, everyone gets the broadcast.
    let mut f = std::fs::OpenOptions::new().append(true).open(&x).unwrap();
    std::io::Write::write_all(&mut f, br#""message":"whole"}"#).unwrap();
    drop(f);
    std::thread::sleep(settle + Duration::from_millis(50));
    let mb = o.open(tmp.path()).unwrap();
    for a in ["Executor", "Planner"] {
        let pass = mb.pass(a, None).unwrap();
        mb.ack(a).unwrap();
        assert_eq!(pass.delivered.len(), 1, "{a}: {pass:?}");
        assert_eq!(pass.delivered[0].message.as_deref(), Some("whole"));
        assert_eq!(pass.delivered[0].target, sigbox::Target::All);
    }
    assert!(sigbox_tests::rejected(tmp.path()).is_empty());
}

/// Identity: two dropped files with the same name and the same content, one after the other,
/// are two signals. Neither is taken for a crash's leftover of the other: both are delivered
/// (through the buffer of an absent agent, and straight), and both records stay in
/// `processed/`; a broadcast dropped again archives beside the first, never over it.
#[test]
fn the_same_content_dropped_again_is_another_signal() {
    let (tmp, mb) = mailbox(Duration::ZERO);
    let inputs = tmp.path().join("inputs");
    let body = "type: STEER\ntarget: Planner\nmessage: hi\n";
    let mut ids = Vec::new();
    for round in 0..2 {
        std::fs::write(inputs.join("t.yaml"), body).unwrap();
        // The Planner is absent: the orchestrator buffers it; then the Planner takes it.
        let pass = mb.pass("Orchestrator", None).unwrap();
        assert_eq!(pass.buffered.len(), 1, "round {round}: {pass:?}");
        let pass = mb.pass("Planner", None).unwrap();
        mb.ack("Planner").unwrap();
        assert_eq!(pass.delivered.len(), 1, "round {round}: {pass:?}");
        ids.push(pass.delivered[0].id.clone());
        // Present this time: straight from inputs/.
        std::fs::write(inputs.join("t.yaml"), body).unwrap();
        let _here = mb.presence("Planner").unwrap();
        assert!(mb.pass("Orchestrator", None).unwrap().buffered.is_empty());
        let pass = mb.pass("Planner", None).unwrap();
        mb.ack("Planner").unwrap();
        assert_eq!(pass.delivered.len(), 1, "round {round}, present: {pass:?}");
        ids.push(pass.delivered[0].id.clone());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "four signals: {ids:?}");
    let mut logged: Vec<String> = mb
        .processed()
        .unwrap()
        .into_iter()
        .map(|s| s.unwrap().id)
        .collect();
    logged.sort();
    assert_eq!(logged, ids);

    // A broadcast, dropped again with the same content once the first is archived.
    let news = "type: INFO\ntarget: ALL\nmessage: daily\n";
    for _ in 0..2 {
        std::fs::write(inputs.join("news.yaml"), news).unwrap();
        everyone(&mb);
        mb.pass("Orchestrator", None).unwrap();
        assert!(!inputs.join("news.yaml").exists(), "archived");
    }
    let archived = mb
        .processed()
        .unwrap()
        .into_iter()
        .map(|s| s.unwrap())
        .filter(|s| s.message.as_deref() == Some("daily"))
        .count();
    assert_eq!(archived, 2, "both records kept");
}

/// Identity: an upstream ack (`acks/<stem>/<Agent>.ack.yaml`) counts for a dropped broadcast
/// only when written after the file arrived: not one left for yesterday's file of the same
/// name (also when today's was drafted before it and moved in after), not one whose mtime a
/// clock running ahead put in the future.
#[test]
fn only_an_upstream_ack_newer_than_the_broadcast_counts() {
    let (tmp, mb) = mailbox(Duration::ZERO);
    let acks = tmp.path().join("acks/news");
    std::fs::create_dir_all(&acks).unwrap();
    let draft = tmp.path().join("draft.yaml");
    std::fs::write(&draft, "type: INFO\ntarget: ALL\nmessage: tuesday\n").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // Yesterday's acks: Planner's plainly older, Reviewer's with a future mtime.
    std::fs::write(acks.join("Planner.ack.yaml"), "agent: Planner\n").unwrap();
    let future = std::fs::File::create(acks.join("Reviewer.ack.yaml")).unwrap();
    future
        .set_modified(std::time::SystemTime::now() + Duration::from_secs(3600))
        .unwrap();
    drop(future);
    std::thread::sleep(Duration::from_millis(20));
    std::fs::rename(&draft, tmp.path().join("inputs/news.yaml")).unwrap();
    for a in ["Planner", "Reviewer"] {
        let pass = mb.pass(a, None).unwrap();
        mb.ack(a).unwrap();
        assert_eq!(pass.delivered.len(), 1, "{a} gets today's news: {pass:?}");
    }
    // Written after the file arrived: counts.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(acks.join("Questioner.ack.yaml"), "agent: Questioner\n").unwrap();
    let pass = mb.pass("Questioner", None).unwrap();
    assert!(pass.delivered.is_empty(), "{pass:?}");
}

/// Identity: the orchestrator's move into a buffer, like a claim, takes only the file it
/// routed: a name used again meanwhile (a signal for another agent) is put back, never moved
/// into the absent agent's buffer.
#[test]
fn a_name_used_again_under_a_buffer_move_is_put_back() {
    struct Swap(std::path::PathBuf, std::sync::atomic::AtomicBool);
    impl sigbox::FsHook for Swap {
        fn before(&self, op: &sigbox::FsOp<'_>) -> std::io::Result<()> {
            if let sigbox::FsOp::Rename { from, to, .. } = op
                && *from == self.0.join("x.json")
                && to.to_string_lossy().contains("buffered")
                && !self.1.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                std::fs::remove_file(from)?;
                std::fs::write(
                    from,
                    br#"{"type":"STEER","target":"Executor","message":"not for the Planner"}"#,
                )?;
            }
            Ok(())
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let inputs = tmp.path().join("inputs");
    let mut o = MailboxOptions::new();
    o.settle(Duration::ZERO);
    o.init(tmp.path()).unwrap();
    std::fs::write(
        inputs.join("x.json"),
        br#"{"type":"STEER","target":"Planner","message":"for the Planner"}"#,
    )
    .unwrap();
    let hook = std::sync::Arc::new(Swap(inputs.clone(), Default::default()));
    // By rename: the hook stages the race at the claim's rename. Claims by link meet a name
    // used again at the source's removal instead (atomic::remove_linked_source), where the
    // file that took the name goes back the same way.
    let mb = o
        .clone()
        .hook(hook.clone())
        .link_claims(false)
        .open(tmp.path())
        .unwrap();
    let pass = mb.pass("Orchestrator", None).unwrap();
    assert!(
        hook.1.load(std::sync::atomic::Ordering::SeqCst),
        "the race was staged"
    );
    assert!(pass.buffered.is_empty(), "{pass:?}");
    let mb = o.open(tmp.path()).unwrap();
    let got = mb.pass("Planner", None).unwrap();
    assert!(
        got.delivered.is_empty(),
        "the Planner got {:?}",
        got.delivered
    );
    let got = mb.pass("Executor", None).unwrap();
    assert_eq!(got.delivered.len(), 1, "{got:?}");
    assert_eq!(
        got.delivered[0].message.as_deref(),
        Some("not for the Planner")
    );
}

/// A non-finite number (YAML's `.inf`, `-.inf`, `.nan`, or a literal too large for a double)
/// has no JSON form: in a field sigbox does not know it is kept as the string of its canonical
/// YAML spelling, and the signal is delivered; in a field sigbox reads it is refused, naming
/// the field.
#[test]
fn yaml_non_finite_numbers_are_kept_as_text_or_refused_by_field() {
    for (scalar, kept) in [
        (".inf", ".inf"),
        ("-.inf", "-.inf"),
        (".nan", ".nan"),
        (".NaN", ".nan"),
        ("+.Inf", ".inf"),
        ("1e999", ".inf"),
    ] {
        let yaml = format!(
            "type: STEER\ntarget: Executor\nmessage: m\nweight: {scalar}\nmeta:\n  - {scalar}\n"
        );
        let (_tmp, mb) = dropped("n.yaml", yaml.as_bytes());
        let pass = mb.pass("Executor", None).unwrap();
        assert!(pass.rejected.is_empty(), "{scalar}: {:?}", pass.rejected);
        assert_eq!(pass.delivered.len(), 1, "{scalar}");
        let s = &pass.delivered[0];
        assert_eq!(s.fields["weight"], serde_json::json!(kept), "{scalar}");
        assert_eq!(s.fields["meta"], serde_json::json!([kept]), "{scalar}");
        mb.ack("Executor").unwrap();
        // The record in processed/ reads back the same.
        let logged: Vec<_> = mb.processed().unwrap();
        assert_eq!(logged.len(), 1, "{scalar}");
        let rec = logged.into_iter().next().unwrap().unwrap();
        assert_eq!(rec.fields["weight"], serde_json::json!(kept), "{scalar}");
    }
    // The text fields keep the scalar as written.
    check(
        "message: .inf",
        "m.yaml",
        b"type: STEER\ntarget: Executor\nmessage: .inf\n",
        &Message(".inf"),
    );
    // A field sigbox reads refuses it by name.
    for (field, body) in [
        (
            "`iteration`",
            "type: STEER\ntarget: Executor\niteration: .inf\n",
        ),
        (
            "`iteration`",
            "type: STEER\ntarget: Executor\niteration: .nan\n",
        ),
        (
            "`created_at`",
            "type: STEER\ntarget: Executor\ncreated_at: -.inf\n",
        ),
        ("target", "type: STEER\ntarget: .nan\n"),
    ] {
        check(body, "k.yaml", body.as_bytes(), &Rejected(vec![field]));
    }
}

/// `claims_by_link` says how this handle's claims move (spec/mailbox.md §9.10): by link when
/// forced on, by rename when forced off, and as the root's filesystem requires when left to
/// it; a claim then makes a link exactly when it says so.
#[test]
fn claims_by_link_says_how_a_claim_moves() {
    struct Links(std::sync::atomic::AtomicUsize);
    impl sigbox::FsHook for Links {
        fn before(&self, op: &sigbox::FsOp<'_>) -> std::io::Result<()> {
            if matches!(op, sigbox::FsOp::Link { .. }) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            Ok(())
        }
    }
    for forced in [Some(true), Some(false), None] {
        let tmp = tempfile::tempdir().unwrap();
        let links = std::sync::Arc::new(Links(std::sync::atomic::AtomicUsize::new(0)));
        let mut o = MailboxOptions::new();
        o.hook(links.clone());
        if let Some(on) = forced {
            o.link_claims(on);
        }
        let mb = o.init(tmp.path()).unwrap();
        mb.send(
            sigbox::NewSignal::new(sigbox::SignalType::Steer)
                .target(sigbox::Target::Agent("Executor".into())),
        )
        .unwrap();
        assert_eq!(mb.pass("Executor", None).unwrap().delivered.len(), 1);
        let by_link = mb.claims_by_link();
        if let Some(on) = forced {
            assert_eq!(by_link, on);
        }
        assert_eq!(
            links.0.load(std::sync::atomic::Ordering::SeqCst) > 0,
            by_link,
            "forced {forced:?}: claims_by_link() says {by_link}"
        );
    }
}

/// What a change in `inputs/` means to a bridge's exporter (spec/bridge.md §3): a change
/// `no_export_work` lets pass without a round must be one a round would take nothing for.
/// Each file alone in a fresh mailbox, under each set of agents here: where the name says no
/// work, `take` takes nothing; for a signal under a canonical name of a known type and a
/// single consumer, the name decides exactly as `take` does; a broadcast and a file dropped
/// under a name that says nothing are always looked at.
#[test]
fn the_name_of_a_change_tells_the_exporter_whether_a_round_may_take_it() {
    use sigbox::{NewSignal, SignalType, Target};
    let canonical = |ty: &str, target: &str| {
        format!(
            "signal.20261126T101500.000001Z.0123456789abcdef0123456789abcdef.{ty}.{target}.json"
        )
    };
    let body = |name: &str, ty: &str, target: Option<&str>| {
        let id = name.strip_suffix(".json").unwrap_or(name);
        let mut v = serde_json::json!({"id": id, "type": ty, "timestamp": "2026-11-26T10:15:00.000001Z", "message": "m"});
        if let Some(t) = target {
            v["target"] = t.into();
        }
        serde_json::to_vec(&v).unwrap()
    };
    // (file name, its body, whether it must always be looked at)
    let signal = |ty: &str, target: &str, body_target: Option<&str>, always: bool| {
        let n = canonical(ty, target);
        let b = body(&n, &ty.to_lowercase(), body_target);
        (n, b, always)
    };
    let files: Vec<(String, Vec<u8>, bool)> = vec![
        signal("STEER", "Executor", Some("Executor"), false),
        signal("STEER", "Planner", Some("Planner"), false),
        signal("APPROVE", "Executor", Some("Executor"), false),
        signal("INFO", "_", None, false),
        signal("INFO", "ALL", Some("ALL"), true),
        signal("TELEPORT", "Executor", Some("Executor"), false),
        (
            "dropped.json".to_string(),
            br#"{"type": "steer", "target": "Planner", "message": "m"}"#.to_vec(),
            true,
        ),
        (
            "dropped-here.json".to_string(),
            br#"{"type": "steer", "target": "Executor", "message": "m"}"#.to_vec(),
            true,
        ),
        (
            ".4242.0123456789abcdef.send.tmp".to_string(),
            b"{".to_vec(),
            false,
        ),
    ];
    let heres: [&[&str]; 4] = [
        &[],
        &["Executor"],
        &["Executor", "Orchestrator"],
        &["Orchestrator"],
    ];
    let mut skipped = 0;
    for (file, bytes, always) in &files {
        for here_set in heres {
            let tmp = tempfile::tempdir().unwrap();
            let mut o = MailboxOptions::new();
            o.settle(Duration::ZERO);
            let mb = o.init(tmp.path()).unwrap();
            let inputs = tmp.path().join("inputs");
            std::fs::write(inputs.join(file), bytes).unwrap();
            let here = |a: &str| here_set.contains(&a);
            let no_work = mb.bridge().no_export_work(&inputs.join(file), &here);
            let mut seen = sigbox::BroadcastsSeen::default();
            let taken = mb.bridge().take("h0", 64, &here, &mut seen).unwrap();
            let what = format!("{file} with {here_set:?} here");
            if *always {
                assert!(!no_work, "{what}: must be looked at");
            }
            if no_work {
                let ids: Vec<&str> = taken.iter().map(|o| o.id.as_str()).collect();
                assert!(
                    taken.is_empty(),
                    "{what}: said no work, and a round took {ids:?}"
                );
                skipped += 1;
            } else if !always && !file.starts_with('.') {
                assert!(!taken.is_empty(), "{what}: looked at for nothing");
            }
        }
    }
    // The stage file and the unknown type under every set; the Executor's signal, and the
    // orchestrator's two, under the two sets with their agent each.
    assert_eq!(skipped, 4 + 4 + 2 + 2 + 2, "changes let pass");
    // The directories themselves and what is not in inputs/ are always looked at.
    let tmp = tempfile::tempdir().unwrap();
    let mb = MailboxOptions::new().init(tmp.path()).unwrap();
    let all = |_: &str| true;
    mb.send(NewSignal::new(SignalType::Steer).target(Target::Agent("Executor".into())))
        .unwrap();
    for p in [
        tmp.path().join("inputs"),
        tmp.path()
            .join("buffered")
            .join("Executor")
            .join(canonical("STEER", "Executor")),
        tmp.path().join(canonical("STEER", "Executor")),
    ] {
        assert!(!mb.bridge().no_export_work(&p, &all), "{}", p.display());
    }
}

/// A broadcast ack is shared with other hosts only once the broadcast was handed over: while
/// its marker stands in a slot of the agent (handed to a consumer that may die before the
/// hand-over), the bridge's list of acks leaves it out, so that an agent that moves is not
/// kept from a broadcast it never got (spec/bridge.md §5).
#[test]
fn an_ack_in_flight_is_not_shared_with_other_hosts() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = MailboxOptions::new();
    opts.settle(Duration::ZERO);
    let mb = opts.init(tmp.path()).unwrap();
    let id = mb
        .send(&sigbox::NewSignal::new(sigbox::SignalType::Info))
        .unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    assert_eq!(pass.delivered.len(), 1);
    let shared = |mb: &sigbox::Mailbox| mb.bridge().acks().unwrap();
    assert!(
        !shared(&mb).contains(&(id.clone(), "Executor".to_string())),
        "shared while in flight: {:?}",
        shared(&mb)
    );
    mb.ack("Executor").unwrap();
    assert!(shared(&mb).contains(&(id, "Executor".to_string())));
}
