//! The cgroup's cpuset as the workload's world: placement inside it, status of a workload in
//! one, and a kept binding under a cpuset that shrinks.

use std::path::Path;

use perfpilot_store::journal::ActionState;
use perfpilot_sys::CpuSet;

use super::super::enforce::Held;
use super::{engine, rates, two_threads};
use crate::journal::ActionDoc;
use crate::strategy::StrategyKind;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join("root").join(rel);
    std::fs::create_dir_all(p.parent().expect("a parent")).expect("creating a directory");
    std::fs::write(p, text).expect("writing a fixture file");
}

/// Puts pid 100 of the fixture copy at `root` in a v2 group `/box` with cpuset `cpus`.
fn in_box(root: &Path, cpus: &str) {
    write(root, "proc/100/cgroup", "0::/box\n");
    write(
        root,
        "sys/fs/cgroup/cgroup.controllers",
        "cpuset cpu memory\n",
    );
    write(root, "sys/fs/cgroup/cpuset.cpus.effective", "0-1\n");
    write(
        root,
        "sys/fs/cgroup/box/cpuset.cpus.effective",
        &format!("{cpus}\n"),
    );
    write(root, "sys/fs/cgroup/box/cpuset.mems.effective", "0\n");
}

#[test]
fn a_kept_binding_that_no_longer_fits_a_shrunk_cpuset_ends_and_is_not_manual() {
    let (tmp, mut e) = engine("");
    let w = two_threads(0.3);
    in_box(tmp.path(), "0-1");
    let id = e
        .store
        .journal_begin(&w.signature, "app", "cache_affinity", "{}", "[]", "test")
        .unwrap();
    e.actions.held.push(Held {
        id,
        signature: w.signature.clone(),
        strategy: StrategyKind::CacheAffinity,
        doc: ActionDoc {
            members: vec![(100, 1)],
            changes: vec![],
            design: crate::design::DesignKind::Switchback,
            irreversible: false,
            signal: None,
            bound_to: Some(CpuSet::parse("0").unwrap()),
        },
        watch: None,
    });
    // The binding fits: it stays.
    let mut bound = w.clone();
    bound.members[0].cpus_allowed = Some(CpuSet::parse("0").unwrap());
    e.enforce_held(std::slice::from_ref(&bound), &Default::default())
        .unwrap();
    assert_eq!(e.actions.held.len(), 1);
    // The cpuset shrinks to CPU 1; the kernel moved the threads there. The next scan reads the
    // cgroups afresh (within a scan they are read once).
    in_box(tmp.path(), "1");
    e.policy.new_scan();
    bound.members[0].cpus_allowed = Some(CpuSet::parse("1").unwrap());
    e.enforce_held(std::slice::from_ref(&bound), &Default::default())
        .unwrap();
    assert!(e.actions.held.is_empty());
    let rec = e.store.action(id).unwrap().unwrap();
    assert_eq!(rec.state, ActionState::Ended, "{}", rec.note);
    assert_eq!(
        rec.note,
        "its cpuset is now 1 (/box): the binding to 0 no longer fits; the kernel moved its threads, the action ends"
    );
    assert!(e.policy.manual.is_empty(), "not manual tuning");
}

#[test]
fn status_shows_the_cgroup_the_cpuset_and_the_knobs_left_alone() {
    let (tmp, mut e) =
        engine("[tunables]\nallow_unverified = true\nmin_age_s = 0\nmin_cpu_cores = 0\n");
    let mut w = two_threads(0.3);
    in_box(tmp.path(), "1");
    // Affinity equal to the cpuset: its world, not a setting. THP refused by the process.
    w.members[0].cpus_allowed = Some(CpuSet::parse("1").unwrap());
    write(
        tmp.path(),
        "proc/100/status",
        "Name:\tapp\nVmSize:\t 9 kB\nTHP_enabled:\t0\n",
    );
    let r = rates(2, 10.0);
    let states = e.propose_workloads(std::slice::from_ref(&w), &r).unwrap();
    e.update_status(std::slice::from_ref(&w), &r, states);
    let s = &e.status.workloads[0];
    assert_eq!(s.cgroup.as_deref(), Some("/box"));
    assert_eq!(s.cpuset, Some(CpuSet::parse("1").unwrap()));
    assert_eq!(s.manual.len(), 1, "{:?}", s.manual);
    assert_eq!(s.manual[0].blocks, [StrategyKind::LargePages]);
    assert!(
        s.state
            .contains("large_pages left alone: manually tuned large pages (pid 100: THP_enabled 0"),
        "{}",
        s.state
    );
    // Affinity is not someone else's setting here: only large pages are left alone.
    assert!(
        !s.state.contains("cache_affinity left alone"),
        "{}",
        s.state
    );
    let json = serde_json::to_value(s).unwrap();
    assert_eq!(json["manual"][0]["knob"], "large_pages");
    assert_eq!(json["cpuset"], "1");
}

#[test]
fn a_processs_cgroup_is_read_once_a_minute_and_its_groups_cpuset_every_scan() {
    let (tmp, mut e) = engine("");
    let w = two_threads(0.3);
    in_box(tmp.path(), "0-1");
    let topo = e.topo.clone();
    let cpus = |e: &mut super::super::Engine| e.policy.world_of(&topo, &w).cpus.to_string();
    assert_eq!(cpus(&mut e), "0-1");
    // The group's cpuset shrinks: the next scan sees it.
    in_box(tmp.path(), "1");
    e.policy.new_scan();
    assert_eq!(cpus(&mut e), "1");
    // The process moves to the root group: its membership, read in the first scan, stands
    // for a minute, so the box's cpuset still holds it in the scans within that.
    write(tmp.path(), "proc/100/cgroup", "0::/\n");
    e.policy.new_scan();
    assert_eq!(cpus(&mut e), "1");
    // A new process (another start time) is read afresh.
    let mut restarted = w.clone();
    restarted.members[0].starttime = 2;
    e.policy.new_scan();
    assert_eq!(e.policy.world_of(&topo, &restarted).cpus.to_string(), "0-1");
}
