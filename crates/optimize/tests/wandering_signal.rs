//! PostgreSQL's transactions per CPU-second, recorded once a second for 16 minutes with nothing
//! changed (`tests/data/pg-no-change-2026-11-25.csv`; docs/optimizer.md, "Windows alike from
//! one to the next"), cut into the daemon's 8-second windows and replayed as no-change
//! sequential trials at every start: whatever such a trial decides other than neutral is false.

use perfpilot_optimize::stats::{Decision, decide, gain_independent, windows_needed};

/// The daemon's window for a counter that moves in lumps of a second: 8 lumps.
const WINDOW_S: f64 = 8.0;

/// The trace's rows: (seconds, transactions, CPU-seconds), cumulative.
fn trace() -> Vec<(f64, f64, f64)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/pg-no-change-2026-11-25.csv"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("t_s"))
        .enumerate()
        .map(|(i, l)| {
            let v: Vec<f64> = l
                .split(',')
                .map(|f| {
                    f.parse()
                        .unwrap_or_else(|e| panic!("{path}:{}: {e}", i + 5))
                })
                .collect();
            (v[0], v[1], v[2])
        })
        .collect()
}

/// Transactions per CPU-second over consecutive windows of [`WINDOW_S`].
fn windows(rows: &[(f64, f64, f64)]) -> Vec<f64> {
    let mut out = Vec::new();
    let mut start = rows[0];
    for &r in &rows[1..] {
        if r.0 - start.0 >= WINDOW_S - 0.01 {
            out.push((r.1 - start.1) / (r.2 - start.2));
            start = r;
        }
    }
    out
}

/// Decisions of no-change trials started at every window: the baseline's first 6 windows plan
/// the count a side (as the daemon does, for ±3 %, at most 30), then `before` and `after` are
/// the next windows. `plain` judges with an interval that takes the windows as independent.
fn replay(w: &[f64], plain: bool) -> (usize, usize) {
    let (mut trials, mut false_verdicts) = (0, 0);
    for start in 0..w.len() {
        let probe = &w[start..(start + 6).min(w.len())];
        if probe.len() < 6 {
            break;
        }
        let n = windows_needed(probe, 0.03, 0.95, 6, 30);
        if start + 2 * n > w.len() {
            continue;
        }
        let (before, after) = (&w[start..start + n], &w[start + n..start + 2 * n]);
        let d = if plain {
            let ci = perfpilot_stats::ratio_of_means_ci(after, before, 0.95).unwrap();
            if ci.low.exp() > 1.02 {
                Decision::Keep
            } else if ci.high.exp() < 1.0 {
                Decision::Revert
            } else {
                Decision::Neutral
            }
        } else {
            decide(&gain_independent(before, after, true, 0.95).unwrap(), 0.02)
        };
        trials += 1;
        false_verdicts += usize::from(d != Decision::Neutral);
    }
    (trials, false_verdicts)
}

#[test]
fn on_postgresqls_wandering_signal_trials_of_no_change_seldom_decide_anything() {
    let w = windows(&trace());
    assert!(w.len() > 100, "{} windows", w.len());
    // The windows wander in spells of minutes (21-23 k, then 26-28 k for eight minutes, then
    // 23-25 k): neighbours are alike.
    let rho = perfpilot_stats::serial::lag1(&[&w]).unwrap();
    assert!(rho > 0.5, "lag-1 autocorrelation {rho}");
    let (trials, plain) = replay(&w, true);
    let (same, serial) = replay(&w, false);
    assert_eq!(trials, same);
    // Taken as independent, the windows give a keep or a revert from nothing in a large share
    // of the starts; allowed for, in few.
    assert!(
        plain as f64 > 0.3 * trials as f64,
        "plain: {plain} of {trials}"
    );
    assert!(
        (serial as f64) < 0.1 * trials as f64,
        "serial: {serial} of {trials} (plain {plain})"
    );
}
