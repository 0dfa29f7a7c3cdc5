//! A printing command whose reader has gone away (`perfpilot tunables --list | head -1`) ends
//! quietly, as other Unix tools do: killed by SIGPIPE, with no panic and no backtrace.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

#[test]
fn a_command_whose_reader_closed_the_pipe_ends_by_sigpipe_without_a_panic() {
    let state = std::env::temp_dir().join(format!("perfpilot-closed-pipe-{}", std::process::id()));
    // The read end is closed before the command starts, so its first write meets a closed pipe;
    // closing it after spawn raced the command, which could fill the pipe buffer and exit 0.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(["tunables", "--list", "--state-dir"])
        .arg(&state)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("perfpilot runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(13), "{:?} {stderr}", out.status);
    let _ = std::fs::remove_dir_all(&state);
}
