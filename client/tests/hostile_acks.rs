//! An ack is a regular file that sigbox or upstream writes (spec/mailbox.md §9.4). A FIFO, a
//! directory, a symlink or a socket planted under an agent's ack name
//! (`acks/<broadcast>/<Agent>.ack.yaml` or `.ack`) once counted as that agent's ack: the agent
//! never got the broadcast, `ls` listed it acked and `doctor` said healthy. Here the real
//! hostile things are planted and the real `sigbox` is run: `doctor` names each, the agent's
//! checkpoint quarantines it with a reason and delivers the broadcast, and the broadcast is not
//! archived before every agent of the quorum really acked it.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::Command;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_sigbox");

fn sigbox(root: &Path, args: &[&str]) -> std::process::Output {
    common::sigbox_at(BIN, root, args)
}

fn text(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn a_fifo_directory_symlink_or_socket_under_an_acks_name_is_no_ack() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("signals");
    assert!(sigbox(&root, &["init"]).status.success());
    let sent = sigbox(&root, &["send", "INFO", "for everyone", "--target", "ALL"]);
    assert!(sent.status.success(), "{}", text(&sent));
    let id = String::from_utf8(sent.stdout).unwrap().trim().to_string();
    let acks = root.join("acks").join(&id);
    std::fs::create_dir_all(&acks).unwrap();
    // The hostile things, one per agent of the default quorum but the Orchestrator.
    let fifo = acks.join("Executor.ack.yaml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    std::fs::create_dir(acks.join("Planner.ack")).unwrap();
    let outside = tmp.path().join("outside.yaml");
    std::fs::write(&outside, b"agent: Reviewer\n").unwrap();
    std::os::unix::fs::symlink(&outside, acks.join("Reviewer.ack.yaml")).unwrap();
    // Bound from inside the directory: its whole path is longer than a socket address holds.
    assert!(
        Command::new("python3")
            .current_dir(&acks)
            .args([
                "-c",
                "import socket; socket.socket(socket.AF_UNIX).bind('Questioner.ack')"
            ])
            .status()
            .unwrap()
            .success()
    );
    assert!(
        std::fs::symlink_metadata(acks.join("Questioner.ack"))
            .unwrap()
            .file_type()
            .is_socket()
    );

    let doctor = sigbox(&root, &["doctor"]);
    let said = text(&doctor);
    assert!(!doctor.status.success(), "doctor says healthy: {said}");
    for (agent, kind) in [
        ("Executor", "a FIFO"),
        ("Planner", "a directory"),
        ("Reviewer", "a symlink"),
        ("Questioner", "a FIFO, socket or device"),
    ] {
        assert!(
            said.lines().any(|l| l.contains(&format!("{agent}.ack"))
                && l.contains(kind)
                && l.contains(&format!("does not count as {agent}'s ack"))),
            "{agent}: {said}"
        );
    }

    // The orchestrator's pass does not archive the broadcast: nobody but it has acked.
    let orch = sigbox(&root, &["--json", "poll", "--as", "Orchestrator"]);
    assert!(text(&orch).contains(&id), "{}", text(&orch));
    assert!(root.join("inputs").join(format!("{id}.json")).exists());

    for agent in ["Executor", "Planner", "Reviewer", "Questioner"] {
        let got = sigbox(&root, &["--json", "poll", "--as", agent]);
        assert!(got.status.success(), "{agent}: {}", text(&got));
        let out = String::from_utf8_lossy(&got.stdout);
        assert_eq!(
            out.lines().filter(|l| l.contains(&id)).count(),
            1,
            "{agent} is given its broadcast once: {out}"
        );
        // Its real ack stands now, a regular file.
        let real = [".ack", ".ack.yaml"]
            .iter()
            .map(|ext| acks.join(format!("{agent}{ext}")))
            .filter_map(|p| std::fs::symlink_metadata(p).ok())
            .any(|m| m.is_file());
        assert!(real, "{agent} has no real ack");
        // Once only.
        let again = sigbox(&root, &["--json", "poll", "--as", agent]);
        assert!(!String::from_utf8_lossy(&again.stdout).contains(&id));
    }
    // Each planted thing is in quarantine with its reason; the file outside is untouched.
    let rejected: Vec<String> = std::fs::read_dir(root.join("rejected"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".reason.json"))
        .collect();
    assert_eq!(rejected.len(), 4, "{rejected:?}");
    let reasons: String = rejected
        .iter()
        .map(|n| std::fs::read_to_string(root.join("rejected").join(n)).unwrap())
        .collect();
    assert_eq!(
        reasons.matches("under an ack's name").count(),
        4,
        "{reasons}"
    );
    assert_eq!(std::fs::read(&outside).unwrap(), b"agent: Reviewer\n");
    let doctor = sigbox(&root, &["doctor"]);
    assert!(
        !text(&doctor).contains("does not count as"),
        "{}",
        text(&doctor)
    );
    // The quorum has acked for real now: the orchestrator's next pass archives it.
    let _ = sigbox(&root, &["--json", "poll", "--as", "Orchestrator"]);
    assert!(!root.join("inputs").join(format!("{id}.json")).exists());
}
