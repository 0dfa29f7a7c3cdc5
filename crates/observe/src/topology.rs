//! The machine's topology: NUMA nodes → last-level-cache domains → cores → logical CPUs, built
//! from sysfs readings (the `lssrad -av` view of the source studies).

use std::collections::BTreeMap;

use perfpilot_sys::node::{self, CpuTopology};
use perfpilot_sys::{CpuSet, Fs};
use serde::{Deserialize, Serialize};

/// A physical core and its SMT threads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Core {
    /// The kernel's `core_id` (unique within a package only).
    pub id: u32,
    /// Its physical package (socket).
    pub package: u32,
    /// Its online logical CPUs (SMT siblings).
    pub cpus: CpuSet,
}

/// A last-level-cache domain: the cores that share one L3 (or the node, when no cache is
/// described).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Llc {
    /// The cache id given by the kernel, or a number assigned in CPU order.
    pub id: u32,
    /// The cache level (3 for an L3; 0 when no cache is described).
    pub level: u32,
    /// Size in bytes, where the kernel gives it.
    pub size_bytes: Option<u64>,
    /// Its online logical CPUs.
    pub cpus: CpuSet,
    /// Its cores.
    pub cores: Vec<Core>,
}

/// A NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The node number.
    pub id: u32,
    /// Memory of the node in bytes.
    pub mem_total: u64,
    /// Free memory of the node in bytes (when read).
    pub mem_free: u64,
    /// Distance to each node, indexed by position in [`Topology::nodes`].
    pub distances: Vec<u32>,
    /// Online CPUs of the node.
    pub cpus: CpuSet,
    /// Its last-level-cache domains.
    pub llcs: Vec<Llc>,
}

/// The machine: nodes with their caches, cores and CPUs, plus the CPU masks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// The NUMA nodes, by number (one node 0 without NUMA).
    pub nodes: Vec<Node>,
    /// CPUs online.
    pub online: CpuSet,
    /// CPUs offline.
    pub offline: CpuSet,
    /// CPUs isolated from the scheduler (`isolcpus=`).
    pub isolated: CpuSet,
    /// CPUs that may ever exist.
    pub possible: CpuSet,
    /// Where the node files count less (or more) memory than `/proc/meminfo`: the nodes'
    /// figures then include their share of the difference (`perfpilot_sys::zones`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gap: Option<perfpilot_sys::zones::MemoryGap>,
}

/// A topology that could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// A sysfs reading failed.
    #[error(transparent)]
    Sys(#[from] perfpilot_sys::Error),
    /// No online CPU under the root (the path given).
    #[error("no online CPU found under {0}")]
    NoCpus(String),
}

/// The last-level cache of a CPU: the highest-level cache that holds data.
fn llc_of(t: &CpuTopology) -> Option<&node::CacheInfo> {
    t.caches
        .iter()
        .filter(|c| c.kind != "Instruction")
        .max_by_key(|c| c.level)
}

impl Topology {
    /// Reads the topology under `fs`.
    pub fn read(fs: &Fs) -> Result<Topology, TopologyError> {
        let masks = node::read_cpu_masks(fs)?;
        let mut cpus = BTreeMap::new();
        for cpu in masks.online.iter() {
            if let Some(t) = node::read_cpu_topology(fs, cpu)? {
                cpus.insert(cpu, t);
            }
        }
        if cpus.is_empty() {
            return Err(TopologyError::NoCpus(fs.root().display().to_string()));
        }
        let (sys_nodes, gap) = perfpilot_sys::zones::read_nodes_reconciled(fs)?;
        let mut t = Self::build(masks, &cpus, &sys_nodes);
        t.memory_gap = gap;
        Ok(t)
    }

