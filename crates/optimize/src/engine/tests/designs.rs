//! The engine's side of the designs: a one-way trial's prior taken from the journal, a control
//! that goes mid-trial, which siblings may be controls, and the watch after a one-way keep.

use std::collections::HashMap;

use perfpilot_store::journal::ActionState;

use super::super::control::{Control, CpuSharing, Pairing};
use super::super::enforce::{Held, HeldWatch};
use super::super::trial::TrialIo;
use super::super::watch::Window;
use super::{engine, seq, seq_mut, trial, two_threads};
use crate::design::{DesignKind, Sequential, Watch, WindowPlan};
use crate::journal::ActionDoc;
use crate::signal::SignalKind;
use crate::strategy::StrategyKind;

/// A control sibling of signature `signature`, `app (pid 200)` on the same CPUs.
fn control(signature: &str) -> Control {
    Control {
        signature: signature.into(),
        name: "app (pid 200)".into(),
        members: vec![(200, 1)],
        signal: SignalKind::Io,
        cpus: CpuSharing::Same,
    }
}

/// Journals a large-pages action on a server of `kind` with this verdict's gain and ending.
fn journaled_verdict(e: &mut super::super::Engine, kind: &str, ratio: f64, ended: &str) -> i64 {
    let id = e
        .store
        .journal_begin("sig", "postgres", "large_pages", "{}", "[]", "t")
        .unwrap();
    let v = serde_json::json!({
        "action": id, "signal": "postgresql", "higher_is_better": true, "design": "one_way",
        "kind": kind, "before": {"n": 16, "mean": 100.0, "sd": 5.0},
        "after": {"n": 16, "mean": 100.0 * ratio, "sd": 5.0},
        "gain": {"ratio": ratio, "ci_low": ratio * 0.93, "ci_high": ratio / 0.93, "confidence": 0.95},
        "decision": "neutral", "ended": ended, "why": "t"
    });
    e.store
        .journal_close(id, &v.to_string(), ActionState::Ended, "t")
        .unwrap();
    id
}

#[test]
fn a_verdict_stored_before_designs_were_named_still_reads() {
    let old = r#"{"action":1,"signal":"s","higher_is_better":true,"interleaved":true,"before":{"n":6,"mean":100.0,"sd":5.0},"after":{"n":6,"mean":120.0,"sd":5.0},"gain":{"ratio":1.2,"ci_low":1.1,"ci_high":1.3,"confidence":0.95},"decision":"keep","why":"t"}"#;
    let v: super::super::Verdict = serde_json::from_str(old).expect("an old verdict reads");
    assert_eq!(
        (v.design, v.shown),
        (DesignKind::BeforeAfter, crate::design::Shown::Effect)
    );
}

#[test]
fn earlier_complete_verdicts_of_the_same_strategy_on_the_same_kind_of_server_form_the_prior() {
    let (_tmp, mut e) = engine("");
    assert!(e.prior(StrategyKind::LargePages, "postgresql").is_none());
    journaled_verdict(&mut e, "postgresql", 1.09, "complete");
    assert!(
        e.prior(StrategyKind::LargePages, "postgresql").is_none(),
        "one verdict says too little"
    );
    journaled_verdict(&mut e, "postgresql", 1.05, "complete");
    // Neither another server's verdict nor one of a trial that ended without its windows.
    journaled_verdict(&mut e, "redis", 1.30, "complete");
    journaled_verdict(&mut e, "postgresql", 0.50, "workload_exited");
    let p = e
        .prior(StrategyKind::LargePages, "postgresql")
        .expect("a prior");
    assert_eq!(p.verdicts, 2);
    assert_eq!(p.of, "large_pages on postgresql");
    assert!(
        (p.belief.mean - (1.09f64.ln() + 1.05f64.ln()) / 2.0).abs() < 1e-9,
        "{p:?}"
    );
    assert!(e.prior(StrategyKind::CacheAffinity, "postgresql").is_none());
}

