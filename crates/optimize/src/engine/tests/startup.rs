//! `shmem_enabled` raised at start: journaled, shown as an action, restored at stop, by the next
//! daemon after a crash and by `perfpilot revert`; left alone where it should be.

use std::path::Path;

use perfpilot_store::journal::ActionState;
use perfpilot_store::{ActionRecord, Store};
use perfpilot_sys::Fs;
use perfpilot_sys::change::{Change, Undo};
use perfpilot_sys::knob::{read_knob, write_knob};

use super::super::enforce::Held;
use super::super::startup::{AtStart, SIGNATURE};
use super::engine;
use crate::config::DaemonConfig;
use crate::engine::Engine;
use crate::journal::{self, ActionDoc};
use crate::strategy::{SHMEM_ENABLED, StrategyKind};
use crate::tunables::Tunables;

/// A second engine over the state and fixture tree of a first one (a restarted daemon).
fn engine_in(tmp: &Path, toml: &str) -> Engine {
    let fs = Fs::at(tmp.join("root"));
    let store = Store::open(tmp.join("state/perfpilot.db")).unwrap();
    let config = DaemonConfig::parse(toml, Path::new("test.toml")).unwrap();
    let mut tun = Tunables::default();
    config.apply_tunables(&mut tun);
    let mut e = Engine::new(&fs, store, config, tun).unwrap();
    e.watch.signals.cpi = None;
    e
}

/// The journal's actions on the knob, oldest first.
fn knob_actions(e: &Engine) -> Vec<ActionRecord> {
    let mut v: Vec<ActionRecord> = e
        .store
        .actions(false, 100)
        .unwrap()
        .into_iter()
        .filter(|r| r.signature == SIGNATURE)
        .collect();
    v.reverse();
    v
}

fn shmem(e: &Engine) -> String {
    read_knob(&e.fs, SHMEM_ENABLED).unwrap()
}

#[test]
fn at_start_shmem_enabled_never_is_raised_through_the_journal_and_restored_at_stop() {
    let (_tmp, mut e) = engine("");
    assert_eq!(shmem(&e), "never");
    e.begin().unwrap();
    assert_eq!(shmem(&e), "advise");
    let recs = knob_actions(&e);
    assert_eq!(recs.len(), 1);
    let rec = &recs[0];
    // An action like any other in `perfpilot status`, whose undo record holds the old value.
    assert_eq!(
        (rec.strategy.as_str(), rec.workload.as_str(), rec.state),
        ("large_pages", "shmem_enabled", ActionState::Kept)
    );
    assert!(
        rec.reason
            .contains("servers started from now on map shared memory aligned"),
        "{}",
        rec.reason
    );
    let (doc, undo) = journal::parse(rec).unwrap();
    assert_eq!(
        doc.changes,
        vec![Change::Sysfs {
            rel: SHMEM_ENABLED.into(),
            value: "advise".into()
        }]
    );
    assert_eq!(
        undo,
        vec![Undo::Sysfs {
            rel: SHMEM_ENABLED.into(),
            previous: "never".into()
        }]
    );
    assert!(
        e.status
            .notes
            .iter()
            .any(|n| n.starts_with("shmem_enabled: raised from `never` to `advise` at start")),
        "{:?}",
        e.status.notes
    );
    e.shutdown().unwrap();
    assert_eq!(shmem(&e), "never");
    let rec = &knob_actions(&e)[0];
    assert_eq!(rec.state, ActionState::Reverted);
    assert!(
        rec.note.starts_with("restored at exit: restored /"),
        "{}",
        rec.note
    );
    // The last status says so too.
    let notes: Vec<&String> = e
        .status
        .notes
        .iter()
        .filter(|n| n.starts_with("shmem_enabled"))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("shmem_enabled: restored at exit"),
        "{notes:?}"
    );
}

#[test]
fn a_crashed_daemons_knob_is_taken_over_by_the_next_daemon_in_one_journal_row_and_restored_by_revert()
 {
    let (tmp, mut e) = engine("");
    e.begin().unwrap();
    // The daemon dies without stopping: the knob stays raised, its action open.
    drop(e);
    let mut e = engine_in(tmp.path(), "");
    assert_eq!(shmem(&e), "advise");
    e.begin().unwrap();
    // Neither restored nor raised again: the same action, taken over, its undo still `never`.
    let recs = knob_actions(&e);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].state, ActionState::Kept);
    assert!(
        recs[0].note.contains("taken over by this one"),
        "{}",
        recs[0].note
    );
    assert_eq!(
        journal::parse(&recs[0]).unwrap().1,
        vec![Undo::Sysfs {
            rel: SHMEM_ENABLED.into(),
            previous: "never".into()
        }]
    );
    assert!(
        e.status
            .notes
            .iter()
            .any(|n| n.starts_with("shmem_enabled: `advise` since an earlier daemon raised it")),
        "{:?}",
        e.status.notes
    );
    assert_eq!(shmem(&e), "advise");
    // A third start after a second crash: still one row.
    drop(e);
    let mut e = engine_in(tmp.path(), "");
    e.begin().unwrap();
    assert_eq!(knob_actions(&e).len(), 1);
    drop(e);
    // `perfpilot revert` after that crash.
    let mut store = Store::open(tmp.path().join("state/perfpilot.db")).unwrap();
    let fs = Fs::at(tmp.path().join("root"));
    let done =
        journal::revert_open(&mut store, &fs, None, "reverted by `perfpilot revert`").unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(read_knob(&fs, SHMEM_ENABLED).unwrap(), "never");
}

