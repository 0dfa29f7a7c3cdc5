//! Large pages: promote the large anonymous and shared-memory ranges of workloads above a CPU
//! and memory threshold to transparent huge pages with `process_madvise(MADV_COLLAPSE)`, paced.
//! Collapsed memory cannot be cheaply split back, so "revert" is to stop and remember.

use perfpilot_sys::change::Change;
use perfpilot_sys::process::MappingKind;

use super::{Context, Proposal, Strategy, StrategyKind, View, skip};

/// The huge-page size promoted to.
pub const HUGE: u64 = 2 << 20;

/// The shmem THP knob.
pub const SHMEM_ENABLED: &str = "sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// The shmem THP setting that refuses collapse outright.
const SHMEM_DENY: &str = "deny";

/// The large-pages strategy.
pub struct LargePages;

impl Strategy for LargePages {
    fn kind(&self) -> StrategyKind {
        StrategyKind::LargePages
    }

    fn propose(&self, v: &View, ctx: &Context) -> Proposal {
        if !ctx.collapse_supported {
            return skip("this kernel has no process_madvise(MADV_COLLAPSE) (Linux >= 6.1)");
        }
        let min_cpu = ctx.tun.min_cpu_cores;
        let min_mem = ctx.tun.min_memory_bytes();
        if v.w.cpu_cores < min_cpu {
            return skip(format!(
                "uses {:.2} cores, under min_cpu_cores {min_cpu}",
                v.w.cpu_cores
            ));
        }
        let (Some(mem), Some(maps)) = (v.memory, v.maps) else {
            return skip("memory placement not read yet");
        };
        if mem.total() < min_mem {
            return skip(format!(
                "holds {} MiB, under min_memory_mib {}",
                mem.total() >> 20,
                min_mem >> 20
            ));
        }
        let shmem_ok = ctx.thp.shmem_enabled.as_deref() != Some(SHMEM_DENY);
        let shm_total: u64 = mem.shm_per_node.values().sum();
        let huge = mem.anon_huge + mem.shmem_pmd_mapped;
        let candidates = mem.anonymous + if shmem_ok { shm_total } else { 0 };
        let coverage = if candidates == 0 {
            1.0
        } else {
            huge as f64 / candidates as f64
        };
        let target = ctx.tun.huge_coverage_target;
        if coverage >= target {
            return skip(format!(
                "huge-page coverage {:.0} % is at or above {:.0} %",
                coverage * 100.0,
                target * 100.0
            ));
        }
        // Whole huge pages per step.
        let step =
            (((ctx.tun.collapse_mb_per_s * 1e6 * ctx.interval_s) as u64) / HUGE).max(1) * HUGE;
        let mut changes = Vec::new();
        let (mut anon_bytes, mut shm_bytes) = (0u64, 0u64);
        // A shared segment is collapsed once, through the first member seen attaching it.
        let mut seen_shm = std::collections::BTreeSet::new();
        for m in &v.w.members {
            let Some(ranges) = maps.get(&m.pid) else {
                continue;
            };
            let mut chunk: Vec<(u64, u64)> = Vec::new();
            let mut chunk_len = 0;
            for r in ranges {
                let eligible = r.is_private_anon()
                    || (shmem_ok
                        && matches!(
                            r.kind,
                            MappingKind::SysvShm { .. } | MappingKind::PosixShm { .. }
                        )
                        && r.perms.contains('s'));
                if !eligible {
                    continue;
                }
                if !r.is_private_anon() && !seen_shm.insert((r.inode, format!("{:?}", r.kind))) {
                    continue;
                }
                // Whole huge pages inside the range.
                let start = r.start.div_ceil(HUGE) * HUGE;
                let end = r.end / HUGE * HUGE;
                let mut a = start;
                while a < end {
                    let len = (end - a).min(step - chunk_len);
                    chunk.push((a, len));
                    chunk_len += len;
                    if r.is_private_anon() {
                        anon_bytes += len
                    } else {
                        shm_bytes += len
                    }
                    a += len;
                    if chunk_len >= step {
                        changes.push(Change::Collapse {
                            pid: m.pid,
                            ranges: std::mem::take(&mut chunk),
                        });
                        chunk_len = 0;
                    }
                }
            }
            if !chunk.is_empty() {
                changes.push(Change::Collapse {
                    pid: m.pid,
                    ranges: chunk,
                });
            }
        }
        if changes.is_empty() {
            return skip("no range of at least one huge page");
        }
        // Shared memory is collapsed only where shmem THP is allowed on some kernels: raise
        // `never` to `advise`, which changes nothing for a process that has not asked for huge
        // pages; journaled like every change and restored when the action ends.
        if shm_bytes > 0 && ctx.thp.shmem_enabled.as_deref() == Some("never") {
            changes.insert(
                0,
                Change::Sysfs {
                    rel: SHMEM_ENABLED.into(),
                    value: "advise".into(),
                },
            );
        }
        Proposal::Act {
            reason: format!(
                "promote {} MiB of private and {} MiB of shared memory to huge pages in {} steps (coverage {:.0} %, target {:.0} %)",
                anon_bytes >> 20,
                shm_bytes >> 20,
                changes.len(),
                coverage * 100.0,
                target * 100.0
            ),
            changes,
            interleave: false,
            irreversible: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::tunables::Tunables;
    use perfpilot_observe::workload::WorkloadMemory;
    use perfpilot_sys::process::MapRange;
    use std::collections::HashMap;

    fn range(start: u64, len: u64, perms: &str, kind: MappingKind, inode: u64) -> MapRange {
        MapRange {
            start,
            end: start + len,
            perms: perms.into(),
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
            interleave,
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
        assert!(irreversible && !interleave);
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
        assert!(
            matches!(LargePages.propose(&v, &ctx), Proposal::Skip(s) if s.contains("coverage"))
        );
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
}
