//! Trials from given window values to their verdicts, and a trial's life over a fixture knob.

use std::collections::HashMap;

use perfpilot_store::journal::ActionState;
use perfpilot_sys::CpuSet;
use perfpilot_sys::change::{Change, Undo};

use super::super::control::Pairing;
use super::super::enforce::Held;
use super::super::trial::{Phase, SwitchbackTrial, TrialIo};
use super::super::verdict::judge;
use super::super::watch::Window;
use super::{VDA_READ_AHEAD, engine, knob, seq, seq_mut, trial, trial_planned, two_threads};
use crate::design::{
    DesignKind, EndReason, Looks, PeriodLimits, PeriodPlan, Switchback, WindowPlan,
};
use crate::gain::Decision;
use crate::journal::ActionDoc;
use crate::signal::SignalKind;
use crate::strategy::StrategyKind;

/// A complete trial with these windows, judged at 95 % with a 2 % minimum effect.
fn verdict_of(signal: SignalKind, off: &[f64], on: &[f64]) -> super::super::Verdict {
    let hib = signal.higher_is_better();
    let mut t = trial(1, Some(signal), DesignKind::BeforeAfter, vec![]);
    let s = seq_mut(&mut t);
    s.hib = hib;
    s.off = off.to_vec();
    s.on = on.to_vec();
    judge(&t, &EndReason::Complete, 0.95, 0.02)
}

/// A journaled read-ahead trial on `w` (vda to 512 KiB, judged by I/O), not yet started.
pub(super) fn read_ahead_trial(
    e: &mut super::super::Engine,
    w: &perfpilot_observe::workload::Workload,
    design: DesignKind,
    plan: WindowPlan,
) -> (i64, super::super::trial::Trial) {
    let id = e
        .store
        .journal_begin(&w.signature, "vda", "read_ahead", "{}", "[]", "test")
        .unwrap();
    let step = Change::Sysfs {
        rel: VDA_READ_AHEAD.into(),
        value: "512".into(),
    };
    (
        id,
        trial_planned(id, Some(SignalKind::Io), design, vec![step], plan),
    )
}

#[test]
fn a_clear_gain_is_kept() {
    let v = verdict_of(
        SignalKind::Io,
        &[100.0, 102.0, 98.0, 101.0, 99.0, 100.0],
        &[120.0, 121.0, 119.0, 122.0, 118.0, 120.0],
    );
    assert_eq!(v.decision, Decision::Keep);
    assert!(v.why.starts_with("gain 1.200 ("), "{}", v.why);
    assert!(
        v.why.ends_with("clears the minimum effect 0.02"),
        "{}",
        v.why
    );
    assert_eq!((v.before.n, v.after.n), (6, 6));
}

#[test]
fn a_clear_loss_is_reverted() {
    let v = verdict_of(
        SignalKind::Io,
        &[120.0, 121.0, 119.0, 122.0, 118.0, 120.0],
        &[100.0, 102.0, 98.0, 101.0, 99.0, 100.0],
    );
    assert_eq!(v.decision, Decision::Revert);
    assert!(
        v.why.starts_with("it made things worse: gain 0.833"),
        "{}",
        v.why
    );
}

#[test]
fn a_lower_is_better_signal_turns_the_same_windows_round() {
    // Cycles per instruction fell by a sixth: a gain.
    let v = verdict_of(
        SignalKind::Cpi,
        &[1.2, 1.21, 1.19, 1.22, 1.18, 1.2],
        &[1.0, 1.02, 0.98, 1.01, 0.99, 1.0],
    );
    assert!(!v.higher_is_better);
    assert_eq!(v.decision, Decision::Keep);
}

#[test]
fn noise_is_neutral() {
    let v = verdict_of(
        SignalKind::Io,
        &[100.0, 110.0, 90.0, 105.0, 95.0, 100.0],
        &[101.0, 92.0, 108.0, 99.0, 104.0, 97.0],
    );
    assert_eq!(v.decision, Decision::Neutral);
    assert!(v.why.starts_with("no clear effect: gain"), "{}", v.why);
}

