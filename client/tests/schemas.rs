//! The JSON Schemas in `spec/schemas/` (draft 2020-12) hold for what sigbox really prints and
//! writes: every command runs through the real binary under `--json`, each line of its stdout
//! and stderr is validated against the schema of its shape, and so are the files it leaves on
//! disk (signals, records, reason files, acks, a broadcast marker, Goblin and mux files, a Flux
//! result document). Formats (`date-time`) are checked. Each schema family also refuses a
//! wrong shape, so that no check passes vacuously, and every schema file but `upstream/` (not
//! sigbox's) must be used here.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use jsonschema::{Draft, Registry, Validator};
use serde_json::{Value, json};

#[path = "schemas_parts/asks.rs"]
mod asks_part;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

/// The base of every schema's `$id`: a schema at `spec/schemas/<rel>` has `$id` `BASE<rel>`, so
/// that relative `$ref`s between the files resolve.
const BASE: &str = "https://example.invalid/sigbox/spec/schemas/";

/// The folder another person maintains: not sigbox's formats, not checked here.
const NOT_OURS: &str = "upstream";

fn schemas_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/schemas")
}

/// Every `*.schema.json` under `spec/schemas/` but `upstream/`, by path relative to it.
fn schema_files() -> BTreeMap<String, Value> {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, Value>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if e.file_type().unwrap().is_dir() {
                if rel != NOT_OURS {
                    walk(&e.path(), &rel, out);
                }
            } else if name.ends_with(".json") {
                let text = std::fs::read_to_string(e.path()).unwrap();
                let v: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|err| panic!("spec/schemas/{rel}: not JSON: {err}"));
                out.insert(rel, v);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&schemas_dir(), "", &mut out);
    out
}

/// The schemas, their validators, and what was checked against each.
struct Schemas {
    registry: Registry<'static>,
    files: BTreeMap<String, Value>,
    validators: RefCell<HashMap<String, Rc<Validator>>>,
    /// Real outputs and files validated, per schema file.
    positive: RefCell<BTreeMap<String, usize>>,
    /// Schema files shown to refuse a wrong shape.
    negative: RefCell<BTreeSet<String>>,
    failures: RefCell<Vec<String>>,
}

impl Schemas {
    fn load() -> Schemas {
        let files = schema_files();
        let registry = Registry::new()
            .extend(
                files
                    .iter()
                    .map(|(rel, v)| (format!("{BASE}{rel}"), v.clone())),
            )
            .unwrap()
            .prepare()
            .unwrap_or_else(|e| panic!("the schemas do not form a registry: {e}"));
        Schemas {
            registry,
            files,
            validators: RefCell::default(),
            positive: RefCell::default(),
            negative: RefCell::default(),
            failures: RefCell::default(),
        }
    }

    /// The validator of `schema`: a file (`cli/ls.schema.json`), perhaps with a fragment
    /// (`signal.schema.json#/$defs/canonical`).
    fn validator(&self, schema: &str) -> Rc<Validator> {
        let file = schema.split('#').next().unwrap();
        assert!(
            self.files.contains_key(file),
            "no schema spec/schemas/{file}"
        );
        self.validators
            .borrow_mut()
            .entry(schema.to_string())
            .or_insert_with(|| {
                let v = jsonschema::options()
                    .with_draft(Draft::Draft202012)
                    .should_validate_formats(true)
                    .with_registry(&self.registry)
                    .build(&json!({ "$ref": format!("{BASE}{schema}") }))
                    .unwrap_or_else(|e| panic!("{schema} does not compile: {e}"));
                Rc::new(v)
            })
            .clone()
    }

    /// Validates a real output or file; a mismatch is recorded with the instance and every
    /// error the validator found.
    fn check(&self, schema: &str, instance: &Value, what: &str) {
        let file = schema.split('#').next().unwrap().to_string();
        *self.positive.borrow_mut().entry(file).or_default() += 1;
        let errors_of = |schema: &str| -> Vec<String> {
            self.validator(schema)
                .iter_errors(instance)
                .map(|e| format!("{e} (at {})", e.instance_path()))
                .collect()
        };
        let mut errors = errors_of(schema);
        if !errors.is_empty() {
            // A `oneOf` by kind or event only says that no branch matched: the errors of the
            // branch the instance names say why.
            let branch = ["kind", "event"]
                .iter()
                .find_map(|k| instance.get(*k)?.as_str())
                .filter(|b| !schema.contains('#') && self.files[schema]["$defs"].get(*b).is_some());
            if let Some(b) = branch {
                errors.extend(errors_of(&format!("{schema}#/$defs/{b}")));
            }
            self.failures.borrow_mut().push(format!(
                "{what} does not match {schema}:\n    {instance}\n    {}",
                errors.join("\n    ")
            ));
        }
    }

    /// Validates one line of JSON output.
    fn check_line(&self, schema: &str, line: &str, what: &str) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => self.check(schema, &v, what),
            Err(e) => self.failures.borrow_mut().push(format!(
                "{what}: a line that is not JSON ({e}):\n    {line}"
            )),
        }
    }

    /// Shows that `schema` refuses `instance`, a wrong shape.
    fn reject(&self, schema: &str, instance: &Value, why: &str) {
        let file = schema.split('#').next().unwrap().to_string();
        self.negative.borrow_mut().insert(file);
        if self.validator(schema).is_valid(instance) {
            self.failures.borrow_mut().push(format!(
                "{schema} accepts a wrong shape ({why}):\n    {instance}"
            ));
        }
    }

    fn assert_no_failures(&self) {
        let f = self.failures.borrow();
        assert!(
            f.is_empty(),
            "{} schema check(s) failed:\n{}",
            f.len(),
            f.join("\n")
        );
    }
}

/// What one run of the binary gave.
struct Run {
    args: Vec<String>,
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn lines(&self) -> Vec<&str> {
        self.stdout.lines().filter(|l| !l.is_empty()).collect()
    }

    fn err_lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| !l.is_empty()).collect()
    }

    fn expect(&self, code: i32) -> &Run {
        assert_eq!(
            self.code, code,
            "sigbox {:?}: exit {} (expected {code})\nstdout: {}\nstderr: {}",
            self.args, self.code, self.stdout, self.stderr
        );
        self
    }
}