    /// Builds the model from raw readings. Online CPUs that no node lists go to node 0.
    pub fn build(
        masks: node::CpuMasks,
        cpus: &BTreeMap<u32, CpuTopology>,
        sys_nodes: &[node::NodeInfo],
    ) -> Topology {
        let online: CpuSet = cpus.keys().copied().collect();
        let mut node_cpus: Vec<(u32, CpuSet)> = sys_nodes
            .iter()
            .map(|n| (n.id, n.cpus.intersection(&online)))
            .collect();
        if node_cpus.is_empty() {
            node_cpus.push((0, CpuSet::new()));
        }
        let covered = node_cpus
            .iter()
            .fold(CpuSet::new(), |acc, (_, c)| acc.union(c));
        let orphans = online.difference(&covered);
        if !orphans.is_empty() {
            node_cpus[0].1 = node_cpus[0].1.union(&orphans);
        }
        let mut next_llc_id = 0;
        let mut nodes = Vec::new();
        for (i, (id, ncpus)) in node_cpus.into_iter().enumerate() {
            let info = sys_nodes.iter().find(|n| n.id == id);
            // Group the node's CPUs by LLC, in order of their lowest CPU.
            let mut groups: Vec<(CpuSet, Option<&node::CacheInfo>)> = Vec::new();
            for cpu in ncpus.iter() {
                let t = &cpus[&cpu];
                let cache = llc_of(t);
                if groups.iter().any(|(set, _)| set.contains(cpu)) {
                    continue;
                }
                // Inconsistent sysfs data must not put a CPU in two domains.
                let taken = groups
                    .iter()
                    .fold(CpuSet::new(), |acc, (s, _)| acc.union(s));
                let mut shared = cache
                    .map(|c| c.shared_cpus.intersection(&ncpus))
                    .unwrap_or_else(|| ncpus.clone())
                    .difference(&taken);
                shared.insert(cpu);
                groups.push((shared, cache));
            }
            let llcs = groups
                .into_iter()
                .map(|(set, cache)| {
                    let id = match cache.and_then(|c| c.id) {
                        Some(id) => id,
                        None => {
                            next_llc_id += 1;
                            next_llc_id - 1
                        }
                    };
                    let mut cores: Vec<Core> = Vec::new();
                    for cpu in set.iter() {
                        if cores.iter().any(|c| c.cpus.contains(cpu)) {
                            continue;
                        }
                        let t = &cpus[&cpu];
                        cores.push(Core {
                            id: t.core_id,
                            package: t.package,
                            cpus: t.siblings.intersection(&set),
                        });
                    }
                    Llc {
                        id,
                        level: cache.map(|c| c.level).unwrap_or(0),
                        size_bytes: cache.and_then(|c| c.size_bytes),
                        cpus: set,
                        cores,
                    }
                })
                .collect();
            nodes.push(Node {
                id,
                mem_total: info.map(|n| n.mem_total).unwrap_or(0),
                mem_free: info.map(|n| n.mem_free).unwrap_or(0),
                distances: info
                    .map(|n| n.distances.clone())
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| vec![10; i + 1]),
                cpus: ncpus,
                llcs,
            });
        }
        Topology {
            nodes,
            online,
            offline: masks.offline,
            isolated: masks.isolated,
            possible: masks.possible,
            memory_gap: None,
        }
    }

    /// Takes the nodes' memory from a sample (total and free now, with what the node files
    /// leave out: `perfpilot_sys::zones`); the topology is read once, free memory changes.
    pub fn set_node_memory(&mut self, nodes: &[crate::sample::NodeMemory]) {
        for n in &mut self.nodes {
            if let Some(m) = nodes.iter().find(|m| m.node == n.id) {
                n.mem_total = m.total;
                n.mem_free = m.free;
            }
        }
    }

    /// The part of the machine inside a cpuset: nodes, caches and cores cut to `cpus`, nodes
    /// outside `mems` (where given) and domains left without CPUs dropped. Strategies placing a
    /// workload inside its cgroup's cpuset see this.
    pub fn within(&self, cpus: &CpuSet, mems: Option<&CpuSet>) -> Topology {
        let nodes = self
            .nodes
            .iter()
            .filter(|n| mems.is_none_or(|m| m.contains(n.id)))
            .filter_map(|n| {
                let llcs: Vec<Llc> = n
                    .llcs
                    .iter()
                    .filter_map(|l| {
                        let cores: Vec<Core> = l
                            .cores
                            .iter()
                            .map(|c| Core {
                                cpus: c.cpus.intersection(cpus),
                                ..c.clone()
                            })
                            .filter(|c| !c.cpus.is_empty())
                            .collect();
                        let lc = l.cpus.intersection(cpus);
                        (!lc.is_empty()).then(|| Llc {
                            cpus: lc,
                            cores,
                            ..l.clone()
                        })
                    })
                    .collect();
                let nc = n.cpus.intersection(cpus);
                (!nc.is_empty()).then(|| Node {
                    cpus: nc,
                    llcs,
                    ..n.clone()
                })
            })
            .collect::<Vec<Node>>();
        let online = nodes
            .iter()
            .fold(CpuSet::new(), |acc, n| acc.union(&n.cpus));
        Topology {
            nodes,
            online,
            offline: self.offline.clone(),
            isolated: self.isolated.clone(),
            possible: self.possible.clone(),
            memory_gap: self.memory_gap.clone(),
        }
    }

    /// Every core of the machine.
    pub fn cores(&self) -> impl Iterator<Item = &Core> {
        self.nodes
            .iter()
            .flat_map(|n| n.llcs.iter().flat_map(|l| l.cores.iter()))
    }

    /// Every LLC domain of the machine.
    pub fn llcs(&self) -> impl Iterator<Item = &Llc> {
        self.nodes.iter().flat_map(|n| n.llcs.iter())
    }

    /// The node holding `cpu`.
    pub fn node_of(&self, cpu: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.cpus.contains(cpu))
    }

    /// The LLC domain holding `cpu`.
    pub fn llc_of(&self, cpu: u32) -> Option<&Llc> {
        self.llcs().find(|l| l.cpus.contains(cpu))
    }

    /// The largest number of SMT threads on one core.
    pub fn smt_width(&self) -> usize {
        self.cores().map(|c| c.cpus.len()).max().unwrap_or(1)
    }

    /// A short name of where `cpu` lives: `node 0 / llc 2 / core 5`.
    pub fn locate(&self, cpu: u32) -> Option<CpuLocation> {
        for n in &self.nodes {
            for l in &n.llcs {
                for c in &l.cores {
                    if c.cpus.contains(cpu) {
                        return Some(CpuLocation {
                            node: n.id,
                            llc: l.id,
                            core: c.id,
                            package: c.package,
                        });
                    }
                }
            }
        }
        None
    }
}

/// Where a logical CPU sits in the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuLocation {
    /// Its NUMA node.
    pub node: u32,
    /// Its last-level-cache domain's id.
    pub llc: u32,
    /// Its core's id (unique within the package).
    pub core: u32,
    /// Its package (socket).
    pub package: u32,
}
