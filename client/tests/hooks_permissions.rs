//! `sigbox hooks install RUNTIME --permissions` (spec/hooks.md, "Permission requests"): the
//! PermissionRequest entry for Claude Code and Codex written beside sigbox's others, removed by
//! an install without the flag and by uninstall, and a user's own PermissionRequest entry kept
//! through all of it.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn sigbox(cwd: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env_remove("SIGBOX_ROOT")
        .output()
        .unwrap()
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn read(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The commands of the entries under `hooks.<event>`, in order.
fn commands(v: &Value, event: &str) -> Vec<String> {
    v["hooks"][event]
        .as_array()
        .map(|groups| {
            groups
                .iter()
                .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
                .map(|h| h["command"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn is_sigbox(command: &str, runtime: &str) -> bool {
    command.contains(&format!(" hook {runtime} --as Executor"))
}

#[test]
fn the_permission_request_entry_comes_and_goes_and_the_users_own_stays() {
    let users = r#"{"matcher": "Bash", "hooks": [{"type": "command", "command": "/opt/approver --strict", "timeout": 30}]}"#;
    for (runtime, file) in [
        ("claude", ".claude/settings.json"),
        ("codex", ".codex/hooks.json"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let original = format!(
            r#"{{"model": "x", "hooks": {{"PermissionRequest": [{users}], "Stop": [{{"hooks": [{{"type": "command", "command": "./stop.sh"}}]}}]}}}}"#
        );
        std::fs::write(&path, &original).unwrap();
        let before: Value = serde_json::from_str(&original).unwrap();
        let user_entry: Value = serde_json::from_str(users).unwrap();

        // Without --permissions: no PermissionRequest entry of sigbox's.
        ok(&sigbox(
            dir.path(),
            &["hooks", "install", runtime, "--as", "Executor"],
        ));
        let v = read(&path);
        assert_eq!(
            commands(&v, "PermissionRequest"),
            ["/opt/approver --strict"],
            "{runtime}"
        );
        assert!(
            commands(&v, "PreToolUse")
                .iter()
                .any(|c| is_sigbox(c, runtime))
        );

        // With it: the entry, after the user's, matching every tool, running the same
        // command as the others.
        let out = sigbox(
            dir.path(),
            &[
                "--json",
                "hooks",
                "install",
                runtime,
                "--as",
                "Executor",
                "--permissions",
            ],
        );
        ok(&out);
        let said: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(said["changed"], true, "{runtime}: {said}");
        let v = read(&path);
        let groups = v["hooks"]["PermissionRequest"].as_array().unwrap();
        assert_eq!(groups.len(), 2, "{runtime}: {v}");
        assert_eq!(
            groups[0], user_entry,
            "{runtime}: the user's entry kept, first"
        );
        assert_eq!(groups[1]["matcher"], "*", "{runtime}");
        let hook = &groups[1]["hooks"][0];
        assert_eq!(hook["type"], "command");
        assert!(hook["timeout"].as_u64().is_some_and(|t| t > 0), "{hook}");
        let ours = hook["command"].as_str().unwrap();
        assert!(is_sigbox(ours, runtime), "{ours}");
        let pre = commands(&v, "PreToolUse");
        assert_eq!(pre.len(), 1);
        assert_eq!(
            ours, pre[0],
            "{runtime}: the same command as the other events"
        );
        assert_eq!(v["model"], "x");
        assert_eq!(commands(&v, "Stop")[0], "./stop.sh");

        // Installed twice: nothing changes.
        let out = sigbox(
            dir.path(),
            &[
                "--json",
                "hooks",
                "install",
                runtime,
                "--as",
                "Executor",
                "--permissions",
            ],
        );
        ok(&out);
        let said: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(said["changed"], false, "{runtime}: {said}");

        // Installed again without the flag: sigbox's PermissionRequest entry goes, the
        // user's stays, sigbox's other entries stay.
        ok(&sigbox(
            dir.path(),
            &["hooks", "install", runtime, "--as", "Executor"],
        ));
        let v = read(&path);
        assert_eq!(
            v["hooks"]["PermissionRequest"],
            Value::Array(vec![user_entry.clone()]),
            "{runtime}"
        );
        assert!(
            commands(&v, "PreToolUse")
                .iter()
                .any(|c| is_sigbox(c, runtime))
        );

        // Uninstall after an install with it: every entry of sigbox's goes, the file is what
        // it was.
        ok(&sigbox(
            dir.path(),
            &[
                "hooks",
                "install",
                runtime,
                "--as",
                "Executor",
                "--permissions",
            ],
        ));
        ok(&sigbox(dir.path(), &["hooks", "uninstall", runtime]));
        assert_eq!(read(&path), before, "{runtime}");
    }
}

#[test]
fn permissions_into_a_file_without_hooks_and_a_bad_event_value_refused() {
    let dir = tempfile::tempdir().unwrap();
    // No settings file yet: made with the entry.
    ok(&sigbox(
        dir.path(),
        &[
            "hooks",
            "install",
            "claude",
            "--as",
            "Executor",
            "--permissions",
        ],
    ));
    let path = dir.path().join(".claude/settings.json");
    let v = read(&path);
    assert!(
        commands(&v, "PermissionRequest")
            .iter()
            .all(|c| is_sigbox(c, "claude"))
    );
    assert_eq!(commands(&v, "PermissionRequest").len(), 1);
    ok(&sigbox(dir.path(), &["hooks", "uninstall", "claude"]));
    assert!(read(&path).get("hooks").is_none());

    // A PermissionRequest that is not a list: refused, untouched, naming it.
    let bad = r#"{"hooks": {"PermissionRequest": "allow everything"}}"#;
    std::fs::write(&path, bad).unwrap();
    let out = sigbox(
        dir.path(),
        &[
            "hooks",
            "install",
            "claude",
            "--as",
            "Executor",
            "--permissions",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hooks.PermissionRequest"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), bad);

    // Copilot: not offered, said so, nothing written.
    let out = sigbox(
        dir.path(),
        &[
            "hooks",
            "install",
            "copilot",
            "--as",
            "Executor",
            "--permissions",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Copilot"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.path().join(".github").exists());
}
