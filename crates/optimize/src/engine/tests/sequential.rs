//! Sequential trials over windows that do not sit still: a transient on either side, a noisy
//! baseline, a plateau that steps, a signal that never settles, the rest of the machine moving.

use std::collections::HashMap;

use perfpilot_store::journal::ActionState;

use perfpilot_observe::workload::Workload;

use super::super::Engine;
use super::super::control::Pairing;
use super::super::plan::Recap;
use super::super::trial::{Phase, Trial, TrialIo};
use super::super::verdict::judge;
use super::super::watch::{Rest, Window};
use super::trials::read_ahead_trial;
use super::{VDA_READ_AHEAD, engine, knob, seq, seq_mut, trial_planned, two_threads};
use crate::design::one_way::OneWayRule;
use crate::design::{DesignKind, EndReason, Looks, WindowPlan};
use crate::gain::Decision;
use crate::signal::SignalKind;

/// Six windows that vary by 4.5 %: an interval of ±3 % needs about 23 a side.
const NOISY: [f64; 6] = [95.0, 105.0, 100.0, 95.0, 105.0, 100.0];

/// 6 to 12 windows a side, aiming for an interval of ±3 %.
fn up_to_twelve() -> WindowPlan {
    WindowPlan {
        min: 6,
        max: 12,
        resolution: 0.03,
        looks: Looks {
            confidence: 0.95,
            min_effect: 0.02,
            rest_share: 0.0,
        },
    }
}

/// 6 to 30 windows a side, aiming for an interval of ±3 %.
fn up_to_thirty() -> WindowPlan {
    WindowPlan {
        max: 30,
        ..up_to_twelve()
    }
}

/// A one-way rule of at most 12 windows a side within 300 s.
fn bound_of_twelve() -> OneWayRule {
    OneWayRule {
        no_harm: Some(0.02),
        windows_cap: 12,
        prior: None,
        within_s: 300.0,
    }
}

