//! Binding layouts: non-overlapping CPU sets per instance, generated from the [`Topology`].
//!
//! - `cores`: whole cores (SMT siblings never split); an instance's cores are taken from one
//!   LLC domain when one has room, else from one node, else from wherever cores are free.
//!   Instances are spread: each goes to the LLC (and node) with the most free cores.
//! - `llc`: whole LLC domains per instance (enough of them for `cores_per_instance`), from one
//!   node when it can.
//! - `node`: whole NUMA nodes per instance, memory bound to them.
//! - `none`: no binding; `{cpus}` is the instance's share of the machine.
//!
//! Memory is bound (`numactl --membind`) to the nodes an instance's CPUs are on when the
//! machine has more than one node. A layout the machine cannot hold is a [`LayoutError`]
//! saying what it needs and what the machine has; it is never shrunk.

use perfpilot_observe::Topology;
use perfpilot_sys::CpuSet;
use perfpilot_units::counted;
use serde::{Deserialize, Serialize};

use crate::spec::Binding;

/// A layout the machine cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LayoutError {
    /// What the layout needs and what the machine has.
    pub message: String,
}

/// Where one instance runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceLayout {
    /// The instance's index, from 0.
    pub instance: usize,
    /// The CPUs it is bound to (all online CPUs when unbound).
    pub cpuset: CpuSet,
    /// Whether it is bound (`taskset -c cpuset`).
    pub bound: bool,
    /// Logical CPUs it is given: `{cpus}` in templates.
    pub cpus: usize,
    /// Nodes its memory is bound to (empty: no memory policy).
    pub membind: Vec<u32>,
}

/// The layout of one configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// How instances are bound.
    pub binding: Binding,
    /// Where each instance runs.
    pub instances: Vec<InstanceLayout>,
}

fn err(message: String) -> LayoutError {
    LayoutError { message }
}

/// Plans `instances` instances of `cores_per_instance` cores each (`None`: an even share)
/// with `binding` on `topo`.
pub fn plan(
    topo: &Topology,
    instances: usize,
    cores_per_instance: Option<usize>,
    binding: Binding,
) -> Result<Layout, LayoutError> {
    let n = instances.max(1);
    let total_cores = topo.cores().count();
    let smt = topo.smt_width().max(1);
    if total_cores == 0 {
        return Err(err("the topology lists no online cores".into()));
    }
    let multi_node = topo.nodes.len() > 1;
    let membind = |set: &CpuSet| -> Vec<u32> {
        if !multi_node {
            return Vec::new();
        }
        let mut nodes: Vec<u32> = topo
            .nodes
            .iter()
            .filter(|nd| !nd.cpus.intersection(set).is_empty())
            .map(|nd| nd.id)
            .collect();
        nodes.dedup();
        nodes
    };
    let out = |sets: Vec<CpuSet>| Layout {
        binding,
        instances: sets
            .into_iter()
            .enumerate()
            .map(|(i, s)| InstanceLayout {
                instance: i,
                cpus: s.len(),
                membind: membind(&s),
                cpuset: s,
                bound: true,
            })
            .collect(),
    };
    match binding {
        Binding::None => {
            let cpus = match cores_per_instance {
                Some(c) => c * smt,
                None => (topo.online.len() / n).max(1),
            };
            Ok(Layout {
                binding,
                instances: (0..n)
                    .map(|i| InstanceLayout {
                        instance: i,
                        cpuset: topo.online.clone(),
                        bound: false,
                        cpus,
                        membind: Vec::new(),
                    })
                    .collect(),
            })
        }
        Binding::Cores => Ok(out(bind_cores(topo, n, cores_per_instance, total_cores)?)),
        Binding::Llc => Ok(out(bind_llcs(topo, n, cores_per_instance, total_cores)?)),
        Binding::Node => Ok(out(bind_nodes(topo, n, cores_per_instance)?)),
    }
}

