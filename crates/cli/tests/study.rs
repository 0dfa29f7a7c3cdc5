//! `perfpilot study validate` on the examples and on a bad study file.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn validate_prints_trials_and_duration() {
    let out = Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(["study", "validate", "examples/studies/scoring-quick.toml"])
        .current_dir(repo())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("4 configuration(s)"), "{stdout}");
    assert!(stdout.contains("trials: at most 26"), "{stdout}");
    assert!(
        stdout.contains("estimated duration: at most 3m"),
        "{stdout}"
    );
}

#[test]
fn validate_names_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("perfpilot-study-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(
        &f,
        "[deployment]\ncommand = \"app --port {port} --x {nope}\"\n[load]\nurl = \"http://127.0.0.1:{port}/\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(["study", "validate"])
        .arg(&f)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.toml:2: deployment.command: unknown placeholder {nope}"),
        "{stderr}"
    );
    // An input error is a message, not a backtrace, even with RUST_BACKTRACE set.
    assert!(!stderr.contains("backtrace"), "{stderr}");

    // Comparing runs a store does not hold names the store and the run. (`tunables -o` makes a
    // store without runs; a missing store is refused as nothing there, in tests/nothing_there.rs.)
    let state = dir.join("state");
    let made = Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(["tunables", "-o", "windows=4", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let store = state.join("perfpilot.db");
    let out = Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(["study", "compare", "1", "2", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("perfpilot.db") && stderr.contains("run 1"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
