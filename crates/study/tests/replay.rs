//! Racing replayed on a synthetic exhaustive run with known answers: clear losers leave after
//! the first test, a near-equal runner-up leaves as equivalent, and the race picks the
//! exhaustive winner on a fraction of the trials in every round order.

use std::path::Path;

use perfpilot_store::{Store, TrialPhase, TrialRecord, TrialStatus};
use perfpilot_study::race::Left;
use perfpilot_study::replay::{ReplayOptions, replay_run};
use perfpilot_study::{Budget, Study};

const STUDY: &str = r#"
name = "synthetic"

[deployment]
command = "app --port {port} --variant {variant}"
ready = { tcp = true }

[load]
url = "http://127.0.0.1:{port}/"

[objective]
goal = "maximize throughput"
min_effect = 0.05

[factors]
variant = [1, 2, 3, 4, 5, 6]

[run]
repetitions = 10
min_rounds = 3
"#;

/// Throughput of variant `v` in `round`: variant means 100, 97, 90, 80, 70, 60, a machine
/// drift shared by the round (±20 %) and a ±0.5 % per-trial wobble.
fn value(v: usize, round: i64) -> f64 {
    let means = [100.0, 97.0, 90.0, 80.0, 70.0, 60.0];
    let drift = 1.0 + 0.2 * (round as f64 * 1.3).sin();
    let wobble = 1.0 + 0.005 * ((v as f64 * 7.1 + round as f64 * 3.7).sin());
    means[v] * drift * wobble
}

/// A successful race trial.
fn trial(run: i64, round: i64, config: String, value: f64) -> TrialRecord {
    TrialRecord {
        id: 0,
        study: run,
        phase: TrialPhase::Race,
        round,
        config,
        factors: "{}".into(),
        status: TrialStatus::Ok,
        reason: String::new(),
        value: Some(value),
        measurement: None,
        detail: "{}".into(),
        created_ms: 0,
    }
}

fn stored_run(store: &mut Store, study: &Study, rounds: &[i64]) -> i64 {
    let run = store
        .study_begin("synthetic", "synthetic.toml", STUDY, "{}")
        .unwrap();
    for (v, c) in study.configurations().iter().enumerate() {
        for &round in rounds {
            store
                .trial_add(&trial(run, round, c.key(), value(v, round)))
                .unwrap();
        }
    }
    run
}

#[test]
fn a_replayed_race_picks_the_exhaustive_winner_on_fewer_trials() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("s.db")).unwrap();
    let study = Study::parse(STUDY, Path::new("synthetic.toml")).unwrap();
    let keys: Vec<String> = study.configurations().iter().map(|c| c.key()).collect();
    let rounds: Vec<i64> = (1..=10).collect();
    let run = stored_run(&mut store, &study, &rounds);
    let opts = ReplayOptions {
        orders: 50,
        seed: 3,
        ..ReplayOptions::default()
    };
    let r = replay_run(&store, run, &opts).unwrap();
    assert_eq!(r.exhaustive_trials, 60);
    assert_eq!(r.rounds, 10);
    assert_eq!(r.exhaustive_winner.as_deref(), Some(keys[0].as_str()));
    // It leads every round by far: a bootstrap of the rounds always picks it.
    assert_eq!(r.exhaustive_chance_best, vec![(keys[0].clone(), 1.0)]);
    // Every block ranks the variants alike: the exhaustive run tells all of them apart.
    assert!(
        r.exhaustive_not_worse.is_empty(),
        "{:?}",
        r.exhaustive_not_worse
    );
    let first = &r.stored_order;
    assert_eq!(first.winner.as_deref(), Some(keys[0].as_str()));
    // After round 3 the variants 30 % and 40 % behind are far behind (beyond run.far_behind,
    // 20 %), the one 20 % behind is that or worse by the rank test, the one 10 % behind is
    // worse (ranks agree in every round), and variant 2 (3 % behind, ±0.5 % noise) is worse
    // too or equivalent within 5 %.
    assert!(first.left.iter().all(|e| e.round == 3), "{:?}", first.left);
    assert_eq!(first.left.len(), 5, "{:?}", first.left);
    for e in &first.left[..] {
        let kind = e.kind;
        match keys.iter().position(|k| *k == e.config) {
            Some(1) => assert!(matches!(kind, Left::Worse | Left::Equivalent), "{e:?}"),
            Some(2) => assert_eq!(kind, Left::Worse, "{e:?}"),
            Some(3) => assert!(matches!(kind, Left::Worse | Left::FarBehind), "{e:?}"),
            Some(4 | 5) => assert_eq!(kind, Left::FarBehind, "{e:?}"),
            _ => panic!("the winner left: {e:?}"),
        }
    }
    assert_eq!(first.trials, 18);
    assert_eq!(r.orders, 50);
    assert_eq!(r.same_winner, 50);
    assert_eq!(r.acceptable_winner, 50);
    assert_eq!((r.winner_share_mean, r.winner_share_min), (1.0, 1.0));
    assert_eq!((r.trials_min, r.trials_max), (18, 18));

    // Without the first rank test until round 6 the race spends more, though the far-behind
    // rule still acts at round 3.
    let late = replay_run(
        &store,
        run,
        &ReplayOptions {
            min_rounds: Some(6),
            ..opts.clone()
        },
    )
    .unwrap();
    // Rounds 1–3: six variants; 4–6: four (those 30 % and 40 % behind left at round 3).
    assert_eq!(
        late.stored_order.trials,
        18 + 3 * 4,
        "{:?}",
        late.stored_order
    );
    let far: Vec<(usize, Left)> = late
        .stored_order
        .left
        .iter()
        .filter(|e| e.round == 3)
        .map(|e| (e.round, e.kind))
        .collect();
    assert_eq!(far, vec![(3, Left::FarBehind); 2]);
    assert_eq!(late.same_winner, 50);
}

