//! Who is left alone, who is eligible, and what is proposed to whom.

use std::path::Path;

use perfpilot_sys::{CpuSet, Fs};

use super::super::enforce::Held;
use super::super::policy::{Policy, backed_off, ineligible, unlisted};
use super::{engine, propose_steady, rates, two_threads};
use crate::config::DaemonConfig;
use crate::engine::manual::{Knob, ManualSetting};
use crate::journal::ActionDoc;
use crate::strategy::StrategyKind;
use crate::strategy::testing::machine;
use crate::tunables::Level;

/// A policy over an empty `/proc` `/sys` tree in `root` with the config `toml`.
fn policy(root: &Path, toml: &str) -> Policy {
    let config = DaemonConfig::parse(toml, Path::new("test.toml")).expect("a valid config");
    Policy::new(&Fs::at(root), config)
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("a parent")).expect("creating a directory");
    std::fs::write(p, text).expect("writing a fixture file");
}

#[test]
fn a_workload_with_perfpilot_off_in_its_environment_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let topo = machine(1, 1, 4, 1);
    let w = two_threads(0.5);
    write(tmp.path(), "proc/100/environ", "HOME=/root\0PERFPILOT=on\0");
    assert_eq!(policy(tmp.path(), "").left_alone(&topo, &w, None), None);
    write(
        tmp.path(),
        "proc/100/environ",
        "HOME=/root\0PERFPILOT=off\0",
    );
    assert_eq!(
        policy(tmp.path(), "").left_alone(&topo, &w, None),
        Some("opted out (PERFPILOT=off in the environment of pid 100)".into())
    );
}

#[test]
fn a_mask_narrowed_by_someone_else_leaves_only_the_affinity_strategies_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let topo = machine(1, 1, 4, 1);
    let mut w = two_threads(0.5);
    let mut p = policy(tmp.path(), "");
    w.members[0].cpus_allowed = Some(CpuSet::parse("0-3").unwrap());
    assert_eq!(p.left_alone(&topo, &w, None), None, "the whole machine");
    assert!(p.manual(&topo, &w, None).settings.is_empty());
    let narrow = CpuSet::parse("0-1").unwrap();
    w.members[0].cpus_allowed = Some(narrow.clone());
    // Large pages have nothing to do with affinity: the workload stays managed.
    assert_eq!(p.left_alone(&topo, &w, None), None);
    let m = p.manual(&topo, &w, None);
    assert_eq!(
        m.settings,
        vec![ManualSetting::new(
            Knob::Affinity,
            "pid 100 has affinity 0-1 (not set by perfpilot)"
        )]
    );
    assert!(m.blocking(StrategyKind::CacheAffinity).is_some());
    assert!(m.blocking(StrategyKind::MemoryAffinity).is_some());
    assert!(m.blocking(StrategyKind::LargePages).is_none());
    assert!(
        p.manual(&topo, &w, Some(&narrow)).settings.is_empty(),
        "our own mask"
    );
    // Where affinity is all the enabled strategies turn, the whole workload is manual.
    p.enabled = vec![StrategyKind::CacheAffinity];
    assert_eq!(
        p.left_alone(&topo, &w, None),
        Some("manually tuned: pid 100 has affinity 0-1 (not set by perfpilot)".into())
    );
}

