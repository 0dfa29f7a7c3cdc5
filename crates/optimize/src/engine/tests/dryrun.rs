//! The dry run: the daemon's decisions, with "would try" where it would start a trial, and
//! nothing journaled, applied or enforced.

use perfpilot_store::Store;
use perfpilot_store::journal::ActionState;
use perfpilot_sys::Fs;
use perfpilot_sys::knob::read_knob;

use super::{engine, rates, two_threads};
use crate::journal::ActionDoc;
use crate::strategy::SHMEM_ENABLED;
use crate::tunables::Level;

#[test]
fn a_dry_engine_says_what_it_would_try_and_starts_no_trial() {
    let (_tmp, mut e) = engine("");
    e.dry = true;
    e.tun.affinity_level = Level::Core;
    e.tun.memory_affinity = false;
    e.tun.large_pages = false;
    let w = two_threads(0.3);
    let states = e
        .propose_workloads(std::slice::from_ref(&w), &rates(2, 0.0))
        .unwrap();
    assert!(
        states[&w.signature].starts_with("would try cache_affinity: compact 2 threads"),
        "{states:?}"
    );
    assert!(e.actions.trials.is_empty());
    assert!(e.store.actions(false, 10).unwrap().is_empty());
    // The same decisions otherwise: a young workload is too young.
    let mut young = two_threads(0.3);
    young.age_s = 12.0;
    let states = e
        .propose_workloads(std::slice::from_ref(&young), &rates(2, 0.0))
        .unwrap();
    assert_eq!(states[&young.signature], "too young (12 s < min_age_s 60)");
}

#[test]
fn a_dry_run_reads_the_kept_actions_without_touching_them_or_the_system() {
    let (tmp, mut e) = engine("");
    e.tun.affinity_level = Level::Core;
    let w = two_threads(0.3);
    let doc = ActionDoc {
        members: vec![(100, 1)],
        changes: vec![],
        design: crate::design::DesignKind::Switchback,
        irreversible: false,
        signal: None,
        bound_to: None,
    };
    let id = e
        .store
        .journal_begin(
            &w.signature,
            "app",
            "cache_affinity",
            &serde_json::to_string(&doc).unwrap(),
            "[]",
            "a test",
        )
        .unwrap();
    e.store
        .journal_set_state(id, ActionState::Kept, "gain 1.15")
        .unwrap();
    e.dry = true;
    e.read_kept_actions().unwrap();
    assert_eq!(e.actions.held.len(), 1);
    let states = e
        .propose_workloads(std::slice::from_ref(&w), &rates(2, 0.0))
        .unwrap();
    assert!(
        !states[&w.signature].contains("cache_affinity: compact"),
        "a kept strategy is not proposed again: {states:?}"
    );
    // A whole dry run over the fixture: the kept action keeps its note, the start-up knob is
    // not raised, nothing new is journaled.
    let status = e.dry_run(std::time::Duration::ZERO).unwrap();
    assert!(status.trials.is_empty());
    let store = Store::open(tmp.path().join("state/perfpilot.db")).unwrap();
    let recs = store.actions(false, 10).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(
        (recs[0].state, recs[0].note.as_str()),
        (ActionState::Kept, "gain 1.15")
    );
    let fs = Fs::at(tmp.path().join("root"));
    assert_eq!(read_knob(&fs, SHMEM_ENABLED).unwrap(), "never");
}