/// A read-ahead trial in `e` on `w` past its baseline of twelve NOISY windows
/// (`up_to_twelve`): its change applied, measuring the windows after it.
fn after_a_noisy_baseline() -> (tempfile::TempDir, Engine, Workload, Trial) {
    let (tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let (_, mut t) = read_ahead_trial(&mut e, &w, DesignKind::BeforeAfter, up_to_twelve());
    for v in NOISY.iter().chain(&NOISY) {
        assert_eq!(scan_in(&mut e, &w, &mut t, *v), None);
    }
    assert_eq!((t.phase, seq(&t).needed), (Phase::Measuring, Some(12)));
    (tmp, e, w, t)
}

/// One scan of `t` in `e` under `up_to_twelve`, its signal reading `v`.
fn scan_in(e: &mut Engine, w: &Workload, t: &mut Trial, v: f64) -> Option<EndReason> {
    let mut io = TrialIo {
        store: &mut e.store,
        fs: &e.fs,
        manual: &mut e.policy.manual,
    };
    scan_once(t, w, &up_to_twelve(), &mut io, v)
}

/// One scan of `t` on `w` whose signal reads `v`.
fn scan_once(
    t: &mut Trial,
    w: &Workload,
    plan: &WindowPlan,
    io: &mut TrialIo,
    v: f64,
) -> Option<EndReason> {
    let obs = Window {
        main: Ok(Some(v)),
        shadow: None,
        rest: None,
    };
    t.advance(Some(w), Some(&obs), Pairing::None, plan, io)
        .unwrap()
}

#[test]
fn a_before_after_trial_keeps_the_baseline_the_gate_handed_over_and_drops_a_transient_after_the_change()
 {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let (id, mut t) = read_ahead_trial(&mut e, &w, DesignKind::BeforeAfter, WindowPlan::fixed(6));
    let mut io = TrialIo {
        store: &mut e.store,
        fs: &e.fs,
        manual: &mut e.policy.manual,
    };
    let mut scan = |t: &mut Trial, v: f64| {
        let obs = Window {
            main: Ok(Some(v)),
            shadow: Some(v),
            rest: None,
        };
        t.advance(
            Some(&w),
            Some(&obs),
            Pairing::None,
            &WindowPlan::fixed(6),
            &mut io,
        )
        .unwrap()
    };
    // The steady gate waited out the warm-up: the baseline is its six windows, none dropped
    // (a wandering signal's baseline cut where it settled would be picked by its spell).
    for v in [100.0, 101.0, 99.0, 100.0, 101.0] {
        assert_eq!(scan(&mut t, v), None);
    }
    assert_eq!(t.phase, Phase::Baseline);
    assert_eq!(scan(&mut t, 99.0), None);
    assert_eq!(t.phase, Phase::Measuring);
    assert_eq!(seq(&t).off, vec![100.0, 101.0, 99.0, 100.0, 101.0, 99.0]);
    assert_eq!(t.shadow_off.len(), 6);
    assert_eq!(knob(&e.fs), "512");
    // After the change, one window of a phase of other work, then the steady effect.
    for v in [30.0, 110.0, 111.0, 109.0, 110.0, 111.0] {
        assert_eq!(scan(&mut t, v), None);
    }
    assert_eq!(seq(&t).on.len(), 5);
    assert_eq!(t.shadow_on.len(), 5);
    assert_eq!(scan(&mut t, 109.0), Some(EndReason::Complete));
    assert_eq!(seq(&t).dropped, 1);
    let v = judge(&t, &EndReason::Complete, 0.95, 0.02);
    assert_eq!(v.decision, Decision::Keep, "{v:?}");
    let g = v.gain.unwrap();
    assert!((g.ratio - 1.1).abs() < 0.005, "{g:?}");
    assert!(
        e.store
            .action(id)
            .unwrap()
            .unwrap()
            .note
            .contains("1 dropped so far"),
        "the journal says why the trial takes longer"
    );
}

#[test]
fn a_noisy_baseline_makes_a_sequential_trial_measure_more_windows_on_both_sides() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let (id, mut t) = read_ahead_trial(&mut e, &w, DesignKind::BeforeAfter, up_to_twelve());
    let mut io = TrialIo {
        store: &mut e.store,
        fs: &e.fs,
        manual: &mut e.policy.manual,
    };
    // Windows varying by 5 %: ±3 % needs about 23 a side; the plan allows 12.
    let plan = up_to_twelve();
    let mut scan = |t: &mut Trial, v: f64| scan_once(t, &w, &plan, &mut io, v);
    for v in NOISY {
        assert_eq!(scan(&mut t, v), None);
    }
    assert_eq!(t.phase, Phase::Baseline, "six NOISY windows are not enough");
    assert_eq!(seq(&t).needed, Some(12));
    for v in NOISY {
        assert_eq!(scan(&mut t, v), None);
    }
    assert_eq!(t.phase, Phase::Measuring);
    assert_eq!(seq(&t).off.len(), 12);
    // No effect: no interim look decides, the trial measures its twelve windows after.
    for v in NOISY.iter().chain(&NOISY[..5]) {
        assert_eq!(scan(&mut t, *v), None);
    }
    assert_eq!(scan(&mut t, NOISY[5]), Some(EndReason::Complete));
    assert_eq!((seq(&t).on.len(), seq(&t).early), (12, None));
    let v = judge(&t, &EndReason::Complete, 0.95, 0.02);
    assert_eq!(v.decision, Decision::Neutral, "{v:?}");
    let note = e.store.action(id).unwrap().unwrap().note;
    assert!(
        note.contains("12 windows a side (its windows vary by 4.5 %"),
        "the journal says why the trial takes longer: {note}"
    );
}

#[test]
fn a_plateau_after_the_change_that_then_steps_up_is_dropped_and_the_new_level_judged() {
    let (_tmp, mut e, w, mut t) = after_a_noisy_baseline();
    let mut scan = |t: &mut Trial, v: f64| scan_in(&mut e, &w, t, v);
    // After the change: seven windows at the old level (the server settling), then ×1.2. MSER
    // finds no warm-up in these twelve (its search stops at the sixth): without the step test
    // the trial would end here, judging a mean of both levels.
    let after: Vec<f64> = NOISY
        .iter()
        .chain(&NOISY[..1])
        .copied()
        .chain(NOISY[1..].iter().map(|v| v * 1.2))
        .collect();
    for v in &after {
        assert_eq!(scan(&mut t, *v), None, "the step keeps the trial measuring");
    }
    assert_eq!(
        seq(&t).dropped,
        7,
        "the windows before the step are dropped"
    );
    assert_eq!(seq(&t).on.len(), 5);
    let end = NOISY
        .iter()
        .chain(&NOISY)
        .find_map(|v| scan(&mut t, v * 1.2));
    assert_eq!(end, Some(EndReason::Complete));
    // ×1.2 is clear at an interim look, before the twelfth window.
    assert!((6..12).contains(&seq(&t).on.len()), "{}", seq(&t).on.len());
    let v = judge(&t, &EndReason::Complete, 0.95, 0.02);
    assert_eq!(v.decision, Decision::Keep, "{v:?}");
    let g = v.gain.unwrap();
    assert!(
        (g.ratio - 1.2).abs() < 0.02,
        "judged on the new level: {g:?}"
    );
}

