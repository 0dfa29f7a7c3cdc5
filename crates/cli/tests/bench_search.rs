//! `perfpilot bench search` run as a process: one seed of the known-answer bed through the
//! study runner, its study file, and a budget it cannot read.

use std::process::{Command, Output};

/// `perfpilot bench search ARGS…`.
fn search(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(["bench", "search"])
        .args(args)
        .output()
        .expect("runs the perfpilot binary")
}

#[test]
fn one_seed_prints_its_choice_against_the_true_best_within_a_tenth_of_the_exhaustive_trials() {
    let out = search(&["--seeds", "1", "--first-seed", "5"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with("known-answer bed: 2500 configurations; best instances=2 threads=5"),
        "{text}"
    );
    assert!(
        text.contains("budget 1250 trials; an exhaustive run with 5 repetitions takes 12500"),
        "{text}"
    );
    // The row of seed 5: its share of the best, its rank, its trials, the best it raced and
    // the trials of its choice (computed from the seed, so the same on any machine). Seed 5
    // chooses the best: the model's per-parameter length scales lead the search to race it and
    // the final selection keeps it (docs/study-file.md has the history of this row).
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.trim_start().starts_with("5 "))
        .unwrap_or_else(|| panic!("no row for seed 5: {text}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[1..3], ["100.0%", "1"], "{text}");
    let trials: usize = row[3].parse().expect("a trial count");
    assert!((1..=1250).contains(&trials), "{text}");
    assert_eq!(row[7], "100.0%", "{text}");
    let chosen: usize = row[8].parse().expect("the chosen one's trials");
    // The final selection gives its choice dozens of rounds.
    assert!((30..=trials).contains(&chosen), "{text}");
    assert!(
        text.contains("within 2 % of the best: 1 of 1 seeds"),
        "{text}"
    );
}

#[test]
fn the_bed_s_study_file_is_printed_and_a_budget_it_cannot_read_is_refused_in_words() {
    let out = search(&["--print-study"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("method = \"iterated\""), "{text}");
    assert!(text.contains("instances * threads > 32"), "{text}");

    let out = search(&["--budget", "lots"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("give trials (1250) or a share (\"10%\")"),
        "{err}"
    );
}