#[test]
fn a_crashed_daemons_knob_is_restored_by_a_next_daemon_that_would_not_raise_it() {
    let (tmp, mut e) = engine("");
    e.begin().unwrap();
    drop(e);
    let mut e = engine_in(tmp.path(), "[tunables]\nshmem_advise_at_start = false\n");
    e.begin().unwrap();
    assert_eq!(shmem(&e), "never");
    let recs = knob_actions(&e);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].state, ActionState::Reverted);
    assert!(
        recs[0]
            .note
            .starts_with("restored when the daemon restarted: restored /"),
        "{}",
        recs[0].note
    );
}

#[test]
fn a_crashed_daemons_knob_changed_since_is_left_as_manual_and_not_raised_again() {
    let (tmp, mut e) = engine("");
    e.begin().unwrap();
    drop(e);
    write_knob(&Fs::at(tmp.path().join("root")), SHMEM_ENABLED, "always").unwrap();
    let mut e = engine_in(tmp.path(), "");
    e.begin().unwrap();
    assert_eq!(shmem(&e), "always");
    let recs = knob_actions(&e);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].state, ActionState::Manual);
}

#[test]
fn the_knob_is_not_raised_with_large_pages_or_the_tunable_off_nor_when_it_is_not_never() {
    for toml in [
        "[tunables]\nlarge_pages = false\n",
        "[tunables]\nshmem_advise_at_start = false\n",
    ] {
        let (_tmp, mut e) = engine(toml);
        e.begin().unwrap();
        assert_eq!(shmem(&e), "never", "{toml}");
        assert!(knob_actions(&e).is_empty(), "{toml}");
        assert!(
            e.status
                .notes
                .iter()
                .any(|n| n.starts_with("shmem_enabled: left as it is (")),
            "{:?}",
            e.status.notes
        );
    }
    for value in ["deny", "force", "advise", "always", "within_size"] {
        let (_tmp, mut e) = engine("");
        write_knob(&e.fs, SHMEM_ENABLED, value).unwrap();
        e.begin().unwrap();
        assert_eq!(shmem(&e), value);
        assert!(knob_actions(&e).is_empty(), "{value}");
        e.shutdown().unwrap();
        assert_eq!(shmem(&e), value);
    }
    assert_eq!(AtStart::decide(true, true, Ok("never")), AtStart::Raise);
    let AtStart::Leave(why) = AtStart::decide(true, true, Ok("deny")) else {
        panic!()
    };
    assert!(why.contains("`deny`: left as it is"), "{why}");
    let AtStart::Leave(why) = AtStart::decide(true, true, Err("no such file")) else {
        panic!()
    };
    assert_eq!(
        why,
        "shmem_enabled: cannot be read (no such file); left as it is"
    );
}

#[test]
fn a_knob_changed_behind_perfpilots_back_is_left_as_it_is_at_stop() {
    let (_tmp, mut e) = engine("");
    e.begin().unwrap();
    write_knob(&e.fs, SHMEM_ENABLED, "always").unwrap();
    e.shutdown().unwrap();
    assert_eq!(shmem(&e), "always");
    let rec = &knob_actions(&e)[0];
    assert_eq!(rec.state, ActionState::Manual);
    assert!(
        rec.note
            .contains("was changed to `always` behind perfpilot's back")
    );
}

#[test]
fn with_revert_on_stop_off_the_knob_stays_beside_kept_huge_pages_only() {
    let toml = "[tunables]\nrevert_on_stop = false\n";
    // Without huge pages kept, it is restored.
    let (_tmp, mut e) = engine(toml);
    e.begin().unwrap();
    e.shutdown().unwrap();
    assert_eq!(shmem(&e), "never");
    // Beside kept huge pages left in place, it stays, open in the journal for `revert`.
    let (_tmp, mut e) = engine(toml);
    e.begin().unwrap();
    let doc = ActionDoc {
        members: vec![],
        changes: vec![],
        design: crate::design::DesignKind::BeforeAfter,
        irreversible: true,
        signal: None,
        bound_to: None,
    };
    let id = e
        .store
        .journal_begin(
            "0123456789abcdef",
            "app",
            "large_pages",
            &serde_json::to_string(&doc).unwrap(),
            "[]",
            "a test",
        )
        .unwrap();
    e.store
        .journal_set_state(id, ActionState::Kept, "gain 1.15")
        .unwrap();
    e.actions.held.push(Held {
        id,
        signature: "0123456789abcdef".into(),
        strategy: StrategyKind::LargePages,
        doc,
        watch: None,
    });
    e.shutdown().unwrap();
    assert_eq!(shmem(&e), "advise");
    let rec = &knob_actions(&e)[0];
    assert_eq!(rec.state, ActionState::Kept);
    assert!(rec.note.contains("revert_on_stop is off"), "{}", rec.note);
}
