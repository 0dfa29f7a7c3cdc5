//! Memory affinity: after cache affinity held a workload on one node's CPUs, move its private
//! pages to that node with `move_pages`, paced, up to a share (70 %) of its private memory;
//! skipped when the workload does not fit one node.

use perfpilot_sys::change::Change;
use perfpilot_units as units;

use super::{Context, Proposal, Strategy, StrategyKind, View, skip};

/// The memory-affinity strategy.
pub struct MemoryAffinity;

impl Strategy for MemoryAffinity {
    fn kind(&self) -> StrategyKind {
        StrategyKind::MemoryAffinity
    }

    fn propose(&self, v: &View, ctx: &Context) -> Proposal {
        let Some(bound) = v.bound_to else {
            return skip("only after cache affinity held");
        };
        // The node whose CPUs hold the binding.
        let Some(node) = ctx.topo.nodes.iter().find(|n| bound.is_subset(&n.cpus)) else {
            return skip(format!("the binding {bound} spans nodes"));
        };
        let (Some(mem), Some(maps)) = (v.memory, v.maps) else {
            return skip("memory placement not read yet");
        };
        let anon_total: u64 = mem.anon_per_node.values().sum();
        let elsewhere: u64 = mem
            .anon_per_node
            .iter()
            .filter(|(n, _)| **n != node.id)
            .map(|(_, b)| b)
            .sum();
        if anon_total == 0 || elsewhere == 0 {
            return skip(format!("its private memory is already on node {}", node.id));
        }
        let on_node = anon_total - elsewhere;
        if anon_total > node.mem_free + on_node {
            return skip(format!(
                "its private memory ({}) does not fit node {} ({} free)",
                units::bytes(anon_total),
                node.id,
                units::bytes(node.mem_free)
            ));
        }
        let share = ctx.tun.migrate_max_share;
        let budget = ((anon_total as f64 * share) as u64).min(elsewhere);
        let step = (ctx.tun.migrate_mb_per_s * 1e6 * ctx.interval_s) as u64;
        let page = ctx.page_size.max(4096);
        let mut changes = Vec::new();
        let mut left = budget / page;
        'members: for m in &v.w.members {
            let Some(ranges) = maps.get(&m.pid) else {
                continue;
            };
            let mut chunk = Vec::new();
            for r in ranges.iter().filter(|r| r.is_private_anon()) {
                let mut a = r.start;
                while a < r.end {
                    if left == 0 {
                        break;
                    }
                    chunk.push(a);
                    left -= 1;
                    a += page;
                    if chunk.len() as u64 * page >= step.max(page) {
                        changes.push(Change::MovePages {
                            pid: m.pid,
                            pages: std::mem::take(&mut chunk),
                            node: node.id,
                        });
                    }
                }
                if left == 0 {
                    if !chunk.is_empty() {
                        changes.push(Change::MovePages {
                            pid: m.pid,
                            pages: std::mem::take(&mut chunk),
                            node: node.id,
                        });
                    }
                    break 'members;
                }
            }
            if !chunk.is_empty() {
                changes.push(Change::MovePages {
                    pid: m.pid,
                    pages: chunk,
                    node: node.id,
                });
            }
        }
        if changes.is_empty() {
            return skip("no private anonymous ranges found in its maps");
        }
        // Said from the steps made, so a step is never shown larger than what is moved.
        let step_pages = |c: &Change| match c {
            Change::MovePages { pages, .. } => pages.len() as u64,
            _ => 0,
        };
        let moved = changes.iter().map(step_pages).sum::<u64>() * page;
        let largest = changes.iter().map(step_pages).max().unwrap_or(0) * page;
        let steps = if changes.len() == 1 {
            "in one step".to_string()
        } else {
            format!(
                "in {} of up to {}",
                units::counted(changes.len() as u64, "step", "steps"),
                units::bytes(largest)
            )
        };
        Proposal::Act {
            reason: format!(
                "move up to {} of its private memory ({} on other nodes, cap {}) to node {} {steps}",
                units::bytes(moved),
                units::bytes(elsewhere),
                units::percent(share * 100.0),
                node.id,
            ),
            changes,
            cheap_undo: false,
            irreversible: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::tunables::Tunables;
    use perfpilot_observe::workload::{Workload, WorkloadMemory};
    use perfpilot_sys::CpuSet;
    use perfpilot_sys::process::{MapRange, MappingKind};
    use std::collections::HashMap;

    /// A workload, its memory, its mappings and the CPUs it is bound to.
    type Seen<'a> = (
        &'a Workload,
        &'a WorkloadMemory,
        &'a HashMap<i32, Vec<MapRange>>,
        Option<&'a CpuSet>,
    );

    /// What the strategy proposes for what it was shown.
    fn proposed((w, mem, maps, bound): Seen, ctx: &Context) -> Proposal {
        let v = View {
            w,
            memory: Some(mem),
            maps: Some(maps),
            bound_to: bound,
        };
        MemoryAffinity.propose(&v, ctx)
    }

    /// The pages a proposal's changes move.
    fn pages_moved(changes: &[Change]) -> usize {
        changes
            .iter()
            .map(|c| match c {
                Change::MovePages { pages, .. } => pages.len(),
                _ => 0,
            })
            .sum()
    }

