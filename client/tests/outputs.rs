//! What `sigbox` shows says what is so: a path is where the file is once the line is read, a
//! log record holds plain paths, an instant keeps the offset it was written with, and two
//! files never give two identical lines. Through the real binary.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use common::files_under;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("signals");
        let env = Env { _dir: dir, root };
        env.ok(&["init"]);
        env
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .env("SIGBOX_ROOT", &self.root)
            .env_remove("RUST_LOG")
            .env_remove("SIGBOX_SETTLE")
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "sigbox {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Vec<Value> {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        parse_lines(&self.ok(&a))
    }

    fn inputs(&self) -> PathBuf {
        self.root.join("inputs")
    }

    /// Drops `body` as `name` the way a careful writer does (written elsewhere, renamed in),
    /// with an mtime an hour ago: read at once whatever the settle window.
    fn drop_whole(&self, name: &str, body: &str) {
        let stage = self.root.join(format!("stage-{name}"));
        std::fs::write(&stage, body).unwrap();
        let f = std::fs::File::options().write(true).open(&stage).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(3600))
            .unwrap();
        drop(f);
        std::fs::rename(&stage, self.inputs().join(name)).unwrap();
    }
}

fn parse_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// `poll --json` and `wait --json` give as `path` where the file is once the line is read:
/// a claimed signal's record in `processed/` (a `.dup-` name when `processed/` holds another
/// file of that name, and the record is there under it), never the claim slot it left; a
/// broadcast's file in `inputs/`, where it stays.
#[test]
fn a_delivered_signal_s_path_is_where_the_file_is_once_the_line_is_read() {
    let env = Env::new();
    // An earlier news.json, delivered and acknowledged: processed/news.json is taken.
    env.drop_whole(
        "news.json",
        r#"{"type": "INFO", "target": "Executor", "message": "first"}"#,
    );
    let first = env.json(&["poll", "--as", "Executor"]);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(
        Path::new(first[0]["path"].as_str().unwrap()),
        env.root.join("processed/news.json")
    );
    // The same name again, a steer and a broadcast.
    env.drop_whole(
        "news.json",
        r#"{"type": "INFO", "target": "Executor", "message": "second"}"#,
    );
    env.ok(&["send", "STEER", "go", "--target", "Executor"]);
    env.ok(&["send", "INFO", "everyone"]);
    let lines = env.json(&["poll", "--as", "Executor"]);
    assert_eq!(lines.len(), 3, "{lines:?}");
    for l in &lines {
        let path = PathBuf::from(l["path"].as_str().unwrap());
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{l}: nothing at its path ({e})"));
        assert!(
            text.contains(l["message"].as_str().unwrap()),
            "{l}: another file at its path: {text}"
        );
        let dir = path.parent().unwrap();
        if l["target"] == "ALL" {
            assert_eq!(dir, env.inputs(), "{l}");
        } else {
            assert_eq!(dir, env.root.join("processed"), "{l}");
        }
    }
    let second = lines.iter().find(|l| l["message"] == "second").unwrap();
    let name = Path::new(second["path"].as_str().unwrap())
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with("news.dup-") && name.ends_with(".json"),
        "the second news.json takes a fresh name: {name}"
    );
    assert!(
        files_under(&env.root.join("claimed")).is_empty(),
        "nothing left in a claim slot"
    );

    // `wait` says the same.
    env.drop_whole(
        "news.json",
        r#"{"type": "INFO", "target": "Executor", "message": "third"}"#,
    );
    let lines = env.json(&["wait", "--as", "Executor", "--timeout", "10s"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let path = PathBuf::from(lines[0]["path"].as_str().unwrap());
    assert_eq!(path.parent().unwrap(), env.root.join("processed"));
    assert!(std::fs::read_to_string(&path).unwrap().contains("third"));

    // `log` names each record where it is.
    for l in env.json(&["log"]) {
        let path = PathBuf::from(l["path"].as_str().unwrap());
        assert_eq!(path.parent().unwrap(), env.root.join("processed"), "{l}");
        assert!(path.is_file(), "{l}");
    }
}

/// Under `-v --json`, a log record's fields are plain strings: a path is the path itself,
/// never a Debug-quoted string in a string (`"\"/…/inputs/b.json\""`); in text, a value is
/// unquoted and its control characters escaped.
#[test]
fn verbose_json_log_records_hold_plain_paths() {
    let env = Env::new();
    env.drop_whole("bad.json", r#"{"type": "INFO""#);
    let out = env.run(&["-v", "--json", "poll", "--as", "Executor"]);
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let records: Vec<Value> = parse_lines(&stderr)
        .into_iter()
        .filter(|v| v.get("level").is_some())
        .collect();
    let quarantined = records
        .iter()
        .find(|r| r["message"] == "quarantined")
        .unwrap_or_else(|| panic!("no record of the quarantine: {stderr}"));
    assert_eq!(
        Path::new(quarantined["from"].as_str().unwrap()),
        env.inputs().join("bad.json"),
        "{quarantined}"
    );
    assert_eq!(
        Path::new(quarantined["file"].as_str().unwrap()),
        env.root.join("rejected/bad.json"),
        "{quarantined}"
    );
    for r in &records {
        for (k, v) in r.as_object().unwrap() {
            if let Some(s) = v.as_str() {
                assert!(!s.starts_with('"'), "{k} is Debug-quoted: {r}");
            }
        }
    }

    // In text: unquoted, one record per line, a line break in a name escaped.
    env.drop_whole("two\nlines.json", r#"{"type": "INFO""#);
    let out = env.run(&["-v", "poll", "--as", "Executor"]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    let line = stderr
        .lines()
        .find(|l| l.contains("quarantined from="))
        .unwrap_or_else(|| panic!("{stderr}"));
    let want = format!("from={}", env.inputs().join("two\\nlines.json").display());
    assert!(line.contains(&want), "{line}");
    assert!(!line.contains("from=\""), "{line}");
}

/// Every tracing field across the workspace that holds a value is recorded with `%` (its
/// Display, a plain string) and never with `?` (Debug, which quotes a path or a string
/// inside the JSON string).
#[test]
fn no_log_field_is_recorded_by_debug() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut found = Vec::new();
    for krate in ["broker", "client", "mcp", "bridge", "python", "bench"] {
        for file in files_under(&workspace.join(krate).join("src")) {
            if file.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let src = std::fs::read_to_string(&file).unwrap();
            for call in tracing_calls(&src) {
                if debug_field(&call) {
                    found.push(format!("{}: {call}", file.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "fields recorded by Debug:\n{}",
        found.join("\n")
    );
}

/// The argument lists of the tracing macro calls in `src`, string literals blanked.
fn tracing_calls(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = src.as_bytes();
    for mac in [
        "trace!(", "debug!(", "info!(", "warn!(", "error!(", "span!(",
    ] {
        let mut from = 0;
        while let Some(at) = src[from..].find(mac) {
            let start = from + at + mac.len();
            from = start;
            // `tracing::warn!(` or a bare `warn!(`, not `eprintln!(` and the like.
            let before = src[..start - mac.len()].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let (mut depth, mut i, mut call) = (1, start, String::new());
            while depth > 0 && i < b.len() {
                match b[i] {
                    b'(' => depth += 1,
                    b')' => depth -= 1,
                    b'"' => {
                        i += 1;
                        while i < b.len() && b[i] != b'"' {
                            i += if b[i] == b'\\' { 2 } else { 1 };
                        }
                        call.push_str("\"\"");
                        i += 1;
                        continue;
                    }
                    _ => {}
                }
                call.push(b[i] as char);
                i += 1;
            }
            out.push(call.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out
}

/// True when a call records a field by Debug: `name = ?value` or a bare `?value`.
fn debug_field(call: &str) -> bool {
    let t: Vec<char> = call.chars().collect();
    (0..t.len()).any(|i| {
        t[i] == '?'
            && t[i + 1..]
                .first()
                .is_some_and(|c| c.is_alphabetic() || *c == '_')
            && t[..i]
                .iter()
                .rev()
                .find(|c| !c.is_whitespace())
                .is_none_or(|c| matches!(c, '=' | ',' | '('))
    })
}

/// A dropped body's `created_at` is shown as the sender wrote it: its offset kept, by `poll`,
/// `wait` and `ls`; what `send` wrote stays UTC with microseconds.
#[test]
fn created_at_keeps_the_offset_it_was_written_with() {
    let env = Env::new();
    let written = [
        (
            "plus.json",
            "2026-05-01T10:00:00+07:00",
            "2026-05-01T10:00:00+07:00",
        ),
        (
            "minus.json",
            "2026-05-01T10:00:00.123456-03:30",
            "2026-05-01T10:00:00.123456-03:30",
        ),
        (
            "zulu.json",
            "2026-05-01T03:00:00.120Z",
            "2026-05-01T03:00:00.120Z",
        ),
        (
            "zero.json",
            "2026-05-01T03:00:00+00:00",
            "2026-05-01T03:00:00+00:00",
        ),
        (
            "tenth.json",
            "2026-05-01T10:00:00.5+07:00",
            "2026-05-01T10:00:00.500+07:00",
        ),
    ];
    for (name, at, _) in written {
        env.drop_whole(
            name,
            &format!(r#"{{"type": "INFO", "target": "Executor", "message": "{name}", "created_at": "{at}"}}"#),
        );
    }
    let sent = env.ok(&["send", "INFO", "sent", "--target", "Executor"]);
    let shown = |lines: &[Value], key: &str, name: &str| -> String {
        lines
            .iter()
            .find(|l| l[key].as_str().is_some_and(|v| v.contains(name)))
            .unwrap_or_else(|| panic!("no {name}: {lines:?}"))["created_at"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let ls = env.json(&["ls"]);
    for (name, _, want) in written {
        assert_eq!(shown(&ls, "path", name), want, "ls, {name}");
    }
    let polled = env.json(&["poll", "--as", "Executor"]);
    for (name, _, want) in written {
        assert_eq!(shown(&polled, "message", name), want, "poll, {name}");
    }
    let ours = shown(&polled, "id", sent.trim());
    assert!(
        ours.ends_with('Z') && ours.len() == "2026-05-01T03:00:00.123456Z".len(),
        "what send wrote: {ours}"
    );

    env.drop_whole(
        "later.json",
        r#"{"type": "INFO", "target": "Executor", "created_at": "2026-05-01T10:00:00+07:00"}"#,
    );
    let waited = env.json(&["wait", "--as", "Executor", "--timeout", "10s"]);
    assert_eq!(waited[0]["created_at"], "2026-05-01T10:00:00+07:00");
}

/// Each file still settling has its own line naming it, in text and in JSON: two files never
/// give two identical lines.
#[test]
fn each_settling_file_is_named() {
    let env = Env::new();
    // Written in place, just now: they settle for the window.
    for name in ["one.json", "two.json"] {
        std::fs::write(env.inputs().join(name), r#"{"type": "INFO"}"#).unwrap();
    }
    let out = env.run(&["--settle", "1h", "-v", "poll", "--as", "Orchestrator"]);
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("settling")).collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert_ne!(lines[0], lines[1]);
    for name in ["one.json", "two.json"] {
        let path = env.inputs().join(name).display().to_string();
        assert!(
            lines.iter().any(|l| l.contains(&path)),
            "no line names {path}: {stderr}"
        );
    }

    let out = env.run(&[
        "--settle",
        "1h",
        "-v",
        "--json",
        "poll",
        "--as",
        "Orchestrator",
    ]);
    let events: Vec<Value> = parse_lines(&String::from_utf8(out.stderr).unwrap())
        .into_iter()
        .filter(|e| e["event"] == "settling")
        .collect();
    let mut paths: Vec<PathBuf> = events
        .iter()
        .map(|e| PathBuf::from(e["path"].as_str().unwrap()))
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [env.inputs().join("one.json"), env.inputs().join("two.json")],
        "{events:?}"
    );
}

/// An unknown type is left where it is: in a buffer, `ls` and `doctor` say that buffer, not
/// `inputs/`.
#[test]
fn an_unknown_type_in_a_buffer_is_said_to_stay_there() {
    let env = Env::new();
    let buffer = env.root.join("buffered/Planner");
    std::fs::create_dir_all(&buffer).unwrap();
    let stage = env.root.join("stage.json");
    std::fs::write(&stage, r#"{"type": "FOO", "target": "Planner"}"#).unwrap();
    let f = std::fs::File::options().write(true).open(&stage).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    drop(f);
    std::fs::rename(&stage, buffer.join("foo.json")).unwrap();
    let ls = env.ok(&["ls"]);
    assert!(ls.contains("it stays in buffered/Planner/"), "{ls}");
    let doctor = String::from_utf8(env.run(&["doctor"]).stdout).unwrap();
    assert!(
        doctor.contains("unknown type \"FOO\": no agent takes it; it stays in buffered/Planner/"),
        "{doctor}"
    );
}

/// A dropped name used again while the first file waits for its acknowledgement (a library
/// consumer holds it in flight): the second delivery, by another process, is named a fresh
/// record, so that each path shown stays true once both are acknowledged, whatever the order.
#[test]
fn a_name_used_again_while_the_first_is_in_flight_gets_its_own_record() {
    let env = Env::new();
    env.drop_whole(
        "news.json",
        r#"{"type": "INFO", "target": "Executor", "message": "A"}"#,
    );
    let mut held = sigbox_client::Checkpoint::open(&env.root, "Executor").unwrap();
    let first = held.poll().unwrap();
    assert_eq!(first.len(), 1);
    let promised = first[0].acked_path().to_path_buf();
    assert_eq!(promised, env.root.join("processed/news.json"));

    env.drop_whole(
        "news.json",
        r#"{"type": "INFO", "target": "Executor", "message": "B"}"#,
    );
    let lines = env.json(&["poll", "--as", "Executor"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let second = PathBuf::from(lines[0]["path"].as_str().unwrap());
    assert_ne!(second, promised, "B is shown the record A was promised");
    assert!(std::fs::read_to_string(&second).unwrap().contains("\"B\""));

    held.ack().unwrap();
    let text = std::fs::read_to_string(&promised).unwrap();
    assert!(
        text.contains("\"A\""),
        "A is not where it was shown: {text}"
    );
}

/// A dead consumer's slot is counted by what the agent's next pass delivers again: a whole
/// marker whose ack was written (and a claimed file) counts; an emptied marker (a removal cut
/// short), one whose ack was never written (the broadcast is still pending, unmarked) and a
/// directory planted under a marker's name do not. `ls --all` and `doctor` say so, the
/// directory is named as what the next pass quarantines, and that pass delivers exactly what
/// was announced, the still pending broadcast unmarked, and quarantines the directory.
#[test]
fn a_dead_slot_is_counted_by_what_its_next_pass_delivers_again() {
    use sigbox::{MailboxOptions, NewSignal, SignalType, Target};
    let env = Env::new();
    let mb = MailboxOptions::new().open(&env.root).unwrap();
    let mut ids = Vec::new();
    for msg in ["emptied", "unacked", "whole"] {
        let mut all = NewSignal::new(SignalType::Info);
        all.target(Target::All).message(msg).from("alice");
        ids.push(mb.send(&all).unwrap());
    }
    let mut one = NewSignal::new(SignalType::Steer);
    one.target(Target::Agent("Executor".into()))
        .message("claimed");
    mb.send(&one).unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    assert_eq!(pass.delivered.len(), 4, "{pass:?}");
    drop(mb); // the consumer is gone, its slot with it, nothing acknowledged
    let markers: Vec<(PathBuf, String)> = files_under(&env.root)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".broadcast"))
        .map(|p| {
            let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            (p, v["id"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(markers.len(), 3, "{markers:?}");
    let marker_of = |id: &str| markers.iter().find(|m| m.1 == id).unwrap().0.clone();
    std::fs::write(marker_of(&ids[0]), "").unwrap();
    std::fs::remove_file(env.root.join("acks").join(&ids[1]).join("Executor.ack")).unwrap();
    let slot = marker_of(&ids[2]).parent().unwrap().to_path_buf();
    let planted = slot.join("0123456789abcdef.broadcast");
    std::fs::create_dir(&planted).unwrap();

    let ls = env.json(&["ls", "--all"]);
    let in_flight: Vec<&Value> = ls.iter().filter(|v| v["kind"] == "in_flight").collect();
    assert_eq!(in_flight.len(), 1, "{ls:?}");
    assert_eq!(in_flight[0]["count"], 2, "{ls:?}");
    let doctor = env.run(&["doctor"]);
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("2 signal(s)"), "{text}");
    assert!(
        text.contains(&planted.display().to_string()) && text.contains("directory"),
        "{text}"
    );

    let out = env.run(&["--json", "poll", "--as", "Executor"]);
    assert!(out.status.success(), "{out:?}");
    let got = parse_lines(&String::from_utf8(out.stdout).unwrap());
    let mut seen: Vec<(String, u64)> = got
        .iter()
        .map(|v| {
            let msg = v["message"].as_str().unwrap().to_string();
            (msg, v["redelivery"].as_u64().unwrap())
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("claimed".to_string(), 1),
            ("unacked".to_string(), 0),
            ("whole".to_string(), 1)
        ],
        "{got:?}"
    );
    assert!(
        !planted.exists(),
        "the planted directory is still in the slot"
    );
    let rejected = env.json(&["ls", "--all"]);
    assert!(
        rejected
            .iter()
            .any(|v| v["kind"] == "rejected" && v["name"] == "0123456789abcdef.broadcast"),
        "{rejected:?}"
    );
    assert!(
        env.ok(&["--json", "poll", "--as", "Executor"])
            .trim()
            .is_empty()
    );
}

/// What else a dead consumer's slot can hold, counted as the next pass treats it: the second
/// link of a claim cut off before its source went (the pass delivers the source, unmarked),
/// a file that is no signal, and markers naming what a delivery never marks (a signal for
/// another agent, the agent's own broadcast) are not signals to come again; the last three
/// are listed as invalid and quarantined, and nothing is given to the wrong agent.
#[test]
fn a_dead_slot_s_twins_junk_and_stray_markers_are_not_counted() {
    let env = Env::new();
    let send = |args: &[&str]| env.ok(args).trim().to_string();
    let mine = send(&["send", "steer", "mine", "--target", "Executor"]);
    let theirs = send(&["send", "steer", "theirs", "--target", "Planner"]);
    let own = send(&["send", "info", "own", "--from", "Executor"]);
    let slot = env.root.join("claimed/Executor/0");
    std::fs::create_dir_all(&slot).unwrap();
    let name = format!("{mine}.json");
    std::fs::hard_link(env.inputs().join(&name), slot.join(&name)).unwrap();
    std::fs::write(slot.join("junk.json"), "{ not a signal").unwrap();
    for (marker, id) in [("0123456789abcdef", &theirs), ("fedcba9876543210", &own)] {
        let body = serde_json::json!({"name": format!("{id}.json"), "id": id, "redelivery": 0});
        std::fs::write(slot.join(format!("{marker}.broadcast")), body.to_string()).unwrap();
        let acks = env.root.join("acks").join(id.as_str());
        std::fs::create_dir_all(&acks).unwrap();
        std::fs::write(acks.join("Executor.ack"), "{}").unwrap();
    }
    let ls = env.json(&["ls", "--all"]);
    assert!(
        !ls.iter()
            .any(|v| v["kind"] == "in_flight" && v["agent"] == "Executor"),
        "{ls:?}"
    );
    let invalid: Vec<&str> = ls
        .iter()
        .filter(|v| v["kind"] == "invalid")
        .map(|v| v["path"].as_str().unwrap())
        .collect();
    assert_eq!(invalid.len(), 3, "{ls:?}");
    for n in [
        "junk.json",
        "0123456789abcdef.broadcast",
        "fedcba9876543210.broadcast",
    ] {
        assert!(invalid.iter().any(|p| p.ends_with(n)), "{n}: {ls:?}");
    }
    let got = parse_lines(&env.ok(&["--json", "poll", "--as", "Executor"]));
    let seen: Vec<(&str, u64)> = got
        .iter()
        .map(|v| {
            (
                v["message"].as_str().unwrap(),
                v["redelivery"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [("mine", 0)], "{got:?}");
    assert_eq!(files_under(&slot), Vec::<PathBuf>::new());
    let planner = parse_lines(&env.ok(&["--json", "poll", "--as", "Planner"]));
    let planner: Vec<&str> = planner
        .iter()
        .map(|v| v["message"].as_str().unwrap())
        .collect();
    assert_eq!(planner, ["theirs", "own"]);
}
