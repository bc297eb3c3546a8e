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
