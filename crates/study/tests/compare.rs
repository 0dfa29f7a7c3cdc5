//! Two runs compared: the same winner, winners not significantly different over both runs'
//! rounds, a disagreement, two runs that contradict each other, and the paired ratio of the two
//! winners inside a run, on synthetic summaries with known answers.

use perfpilot_store::{TrialPhase, TrialRecord, TrialStatus};
use perfpilot_study::Summary;
use perfpilot_study::compare::{Agreement, compare};
use perfpilot_study::race::{Elimination, Left};

fn summary(winner: Option<&str>, tied: &[&str], left: &[(&str, Left)], higher: bool) -> Summary {
    Summary {
        goal: "maximize throughput".into(),
        unit: "requests/s".into(),
        higher_is_better: higher,
        baseline: "x".into(),
        winner: winner.map(str::to_string),
        indistinguishable: tied.iter().map(|s| s.to_string()).collect(),
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
        rounds: 5,
        racing: true,
        ..Summary::default()
    }
}

/// Race rounds 1..=5 of `x` (100 × a drift) and `y` (`shares[round − 1]` of x).
fn trials(shares: [f64; 5]) -> Vec<TrialRecord> {
    let mut out = Vec::new();
    for round in 1..=5i64 {
        let x = 100.0 * (1.0 + 0.1 * (round as f64).sin());
        let share = shares[round as usize - 1];
        for (config, value) in [("x", x), ("y", x * share)] {
            out.push(TrialRecord {
                id: 0,
                study: 1,
                phase: TrialPhase::Race,
                round,
                config: config.into(),
                factors: "{}".into(),
                status: TrialStatus::Ok,
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
    // y is 5 % behind x in every round: the interval of x / y excludes 1.
    let apart = trials([0.95; 5]);
    // y wobbles around x: the interval includes 1.
    let close = trials([0.97, 1.02, 0.99, 1.03, 0.98]);
    let same = compare(
        (1, &summary(Some("x"), &[], &[], true), &apart),
        (2, &summary(Some("x"), &["y"], &[], true), &apart),
        true,
    );
    assert_eq!(same.agreement, Agreement::SameWinner);

    // Different winners, neither run separates them (even though run 2's race dropped x).
    let tie = compare(
        (1, &summary(Some("x"), &["y"], &[], true), &close),
        (
            2,
            &summary(Some("y"), &[], &[("x", Left::Worse)], true),
            &close,
        ),
        true,
    );
    assert_eq!(tie.agreement, Agreement::NotSignificantlyDifferent);
    assert!(tie.a.holds_other && !tie.b.holds_other);
    assert_eq!(tie.b.other_left.as_ref().unwrap().kind, Left::Worse);
    let r = tie.a.ratio.expect("a paired ratio");
    assert!(r.low < 1.0 && 1.0 < r.high && r.pairs == 5, "{r:?}");
    assert!(!tie.a.separates && !tie.b.separates);
    let p = tie.pooled.expect("a pooled ratio");
    assert!(p.pairs == 10 && p.low < 1.0 && 1.0 < p.high, "{p:?}");
    assert!(!tie.contradict);

    // Run 1's rounds put x 1/0.95 above y in every round: they disagree.
    let split = compare(
        (
            1,
            &summary(Some("x"), &[], &[("y", Left::Unlikely)], true),
            &apart,
        ),
        (2, &summary(Some("y"), &["x"], &[], true), &close),
        false,
    );
    assert_eq!(split.agreement, Agreement::Disagree);
    assert!(!split.same_study);
    let r = split.a.ratio.unwrap();
    assert!((r.ratio - 1.0 / 0.95).abs() < 1e-9 && r.low > 1.0, "{r:?}");
    assert!(split.a.separates && !split.b.separates);
    // Over the ten rounds together x is still better, and the pooled ratio says it is run 1's.
    let p = split.pooled.unwrap();
    assert!(p.pairs == 10 && p.low > 1.0, "{p:?}");

    // Each run puts its own winner 1/0.95 above the other's in every round: they contradict
    // each other, and over both runs' rounds the two are not significantly different.
    let flipped = trials([1.0 / 0.95; 5]);
    let both = compare(
        (1, &summary(Some("x"), &[], &[], true), &apart),
        (2, &summary(Some("y"), &[], &[], true), &flipped),
        true,
    );
    assert!(both.a.separates && both.b.separates && both.contradict);
    assert_eq!(both.agreement, Agreement::NotSignificantlyDifferent);
    let p = both.pooled.unwrap();
    assert!(
        (p.ratio - 1.0).abs() < 1e-9 && p.low < 1.0 && p.high > 1.0,
        "{p:?}"
    );

    // Neither run separates the two alone, their rounds together do: they disagree.
    let weak = trials([0.96, 1.01, 0.97, 1.0, 0.98]);
    let together = compare(
        (1, &summary(Some("x"), &["y"], &[], true), &weak),
        (2, &summary(Some("y"), &["x"], &[], true), &weak),
        true,
    );
    assert!(!together.a.separates && !together.b.separates);
    assert_eq!(together.agreement, Agreement::Disagree);
    let p = together.pooled.unwrap();
    assert!(p.low > 1.0 && p.pairs == 10, "{p:?}");

    // Without common rounds, how the other's winner left the race decides.
    let none: Vec<TrialRecord> = Vec::new();
    let gone = compare(
        (
            1,
            &summary(Some("x"), &[], &[("y", Left::Worse)], true),
            &none,
        ),
        (2, &summary(Some("y"), &["x"], &[], true), &none),
        true,
    );
    assert_eq!(gone.agreement, Agreement::Disagree);
    assert!(gone.a.ratio.is_none() && gone.a.separates && gone.pooled.is_none());

    // Lower is better: the ratio is the other's value over the winner's.
    let low = compare(
        (1, &summary(Some("y"), &["x"], &[], false), &apart),
        (2, &summary(Some("x"), &["y"], &[], false), &apart),
        true,
    );
    let r = low.a.ratio.unwrap();
    assert!((r.ratio - 1.0 / 0.95).abs() < 1e-9, "{r:?}");
    // Run 1's winner y is lower, so better: ×1/0.95 over x in both runs' rounds.
    let p = low.pooled.unwrap();
    assert!(
        (p.ratio - 1.0 / 0.95).abs() < 1e-9 && p.pairs == 10,
        "{p:?}"
    );

    // Runs with different goals do not pool their values.
    let goals = compare(
        (1, &summary(Some("x"), &[], &[], true), &apart),
        (2, &summary(Some("y"), &[], &[], false), &apart),
        false,
    );
    assert!(
        goals.pooled.is_none() && goals.a.ratio.is_some(),
        "{goals:?}"
    );

    let no_winner = compare(
        (1, &summary(None, &[], &[], true), &apart),
        (2, &summary(Some("x"), &[], &[], true), &apart),
        true,
    );
    assert_eq!(no_winner.agreement, Agreement::NoWinner);
}

#[test]
fn a_comparison_written_before_the_cross_system_figures_still_reads() {
    let apart = trials([0.95; 5]);
    let c = compare(
        (1, &summary(Some("x"), &[], &[], true), &apart),
        (2, &summary(Some("x"), &[], &[], true), &apart),
        true,
    );
    let mut v = serde_json::to_value(&c).unwrap();
    assert!(v.as_object_mut().unwrap().remove("cross").is_some());
    let back: perfpilot_study::compare::Comparison = serde_json::from_value(v).unwrap();
    assert_eq!(back, c);
}