#[test]
fn a_clear_gain_is_kept_at_an_early_look_judged_at_the_looks_stricter_level() {
    let (_tmp, mut e, w, mut t) = after_a_noisy_baseline();
    let mut scan = |t: &mut Trial, v: f64| scan_in(&mut e, &w, t, v);
    // ×1.1 on windows that vary by 4.5 %: the looks from the sixth window on share 5 % out
    // over 7 (99.29 % each); the gain clears it before the twelfth.
    let end = NOISY
        .iter()
        .chain(&NOISY)
        .find_map(|v| scan(&mut t, v * 1.1));
    assert_eq!(end, Some(EndReason::Complete));
    let n = seq(&t).on.len();
    assert!((6..12).contains(&n), "decided early: {n}");
    let early = seq(&t).early.expect("an early look");
    assert_eq!((early.looks, early.planned), (7, 12));
    assert!((early.confidence - (1.0 - 0.05 / 7.0)).abs() < 1e-12);
    let v = judge(&t, &EndReason::Complete, 0.95, 0.02);
    assert_eq!(v.decision, Decision::Keep, "{v:?}");
    let g = v.gain.unwrap();
    assert_eq!(g.confidence, early.confidence, "judged at the look's level");
    assert!(g.ci_low > 1.02 && (g.ratio - 1.1).abs() < 0.01, "{g:?}");
    assert!(v.why.contains("at an early look"), "{}", v.why);
    // One window fewer and the same gain is not yet clear at that level.
    let mut fewer = seq(&t).on.clone();
    fewer.pop();
    let g = crate::gain::gain_sequential(&seq(&t).off, &fewer, true, early.confidence).unwrap();
    assert!(g.ci_low <= 1.02, "the look before did not decide: {g:?}");
}

#[test]
fn a_clear_loss_is_not_decided_early_the_trial_measures_its_planned_windows() {
    // ×0.9 is as clear as the ×1.1 above, but a change pays its cost first (PostgreSQL's
    // plateau after a collapse): the looks keep, never revert; the planned count decides.
    let (_tmp, mut e, w, mut t) = after_a_noisy_baseline();
    let mut scan = |t: &mut Trial, v: f64| scan_in(&mut e, &w, t, v);
    for v in NOISY.iter().chain(&NOISY[..5]).map(|v| v * 0.9) {
        assert_eq!(scan(&mut t, v), None, "no early revert");
    }
    assert_eq!(scan(&mut t, NOISY[5] * 0.9), Some(EndReason::Complete));
    assert_eq!((seq(&t).on.len(), seq(&t).early), (12, None));
    let v = judge(&t, &EndReason::Complete, 0.95, 0.02);
    assert_eq!(v.decision, Decision::Revert, "{v:?}");
}

#[test]
fn interim_looks_on_noise_alone_keep_the_false_verdicts_within_the_confidence_level() {
    // 2,000 seeded trials with no effect, windows varying by 5 %, 30 a side planned, looking
    // from the sixth window after the change: Bonferroni over the 25 looks bounds any false
    // verdict by 5 % (counted two-sided here, keep or revert, though the looks only keep);
    // looking at 95 % each time errs several times as often.
    let mut rng = perfpilot_stats::Rng::new(7);
    let mut noise = |n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| 100.0 * (1.0 + 0.05 * rng.normal()))
            .collect()
    };
    let (trials, looks) = (2000, 25);
    let level = crate::design::windows::look_level(0.95, looks);
    let (mut bonferroni, mut naive) = (0, 0);
    for _ in 0..trials {
        let off = noise(30);
        let on = noise(30);
        let decided = |level: f64| {
            (6..=30).any(|n| {
                crate::gain::gain_sequential(&off, &on[..n], true, level)
                    .is_some_and(|g| crate::gain::decide(&g, 0.0) != Decision::Neutral)
            })
        };
        bonferroni += usize::from(decided(level));
        naive += usize::from(decided(0.95));
    }
    let (b, n) = (
        bonferroni as f64 / trials as f64,
        naive as f64 / trials as f64,
    );
    assert!(b <= 0.05, "Bonferroni looks: {b}");
    assert!(
        n > 0.10,
        "looking at 95 % each time errs far more often: {n}"
    );
}

