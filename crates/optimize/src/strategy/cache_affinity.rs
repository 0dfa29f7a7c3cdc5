//! Cache affinity: compact a multi-threaded workload whose CPU demand fits one domain (node,
//! LLC or core) with headroom onto the least-loaded domain that fits. Never when the demand
//! exceeds the domain's free capacity × headroom (a predicted loss in response time). The
//! domains are those of the topology it is given: the engine gives the part of the machine
//! inside the workload's cgroup cpuset (`Topology::within`), so it is placed there only.

use perfpilot_observe::Topology;
use perfpilot_sys::CpuSet;
use perfpilot_sys::change::Change;

use super::{Context, Proposal, Strategy, StrategyKind, View, skip};
use crate::tunables::Level;

/// The domains of the machine at `level`, without isolated CPUs: (name, CPUs).
pub fn domains(topo: &Topology, level: Level) -> Vec<(String, CpuSet)> {
    let usable = |s: &CpuSet| s.difference(&topo.isolated);
    let mut out: Vec<(String, CpuSet)> = match level {
        Level::Node => topo
            .nodes
            .iter()
            .map(|n| (format!("node {}", n.id), usable(&n.cpus)))
            .collect(),
        Level::Llc => topo
            .llcs()
            .map(|l| (format!("llc {}", l.id), usable(&l.cpus)))
            .collect(),
        Level::Core => topo
            .cores()
            .map(|c| (format!("core {}/{}", c.package, c.id), usable(&c.cpus)))
            .collect(),
    };
    out.retain(|(_, s)| !s.is_empty());
    out
}

/// The cache-affinity strategy.
pub struct CacheAffinity;

impl Strategy for CacheAffinity {
    fn kind(&self) -> StrategyKind {
        StrategyKind::CacheAffinity
    }