    fn anon(start: u64, len: u64) -> MapRange {
        MapRange {
            start,
            end: start + len,
            perms: "rw-p".into(),
            offset: 0,
            kind: MappingKind::Anon,
            inode: 0,
            path: None,
        }
    }

    #[test]
    fn moves_up_to_70_percent_of_private_memory_in_paced_steps() {
        let topo = machine(2, 1, 4, 1);
        let w = workload(&[(0, 0.5), (1, 0.5)]);
        let busy = busy(&topo, |_| 0.1);
        let (mut tun, thp) = (Tunables::default(), thp("madvise", "never"));
        tun.set("migrate_mb_per_s", "8").unwrap();
        let ctx = ctx(&topo, &tun, &busy, &thp);
        // 100 MiB private: 40 on node 0 (the binding's), 60 on node 1.
        let mem = WorkloadMemory {
            anon_per_node: [(0, 40 << 20), (1, 60 << 20)].into(),
            ..Default::default()
        };
        let maps: HashMap<i32, Vec<MapRange>> =
            [(100, vec![anon(0x7f00_0000_0000, 100 << 20)])].into();
        let bound = CpuSet::parse("0-3").unwrap();
        let v = (&w, &mem, &maps, Some(&bound));
        let Proposal::Act {
            changes,
            cheap_undo,
            reason,
            ..
        } = proposed(v, &ctx)
        else {
            panic!()
        };
        assert!(!cheap_undo);
        assert_eq!(
            reason,
            "move up to 60 MiB of its private memory (60 MiB on other nodes, cap 70 %) to node 0 \
             in 8 steps of up to 7.63 MiB"
        );
        assert!(
            changes
                .iter()
                .all(|c| matches!(c, Change::MovePages { node: 0, .. })),
            "{changes:?}"
        );
        let pages = pages_moved(&changes);
        // min(70 % of 100 MiB, 60 MiB off-node) = 60 MiB.
        assert_eq!(pages as u64 * 4096, 60 << 20);
        // 8 MB per step at a 1 s interval: 8 steps.
        assert_eq!(changes.len(), 8);
        // 70 % caps it when more is elsewhere.
        let mem = WorkloadMemory {
            anon_per_node: [(0, 0), (1, 100 << 20)].into(),
            ..Default::default()
        };
        let v = (&w, &mem, &maps, Some(&bound));
        let Proposal::Act { changes, .. } = proposed(v, &ctx) else {
            panic!()
        };
        let pages = pages_moved(&changes);
        assert_eq!(pages as u64, (100u64 << 20) * 7 / 10 / 4096);
    }

    #[test]
    fn a_step_is_never_said_to_be_larger_than_what_is_moved() {
        let topo = machine(2, 1, 4, 1);
        let w = workload(&[(0, 0.5), (1, 0.5)]);
        let busy = busy(&topo, |_| 0.1);
        let (mut tun, thp) = (Tunables::default(), thp("madvise", "never"));
        // 1000 MB a step, as a long interval gives; 45 MiB to move.
        tun.set("migrate_mb_per_s", "1000").unwrap();
        let ctx = ctx(&topo, &tun, &busy, &thp);
        let mem = WorkloadMemory {
            anon_per_node: [(0, 100 << 20), (1, 45 << 20)].into(),
            ..Default::default()
        };
        let maps: HashMap<i32, Vec<MapRange>> =
            [(100, vec![anon(0x7f00_0000_0000, 145 << 20)])].into();
        let bound = CpuSet::parse("0-3").unwrap();
        let v = (&w, &mem, &maps, Some(&bound));
        let Proposal::Act {
            changes, reason, ..
        } = proposed(v, &ctx)
        else {
            panic!()
        };
        assert_eq!(changes.len(), 1);
        assert_eq!(
            reason,
            "move up to 45 MiB of its private memory (45 MiB on other nodes, cap 70 %) to node 0 \
             in one step"
        );
    }

    #[test]
    fn only_after_cache_affinity_and_only_when_it_fits() {
        let topo = machine(2, 1, 4, 1);
        let w = workload(&[(0, 0.5), (1, 0.5)]);
        let busy = busy(&topo, |_| 0.1);
        let (tun, thp) = (Tunables::default(), thp("madvise", "never"));
        let ctx = ctx(&topo, &tun, &busy, &thp);
        let maps: HashMap<i32, Vec<MapRange>> =
            [(100, vec![anon(0x7f00_0000_0000, 1 << 30)])].into();
        let mem = WorkloadMemory {
            anon_per_node: [(0, 0), (1, 40 << 30)].into(),
            ..Default::default()
        };
        let v = (&w, &mem, &maps, None);
        assert!(
            matches!(proposed(v, &ctx), Proposal::Skip(s) if s.contains("after cache affinity"))
        );
        let bound = CpuSet::parse("0-3").unwrap();
        let v = (&w, &mem, &maps, Some(&bound));
        // 40 GiB does not fit node 0's 32 GiB free.
        assert!(
            matches!(proposed(v, &ctx), Proposal::Skip(s) if s == "its private memory (40 GiB) does not fit node 0 (32 GiB free)")
        );
        let spans = CpuSet::parse("2-5").unwrap();
        let v = (&w, &mem, &maps, Some(&spans));
        assert!(matches!(proposed(v, &ctx), Proposal::Skip(s) if s.contains("spans nodes")));
    }
}