/// A stored exhaustive run of two variants over rounds 1..=10, `value(round, variant)` each;
/// the store lives in the returned directory.
fn two_variants(value: impl Fn(i64, usize) -> f64) -> (tempfile::TempDir, Store, i64, Vec<String>) {
    two_variants_for("maximize throughput", value)
}

/// [`two_variants`] for another goal.
fn two_variants_for(
    goal: &str,
    value: impl Fn(i64, usize) -> f64,
) -> (tempfile::TempDir, Store, i64, Vec<String>) {
    let text = STUDY
        .replace("variant = [1, 2, 3, 4, 5, 6]", "variant = [1, 2]")
        .replace("maximize throughput", goal);
    let study = Study::parse(&text, Path::new("synthetic.toml")).unwrap();
    let keys: Vec<String> = study.configurations().iter().map(|c| c.key()).collect();
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("s.db")).unwrap();
    let run = store
        .study_begin("synthetic", "synthetic.toml", &text, "{}")
        .unwrap();
    for round in 1..=10i64 {
        for (v, k) in keys.iter().enumerate() {
            store
                .trial_add(&trial(run, round, k.clone(), value(round, v)))
                .unwrap();
        }
    }
    (dir, store, run, keys)
}

#[test]
fn close_variants_leave_as_equivalent_not_worse() {
    // Variant 1 is 1.2 % above or below variant 2, flipping from round to round: no rank test
    // can separate them, but the ratio's interval falls inside ±5 % and, with
    // run.drop_equivalent, the runner-up leaves as equivalent as soon as a distribution-free
    // 90 % interval exists (round 5).
    let (_dir, store, run, _) = two_variants(|round, v| {
        let drift = 1.0 + 0.2 * (round as f64 * 1.3).sin();
        let flip = if round % 2 == 0 { 0.012 } else { -0.012 };
        100.0 * drift * (1.0 + if v == 0 { flip } else { 0.0 })
    });
    let opts = ReplayOptions {
        orders: 1,
        seed: 1,
        drop_equivalent: Some(true),
        // The expected-loss stop would end this near-tie too (tested on its own below).
        stop_loss: Some(0.0),
        ..ReplayOptions::default()
    };
    let r = replay_run(&store, run, &opts).unwrap();
    let first = &r.stored_order;
    assert_eq!(first.left.len(), 1, "{first:?}");
    assert_eq!(first.left[0].kind, Left::Equivalent, "{first:?}");
    assert_eq!(first.left[0].round, 5, "{first:?}");
    assert_eq!(first.trials, 10, "{first:?}");
    // With the equivalence rule off, the tie rule ends it: the leader's edge flips sign, so
    // the rounds left could not show a difference.
    let tie = replay_run(
        &store,
        run,
        &ReplayOptions {
            min_effect: Some(0.0),
            futility: Some(0.2),
            min_chance: Some(0.0),
            ..opts.clone()
        },
    )
    .unwrap();
    assert_eq!(tie.stored_order.left.len(), 1, "{:?}", tie.stored_order);
    assert_eq!(tie.stored_order.left[0].kind, Left::Tied);
    // With both off, the two run every round: no test separates them.
    let off = replay_run(
        &store,
        run,
        &ReplayOptions {
            min_effect: Some(0.0),
            futility: Some(0.0),
            min_chance: Some(0.0),
            ..opts
        },
    )
    .unwrap();
    assert_eq!(off.stored_order.trials, 20, "{:?}", off.stored_order);
}