/// A v2 tree in which pid 100 is in `/pinned.slice` with cpuset `cpus`.
fn in_cpuset(root: &Path, cpus: &str) {
    write(root, "proc/100/cgroup", "0::/pinned.slice\n");
    write(root, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu\n");
    write(root, "sys/fs/cgroup/cpuset.cpus.effective", "0-3\n");
    write(
        root,
        "sys/fs/cgroup/pinned.slice/cpuset.cpus.effective",
        &format!("{cpus}\n"),
    );
    write(
        root,
        "sys/fs/cgroup/pinned.slice/cpuset.mems.effective",
        "0\n",
    );
}

#[test]
fn a_process_whose_affinity_is_its_cgroups_cpuset_is_not_manually_tuned() {
    let tmp = tempfile::tempdir().unwrap();
    let topo = machine(1, 1, 4, 1);
    let mut w = two_threads(0.5);
    in_cpuset(tmp.path(), "2");
    w.members[0].cpus_allowed = Some(CpuSet::parse("2").unwrap());
    let mut p = policy(tmp.path(), "");
    let m = p.manual(&topo, &w, None);
    assert!(m.settings.is_empty(), "{:?}", m.settings);
    assert_eq!(m.world.cpus, CpuSet::parse("2").unwrap(), "its world");
    assert_eq!(m.world.by.as_deref(), Some("/pinned.slice"));
    assert_eq!(p.left_alone(&topo, &w, None), None);
    // Narrower than its cpuset: that is someone's setting.
    in_cpuset(tmp.path(), "2-3");
    let mut p = policy(tmp.path(), "");
    let m = p.manual(&topo, &w, None);
    assert_eq!(
        m.settings[0].evidence,
        "pid 100 has affinity 2, narrower than its cgroup's cpuset 2-3 (/pinned.slice) (not set by perfpilot)"
    );
    // The placement: the group path, no container.
    let pl = p.placement(&w);
    assert_eq!(pl.cgroup.as_deref(), Some("/pinned.slice"));
    assert_eq!(pl.container, None);
}

#[test]
fn a_memory_policy_blocks_memory_affinity_and_refused_or_own_huge_pages_block_large_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let topo = machine(2, 1, 2, 1);
    let w = two_threads(0.5);
    write(
        tmp.path(),
        "proc/100/numa_maps",
        "7f0000000000 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=4\n7f1000000000 default file=/lib/x.so\n",
    );
    let mut p = policy(tmp.path(), "");
    let m = p.manual(&topo, &w, None);
    assert_eq!(m.settings.len(), 1, "{:?}", m.settings);
    assert_eq!(m.settings[0].knob, Knob::MemoryPolicy);
    assert_eq!(
        m.settings[0].evidence,
        "pid 100: policy bind:1 on 1 of 2 ranges in /proc/100/numa_maps"
    );
    assert_eq!(m.settings[0].blocks, [StrategyKind::MemoryAffinity]);
    assert!(m.blocking(StrategyKind::CacheAffinity).is_none());

    for (status, smaps, said) in [
        (
            "THP_enabled:\t0\n",
            "",
            "THP_enabled 0 in /proc/100/status (prctl PR_SET_THP_DISABLE)",
        ),
        (
            "HugetlbPages:\t 1048576 kB\n",
            "",
            "maps 1 GiB of its own huge pages (HugetlbPages in /proc/100/status)",
        ),
        (
            "",
            // A 2 MiB thread stack advised by glibc does not count; the 1 GiB range does.
            "7e0000000000-7e0000200000 rw-p 00000000 00:00 0\nVmFlags: rd wr mr mw me ac nh\n7f0000000000-7f0040000000 rw-p 00000000 00:00 0\nVmFlags: rd wr mr mw me ac nh\n",
            "1 GiB in 1 range advised MADV_NOHUGEPAGE (VmFlags nh in /proc/100/smaps, first 7f0000000000-7f0040000000)",
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            "proc/100/status",
            &format!("Name:\tapp\nVmSize:\t 9 kB\n{status}"),
        );
        write(tmp.path(), "proc/100/smaps", smaps);
        let mut p = policy(tmp.path(), "");
        let m = p.manual(&topo, &w, None);
        assert_eq!(m.settings.len(), 1, "{:?}", m.settings);
        assert_eq!(m.settings[0].knob, Knob::LargePages);
        assert_eq!(m.settings[0].evidence, format!("pid 100: {said}"));
        assert_eq!(m.settings[0].blocks, [StrategyKind::LargePages]);
        p.enabled = vec![StrategyKind::LargePages];
        assert!(
            p.left_alone(&topo, &w, None)
                .unwrap()
                .starts_with("manually tuned: pid 100: ")
        );
    }
}

#[test]
fn a_young_workloads_memory_policy_is_read_only_once_it_is_old_enough_to_act_on() {
    let tmp = tempfile::tempdir().unwrap();
    let topo = machine(2, 1, 2, 1);
    let mut w = two_threads(0.5);
    let numa_maps = "7f0000000000 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=4\n";
    write(tmp.path(), "proc/100/numa_maps", numa_maps);
    let mut p = policy(tmp.path(), "");
    p.slow_evidence_after_s = 60.0;
    w.age_s = 10.0;
    // Too young for any strategy: its numa_maps and smaps are not read (the file's policy is
    // not seen, and removing the file changes nothing).
    assert!(p.manual(&topo, &w, None).settings.is_empty());
    std::fs::remove_file(tmp.path().join("proc/100/numa_maps")).unwrap();
    assert!(p.manual(&topo, &w, None).settings.is_empty());
    write(tmp.path(), "proc/100/numa_maps", numa_maps);
    w.age_s = 60.0;
    let m = p.manual(&topo, &w, None);
    assert_eq!(m.settings.len(), 1, "{:?}", m.settings);
    assert_eq!(m.settings[0].knob, Knob::MemoryPolicy);
}

