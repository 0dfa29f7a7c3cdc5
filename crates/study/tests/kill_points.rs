//! A study killed with SIGKILL at each of its knob kill points (`perfpilot_sys::failpoint`),
//! at each time the point is reached, leaves a journal from which the next run restores every
//! knob. Knobs live in a temporary `Fs::at` tree, never the live system.
//!
//! The test re-executes its own binary with `CHILD_ENV` naming the tree and `FAILPOINTS`
//! arming one point; in the child, [`knob_child`] sets three knobs through a journaled guard
//! and restores them, as a trial does.

use std::process::Command;

use perfpilot_observe::Fs;
use perfpilot_study::deploy::{KnobGuard, recover_knobs};
use perfpilot_sys::failpoint::POINTS;
use perfpilot_sys::knob::read_knob;

const CHILD_ENV: &str = "PERFPILOT_STUDY_KILL_CHILD";
const THP: &str = "sys/kernel/mm/transparent_hugepage/enabled";
const SWAPPINESS: &str = "proc/sys/vm/swappiness";
const START: [(&str, &str, &str); 2] = [
    (THP, "always [madvise] never\n", "madvise"),
    (SWAPPINESS, "60\n", "60"),
];
/// What the child sets, in order (one knob twice, as a study that sets it per instance).
const SETS: [(&str, &str); 3] = [(THP, "never"), (SWAPPINESS, "10"), (SWAPPINESS, "20")];

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text, _) in START {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

/// The child's body; a no-op unless run by the test below.
#[test]
fn knob_child() {
    let Some(root) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let root = std::path::PathBuf::from(root);
    let fs = Fs::at(&root);
    let mut g = KnobGuard::journaled(&fs, &root.join("knobs-journal.json"));
    for (rel, value) in SETS {
        g.set(rel, value).expect("child: set");
    }
    assert!(g.restore().is_empty(), "child: restore");
}

#[test]
fn a_study_killed_at_any_knob_point_is_restored_by_the_next_run() {
    let exe = std::env::current_exe().unwrap();
    let study_points: Vec<&str> = POINTS
        .iter()
        .map(|p| p.name)
        .filter(|n| n.starts_with("study."))
        .collect();
    assert_eq!(study_points.len(), 3, "{study_points:?}");
    let mut covered = 0;
    for point in &study_points {
        // Each point is reached once per knob set (or restored): kill at every one of them.
        for nth in 0..SETS.len() {
            let dir = tree();
            let out = Command::new(&exe)
                .args(["knob_child", "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, dir.path())
                .env("FAILPOINTS", format!("{point}={nth}*off->return"))
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                out.status.signal(),
                Some(9),
                "{point} #{nth} was not reached (the child was not killed): {stderr}"
            );
            assert!(stderr.contains(&format!("kill point {point} reached")));
            let fs = Fs::at(dir.path());
            let journal = dir.path().join("knobs-journal.json");
            recover_knobs(&fs, &journal)
                .unwrap_or_else(|e| panic!("{point} #{nth}: recovery failed: {e}"));
            for (rel, _, value) in START {
                assert_eq!(
                    read_knob(&fs, rel).unwrap(),
                    value,
                    "{point} #{nth}: /{rel} was not restored"
                );
            }
            assert!(!journal.exists(), "{point} #{nth}: the journal stays");
            covered += 1;
        }
    }
    println!(
        "study knobs: {covered} kills at {} kill points, every knob restored",
        study_points.len()
    );
}