#[test]
fn a_trial_ended_early_or_with_too_few_windows_is_neutral_and_says_why() {
    let t = trial(1, Some(SignalKind::Io), DesignKind::BeforeAfter, vec![]);
    let v = judge(&t, &EndReason::WorkloadExited, 0.95, 0.02);
    assert_eq!(
        (v.decision, v.why.as_str(), v.ended.as_str()),
        (Decision::Neutral, "its workload exited", "workload_exited")
    );
    assert_eq!(v.gain, None);
    let v = verdict_of(SignalKind::Io, &[100.0], &[120.0]);
    assert_eq!(
        (v.decision, v.why.as_str()),
        (Decision::Neutral, "too few usable windows to judge")
    );
}

#[test]
fn a_signal_failing_more_times_than_there_are_windows_ends_the_trial() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let mut t = trial(1, Some(SignalKind::Io), DesignKind::BeforeAfter, vec![]);
    let mut io = TrialIo {
        store: &mut e.store,
        fs: &e.fs,
        manual: &mut e.policy.manual,
    };
    let plan = WindowPlan::fixed(2);
    let mut scan = |t: &mut super::super::trial::Trial, main: Result<Option<f64>, String>| {
        let obs = Window {
            main,
            shadow: None,
            rest: None,
        };
        t.advance(Some(&w), Some(&obs), Pairing::None, &plan, &mut io)
            .unwrap()
    };
    let fail = || Err("probe `x` timed out".to_string());
    assert_eq!(scan(&mut t, fail()), None);
    assert_eq!(scan(&mut t, fail()), None);
    assert_eq!(
        scan(&mut t, fail()),
        Some(EndReason::SignalFailed {
            times: 3,
            error: "probe `x` timed out".into()
        })
    );
    // A good window in between starts the count again.
    let mut t = trial(1, Some(SignalKind::Io), DesignKind::BeforeAfter, vec![]);
    assert_eq!(scan(&mut t, fail()), None);
    assert_eq!(scan(&mut t, fail()), None);
    assert_eq!(scan(&mut t, Ok(Some(5.0))), None);
    assert_eq!(scan(&mut t, fail()), None);
    assert_eq!(seq(&t).off, vec![5.0]);
}

#[test]
fn a_switchback_trial_switches_its_change_on_and_off_in_seeded_periods_until_it_decides() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let (id, mut t) = read_ahead_trial(&mut e, &w, DesignKind::Switchback, WindowPlan::fixed(6));
    let mut io = TrialIo {
        store: &mut e.store,
        fs: &e.fs,
        manual: &mut e.policy.manual,
    };
    let plan = WindowPlan::fixed(6);
    let mut states = Vec::new();
    let mut end = None;
    // The signal drifts upwards by 1 % a window; the change adds 10 % while on.
    for i in 0..200 {
        let drift = 100.0 * (1.0 + 0.01 * i as f64);
        let v = if t.on { drift * 1.1 } else { drift };
        let obs = Window {
            main: Ok(Some(v)),
            shadow: None,
            rest: None,
        };
        end = t
            .advance(Some(&w), Some(&obs), Pairing::None, &plan, &mut io)
            .unwrap();
        states.push((t.on, knob(&e.fs)));
        if end.is_some() {
            break;
        }
    }
    assert_eq!(end, Some(EndReason::Complete));
    // On and off in periods, the knob following: 512 on, 8192 (the journaled undo) off.
    assert!(
        states
            .iter()
            .all(|(on, k)| (*on && k == "512") || (!on && k == "8192"))
    );
    let switches = states.windows(2).filter(|p| p[0].0 != p[1].0).count();
    assert!(switches >= 5, "{switches} switches: {states:?}");
    let v = judge(&t, &EndReason::Complete, 0.95, 0.02);
    assert_eq!(v.design, DesignKind::Switchback);
    assert_eq!(v.decision, Decision::Keep, "{v:?}");
    let g = v.gain.unwrap();
    assert!((g.ratio - 1.1).abs() < 0.02, "the drift cancels: {g:?}");
    assert!(v.why.contains("pairs of periods"), "{}", v.why);
    let undo = e.store.action(id).unwrap().unwrap().undo;
    assert!(undo.contains("\"previous\":\"8192\""), "{undo}");
}

