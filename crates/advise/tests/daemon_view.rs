//! What the daemon does with each workload: a running daemon's `status.json`, else a dry run of
//! its engine.

mod common;

use common::Tree;
use perfpilot_advise::{Options, ViewSource};
use perfpilot_optimize::daemon::Lock;
use perfpilot_store::Store;

#[test]
fn a_running_daemons_status_gives_each_workload_its_next_step() {
    let t = Tree::healthy();
    // The engine's topology: two online CPUs in one package.
    t.file("sys/devices/system/cpu/online", "0-1\n");
    for cpu in 0..2 {
        let base = format!("sys/devices/system/cpu/cpu{cpu}/topology");
        t.file(&format!("{base}/physical_package_id"), "0\n");
        t.file(&format!("{base}/core_id"), &format!("{cpu}\n"));
    }
    let dir = t.root().join("state");
    std::fs::create_dir_all(&dir).unwrap();
    drop(Store::open(dir.join("perfpilot.db")).unwrap());
    let now = perfpilot_sys::clock::now_ms();
    std::fs::write(
        dir.join("status.json"),
        serde_json::json!({
            "time_ms": now - 5000,
            "workloads": [
                {"signature": "ab", "name": "java", "pids": [200], "state": "too young (3 s < min_age_s 60)", "signal": null}
            ]
        })
        .to_string(),
    )
    .unwrap();
    // A daemon holds the directory: its own account is shown, not a dry run.
    let lock = Lock::take(&dir).unwrap();
    let r = t.advise(&Options {
        state_dir: Some(dir.clone()),
        ..Options::default()
    });
    let d = r.daemon.unwrap();
    assert!(d.running);
    assert_eq!(d.source, ViewSource::Daemon);
    assert_eq!(d.workloads.len(), 1);
    assert_eq!(d.workloads[0].next, "too young (3 s < min_age_s 60)");
    assert!(
        d.note.starts_with("from the running daemon's last scan, ") && d.note.ends_with(" ago"),
        "{}",
        d.note
    );
    drop(lock);
    // Without it, the engine's own dry run over the tree: not the stale status file, and no
    // journal row, nor a state directory where there was none.
    let r = t.advise(&Options {
        state_dir: Some(dir.clone()),
        ..Options::default()
    });
    let d = r.daemon.unwrap();
    assert_eq!(d.source, ViewSource::DryRun, "{}", d.note);
    assert!(d.note.starts_with("no daemon runs on "), "{}", d.note);
    assert!(d.workloads.iter().all(|w| w.signature != "ab"));
    let store = Store::open(dir.join("perfpilot.db")).unwrap();
    assert!(store.actions(false, 10).unwrap().is_empty());
    let nowhere = t.root().join("no-state");
    let r = t.advise(&Options {
        state_dir: Some(nowhere.clone()),
        ..Options::default()
    });
    assert_eq!(r.daemon.unwrap().source, ViewSource::DryRun);
    assert!(!nowhere.exists());
}

#[test]
fn without_a_state_directory_the_report_has_no_daemon_section() {
    let r = Tree::healthy().advise(&Options::default());
    assert!(r.daemon.is_none());
    let json = serde_json::to_value(&r).unwrap();
    assert!(json.get("daemon").is_none());
}
