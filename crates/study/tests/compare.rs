//! Two runs compared: the same winner, winners neither run can tell apart, a disagreement, and
//! the paired ratio of the two winners inside a run, on synthetic summaries with known answers.

use perfpilot_store::TrialRecord;
use perfpilot_study::compare::{Agreement, compare};
use perfpilot_study::runner::{Elimination, Left, Summary};

fn summary(winner: Option<&str>, tied: &[&str], left: &[(&str, Left)], higher: bool) -> Summary {
    Summary {
        goal: "maximize throughput".into(),
        unit: "requests/s".into(),
        higher_is_better: higher,
        baseline: "x".into(),
        winner: winner.map(str::to_string),
        indistinguishable: tied.iter().map(|s| s.to_string()).collect(),
        chance_best: Vec::new(),
        gain: None,
        gain_p_value: None,
        verdict: String::new(),
        configurations: Vec::new(),
        eliminated: left
            .iter()
            .map(|(c, kind)| Elimination {
                config: c.to_string(),
                round: 5,
                reason: format!("{kind:?}"),
                p_value: None,
                kind: *kind,
            })
            .collect(),
        infeasible: Vec::new(),
        warnings: Vec::new(),
        rounds: 5,
        trials_run: 0,
        elapsed_s: 0.0,
        racing: true,
    }
}

/// Race rounds 1..=5 of `x` (100 × a drift) and `y` (`share` of x).
fn trials(share: f64) -> Vec<TrialRecord> {
    let mut out = Vec::new();
    for round in 1..=5i64 {
        let x = 100.0 * (1.0 + 0.1 * (round as f64).sin());
        for (config, value) in [("x", x), ("y", x * share)] {
            out.push(TrialRecord {
                id: 0,
                study: 1,
                phase: "race".into(),
                round,
                config: config.into(),
                factors: "{}".into(),
                status: "ok".into(),
                reason: String::new(),
                value: Some(value),
                measurement: None,
                detail: "{}".into(),
                created_ms: 0,
            });
        }
    }
    out
}

#[test]
fn two_runs_agree_tie_or_disagree() {
    let t = trials(0.95);
    let same = compare(
        (1, &summary(Some("x"), &[], &[], true), &t),
        (2, &summary(Some("x"), &["y"], &[], true), &t),
        true,
    );
    assert_eq!(same.agreement, Agreement::SameWinner);

    // Each run counts the other's winner among those it cannot tell from its own.
    let tie = compare(
        (1, &summary(Some("x"), &["y"], &[], true), &t),
        (
            2,
            &summary(Some("y"), &["x"], &[("z", Left::Worse)], true),
            &t,
        ),
        true,
    );
    assert_eq!(tie.agreement, Agreement::NotSignificantlyDifferent);
    assert!(tie.a.holds_other && tie.b.holds_other);
    // Inside run 1, x is 1/0.95 of y in every round.
    let r = tie.a.ratio.expect("a paired ratio");
    assert!((r.ratio - 1.0 / 0.95).abs() < 1e-9 && r.pairs == 5, "{r:?}");
    assert!(r.low <= r.ratio && r.ratio <= r.high);

    // Run 1 found run 2's winner unlikely to be the best: they disagree, and say how.
    let apart = compare(
        (
            1,
            &summary(Some("x"), &[], &[("y", Left::Unlikely)], true),
            &t,
        ),
        (2, &summary(Some("y"), &["x"], &[], true), &t),
        false,
    );
    assert_eq!(apart.agreement, Agreement::Disagree);
    assert!(!apart.same_study);
    assert_eq!(apart.a.other_left.as_ref().unwrap().kind, Left::Unlikely);
    assert!(apart.b.holds_other && apart.b.other_left.is_none());

    // Lower is better: the ratio is the other's value over the winner's.
    let low = compare(
        (1, &summary(Some("y"), &["x"], &[], false), &t),
        (2, &summary(Some("x"), &["y"], &[], false), &t),
        true,
    );
    let r = low.a.ratio.unwrap();
    assert!((r.ratio - 1.0 / 0.95).abs() < 1e-9, "{r:?}");

    let none = compare(
        (1, &summary(None, &[], &[], true), &t),
        (2, &summary(Some("x"), &[], &[], true), &t),
        true,
    );
    assert_eq!(none.agreement, Agreement::NoWinner);
}
