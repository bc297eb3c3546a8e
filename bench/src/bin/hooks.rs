//! `sigbox hook` as a coding agent runs it: a whole process per tool call. Prints, measured
//! in the same run and interleaved: the hook on an empty inbox beside an `ls` process of
//! `inputs/` (the cheapest look a hook could take), both called as a runtime calls a hook (the
//! event written to stdin, stdout read to the end), and the answer's size for one STEER (paid
//! in tokens).
//!
//! Usage: `cargo build --release -p sigbox-client -p sigbox-bench && ./target/release/hooks [DIR]`

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use sigbox::{Mailbox, NewSignal, SignalType, Target};
use sigbox_bench::{paired, row, sigbox_bin, workdir};

const EVENT: &[u8] = br#"{"session_id":"abc123","transcript_path":"/tmp/t.jsonl","cwd":"/tmp","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}"#;

/// One hook call, a whole process, the event on stdin; its stdout.
fn hook(bin: &Path, root: &Path) -> Vec<u8> {
    let out = call(
        Command::new(bin)
            .arg("--root")
            .arg(root)
            .args(["hook", "claude", "--as", "Executor"]),
    );
    assert!(out.status.success(), "hook failed");
    out.stdout
}

/// Runs `cmd` as a coding agent runs a hook: the event written to its stdin, its stdout read
/// to the end. The baseline is spawned the same way, so that the pipes and the write are in
/// both figures and the ratio is the process's own (a program that exits without reading its
/// stdin leaves the write a broken pipe, which is not an error here).
fn call(cmd: &mut Command) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    if let Err(e) = child.stdin.take().unwrap().write_all(EVENT) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

/// How `bin` is linked and its size: a program with an interpreter (ELF `PT_INTERP`) starts
/// through the dynamic loader; one without (`cargo ship`) does not.
fn linkage(bin: &Path) -> String {
    let elf = std::fs::read(bin).unwrap();
    if elf.len() < 0x40 || &elf[..5] != b"\x7fELF\x02" {
        return "not a 64-bit ELF program: linkage not read".into();
    }
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([elf[at], elf[at + 1]]));
    let phoff = usize::try_from(u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap())).unwrap();
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    let interp = (0..count).any(|i| {
        let at = phoff + i * size;
        u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == 3
    });
    let how = if interp {
        "dynamically linked (`cargo build --release`)"
    } else {
        "statically linked (`cargo ship`)"
    };
    format!("{how}, {:.1} MB", elf.len() as f64 / 1e6)
}

fn main() {
    let (_, tmp) = workdir("sigbox-bench-hooks-");
    let root = tmp.path().join("signals");
    let mb = Mailbox::init(&root).unwrap();
    let bin = sigbox_bin();
    let inputs = root.join("inputs");
    let (ls, hk) = paired(
        300,
        20,
        || {
            assert!(call(Command::new("ls").arg(&inputs)).status.success());
        },
        || {
            let out = hook(&bin, &root);
            assert!(out.is_empty(), "an empty inbox answers nothing");
        },
    );
    println!("`{}`: {}\n", bin.display(), linkage(&bin));
    println!("| operation | baseline p50 / p99 | sigbox p50 / p99 | ratio p50 / p99 | target |");
    println!("|---|---|---|---|---|");
    row(
        "`sigbox hook claude` on an empty inbox (whole process, PreToolUse event) vs an `ls` process of inputs/ called the same way (event on stdin, stdout read)",
        ls,
        hk,
        "p50 <= 1.2x",
    );
    mb.send(
        NewSignal::new(SignalType::Steer)
            .target(Target::Agent("Executor".into()))
            .message("use the v2 API")
            .from("alice"),
    )
    .unwrap();
    let answer = hook(&bin, &root);
    println!();
    println!(
        "answer for one STEER (\"use the v2 API\", from alice): {} bytes: {}",
        answer.len(),
        String::from_utf8_lossy(&answer).trim_end()
    );
}
