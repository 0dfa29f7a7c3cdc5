//! Verdict history: a finding the daemon measured on this host says so and ranks by the gain.

mod common;

use std::collections::BTreeMap;

use common::{Proc, Tree, with_id};
use perfpilot_advise::{FsFigures, MountFigures, Options};
use perfpilot_observe::workload::stable_hash;
use perfpilot_store::Store;
use perfpilot_store::journal::ActionState;

const GIB_KB: u64 = 1 << 20;

fn heap(pid: i32, name: &'static str, cmdline: Vec<&'static str>) -> Proc {
    Proc {
        rss_anon_kb: 4 * GIB_KB,
        cmdline,
        ..Proc::small(pid, name)
    }
}

fn journal(store: &mut Store, cmdline: &str, verdict: &str) {
    let sig = format!("{:016x}", stable_hash(cmdline.as_bytes()));
    let id = store
        .journal_begin(&sig, "w", "large_pages", "[]", "[]", "test")
        .unwrap();
    store
        .journal_close(id, verdict, ActionState::Reverted, "test")
        .unwrap();
}

fn opts(store: &std::path::Path) -> Options {
    let mut m = BTreeMap::new();
    m.insert(
        "/".to_string(),
        FsFigures {
            inodes: 1000,
            inodes_free: 900,
            bytes: 1 << 30,
            bytes_free: 1 << 29,
        },
    );
    Options {
        store: Some(store.to_path_buf()),
        mounts: MountFigures::Given(m),
        ..Options::default()
    }
}

#[test]
fn a_measured_finding_says_what_was_measured_and_ranks_by_its_gain() {
    let t = Tree::healthy();
    t.process(&heap(200, "java", vec!["java", "-jar", "a.jar"]));
    t.process(&heap(201, "redis", vec!["redis-server"]));
    t.process(&heap(202, "app", vec!["app"]));
    let db = t.root().join("perfpilot.db");
    let mut store = Store::open(&db).unwrap();
    journal(
        &mut store,
        "java -jar a.jar",
        r#"{"action":1,"decision":"keep","gain":{"ratio":1.12,"ci_low":1.05,"ci_high":1.19,"confidence":0.95}}"#,
    );
    journal(
        &mut store,
        "redis-server",
        r#"{"action":2,"decision":"keep","gain":{"ratio":1.30,"ci_low":1.2,"ci_high":1.4,"confidence":0.95}}"#,
    );
    drop(store);

    let r = t.advise(&opts(&db));
    let f = with_id(&r, "thp.low-anon-coverage");
    assert_eq!(f.len(), 3);
    // Largest measured gain first, unmeasured last.
    assert_eq!(f[0].subject, "pid 201 (redis)");
    assert_eq!(f[1].subject, "pid 200 (java)");
    assert_eq!(f[2].subject, "pid 202 (app)");
    let m = f[1].measured.as_ref().unwrap();
    assert_eq!(m.kept, 1);
    assert!(
        m.summary
            .starts_with("measured here: kept ×1.12 [1.05, 1.19] (action 1)"),
        "{}",
        m.summary
    );
    assert!(f[2].measured.is_none());
}

#[test]
fn a_measured_loss_ranks_after_unmeasured_findings() {
    let t = Tree::healthy();
    t.process(&heap(200, "java", vec!["java"]));
    t.process(&heap(202, "app", vec!["app"]));
    let db = t.root().join("perfpilot.db");
    let mut store = Store::open(&db).unwrap();
    journal(
        &mut store,
        "java",
        r#"{"action":1,"decision":"revert","gain":{"ratio":0.9,"ci_low":0.85,"ci_high":0.95,"confidence":0.95}}"#,
    );
    drop(store);
    let r = t.advise(&opts(&db));
    let f = with_id(&r, "thp.low-anon-coverage");
    assert_eq!(f[0].subject, "pid 202 (app)");
    assert_eq!(f[1].measured.as_ref().unwrap().reverted, 1);
}

#[test]
fn a_missing_store_gives_no_history_and_no_skip() {
    let t = Tree::healthy();
    t.process(&heap(200, "java", vec!["java"]));
    let r = t.advise(&opts(&t.root().join("none.db")));
    assert!(r.findings.iter().all(|f| f.measured.is_none()));
    assert!(r.skipped.iter().all(|s| s.check != "history"));
}