#[test]
fn a_control_that_exits_mid_trial_leaves_a_before_after_trial_on_the_treated_workloads_own_windows()
{
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let id = e
        .store
        .journal_begin(&w.signature, "app", "large_pages", "{}", "[]", "t")
        .unwrap();
    let mut t = trial(id, Some(SignalKind::Io), DesignKind::Control, vec![]);
    t.design = super::super::trial::Design::Sequential(Sequential::controlled(
        WindowPlan::fixed(6),
        true,
        vec![],
        vec![],
    ));
    t.control = Some(control("fedcba9876543210"));
    let mut io = TrialIo {
        store: &mut e.store,
        fs: &e.fs,
        manual: &mut e.policy.manual,
    };
    let plan = WindowPlan::fixed(6);
    let obs = |v: f64| Window {
        main: Ok(Some(v)),
        shadow: None,
        rest: None,
    };
    // Paired windows are judged as ratios; a window of the treated one alone is not.
    for v in [100.0, 102.0, 98.0] {
        let end = t
            .advance(
                Some(&w),
                Some(&obs(v)),
                Pairing::Paired(50.0),
                &plan,
                &mut io,
            )
            .unwrap();
        assert_eq!(end, None);
    }
    t.advance(
        Some(&w),
        Some(&obs(101.0)),
        Pairing::Unpaired,
        &plan,
        &mut io,
    )
    .unwrap();
    assert_eq!(seq(&t).off, vec![2.0, 2.04, 1.96]);
    // The control exits: from here the treated workload's own windows, and the journal says so.
    t.advance(
        Some(&w),
        Some(&obs(99.0)),
        Pairing::Lost("exited".into()),
        &plan,
        &mut io,
    )
    .unwrap();
    assert!(t.control.is_none());
    assert_eq!(seq(&t).off, vec![100.0, 102.0, 98.0, 99.0]);
    assert!(seq_mut(&mut t).raw.is_none());
    let note = e.store.action(id).unwrap().unwrap().note;
    assert!(
        note.starts_with("its control app (pid 200) exited: judged on its own windows from here"),
        "{note}"
    );
}

#[test]
fn a_kept_one_way_action_whose_later_windows_show_a_loss_is_ended_and_backed_off() {
    let (_tmp, mut e) = engine("");
    let w = two_threads(0.3);
    let id = e
        .store
        .journal_begin(&w.signature, "app", "large_pages", "{}", "[]", "t")
        .unwrap();
    e.store
        .journal_set_state(id, ActionState::Kept, "kept")
        .unwrap();
    let baseline = vec![100.0, 101.0, 99.0, 100.0, 100.5, 99.5];
    e.actions.held.push(Held {
        id,
        signature: w.signature.clone(),
        strategy: StrategyKind::LargePages,
        doc: ActionDoc {
            members: vec![],
            changes: vec![],
            design: DesignKind::OneWay,
            irreversible: true,
            signal: Some(SignalKind::Io),
            bound_to: None,
        },
        watch: Some(HeldWatch {
            judge: w.signature.clone(),
            watch: Watch::new(baseline, true, 12, 6, 0.95),
        }),
    });
    let scan = |e: &mut super::super::Engine, v: f64| {
        let obs: HashMap<String, Window> = [(
            w.signature.clone(),
            Window {
                main: Ok(Some(v)),
                shadow: None,
                rest: None,
            },
        )]
        .into();
        e.enforce_held(std::slice::from_ref(&w), &obs).unwrap();
    };
    for v in [100.0, 99.0, 101.0, 100.0, 100.0, 100.5] {
        scan(&mut e, v);
    }
    assert_eq!(e.actions.held.len(), 1, "no loss at the first look");
    for v in [90.0, 89.0, 91.0, 90.0, 90.5, 90.0] {
        scan(&mut e, v);
    }
    assert!(e.actions.held.is_empty(), "the loss ends it");
    let rec = e.store.action(id).unwrap().unwrap();
    assert_eq!(rec.state, ActionState::Ended, "{}", rec.note);
    assert!(
        rec.note.starts_with("a later look showed a loss: gain 0.9"),
        "{}",
        rec.note
    );
    assert!(
        rec.note.ends_with("ended (its huge pages stay)"),
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
fn a_sibling_holding_huge_pages_that_stay_may_be_a_control_and_one_holding_a_change_that_can_be_undone_may_not()
 {
    let (_tmp, mut e) = engine("");
    let held = |signature: &str, strategy: StrategyKind, irreversible: bool| Held {
        id: 1,
        signature: signature.into(),
        strategy,
        doc: ActionDoc {
            members: vec![],
            changes: vec![],
            design: DesignKind::Control,
            irreversible,
            signal: Some(SignalKind::Io),
            bound_to: None,
        },
        watch: None,
    };
    e.actions
        .held
        .push(held("stays", StrategyKind::LargePages, true));
    e.actions
        .held
        .push(held("undoable", StrategyKind::LargePages, false));
    e.actions
        .held
        .push(held("other", StrategyKind::CacheAffinity, false));
    assert!(!e.actions.taken("stays", StrategyKind::LargePages));
    assert!(e.actions.taken("undoable", StrategyKind::LargePages));
    assert!(!e.actions.taken("other", StrategyKind::LargePages));
    // In a trial, as the treated workload or as another's control: taken whatever it holds.
    let mut t = trial(2, Some(SignalKind::Io), DesignKind::Control, vec![]);
    t.signature = "treated".into();
    t.control = Some(control("stays"));
    e.actions.trials.push(t);
    assert!(e.actions.taken("stays", StrategyKind::LargePages));
    assert!(e.actions.taken("treated", StrategyKind::LargePages));
}