#[test]
fn a_raced_run_cannot_be_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("s.db")).unwrap();
    let study = Study::parse(STUDY, Path::new("synthetic.toml")).unwrap();
    let run = stored_run(&mut store, &study, &[1, 2, 3]);
    // Variant 1 alone runs two more rounds, as after a race.
    let key = study.configurations()[0].key();
    for round in [4, 5] {
        store
            .trial_add(&trial(run, round, key.clone(), 1.0))
            .unwrap();
    }
    let opts = ReplayOptions {
        orders: 1,
        seed: 1,
        ..ReplayOptions::default()
    };
    let e = replay_run(&store, run, &opts).unwrap_err().to_string();
    assert!(e.contains("--exhaustive") && e.contains("run 1"), "{e}");
    let e = replay_run(&store, 9, &opts).unwrap_err().to_string();
    assert!(e.contains('9'), "{e}");
}

#[test]
fn a_steady_shortfall_leaves_as_unlikely_before_a_test_can_reject() {
    // Variant 2 is 0.5 % ahead in rounds 2, 4 and 6 and 6 % behind in every other. After seven
    // rounds Wilcoxon's p is 14/128 (its three wins have the smallest differences), but a
    // bootstrap of the rounds makes variant 2 the best only when all seven draws are its good
    // rounds (one bad draw outweighs six good ones), (3/7)⁷ ≈ 0.3 %: it leaves as unlikely at
    // round 7, the rule's first.
    let (_dir, store, run, keys) = two_variants(|round, v| {
        let first = 100.0 * (1.0 + 0.05 * (round as f64 * 1.3).sin());
        match (v, round) {
            (0, _) => first,
            (_, 2 | 4 | 6) => first * 1.005,
            _ => first * 0.94,
        }
    });
    let opts = ReplayOptions {
        orders: 1,
        seed: 1,
        stop_loss: Some(0.0),
        ..ReplayOptions::default()
    };
    let r = replay_run(&store, run, &opts).unwrap();
    let first = &r.stored_order;
    assert_eq!(first.left.len(), 1, "{first:?}");
    assert_eq!(first.left[0].config, keys[1]);
    assert_eq!(first.left[0].kind, Left::Unlikely, "{first:?}");
    assert_eq!(first.left[0].round, 7, "{first:?}");
    assert_eq!(first.trials, 14);
    assert_eq!(first.winner.as_deref(), Some(keys[0].as_str()));
    // Without the rule, Wilcoxon needs two rounds more (p = 14/512 after round 9).
    let off = replay_run(
        &store,
        run,
        &ReplayOptions {
            min_chance: Some(0.0),
            ..opts
        },
    )
    .unwrap();
    assert_eq!(off.stored_order.left.len(), 1, "{:?}", off.stored_order);
    assert_eq!(off.stored_order.left[0].kind, Left::Worse);
    assert_eq!(off.stored_order.left[0].round, 9);
}