/// `n` sets of cores for `Binding::Cores`: each instance's cores in one LLC domain where one
/// has room, else in one node, else anywhere.
fn bind_cores(
    topo: &Topology,
    n: usize,
    cores_per_instance: Option<usize>,
    total_cores: usize,
) -> Result<Vec<CpuSet>, LayoutError> {
    let c = match cores_per_instance {
        Some(c) => c,
        None if n <= total_cores => total_cores / n,
        None => 0,
    };
    let need = n * c.max(1);
    if c == 0 || need > total_cores {
        return Err(err(format!(
            "{} × {} bound to cores needs {}; this machine has {}",
            counted(n as u64, "instance", "instances"),
            counted(c.max(1) as u64, "core", "cores"),
            counted(need as u64, "core", "cores"),
            counted(total_cores as u64, "core", "cores"),
        )));
    }
    // Free cores per (node index, llc index), in topology order.
    let mut free: Vec<Vec<Vec<CpuSet>>> = topo
        .nodes
        .iter()
        .map(|nd| {
            nd.llcs
                .iter()
                .map(|l| l.cores.iter().map(|c| c.cpus.clone()).collect())
                .collect()
        })
        .collect();
    let mut sets = Vec::with_capacity(n);
    for _ in 0..n {
        let mut set = CpuSet::new();
        let node_free = |free: &Vec<Vec<Vec<CpuSet>>>, ni: usize| -> usize {
            free[ni].iter().map(Vec::len).sum()
        };
        // 1. One LLC with room: the one with the most free cores (ties: the node with
        //    the most free cores, then topology order).
        let mut best: Option<(usize, usize)> = None;
        for (ni, node) in free.iter().enumerate() {
            for (li, l) in node.iter().enumerate() {
                if l.len() < c {
                    continue;
                }
                let better = match best {
                    None => true,
                    Some((bn, bl)) => {
                        let cur = (free[bn][bl].len(), node_free(&free, bn));
                        (l.len(), node_free(&free, ni)) > cur
                    }
                };
                if better {
                    best = Some((ni, li));
                }
            }
        }
        if let Some((ni, li)) = best {
            for core in free[ni][li].drain(..c) {
                set = set.union(&core);
            }
            sets.push(set);
            continue;
        }
        // 2. One node with room, its fullest LLCs first; 3. anywhere.
        let node = (0..free.len())
            .filter(|&ni| node_free(&free, ni) >= c)
            .max_by_key(|&ni| (node_free(&free, ni), usize::MAX - ni));
        let mut order: Vec<(usize, usize)> = match node {
            Some(ni) => (0..free[ni].len()).map(|li| (ni, li)).collect(),
            None => free
                .iter()
                .enumerate()
                .flat_map(|(ni, nd)| (0..nd.len()).map(move |li| (ni, li)))
                .collect(),
        };
        order.sort_by_key(|&(ni, li)| std::cmp::Reverse(free[ni][li].len()));
        let mut left = c;
        for (ni, li) in order {
            let take = left.min(free[ni][li].len());
            for core in free[ni][li].drain(..take) {
                set = set.union(&core);
            }
            left -= take;
            if left == 0 {
                break;
            }
        }
        sets.push(set);
    }
    Ok(sets)
}

/// `n` sets of whole LLC domains for `Binding::Llc`, each from the node with the most free
/// cores first.
fn bind_llcs(
    topo: &Topology,
    n: usize,
    cores_per_instance: Option<usize>,
    total_cores: usize,
) -> Result<Vec<CpuSet>, LayoutError> {
    let llc_count = topo.llcs().count();
    let mut free: Vec<Vec<(usize, CpuSet)>> = topo
        .nodes
        .iter()
        .map(|nd| {
            nd.llcs
                .iter()
                .map(|l| (l.cores.len(), l.cpus.clone()))
                .collect()
        })
        .collect();
    let mut sets = Vec::with_capacity(n);
    let want = cores_per_instance.unwrap_or(1);
    for i in 0..n {
        // The node with the most free cores in free LLCs.
        let ni = (0..free.len())
            .max_by_key(|&ni| (free[ni].iter().map(|l| l.0).sum::<usize>(), usize::MAX - ni));
        let mut set = CpuSet::new();
        let mut got = 0;
        let mut take_from = |nd: &mut Vec<(usize, CpuSet)>| {
            while got < want && !nd.is_empty() {
                let (cores, cpus) = nd.remove(0);
                got += cores;
                set = set.union(&cpus);
            }
        };
        if let Some(ni) = ni {
            take_from(&mut free[ni]);
        }
        for nd in free.iter_mut() {
            take_from(nd);
        }
        if got < want || set.is_empty() {
            return Err(err(format!(
                "{} × {} bound to whole LLC domains needs more than this machine's {} ({} of {} cores in all); instance {} found no free LLC domain",
                counted(n as u64, "instance", "instances"),
                counted(want as u64, "core", "cores"),
                counted(llc_count as u64, "LLC domain", "LLC domains"),
                counted(llc_count as u64, "domain", "domains"),
                total_cores,
                i + 1,
            )));
        }
        sets.push(set);
    }
    Ok(sets)
}

/// `n` sets of whole NUMA nodes for `Binding::Node`.
fn bind_nodes(
    topo: &Topology,
    n: usize,
    cores_per_instance: Option<usize>,
) -> Result<Vec<CpuSet>, LayoutError> {
    let mut free: Vec<(usize, CpuSet)> = topo
        .nodes
        .iter()
        .filter(|nd| !nd.cpus.is_empty())
        .map(|nd| (nd.llcs.iter().map(|l| l.cores.len()).sum(), nd.cpus.clone()))
        .collect();
    let node_count = free.len();
    let want = cores_per_instance.unwrap_or(1);
    let mut sets = Vec::with_capacity(n);
    for i in 0..n {
        let mut set = CpuSet::new();
        let mut got = 0;
        while got < want && !free.is_empty() {
            let (cores, cpus) = free.remove(0);
            got += cores;
            set = set.union(&cpus);
        }
        if got < want || set.is_empty() {
            return Err(err(format!(
                "{} × {} bound to whole NUMA nodes needs more than this machine's {}; instance {} found no free node",
                counted(n as u64, "instance", "instances"),
                counted(want as u64, "core", "cores"),
                counted(node_count as u64, "node", "nodes"),
                i + 1,
            )));
        }
        sets.push(set);
    }
    Ok(sets)
}
