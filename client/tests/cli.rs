//! Guards the `sigbox` command line end to end, through the real binary: every command, its
//! exit codes, its `--json` output, and its errors.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    /// `SIGBOX_SETTLE` for every command, when set.
    settle: Option<&'static str>,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("signals");
        let env = Env {
            _dir: dir,
            root,
            settle: None,
        };
        env.ok(&["init"]);
        env
    }

    /// This mailbox, its commands run with `SIGBOX_SETTLE=settle`.
    fn with_settle(self, settle: &'static str) -> Env {
        Env {
            settle: Some(settle),
            ..self
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env("SIGBOX_ROOT", &self.root)
            .env_remove("RUST_LOG")
            .env_remove("SIGBOX_SETTLE")
            .args(args);
        if let Some(s) = self.settle {
            c.env("SIGBOX_SETTLE", s);
        }
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
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

    fn json_lines(&self, args: &[&str]) -> Vec<Value> {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        self.ok(&a)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect()
    }

    fn inputs(&self) -> PathBuf {
        self.root.join("inputs")
    }
}

fn stderr_line(out: &Output) -> String {
    let s = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(s.lines().count(), 1, "exactly one line on stderr: {s:?}");
    s
}

#[test]
fn init_is_idempotent_and_creates_the_layout() {
    let env = Env::new();
    env.ok(&["init"]);
    for d in sigbox::LAYOUT {
        assert!(env.root.join(d).is_dir(), "{d}");
    }
}

#[test]
fn send_then_poll_delivers_once_with_json_fields() {
    let env = Env::new();
    let id = env.ok(&[
        "send",
        "steer",
        "use the v2 API",
        "--target",
        "Executor",
        "--from",
        "alice",
        "--iteration",
        "3",
    ]);
    let id = id.trim();
    assert!(
        id.starts_with("signal.") && id.ends_with(".STEER.Executor"),
        "{id}"
    );
    // Another agent's poll: nothing, exit 0, no output.
    assert_eq!(env.ok(&["poll", "--as", "Planner"]), "");
    let got = env.json_lines(&["poll", "--as", "Executor"]);
    assert_eq!(got.len(), 1);
    let s = &got[0];
    assert_eq!(s["id"], id);
    assert_eq!(s["type"], "STEER");
    assert_eq!(s["target"], "Executor");
    assert_eq!(s["message"], "use the v2 API");
    assert_eq!(s["from"], "alice");
    assert_eq!(s["iteration"], 3);
    assert!(s["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        env.ok(&["poll", "--as", "Executor"]),
        "",
        "never delivered twice"
    );
}

#[test]
fn type_is_case_insensitive_stop_is_abort_and_target_defaults_to_all() {
    let env = Env::new();
    env.ok(&["send", "Stop", "halt", "--target", "Executor"]);
    env.ok(&["send", "info", "everyone"]);
    let got = env.json_lines(&["poll", "--as", "Executor"]);
    assert_eq!(got[0]["type"], "ABORT");
    assert_eq!(got.len(), 1, "the pass stops after ABORT");
    let got = env.json_lines(&["poll", "--as", "Executor"]);
    assert_eq!(got[0]["target"], "ALL");
    assert_eq!(got[0]["message"], "everyone");
}

#[test]
fn send_reads_the_message_from_stdin() {
    let env = Env::new();
    let mut child = env
        .cmd(&["send", "info", "-", "--target", "Reviewer"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"line one\nline two\n")
        .unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    let got = env.json_lines(&["poll", "--as", "Reviewer"]);
    assert_eq!(got[0]["message"], "line one\nline two");
}

#[test]
fn orchestrator_state_gates_approve() {
    let env = Env::new();
    env.ok(&["send", "approve", "ok", "--target", "Orchestrator"]);
    assert_eq!(
        env.ok(&["poll", "--as", "Orchestrator", "--state", "PLANNING"]),
        ""
    );
    let got = env.json_lines(&[
        "poll",
        "--as",
        "Orchestrator",
        "--state",
        "KNOWLEDGE_APPROVAL",
    ]);
    assert_eq!(got[0]["type"], "APPROVE");
}

#[test]
fn wait_wakes_when_a_signal_is_dropped_while_it_blocks() {
    let env = Env::new();
    let child = env
        .cmd(&["--json", "wait", "--as", "Executor", "--timeout", "30s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Blocked: it watches inputs/, and what is dropped there from now on must wake it (a
    // signal sent before would be found by its first pass, waking or not).
    common::wait_until("the wait watches inputs/", Duration::from_secs(30), || {
        common::watches(child.id(), &env.root.join("inputs"))
    });
    env.ok(&["send", "steer", "now", "--target", "Executor"]);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["message"], "now");
}

#[test]
fn wait_polling_fallback_without_events() {
    let env = Env::new();
    let mut child = env
        .cmd(&[
            "--json",
            "-vv",
            "wait",
            "--as",
            "Executor",
            "--timeout",
            "30s",
            "--poll",
            "100ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = common::Aside::new(child.stderr.take().unwrap());
    // Sent once its first pass found nothing: a later pass must find it.
    common::wait_until("the wait's first pass", Duration::from_secs(30), || {
        stderr.now().contains("pass done")
    });
    env.ok(&["send", "info", "polled", "--target", "Executor"]);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["message"], "polled");
    // Several passes ran: the waiter found it by polling, not by an event.
    let log = stderr.finish();
    assert!(log.matches("pass done").count() >= 2, "{log}");
}

#[test]
fn wait_times_out_with_exit_1() {
    let env = Env::new();
    let out = env.run(&["wait", "--as", "Executor", "--timeout", "200ms"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
}

#[test]
fn a_yaml_file_written_by_hand_in_two_steps_is_delivered_once_complete() {
    let env = Env::new();
    let path = env.inputs().join("steer.yaml");
    std::fs::write(&path, "type: STEER\n").unwrap();
    assert_eq!(
        env.ok(&["poll", "--as", "Orchestrator"]),
        "",
        "half a file is not delivered"
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"target: Executor\nmessage: rename the module\n")
        .unwrap();
    drop(f);
    assert_eq!(env.ok(&["poll", "--as", "Executor"]), "", "still settling");
    // wait wakes up when the settle window ends, without an event.
    let got = env.json_lines(&["wait", "--as", "Executor", "--timeout", "10s"]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["message"], "rename the module");
    // A dropped file's identity: its stem and a key of the file (spec §2.4).
    let id = got[0]["id"].as_str().unwrap();
    assert!(
        id.starts_with("steer@") && id.len() == "steer@".len() + 16,
        "{id}"
    );
    assert_eq!(env.ok(&["poll", "--as", "Executor"]), "");
    assert_eq!(env.ok(&["poll", "--as", "Orchestrator"]), "");
}

#[test]
fn ls_log_finish_show_the_mailbox() {
    let env = Env::new();
    env.ok(&["send", "steer", "p", "--target", "Planner"]);
    env.ok(&["send", "info", "all"]);
    let ls = env.json_lines(&["ls"]);
    assert_eq!(ls.len(), 2);
    assert_eq!(ls[0]["type"], "STEER");
    assert_eq!(ls[1]["target"], "ALL");
    assert!(env.ok(&["ls"]).contains("STEER   Planner"));
    env.ok(&["poll", "--as", "Executor"]);
    env.ok(&["poll", "--as", "Orchestrator"]); // buffers the Planner's signal
    let all = env.json_lines(&["ls", "--all"]);
    assert!(
        all.iter()
            .any(|v| v["kind"] == "buffered" && v["buffered_for"] == "Planner")
    );
    let b = all.iter().find(|v| v["target"] == "ALL").unwrap();
    assert_eq!(
        b["acked_by"],
        serde_json::json!(["Executor", "Orchestrator"])
    );
    let fin = env.json_lines(&["finish"]);
    assert_eq!(fin[0]["status"], "partial");
    assert_eq!(
        fin[0]["unacked"],
        serde_json::json!(["Planner", "Questioner", "Reviewer"])
    );
    let log = env.json_lines(&["log"]);
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["action_taken"], "broadcast archived");
    // The same names as `finish` for the same facts.
    assert_eq!(log[0]["status"], "partial");
    assert_eq!(
        log[0]["unacked"],
        serde_json::json!(["Planner", "Questioner", "Reviewer"])
    );
    env.ok(&["poll", "--as", "Planner"]);
    let log = env.json_lines(&["log"]);
    assert_eq!(log.len(), 2);
    assert!(
        log.iter()
            .any(|v| v["handled_by"] == "Planner" && v["action_taken"] == "delivered")
    );
    assert!(env.ok(&["log"]).contains("Planner"));
}

#[test]
fn gc_removes_only_stale_staging_files() {
    let env = Env::new();
    let stale = env.root.join("tmp/999.deadbeef.send.tmp");
    std::fs::write(&stale, "partial").unwrap();
    let v = env.json_lines(&["gc"]);
    assert_eq!(v[0]["removed"], 0, "younger than an hour");
    let v = env.json_lines(&["gc", "--older-than", "0s"]);
    assert_eq!(v[0]["removed"], 1);
    assert!(!stale.exists());
    // A crashed sender's staging file sits beside its destination; another writer's write in
    // progress there is not sigbox's to remove.
    // (A pid over Linux's largest, 2^22: no process has it.)
    let own = env.inputs().join(".4194399.0123456789abcdef.send.tmp");
    let theirs = env.inputs().join(".signal.260208-143000.yaml.tmp");
    std::fs::write(&own, "partial").unwrap();
    std::fs::write(&theirs, "partial").unwrap();
    let v = env.json_lines(&["gc", "--older-than", "0s"]);
    assert_eq!(v[0]["removed"], 1);
    assert!(!own.exists());
    assert!(theirs.exists(), "another writer's file removed");
}

#[test]
fn doctor_explains_problems() {
    let env = Env::new();
    let out = env.run(&["doctor"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("healthy"));
    std::fs::write(env.inputs().join("broken.yaml"), "type: [\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", env.inputs().join("link.json")).unwrap();
    std::fs::write(env.inputs().join("odd.yaml"), "type: WOBBLE\n").unwrap();
    std::fs::remove_dir(env.root.join("acks")).unwrap();
    let out = env.run(&["--json", "doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let findings: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let text = serde_json::to_string(&findings).unwrap();
    assert!(text.contains("acks") && text.contains("missing"), "{text}");
    // Files just written are still settling; doctor says so instead of guessing.
    assert!(text.contains("waiting for the writer"), "{text}");
    std::thread::sleep(Duration::from_millis(2100));
    let out = env.run(&["--json", "doctor"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("invalid YAML"), "{text}");
    assert!(text.contains("symlink"), "{text}");
    assert!(text.contains("unknown type"), "{text}");
    // After a pass the bad files are quarantined, and doctor lists them with their reasons.
    env.ok(&["init"]);
    env.ok(&["poll", "--as", "Executor"]);
    let out = env.run(&["doctor"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("quarantined: invalid YAML"), "{text}");
    assert!(text.contains("quarantined: a symlink"), "{text}");
    // Quarantine is information, with the count and the command that clears it: a gate on
    // doctor does not fail for ever after one bad drop.
    assert!(text.contains("file(s) quarantined"), "{text}");
    assert!(text.contains("sigbox gc --rejected"), "{text}");
    assert_eq!(out.status.code(), Some(0), "{text}");
    let gc = env.json_lines(&["gc", "--rejected", "--older-than", "0s"]);
    assert_eq!(gc[0]["rejected"], 2, "{gc:?}");
    let out = env.run(&["doctor"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("quarantined"), "{text}");
    assert!(
        env.json_lines(&["ls", "--all"])
            .iter()
            .all(|l| l["kind"] != "rejected")
    );
}

/// A buffer made by hand under a name no agent can have holds signals nobody will ever claim:
/// `doctor` names it, with what to do, instead of "healthy"; moved back, the signal is
/// delivered.
#[test]
fn doctor_names_a_buffer_no_agent_can_claim() {
    let env = Env::new();
    let id = String::from_utf8(
        env.run(&["send", "steer", "x", "--target", "Executor"])
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let file = format!("{id}.json");
    let odd = env.root.join("buffered").join("a b");
    std::fs::create_dir_all(&odd).unwrap();
    std::fs::rename(env.inputs().join(&file), odd.join(&file)).unwrap();
    let out = env.run(&["doctor"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("buffered/a b") && text.contains("no agent can have"),
        "{text}"
    );
    assert!(text.contains("move them back into inputs/"), "{text}");
    std::fs::rename(odd.join(&file), env.inputs().join(&file)).unwrap();
    let out = env.run(&["poll", "--as", "Executor"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&id));
}

/// Signals for other hosts left where a bridge ran and runs no more are a problem doctor names
/// (how many, for which agents and hosts, what to do), not "healthy"; once the way is clear
/// (delivered here), a bridge that ran is information only (spec/bridge.md §7).
#[test]
fn doctor_names_signals_stranded_for_other_hosts() {
    let env = Env::new();
    for target in ["Far", "Far", "Lost", "Near"] {
        env.ok(&["send", "steer", "go", "--target", target]);
    }
    let bridge = env.root.join("bridge");
    std::fs::create_dir_all(bridge.join("hold")).unwrap();
    // As a bridge that was killed leaves it: its last state, a hold for an agent of another
    // host, its lock free.
    std::fs::write(
        bridge.join("state.json"),
        r#"{"host": "a", "nats": "nats://10.0.0.5:4222", "running": true, "connected": true,
            "ready": true, "here": ["Near"], "updated_at": "2026-02-08T14:30:04Z"}"#,
    )
    .unwrap();
    std::fs::write(
        bridge.join("hold/Far"),
        r#"{"why": "an agent of another host", "host": "b"}"#,
    )
    .unwrap();
    let out = env.run(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(!text.contains("healthy"), "{text}");
    assert!(
        text.contains("3 signal(s) for other hosts are stranded here"),
        "{text}"
    );
    assert!(text.contains("2 for Far on host b"), "{text}");
    assert!(text.contains("1 for Lost (no host known here)"), "{text}");
    assert!(
        text.contains("start `sigbox bridge --nats nats://10.0.0.5:4222` on this root"),
        "{text}"
    );
    assert!(!text.contains("for Near"), "{text}");
    // Taken here (the root is a plain mailbox while no bridge runs): nothing is stranded.
    env.ok(&["poll", "--as", "Far"]);
    env.ok(&["poll", "--as", "Lost"]);
    let out = env.run(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("nothing waits here for other hosts"),
        "{text}"
    );
}

#[test]
fn errors_exit_2_with_one_line_naming_the_file() {
    let env = Env::new();
    let out = env.run(&["--root", "/nonexistent/x", "poll", "--as", "Executor"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_line(&out).contains("/nonexistent/x/inputs"));
    let dir_as_root = env.root.join("inputs").join("x");
    std::fs::write(&dir_as_root, "").unwrap();
    let out = env.run(&["--root", dir_as_root.to_str().unwrap(), "init"]);
    let line = stderr_line(&out);
    assert_eq!(
        line.matches("os error").count(),
        1,
        "the OS error once: {line}"
    );

    let out = env.run(&["send", "bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_line(&out).contains("unknown signal type \"bogus\""));
    let out = env.run(&["send", "info", "x", "--target", "../etc"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_line(&out).contains("invalid target \"../etc\""));
    let out = env.run(&["poll", "--as", "../x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_line(&out).contains("invalid agent name"));
    // A name or target of any size is refused in a message of one short line: its start, and
    // how long it is.
    let huge = "E".repeat(100_000);
    for args in [
        vec!["poll", "--as", huge.as_str()],
        vec!["send", "info", "x", "--target", huge.as_str()],
    ] {
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.len() < 1_000,
            "{} bytes of error: {}",
            err.len(),
            &err[..200]
        );
        assert!(err.contains("100000 bytes long"), "{err}");
        assert!(err.contains(&format!("\"{}\"…", &huge[..64])), "{err}");
    }
    let out = env.run(&["wait", "--as", "Executor", "--timeout", "5 parsecs"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_has_an_example_for_every_command_and_completions_work() {
    for cmd in [
        "init",
        "send",
        "poll",
        "wait",
        "ls",
        "log",
        "finish",
        "gc",
        "doctor",
        "completions",
        "demo",
    ] {
        let out = Command::new(BIN).args([cmd, "--help"]).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let example = text
            .split_once("Example")
            .map(|(_, rest)| rest)
            .unwrap_or_else(|| panic!("{cmd} --help has no example:\n{text}"));
        assert!(
            example.contains(&format!(" {cmd}")),
            "{cmd}: example does not use it:\n{text}"
        );
    }
    for cmd in [
        "goblin signal",
        "goblin watch",
        "goblin status",
        "goblin clean",
        "mux signal",
        "mux check",
        "mux verify",
        "flux parse",
        "flux result",
        "pilot parse",
        "tap",
    ] {
        let mut args: Vec<&str> = cmd.split(' ').collect();
        args.push("--help");
        let out = Command::new(BIN).args(&args).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let example = text
            .split_once("Example")
            .map(|(_, rest)| rest)
            .unwrap_or_else(|| panic!("{cmd} --help has no example:\n{text}"));
        assert!(
            example.contains(&format!("sigbox {cmd}")) || example.contains("sigbox --root"),
            "{cmd}: the example does not use it:\n{text}"
        );
    }
    let out = Command::new(BIN)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(String::from_utf8(out.stdout).unwrap().contains("_sigbox"));
}

#[test]
fn demo_runs_on_an_embedded_default() {
    let out = Command::new(BIN).arg("demo").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Planner      <- STEER"), "{text}");
    assert!(text.contains("Orchestrator <- APPROVE"), "{text}");
    assert!(text.contains("nothing twice\n  (nothing)"), "{text}");
}

/// CPU time (ns) a live process has used, from /proc/PID/schedstat.
fn cpu_ns(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
    s.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn a_blocked_wait_does_not_spin() {
    // Not a timing assertion: a spinning waiter burns a whole core (about 1 s of CPU per second
    // here); a sleeping one a few milliseconds at most, however loaded the machine is. With
    // `--poll 0` too: the interval has a floor (10 ms).
    let env = Env::new();
    for extra in [&[][..], &["--poll", "0"][..]] {
        let mut args = vec!["wait", "--as", "Executor", "--timeout", "30s"];
        args.extend_from_slice(extra);
        let mut child = env.cmd(&args).stdout(Stdio::piped()).spawn().unwrap();
        // Measured from once it holds the agent's presence: its start is behind it, and what
        // it spends from there is its wait's (a first pass of a few milliseconds at most).
        let presence = env.root.join("agents/Executor.lock");
        common::wait_until(
            "the wait holds the Executor's presence",
            Duration::from_secs(30),
            || common::holds_lock(child.id(), &presence),
        );
        let before = cpu_ns(child.id());
        std::thread::sleep(Duration::from_secs(1));
        let used = cpu_ns(child.id()) - before;
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            used < 300_000_000,
            "a blocked wait {extra:?} used {used} ns of CPU in one second"
        );
    }
}

fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_shared_mailbox_stays_group_writable_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("team/signals");
    // umask is per process: run the whole session in a shell with the umask most users have.
    let script = format!(
        "set -e; umask 022; S='{BIN}'; R='{r}'
         \"$S\" --root \"$R\" init --shared
         \"$S\" --root \"$R\" send info hello --target Executor
         \"$S\" --root \"$R\" send info all
         \"$S\" --root \"$R\" send steer p --target Planner
         \"$S\" --root \"$R\" poll --as Executor
         \"$S\" --root \"$R\" poll --as Orchestrator",
        r = root.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&root), 0o2770);
    for d in sigbox::LAYOUT {
        assert_eq!(mode(&root.join(d)), 0o2770, "{d}");
    }
    assert_eq!(
        mode(&root.join("buffered/Planner")),
        0o2770,
        "created later, same mode"
    );
    let locks: Vec<_> = std::fs::read_dir(root.join("agents"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        locks.len(),
        2,
        "Executor and Orchestrator held presence: {locks:?}"
    );
    for l in &locks {
        assert_eq!(mode(l), 0o660, "presence lock files too: {}", l.display());
    }
    let check_files = |d: &std::path::Path| {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                assert_eq!(mode(&p), 0o2770, "{}", p.display());
            } else {
                assert_eq!(mode(&p), 0o660, "{}", p.display());
            }
        }
    };
    for d in ["inputs", "processed", "buffered/Planner"] {
        check_files(&root.join(d));
    }
    for e in std::fs::read_dir(root.join("acks")).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(mode(&p), 0o2770);
        check_files(&p);
    }
    assert!(!sigbox_tests_names(&root.join("processed")).is_empty());
}

fn sigbox_tests_names(d: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn sigbox_never_widens_existing_modes() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir(root.join("inputs")).unwrap();
    std::fs::set_permissions(root.join("inputs"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let out = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["init", "--shared"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(mode(&root), 0o700, "an existing root keeps its mode");
    assert_eq!(
        mode(&root.join("inputs")),
        0o750,
        "an existing directory keeps its mode"
    );
    assert_eq!(
        mode(&root.join("processed")),
        0o2770,
        "what init creates is shared"
    );
    let out = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["send", "info", "x"])
        .output()
        .unwrap();
    assert!(out.status.success());
    // Not a shared root (no setgid, no group write): files follow the umask, nothing is widened.
    for e in std::fs::read_dir(root.join("inputs")).unwrap() {
        let m = mode(&e.unwrap().path());
        assert_eq!(m & 0o002, 0, "never world-writable: {m:o}");
    }
}

#[test]
fn an_unreadable_file_is_quarantined_not_fatal() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    let out = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["init"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let good = String::from_utf8(
        Command::new(BIN)
            .arg("--root")
            .arg(&root)
            .args(["send", "steer", "ok", "--target", "Executor"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let secret = root.join("inputs/secret.yaml");
    std::fs::write(&secret, "type: STEER\ntarget: Executor\nmessage: private\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Let another user work in the mailbox (the layout is the shared part, the file is not).
    for d in std::iter::once(dir.path().to_path_buf())
        .chain(std::iter::once(root.clone()))
        .chain(sigbox::LAYOUT.iter().map(|d| root.join(d)))
    {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    std::fs::set_permissions(
        root.join("inputs").join(format!("{}.json", good.trim())),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    // A dropped file is read once it has settled (2 s unchanged; ctime cannot be backdated).
    std::thread::sleep(Duration::from_millis(2100));
    // Root reads everything: run the checkpoint as an unprivileged user when we are root.
    let uid = String::from_utf8(Command::new("id").arg("-u").output().unwrap().stdout).unwrap();
    let mut cmd = if uid.trim() == "0" {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
        c
    } else {
        Command::new(BIN)
    };
    let out = cmd
        .env("SIGBOX_ROOT", &root)
        .args(["--json", "poll", "--as", "Executor", "--state", "X"])
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let delivered: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0]["id"], good.trim());
    // The claimed file is another user's and not writable for this one: it is read without a
    // writable descriptor, the claim stands, and only the handling record is missing.
    let claimed =
        std::fs::read_to_string(root.join("processed").join(format!("{}.json", good.trim())))
            .unwrap();
    assert!(claimed.contains(good.trim()), "{claimed}");
    assert_eq!(
        claimed.contains("handling_metadata"),
        uid.trim() != "0",
        "annotated only when the poller may write the file: {claimed}"
    );
    let reason = std::fs::read_to_string(root.join("rejected/secret.yaml.reason.json")).unwrap();
    assert!(
        reason.contains("cannot open") && reason.contains("ermission denied"),
        "{reason}"
    );
    assert!(
        root.join("rejected/secret.yaml").exists(),
        "kept, never deleted"
    );
}

#[test]
fn a_file_name_that_is_not_utf8_never_stops_ls_or_doctor() {
    use std::os::unix::ffi::OsStrExt;
    let env = Env::new();
    let name = std::ffi::OsStr::from_bytes(b"\xff.json");
    std::fs::write(env.inputs().join(name), b"type: INFO\n").unwrap();
    for args in [&["ls", "--all"][..], &["doctor"][..]] {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = env.run(&a);
        assert_ne!(out.status.code(), Some(101), "{args:?} panicked");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .any(|v| v["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("\u{fffd}.json"))),
            "{args:?}: {text}"
        );
    }
}

#[test]
fn empty_and_torn_signals_under_canonical_names_are_problems_not_pending() {
    let env = Env::new();
    let id = env.ok(&["send", "steer", "kept", "--target", "Executor"]);
    let good = format!("{}.json", id.trim());
    let empty = good
        .replace(".STEER.", ".ABORT.")
        .replacen("signal.2", "signal.1", 1);
    let torn = good
        .replace(".STEER.", ".PAUSE.")
        .replacen("signal.2", "signal.1", 1);
    let torn = torn.replace(&torn[31..63], &"0".repeat(32));
    std::fs::write(env.inputs().join(&empty), b"").unwrap();
    std::fs::write(env.inputs().join(&torn), br#"{"type":"PAU"#).unwrap();
    // Written in place under canonical names that sigbox did not write: they settle first,
    // like any dropped file (spec §2.4), and a pass neither delivers nor quarantines them.
    let out = env.run(&["--json", "doctor"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for name in [&empty, &torn] {
        assert!(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .any(|f| f["path"].as_str().unwrap().ends_with(name.as_str())
                    && f["reason"]
                        .as_str()
                        .unwrap()
                        .contains("waiting for the writer")),
            "{name} settling: {text}"
        );
    }
    assert_eq!(env.ok(&["poll", "--as", "Orchestrator"]), "");
    assert!(env.inputs().join(&empty).exists() && env.inputs().join(&torn).exists());
    // Settled (a window of 0): what a claim would refuse is a problem, not pending.
    let env = env.with_settle("0s");
    let ls = env.json_lines(&["ls"]);
    let pending: Vec<&str> = ls.iter().filter_map(|v| v["id"].as_str()).collect();
    assert!(!pending.iter().any(|p| empty.starts_with(p)), "{pending:?}");
    // Listed, as invalid, with the reason.
    for name in [&empty, &torn] {
        assert!(
            ls.iter()
                .any(|v| v["kind"] == "invalid"
                    && v["path"].as_str().unwrap().ends_with(name.as_str())),
            "{name}: {ls:?}"
        );
    }
    let out = env.run(&["--json", "doctor"]);
    assert_eq!(out.status.code(), Some(1), "doctor says healthy");
    let findings: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (name, why) in [(&empty, "empty file"), (&torn, "invalid JSON")] {
        assert!(
            findings.iter().any(|f| f["severity"] == "problem"
                && f["path"].as_str().unwrap().ends_with(name.as_str())
                && f["reason"].as_str().unwrap().contains(why)),
            "{name}: {findings:?}"
        );
    }
    assert!(
        !findings
            .iter()
            .any(|f| f["path"].as_str().unwrap().ends_with(&good)),
        "the good signal is fine: {findings:?}"
    );
}

#[test]
fn a_timeout_too_far_away_to_represent_waits_instead_of_panicking() {
    let env = Env::new();
    env.ok(&["send", "info", "here", "--target", "Executor"]);
    let out = env.run(&[
        "wait",
        "--as",
        "Executor",
        "--timeout",
        "10000000000000000000s",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wt = env.root.parent().unwrap().join("wt");
    std::fs::create_dir_all(wt.join(".goblin")).unwrap();
    std::fs::write(wt.join(".goblin/scope-complete"), br#"{"summary": "x"}"#).unwrap();
    let out = env.run(&[
        "goblin",
        "watch",
        "--worktree",
        wt.to_str().unwrap(),
        "--stage",
        "SCOPE",
        "--once",
        "--timeout",
        "10000000000000000000s",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn completions_into_a_closed_pipe_end_quietly() {
    for shell in ["bash", "zsh", "fish"] {
        let mut child = Command::new(BIN)
            .args(["completions", shell])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before anything is written
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_root_whose_path_is_not_utf8_works_and_prints_valid_json() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(std::ffi::OsStr::from_bytes(b"r\xff"));
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg("--root")
            .arg(&root)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let init: Value = serde_json::from_str(run(&["--json", "init"]).trim()).unwrap();
    assert!(init["root"].as_str().unwrap().ends_with("r\u{fffd}"));
    let id = run(&["send", "steer", "x", "--target", "Executor"]);
    let got: Value =
        serde_json::from_str(run(&["--json", "poll", "--as", "Executor"]).trim()).unwrap();
    assert_eq!(got["id"], id.trim());
    run(&["--json", "ls", "--all"]);
    run(&["--json", "log"]);
}

/// What no consumer would take is refused at `send`, one line, exit 2, nothing written: an
/// empty or `none` target, a sender name with a newline, a message over the file cap.
#[test]
fn senders_are_refused_what_no_consumer_takes() {
    let env = Env::new();
    for (args, needle) in [
        (
            vec!["send", "abort", "x", "--target", ""],
            "--target is empty",
        ),
        (
            vec!["send", "abort", "x", "--target", "  "],
            "--target is empty",
        ),
        (
            vec!["send", "abort", "x", "--target", "none"],
            "--no-target",
        ),
        (vec!["send", "info", "x", "--from", "a\nb"], "--from"),
        (vec!["send", "info", "x", "--from", ""], "--from"),
        (
            vec!["poll", "--as", "exe cutor"],
            "invalid agent name \"exe cutor\"",
        ),
    ] {
        let out = env.run(&args);
        let err = stderr_line(&out);
        assert_eq!(out.status.code(), Some(2), "{:?}: {err}", &args[..2]);
        assert!(err.contains(needle), "{:?}: {err}", &args[..2]);
    }
    // A message over the cap (read from stdin: an argument that long is refused by exec).
    let mut child = env
        .cmd(&["send", "info", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let writer = child.stdin.take().unwrap();
    let feed = std::thread::spawn(move || {
        let mut w = writer;
        let _ = w.write_all(&vec![b'a'; 1_100_000]);
    });
    let out = child.wait_with_output().unwrap();
    feed.join().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_line(&out).contains("must stay under"),
        "{}",
        stderr_line(&out)
    );
    assert!(
        env.ok(&["ls"]).trim().is_empty(),
        "a refused send wrote something"
    );
}

/// The known roles are one agent in any case, in `--as` as in `--target`; approval states are
/// matched in any case too.
#[test]
fn roles_and_states_match_in_any_case() {
    let env = Env::new();
    env.ok(&["send", "steer", "to the executor", "--target", "EXECUTOR"]);
    let got = env.json_lines(&["poll", "--as", "executor"]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["target"], "Executor");
    env.ok(&["send", "approve", "go", "--target", "Orchestrator"]);
    let got = env.json_lines(&[
        "poll",
        "--as",
        "orchestrator",
        "--state",
        "knowledge_approval",
    ]);
    assert_eq!(
        got.len(),
        1,
        "APPROVE in the approval state, whatever its case: {got:?}"
    );
}

/// Under `--json`, an error is one JSON object on stderr (the library's errors with the file
/// they name), a refused command line too; without it, one `sigbox:` line.
#[test]
fn errors_are_json_under_json() {
    let env = Env::new();
    let out = env.run(&["--json", "send", "steer", "x", "--target", "../etc"]);
    assert_eq!(out.status.code(), Some(2));
    let e: Value = serde_json::from_str(stderr_line(&out).trim()).unwrap();
    assert!(e["error"].as_str().unwrap().contains("../etc"), "{e}");
    assert_eq!(e["exit"], 2);
    assert!(out.stdout.is_empty());
    // A file the library refuses: the path is named.
    std::fs::remove_dir(env.root.join("tmp")).unwrap();
    std::os::unix::fs::symlink("/", env.root.join("tmp")).unwrap();
    let out = env.run(&["--json", "send", "info", "x"]);
    assert_eq!(out.status.code(), Some(2));
    let e: Value = serde_json::from_str(stderr_line(&out).trim()).unwrap();
    assert!(
        e["path"].as_str().is_some_and(|p| p.ends_with("tmp")),
        "{e}"
    );
    // clap's own refusal.
    let out = env.run(&["--json", "poll", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let e: Value = serde_json::from_str(stderr_line(&out).trim()).unwrap();
    assert!(e["error"].as_str().unwrap().contains("--bogus"), "{e}");
    // Without --json: the human line.
    let out = env.run(&["poll", "--bogus"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bogus"));
    assert!(serde_json::from_slice::<Value>(&out.stderr).is_err());
}

/// One vocabulary: `ls` has `created_at` as `poll` does (RFC 3339) and `age_ms` as a number.
#[test]
fn ls_speaks_as_poll_does() {
    let env = Env::new();
    env.ok(&["send", "info", "x", "--target", "Executor"]);
    let ls = env.json_lines(&["ls"]);
    let at = ls[0]["created_at"].as_str().unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{at}");
    assert!(ls[0]["age_ms"].is_u64(), "{}", ls[0]);
    assert!(ls[0].get("created_ns").is_none() && ls[0].get("age").is_none());
    let polled = env.json_lines(&["poll", "--as", "Executor"]);
    assert_eq!(polled[0]["created_at"], ls[0]["created_at"]);
}

/// A message's line break shows as `\n` in human output: one record, one line.
#[test]
fn a_line_break_in_a_message_is_shown_escaped() {
    let env = Env::new();
    env.ok(&["send", "info", "two\nlines", "--target", "Executor"]);
    let out = env.ok(&["poll", "--as", "Executor"]);
    assert_eq!(out.lines().count(), 1, "{out:?}");
    assert!(out.contains("two\\nlines"), "{out:?}");
}

/// `--settle` wants a unit (a bare `2` could be seconds or milliseconds), `0` excepted, and
/// refuses a window over an hour instead of saturating.
#[test]
fn settle_windows_are_checked() {
    let env = Env::new();
    for bad in ["2", "2h", "99999999999999999999999s"] {
        let out = env.run(&["--settle", bad, "ls"]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("settle"),
            "{bad}"
        );
    }
    env.ok(&["--settle", "0", "ls"]);
    env.ok(&["--settle", "500ms", "ls"]);
}

/// A symlink or FIFO in the drop zone is not "waiting for its writer": it is refused at
/// once, whatever the settle window.
#[test]
fn links_and_fifos_do_not_settle() {
    let env = Env::new().with_settle("1h");
    std::os::unix::fs::symlink("/etc/passwd", env.inputs().join("l.yaml")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        env.inputs().join("f.yaml"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let ls = env.json_lines(&["ls"]);
    assert_eq!(ls.len(), 2, "{ls:?}");
    assert!(ls.iter().all(|l| l["kind"] == "invalid"), "{ls:?}");
    let pass = env.run(&["--json", "-v", "poll", "--as", "Executor"]);
    assert!(pass.status.success());
    let ls = env.json_lines(&["ls", "--all"]);
    assert_eq!(
        ls.iter().filter(|l| l["kind"] == "rejected").count(),
        2,
        "{ls:?}"
    );
}

/// `flux parse` exits 1 when a `flux:signal` line is invalid, as `flux result` does for an
/// invalid document; `mux verify` of a session that does not exist is an error.
#[test]
fn parsers_and_verifiers_say_failure_in_their_status() {
    let env = Env::new();
    let log = env.root.join("stage.log");
    std::fs::write(&log, "{\"flux:signal\": {\"verdict\": \"abort\"}}\n").unwrap();
    assert_eq!(
        env.run(&["flux", "parse", log.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    std::fs::write(&log, "{\"flux:signal\": {\"verdict\": \"bogus\"}}\n").unwrap();
    let out = env.run(&["flux", "parse", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("error"));
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["mux", "verify", "tmp/mux/nope"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    // As upstream's verify.py: zeros and 0 for a session that does not exist, with a hint.
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such session directory"));
}

/// `tap --json` reports each mailbox signal it sent on stderr; the command's own output
/// stays on stdout, unchanged.
#[test]
fn tap_reports_what_it_sent() {
    let env = Env::new();
    let out = env.run(&[
        "--json",
        "tap",
        "--as",
        "Executor",
        "--",
        "sh",
        "-c",
        "echo '{\"flux:signal\": {\"verdict\": \"abort\", \"reason\": \"r\"}}'",
    ]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"flux:signal\": {\"verdict\": \"abort\", \"reason\": \"r\"}}\n"
    );
    let sent: Vec<Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["event"], "sent");
    assert_eq!(sent[0]["type"], "ABORT");
    assert_eq!(sent[0]["from"], "Executor");
    let ls = env.json_lines(&["ls"]);
    assert_eq!(ls[0]["id"], sent[0]["id"]);
}

/// `ls` shows claims a running consumer holds (not yet handed over) as in flight, live.
#[test]
fn ls_shows_claims_a_running_consumer_holds() {
    let env = Env::new();
    env.ok(&["send", "info", "held", "--target", "Executor"]);
    let mb = sigbox::Mailbox::open(&env.root).unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    assert_eq!(pass.delivered.len(), 1);
    let ls = env.json_lines(&["ls"]);
    assert_eq!(ls.len(), 1, "{ls:?}");
    assert_eq!(ls[0]["kind"], "in_flight");
    assert_eq!(ls[0]["live"], true);
    assert_eq!(ls[0]["count"], 1);
    let out = env.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    mb.ack("Executor").unwrap();
    assert!(env.json_lines(&["ls"]).is_empty());
}

/// `ALL` names every agent at once: wherever one agent is named (`--as` of every command,
/// `--target`, `tap --to`), the refusal says ALL is reserved for broadcasts, not a rule ALL
/// satisfies; any other bad name is refused saying which character or length breaks the rule.
#[test]
fn all_is_reserved_for_broadcasts_wherever_an_agent_is_named() {
    let env = Env::new();
    for args in [
        &["poll", "--as", "ALL"][..],
        &["poll", "--as", "all"],
        &["wait", "--as", "All", "--timeout", "1s"],
        &["finish", "--as", "ALL"],
        &["hooks", "install", "claude", "--as", "ALL", "--dry-run"],
        &["hook", "claude", "--as", "ALL", "--strict"],
    ] {
        let mut child = env
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all(br#"{"hook_event_name": "PreToolUse", "tool_name": "Bash"}"#);
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let err = stderr_line(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("reserved for broadcasts") && err.contains("--as"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("a letter then"), "{args:?}: {err}");
    }
    for (args, needle) in [
        (&["poll", "--as", "exe.cutor"][..], "holds '.'"),
        (&["poll", "--as", "1st"], "starts with '1'"),
        (&["send", "info", "x", "--target", "a/b"], "holds '/'"),
        (&["tap", "--to", "a b", "--", "true"], "holds ' '"),
    ] {
        let out = env.run(args);
        let err = stderr_line(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let long = "a".repeat(65);
    let out = env.run(&["poll", "--as", &long]);
    assert!(stderr_line(&out).contains("65 bytes long"));
    // ALL as a target is the broadcast itself.
    env.ok(&["send", "info", "x", "--target", "all"]);
}

/// One rule for every duration of every command and variable: a number and its unit. A bare
/// number other than 0 is refused, both of its readings shown; `0` needs none.
#[test]
fn every_duration_needs_its_unit() {
    let env = Env::new();
    // Pending, so that a wait that took its duration would end at once, not after it.
    env.ok(&["send", "info", "here", "--target", "Executor"]);
    let wt = env.root.parent().unwrap().to_str().unwrap().to_string();
    let cases: [(&[&str], &str); 8] = [
        (&["wait", "--as", "Executor", "--timeout", "1500"], "1500"),
        (&["wait", "--as", "Executor", "--poll", "2"], "2"),
        (&["--settle", "2", "ls"], "2"),
        (&["gc", "--older-than", "5"], "5"),
        (
            &["goblin", "watch", "--worktree", &wt, "--timeout", "0.5"],
            "0.5",
        ),
        (
            &["goblin", "watch", "--worktree", &wt, "--settle", "1"],
            "1",
        ),
        (
            &["mux", "check", "s", "--expected", "1", "--timeout", "1.5"],
            "1.5",
        ),
        (
            &[
                "hook",
                "claude",
                "--as",
                "Executor",
                "--strict",
                "--pause-wait",
                "25",
            ],
            "25",
        ),
    ];
    for (args, n) in cases {
        let out = env.cmd(args).stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "write {n}s for {n} seconds or {n}ms for {n} milliseconds"
            )),
            "{args:?}: {err}"
        );
    }
    // `0` is 0 in either reading.
    env.ok(&["--settle", "0", "gc", "--older-than", "0"]);
    let out = env.run(&["wait", "--as", "Executor", "--timeout", "0"]);
    assert_eq!(out.status.code(), Some(0));
}

/// What the environment gives is refused naming the variable, and the option on the command
/// line wins over it, even over a value that would be refused.
#[test]
fn variables_are_named_when_refused_and_options_win_over_them() {
    let env = Env::new();
    let root = env.root.to_str().unwrap();
    for (var, value, needle) in [
        ("SIGBOX_ROOT", "", "SIGBOX_ROOT is set but empty"),
        ("SIGBOX_SETTLE", "2", "SIGBOX_SETTLE=\"2\" is refused"),
        ("SIGBOX_SETTLE", "2h", "SIGBOX_SETTLE=\"2h\" is refused"),
    ] {
        let out = env.cmd(&["ls"]).env(var, value).output().unwrap();
        let err = stderr_line(&out);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert!(err.contains(needle), "{var}={value}: {err}");
        let out = env.cmd(&["--json", "ls"]).env(var, value).output().unwrap();
        let e: Value = serde_json::from_str(stderr_line(&out).trim()).unwrap();
        assert!(e["error"].as_str().unwrap().contains(needle), "{e}");
        // The option wins, before or after the command's name.
        for args in [
            &["--root", root, "--settle", "1s", "ls"][..],
            &["ls", "--root", root, "--settle", "1s"],
        ] {
            let out = env.cmd(args).env(var, value).output().unwrap();
            assert!(
                out.status.success(),
                "{var}={value} {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // A hook answers nothing, saying why.
        let out = env
            .cmd(&["hook", "claude", "--as", "Executor"])
            .env(var, value)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(stderr_line(&out).contains(needle));
    }
    // A usage line never shows as required an option the environment gives.
    let out = env.run(&["poll"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Usage: sigbox poll --as <AGENT>\n"), "{err}");
}

/// A timeout too long to represent is waited as for ever, by every command that waits: it
/// never turns into no timeout at all (a single look, `incomplete` at once).
#[test]
fn a_timeout_too_long_to_represent_is_waited_as_for_ever() {
    let env = Env::new();
    let dir = env.root.parent().unwrap().to_path_buf();
    let huge = "99999999999999999999h";
    std::fs::create_dir_all(dir.join("s/.signals")).unwrap();
    std::fs::create_dir_all(dir.join("wt/.goblin")).unwrap();
    let spawn = |args: &[&str]| {
        env.cmd(args)
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // All three started at once, then given 1.5 s to return early.
    let mut waiting = [
        spawn(&["mux", "check", "s", "--expected", "1", "--timeout", huge]),
        spawn(&[
            "goblin",
            "watch",
            "--worktree",
            "wt",
            "--once",
            "--timeout",
            huge,
        ]),
        spawn(&["wait", "--as", "Executor", "--timeout", huge]),
    ];
    std::thread::sleep(Duration::from_millis(1500));
    for (name, child) in ["mux", "goblin", "wait"].iter().zip(&mut waiting) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{name} did not wait: it ended with {status}");
        }
    }
    let [mux, goblin, wait] = waiting;
    env.cmd(&["mux", "signal", "s/build", "--status", "success"])
        .current_dir(&dir)
        .output()
        .unwrap();
    std::fs::write(
        dir.join("wt/.goblin/scope-complete"),
        br#"{"summary": "x"}"#,
    )
    .unwrap();
    env.ok(&["send", "info", "here", "--target", "Executor"]);
    for (name, child) in [("mux", mux), ("goblin", goblin), ("wait", wait)] {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `finish` says so when there is nothing to archive, rather than printing nothing.
#[test]
fn finish_says_when_there_is_nothing_to_archive() {
    let env = Env::new();
    assert_eq!(
        env.ok(&["finish"]),
        "nothing to archive: no broadcast is pending in inputs/\n"
    );
    assert!(env.json_lines(&["finish"]).is_empty());
}

/// A stage whose writer still runs is a write in progress, never stale, whatever
/// `--older-than` says: `gc --older-than 0s` in a loop beside real concurrent `sigbox send`
/// processes fails none of them, and still removes what a dead writer left.
#[test]
fn gc_never_removes_the_stage_of_a_running_writer() {
    let env = Env::new();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (sent, failed, removed) = std::thread::scope(|s| {
        let gc = s.spawn(|| {
            let mut removed = 0u64;
            let mut runs = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || runs == 0 {
                let v = env.json_lines(&["gc", "--older-than", "0s"]);
                removed += v[0]["removed"].as_u64().unwrap();
                runs += 1;
            }
            removed
        });
        let senders: Vec<_> = (0..6)
            .map(|i| {
                let env = &env;
                s.spawn(move || {
                    let mut failed = Vec::new();
                    for n in 0..50 {
                        let out =
                            env.run(&["send", "info", &format!("{i}/{n}"), "--target", "Executor"]);
                        if !out.status.success() {
                            failed.push(String::from_utf8_lossy(&out.stderr).into_owned());
                        }
                    }
                    failed
                })
            })
            .collect();
        let failed: Vec<String> = senders
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (300 - failed.len(), failed, gc.join().unwrap())
    });
    assert!(
        failed.is_empty(),
        "{} of 300 sends failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    assert_eq!(removed, 0, "gc removed a stage of a running send");
    let got = env.json_lines(&["poll", "--as", "Executor"]);
    assert_eq!(got.len(), sent);
    // A stage of this (running) process is kept, however old; a dead writer's is removed.
    let live = env
        .inputs()
        .join(format!(".{}.0123456789abcdef.send.tmp", std::process::id()));
    let dead = env.inputs().join(".4194399.fedcba9876543210.send.tmp");
    std::fs::write(&live, "in progress").unwrap();
    std::fs::write(&dead, "left by a crash").unwrap();
    let v = env.json_lines(&["gc", "--older-than", "0s"]);
    assert_eq!(v[0]["removed"], 1);
    assert!(live.exists() && !dead.exists());
}

/// `--durability relaxed` (or `SIGBOX_DURABILITY=relaxed`) makes no fsync at all (counted with
/// strace, skipped where it is missing); durable, the default, does; a mode it does not know
/// is refused naming where it came from.
#[test]
fn relaxed_durability_makes_no_fsync() {
    let env = Env::new();
    let out = env
        .cmd(&["ls"])
        .env("SIGBOX_DURABILITY", "fast")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr_line(&out);
    assert!(
        err.contains("SIGBOX_DURABILITY \"fast\"") && err.contains("relaxed"),
        "{err}"
    );
    let out = env.run(&["--durability", "fast", "ls"]);
    assert_eq!(out.status.code(), Some(2));
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("strace is not installed: fsyncs not counted");
        return;
    }
    let trace = env.root.parent().unwrap().join("trace");
    let fsyncs = |args: &[&str], var: Option<&str>| {
        let mut c = Command::new("strace");
        c.args(["-f", "-qq", "-e", "trace=fsync,fdatasync", "-o"])
            .arg(&trace)
            .arg(BIN)
            .args(args)
            .env("SIGBOX_ROOT", &env.root)
            .env_remove("SIGBOX_SETTLE")
            .env_remove("SIGBOX_DURABILITY");
        if let Some(v) = var {
            c.env("SIGBOX_DURABILITY", v);
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(&trace).unwrap().lines().count()
    };
    if fsyncs(&["send", "info", "x", "--target", "Executor"], None) == 0 {
        eprintln!("strace sees no fsync here (ptrace refused?): not counted");
        return;
    }
    assert_eq!(
        fsyncs(
            &[
                "--durability",
                "relaxed",
                "send",
                "info",
                "y",
                "--target",
                "Executor"
            ],
            None
        ),
        0
    );
    assert_eq!(
        fsyncs(
            &["send", "info", "z", "--target", "Executor"],
            Some("relaxed")
        ),
        0
    );
    assert_eq!(fsyncs(&["poll", "--as", "Executor"], Some("RELAXED")), 0);
    assert!(
        fsyncs(
            &[
                "send",
                "info",
                "w",
                "--target",
                "Executor",
                "--durability",
                "durable"
            ],
            Some("relaxed")
        ) > 0,
        "the option wins"
    );
}

/// The remedy spec/mailbox.md §5 gives for a file written and renamed within one clock tick:
/// its modification time made older before the rename, it is read at once by a `poll`, every
/// time, whatever the settle window.
#[test]
fn a_file_backdated_before_its_rename_is_read_at_once_by_poll() {
    let env = Env::new().with_settle("1h");
    let tmp = env.root.parent().unwrap().join("t.json");
    for i in 0..20 {
        std::fs::write(
            &tmp,
            format!(r#"{{"type":"INFO","target":"Executor","message":"{i}"}}"#),
        )
        .unwrap();
        let f = std::fs::File::options().write(true).open(&tmp).unwrap();
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(1))
            .unwrap();
        drop(f);
        std::fs::rename(&tmp, env.inputs().join(format!("f{i}.json"))).unwrap();
        let got = env.json_lines(&["poll", "--as", "Executor"]);
        assert_eq!(got.len(), 1, "file {i} was not read at once");
    }
}

/// `doctor` reads the root as every other command does: spelled `.` from inside it, or reached
/// through a symlink (spec §1.0: the root's own path may hold symlinks). Before, it reported
/// "cannot read the root (no file name)" for `.` and "the root is not a directory" for a
/// symlink, and checked nothing below.
#[test]
fn doctor_reads_a_root_spelled_dot_or_reached_through_a_symlink() {
    let env = Env::new();
    env.run(&["send", "steer", "x", "--target", "Executor"]);
    let link = env.root.with_file_name("link");
    std::os::unix::fs::symlink(&env.root, &link).unwrap();
    // A problem planted below the root, which doctor must see through either spelling.
    std::os::unix::fs::symlink("/etc/passwd", env.inputs().join("planted.json")).unwrap();
    for (cwd, root) in [
        (env.root.clone(), PathBuf::from(".")),
        (env.root.join("inputs"), PathBuf::from("..")),
        (env.root.clone(), link.clone()),
    ] {
        let out = Command::new(BIN)
            .arg("--root")
            .arg(&root)
            .arg("doctor")
            .current_dir(&cwd)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("cannot read the root"), "{root:?}: {text}");
        assert!(!text.contains("not a directory"), "{root:?}: {text}");
        assert!(
            text.contains("planted.json: a symlink"),
            "{root:?}: the planted link is named: {text}"
        );
    }
}

/// `init` of a root whose parent directory is reached through a symlink makes the whole root in
/// one go (spec §1.0: the root's own path may hold symlinks). Before, it made the root's
/// directory, then failed to open the symlinked parent to sync it ("Not a directory"), and left
/// a root without its layout until `init` ran again.
#[test]
fn init_makes_a_root_whose_parent_is_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
    for root in [
        dir.path().join("link").join("box"),
        PathBuf::from("link/box2"),
    ] {
        let out = Command::new(BIN)
            .arg("--root")
            .arg(&root)
            .arg("init")
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{root:?}: {out:?}");
        let made = dir.path().join("real").join(root.file_name().unwrap());
        for sub in ["inputs", "claimed", "processed"] {
            assert!(made.join(sub).is_dir(), "{root:?}: {sub} made");
        }
    }
}

/// Something that is not a regular file planted in `processed/` (a symlink leading out of the
/// root, a FIFO, a directory) is named by `log` (an error, exit 2) and by `doctor` (a problem),
/// never followed nor read. Before, both passed over it: `log` exited 0 and `doctor` said
/// "healthy".
#[test]
fn log_and_doctor_name_what_is_planted_in_processed() {
    let env = Env::new();
    env.run(&["send", "steer", "x", "--target", "Executor"]);
    env.run(&["poll", "--as", "Executor"]);
    let outside = env.root.with_file_name("outside.json");
    std::fs::write(&outside, r#"{"type":"STEER","target":"Executor"}"#).unwrap();
    let processed = env.root.join("processed");
    std::os::unix::fs::symlink(&outside, processed.join("link.json")).unwrap();
    let fifo = Command::new("mkfifo")
        .arg(processed.join("fifo.json"))
        .status()
        .unwrap();
    assert!(fifo.success());
    std::fs::create_dir(processed.join("dir.json")).unwrap();
    let out = env.run(&["log"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(2), "{said}");
    for (name, what) in [
        ("link.json", "a symlink"),
        ("fifo.json", "a FIFO"),
        ("dir.json", "a directory"),
    ] {
        assert!(
            said.contains(name) && said.contains(&format!("not a record: {what}")),
            "log names {name}: {said}"
        );
    }
    assert!(
        said.contains("STEER"),
        "the real record is still listed: {said}"
    );
    let out = env.run(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for name in ["link.json", "fifo.json", "dir.json"] {
        assert!(text.contains(name), "doctor names {name}: {text}");
    }
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        r#"{"type":"STEER","target":"Executor"}"#
    );
}

/// A symlink or FIFO planted in `inputs/` under a staging name (`.<pid>.<hex>.send.tmp`) is
/// quarantined by the next pass under that name, with its reason beside it: `ls --all` and
/// `doctor` list it and `gc --rejected` clears it like any other quarantined entry. Before,
/// the three took it for sigbox's own write in progress in `rejected/` and passed over it, so
/// it stayed there unseen for ever.
#[test]
fn quarantined_entries_under_staging_names_are_listed_and_cleared() {
    let env = Env::new();
    let outside = env.root.with_file_name("outside");
    std::fs::write(&outside, "kept").unwrap();
    let link = ".99999.0123456789abcdef.send.tmp";
    let fifo = ".99998.0123456789abcdef.send.tmp";
    std::os::unix::fs::symlink(&outside, env.inputs().join(link)).unwrap();
    let made = Command::new("mkfifo")
        .arg(env.inputs().join(fifo))
        .status()
        .unwrap();
    assert!(made.success());
    let out = env.run(&["poll", "--as", "Orchestrator"]);
    assert!(out.status.success(), "{out:?}");
    let rejected = env.root.join("rejected");
    assert!(std::fs::symlink_metadata(rejected.join(link)).is_ok());
    let listed = String::from_utf8(env.run(&["ls", "--all"]).stdout).unwrap();
    let doctor = String::from_utf8(env.run(&["doctor"]).stdout).unwrap();
    for name in [link, fifo] {
        assert!(listed.contains(name), "ls --all lists {name}: {listed}");
        assert!(doctor.contains(name), "doctor names {name}: {doctor}");
    }
    let out = env.run(&["gc", "--rejected", "--older-than", "0s"]);
    assert!(out.status.success(), "{out:?}");
    let left: Vec<_> = std::fs::read_dir(&rejected)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "gc --rejected clears them and their reasons: {left:?}"
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "kept");
}

/// `sigbox mcp`, `ui` and `bridge` run a program installed beside `sigbox`; without it they
/// fail with exit 2, naming the path looked at and how to install it.
#[test]
fn a_program_not_installed_beside_sigbox_is_named_with_how_to_install_it() {
    let dir = tempfile::tempdir().unwrap();
    let alone = dir.path().join("sigbox");
    std::fs::copy(BIN, &alone).unwrap();
    let root = dir.path().join("signals");
    assert!(
        Command::new(&alone)
            .arg("--root")
            .arg(&root)
            .arg("init")
            .status()
            .unwrap()
            .success()
    );
    for (cmd, program, args) in [
        ("mcp", "sigbox-mcp", &["--as", "Executor"][..]),
        ("ui", "sigbox-ui", &[][..]),
        (
            "bridge",
            "sigbox-bridge",
            &["--nats", "nats://127.0.0.1:1"][..],
        ),
    ] {
        let out = Command::new(&alone)
            .arg("--root")
            .arg(&root)
            .arg(cmd)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains(&dir.path().join(program).display().to_string())
                && err.contains("Installing what you ship")
                && err.contains("cargo install --path"),
            "{cmd}: {err}"
        );
    }
    // There, but not a program it can run: the same hint.
    std::fs::create_dir(dir.path().join("sigbox-ui")).unwrap();
    let out = Command::new(&alone)
        .arg("--root")
        .arg(&root)
        .arg("ui")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot run") && err.contains("Installing what you ship"),
        "{err}"
    );
}