#[test]
fn far_behind_leaves_early_and_a_disturbed_round_does_not_make_a_tie_far() {
    // Variant 2 runs at half of variant 1's throughput with ±8 % noise of its own (the study's
    // min_rounds is 3, so this sets it to 5 to show the rule acting before the rank tests).
    let noise = |round: i64, v: usize| 1.0 + 0.08 * ((round as f64 * 2.9 + v as f64 * 1.7).sin());
    let (_dir, store, run, keys) = two_variants(|round, v| {
        let first = 100.0 * (1.0 + 0.1 * (round as f64 * 1.3).sin());
        first * noise(round, v) * if v == 0 { 1.0 } else { 0.5 }
    });
    let opts = ReplayOptions {
        orders: 1,
        seed: 1,
        min_rounds: Some(5),
        ..ReplayOptions::default()
    };
    let r = replay_run(&store, run, &opts).unwrap();
    let first = &r.stored_order;
    assert_eq!(first.left.len(), 1, "{first:?}");
    assert_eq!(first.left[0].config, keys[1]);
    assert_eq!(first.left[0].kind, Left::FarBehind, "{first:?}");
    assert_eq!(first.left[0].round, 3, "{first:?}");
    assert_eq!(first.trials, 6);
    // Off, the rank test takes it at round 5 instead.
    let off = replay_run(
        &store,
        run,
        &ReplayOptions {
            far_behind: Some(0.0),
            ..opts.clone()
        },
    )
    .unwrap();
    assert_eq!(off.stored_order.left[0].kind, Left::Worse);
    assert_eq!(off.stored_order.left[0].round, 5);

    // Variant 2 is 3 % behind with the same noise, and a burst of host noise halves its
    // trial in round 2: over three rounds its mean ratio is below 0.8, but the spread of those
    // rounds keeps the upper bound above it, so it is not dropped as far behind.
    let (_dir, store, run, _) = two_variants(|round, v| {
        let first = 100.0 * (1.0 + 0.1 * (round as f64 * 1.3).sin());
        let burst = if v == 1 && round == 2 { 0.5 } else { 1.0 };
        first * noise(round, v) * burst * if v == 0 { 1.0 } else { 0.97 }
    });
    let r = replay_run(&store, run, &opts).unwrap();
    assert!(
        r.stored_order
            .left
            .iter()
            .all(|e| e.kind != Left::FarBehind),
        "{:?}",
        r.stored_order
    );
}

#[test]
fn a_settled_near_tie_ends_the_race_and_an_uncertain_one_does_not() {
    // Variant 2 is 0.3 % behind variant 1 on average and wins rounds 1, 4 and 9: no rank test
    // separates them at round 5, but choosing variant 1 is expected to cost about 0.03 %,
    // under run.stop_loss (0.5 %), so the race ends there with it.
    let close = [
        1.003, 0.992, 0.995, 1.002, 0.991, 0.996, 0.999, 0.993, 1.001, 0.994,
    ];
    let drift = |round: i64| 100.0 * (1.0 + 0.1 * (round as f64 * 1.3).sin());
    let (_dir, store, run, keys) = two_variants(|round, v| {
        drift(round)
            * if v == 0 {
                1.0
            } else {
                close[round as usize - 1]
            }
    });
    let opts = ReplayOptions {
        orders: 1,
        seed: 1,
        min_rounds: Some(5),
        min_chance: Some(0.0),
        ..ReplayOptions::default()
    };
    let r = replay_run(&store, run, &opts).unwrap();
    let first = &r.stored_order;
    assert_eq!(first.left.len(), 1, "{first:?}");
    assert_eq!(first.left[0].config, keys[1]);
    assert_eq!(first.left[0].kind, Left::Settled, "{first:?}");
    assert_eq!(first.left[0].round, 5, "{first:?}");
    assert!(
        first.left[0]
            .reason
            .contains("costs 0.03 % in expectation (below run.stop_loss 0.50 %)"),
        "{first:?}"
    );
    assert_eq!(first.trials, 10);
    assert_eq!(first.winner.as_deref(), Some(keys[0].as_str()));
    // Ten of twenty trials: not over half.
    assert_eq!(r.over_half, 0);
    // Off, the two run until a rank test separates them or the rounds run out.
    let off = replay_run(
        &store,
        run,
        &ReplayOptions {
            stop_loss: Some(0.0),
            ..opts.clone()
        },
    )
    .unwrap();
    assert!(off.stored_order.trials > 10, "{:?}", off.stored_order);
    assert!(
        off.stored_order
            .left
            .iter()
            .all(|e| e.kind != Left::Settled),
        "{:?}",
        off.stored_order
    );

    // About as close on average, but ±12 % from round to round: choosing either could cost
    // a few percent, so the race runs every round.
    let noisy = [1.12, 0.9, 0.95, 1.1, 0.88, 1.05, 0.92, 1.08, 0.97, 0.99];
    let (_dir, store, run, _) = two_variants(|round, v| {
        drift(round)
            * if v == 0 {
                1.0
            } else {
                noisy[round as usize - 1]
            }
    });
    let r = replay_run(&store, run, &opts).unwrap();
    assert!(r.stored_order.left.is_empty(), "{:?}", r.stored_order);
    assert_eq!(r.stored_order.trials, 20);
    assert_eq!(r.over_half, 1);
}

