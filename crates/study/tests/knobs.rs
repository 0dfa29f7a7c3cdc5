//! Knobs are restored after a trial, when setting one fails, on panic and on interrupt. Knob
//! paths live under a temporary `Fs::at` tree, never the live system.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use perfpilot_observe::{Fs, Topology};
use perfpilot_store::TrialStatus;
use perfpilot_study::deploy::KnobGuard;
use perfpilot_study::trial::{TrialContext, run_trial};
use perfpilot_study::{Config, Study};
use perfpilot_sys::knob::read_knob;

const THP: &str = "sys/kernel/mm/transparent_hugepage/enabled";
const SWAPPINESS: &str = "proc/sys/vm/swappiness";

fn tree() -> (tempfile::TempDir, Fs) {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in [(THP, "always [madvise] never\n"), (SWAPPINESS, "60\n")] {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let fs = Fs::at(dir.path());
    (dir, fs)
}

fn vm_topology() -> Topology {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/vm-1node");
    Topology::read(&Fs::at(root)).unwrap()
}

#[test]
fn guard_restores_in_reverse_on_drop() {
    let (_d, fs) = tree();
    {
        let mut g = KnobGuard::new(&fs);
        g.set(THP, "never").unwrap();
        g.set(SWAPPINESS, "10").unwrap();
        g.set(SWAPPINESS, "20").unwrap();
        assert_eq!(read_knob(&fs, THP).unwrap(), "never");
        assert_eq!(read_knob(&fs, SWAPPINESS).unwrap(), "20");
        assert_eq!(g.records().len(), 3);
    }
    assert_eq!(read_knob(&fs, THP).unwrap(), "madvise");
    assert_eq!(read_knob(&fs, SWAPPINESS).unwrap(), "60");
}

#[test]
fn a_knob_that_cannot_be_written_is_named_and_the_others_restored() {
    let (_d, fs) = tree();
    let mut g = KnobGuard::new(&fs);
    g.set(SWAPPINESS, "5").unwrap();
    let e = g
        .set("sys/kernel/mm/missing_knob", "1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("/sys/kernel/mm/missing_knob"), "{e}");
    assert!(g.restore().is_empty());
    assert_eq!(read_knob(&fs, SWAPPINESS).unwrap(), "60");
}

#[test]
fn knobs_are_restored_on_panic() {
    let (_d, fs) = tree();
    let fs2 = fs.clone();
    let r = std::panic::catch_unwind(move || {
        let mut g = KnobGuard::new(&fs2);
        g.set(THP, "always").unwrap();
        panic!("a trial panicked");
    });
    assert!(r.is_err());
    assert_eq!(read_knob(&fs, THP).unwrap(), "madvise");
}

fn study(dir: &Path, command: &str, ready_timeout: &str) -> Study {
    let text = format!(
        r#"
[deployment]
command = "{command}"
ready = {{ timeout = "{ready_timeout}" }}
base_port = 24800
[[deployment.knobs]]
path = "{SWAPPINESS}"
value = "{{swap}}"
[[deployment.knobs]]
path = "{THP}"
value = "never"

[load]
url = "http://127.0.0.1:{{port}}/"

[factors]
swap = [1]

[run]
warmup = "0s"
measure = "1s"
repetitions = 1
"#
    );
    Study::parse(&text, &dir.join("knobs.toml")).unwrap()
}

#[test]
fn a_trial_whose_command_exits_fails_with_its_reason_and_restores_knobs() {
    let (d, fs) = tree();
    let s = study(
        d.path(),
        "sh -c 'echo no model directory >&2; exit 3'",
        "10s",
    );
    let topo = vm_topology();
    let stop = AtomicBool::new(false);
    let ctx = TrialContext {
        study: &s,
        topo: &topo,
        knob_fs: &fs,
        knob_journal: None,
        stop: &stop,
    };
    let o = run_trial(&ctx, &s.configurations()[0], None);
    assert_eq!(o.status, TrialStatus::Failed);
    assert!(o.reason.contains("exited"), "{}", o.reason);
    assert!(o.reason.contains("no model directory"), "{}", o.reason);
    assert_eq!(o.detail.knobs.len(), 2, "both undo records kept");
    assert_eq!(read_knob(&fs, SWAPPINESS).unwrap(), "60");
    assert_eq!(read_knob(&fs, THP).unwrap(), "madvise");
}

#[test]
fn a_trial_that_never_becomes_ready_fails_and_restores_knobs() {
    let (d, fs) = tree();
    let s = study(d.path(), "sleep 30", "300ms");
    let topo = vm_topology();
    let stop = AtomicBool::new(false);
    let ctx = TrialContext {
        study: &s,
        topo: &topo,
        knob_fs: &fs,
        knob_journal: None,
        stop: &stop,
    };
    let o = run_trial(&ctx, &s.configurations()[0], None);
    assert_eq!(o.status, TrialStatus::Failed);
    assert!(o.reason.contains("did not become ready"), "{}", o.reason);
    assert_eq!(read_knob(&fs, SWAPPINESS).unwrap(), "60");
}

#[test]
fn an_interrupt_stops_the_trial_and_restores_knobs() {
    let (d, fs) = tree();
    let s = study(d.path(), "sleep 30", "60s");
    let topo = vm_topology();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let fs2 = fs.clone();
    // Interrupt once the knobs are set (the trial is waiting for readiness).
    let watcher = std::thread::spawn(move || {
        for _ in 0..500 {
            if read_knob(&fs2, SWAPPINESS).ok().as_deref() == Some("1") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        flag.store(true, Ordering::SeqCst);
    });
    let ctx = TrialContext {
        study: &s,
        topo: &topo,
        knob_fs: &fs,
        knob_journal: None,
        stop: &stop,
    };
    let config: Config = s.configurations()[0].clone();
    let o = run_trial(&ctx, &config, None);
    watcher.join().unwrap();
    assert_eq!(o.status, TrialStatus::Failed);
    assert_eq!(o.reason, "interrupted");
    assert_eq!(read_knob(&fs, SWAPPINESS).unwrap(), "60");
    assert_eq!(read_knob(&fs, THP).unwrap(), "madvise");
}

#[test]
fn a_killed_study_leaves_a_journal_the_next_run_restores_from() {
    let (d, fs) = tree();
    let journal = d.path().join("study.knobs-journal.json");
    let mut g = KnobGuard::journaled(&fs, &journal);
    g.set(THP, "never").unwrap();
    g.set(SWAPPINESS, "10").unwrap();
    // The undo records were on disk before the knobs changed.
    assert!(journal.exists());
    // SIGKILL: no destructor runs.
    std::mem::forget(g);
    assert_eq!(read_knob(&fs, THP).unwrap(), "never");
    assert_eq!(read_knob(&fs, SWAPPINESS).unwrap(), "10");
    let lines = perfpilot_study::deploy::recover_knobs(&fs, &journal).unwrap();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(read_knob(&fs, THP).unwrap(), "madvise");
    assert_eq!(read_knob(&fs, SWAPPINESS).unwrap(), "60");
    assert!(!journal.exists());
    // Nothing to recover: fine. A clean run removes its journal when it restores.
    assert!(
        perfpilot_study::deploy::recover_knobs(&fs, &journal)
            .unwrap()
            .is_empty()
    );
    let mut g = KnobGuard::journaled(&fs, &journal);
    g.set(SWAPPINESS, "30").unwrap();
    assert!(g.restore().is_empty());
    assert!(!journal.exists());
}