#[test]
fn a_switchback_whose_switches_are_slow_plans_its_periods_again_before_its_first_pair_only() {
    let mut sb = SwitchbackTrial {
        baseline: vec![100.0, 104.0, 97.0, 103.0, 96.0, 101.0, 99.0, 102.0],
        limits: PeriodLimits {
            window_s: 2.0,
            settle_s: 2.0,
            period_max_s: 120.0,
            budget_windows: 60,
            pairs_min: 3,
            switch_s: 0.0,
            within_s: 0.0,
            spent_s: 0.0,
        },
        periods: None,
        seed: 3,
        hib: true,
        switch_times: vec![],
        applying_s: 0.0,
    };
    // Before the periods are planned, a switch's time is only kept.
    assert_eq!(sb.switched(10.0, 40.0), None);
    let quick = PeriodPlan::for_signal(
        &sb.baseline,
        &PeriodLimits {
            switch_s: 0.0,
            within_s: 0.0,
            spent_s: 0.0,
            ..sb.limits
        },
    )
    .unwrap();
    sb.periods = Some(Switchback::new(
        quick,
        3,
        true,
        Looks {
            confidence: 0.95,
            min_effect: 0.02,
            rest_share: 0.1,
        },
    ));
    // The first making of the change took 10 s (with the kept 10 s: a mean of 10 s).
    let note = sb
        .switched(10.0, 40.0)
        .expect("a note that the periods changed");
    assert!(note.contains("a switch takes 10 s"), "{note}");
    let slow = sb.periods.as_ref().unwrap().plan();
    assert!(slow.measure > quick.measure, "{quick:?} {slow:?}");
    assert_eq!(sb.limits.switch_s, 10.0);
    // A switch as long as the mean so far changes nothing.
    assert_eq!(sb.switched(10.0, 40.0), None);
    // Once a pair is complete, the plan stays whatever the switches take.
    let p = sb.periods.as_mut().unwrap();
    for _ in 0..2 * slow.period() {
        let on = p.want_on();
        p.record(on, 100.0, None);
    }
    assert_eq!(p.pairs(), 1);
    assert_eq!(sb.switched(0.01, 100.0), None);
    assert_eq!(sb.periods.as_ref().unwrap().plan(), slow);
}

#[test]
fn a_kept_trial_is_held_and_a_reverted_one_is_undone_and_backed_off() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let windows = e.tun.window_count();
    for (gain, state) in [(1.2, ActionState::Kept), (0.8, ActionState::Reverted)] {
        perfpilot_sys::knob::write_knob(&e.fs, VDA_READ_AHEAD, "8192").unwrap();
        let id = e
            .store
            .journal_begin(&w.signature, "vda", "read_ahead", "{}", "[]", "test")
            .unwrap();
        e.store
            .journal_set_state(id, ActionState::Trial, "")
            .unwrap();
        let step = Change::Sysfs {
            rel: VDA_READ_AHEAD.into(),
            value: "512".into(),
        };
        e.actions.trials.push(trial(
            id,
            Some(SignalKind::Io),
            DesignKind::BeforeAfter,
            vec![step],
        ));
        // Sequential: every baseline window, the step, every window after; slight noise.
        let mut ended = false;
        for i in 0..(2 * windows + 1) {
            let noise = [0.0, 1.0, -1.0][i % 3];
            let v = if e.actions.trials.first().is_some_and(|t| t.on) {
                100.0 * gain + noise
            } else {
                100.0 + noise
            };
            let obs: HashMap<String, Window> = [(
                w.signature.clone(),
                Window {
                    main: Ok(Some(v)),
                    shadow: Some(v * 10.0),
                    rest: None,
                },
            )]
            .into();
            e.advance_trials(std::slice::from_ref(&w), &obs).unwrap();
            ended = e.actions.trials.is_empty();
        }
        assert!(ended, "the trial did not end in {} scans", 2 * windows + 1);
        let rec = e.store.action(id).unwrap().unwrap();
        assert_eq!(rec.state, state, "{}", rec.note);
        let backoff = e.store.backoff_get(&w.signature, "read_ahead").unwrap();
        match state {
            ActionState::Kept => {
                assert_eq!(knob(&e.fs), "512");
                assert_eq!(e.actions.held.len(), 1);
                assert!(backoff.is_none());
            }
            _ => {
                assert_eq!(knob(&e.fs), "8192");
                assert!(
                    rec.note.starts_with("reverted: it made things worse"),
                    "{}",
                    rec.note
                );
                let (until, why) = backoff.unwrap();
                assert!(until > perfpilot_sys::clock::now_ms() + 3_500_000);
                assert!(why.starts_with("it made things worse"), "{why}");
            }
        }
        // The proxy watched beside the signal and saw the same gain.
        let verdict: super::super::Verdict =
            serde_json::from_str(rec.verdict.as_deref().unwrap()).unwrap();
        let proxy = verdict.shadow[0].gain.unwrap();
        assert!((proxy.ratio - gain).abs() < 0.02, "{proxy:?}");
    }
}

