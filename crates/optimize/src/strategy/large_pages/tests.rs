//! The large-pages strategy on synthetic workloads: thresholds, pacing, and shared memory
//! aligned or not.

use super::*;
use crate::strategy::testing::*;
use crate::tunables::Tunables;
use perfpilot_observe::workload::{Workload, WorkloadMemory};
use perfpilot_sys::process::MapRange;
use std::collections::HashMap;

fn range(start: u64, len: u64, perms: &str, kind: MappingKind, inode: u64) -> MapRange {
    MapRange {
        start,
        end: start + len,
        perms: perms.into(),
        offset: 0,
        kind,
        inode,
        path: None,
    }
}

#[test]
fn promotes_aligned_anonymous_and_shared_ranges_in_steps() {
    let topo = machine(1, 1, 2, 1);
    let mut w = workload(&[(0, 1.0), (1, 1.0)]);
    w.members.push(perfpilot_observe::workload::Member {
        pid: 200,
        ..w.members[0].clone()
    });
    let busy = busy(&topo, |_| 0.5);
    let (mut tun, thp) = (Tunables::default(), thp("madvise", "never"));
    tun.set("collapse_mb_per_s", "16").unwrap();
    let ctx = ctx(&topo, &tun, &busy, &thp);
    let mem = WorkloadMemory {
        per_node: [(0, 512 << 20)].into(),
        anonymous: 256 << 20,
        shm_per_node: [(0, 256 << 20)].into(),
        ..Default::default()
    };
    let seg = MappingKind::SysvShm { key: 1 };
    // Process 100: 33 MiB anonymous starting 1 MiB past a huge-page boundary, and the segment.
    // Process 200 attaches the same segment: it is promoted once.
    let maps: HashMap<i32, Vec<MapRange>> = [
        (
            100,
            vec![
                range(0x7f00_0010_0000, 33 << 20, "rw-p", MappingKind::Anon, 0),
                range(0x7f10_0000_0000, 32 << 20, "rw-s", seg.clone(), 9),
            ],
        ),
        (200, vec![range(0x7f20_0000_0000, 32 << 20, "rw-s", seg, 9)]),
    ]
    .into();
    let v = View {
        w: &w,
        memory: Some(&mem),
        maps: Some(&maps),
        bound_to: None,
    };
    let Proposal::Act {
        mut changes,
        irreversible,
        cheap_undo,
        ..
    } = LargePages.propose(&v, &ctx)
    else {
        panic!()
    };
    // shmem_enabled is `never` here: raised to `advise` first (journaled, restored later).
    assert_eq!(
        changes.remove(0),
        Change::Sysfs {
            rel: SHMEM_ENABLED.into(),
            value: "advise".into()
        }
    );
    assert!(irreversible && !cheap_undo);
    let mut total = 0;
    for c in &changes {
        let Change::Collapse { pid, ranges } = c else {
            panic!()
        };
        assert_eq!(
            *pid, 100,
            "the shared segment is promoted through its first attacher only"
        );
        for (s, l) in ranges {
            assert_eq!(s % HUGE, 0);
            assert_eq!(l % HUGE, 0);
            total += l;
        }
    }
    // 33 MiB from +1 MiB holds 16 whole huge pages (32 MiB); the segment 32 MiB.
    assert_eq!(total, 64 << 20);
    // 16 MB steps hold 7 whole huge pages (14 MiB): 64 MiB takes 5.
    assert_eq!(changes.len(), 5);
}

#[test]
fn thresholds_coverage_and_kernel_support() {
    let topo = machine(1, 1, 2, 1);
    let w = workload(&[(0, 0.1), (1, 0.1)]);
    let busy = busy(&topo, |_| 0.5);
    let (tun, thp) = (Tunables::default(), thp("madvise", "never"));
    let maps: HashMap<i32, Vec<MapRange>> = [(
        100,
        vec![range(
            0x7f00_0000_0000,
            64 << 20,
            "rw-p",
            MappingKind::Anon,
            0,
        )],
    )]
    .into();
    let mem = WorkloadMemory {
        per_node: [(0, 512 << 20)].into(),
        anonymous: 512 << 20,
        ..Default::default()
    };
    let v = View {
        w: &w,
        memory: Some(&mem),
        maps: Some(&maps),
        bound_to: None,
    };
    let ctx = ctx(&topo, &tun, &busy, &thp);
    assert!(
        matches!(LargePages.propose(&v, &ctx), Proposal::Skip(s) if s.contains("min_cpu_cores"))
    );
    let busy_w = workload(&[(0, 1.0), (1, 1.0)]);
    let covered = WorkloadMemory {
        anon_huge: 500 << 20,
        ..mem.clone()
    };
    let v = View {
        w: &busy_w,
        memory: Some(&covered),
        maps: Some(&maps),
        bound_to: None,
    };
    assert!(matches!(LargePages.propose(&v, &ctx), Proposal::Skip(s) if s.contains("coverage")));
    let small = WorkloadMemory {
        per_node: [(0, 8 << 20)].into(),
        anonymous: 8 << 20,
        ..Default::default()
    };
    let v = View {
        w: &busy_w,
        memory: Some(&small),
        maps: Some(&maps),
        bound_to: None,
    };
    assert!(
        matches!(LargePages.propose(&v, &ctx), Proposal::Skip(s) if s.contains("min_memory_mib"))
    );
    let ctx = Context {
        collapse_supported: false,
        ..ctx
    };
    let v = View {
        w: &busy_w,
        memory: Some(&mem),
        maps: Some(&maps),
        bound_to: None,
    };
    assert!(
        matches!(LargePages.propose(&v, &ctx), Proposal::Skip(s) if s.contains("MADV_COLLAPSE"))
    );
}

