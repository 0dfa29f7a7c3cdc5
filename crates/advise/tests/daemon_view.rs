//! What the daemon does with each workload, read from a state directory's `status.json`.

mod common;

use common::Tree;
use perfpilot_advise::Options;
use perfpilot_store::Store;

#[test]
fn a_state_directory_with_a_status_gives_each_workload_its_next_step() {
    let t = Tree::healthy();
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
    let r = t.advise(&Options {
        state_dir: Some(dir.clone()),
        ..Options::default()
    });
    let d = r.daemon.unwrap();
    assert!(!d.running);
    assert_eq!(d.workloads.len(), 1);
    assert_eq!(d.workloads[0].next, "too young (3 s < min_age_s 60)");
    assert!(
        d.note
            .starts_with("the daemon is not running: this is its last scan, ")
            && d.note.ends_with(" ago"),
        "{}",
        d.note
    );
}

#[test]
fn without_a_state_directory_the_report_has_no_daemon_section() {
    let r = Tree::healthy().advise(&Options::default());
    assert!(r.daemon.is_none());
    let json = serde_json::to_value(&r).unwrap();
    assert!(json.get("daemon").is_none());
}