#[test]
fn a_step_before_the_change_or_a_second_one_after_it_is_measured_through_not_dropped() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let (_, mut t) = read_ahead_trial(&mut e, &w, DesignKind::BeforeAfter, up_to_twelve());
    let mut io = TrialIo {
        store: &mut e.store,
        fs: &e.fs,
        manual: &mut e.policy.manual,
    };
    let plan = up_to_twelve();
    let mut scan = |t: &mut Trial, v: f64| scan_once(t, &w, &plan, &mut io, v);
    // Seven windows, then ×1.2: a step the step test finds (the test above), here before the
    // change, where it is the workload's own (PostgreSQL's checkpoints step its read-write
    // rate back and forth): measured through, with the windows its spread asks for.
    let stepped = |level: f64| -> Vec<f64> {
        NOISY
            .iter()
            .chain(&NOISY[..1])
            .map(|v| v * level)
            .chain(NOISY[1..].iter().map(|v| v * level * 1.2))
            .collect()
    };
    for v in stepped(1.0) {
        assert_eq!(scan(&mut t, v), None);
    }
    assert_eq!((t.phase, seq(&t).dropped), (Phase::Measuring, 0));
    // After the change: the first step is cut (seven windows), a second one is not.
    for v in stepped(1.0) {
        assert_eq!(scan(&mut t, v), None);
    }
    assert_eq!((seq(&t).dropped, seq(&t).on.len()), (7, 5));
    let second: Vec<f64> = NOISY[..3]
        .iter()
        .map(|v| v * 1.2)
        .chain(NOISY[..4].iter().map(|v| v * 1.45))
        .collect();
    let mut end = None;
    for v in second {
        end = scan(&mut t, v);
    }
    assert_eq!(end, Some(EndReason::Complete));
    assert_eq!((seq(&t).dropped, seq(&t).on.len()), (7, 12));
}

#[test]
fn a_signal_that_never_settles_ends_the_trial_neutral_rather_than_judging_it() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let (_, mut t) = read_ahead_trial(&mut e, &w, DesignKind::BeforeAfter, WindowPlan::fixed(6));
    let mut io = TrialIo {
        store: &mut e.store,
        fs: &e.fs,
        manual: &mut e.policy.manual,
    };
    // Steady before the change, then climbing steadily after it: each check drops half the
    // windows, until the limit.
    let mut end = None;
    for i in 0..200 {
        let v = if i < 6 { 10.0 } else { 10.0 * (i as f64 - 4.0) };
        let obs = Window {
            main: Ok(Some(v)),
            shadow: None,
            rest: None,
        };
        end = t
            .advance(
                Some(&w),
                Some(&obs),
                Pairing::None,
                &WindowPlan::fixed(6),
                &mut io,
            )
            .unwrap();
        if end.is_some() {
            break;
        }
    }
    let Some(EndReason::NotSettled { dropped }) = end else {
        panic!("{end:?}")
    };
    assert!(dropped > 24, "{dropped}");
    assert_eq!(
        t.phase,
        Phase::Measuring,
        "ended while measuring after the change"
    );
}

