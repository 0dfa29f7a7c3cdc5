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
        no_harm: Some(0.02),
        windows_cap: 20,
        prior: None,
        within_s: 300.0,
    }
}

#[test]
fn an_unresolved_gain_that_rules_out_a_loss_past_the_bound_is_kept_as_no_harm_and_only_that() {
    assert_eq!(
        decide(&gain(1.07, 0.99, 1.16), 0.02, 0.02),
        (Decision::Keep, Shown::NoHarm { bound: 0.02 })
    );
    assert_eq!(
        decide(&gain(1.10, 1.05, 1.16), 0.02, 0.02),
        (Decision::Keep, Shown::Effect)
    );
    assert_eq!(
        decide(&gain(1.02, 0.95, 1.10), 0.02, 0.02),
        (Decision::Neutral, Shown::Effect)
    );
    assert_eq!(
        decide(&gain(0.9, 0.85, 0.97), 0.02, 0.02),
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
