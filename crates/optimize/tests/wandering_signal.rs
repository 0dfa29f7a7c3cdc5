//! PostgreSQL's transactions per CPU-second, recorded once a second for 16 minutes with nothing
//! changed (`tests/data/pg-no-change-2026-11-25.csv`; docs/optimizer.md, "Windows alike from
//! one to the next"), cut into the daemon's 8-second windows and replayed as no-change
//! sequential trials at every start (`perfpilot bench verdicts` prints the same).

use std::path::Path;

use perfpilot_optimize::trace::{self, ReplayPlan};

#[test]
fn on_postgresqls_wandering_signal_trials_of_no_change_seldom_decide_anything() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pg-no-change-2026-11-25.csv");
    let plan = ReplayPlan {
        min: 6,
        max: 30,
        resolution: 0.03,
        confidence: 0.95,
        min_effect: 0.02,
    };
    let (windows, r) = trace::replay_file(&path, 8.0, &plan).unwrap();
    assert!(windows > 100, "{windows} windows");
    // The windows wander in spells of minutes (21-23 k, then 26-28 k for eight minutes, then
    // 23-25 k): neighbours are alike.
    assert!(r.lag1 > 0.5, "{r:?}");
    assert_eq!(r.plain.trials(), r.serial.trials());
    // Taken as independent, the windows give a keep or a revert from nothing in a large share
    // of the starts; allowed for, in few.
    let trials = r.plain.trials() as f64;
    assert!(r.plain.false_verdicts() as f64 > 0.3 * trials, "{r:?}");
    assert!((r.serial.false_verdicts() as f64) < 0.1 * trials, "{r:?}");
}