/// A scratch directory with a mailbox root in it, and the schemas.
struct World {
    dir: tempfile::TempDir,
    root: PathBuf,
    s: Schemas,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("signals");
        World {
            dir,
            root,
            s: Schemas::load(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Runs `sigbox ARGS` in `cwd` (the scratch directory when `None`), with `stdin` as its
    /// input. RUST_LOG=info: log records are on stderr too, and under `--json` they must be JSON
    /// of their schema like the rest.
    fn run_in(&self, cwd: Option<&Path>, args: &[&str], stdin: Option<&str>) -> Run {
        let mut c = Command::new(BIN);
        c.current_dir(cwd.unwrap_or(self.dir.path()))
            .env("SIGBOX_ROOT", &self.root)
            .env_remove("SIGBOX_SETTLE")
            .env("RUST_LOG", "info")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        if let Some(input) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        Run {
            args: args.iter().map(|a| a.to_string()).collect(),
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_in(None, args, None)
    }

    /// Validates every stdout line of `run` against `schema`, and asserts there is at least one.
    fn out(&self, run: &Run, schema: &str) -> Vec<Value> {
        let lines = run.lines();
        assert!(
            !lines.is_empty(),
            "sigbox {:?} printed nothing to check against {schema}\nstderr: {}",
            run.args,
            run.stderr
        );
        let what = format!("stdout of sigbox {:?}", run.args);
        for l in &lines {
            self.s.check_line(schema, l, &what);
        }
        lines
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Validates every stderr line of `run`: each must be JSON, an error line (`{"error"}`) or
    /// an event (`{"event"}`); returns the events.
    fn err(&self, run: &Run) -> Vec<Value> {
        let what = format!("stderr of sigbox {:?}", run.args);
        let mut events = Vec::new();
        for l in run.err_lines() {
            let v: Value = match serde_json::from_str(l) {
                Ok(v) => v,
                Err(e) => {
                    self.s
                        .failures
                        .borrow_mut()
                        .push(format!("{what}: a line that is not JSON ({e}):\n    {l}"));
                    continue;
                }
            };
            if v.get("event").is_some() {
                self.s.check("cli/stderr-event.schema.json", &v, &what);
                events.push(v);
            } else if v.get("level").is_some() {
                // A log record (RUST_LOG=info here): valid, and not an event.
                self.s.check("cli/stderr-event.schema.json", &v, &what);
            } else {
                self.s.check("cli/error.schema.json", &v, &what);
            }
        }
        events
    }

    /// Writes a file as a careful writer does (elsewhere, then renamed in) with an mtime an hour
    /// ago: it arrived whole, so it is read at once whatever the settle window.
    fn drop_whole(&self, dir: &Path, name: &str, body: &str) {
        let stage = self.path(&format!("stage-{name}"));
        std::fs::write(&stage, body).unwrap();
        let f = std::fs::File::options().write(true).open(&stage).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(3600))
            .unwrap();
        drop(f);
        std::fs::rename(&stage, dir.join(name)).unwrap();
    }

    fn inputs(&self) -> PathBuf {
        self.root.join("inputs")
    }
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// A file's body as the JSON its schema describes: JSON as written; YAML as sigbox reads it
/// (the same fields, a record's handling block included), through the library.
fn body_of(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap();
    let name = path.file_name().unwrap().to_str().unwrap();
    if name.ends_with(".json") {
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    } else {
        let s = sigbox::Signal::parse_file_bytes(&bytes, path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Value::Object(s.fields)
    }
}

/// A JSON file sigbox wrote that is not a signal (a reason, an ack, a marker, a state).
fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The regular files in `dir` that are not writes in progress (dot-files), sorted.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    out.sort();
    out
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A mux `key: value` file as its readers read it (split at the first `": "`, values as text).
fn mux_kv(text: &str) -> Value {
    let mut m = serde_json::Map::new();
    for line in text.trim().lines() {
        let (k, v) = line
            .split_once(": ")
            .unwrap_or_else(|| panic!("not a `key: value` line: {line:?}"));
        m.insert(k.trim().to_string(), json!(v));
    }
    Value::Object(m)
}

#[test]
fn every_output_and_file_matches_its_schema() {
    let w = World::new();
    let mut mailbox = mailbox(&w);
    mailbox.insert("hooks", hooks(&w));
    outbound(&w, &mut mailbox);
    goblin(&w);
    mux(&w);
    streams(&w);
    asks_part::asks(&w);
    negatives(&w, &mailbox);
    w.s.assert_no_failures();

    // Every schema file is used: validated against real output (common.schema.json holds
    // only definitions the others refer to), and shown to refuse a wrong shape.
    let positive = w.s.positive.borrow();
    eprintln!("validated per schema: {positive:?}");
    let negative = w.s.negative.borrow();
    for f in w.s.files.keys() {
        if f != "common.schema.json" {
            assert!(
                positive.get(f).is_some_and(|n| *n > 0),
                "spec/schemas/{f}: no real output or file was validated against it"
            );
        }
        assert!(
            negative.contains(f),
            "spec/schemas/{f}: no check shows it refusing a wrong shape"
        );
    }
}

/// Real lines kept for the negative checks, by schema.
type Samples = BTreeMap<&'static str, Value>;

fn mailbox(w: &World) -> Samples {
    let s = &w.s;
    let mut samples = Samples::new();
    let init = w.run(&["--json", "init"]);
    samples.insert(
        "init",
        w.out(init.expect(0), "cli/init.schema.json").remove(0),
    );
    w.err(&init);

    let send = |args: &[&str]| -> String {
        let mut a = vec!["--json", "send"];
        a.extend_from_slice(args);
        let r = w.run(&a);
        let v = w.out(r.expect(0), "cli/send.schema.json");
        w.err(&r);
        v[0]["id"].as_str().unwrap().to_string()
    };
    let steer = send(&[
        "steer",
        "prefer the v2 API",
        "--target",
        "Executor",
        "--from",
        "alice",
        "--iteration",
        "3",
    ]);
    let one = send(&["info", "CI is green", "--target", "ALL"]);
    let pause = send(&["pause", "hold on", "--target", "Planner"]);
    let inputs = w.inputs();
    // A malformed file, moved in whole: quarantined by the next pass.
    w.drop_whole(&inputs, "broken.yaml", "type: [\n");

    // The orchestrator: the broadcast; the Planner is absent, so its PAUSE is buffered.
    let r = w.run(&[
        "--json",
        "-v",
        "--settle",
        "0",
        "poll",
        "--as",
        "Orchestrator",
    ]);
    let lines = w.out(r.expect(0), "cli/poll.schema.json#/$defs/checkpoint");
    assert_eq!(lines[0]["id"], one.as_str());
    let events = w.err(&r);
    assert!(
        events.iter().any(|e| e["event"] == "buffered"
            && e["id"] == pause.as_str()
            && e["agent"] == "Planner"),
        "{}",
        r.stderr
    );
    assert!(
        events.iter().any(|e| e["event"] == "rejected"),
        "{}",
        r.stderr
    );

    // Hand-dropped files: one with an offset in created_at, YAML, an unknown type, a duplicate
    // key (invalid), and one written in place (settling).
    w.drop_whole(
        &inputs,
        "hand.json",
        r#"{"type": "steer", "target": "executor", "message": {"a": 1}, "created_at": "2026-02-08T14:30:04.5+07:00", "extra": [1, 2]}"#,
    );
    w.drop_whole(
        &inputs,
        "note.yaml",
        "type: INFO\ntarget: Executor\nmessage: no\niteration: 7\n",
    );
    w.drop_whole(
        &inputs,
        "unknown.json",
        r#"{"type": "FOO", "target": "Executor"}"#,
    );
    w.drop_whole(&inputs, "bad.json", r#"{"type": "INFO", "type": "PAUSE"}"#);
    std::fs::write(inputs.join("late.yaml"), "type: INFO\ntarget: Executor\n").unwrap();

    let r = w.run(&["--json", "--settle", "10s", "ls", "--all"]);
    let lines = w.out(r.expect(0), "cli/ls.schema.json");
    w.err(&r);
    let seen: BTreeSet<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    for kind in ["pending", "buffered", "settling", "invalid", "rejected"] {
        assert!(seen.contains(kind), "no {kind} entry in ls:\n{}", r.stdout);
    }
    assert!(
        lines
            .iter()
            .any(|l| l["known_type"] == false && l["type"] == "FOO"),
        "{}",
        r.stdout
    );
    samples.insert("ls", lines[0].clone());

    // The executor: its STEER, the broadcast, the hand-dropped ones; the invalid file is
    // quarantined, the one written in place still settles.
    let r = w.run(&[
        "--json", "-v", "--settle", "10s", "poll", "--as", "Executor",
    ]);
    let lines = w.out(r.expect(0), "cli/poll.schema.json#/$defs/checkpoint");
    assert!(lines.iter().any(|l| l["id"] == steer.as_str()));
    assert!(
        lines
            .iter()
            .any(|l| l["created_at"] == "2026-02-08T14:30:04.500+07:00"
                && l["fields"]["created_at"] == "2026-02-08T14:30:04.5+07:00"),
        "created_at keeps the sender's offset (milliseconds for one digit written):\n{}",
        r.stdout
    );
    // Each line's path is where its file is now that the command is done: a claimed
    // signal's record in processed/, the broadcast in inputs/ (acked, not archived yet).
    for l in &lines {
        let path = Path::new(l["path"].as_str().unwrap());
        let dir = path.parent().and_then(Path::file_name).unwrap();
        let want = if l["target"] == "ALL" {
            "inputs"
        } else {
            "processed"
        };
        assert_eq!(dir, want, "{l}");
        assert!(path.is_file(), "{l}: no file at its path");
    }
    samples.insert("poll", lines[0].clone());
    let events = w.err(&r);
    assert_eq!(kinds(&events), ["rejected", "settling"], "{}", r.stderr);
    assert!(
        events[1]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("inputs/late.yaml")),
        "the settling event names its file: {}",
        r.stderr
    );
    samples.insert("settling", events[1].clone());

    // The Planner comes back: `wait` delivers its buffer (and the broadcast).
    let r = w.run(&[
        "--json",
        "-v",
        "wait",
        "--as",
        "Planner",
        "--timeout",
        "10s",
    ]);
    let lines = w.out(r.expect(0), "cli/poll.schema.json#/$defs/checkpoint");
    assert!(lines.iter().any(|l| l["id"] == pause.as_str()));
    w.err(&r);

    // The rest of the quorum acks the broadcast; the orchestrator archives it.
    for agent in ["Questioner", "Reviewer"] {
        let r = w.run(&["--json", "poll", "--as", agent]);
        w.out(r.expect(0), "cli/poll.schema.json#/$defs/checkpoint");
        w.err(&r);
    }
    let r = w.run(&["--json", "-v", "poll", "--as", "Orchestrator"]);
    r.expect(0);
    for l in r.lines() {
        s.check_line("cli/poll.schema.json#/$defs/checkpoint", l, "poll");
    }
    let events = w.err(&r);
    assert!(
        events.iter().any(|e| e["event"] == "archived"
            && e["id"] == one.as_str()
            && e["path"].as_str().is_some_and(|p| Path::new(p).is_file())),
        "the archived event names the record where it is: {}",
        r.stderr
    );

    // A broadcast finish archives as partial, and an ABORT for the orchestrator.
    let two = send(&["info", "second"]);
    send(&["abort", "--no-target"]);
    let r = w.run(&["--json", "poll", "--as", "Orchestrator"]);
    w.out(r.expect(0), "cli/poll.schema.json#/$defs/checkpoint");
    w.err(&r);
    let r = w.run(&["--json", "finish"]);
    let lines = w.out(r.expect(0), "cli/finish.schema.json");
    w.err(&r);
    assert_eq!(lines[0]["id"], two.as_str());
    assert_eq!(lines[0]["status"], "partial");
    samples.insert("finish", lines[0].clone());
    // Nothing for an agent (no broadcast pending now): `wait` times out, prints nothing.
    let r = w.run(&["--json", "wait", "--as", "Librarian", "--timeout", "100ms"]);
    r.expect(1);
    assert!(r.lines().is_empty(), "{}", r.stdout);
    w.err(&r);

    // A broadcast handed to a library consumer that has not acknowledged it yet: its marker.
    let three = send(&["info", "third"]);
    {
        let mb = sigbox::Mailbox::open(&w.root).unwrap();
        let pass = mb.pass("Executor", None).unwrap();
        assert!(pass.delivered.iter().any(|d| d.id == three));
        let mut markers = Vec::new();
        for slot in subdirs(&w.root.join("claimed/Executor")) {
            for f in files_in(&slot) {
                if f.extension().is_some_and(|e| e == "broadcast") {
                    markers.push(f);
                }
            }
        }
        assert!(!markers.is_empty(), "no broadcast marker in a slot");
        for m in &markers {
            let v = read_json(m);
            s.check("broadcast-marker.schema.json", &v, &m.display().to_string());
            samples.insert("marker", v);
        }
        mb.ack("Executor").unwrap();
    }

    // A claim whose consumer died: in flight, then delivered again, marked.
    let again = send(&["steer", "once more", "--target", "Executor"]);
    let slot = w.root.join("claimed/Executor/7");
    std::fs::create_dir_all(&slot).unwrap();
    let name = format!("{again}.json");
    std::fs::rename(inputs.join(&name), slot.join(&name)).unwrap();
    let r = w.run(&["--json", "ls", "--all"]);
    let lines = w.out(r.expect(0), "cli/ls.schema.json");
    assert!(
        lines
            .iter()
            .any(|l| l["kind"] == "in_flight" && l["live"] == false),
        "{}",
        r.stdout
    );
    let r = w.run(&["--json", "doctor"]);
    let lines = w.out(r.expect(1), "cli/doctor.schema.json");
    assert!(lines.iter().any(|l| l["severity"] == "problem"));
    samples.insert("doctor", lines[0].clone());
    w.err(&r);
    let r = w.run(&["--json", "--settle", "10s", "poll", "--as", "Executor"]);
    let lines = w.out(r.expect(0), "cli/poll.schema.json#/$defs/checkpoint");
    assert!(
        lines
            .iter()
            .any(|l| l["id"] == again.as_str() && l["redelivery"] == 1),
        "{}",
        r.stdout
    );

    // `tap`: the child's output passes through; each signal sent is said on stderr.
    let r = w.run(&[
        "--json",
        "tap",
        "--as",
        "Executor",
        "--",
        "sh",
        "-c",
        r#"echo '{"flux:signal": {"verdict": "abort"}}'"#,
    ]);
    r.expect(0);
    assert_eq!(r.stdout, "{\"flux:signal\": {\"verdict\": \"abort\"}}\n");
    let events = w.err(&r);
    assert_eq!(kinds(&events), ["sent"], "{}", r.stderr);
    assert_eq!(events[0]["type"], "ABORT");
    samples.insert("sent", events[0].clone());

    // `hook` under --json: a bad event is said on stderr as an event; no answer.
    let r = w.run_in(
        None,
        &["--json", "hook", "claude", "--as", "Executor"],
        Some("not json"),
    );
    r.expect(0);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    let events = w.err(&r);
    assert_eq!(kinds(&events), ["hook_skipped"], "{}", r.stderr);

    let r = w.run(&["--json", "log"]);
    let lines = w.out(r.expect(0), "cli/log.schema.json");
    w.err(&r);
    for action in ["delivered", "redelivered", "broadcast archived"] {
        assert!(
            lines.iter().any(|l| l["action_taken"] == action),
            "no {action} record in log:\n{}",
            r.stdout
        );
    }
    samples.insert(
        "log",
        lines
            .iter()
            .find(|l| l["status"] == "partial")
            .unwrap()
            .clone(),
    );

    // The files on disk.
    let mut canonical = 0;
    let mut dirs = vec![inputs.clone()];
    dirs.extend(subdirs(&w.root.join("buffered")));
    for dir in dirs {
        for f in files_in(&dir) {
            let v = body_of(&f);
            let what = f.display().to_string();
            s.check("signal.schema.json", &v, &what);
            let stem = f
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .trim_end_matches(".json");
            if v["id"] == stem {
                canonical += 1;
                s.check("signal.schema.json#/$defs/canonical", &v, &what);
                samples.insert("canonical", v);
            }
        }
    }
    assert!(canonical > 0, "no canonical signal left in inputs/");
    let mut actions = BTreeSet::new();
    for f in files_in(&w.root.join("processed")) {
        let v = body_of(&f);
        s.check("processed-record.schema.json", &v, &f.display().to_string());
        if let Some(a) = v["handling_metadata"]["action_taken"].as_str() {
            actions.insert(a.to_string());
        }
        if v["delivery_status"] == "delivered" {
            samples.insert("record", v);
        }
    }
    assert_eq!(
        actions,
        BTreeSet::from(["broadcast archived", "delivered", "redelivered"].map(String::from))
    );
    let reasons: Vec<PathBuf> = files_in(&w.root.join("rejected"))
        .into_iter()
        .filter(|f| f.to_string_lossy().ends_with(".reason.json"))
        .collect();
    assert_eq!(reasons.len(), 2, "broken.yaml and bad.json quarantined");
    for f in reasons {
        let v = read_json(&f);
        s.check("reason.schema.json", &v, &f.display().to_string());
        samples.insert("reason", v);
    }
    let mut acks = 0;
    for dir in subdirs(&w.root.join("acks")) {
        for f in files_in(&dir) {
            acks += 1;
            let v = read_json(&f);
            s.check("ack.schema.json", &v, &f.display().to_string());
            samples.insert("ack", v);
        }
    }
    assert!(acks >= 5, "the quorum's acks of the first broadcast");

    // `gc`, then clearing rejected/.
    let r = w.run(&["--json", "gc"]);
    w.out(r.expect(0), "cli/gc.schema.json");
    w.err(&r);
    let r = w.run(&["--json", "gc", "--rejected", "--older-than", "0s"]);
    let lines = w.out(r.expect(0), "cli/gc.schema.json");
    assert_eq!(lines[0]["rejected"], 2);
    samples.insert("gc", lines[0].clone());

    // A record `log` cannot read: said on stderr, then the error.
    std::fs::write(w.root.join("processed/garbage.json"), "{not json").unwrap();
    let r = w.run(&["--json", "log"]);
    w.out(r.expect(2), "cli/log.schema.json");
    let events = w.err(&r);
    assert_eq!(kinds(&events), ["unreadable"], "{}", r.stderr);
    assert!(r.err_lines().last().unwrap().contains("\"error\""));

    // Errors: a refused argument, a root that is not a mailbox (the error names it), a usage
    // error.
    for (args, path) in [
        (vec!["--json", "send", "bogus"], false),
        (vec!["--json", "--root", "nowhere", "ls"], true),
        (vec!["--json", "poll"], false),
    ] {
        let r = w.run(&args);
        r.expect(2);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
        assert_eq!(r.err_lines().len(), 1, "{}", r.stderr);
        w.err(&r);
        let v: Value = serde_json::from_str(r.err_lines()[0]).unwrap();
        assert_eq!(v["path"].is_string(), path, "{v}");
        samples.insert("error", v);
    }

    // The demo: its own mailbox, each delivery with the agent.
    let r = w.run(&["--json", "demo"]);
    let lines = w.out(r.expect(0), "cli/poll.schema.json#/$defs/demo");
    w.err(&r);
    samples.insert("demo", lines[0].clone());
    samples
}

/// What waits here for another host, as a bridge that stopped leaves a root: a signal pending
/// for an agent of another host, and one in `bridge/outbox/`, both listed by `ls` with where
/// they wait and why (spec/bridge.md §7).
fn outbound(w: &World, samples: &mut Samples) {
    let root = w.path("bridged");
    let r = root.to_str().unwrap();
    w.run(&["--root", r, "init"]).expect(0);
    let send = |target: &str| -> String {
        let run = w.run(&[
            "--json", "--root", r, "send", "steer", "go", "--target", target,
        ]);
        w.out(run.expect(0), "cli/send.schema.json")[0]["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (taken, left, local) = (send("Remote"), send("Remote"), send("Local"));
    let bridge = root.join("bridge");
    std::fs::create_dir_all(bridge.join("hold")).unwrap();
    std::fs::create_dir_all(bridge.join("outbox")).unwrap();
    std::fs::write(
        bridge.join("state.json"),
        r#"{"host": "hostA", "nats": "nats://127.0.0.1:1", "running": false, "here": ["Local"]}"#,
    )
    .unwrap();
    std::fs::write(
        bridge.join("hold/Remote"),
        r#"{"why": "an agent of another host", "host": "hostB"}"#,
    )
    .unwrap();
    std::fs::rename(
        root.join(format!("inputs/{taken}.json")),
        bridge.join(format!("outbox/{taken}.json")),
    )
    .unwrap();
    let run = w.run(&["--json", "--root", r, "ls"]);
    let lines = w.out(run.expect(0), "cli/ls.schema.json");
    w.err(&run);
    let by_id = |id: &str| {
        lines
            .iter()
            .find(|l| l["id"] == id)
            .unwrap_or_else(|| panic!("{id} not listed:\n{}", run.stdout))
            .clone()
    };
    let out = by_id(&taken);
    assert_eq!(out["kind"], "outbound", "{}", run.stdout);
    assert_eq!(out["host"], "hostB", "{}", run.stdout);
    assert_eq!(out["agent"], "Remote", "{}", run.stdout);
    assert!(
        out["reason"].as_str().unwrap().contains("no bridge runs"),
        "{}",
        run.stdout
    );
    let pending = by_id(&left);
    assert_eq!(pending["kind"], "pending", "{}", run.stdout);
    assert_eq!(pending["outbound"]["host"], "hostB", "{}", run.stdout);
    assert!(
        pending["outbound"]["reason"]
            .as_str()
            .unwrap()
            .contains("waiting to be exported: no bridge runs"),
        "{}",
        run.stdout
    );
    assert_eq!(by_id(&local)["outbound"], Value::Null, "{}", run.stdout);
    samples.insert("ls-outbound", out);
    samples.insert("ls-pending-outbound", pending);
    // The same, for people.
    let run = w.run(&["--root", r, "ls"]);
    let text = &run.expect(0).stdout;
    assert!(
        text.lines().any(|l| l.contains(&taken)
            && l.contains("taken for export into bridge/outbox/")
            && l.contains("host hostB")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(&left) && l.contains("waiting to be exported")),
        "{text}"
    );
}

fn goblin(w: &World) {
    let s = &w.s;
    let wt = w.path("worktree");
    std::fs::create_dir_all(&wt).unwrap();
    let wts = wt.to_str().unwrap();
    let signal = |name: &str, body: Option<&str>| {
        let mut args = vec!["--json", "goblin", "signal", name, "--worktree", wts];
        args.extend(body);
        let r = w.run(&args);
        let v = w.out(r.expect(0), "cli/goblin-signal.schema.json");
        w.err(&r);
        assert_eq!(v[0]["signal"], name);
    };
    signal(
        "review-approved",
        Some(r#"{"critical_issues": 0, "auto_fixes": 2}"#),
    );
    signal("scope-complete", Some(r#"{"scope_result_hash": "abc"}"#));
    signal("test-passed", None);
    std::thread::sleep(Duration::from_millis(20));
    signal(
        "review-changes-requested",
        Some(
            r#"{"issues": [{"type": "critical", "category": "tests", "file": "a.rs", "line": 4, "fixed": false, "description": "d"}], "summary": "s", "mine": true}"#,
        ),
    );
    // Their bodies, by name (test-passed is empty: a valid signal without a body).
    let dir = wt.join(".goblin");
    let mut bodies = 0;
    for f in files_in(&dir) {
        let name = f.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&f).unwrap();
        if text.trim().is_empty() {
            continue;
        }
        bodies += 1;
        let v: Value = serde_json::from_str(&text).unwrap();
        s.check(
            &format!("goblin-signal.schema.json#/$defs/{name}"),
            &v,
            &f.display().to_string(),
        );
        s.check("goblin-signal.schema.json", &v, &f.display().to_string());
    }
    assert_eq!(bodies, 3);

    let r = w.run(&["--json", "goblin", "status", "--worktree", wts]);
    let v = w.out(r.expect(0), "cli/goblin-status.schema.json");
    let states: BTreeSet<&str> = v[0]["signals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert!(states.contains("ready"), "{}", r.stdout);

    // REVIEW with both verdicts (the later wins), a signal for another stage (unexpected, then
    // stale), an empty one.
    let r = w.run(&[
        "goblin",
        "watch",
        "--worktree",
        wts,
        "--stage",
        "REVIEW",
        "--once",
        "--settle",
        "0",
    ]);
    let events = w.out(r.expect(0), "cli/goblin-watch.schema.json");
    w.err(&r);
    let seen: BTreeSet<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        seen,
        BTreeSet::from(["unexpected", "conflict", "stale", "transition"]),
        "{}",
        r.stdout
    );
    let state = dir.join(".sigbox-state.json");
    s.check(
        "goblin-state.schema.json",
        &read_json(&state),
        "the Goblin state",
    );

    std::fs::write(dir.join("test-failed"), "{bad").unwrap();
    let written = std::time::Instant::now();
    let r = w.run(&[
        "goblin",
        "watch",
        "--worktree",
        wts,
        "--timeout",
        "300ms",
        "--settle",
        "0",
    ]);
    let events = w.out(r.expect(1), "cli/goblin-watch.schema.json");
    assert_eq!(events[0]["event"], "invalid", "{}", r.stdout);
    // `status` reads with the default settle window (1 s): then the file is invalid.
    std::thread::sleep(Duration::from_millis(1200).saturating_sub(written.elapsed()));
    let r = w.run(&["--json", "goblin", "status", "--worktree", wts]);
    let v = w.out(r.expect(0), "cli/goblin-status.schema.json");
    assert_eq!(v[0]["signals"][0]["state"], "invalid", "{}", r.stdout);

    let r = w.run(&["--json", "goblin", "clean", "--worktree", wts]);
    let v = w.out(r.expect(0), "cli/goblin-clean.schema.json");
    w.err(&r);
    assert!(v[0]["removed"].as_u64().unwrap() > 0);
}

fn mux(w: &World) {
    let s = &w.s;
    let p = w.path("project");
    std::fs::create_dir_all(p.join("tmp/mux/s1")).unwrap();
    std::fs::write(p.join("impl.md"), "hello\n").unwrap();
    std::fs::write(p.join("tmp/mux/s1/.trace"), "trace-1\n").unwrap();
    let mux = |args: &[&str], code: i32, schema: &str| -> Vec<Value> {
        let r = w.run_in(Some(&p), args, None);
        let v = w.out(r.expect(code), schema);
        // `mux` warns of malformed and misplaced files on stderr in upstream's words, as text
        // whatever --json says (`WARNING: ...`); anything else there is checked.
        let rest: Vec<&str> = r
            .err_lines()
            .into_iter()
            .filter(|l| !l.starts_with("WARNING: "))
            .collect();
        w.err(&Run {
            stderr: rest.join("\n"),
            ..r
        });
        v
    };
    let signals = [
        vec![
            "--json",
            "mux",
            "signal",
            "tmp/mux/s1/implement",
            "--status",
            "success",
            "--path",
            "impl.md",
        ],
        vec![
            "--json",
            "mux",
            "signal",
            "tmp/mux/s1/review",
            "--status",
            "fail",
            "--error",
            "tests failing",
            "--format",
            "json",
            "--phase-num",
            "2",
            "--duration-seconds",
            "30",
            "--artifact",
            "a.md",
            "--grade",
            "FAIL",
        ],
        vec![
            "--json",
            "mux",
            "signal",
            "tmp/mux/s1/.signals/plan",
            "--status",
            "success",
            "--grade",
            "WARN",
            "--version",
            "2",
            "--previous",
            "implement",
            "--format",
            "json",
            "--path",
            "impl.md",
        ],
        vec![
            "--json",
            "mux",
            "signal",
            "tmp/mux/s1/test",
            "--status",
            "fail",
            "--format",
            "kv",
        ],
    ];
    for args in &signals {
        mux(args, 0, "cli/mux-signal.schema.json");
    }
    let dir = p.join("tmp/mux/s1/.signals");
    let files = files_in(&dir);
    assert_eq!(files.len(), 4);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let v = if text.trim_start().starts_with('{') {
            serde_json::from_str(&text).unwrap()
        } else {
            mux_kv(&text)
        };
        s.check("mux-signal.schema.json", &v, &f.display().to_string());
    }
    let v = mux(
        &["mux", "check", "tmp/mux/s1", "--expected", "4"],
        1,
        "cli/mux-check.schema.json",
    );
    assert_eq!(v[0]["status"], "partial");
    let v = mux(
        &[
            "mux",
            "check",
            "tmp/mux/s1",
            "--expected",
            "4",
            "--require-pass",
        ],
        1,
        "cli/mux-check.schema.json",
    );
    assert!(v[0]["not_passed"].is_array());
    let v = mux(
        &[
            "mux",
            "check",
            "tmp/mux/s1",
            "--expected",
            "9",
            "--timeout",
            "200ms",
        ],
        1,
        "cli/mux-check.schema.json",
    );
    assert_eq!(v[0]["status"], "timeout");
    std::fs::write(dir.join("bad.done"), "size: lots\n").unwrap();
    let v = mux(
        &["--json", "mux", "verify", "tmp/mux/s1"],
        0,
        "cli/mux-verify.schema.json",
    );
    assert_eq!(v[0]["malformed"].as_array().unwrap().len(), 1);
    // A session that does not exist: upstream's zeros and status, in the same schema.
    let v = mux(
        &["--json", "mux", "verify", "tmp/mux/none"],
        0,
        "cli/mux-verify.schema.json",
    );
    assert_eq!(v[0]["completed"], 0);
    let r = w.run_in(
        Some(&p),
        &["--json", "mux", "verify", "/tmp/mux/none"],
        None,
    );
    r.expect(2);
    w.err(&r);
}

fn hooks(w: &World) -> Value {
    let project = w.path("agent-project");
    std::fs::create_dir_all(&project).unwrap();
    let pr = project.to_str().unwrap();
    let hooks = |args: &[&str]| -> Value {
        let mut a = vec!["--json", "hooks"];
        a.extend_from_slice(args);
        a.extend(["--project", pr]);
        let r = w.run(&a);
        let v = w.out(r.expect(0), "cli/hooks.schema.json");
        w.err(&r);
        v[0].clone()
    };
    let dry = hooks(&["install", "claude", "--as", "Executor", "--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    let first = hooks(&["install", "claude", "--as", "Executor"]);
    assert_eq!(first["changed"], true);
    assert_eq!(
        hooks(&["install", "claude", "--as", "Executor"])["changed"],
        false
    );
    hooks(&[
        "install", "copilot", "--as", "Executor", "--state", "PLANNING",
    ]);
    assert_eq!(hooks(&["uninstall", "claude"])["changed"], true);
    first
}

fn streams(w: &World) {
    let s = &w.s;
    let stream = w.path("stream.log");
    std::fs::write(
        &stream,
        concat!(
            "hello\n",
            "{\"flux:signal\": {\"verdict\": \"proceed\", \"summary\": \"ok\", \"cost_usd\": 0.5, \"tokens_in\": 10.7, \"tokens_out\": 3}}\n",
            "{\"flux:signal\": {\"verdict\": \"hold\", \"reason\": \"needs_human\", \"meta\": {\"question\": \"why?\"}}}\n",
            "{\"flux:signal\": {\"verdict\": \"maybe\"}}\n",
            "```pilot-signal\n",
            "{\"type\": \"status\", \"phase\": \"IMPL\", \"progress\": 140, \"message\": \"m\"}\n",
            "```\n",
            "```pilot-signal\n",
            "{\"type\": \"exit\", \"exit_signal\": true, \"success\": false}\n",
            "```\n",
            "```pilot-signal\n",
            "not json\n",
            "```\n",
        ),
    )
    .unwrap();
    let st = stream.to_str().unwrap();
    let r = w.run(&["flux", "parse", st]);
    let v = w.out(r.expect(1), "cli/flux-parse.schema.json");
    assert_eq!(v.len(), 3);
    assert!(v[2]["error"].is_string());
    let r = w.run_in(None, &["--json", "flux", "parse"], Some("no signal here\n"));
    r.expect(0);
    assert!(r.stdout.is_empty());

    // Result documents: the schema and sigbox agree on which are valid.
    let docs = [
        (
            true,
            json!({"verdict": "pass", "summary": "done", "comment": "c", "blockers": [{"title": "t"}],
                   "artifacts": ["a.md"], "meta": {"model": "m", "input_tokens": 3, "output_tokens": 4, "x": 1},
                   "extra": 1}),
        ),
        (
            true,
            json!({"verdict": "blocked", "summary": "waiting", "blockers": [{"title": "t", "description": "d"}]}),
        ),
        (true, json!({"verdict": "fail", "summary": "no"})),
        (false, json!({"verdict": "maybe", "summary": " "})),
        (
            false,
            json!({"verdict": "pass", "summary": "s", "meta": {"input_tokens": -1}}),
        ),
        (
            false,
            json!({"verdict": "pass", "summary": "s", "comment": 5}),
        ),
        (false, json!([1])),
    ];
    for (i, (valid, doc)) in docs.iter().enumerate() {
        let f = w.path(&format!("result-{i}.json"));
        std::fs::write(&f, doc.to_string()).unwrap();
        if *valid {
            s.check(
                "flux-result.schema.json",
                &read_json(&f),
                &f.display().to_string(),
            );
        } else {
            s.reject("flux-result.schema.json", doc, "sigbox finds it invalid");
        }
        let r = w.run(&["flux", "result", f.to_str().unwrap()]);
        let v = w.out(
            r.expect(if *valid { 0 } else { 1 }),
            "cli/flux-result.schema.json",
        );
        assert_eq!(v[0]["valid"], *valid, "{doc}");
    }
    let r = w.run(&["--json", "flux", "result", "no-such-file.json"]);
    r.expect(2);
    w.err(&r);

    let r = w.run(&["--json", "pilot", "parse", st]);
    let v = w.out(r.expect(0), "cli/pilot-parse.schema.json");
    assert_eq!(v[0]["warnings"], 1);
    let r = w.run_in(None, &["--json", "pilot", "parse", "-"], Some("nothing\n"));
    let v = w.out(r.expect(0), "cli/pilot-parse.schema.json");
    assert_eq!(v[0]["progress"], -1);
}

/// Each schema family refuses a wrong shape: a good instance (a real line or file kept above,
/// or one written here and accepted) with one thing changed.
fn negatives(w: &World, samples: &Samples) {
    let s = &w.s;
    let real = |key: &str| -> Value {
        samples
            .get(key)
            .unwrap_or_else(|| panic!("no sample {key}"))
            .clone()
    };
    // `good` is accepted; `good` changed by `change` is refused.
    let contrast = |schema: &str, good: Value, change: &dyn Fn(&mut Value), why: &str| {
        if !s.validator(schema).is_valid(&good) {
            s.failures.borrow_mut().push(format!(
                "{schema} refuses the good instance of a negative check ({why}):\n    {good}"
            ));
        }
        let mut bad = good;
        change(&mut bad);
        s.reject(schema, &bad, why);
    };
    let set = |key: &'static str, value: Value| move |v: &mut Value| v[key] = value.clone();
    let remove = |key: &'static str| {
        move |v: &mut Value| {
            v.as_object_mut().unwrap().remove(key);
        }
    };

    let utc = "common.schema.json#/$defs/utc-micros";
    let at = json!("2026-02-08T14:30:04.123456Z");
    contrast(
        utc,
        at.clone(),
        &|v| *v = json!("2026-02-08T14:30:04.123456+07:00"),
        "not UTC",
    );
    contrast(
        utc,
        at,
        &|v| *v = json!("2026-02-30T14:30:04.123456Z"),
        "no such day",
    );
    let agent = "common.schema.json#/$defs/agent";
    contrast(
        agent,
        json!("Executor"),
        &|v| *v = json!("All"),
        "ALL is reserved",
    );

    let body = json!({"type": "info", "target": "executor", "iteration": 3, "mine": [1]});
    contrast(
        "signal.schema.json",
        body.clone(),
        &remove("type"),
        "no type",
    );
    contrast(
        "signal.schema.json",
        body.clone(),
        &set("target", json!("../x")),
        "a target that escapes",
    );
    contrast(
        "signal.schema.json",
        body.clone(),
        &set("iteration", json!("3")),
        "iteration as text",
    );
    contrast(
        "signal.schema.json",
        body,
        &set("created_at", json!(1_700_000_000)),
        "created_at as a number",
    );
    contrast(
        "signal.schema.json#/$defs/canonical",
        real("canonical"),
        &set("type", json!("steer")),
        "lower-case type",
    );
    contrast(
        "processed-record.schema.json",
        real("record"),
        &|v| v["handling_metadata"]["action_taken"] = json!("eaten"),
        "no such action",
    );
    contrast(
        "processed-record.schema.json",
        real("record"),
        &set("unacked_agents", json!(["Planner"])),
        "delivered with agents that did not ack",
    );
    contrast(
        "reason.schema.json",
        real("reason"),
        &remove("reason"),
        "no reason",
    );
    contrast(
        "ack.schema.json",
        real("ack"),
        &set("by", json!("me")),
        "an extra key",
    );
    contrast(
        "broadcast-marker.schema.json",
        real("marker"),
        &set("redelivery", json!(-1)),
        "a negative count",
    );

    contrast(
        "goblin-signal.schema.json#/$defs/build-complete",
        json!({"commits": 5, "completed_at": "2026-02-08T14:30:04Z", "mine": "x"}),
        &set("commits", json!("five")),
        "a count as text",
    );
    contrast(
        "goblin-signal.schema.json#/$defs/review-changes-requested",
        json!({"issues": [{"line": 45, "fixed": false}]}),
        &|v| v["issues"][0]["line"] = json!("45"),
        "an issue's line as text",
    );
    contrast(
        "goblin-signal.schema.json",
        json!({"completed_at": "2026-02-08T14:30:04+07:00"}),
        &set("completed_at", json!("yesterday")),
        "not an instant",
    );
    contrast(
        "goblin-state.schema.json",
        json!({"stage": "BUILD", "retries": 0, "updated_at": "2026-02-08T14:30:04Z",
               "pending": {"signal": "scope-complete", "from": "SCOPE", "payload": null}}),
        &set("stage", json!("LUNCH")),
        "no such stage",
    );
    contrast(
        "mux-signal.schema.json",
        json!({"path": "impl.md", "size": "6", "status": "success", "created_at": "2026-02-08T14:30:04Z"}),
        &set("status", json!("done")),
        "no such status",
    );
    contrast(
        "mux-signal.schema.json",
        json!({"$schema": "signal-v1.json", "phase": "p", "status": "completed",
               "timestamp": "2026-02-08T14:30:04Z", "artifacts": [], "size": 6}),
        &set("size", json!("6")),
        "a size as text in the JSON form",
    );
    contrast(
        "flux-result.schema.json",
        json!({"verdict": "pass", "summary": "s"}),
        &remove("summary"),
        "no summary",
    );

    contrast(
        "cli/init.schema.json",
        real("init"),
        &set("initialized", json!(false)),
        "not initialized",
    );
    contrast(
        "cli/send.schema.json",
        json!({"id": real("canonical")["id"]}),
        &set("id", json!("news@0123456789abcdef")),
        "not a canonical id",
    );
    contrast(
        "cli/poll.schema.json",
        real("poll"),
        &set("type", json!("STOP")),
        "STOP is delivered as ABORT",
    );
    contrast(
        "cli/poll.schema.json#/$defs/demo",
        real("demo"),
        &remove("agent"),
        "a demo line names its agent",
    );
    contrast(
        "cli/poll.schema.json#/$defs/checkpoint",
        real("poll"),
        &set("agent", json!("Executor")),
        "a poll line has no agent",
    );
    contrast(
        "cli/poll.schema.json#/$defs/checkpoint",
        real("poll"),
        &set("path", json!("/r/claimed/Executor/0/hand.json")),
        "a claim slot, gone once the line is read",
    );
    contrast(
        "cli/poll.schema.json#/$defs/checkpoint",
        real("poll"),
        &set("created_at", json!("2026-02-08 14:30:04+07:00")),
        "created_at not RFC 3339 as sigbox writes it",
    );
    contrast(
        "cli/stderr-event.schema.json",
        real("settling"),
        &remove("path"),
        "a settling event that does not name its file",
    );
    contrast(
        "cli/stderr-event.schema.json",
        json!({"timestamp": "2026-02-08T14:30:04.123456Z", "level": "INFO", "message": "quarantined", "file": "/r/rejected/b.json"}),
        &set("file", json!("\"/r/rejected/b.json\"")),
        "a Debug-quoted path in a log record",
    );
    contrast(
        "cli/log.schema.json",
        real("log"),
        &set("path", json!("/r/claimed/Executor/0/x.json")),
        "a record outside processed/",
    );
    contrast(
        "cli/ls.schema.json",
        real("ls"),
        &set("kind", json!("lost")),
        "an unknown kind",
    );
    contrast(
        "cli/ls.schema.json",
        real("ls"),
        &set("kind", json!("buffered")),
        "buffered for nobody",
    );
    contrast(
        "cli/ls.schema.json",
        real("ls"),
        &remove("outbound"),
        "a pending signal says whether it waits for another host",
    );
    contrast(
        "cli/ls.schema.json",
        real("ls-outbound"),
        &set("host", json!("host B\u{1b}")),
        "a host name the bridge never makes",
    );
    contrast(
        "cli/ls.schema.json",
        real("ls-outbound"),
        &set("path", json!("/r/inputs/x.json")),
        "an outbound signal waits in bridge/outbox/",
    );
    contrast(
        "cli/ls.schema.json",
        real("ls-pending-outbound"),
        &|v| v["outbound"]["reason"] = json!(""),
        "an outbound signal says why it waits",
    );
    contrast(
        "cli/log.schema.json",
        real("log"),
        &set("delivery_status", json!("partial")),
        "an extra key",
    );
    contrast(
        "cli/finish.schema.json",
        real("finish"),
        &set("status", json!("delivered")),
        "delivered with agents that did not ack",
    );
    contrast(
        "cli/gc.schema.json",
        real("gc"),
        &set("removed", json!("2")),
        "a count as text",
    );
    contrast(
        "cli/doctor.schema.json",
        real("doctor"),
        &set("severity", json!("warning")),
        "no such severity",
    );
    contrast(
        "cli/goblin-signal.schema.json",
        json!({"signal": "test-passed", "path": "x"}),
        &set("signal", json!("done")),
        "no such signal",
    );
    contrast(
        "cli/goblin-status.schema.json",
        json!({"stage": "BUILD", "retries": 0, "signals": [
            {"signal": "build-complete", "state": "ready", "detail": {"commits": 1}, "path": "x"}]}),
        &|v| v["signals"][0]["detail"] = Value::Null,
        "ready without its body",
    );
    contrast(
        "cli/goblin-watch.schema.json",
        json!({"event": "invalid", "signal": "build-complete", "stage": "BUILD", "reason": "r",
               "at": "2026-02-08T14:30:04.123Z"}),
        &set("event", json!("exploded")),
        "an unknown event",
    );
    contrast(
        "cli/goblin-clean.schema.json",
        json!({"removed": 0, "paths": []}),
        &set("removed", json!(-1)),
        "a negative count",
    );
    contrast(
        "cli/mux-signal.schema.json",
        json!({"path": "s/.signals/x.done", "status": "success"}),
        &set("path", json!("s/.signals/x.fail")),
        "a success in a .fail",
    );
    contrast(
        "cli/mux-check.schema.json",
        json!({"complete": 1, "failed": 0, "expected": 1, "status": "complete",
               "checked_at": "2026-02-08T14:30:04Z"}),
        &set("status", json!("done")),
        "no such status",
    );
    contrast(
        "cli/mux-verify.schema.json",
        json!({"completed": 0, "failed": 0, "total_size": 0, "paths": [], "sizes": [],
               "failures": [], "malformed": []}),
        &remove("malformed"),
        "no malformed",
    );
    contrast(
        "cli/flux-parse.schema.json",
        json!({"line": 1, "verdict": "proceed", "reason": null, "summary": null, "meta": null,
               "cost_usd": null, "tokens_in": null, "tokens_out": null}),
        &set("verdict", json!("maybe")),
        "no such verdict",
    );
    let valid = json!({"valid": true, "errors": [], "verdict": "fail", "summary": "s",
                       "routing": {"route": "onFail", "gates": "evaluated"},
                       "comment": null, "blockers": null, "artifacts": null, "meta": null});
    contrast(
        "cli/flux-result.schema.json",
        valid.clone(),
        &set("routing", Value::Null),
        "a valid document routed nowhere",
    );
    contrast(
        "cli/flux-result.schema.json",
        valid,
        &set("routing", json!({"route": "onPass", "gates": "evaluated"})),
        "a failure routed as a pass",
    );
    contrast(
        "cli/pilot-parse.schema.json",
        json!({"signals": 1, "progress": 100, "phase": "", "phase_progress": null,
               "exit": false, "success": null, "warnings": 0, "warning_details": []}),
        &set("progress", json!(101)),
        "progress over 100",
    );
    contrast(
        "cli/hooks.schema.json",
        real("hooks"),
        &set("action", json!("uninstall")),
        "an uninstall that added entries",
    );
    contrast(
        "cli/error.schema.json",
        real("error"),
        &remove("error"),
        "no error",
    );
    contrast(
        "cli/error.schema.json",
        real("error"),
        &set("exit", json!(1)),
        "errors exit 2",
    );
    contrast(
        "cli/stderr-event.schema.json",
        real("sent"),
        &set("event", json!("exploded")),
        "an unknown event",
    );
}

/// The schemas themselves: each is a valid draft 2020-12 schema with the `$id` of its place,
/// compiles with every `$ref` resolved, and is listed in the README.
#[test]
fn every_schema_is_well_formed_and_listed() {
    let files = schema_files();
    assert!(files.len() > 20, "{:?}", files.keys());
    let s = Schemas::load();
    let readme = std::fs::read_to_string(schemas_dir().join("README.md")).unwrap();
    for (rel, schema) in &files {
        assert_eq!(
            schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{rel}"
        );
        assert_eq!(schema["$id"], format!("{BASE}{rel}"), "{rel}");
        if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
            panic!("spec/schemas/{rel} is not a valid schema: {e}");
        }
        s.validator(rel);
        assert!(
            readme.contains(&format!("`{rel}`")),
            "spec/schemas/README.md does not describe {rel}"
        );
    }
}
