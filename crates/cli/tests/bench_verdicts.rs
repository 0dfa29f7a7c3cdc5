//! `perfpilot bench verdicts` run as a process: the recorded PostgreSQL trace replayed, and a
//! trace it cannot read.

use std::path::PathBuf;
use std::process::{Command, Output};

/// `perfpilot bench verdicts ARGS…` run from the repository's root.
fn verdicts(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .args(["bench", "verdicts"])
        .args(args)
        .output()
        .expect("runs the perfpilot binary")
}

#[test]
fn the_postgresql_trace_replays_into_the_two_counts_of_false_verdicts() {
    let out = verdicts(&["crates/optimize/tests/data/pg-no-change-2026-11-25.csv".as_ref()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("lag-1 autocorrelation 0.8"), "{text}");
    assert!(
        text.contains("taking the windows as independent: 34 of 79 decided something"),
        "{text}"
    );
    assert!(
        text.contains("(the daemon's): 4 of 79 decided something"),
        "{text}"
    );
}

#[test]
fn a_trace_row_it_cannot_read_is_named_with_its_line_and_the_format() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let path = dir.path().join("trace.csv");
    std::fs::write(&path, "t_s,counter,cpu_s\n0,0,0\n1,100\n").expect("writes the trace");
    let out = verdicts(&[path.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("trace.csv:3: 2 fields, not 3") && err.contains("seconds,counter,cpu_seconds"),
        "{err}"
    );
}