/// PostgreSQL as a forked server: the postmaster (100) and a backend (200) map the same
/// `/dev/zero` buffer pool of 2,119 MiB at `pool_start`, with 8 MiB of private memory
/// each.
fn postgres(pool_start: u64) -> (Workload, HashMap<i32, Vec<MapRange>>, WorkloadMemory) {
    let mut w = workload(&[(0, 1.0), (1, 1.0)]);
    w.comm = "postgres".into();
    w.members.push(perfpilot_observe::workload::Member {
        pid: 200,
        ..w.members[0].clone()
    });
    let pool = MappingKind::SharedAnon {
        object: "/dev/zero".into(),
    };
    let maps = [100, 200]
        .into_iter()
        .map(|pid| {
            let heap = 0x7f00_0000_0000 + ((pid as u64) << 24);
            (
                pid,
                vec![
                    range(heap, 8 << 20, "rw-p", MappingKind::Anon, 0),
                    range(pool_start, 2119 << 20, "rw-s", pool.clone(), 2054),
                ],
            )
        })
        .collect();
    let mem = WorkloadMemory {
        per_node: [(0, 2200 << 20)].into(),
        anonymous: 16 << 20,
        shm_per_node: [(0, 2119 << 20)].into(),
        ..Default::default()
    };
    (w, maps, mem)
}

/// 110,592 bytes past a 2 MiB boundary, as PostgreSQL mapped it under `never`.
const MISALIGNED: u64 = 0x7f5a_1e41_b000;
/// On a 2 MiB boundary, as PostgreSQL mapped it under `advise`.
const ALIGNED: u64 = 0x7f5a_1e40_0000;

fn propose(
    w: &Workload,
    maps: &HashMap<i32, Vec<MapRange>>,
    mem: &WorkloadMemory,
    shmem: &str,
) -> Proposal {
    let topo = machine(1, 1, 2, 1);
    let busy = busy(&topo, |_| 0.5);
    let (tun, thp) = (Tunables::default(), thp("madvise", shmem));
    let ctx = ctx(&topo, &tun, &busy, &thp);
    let v = View {
        w,
        memory: Some(mem),
        maps: Some(maps),
        bound_to: None,
    };
    LargePages.propose(&v, &ctx)
}

#[test]
fn a_misaligned_shared_buffer_pool_is_left_alone_and_the_reason_says_how_to_fix_it() {
    let (w, maps, mem) = postgres(MISALIGNED);
    let Proposal::Skip(why) = propose(&w, &maps, &mem, "never") else {
        panic!("nothing can be collapsed: no change, no knob raised")
    };
    assert_eq!(
        why,
        "only 16 MiB of it lies in huge pages that can be collapsed, under min_memory_mib 64; \
         its 2,119 MiB of shared memory (/dev/zero, mapped by postgres 100) starts 110,592 \
         bytes off a huge-page boundary, so none of it can be collapsed: it was mapped while \
         shmem_enabled was `never` (the kernel aligns shared memory only where huge pages are \
         allowed); set shmem_enabled to `advise` (the tunable shmem_advise_at_start does so \
         when the daemon starts) and restart the server, or give it its own huge pages \
         (PostgreSQL: huge_pages = on, with vm.nr_hugepages reserved); expected gain for \
         databases 4–15 %"
    );
    // Raised since the server started: a restart is enough.
    let Proposal::Skip(why) = propose(&w, &maps, &mem, "advise") else {
        panic!()
    };
    assert!(
        why.contains("restart the server now that shmem_enabled is `advise`, or give it its own huge pages (PostgreSQL: huge_pages = on"),
        "{why}"
    );
    // With no private memory to promote, the reason is the shared memory's alone.
    let private_gone: HashMap<i32, Vec<MapRange>> =
        maps.iter().map(|(p, r)| (*p, r[1..].to_vec())).collect();
    let Proposal::Skip(why) = propose(&w, &private_gone, &mem, "advise") else {
        panic!()
    };
    assert!(why.starts_with("its 2,119 MiB of shared memory"), "{why}");
    // The process named is the oldest that maps it (a forked server's main process).
    let mut restarted_first = w.clone();
    restarted_first.members[1].starttime = 0;
    let Proposal::Skip(why) = propose(&restarted_first, &private_gone, &mem, "advise") else {
        panic!()
    };
    assert!(why.contains("(/dev/zero, mapped by postgres 200)"), "{why}");
    // Another server is told the generic way to its own huge pages.
    let mut other = w.clone();
    other.comm = "java".into();
    let Proposal::Skip(why) = propose(&other, &private_gone, &mem, "advise") else {
        panic!()
    };
    assert!(
        why.contains("(map it with MAP_HUGETLB or from a hugetlbfs file)"),
        "{why}"
    );
}