#[test]
fn the_config_excludes_workloads_and_only_matched_leaves_the_others_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let topo = machine(1, 1, 4, 1);
    let w = two_threads(0.5);
    let exclude = "[[workload]]\nmatch = { comm = \"app\" }\naction = \"exclude\"\n";
    assert_eq!(
        policy(tmp.path(), exclude).left_alone(&topo, &w, None),
        Some("excluded by the config".into())
    );
    let only = "only_matched = true\n[[workload]]\nmatch = { comm = \"other\" }\n";
    assert_eq!(
        policy(tmp.path(), only).left_alone(&topo, &w, None),
        Some("not matched by the config (only_matched)".into())
    );
    let matched = "only_matched = true\n[[workload]]\nmatch = { cmdline = \"--serve\" }\n";
    assert_eq!(
        policy(tmp.path(), matched).left_alone(&topo, &w, None),
        None
    );
}

#[test]
fn a_young_or_idle_workload_is_not_eligible() {
    let mut w = two_threads(0.5);
    assert_eq!(ineligible(&w, 60.0, 0.5), None);
    w.age_s = 10.0;
    assert_eq!(
        ineligible(&w, 60.0, 0.5),
        Some("too young (10 s < min_age_s 60)".into())
    );
    w.age_s = 3600.0;
    assert_eq!(
        ineligible(&w, 60.0, 1.5),
        Some("uses 1.00 cores < min_cpu_cores 1.5".into())
    );
}

#[test]
fn only_a_workload_both_idle_and_small_goes_unlisted() {
    let mut w = two_threads(0.001);
    w.rss = 1 << 20;
    assert!(unlisted(&w, 0.5, 64 << 20));
    w.rss = 128 << 20;
    assert!(!unlisted(&w, 0.5, 64 << 20), "big");
    let busy = two_threads(0.1);
    assert!(!unlisted(&busy, 0.5, u64::MAX), "busy");
}

#[test]
fn a_back_off_lasts_until_its_end() {
    let (_tmp, mut e) = engine("");
    let now = perfpilot_sys::clock::now_ms();
    e.store
        .backoff_set("sig", "large_pages", now + 90_000, "no clear effect")
        .unwrap();
    let (left, why) = backed_off(&e.store, "sig", "large_pages", now)
        .unwrap()
        .unwrap();
    assert_eq!((left, why.as_str()), (90.0, "no clear effect"));
    assert_eq!(
        backed_off(&e.store, "sig", "large_pages", now + 90_000).unwrap(),
        None
    );
    assert_eq!(
        backed_off(&e.store, "sig", "cache_affinity", now).unwrap(),
        None
    );
}

