//! A printing command whose reader has gone away (`perfpilot tunables --list | head -1`) ends
//! quietly, as other Unix tools do: killed by SIGPIPE, with no panic and no backtrace.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

#[test]
fn a_command_whose_reader_closed_the_pipe_ends_by_sigpipe_without_a_panic() {
    let state = std::env::temp_dir().join(format!("perfpilot-closed-pipe-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(["tunables", "--list", "--state-dir"])
        .arg(&state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("perfpilot starts");
    // Close the read end before the command prints its first line.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("perfpilot ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(13), "{:?} {stderr}", out.status);
    let _ = std::fs::remove_dir_all(&state);
}
