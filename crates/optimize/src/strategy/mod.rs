//! Strategies: each looks at one workload (or device) and proposes an action, or says why not.
//! Decisions are pure functions of their inputs, so each is tested on synthetic profiles and
//! topologies.

use std::collections::{BTreeMap, HashMap};

use perfpilot_observe::Topology;
use perfpilot_observe::workload::{Workload, WorkloadMemory};
use perfpilot_sys::CpuSet;
use perfpilot_sys::change::Change;
use perfpilot_sys::process::MapRange;
use perfpilot_sys::stat::ThpSettings;
use serde::{Deserialize, Serialize};

use crate::tunables::Tunables;

mod cache_affinity;
mod large_pages;
mod memory_affinity;
pub mod read_ahead;

pub use cache_affinity::{CacheAffinity, domains};
pub use large_pages::{LargePages, Misaligned, SHMEM_ENABLED, SHMEM_NEVER};
pub use memory_affinity::MemoryAffinity;
pub use read_ahead::{DeviceView, ReadAhead};

/// The strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyKind {
    /// Compact a workload onto one cache or node domain.
    CacheAffinity,
    /// Move a compacted workload's private pages to its node.
    MemoryAffinity,
    /// Promote large memory ranges to huge pages.
    LargePages,
    /// Adapt a block device's read-ahead to its reads.
    ReadAhead,
}

impl StrategyKind {
    /// The name used in tunables, logs and the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyKind::CacheAffinity => "cache_affinity",
            StrategyKind::MemoryAffinity => "memory_affinity",
            StrategyKind::LargePages => "large_pages",
            StrategyKind::ReadAhead => "read_ahead",
        }
    }

    /// Whether its switch is on (the tunable of the same name).
    pub fn enabled(self, tun: &Tunables) -> bool {
        match self {
            StrategyKind::CacheAffinity => tun.cache_affinity,
            StrategyKind::MemoryAffinity => tun.memory_affinity,
            StrategyKind::LargePages => tun.large_pages,
            StrategyKind::ReadAhead => tun.read_ahead,
        }
    }

    /// Parses [`StrategyKind::as_str`].
    pub fn parse(s: &str) -> Option<StrategyKind> {
        [
            StrategyKind::CacheAffinity,
            StrategyKind::MemoryAffinity,
            StrategyKind::LargePages,
            StrategyKind::ReadAhead,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The machine as strategies see it.
pub struct Context<'a> {
    /// The machine's CPUs, caches and nodes.
    pub topo: &'a Topology,
    /// The tunables in force.
    pub tun: &'a Tunables,
    /// Busy share (0..=1) of each online CPU over the last interval.
    pub cpu_busy: &'a BTreeMap<u32, f64>,
    /// The transparent huge page settings.
    pub thp: &'a ThpSettings,
    /// `process_madvise(MADV_COLLAPSE)` works here.
    pub collapse_supported: bool,
    /// The scan interval in seconds (for pacing).
    pub interval_s: f64,
    /// The base page size, bytes.
    pub page_size: u64,
}

/// A workload as strategies see it.
pub struct View<'a> {
    /// The workload.
    pub w: &'a Workload,
    /// Memory per node and huge-page coverage, where read.
    pub memory: Option<&'a WorkloadMemory>,
    /// Each member's memory ranges, where read.
    pub maps: Option<&'a HashMap<i32, Vec<MapRange>>>,
    /// The CPUs perfpilot bound it to, when a cache-affinity action holds.
    pub bound_to: Option<&'a CpuSet>,
}

/// What a strategy proposes.
#[derive(Debug, Clone, PartialEq)]
pub enum Proposal {
    /// Make these changes, in order. A paced action lists one change per step.
    Act {
        /// The changes, one per paced step.
        changes: Vec<Change>,
        /// Why, for the log and the journal.
        reason: String,
        /// Cheap to undo and redo: measured in switchback periods.
        cheap_undo: bool,
        /// Cannot be undone (huge pages stay): "revert" means stop and remember.
        irreversible: bool,
    },
    /// Nothing to do, and why.
    Skip(String),
}

/// A strategy.
pub trait Strategy {
    /// Which strategy it is.
    fn kind(&self) -> StrategyKind;
    /// Proposes an action for a workload (or says why not).
    fn propose(&self, v: &View, ctx: &Context) -> Proposal;
}