#[test]
fn an_aligned_shared_buffer_pool_is_promoted_once_in_whole_huge_pages() {
    let (w, maps, mem) = postgres(ALIGNED);
    let Proposal::Act {
        changes, reason, ..
    } = propose(&w, &maps, &mem, "advise")
    else {
        panic!()
    };
    assert!(
        reason.starts_with("promote 16 MiB of private and 2118 MiB of shared memory"),
        "{reason}"
    );
    assert!(!reason.contains("off a huge-page boundary"), "{reason}");
    let mut shared = Vec::new();
    for c in &changes {
        let Change::Collapse { pid, ranges } = c else {
            panic!("shmem_enabled is already `advise`: no knob raised, {c:?}")
        };
        for &(s, l) in ranges {
            assert_eq!((s % HUGE, l % HUGE), (0, 0));
            if s >= ALIGNED {
                assert_eq!(*pid, 100, "the pool is promoted through one process");
                shared.push((s, l));
            }
        }
    }
    let total: u64 = shared.iter().map(|r| r.1).sum();
    assert_eq!(total, 2118 << 20);
    assert_eq!(shared[0].0, ALIGNED);
    // Under `never` the knob goes first, journaled like the rest.
    let Proposal::Act { changes, .. } = propose(&w, &maps, &mem, "never") else {
        panic!()
    };
    assert_eq!(
        changes[0],
        Change::Sysfs {
            rel: SHMEM_ENABLED.into(),
            value: "advise".into()
        }
    );
}

#[test]
fn private_memory_is_still_promoted_beside_a_misaligned_pool_and_without_raising_the_knob() {
    let (w, mut maps, mut mem) = postgres(MISALIGNED);
    mem.anonymous = 256 << 20;
    maps.get_mut(&100).unwrap()[0] =
        range(0x7f00_0000_0000, 128 << 20, "rw-p", MappingKind::Anon, 0);
    let Proposal::Act {
        changes, reason, ..
    } = propose(&w, &maps, &mem, "never")
    else {
        panic!()
    };
    assert!(
        reason.starts_with("promote 136 MiB of private and 0 MiB of shared memory"),
        "{reason}"
    );
    assert!(
        reason.contains("starts 110,592 bytes off a huge-page boundary"),
        "{reason}"
    );
    for c in &changes {
        let Change::Collapse { ranges, .. } = c else {
            panic!("no knob raised for shared memory that is not promoted: {c:?}")
        };
        assert!(ranges.iter().all(|r| r.0 < MISALIGNED));
    }
}

#[test]
fn a_shared_object_misaligned_in_one_process_is_promoted_through_another_that_maps_it_aligned() {
    let (w, mut maps, mem) = postgres(MISALIGNED);
    maps.get_mut(&200).unwrap()[1].start = ALIGNED;
    maps.get_mut(&200).unwrap()[1].end = ALIGNED + (2119 << 20);
    let Proposal::Act {
        changes, reason, ..
    } = propose(&w, &maps, &mem, "advise")
    else {
        panic!()
    };
    assert!(!reason.contains("off a huge-page boundary"), "{reason}");
    let through_200: u64 = changes
        .iter()
        .filter_map(|c| match c {
            Change::Collapse { pid: 200, ranges } => Some(
                ranges
                    .iter()
                    .filter(|r| r.0 >= ALIGNED)
                    .map(|r| r.1)
                    .sum::<u64>(),
            ),
            _ => None,
        })
        .sum();
    assert_eq!(through_200, 2118 << 20);
}
