//! CPU and NUMA topology as sysfs shows it (`/sys/devices/system/{cpu,node}`): raw readings per
//! logical CPU, cache and node. `perfpilot-observe` builds the topology model from them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fs::{for_each_kv, parse_kb};
use crate::{CpuSet, Error, Fs, Result};

const CPU_DIR: &str = "sys/devices/system/cpu";
const NODE_DIR: &str = "sys/devices/system/node";

/// The CPU masks of `/sys/devices/system/cpu/{possible,present,online,offline,isolated}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuMasks {
    /// CPUs that may ever exist (hot-plug included).
    pub possible: CpuSet,
    /// CPUs physically present.
    pub present: CpuSet,
    /// CPUs online and schedulable.
    pub online: CpuSet,
    /// CPUs taken offline (or not brought up).
    pub offline: CpuSet,
    /// CPUs isolated from the scheduler (`isolcpus=`).
    pub isolated: CpuSet,
}

fn read_list(fs: &Fs, rel: &str) -> Result<Option<CpuSet>> {
    let Some(text) = fs.read_opt(rel)? else {
        return Ok(None);
    };
    CpuSet::parse(&text)
        .map(Some)
        .map_err(|e| Error::parse(fs.path(rel), 1, e.to_string()))
}

/// Reads the CPU masks. `online` is required; the others default to sensible values.
pub fn read_cpu_masks(fs: &Fs) -> Result<CpuMasks> {
    let online_rel = format!("{CPU_DIR}/online");
    let online = read_list(fs, &online_rel)?.ok_or_else(|| Error::Io {
        path: fs.path(&online_rel),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })?;
    let possible = read_list(fs, &format!("{CPU_DIR}/possible"))?.unwrap_or_else(|| online.clone());
    let present = read_list(fs, &format!("{CPU_DIR}/present"))?.unwrap_or_else(|| possible.clone());
    Ok(CpuMasks {
        offline: read_list(fs, &format!("{CPU_DIR}/offline"))?.unwrap_or_default(),
        isolated: read_list(fs, &format!("{CPU_DIR}/isolated"))?.unwrap_or_default(),
        possible,
        present,
        online,
    })
}

/// One cache level as seen from a CPU (`cpuN/cache/indexK`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheInfo {
    /// The level: 1, 2, 3.
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    /// The cache instance id, where the kernel gives one.
    pub id: Option<u32>,
    /// The logical CPUs that share this cache.
    pub shared_cpus: CpuSet,
    /// Size in bytes, where the kernel gives it.
    pub size_bytes: Option<u64>,
}

/// The topology of one online logical CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTopology {
    /// The logical CPU number.
    pub cpu: u32,
    /// The physical package (socket) id.
    pub package: u32,
    /// The die id within the package, where the kernel gives one.
    pub die: Option<u32>,
    /// The core id within the package (not unique across packages).
    pub core_id: u32,
    /// SMT siblings including this CPU (`core_cpus_list`, or `thread_siblings_list` on older
    /// kernels).
    pub siblings: CpuSet,
    /// Its caches, as `cache/index*` lists them.
    pub caches: Vec<CacheInfo>,
}

fn read_u32(fs: &Fs, rel: &str) -> Result<Option<u32>> {
    let Some(text) = fs.read_opt(rel)? else {
        return Ok(None);
    };
    let t = text.trim();
    // die_id is -1 on some platforms: treat negatives as "not given".
    if t.starts_with('-') {
        return Ok(None);
    }
    t.parse()
        .map(Some)
        .map_err(|_| Error::parse(fs.path(rel), 1, format!("{t:?} is not a number")))
}

/// Parses a cache size such as `32K`, `16384K` or `1M`.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1024),
        'M' => (&s[..s.len() - 1], 1024 * 1024),
        'G' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// Reads the topology of one CPU; `Ok(None)` when the CPU has no `topology/` directory (offline).
pub fn read_cpu_topology(fs: &Fs, cpu: u32) -> Result<Option<CpuTopology>> {
    let base = format!("{CPU_DIR}/cpu{cpu}");
    let Some(package) = read_u32(fs, &format!("{base}/topology/physical_package_id"))? else {
        return Ok(None);
    };
    let core_id = read_u32(fs, &format!("{base}/topology/core_id"))?.unwrap_or(cpu);
    let die = read_u32(fs, &format!("{base}/topology/die_id"))?;
    let siblings = match read_list(fs, &format!("{base}/topology/core_cpus_list"))? {
        Some(s) => s,
        None => read_list(fs, &format!("{base}/topology/thread_siblings_list"))?
            .unwrap_or_else(|| std::iter::once(cpu).collect()),
    };
    let mut caches = Vec::new();
    let cache_dir = format!("{base}/cache");
    let mut indices: Vec<u32> = match fs.list(&cache_dir) {
        Ok(names) => names
            .iter()
            .filter_map(|n| n.strip_prefix("index")?.parse().ok())
            .collect(),
        Err(_) => Vec::new(),
    };
    indices.sort_unstable();
    for k in indices {
        let idx = format!("{cache_dir}/index{k}");
        let Some(level) = read_u32(fs, &format!("{idx}/level"))? else {
            continue;
        };
        let kind = fs
            .read_opt(&format!("{idx}/type"))?
            .map(|t| t.trim().to_string())
            .unwrap_or_else(|| "Unified".into());
        let shared_cpus = read_list(fs, &format!("{idx}/shared_cpu_list"))?
            .unwrap_or_else(|| std::iter::once(cpu).collect());
        let size_bytes = fs
            .read_opt(&format!("{idx}/size"))?
            .and_then(|s| parse_size(&s));
        caches.push(CacheInfo {
            level,
            kind,
            id: read_u32(fs, &format!("{idx}/id"))?,
            shared_cpus,
            size_bytes,
        });
    }
    Ok(Some(CpuTopology {
        cpu,
        package,
        die,
        core_id,
        siblings,
        caches,
    }))
}

