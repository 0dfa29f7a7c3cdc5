//! Property tests of the optimizer's journal: actions killed after any prefix of their steps
//! (also with the next step journaled but not made) are reverted to the start by
//! `revert_open`, and replaying every journaled undo record again, or reverting again, changes
//! nothing. Knobs live in a temporary `Fs::at` tree.

use perfpilot_optimize::journal::{self, ActionDoc};
use perfpilot_store::Store;
use perfpilot_sys::Fs;
use perfpilot_sys::change::{self, Change, Undo};
use perfpilot_sys::knob::read_knob;
use proptest::prelude::*;

const KNOBS: [(&str, &str); 2] = [
    (
        "sys/kernel/mm/transparent_hugepage/shmem_enabled",
        "always within_size advise [never] deny force\n",
    ),
    ("sys/block/vda/queue/read_ahead_kb", "128\n"),
];
const VALUES: [&[&str]; 2] = [&["advise", "never", "within_size"], &["16", "128", "4096"]];

fn tree() -> (tempfile::TempDir, Fs) {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in KNOBS {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let fs = Fs::at(dir.path());
    (dir, fs)
}

fn knobs(fs: &Fs) -> Vec<String> {
    KNOBS.iter().map(|k| read_knob(fs, k.0).unwrap()).collect()
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}

/// Journals and makes `steps` of one action as the engine does (undo record first), the last
/// action stopping after `prefix` steps, with the next journaled but not made when `torn`.
fn run_action(
    store: &mut Store,
    fs: &Fs,
    steps: &[(usize, usize)],
    stop_after: Option<(usize, bool)>,
) {
    let mut doc = ActionDoc {
        members: Vec::new(),
        changes: Vec::new(),
        design: perfpilot_optimize::design::DesignKind::BeforeAfter,
        irreversible: false,
        signal: None,
        bound_to: None,
    };
    let mut undo: Vec<Undo> = Vec::new();
    let id = store
        .journal_begin("device:vda", "vda", "read_ahead", &json(&doc), "[]", "test")
        .unwrap();
    for (n, &(k, v)) in steps.iter().enumerate() {
        let c = Change::Sysfs {
            rel: KNOBS[k].0.into(),
            value: VALUES[k][v].into(),
        };
        let crash_here = stop_after.is_some_and(|(p, _)| n == p);
        if crash_here && !stop_after.is_some_and(|(_, torn)| torn) {
            return;
        }
        undo.push(change::prepare(fs, &c).unwrap());
        doc.changes.push(c.clone());
        store.journal_extend(id, &json(&doc), &json(&undo)).unwrap();
        if crash_here {
            return;
        }
        change::apply(fs, &c).unwrap();
    }
    if stop_after.is_none() {
        store
            .journal_set_state(id, perfpilot_store::journal::ActionState::Kept, "kept")
            .unwrap();
    }
}

fn step() -> impl Strategy<Value = (usize, usize)> {
    (0..KNOBS.len(), 0..3usize)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn reverting_the_journal_after_a_crash_at_any_step_restores_the_start_and_replay_is_idempotent(
        actions in prop::collection::vec(prop::collection::vec(step(), 1..6), 1..4),
        crash_at in 0usize..6,
        torn in any::<bool>(),
    ) {
        let (dir, fs) = tree();
        let start = knobs(&fs);
        let mut store = Store::open(dir.path().join("state/perfpilot.db")).unwrap();
        let last = actions.len() - 1;
        for (i, steps) in actions.iter().enumerate() {
            // Earlier actions were kept; the last one was running when the daemon died.
            let stop = (i == last).then_some((crash_at.min(steps.len()), torn));
            run_action(&mut store, &fs, steps, stop);
        }
        let done = journal::revert_open(&mut store, &fs, None, "test").unwrap();
        prop_assert_eq!(done.len(), actions.len());
        prop_assert_eq!(knobs(&fs), start.clone());
        // Nothing is open: reverting again does nothing.
        prop_assert!(journal::revert_open(&mut store, &fs, None, "again").unwrap().is_empty());
        // Replaying every journaled record again, newest action first, changes nothing.
        for rec in store.actions(false, 100).unwrap() {
            let (doc, undo) = journal::parse(&rec).unwrap();
            journal::undo_all(&fs, &doc.members, &undo);
        }
        prop_assert_eq!(knobs(&fs), start);
    }
}
