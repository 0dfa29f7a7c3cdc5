//! `perfpilot bench verdicts` run as a process: the recorded PostgreSQL traces replayed (one
//! server, and two judged one against the other), and a trace it cannot read.

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
fn a_design_replayed_with_a_true_effect_prints_its_tally_as_json() {
    let out = verdicts(&[
        "crates/optimize/tests/data/redis-no-change-2026-11-25.csv".as_ref(),
        "--window".as_ref(),
        "2".as_ref(),
        "--design".as_ref(),
        "switchback".as_ref(),
        "--effect".as_ref(),
        "1.1".as_ref(),
        "--stride".as_ref(),
        "10".as_ref(),
        "--json".as_ref(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert!(n("trials") > 20, "{v}");
    assert_eq!(n("reverted"), 0, "{v}");
    assert!(n("kept") as f64 > 0.8 * n("trials") as f64, "{v}");
    assert_eq!(
        n("trials"),
        n("kept") + n("kept_no_harm") + n("reverted") + n("neutral")
    );
    assert!(
        v["median_decision_s"].as_f64().is_some_and(|s| s > 0.0),
        "{v}"
    );
}

/// The control design replayed over the two PostgreSQL clusters recorded side by side, with a
/// true effect `effect`: its tally.
fn controlled_pair(effect: &str) -> serde_json::Value {
    let out = verdicts(&[
        "crates/optimize/tests/data/pg-pair-no-change-2026-11-29.csv".as_ref(),
        "--control".as_ref(),
        "crates/optimize/tests/data/pg-pair-control-2026-11-29.csv".as_ref(),
        "--window".as_ref(),
        "8".as_ref(),
        "--design".as_ref(),
        "control".as_ref(),
        "--effect".as_ref(),
        effect.as_ref(),
        "--json".as_ref(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn two_postgresql_clusters_judged_one_against_the_other_seldom_claim_and_keep_a_true_gain_within_five_minutes()
 {
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    // Nothing changed: few claims (a no-harm keep is none), though each cluster alone wandered.
    let none = controlled_pair("1");
    assert!(n(&none, "trials") >= 100, "{none}");
    assert!(
        n(&none, "decided_no_change") as f64 <= 0.05 * n(&none, "trials") as f64,
        "{none}"
    );
    // A true ×1.08 on huge pages that stay: kept (the gain, or no harm), none reverted, and
    // the verdict within the time bound.
    let gain = controlled_pair("1.08");
    assert_eq!(n(&gain, "reverted"), 0, "{gain}");
    assert!(
        (n(&gain, "kept") + n(&gain, "kept_no_harm")) as f64 >= 0.8 * n(&gain, "trials") as f64,
        "{gain}"
    );
    assert!(
        gain["median_decision_s"]
            .as_f64()
            .is_some_and(|s| s <= 300.0),
        "{gain}"
    );
}

#[test]
fn an_unknown_design_or_a_control_design_without_a_control_trace_is_refused_with_the_choices() {
    let trace = "crates/optimize/tests/data/redis-no-change-2026-11-25.csv";
    let out = verdicts(&[trace.as_ref(), "--design".as_ref(), "latin".as_ref()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--design latin: not a design; one of switchback, control"),
        "{err}"
    );
    let out = verdicts(&[trace.as_ref(), "--design".as_ref(), "control".as_ref()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--design control needs --control TRACE"),
        "{err}"
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
