//! Guards the README: its 60-second tour runs as written, and every command in it succeeds.

use std::path::Path;
use std::process::Command;

#[test]
fn the_readme_tour_runs_as_written() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let after = readme.split_once("<!-- tour:").expect("tour marker").1;
    let block = after
        .split_once("```sh\n")
        .expect("tour block")
        .1
        .split_once("```")
        .expect("end of tour block")
        .0;
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_sigbox")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{block}"))
        .env("PATH", path)
        .env_remove("SIGBOX_ROOT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tour failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What the comments promise.
    assert!(stdout.contains("\"type\":\"STEER\""), "{stdout}");
    assert!(stdout.contains("PAUSE   Executor     pause"), "{stdout}");
    assert!(stdout.contains("healthy"), "{stdout}");
}

/// Every other block marked `<!-- run: ... -->` runs as written in a fresh directory, with
/// sigbox on PATH, and succeeds.
#[test]
fn every_marked_readme_block_runs_on_a_fresh_directory() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_sigbox")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let blocks: Vec<&str> = readme
        .split("<!-- run:")
        .skip(1)
        .map(|after| {
            after
                .split_once("```sh\n")
                .expect("a sh block after the marker")
                .1
                .split_once("```\n")
                .expect("end of block")
                .0
        })
        .collect();
    assert!(blocks.len() >= 2, "the marked blocks: {}", blocks.len());
    for block in blocks {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("set -euo pipefail\n{block}"))
            .current_dir(dir.path())
            .env("PATH", &path)
            .env_remove("SIGBOX_ROOT")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "block failed:\n{block}\nstderr: {}\nstdout: {}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
