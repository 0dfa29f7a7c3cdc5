//! What becomes of each action when the daemon stops, and how the journal and status say it.

use std::collections::HashMap;

use perfpilot_store::journal::ActionState;
use perfpilot_sys::change::Undo;
use perfpilot_sys::knob::{read_knob, write_knob};

use super::super::enforce::Held;
use super::{VDA_READ_AHEAD, engine, knob, rates, trial, two_threads};
use crate::engine::Engine;
use crate::journal::{self, ActionDoc};
use crate::strategy::StrategyKind;

const SHMEM_ENABLED: &str = "sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// Journals a kept action of `strategy` on `signature` with `undo`, and holds it.
fn hold(
    e: &mut Engine,
    signature: &str,
    strategy: StrategyKind,
    irreversible: bool,
    undo: &[Undo],
) -> i64 {
    let doc = ActionDoc {
        members: vec![],
        changes: vec![],
        design: crate::design::DesignKind::BeforeAfter,
        irreversible,
        signal: None,
        bound_to: None,
    };
    let id = e
        .store
        .journal_begin(
            signature,
            "app",
            strategy.as_str(),
            &serde_json::to_string(&doc).unwrap(),
            &serde_json::to_string(undo).unwrap(),
            "a test",
        )
        .unwrap();
    e.store
        .journal_set_state(id, ActionState::Kept, "gain 1.419")
        .unwrap();
    e.actions.held.push(Held {
        id,
        signature: signature.into(),
        strategy,
        doc,
        watch: None,
    });
    id
}

/// The huge pages of a kept action, with the shared-memory knob raised for them.
fn huge_pages_undo() -> Vec<Undo> {
    vec![
        Undo::Sysfs {
            rel: SHMEM_ENABLED.into(),
            previous: "never".into(),
        },
        Undo::Collapse {
            pid: 100,
            ranges: vec![(0x7f00_0000_0000, 4 << 20)],
        },
    ]
}

fn read_ahead_undo() -> Vec<Undo> {
    vec![Undo::Sysfs {
        rel: VDA_READ_AHEAD.into(),
        previous: "8192".into(),
    }]
}

/// Lists the workload in status, as a scan would.
fn list(e: &mut Engine) -> String {
    let w = two_threads(0.3);
    let states = HashMap::from([(w.signature.clone(), "optimized: nothing more to do".into())]);
    e.update_status(std::slice::from_ref(&w), &rates(2, 10.0), states);
    w.signature
}

#[test]
fn at_stop_kept_huge_pages_stay_kept_and_in_place_and_other_kept_actions_are_reverted() {
    let (_tmp, mut e) = engine("");
    let sig = list(&mut e);
    write_knob(&e.fs, SHMEM_ENABLED, "advise").unwrap();
    write_knob(&e.fs, VDA_READ_AHEAD, "512").unwrap();
    let pages = hold(
        &mut e,
        &sig,
        StrategyKind::LargePages,
        true,
        &huge_pages_undo(),
    );
    let ahead = hold(
        &mut e,
        "device:vda",
        StrategyKind::ReadAhead,
        false,
        &read_ahead_undo(),
    );
    e.shutdown().unwrap();
    let rec = e.store.action(pages).unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.note.as_str()),
        (
            ActionState::Kept,
            "kept; left in place at exit (huge pages are not split back)"
        )
    );
    // The knob raised for the pages is put back; the journal keeps only what stays in place,
    // so that a later `perfpilot revert` does not write the knob again.
    assert_eq!(read_knob(&e.fs, SHMEM_ENABLED).unwrap(), "never");
    let (_, undo) = journal::parse(&rec).unwrap();
    assert_eq!(undo, huge_pages_undo()[1..].to_vec());
    let rec = e.store.action(ahead).unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.note.as_str()),
        (ActionState::Reverted, "reverted at exit (revert_on_stop)")
    );
    assert_eq!(knob(&e.fs), "8192");
    // The workload table says what the action table says.
    assert_eq!(
        e.status.workloads[0].state,
        format!(
            "large_pages (action {pages}): kept; left in place at exit (huge pages are not split back)"
        )
    );
    assert!(e.actions.held.is_empty());
}

#[test]
fn with_revert_on_stop_off_kept_actions_stay_in_place_and_say_why() {
    let (_tmp, mut e) = engine("[tunables]\nrevert_on_stop = false\n");
    write_knob(&e.fs, VDA_READ_AHEAD, "512").unwrap();
    let ahead = hold(
        &mut e,
        "device:vda",
        StrategyKind::ReadAhead,
        false,
        &read_ahead_undo(),
    );
    e.shutdown().unwrap();
    let rec = e.store.action(ahead).unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.note.as_str()),
        (
            ActionState::Kept,
            "kept; left in place at exit (revert_on_stop is off)"
        )
    );
    assert_eq!(knob(&e.fs), "512");
    assert_eq!(journal::parse(&rec).unwrap().1, read_ahead_undo());
}

#[test]
fn at_stop_running_trials_are_undone_but_a_huge_page_trial_ends_with_its_pages_in_place() {
    let (_tmp, mut e) = engine("");
    let sig = list(&mut e);
    write_knob(&e.fs, VDA_READ_AHEAD, "512").unwrap();
    write_knob(&e.fs, SHMEM_ENABLED, "advise").unwrap();
    let mut begin = |strategy: StrategyKind| {
        let id = e
            .store
            .journal_begin(&sig, "app", strategy.as_str(), "{}", "[]", "t")
            .unwrap();
        e.store
            .journal_set_state(id, ActionState::Trial, "measuring")
            .unwrap();
        id
    };
    let (ahead_id, pages_id) = (
        begin(StrategyKind::ReadAhead),
        begin(StrategyKind::LargePages),
    );
    let mut ahead = trial(
        ahead_id,
        None,
        crate::design::DesignKind::BeforeAfter,
        vec![],
    );
    ahead.undo = read_ahead_undo();
    let mut pages = trial(pages_id, None, crate::design::DesignKind::OneWay, vec![]);
    pages.strategy = StrategyKind::LargePages;
    pages.doc.irreversible = true;
    pages.undo = huge_pages_undo();
    e.actions.trials = vec![ahead, pages];
    e.update_status(
        std::slice::from_ref(&two_threads(0.3)),
        &rates(2, 10.0),
        HashMap::from([(sig.clone(), "trial".into())]),
    );
    assert_eq!(e.status.trials.len(), 2);
    e.shutdown().unwrap();
    let rec = e.store.action(ahead_id).unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.note.as_str()),
        (
            ActionState::Reverted,
            "reverted at exit, before its verdict"
        )
    );
    let rec = e.store.action(pages_id).unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.note.as_str()),
        (
            ActionState::Ended,
            "ended at exit, before its verdict; its huge pages stay (they are not split back)"
        )
    );
    assert_eq!(knob(&e.fs), "8192");
    assert_eq!(read_knob(&e.fs, SHMEM_ENABLED).unwrap(), "never");
    assert!(e.status.trials.is_empty());
    assert_eq!(
        e.status.workloads[0].state,
        format!(
            "read_ahead (action {ahead_id}): reverted at exit, before its verdict; large_pages (action {pages_id}): ended at exit, before its verdict; its huge pages stay (they are not split back)"
        )
    );
}
