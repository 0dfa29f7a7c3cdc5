//! Binding layouts on the three fixture topologies (`tests/fixtures/*`).

use std::path::PathBuf;

use perfpilot_observe::{CpuSet, Fs, Topology};
use perfpilot_study::{Binding, Layout, plan};

fn topo(name: &str) -> Topology {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name);
    Topology::read(&Fs::at(root)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn sets(l: &Layout) -> Vec<String> {
    l.instances.iter().map(|i| i.cpuset.to_string()).collect()
}

/// No CPU is given to two instances, and every core's SMT siblings stay together.
fn check_disjoint_whole_cores(t: &Topology, l: &Layout) {
    let mut seen = CpuSet::new();
    for i in &l.instances {
        assert!(i.bound);
        assert!(
            i.cpuset.intersection(&seen).is_empty(),
            "overlap in {:?}",
            sets(l)
        );
        seen = seen.union(&i.cpuset);
        for core in t.cores() {
            let common = core.cpus.intersection(&i.cpuset);
            assert!(
                common.is_empty() || common == core.cpus,
                "core {} split in {}",
                core.id,
                i.cpuset
            );
        }
        assert_eq!(i.cpus, i.cpuset.len());
    }
}

#[test]
fn vm_one_node_two_cores() {
    let t = topo("vm-1node");
    let l = plan(&t, 2, Some(1), Binding::Cores).unwrap();
    assert_eq!(sets(&l), ["0", "1"]);
    assert!(
        l.instances.iter().all(|i| i.membind.is_empty()),
        "one node: no memory policy"
    );
    check_disjoint_whole_cores(&t, &l);
    let l = plan(&t, 1, None, Binding::Cores).unwrap();
    assert_eq!(sets(&l), ["0-1"]);
    let e = plan(&t, 4, Some(2), Binding::Cores).unwrap_err();
    assert_eq!(
        e.to_string(),
        "4 instances × 2 cores bound to cores needs 8 cores; this machine has 2 cores"
    );
    // Unbound: everything, with {cpus} the share.
    let l = plan(&t, 2, None, Binding::None).unwrap();
    assert!(
        l.instances
            .iter()
            .all(|i| !i.bound && i.cpuset.to_string() == "0-1")
    );
    assert_eq!(l.instances[0].cpus, 1);
    let l = plan(&t, 1, None, Binding::Llc).unwrap();
    assert_eq!(sets(&l), ["0-1"]);
    let e = plan(&t, 2, None, Binding::Llc).unwrap_err();
    assert!(e.to_string().contains("1 LLC domain"), "{e}");
    let e = plan(&t, 2, None, Binding::Node).unwrap_err();
    assert!(e.to_string().contains("1 node"), "{e}");
}

#[test]
fn epyc_spreads_instances_over_llcs_and_nodes() {
    let t = topo("epyc-2node-8llc");
    // 4 instances × 2 cores: each in its own LLC, alternating nodes; SMT siblings together.
    let l = plan(&t, 4, Some(2), Binding::Cores).unwrap();
    check_disjoint_whole_cores(&t, &l);
    for i in &l.instances {
        let llcs: std::collections::BTreeSet<u32> = i
            .cpuset
            .iter()
            .filter_map(|c| t.llc_of(c).map(|l| l.id))
            .collect();
        assert_eq!(
            llcs.len(),
            1,
            "instance {} spans LLCs: {}",
            i.instance,
            i.cpuset
        );
        assert_eq!(i.cpus, 4, "2 cores × SMT2");
        assert_eq!(i.membind.len(), 1);
    }
    assert_eq!(
        sets(&l),
        ["0-1,32-33", "16-17,48-49", "4-5,36-37", "20-21,52-53"]
    );
    assert_eq!(l.instances[0].membind, [0]);
    assert_eq!(l.instances[1].membind, [1]);
    // 6 cores do not fit an LLC (4 cores): kept in one node.
    let l = plan(&t, 2, Some(6), Binding::Cores).unwrap();
    check_disjoint_whole_cores(&t, &l);
    for i in &l.instances {
        assert_eq!(i.membind.len(), 1, "{}", i.cpuset);
        assert_eq!(i.cpus, 12);
    }
    // 32 cores: every core used once.
    let l = plan(&t, 8, Some(4), Binding::Cores).unwrap();
    check_disjoint_whole_cores(&t, &l);
    assert_eq!(
        l.instances.iter().map(|i| i.cpuset.len()).sum::<usize>(),
        64
    );
    let e = plan(&t, 9, Some(4), Binding::Cores).unwrap_err();
    assert!(
        e.to_string()
            .contains("needs 36 cores; this machine has 32 cores"),
        "{e}"
    );
    // LLC binding: whole LLCs; 8 of them.
    let l = plan(&t, 8, None, Binding::Llc).unwrap();
    check_disjoint_whole_cores(&t, &l);
    assert!(l.instances.iter().all(|i| i.cpuset.len() == 8));
    assert!(plan(&t, 9, None, Binding::Llc).is_err());
    // 6 cores per instance with LLC binding: two whole LLCs in one node each.
    let l = plan(&t, 2, Some(6), Binding::Llc).unwrap();
    assert_eq!(sets(&l), ["0-7,32-39", "16-23,48-55"]);
    // Node binding.
    let l = plan(&t, 2, None, Binding::Node).unwrap();
    assert_eq!(sets(&l), ["0-15,32-47", "16-31,48-63"]);
    assert_eq!(l.instances[1].membind, [1]);
    let e = plan(&t, 3, None, Binding::Node).unwrap_err();
    assert!(e.to_string().contains("2 nodes"), "{e}");
}

#[test]
fn power_smt8_keeps_all_eight_threads_together() {
    let t = topo("power-2socket-smt8");
    let l = plan(&t, 3, Some(2), Binding::Cores).unwrap();
    check_disjoint_whole_cores(&t, &l);
    assert!(l.instances.iter().all(|i| i.cpus == 16));
    // Each instance stays within one node (cores are one per LLC here).
    for i in &l.instances {
        assert_eq!(i.membind.len(), 1, "{}", i.cpuset);
    }
    let e = plan(&t, 4, Some(2), Binding::Cores).unwrap_err();
    assert!(
        e.to_string()
            .contains("needs 8 cores; this machine has 7 cores"),
        "{e}"
    );
    let l = plan(&t, 7, Some(1), Binding::Llc).unwrap();
    check_disjoint_whole_cores(&t, &l);
    let l = plan(&t, 2, None, Binding::Node).unwrap();
    assert_eq!(sets(&l), ["0-31", "32-55"]);
}