#[test]
fn huge_pages_judged_against_end_rather_than_revert_and_say_their_pages_stay() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let id = e
        .store
        .journal_begin(&w.signature, "app", "large_pages", "{}", "[]", "test")
        .unwrap();
    let mut t = trial(id, Some(SignalKind::Io), DesignKind::BeforeAfter, vec![]);
    t.strategy = StrategyKind::LargePages;
    t.doc.irreversible = true;
    (t.phase, t.on) = (Phase::Measuring, true);
    seq_mut(&mut t).off = vec![100.0, 101.0, 99.0];
    seq_mut(&mut t).on = vec![100.0, 99.0, 101.0];
    e.finish(t, EndReason::Complete).unwrap();
    let rec = e.store.action(id).unwrap().unwrap();
    assert_eq!(rec.state, ActionState::Ended, "{}", rec.note);
    assert!(
        rec.note
            .starts_with("ended, not reverted (its huge pages stay"),
        "{}",
        rec.note
    );
    assert!(
        e.store
            .backoff_get(&w.signature, "large_pages")
            .unwrap()
            .is_some()
    );
}

#[test]
fn a_trial_whose_server_restarted_is_abandoned_undone_and_not_backed_off() {
    let (_tmp, mut e) = engine("");
    let mut w = two_threads(0.3);
    let (id, mut t) = read_ahead_trial(&mut e, &w, DesignKind::BeforeAfter, WindowPlan::fixed(6));
    t.doc.members = vec![(100, 1)];
    seq_mut(&mut t).off = vec![100.0; 5];
    e.actions.trials.push(t);
    let obs: HashMap<String, Window> = [(
        w.signature.clone(),
        Window {
            main: Ok(Some(100.0)),
            shadow: None,
            rest: None,
        },
    )]
    .into();
    // The baseline is complete: the step is applied.
    e.advance_trials(std::slice::from_ref(&w), &obs).unwrap();
    assert_eq!(knob(&e.fs), "512");
    // The same workload comes back with a new process: the windows would span two servers.
    w.members[0].pid = 4242;
    w.members[0].starttime = 99;
    e.advance_trials(std::slice::from_ref(&w), &obs).unwrap();
    assert!(e.actions.trials.is_empty());
    assert_eq!(knob(&e.fs), "8192", "the change is undone");
    let rec = e.store.action(id).unwrap().unwrap();
    assert_eq!(rec.state, ActionState::Reverted);
    assert!(
        rec.note.contains("restarted during the trial"),
        "{}",
        rec.note
    );
    assert!(rec.verdict.unwrap().contains("\"abandoned\""));
    assert!(
        e.store
            .backoff_get(&w.signature, "read_ahead")
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_trial_whose_mask_was_changed_behind_perfpilots_back_is_left_manual() {
    let (_tmp, mut e) = engine("");
    let mut w = two_threads(0.3);
    let id = e
        .store
        .journal_begin(&w.signature, "app", "cache_affinity", "{}", "[]", "test")
        .unwrap();
    let mut t = trial(id, Some(SignalKind::Cpu), DesignKind::Switchback, vec![]);
    t.strategy = StrategyKind::CacheAffinity;
    t.doc.members = vec![(100, 1)];
    t.doc.bound_to = Some(CpuSet::parse("0").unwrap());
    (t.phase, t.on) = (Phase::Measuring, true);
    e.actions.trials.push(t);
    // The fixture is not the live system: the member's mask is the sample's.
    w.members[0].cpus_allowed = Some(CpuSet::parse("0-1").unwrap());
    e.advance_trials(std::slice::from_ref(&w), &HashMap::new())
        .unwrap();
    assert!(e.actions.trials.is_empty());
    let rec = e.store.action(id).unwrap().unwrap();
    assert_eq!(rec.state, ActionState::Manual);
    let why = "manually tuned: pid 100 affinity changed to 0-1 behind perfpilot's back";
    assert_eq!(rec.note, format!("{why}; left as it is"));
    assert_eq!(e.policy.manual[&w.signature], why);
    assert!(
        e.store
            .backoff_get(&w.signature, "cache_affinity")
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_kept_action_whose_mask_was_changed_becomes_manual_and_one_whose_workload_exited_ends() {
    let (_tmp, mut e) = engine("");
    let mut w = two_threads(0.3);
    let doc = ActionDoc {
        members: vec![(100, 1)],
        changes: vec![],
        design: DesignKind::Switchback,
        irreversible: false,
        signal: None,
        bound_to: Some(CpuSet::parse("0").unwrap()),
    };
    let mut held = |sig: &str| {
        let id = e
            .store
            .journal_begin(sig, "app", "cache_affinity", "{}", "[]", "test")
            .unwrap();
        e.actions.held.push(Held {
            id,
            signature: sig.into(),
            strategy: StrategyKind::CacheAffinity,
            doc: doc.clone(),
            watch: None,
        });
        id
    };
    let (changed, exited) = (held(&w.signature), held("gone"));
    w.members[0].cpus_allowed = Some(CpuSet::parse("0-1").unwrap());
    e.enforce_held(std::slice::from_ref(&w), &HashMap::new())
        .unwrap();
    assert!(e.actions.held.is_empty());
    let rec = e.store.action(changed).unwrap().unwrap();
    assert_eq!(rec.state, ActionState::Manual);
    assert!(
        rec.note
            .starts_with("manually tuned: pid 100 affinity changed to 0-1")
    );
    let rec = e.store.action(exited).unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.note.as_str()),
        (ActionState::Ended, "its workload exited")
    );
    // From now on the workload is left alone, and status says why.
    let states = e
        .propose_workloads(std::slice::from_ref(&w), &super::rates(2, 0.0))
        .unwrap();
    assert!(
        states[&w.signature].contains("behind perfpilot's back"),
        "{states:?}"
    );
}

#[test]
fn a_restarted_engine_undoes_abandoned_trials_and_re_adopts_kept_actions() {
    let (_tmp, mut e) = engine("");
    // An abandoned trial that had set the knob (its undo record journaled first).
    let doc = |members: Vec<(i32, u64)>, bound_to: Option<CpuSet>| {
        serde_json::to_string(&ActionDoc {
            members,
            changes: vec![],
            design: DesignKind::Switchback,
            irreversible: false,
            signal: None,
            bound_to,
        })
        .unwrap()
    };
    let undo = serde_json::to_string(&vec![Undo::Sysfs {
        rel: VDA_READ_AHEAD.into(),
        previous: "8192".into(),
    }])
    .unwrap();
    let trial = e
        .store
        .journal_begin(
            "device:vda",
            "vda",
            "read_ahead",
            &doc(vec![], None),
            &undo,
            "t",
        )
        .unwrap();
    e.store
        .journal_set_state(trial, ActionState::Trial, "")
        .unwrap();
    perfpilot_sys::knob::write_knob(&e.fs, VDA_READ_AHEAD, "512").unwrap();
    // A kept action of a process the fixture has (pid 7868, start time 66448), one of a
    // process long gone, and an entry that does not parse.
    let mut kept = |members: Vec<(i32, u64)>| {
        let d = doc(members, Some(CpuSet::parse("0").unwrap()));
        let id = e
            .store
            .journal_begin("sig", "python3", "cache_affinity", &d, "[]", "k")
            .unwrap();
        e.store
            .journal_set_state(id, ActionState::Kept, "")
            .unwrap();
        id
    };
    let alive = kept(vec![(7868, 66448)]);
    let gone = kept(vec![(7868, 1)]);
    let broken = e
        .store
        .journal_begin("sig", "x", "large_pages", "not json", "[]", "b")
        .unwrap();
    e.recover().unwrap();
    assert_eq!(knob(&e.fs), "8192");
    let state = |id| e.store.action(id).unwrap().unwrap().state;
    assert_eq!(state(trial), ActionState::Reverted);
    assert_eq!(state(alive), ActionState::Kept);
    assert_eq!(state(gone), ActionState::Ended);
    assert_eq!(state(broken), ActionState::Failed);
    assert_eq!(
        e.actions.held.iter().map(|h| h.id).collect::<Vec<_>>(),
        vec![alive]
    );
}