/// One NUMA node as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The node number.
    pub id: u32,
    /// The CPUs of the node.
    pub cpus: CpuSet,
    /// Distances to every node, in node order (`10` = local).
    pub distances: Vec<u32>,
    /// Memory of the node in bytes.
    pub mem_total: u64,
    /// Free memory of the node in bytes.
    pub mem_free: u64,
    /// Per huge-page size in kB: (total, free) pages.
    pub hugepages: BTreeMap<u64, (u64, u64)>,
}

/// Reads every NUMA node. A kernel without NUMA support (no `node/` directory) gives one node 0
/// holding every online CPU and `/proc/meminfo`'s memory.
pub fn read_nodes(fs: &Fs) -> Result<Vec<NodeInfo>> {
    let names = match fs.list(NODE_DIR) {
        Ok(n) => n,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            let masks = read_cpu_masks(fs)?;
            let mem = crate::stat::read_meminfo(fs)?;
            return Ok(vec![NodeInfo {
                id: 0,
                cpus: masks.online,
                distances: vec![10],
                mem_total: mem.get("MemTotal").copied().unwrap_or(0),
                mem_free: mem.get("MemFree").copied().unwrap_or(0),
                hugepages: BTreeMap::new(),
            }]);
        }
        Err(e) => return Err(e),
    };
    let mut ids: Vec<u32> = names
        .iter()
        .filter_map(|n| n.strip_prefix("node")?.parse().ok())
        .collect();
    ids.sort_unstable();
    let mut nodes = Vec::with_capacity(ids.len());
    for id in ids {
        let base = format!("{NODE_DIR}/node{id}");
        let cpus = read_list(fs, &format!("{base}/cpulist"))?.unwrap_or_default();
        let dist_rel = format!("{base}/distance");
        let distances = match fs.read_opt(&dist_rel)? {
            Some(t) => t
                .split_ascii_whitespace()
                .map(|d| d.parse::<u32>())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|_| {
                    Error::parse(
                        fs.path(&dist_rel),
                        1,
                        format!("bad distance list {:?}", t.trim()),
                    )
                })?,
            None => Vec::new(),
        };
        let mi_rel = format!("{base}/meminfo");
        let mi_path = fs.path(&mi_rel);
        let (mut mem_total, mut mem_free) = (0, 0);
        if let Some(text) = fs.read_opt(&mi_rel)? {
            // Lines look like `Node 0 MemTotal:       4942028 kB`.
            let mut err = None;
            for_each_kv(&text, |line, k, v| {
                let key = k.rsplit(' ').next().unwrap_or(k);
                let slot = match key {
                    "MemTotal" => &mut mem_total,
                    "MemFree" => &mut mem_free,
                    _ => return,
                };
                match parse_kb(&mi_path, line, key, v) {
                    Ok(n) => *slot = n,
                    Err(e) => {
                        err.get_or_insert(e);
                    }
                }
            });
            if let Some(e) = err {
                return Err(e);
            }
        }
        let mut hugepages = BTreeMap::new();
        let hp_dir = format!("{base}/hugepages");
        if let Ok(sizes) = fs.list(&hp_dir) {
            for name in sizes {
                let Some(kb) = name
                    .strip_prefix("hugepages-")
                    .and_then(|s| s.strip_suffix("kB"))
                    .and_then(|s| s.parse::<u64>().ok())
                else {
                    continue;
                };
                let nr = read_u32(fs, &format!("{hp_dir}/{name}/nr_hugepages"))?.unwrap_or(0);
                let free = read_u32(fs, &format!("{hp_dir}/{name}/free_hugepages"))?.unwrap_or(0);
                hugepages.insert(kb, (u64::from(nr), u64::from(free)));
            }
        }
        nodes.push(NodeInfo {
            id,
            cpus,
            distances,
            mem_total,
            mem_free,
            hugepages,
        });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes() {
        assert_eq!(parse_size("32K\n"), Some(32 * 1024));
        assert_eq!(parse_size("107520K"), Some(107520 * 1024));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("lots"), None);
    }
}
