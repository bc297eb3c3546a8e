//! Whatever the quick reader takes, clap reads the same way; and the plain forms a checkpoint
//! runs are taken by it (else the start-up it saves is silently lost).

use std::ffi::OsString;

use clap::Parser;

use super::parse;
use crate::cli::Cli;

fn line(words: &[&str]) -> Vec<OsString> {
    std::iter::once("sigbox")
        .chain(words.iter().copied())
        .map(OsString::from)
        .collect()
}

/// `Some(debug of the Cli)` when clap reads `args`.
fn clap_reads(args: &[OsString]) -> Option<String> {
    Cli::try_parse_from(args).ok().map(|c| format!("{c:?}"))
}

/// Fails when the quick reader takes `args` and clap refuses them or reads them otherwise.
fn agrees(args: &[OsString]) -> bool {
    let Some(quick) = parse(args) else {
        return false;
    };
    let quick = format!("{quick:?}");
    match clap_reads(args) {
        Some(c) => assert_eq!(quick, c, "read otherwise than clap: {args:?}"),
        None => panic!("taken, but clap refuses it: {args:?}"),
    }
    true
}

#[test]
fn the_forms_a_checkpoint_runs_are_read_quickly_and_as_clap_reads_them() {
    for words in [
        &["poll", "--as", "Executor"][..],
        &["--root", "r", "poll", "--as", "Executor"],
        &[
            "--root=r",
            "--json",
            "poll",
            "--as=Executor",
            "--state",
            "KNOWLEDGE_APPROVAL",
        ],
        &[
            "poll",
            "--as",
            "Executor",
            "--json",
            "--root",
            "/srv/signals",
            "--max",
            "3",
        ],
        &[
            "poll",
            "--as",
            "Executor",
            "--discard",
            "-vv",
            "--settle",
            "0",
        ],
        &["--durability", "RELAXED", "poll", "--as", "Planner"],
        &["wait", "--as", "Executor", "--timeout", "30s"],
        &[
            "wait", "--as", "Planner", "--poll", "1s", "--max", "1", "--json",
        ],
        &["hook", "claude", "--as", "Executor"],
        &[
            "--root", "r", "hook", "codex", "--as", "Executor", "--state", "S",
        ],
        &[
            "hook",
            "--as",
            "Executor",
            "copilot",
            "--event",
            "preToolUse",
            "--strict",
        ],
        &[
            "hook",
            "claude",
            "--as",
            "E",
            "--pause-wait",
            "5s",
            "--pause-keep",
            "0s",
        ],
        &["hook", "claude", "--as", "E", "--permission-wait", "50s"],
        &[
            "hook",
            "claude",
            "--as",
            "E",
            "--permission-default",
            "deny",
        ],
    ] {
        // Skipped only where the environment changes what clap reads.
        if words[0] == "hook" && std::env::var_os("SIGBOX_PERMISSION_DEFAULT").is_some() {
            continue;
        }
        assert!(agrees(&line(words)), "not read quickly: {words:?}");
    }
}

#[test]
fn what_clap_would_refuse_or_read_otherwise_is_left_to_clap() {
    for words in [
        &[][..],
        &["poll"],
        &["poll", "--as"],
        &["poll", "--as", "--json"],
        &["poll", "--as", "-x"],
        &["poll", "--as", ""],
        &["poll", "--as", "A", "--as", "B"],
        &["--json", "poll", "--as", "A", "--json"],
        &["poll", "--as", "A", "extra"],
        &["poll", "--as", "A", "--"],
        &["poll", "--as", "A", "--help"],
        &["poll", "--as", "A", "-h"],
        &["--version", "poll", "--as", "A"],
        &["poll", "--as", "A", "--max", "0"],
        &["poll", "--as", "A", "--max", "+1"],
        &["poll", "--as", "A", "--max", "99999999999999999999999"],
        &["poll", "--as", "A", "--timeout", "1s"],
        &["poll", "--as", "A", "--discard=true"],
        &["poll", "--as", "A", "--json=1"],
        &["poll", "--as", "A", "--settle", "2 hours"],
        &["poll", "--as", "A", "--durability", "fast"],
        &["pol", "--as", "A"],
        &["wait", "--as", "A", "--timeout", "soon"],
        &["hook", "--as", "A"],
        &["hook", "claude", "codex", "--as", "A"],
        &["hook", "Claude", "--as", "A"],
        &[
            "hook",
            "claude",
            "--as",
            "A",
            "--permission-default",
            "Allow",
        ],
        &["hook", "claude", "--as", "A", "--pause-wait", "-1s"],
        &["send", "steer", "m", "--target", "A"],
        &["ui"],
        &["-x", "poll", "--as", "A"],
        &["-vx", "poll", "--as", "A"],
        &["--verbose", "wait", "--as", "A", "-v"],
    ] {
        let args = line(words);
        assert!(parse(&args).is_none(), "taken, should be clap's: {words:?}");
    }
    // Not UTF-8: clap's to refuse.
    use std::os::unix::ffi::OsStringExt;
    let mut args = line(&["poll", "--as"]);
    args.push(OsString::from_vec(vec![b'A', 0xff]));
    assert!(parse(&args).is_none());
}

/// Random command lines from the words these commands use, well formed or not: every one the
/// quick reader takes, clap reads the same way.
#[test]
fn on_thousands_of_random_lines_the_quick_reader_never_differs_from_clap() {
    const WORDS: &[&str] = &[
        "poll",
        "wait",
        "hook",
        "send",
        "ls",
        "claude",
        "codex",
        "copilot",
        "Claude",
        "--as",
        "--as=Executor",
        "--as=",
        "Executor",
        "Planner",
        "Orchestrator",
        "--state",
        "S",
        "--max",
        "1",
        "0",
        "7",
        "-3",
        "--discard",
        "--discard=yes",
        "--timeout",
        "1s",
        "500ms",
        "2m",
        "soon",
        "--poll",
        "10ms",
        "--json",
        "--json=true",
        "--root",
        "--root=r",
        "r",
        "/tmp/x",
        "--settle",
        "0",
        "2s",
        "1h",
        "2h",
        "--durability",
        "durable",
        "Relaxed",
        "fast",
        "-v",
        "-vv",
        "-vvv",
        "--verbose",
        "-h",
        "--help",
        "-V",
        "--version",
        "--",
        "-",
        "",
        "--event",
        "Stop",
        "--strict",
        "--pause-wait",
        "--pause-keep",
        "25s",
        "--permission-wait",
        "--permission-default",
        "allow",
        "deny",
        "prompt",
        "Allow",
        "--unknown",
        "--as=-x",
        "x=y",
        "--max=2",
        "--timeout=5s",
        "--state=",
        "--=x",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut taken = 0;
    let heads: &[&[&str]] = &[
        &["poll", "--as", "Executor"],
        &["wait", "--as", "Executor"],
        &["hook", "claude", "--as", "Executor"],
        &[],
    ];
    for _ in 0..20_000 {
        let mut words: Vec<&str> = heads[next(heads.len())].to_vec();
        for _ in 0..next(7) {
            let w = WORDS[next(WORDS.len())];
            let at = next(words.len() + 1);
            words.insert(at, w);
        }
        if agrees(&line(&words)) {
            taken += 1;
        }
    }
    // The comparison means something only if many lines were taken.
    assert!(taken > 2_000, "only {taken} of 20,000 lines taken");
}