pub(crate) fn skip(s: impl Into<String>) -> Proposal {
    Proposal::Skip(s.into())
}

#[cfg(test)]
pub(crate) mod testing {
    //! Synthetic workloads and machines for the strategies' tests.
    use super::*;
    use perfpilot_observe::workload::Member;
    use perfpilot_sys::node::{CacheInfo, CpuMasks, CpuTopology, NodeInfo};

    /// `nodes` nodes × `llcs` LLCs per node × `cores` cores per LLC × `smt` threads, CPUs
    /// numbered in order.
    pub fn machine(nodes: u32, llcs: u32, cores: u32, smt: u32) -> Topology {
        let mut cpus = std::collections::BTreeMap::new();
        let mut infos = Vec::new();
        let per_llc = cores * smt;
        let mut cpu = 0;
        for n in 0..nodes {
            let mut ncpus = CpuSet::new();
            for l in 0..llcs {
                let llc_id = n * llcs + l;
                let llc_set: CpuSet = (llc_id * per_llc..(llc_id + 1) * per_llc).collect();
                for c in 0..cores {
                    let core_id = llc_id * cores + c;
                    let sib: CpuSet = (core_id * smt..(core_id + 1) * smt).collect();
                    for _ in 0..smt {
                        cpus.insert(
                            cpu,
                            CpuTopology {
                                cpu,
                                package: n,
                                die: None,
                                core_id,
                                siblings: sib.clone(),
                                caches: vec![CacheInfo {
                                    level: 3,
                                    kind: "Unified".into(),
                                    id: Some(llc_id),
                                    shared_cpus: llc_set.clone(),
                                    size_bytes: Some(32 << 20),
                                }],
                            },
                        );
                        ncpus.insert(cpu);
                        cpu += 1;
                    }
                }
            }
            infos.push(NodeInfo {
                id: n,
                cpus: ncpus,
                distances: (0..nodes).map(|m| if m == n { 10 } else { 20 }).collect(),
                mem_total: 64 << 30,
                mem_free: 32 << 30,
                hugepages: Default::default(),
            });
        }
        let online: CpuSet = (0..cpu).collect();
        Topology::build(
            CpuMasks {
                possible: online.clone(),
                present: online.clone(),
                online,
                offline: CpuSet::new(),
                isolated: CpuSet::new(),
            },
            &cpus,
            &infos,
        )
    }

    /// A one-process workload whose threads ran on `thread_cpus` using `cores_each`.
    pub fn workload(threads: &[(u32, f64)]) -> Workload {
        let m = Member {
            pid: 100,
            starttime: 1,
            tids: (0..threads.len() as i32).map(|i| 100 + i).collect(),
            cpu_cores: threads.iter().map(|t| t.1).sum(),
            rss: 1 << 30,
            cpus_allowed: None,
            thread_cpus: threads.iter().map(|t| Some(t.0)).collect(),
            thread_cores: threads.iter().map(|t| t.1).collect(),
        };
        Workload {
            signature: "0123456789abcdef".into(),
            name: "app".into(),
            comm: "app".into(),
            cmdline: "app --serve".into(),
            uid: 0,
            age_s: 3600.0,
            cpu_cores: m.cpu_cores,
            threads: threads.len(),
            rss: m.rss,
            shared: vec![],
            members: vec![m],
        }
    }

    pub fn busy(topo: &Topology, f: impl Fn(u32) -> f64) -> BTreeMap<u32, f64> {
        topo.online.iter().map(|c| (c, f(c))).collect()
    }

    /// A context with a 1 s interval, 4 KiB pages and MADV_COLLAPSE available.
    pub fn ctx<'a>(
        topo: &'a Topology,
        tun: &'a Tunables,
        busy: &'a BTreeMap<u32, f64>,
        thp: &'a ThpSettings,
    ) -> Context<'a> {
        Context {
            topo,
            tun,
            cpu_busy: busy,
            thp,
            collapse_supported: true,
            interval_s: 1.0,
            page_size: 4096,
        }
    }

    pub fn thp(enabled: &str, shmem: &str) -> ThpSettings {
        ThpSettings {
            enabled: Some(enabled.into()),
            defrag: Some("madvise".into()),
            shmem_enabled: Some(shmem.into()),
        }
    }
}