#[test]
fn the_expected_loss_follows_the_goal_direction() {
    // Variant 2 is about 0.9 % worse than variant 1 and better only in round 1: no rank test
    // separates them at round 5 (Wilcoxon's p is 2/32 at best), and choosing variant 1 costs
    // next to nothing, so the race settles there, for either direction of the goal. Were the
    // advantage's sign wrong, variant 2 would look 0.9 % ahead and the loss would stay above
    // run.stop_loss (0.5 %).
    let worse = [
        1.004, 0.985, 0.99, 0.992, 0.985, 0.99, 0.99, 0.99, 0.99, 0.99,
    ];
    let drift = |round: i64| 100.0 * (1.0 + 0.1 * (round as f64 * 1.3).sin());
    let opts = ReplayOptions {
        orders: 1,
        seed: 1,
        min_rounds: Some(5),
        min_chance: Some(0.0),
        ..ReplayOptions::default()
    };
    for (goal, higher) in [
        ("maximize throughput", true),
        ("minimize latency p99", false),
    ] {
        let (_dir, store, run, keys) = two_variants_for(goal, |round, v| {
            let w = if v == 0 {
                1.0
            } else {
                worse[round as usize - 1]
            };
            drift(round) * if higher { w } else { 1.0 / w }
        });
        let r = replay_run(&store, run, &opts).unwrap();
        let first = &r.stored_order;
        assert_eq!(first.left.len(), 1, "{goal}: {first:?}");
        assert_eq!(first.left[0].kind, Left::Settled, "{goal}: {first:?}");
        assert_eq!(first.left[0].round, 5, "{goal}: {first:?}");
        assert_eq!(first.winner.as_deref(), Some(keys[0].as_str()), "{goal}");
    }
}

#[test]
fn replay_overrides_are_range_checked() {
    let (_dir, store, run, _) = two_variants(|round, v| 100.0 + round as f64 + v as f64);
    for (opts, field) in [
        (
            ReplayOptions {
                stop_loss: Some(f64::NAN),
                ..ReplayOptions::default()
            },
            "run.stop_loss",
        ),
        (
            ReplayOptions {
                min_chance: Some(0.5),
                ..ReplayOptions::default()
            },
            "run.min_chance",
        ),
    ] {
        let e = replay_run(&store, run, &opts).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains("below"), "{e}");
    }
}

#[test]
fn a_budget_ends_the_race_before_a_round_that_would_pass_it() {
    // The noisy near-tie of the settled test runs all ten rounds (20 race trials); an
    // exhaustive run takes 26 with its 3 confirmation rounds. "50%" allows 13: 6 kept for
    // the confirmation, so the race runs three rounds (6 trials) and stops before a fourth.
    let noisy = [1.12, 0.9, 0.95, 1.1, 0.88, 1.05, 0.92, 1.08, 0.97, 0.99];
    let (_dir, store, run, _) = two_variants(|round, v| {
        100.0
            * if v == 0 {
                1.0
            } else {
                noisy[round as usize - 1]
            }
    });
    let opts = ReplayOptions {
        orders: 4,
        seed: 1,
        budget: Some(Some(Budget::Share(0.5))),
        // In some orders three of the rival's worst rounds come first and settle the race.
        stop_loss: Some(0.0),
        ..ReplayOptions::default()
    };
    let r = replay_run(&store, run, &opts).unwrap();
    assert!(r.stored_order.budget_ended, "{:?}", r.stored_order);
    assert_eq!((r.stored_order.rounds, r.stored_order.trials), (3, 6));
    assert!(r.stored_order.left.is_empty());
    assert_eq!(r.budget_ended, 4);
    assert_eq!(r.trials_max, 6);
    // 20 trials in all: 14 for the race, seven rounds.
    let r = replay_run(
        &store,
        run,
        &ReplayOptions {
            budget: Some(Some(Budget::Trials(20))),
            ..opts.clone()
        },
    )
    .unwrap();
    assert_eq!((r.stored_order.rounds, r.stored_order.trials), (7, 14));
    // No budget: all ten rounds.
    let r = replay_run(
        &store,
        run,
        &ReplayOptions {
            budget: Some(None),
            ..opts
        },
    )
    .unwrap();
    assert!(!r.stored_order.budget_ended);
    assert_eq!(r.stored_order.trials, 20);
}
