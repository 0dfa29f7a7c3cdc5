use super::*;

fn gain(ratio: f64, lo: f64, hi: f64) -> Gain {
    Gain {
        ratio,
        ci_low: lo,
        ci_high: hi,
        confidence: 0.95,
        serial: 0.0,
    }
}

fn rule() -> OneWayRule {
    OneWayRule {
        harm_bound: 0.02,
        windows_cap: 20,
        prior: None,
        drift_floor: 0.03,
        within_s: 300.0,
        history: Vec::new(),
    }
}

#[test]
fn an_unresolved_gain_that_rules_out_a_loss_past_the_bound_is_kept_as_no_harm_and_only_that() {
    let r = rule();
    assert_eq!(
        r.decide(&gain(1.07, 0.99, 1.16), 0.02),
        (Decision::Keep, Shown::NoHarm { bound: 0.02 })
    );
    assert_eq!(
        r.decide(&gain(1.10, 1.05, 1.16), 0.02),
        (Decision::Keep, Shown::Effect)
    );
    assert_eq!(
        r.decide(&gain(1.02, 0.95, 1.10), 0.02),
        (Decision::Neutral, Shown::Effect)
    );
    assert_eq!(
        r.decide(&gain(0.9, 0.85, 0.97), 0.02),
        (Decision::Revert, Shown::Effect)
    );
}

#[test]
fn earlier_verdicts_of_the_same_change_narrow_the_interval_toward_them() {
    let earlier = [
        gain(1.09, 1.00, 1.19),
        gain(1.10, 0.98, 1.24),
        gain(1.08, 1.01, 1.15),
    ];
    let prior = Prior::from_gains(&earlier, "large_pages on postgresql", 0.03).unwrap();
    assert_eq!(prior.verdicts, 3);
    let r = OneWayRule {
        prior: Some(prior),
        ..rule()
    };
    let g = r.with_prior(gain(1.05, 0.95, 1.16));
    assert!(g.ratio > 1.05 && g.ratio < 1.09, "{g:?}");
    assert!(g.ci_high - g.ci_low < 0.21, "{g:?}");
    assert!(Prior::from_gains(&earlier[..1], "x", 0.03).is_none());
}

#[test]
fn the_cap_fits_both_sides_and_the_change_in_the_time_bound() {
    // 300 s, 40 s of collapsing, windows of 8 s: (300 − 40) / 8 / 2 = 16.
    assert_eq!(windows_cap(300.0, 40.0, 8.0, 6), 16);
    assert_eq!(
        windows_cap(60.0, 40.0, 8.0, 6),
        6,
        "never below the minimum"
    );
}

#[test]
fn the_watch_after_a_verdict_ends_an_action_whose_later_windows_show_a_loss() {
    let base = vec![100.0, 101.0, 99.0, 100.0, 100.5, 99.5];
    let mut w = Watch::new(base.clone(), true, 12, 6, 0.95);
    for v in [100.0, 99.0, 101.0, 100.0, 100.0] {
        assert_eq!(w.record(v), WatchStep::Continue);
    }
    assert_eq!(
        w.record(100.5),
        WatchStep::Continue,
        "no loss at the first look"
    );
    for v in [90.0, 89.0, 91.0, 90.0, 90.5] {
        assert_eq!(w.record(v), WatchStep::Continue);
    }
    let WatchStep::Harm(g) = w.record(90.0) else {
        panic!("a loss")
    };
    assert!(g.ci_high < 1.0, "{g:?}");
    let mut quiet = Watch::new(base, true, 6, 6, 0.95);
    let steps: Vec<WatchStep> = (0..6).map(|_| quiet.record(100.0)).collect();
    assert_eq!(steps.last(), Some(&WatchStep::Done));
}

#[test]
fn a_workload_that_steps_by_a_fifth_on_its_own_shows_it_in_its_history_and_the_step_is_not_kept() {
    // Sixteen windows a side, each side inside one spell of its own: 100 before the change,
    // 120 after it, with nothing changed; a little noise within each.
    let wobble = |i: usize| [0.0, 0.6, -0.4, 0.3, -0.5, 0.2][i % 6];
    let off: Vec<f64> = (0..16).map(|i| 100.0 + wobble(i)).collect();
    let on: Vec<f64> = (0..16).map(|i| 120.0 + 1.2 * wobble(i + 3)).collect();
    let g = gain::gain_sequential(&off, &on, true, 0.95).expect("a gain");
    // Its own sides say nothing of the spells: kept.
    let r = rule();
    assert_eq!(r.decide(&r.judge(g, &off, &on), 0.02).0, Decision::Keep);
    // Watched before the trial, the same workload stepped between 100 and 120 every sixteen
    // windows: over a trial's span it moves by as much on its own, so the step is not a gain.
    let history: Vec<f64> = (0..64)
        .map(|i| if (i / 16) % 2 == 0 { 120.0 } else { 100.0 } + wobble(i))
        .collect();
    let watched = OneWayRule { history, ..rule() };
    let judged = watched.judge(g, &off, &on);
    assert!(judged.ci_low < 1.0, "{judged:?}");
    assert_eq!(watched.decide(&judged, 0.02).0, Decision::Neutral);
    // A history as calm as the sides leaves the verdict as it was.
    let calm: Vec<f64> = (0..64).map(|i| 100.0 + wobble(i)).collect();
    let calm_rule = OneWayRule {
        history: calm,
        ..rule()
    };
    assert_eq!(
        calm_rule.decide(&calm_rule.judge(g, &off, &on), 0.02).0,
        Decision::Keep
    );
}