#[test]
fn a_sequential_trial_during_which_the_rest_of_the_machine_got_busy_is_abandoned_not_judged() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let windows = e.tun.window_count();
    perfpilot_sys::knob::write_knob(&e.fs, VDA_READ_AHEAD, "8192").unwrap();
    let plan = WindowPlan::of(&e.tun);
    let (id, t) = read_ahead_trial(&mut e, &w, DesignKind::BeforeAfter, plan);
    e.actions.trials.push(t);
    // The signal drops by a fifth after the change, but a build of 0.8 cores started with it
    // on this 2-CPU machine: the verdict would be the build's, so there is none.
    for i in 0..(2 * windows + 1) {
        let on = e.actions.trials.first().is_some_and(|t| t.on);
        let v = if on { 80.0 } else { 100.0 } + [0.0, 1.0, -1.0][i % 3];
        let rest = Rest {
            cores: if on { 0.9 } else { 0.1 },
            cpus: 2,
        };
        let obs: HashMap<String, Window> = [(
            w.signature.clone(),
            Window {
                main: Ok(Some(v)),
                shadow: None,
                rest: Some(rest),
            },
        )]
        .into();
        e.advance_trials(std::slice::from_ref(&w), &obs).unwrap();
    }
    assert!(e.actions.trials.is_empty(), "the trial ended");
    let rec = e.store.action(id).unwrap().unwrap();
    assert_eq!(rec.state, ActionState::Reverted, "{}", rec.note);
    assert!(
        rec.note.starts_with(
            "the rest of the machine changed during the trial: other processes used 0.10 cores before the change and 0.90 after"
        ),
        "{}",
        rec.note
    );
    assert_eq!(knob(&e.fs), "8192", "undone");
    assert!(
        e.store
            .backoff_get(&w.signature, "read_ahead")
            .unwrap()
            .is_none(),
        "not judged, so not backed off: it is tried again"
    );
}

#[test]
fn a_one_way_trial_counts_its_cap_again_at_the_scans_it_runs_at_until_its_baseline_is_planned() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let plan = up_to_thirty();
    let mut t = trial_planned(1, Some(SignalKind::Io), DesignKind::OneWay, vec![], plan);
    // Planned at scans stretched to 12 s: an 8-s window read every 12 s, 12 a side in 300 s.
    seq_mut(&mut t).one_way = Some(bound_of_twelve());
    t.recap = Some(Recap {
        window_s: 8.0,
        min: 6,
    });
    t.started_s = perfpilot_sys::clock::mono_s();
    let cap = |t: &Trial| seq(t).one_way.as_ref().map(|r| r.windows_cap);
    // The scans run every 3.3 s by the time it starts: a window every 6.6 s, 22 a side.
    t.recap(3.3);
    assert_eq!(cap(&t), Some(22));
    let mut io = TrialIo {
        store: &mut e.store,
        fs: &e.fs,
        manual: &mut e.policy.manual,
    };
    for v in [100.0, 101.0, 99.0, 100.0, 100.5, 99.5] {
        assert_eq!(scan_once(&mut t, &w, &plan, &mut io, v), None);
    }
    assert_eq!(seq(&t).needed, Some(22));
    // Once fixed, the windows a side stay: scans stretched again end it at its time bound.
    t.recap(12.8);
    assert_eq!((cap(&t), seq(&t).needed), (Some(22), Some(22)));
}

#[test]
fn a_trial_bounded_in_time_ends_at_the_last_scan_before_its_bound_not_the_first_after_it() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let plan = up_to_thirty();
    let (_, mut t) = read_ahead_trial(&mut e, &w, DesignKind::OneWay, plan);
    seq_mut(&mut t).one_way = Some(bound_of_twelve());
    let mut io = TrialIo {
        store: &mut e.store,
        fs: &e.fs,
        manual: &mut e.policy.manual,
    };
    t.started_s = perfpilot_sys::clock::mono_s();
    let mut scans = 0;
    while seq(&t).on.len() < 6 {
        assert_eq!(scan_once(&mut t, &w, &plan, &mut io, 100.0), None);
        scans += 1;
        assert!(scans < 40, "no six windows after the change");
    }
    assert_eq!(seq(&t).needed, Some(12));
    // 297 s into its 300: at scans 2 s apart the next comes at 299 s, so it measures on…
    t.started_s = perfpilot_sys::clock::mono_s() - 297.0;
    t.recap(2.0);
    assert_eq!(scan_once(&mut t, &w, &plan, &mut io, 100.0), None);
    // …at scans 4 s apart the next would come past the bound: it ends at this one.
    t.recap(4.0);
    let end = scan_once(&mut t, &w, &plan, &mut io, 100.0);
    assert!(
        matches!(end, Some(EndReason::TimeBound { after_s }) if after_s < 300.0),
        "{end:?}"
    );
}