#[test]
fn a_backed_off_strategy_is_not_proposed_and_is_once_the_back_off_ends() {
    let (_tmp, mut e) = engine("");
    e.tun.affinity_level = Level::Core;
    e.tun.memory_affinity = false;
    e.tun.large_pages = false;
    let w = two_threads(0.3);
    let r = rates(2, 0.0);
    let now = perfpilot_sys::clock::now_ms();
    e.store
        .backoff_set(
            &w.signature,
            "cache_affinity",
            now + 3_600_000,
            "it made things worse",
        )
        .unwrap();
    let states = e.propose_workloads(std::slice::from_ref(&w), &r).unwrap();
    let state = &states[&w.signature];
    assert!(
        state.starts_with("cache_affinity backed off for ")
            && state.ends_with(": it made things worse"),
        "{state}"
    );
    assert!(e.actions.trials.is_empty());
    assert!(e.store.actions(false, 10).unwrap().is_empty());
    // The back-off over, the same workload gets a trial (journaled; nothing applied yet).
    e.store
        .backoff_set(
            &w.signature,
            "cache_affinity",
            now - 1,
            "it made things worse",
        )
        .unwrap();
    // The gate first reads the signal until it is steady; status says so meanwhile.
    e.steady.next_scan(0.0);
    let states = e.propose_workloads(std::slice::from_ref(&w), &r).unwrap();
    assert_eq!(
        states[&w.signature],
        "would try cache_affinity: waiting for a steady signal: 1 of 3 readings so far"
    );
    assert!(e.actions.trials.is_empty());
    let states = propose_steady(&mut e, &w, &r);
    assert!(
        states[&w.signature].starts_with("trial of cache_affinity (action 1): compact 2 threads"),
        "{states:?}"
    );
    assert_eq!(e.actions.trials.len(), 1);
    assert_eq!(
        e.actions.trials[0].signal,
        Some(crate::signal::SignalKind::Cpu)
    );
    // Cache affinity is undone cheaply: a switchback trial, whose baseline plans its periods
    // from windows of its own (the gate's readings seed a before/after trial's).
    assert_eq!(
        e.actions.trials[0].doc.design,
        crate::design::DesignKind::Switchback
    );
    assert!(e.actions.trials[0].windows().0.is_empty());
}

#[test]
fn while_a_strategy_waits_for_a_steady_signal_it_is_not_asked_again_until_the_signal_is_steady() {
    let (_tmp, mut e) = engine("");
    e.tun.affinity_level = Level::Core;
    e.tun.memory_affinity = false;
    e.tun.large_pages = false;
    let w = two_threads(0.3);
    let r = rates(2, 0.0);
    e.steady.next_scan(0.0);
    let states = e.propose_workloads(std::slice::from_ref(&w), &r).unwrap();
    assert!(states[&w.signature].starts_with("would try cache_affinity: waiting"));
    assert!(e.steady.waits(&w.signature, StrategyKind::CacheAffinity));
    // Meanwhile the strategy would no longer act (no headroom), but it is not asked: the scan
    // reads only the signal (asking may read a large server's memory).
    e.tun.headroom = 0.1;
    e.steady.next_scan(1.0);
    let states = e.propose_workloads(std::slice::from_ref(&w), &r).unwrap();
    assert_eq!(
        states[&w.signature],
        "would try cache_affinity: waiting for a steady signal: 2 of 3 readings so far"
    );
    // Steady: it is asked afresh, says no, and nothing starts.
    e.steady.next_scan(2.0);
    let states = e.propose_workloads(std::slice::from_ref(&w), &r).unwrap();
    assert!(
        states[&w.signature].starts_with("cache_affinity: "),
        "{states:?}"
    );
    assert!(e.actions.trials.is_empty());
}

#[test]
fn a_strategy_already_kept_or_switched_off_is_not_proposed_again() {
    let (_tmp, mut e) = engine("");
    e.tun.affinity_level = Level::Core;
    e.tun.memory_affinity = false;
    e.tun.large_pages = false;
    let w = two_threads(0.3);
    e.actions.held.push(Held {
        id: 7,
        signature: w.signature.clone(),
        strategy: StrategyKind::CacheAffinity,
        doc: ActionDoc {
            members: vec![(100, 1)],
            changes: vec![],
            design: crate::design::DesignKind::Switchback,
            irreversible: false,
            signal: None,
            bound_to: None,
        },
        watch: None,
    });
    let states = e
        .propose_workloads(std::slice::from_ref(&w), &rates(2, 0.0))
        .unwrap();
    assert_eq!(states[&w.signature], "optimized: nothing more to do");
    e.actions.held.clear();
    e.tun.cache_affinity = false;
    let states = e
        .propose_workloads(std::slice::from_ref(&w), &rates(2, 0.0))
        .unwrap();
    assert_eq!(states[&w.signature], "optimized: nothing more to do");
    assert!(e.actions.trials.is_empty());
}

#[test]
fn a_too_young_workload_gets_no_trial_and_status_says_why() {
    let (_tmp, mut e) = engine("");
    e.tun.affinity_level = Level::Core;
    let mut w = two_threads(0.3);
    w.age_s = 12.0;
    let states = e
        .propose_workloads(std::slice::from_ref(&w), &rates(2, 0.0))
        .unwrap();
    assert_eq!(states[&w.signature], "too young (12 s < min_age_s 60)");
    assert!(e.actions.trials.is_empty());
}