    fn propose(&self, v: &View, ctx: &Context) -> Proposal {
        let w = v.w;
        if w.threads < 2 {
            return skip("single-threaded: nothing to compact");
        }
        if v.bound_to.is_some() {
            return skip("already bound by perfpilot");
        }
        let level = ctx.tun.affinity_level;
        let doms = domains(ctx.topo, level);
        if doms.len() < 2 {
            return skip(format!(
                "the CPUs it may use ({}) hold one {level} domain: nothing to compact onto",
                ctx.topo.online
            ));
        }
        let headroom = ctx.tun.headroom;
        let demand = w.cpu_cores;
        // What the workload itself uses on each CPU, to tell it apart from other load.
        let mut own = std::collections::BTreeMap::<u32, f64>::new();
        for m in &w.members {
            for (cpu, cores) in m.thread_cpus.iter().zip(&m.thread_cores) {
                if let Some(c) = cpu {
                    *own.entry(*c).or_default() += cores;
                }
            }
        }
        let mut best: Option<(f64, &String, &CpuSet)> = None;
        let mut closest = f64::INFINITY;
        for (name, set) in &doms {
            let cap = set.len() as f64;
            let busy: f64 = set
                .iter()
                .map(|c| ctx.cpu_busy.get(&c).copied().unwrap_or(0.0))
                .sum();
            let mine: f64 = set
                .iter()
                .map(|c| own.get(&c).copied().unwrap_or(0.0))
                .sum();
            let other = (busy - mine).max(0.0);
            let free = cap - other;
            closest = closest.min(demand - free * headroom);
            if demand <= free * headroom && best.is_none_or(|(f, _, _)| free > f) {
                best = Some((free, name, set));
            }
        }
        let Some((free, name, set)) = best else {
            return skip(format!(
                "demand {demand:.2} cores does not fit any {level} domain with headroom {headroom} (short by {closest:.2} cores): compacting would cost response time"
            ));
        };
        let changes: Vec<Change> = w
            .members
            .iter()
            .map(|m| Change::Affinity {
                pid: m.pid,
                tids: m.tids.clone(),
                cpus: set.clone(),
            })
            .collect();
        Proposal::Act {
            changes,
            reason: format!(
                "compact {} threads onto {name} (cpus {set}): demand {demand:.2} cores fits {} cpus with {free:.2} free x headroom {headroom}",
                w.threads,
                set.len()
            ),
            cheap_undo: true,
            irreversible: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::tunables::Tunables;

    #[test]
    fn compacts_onto_the_least_loaded_fitting_llc() {
        // 2 nodes x 2 LLCs x 4 cores; the workload's 3 threads are spread over LLCs 0, 1, 2.
        let topo = machine(2, 2, 4, 1);
        let w = workload(&[(0, 0.4), (5, 0.4), (9, 0.4)]);
        // LLC 3 (cpus 12-15) is idle; the others carry other load.
        let busy = busy(&topo, |c| {
            if c >= 12 {
                0.0
            } else if c == 0 || c == 5 || c == 9 {
                0.9
            } else {
                0.5
            }
        });
        let (tun, thp) = (Tunables::default(), thp("madvise", "never"));
        let p = CacheAffinity.propose(
            &View {
                w: &w,
                memory: None,
                maps: None,
                bound_to: None,
            },
            &ctx(&topo, &tun, &busy, &thp),
        );
        let Proposal::Act {
            changes,
            cheap_undo,
            ..
        } = p
        else {
            panic!("{p:?}")
        };
        assert!(cheap_undo);
        assert_eq!(
            changes,
            vec![Change::Affinity {
                pid: 100,
                tids: vec![100, 101, 102],
                cpus: CpuSet::parse("12-15").unwrap()
            }]
        );
    }

    #[test]
    fn never_when_demand_exceeds_capacity_times_headroom() {
        // Two saturated threads at core level: one core holds 1 x 0.8 < 2.
        let topo = machine(1, 1, 2, 1);
        let w = workload(&[(0, 1.0), (1, 1.0)]);
        let busy = busy(&topo, |_| 1.0);
        let (mut tun, thp) = (Tunables::default(), thp("madvise", "never"));
        tun.set("affinity_level", "core").unwrap();
        let v = View {
            w: &w,
            memory: None,
            maps: None,
            bound_to: None,
        };
        let p = CacheAffinity.propose(&v, &ctx(&topo, &tun, &busy, &thp));
        assert!(
            matches!(&p, Proposal::Skip(why) if why.contains("does not fit")),
            "{p:?}"
        );
        // A headroom above 1 (an experiment) forces it.
        tun.set("headroom", "2.5").unwrap();
        assert!(matches!(
            CacheAffinity.propose(&v, &ctx(&topo, &tun, &busy, &thp)),
            Proposal::Act { .. }
        ));
    }

    #[test]
    fn skips_single_threads_single_domains_and_bound_workloads() {
        let topo = machine(1, 1, 4, 2);
        let busy = busy(&topo, |_| 0.1);
        let (tun, thp) = (Tunables::default(), thp("madvise", "never"));
        let c = ctx(&topo, &tun, &busy, &thp);
        let one = workload(&[(0, 0.9)]);
        assert!(
            matches!(CacheAffinity.propose(&View { w: &one, memory: None, maps: None, bound_to: None }, &c), Proposal::Skip(s) if s.contains("single-threaded"))
        );
        let two = workload(&[(0, 0.5), (3, 0.5)]);
        assert!(
            matches!(CacheAffinity.propose(&View { w: &two, memory: None, maps: None, bound_to: None }, &c), Proposal::Skip(s) if s.contains("one llc domain"))
        );
        let set = CpuSet::parse("0-1").unwrap();
        let topo2 = machine(2, 1, 2, 1);
        let busy2 = super::super::testing::busy(&topo2, |_| 0.1);
        let c2 = ctx(&topo2, &tun, &busy2, &thp);
        assert!(
            matches!(CacheAffinity.propose(&View { w: &two, memory: None, maps: None, bound_to: Some(&set) }, &c2), Proposal::Skip(s) if s.contains("already bound"))
        );
    }

    #[test]
    fn a_workload_in_a_cpuset_is_compacted_inside_it_only() {
        // 2 nodes x 2 LLCs x 4 cores; its cgroup's cpuset holds LLCs 1 and 2 (cpus 4-11) and
        // node 1's memory. LLC 3 (12-15), idle and outside, is not a choice; LLC 2 is idler.
        let topo = machine(2, 2, 4, 1);
        let cpus = CpuSet::parse("4-11").unwrap();
        let mems = CpuSet::parse("0-1").unwrap();
        let inside = topo.within(&cpus, Some(&mems));
        assert_eq!(domains(&inside, Level::Llc).len(), 2);
        assert_eq!(inside.online, cpus);
        let w = workload(&[(4, 0.3), (9, 0.3)]);
        let busy = busy(&topo, |c| {
            if (8..12).contains(&c) {
                0.1
            } else if c >= 12 {
                0.0
            } else {
                0.6
            }
        });
        let (tun, thp) = (Tunables::default(), thp("madvise", "never"));
        let v = View {
            w: &w,
            memory: None,
            maps: None,
            bound_to: None,
        };
        let Proposal::Act { changes, .. } =
            CacheAffinity.propose(&v, &ctx(&inside, &tun, &busy, &thp))
        else {
            panic!("no proposal")
        };
        assert_eq!(
            changes,
            vec![Change::Affinity {
                pid: 100,
                tids: vec![100, 101],
                cpus: CpuSet::parse("8-11").unwrap()
            }]
        );
        // A cpuset of one core: nothing to compact onto, said with its CPUs.
        let one = topo.within(&CpuSet::parse("1").unwrap(), None);
        let p = CacheAffinity.propose(&v, &ctx(&one, &tun, &busy, &thp));
        assert!(
            matches!(&p, Proposal::Skip(s) if s.contains("(1) hold one llc domain")),
            "{p:?}"
        );
        // Nodes outside its memory nodes are not offered.
        let node0 = topo.within(&topo.online, Some(&CpuSet::parse("0").unwrap()));
        assert_eq!(node0.nodes.len(), 1);
        assert_eq!(node0.online, CpuSet::parse("0-7").unwrap());
    }

    #[test]
    fn isolated_cpus_are_not_a_domain() {
        let mut topo = machine(1, 2, 2, 1);
        topo.isolated = CpuSet::parse("2-3").unwrap();
        assert_eq!(domains(&topo, Level::Llc).len(), 1);
        assert_eq!(domains(&topo, Level::Core).len(), 2);
    }
}
