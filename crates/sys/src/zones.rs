//! Where the node files' memory figures fall short of `/proc/meminfo`, and the figure to use.
//!
//! `/sys/devices/system/node/nodeN/meminfo` counts the pages each node's zones manage now.
//! Memory the kernel has but does not manage yet is left out there while `/proc/meminfo`
//! already counts it: a kernel that initialises its page structures on demand (this VM's
//! `deferred_init=lazy`: the Normal zone grows from 3 GiB managed towards its 21 GiB present),
//! or memory being hot-plugged. `/proc/zoneinfo` shows it per zone as `present` pages that are
//! not `managed`. [`read_nodes_reconciled`] gives each node its share of the gap, by those
//! pages (by node size where zoneinfo does not say), and says when the sources disagree; on one
//! node that is `/proc/meminfo`'s figure itself. Memory a balloon driver took is gone from both
//! sources alike (the balloon adjusts the managed count), so it makes no gap.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::node::{NodeInfo, read_nodes};
use crate::{Fs, Result};

/// The sources disagree when they differ by more than this share of `/proc/meminfo`'s total.
const TOLERANCE: f64 = 0.01;

/// Per node, the bytes of its zones' `present` pages that are not `managed`.
pub fn unmanaged(zoneinfo: &str, page_size: u64) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    let mut node = None;
    let mut present = 0u64;
    let mut flush = |node: Option<u32>, present: &mut u64, managed: u64| {
        if let Some(n) = node {
            *out.entry(n).or_insert(0) += present.saturating_sub(managed) * page_size;
        }
        *present = 0;
    };
    for line in zoneinfo.lines() {
        if let Some(rest) = line.strip_prefix("Node ") {
            node = rest.split(',').next().and_then(|n| n.trim().parse().ok());
            present = 0;
            continue;
        }
        let mut it = line.split_ascii_whitespace();
        match (it.next(), it.next().and_then(|v| v.parse::<u64>().ok())) {
            (Some("present"), Some(v)) => present = v,
            (Some("managed"), Some(v)) => flush(node, &mut present, v),
            _ => {}
        }
    }
    out
}

/// How the node files' memory compares with `/proc/meminfo`, where they disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryGap {
    /// Memory the node files count, all nodes, bytes.
    pub nodes_total: u64,
    /// Free memory the node files count, all nodes, bytes.
    pub nodes_free: u64,
    /// `/proc/meminfo`'s `MemTotal`, bytes.
    pub meminfo_total: u64,
    /// `/proc/meminfo`'s `MemFree`, bytes.
    pub meminfo_free: u64,
    /// `present` pages not `managed` in `/proc/zoneinfo`, all nodes, bytes (0: not said).
    pub unmanaged: u64,
}

impl MemoryGap {
    /// The sentence `topology` and `observe` print, sizes written by `bytes`.
    pub fn describe(&self, bytes: impl Fn(u64) -> String) -> String {
        if self.nodes_total > self.meminfo_total {
            return format!(
                "the node files (/sys/devices/system/node/node*/meminfo) count {} of memory, more than /proc/meminfo's {}; node figures are the node files'",
                bytes(self.nodes_total),
                bytes(self.meminfo_total)
            );
        }
        let zones = if self.unmanaged > 0 {
            format!(
                "/proc/zoneinfo has {} present but not yet managed (memory initialised on demand or being hot-plugged)",
                bytes(self.unmanaged)
            )
        } else {
            "/proc/zoneinfo does not say where it is".to_string()
        };
        format!(
            "the node files (/sys/devices/system/node/node*/meminfo) count {} of memory ({} free), /proc/meminfo {} ({} free); {zones}; node figures here include each node's share of the {} the node files leave out",
            bytes(self.nodes_total),
            bytes(self.nodes_free),
            bytes(self.meminfo_total),
            bytes(self.meminfo_free),
            bytes(self.meminfo_total - self.nodes_total)
        )
    }
}

/// Every NUMA node, its memory made whole from `/proc/meminfo` where the node files leave some
/// out, and the disagreement (`None` when they agree within 1 %).
pub fn read_nodes_reconciled(fs: &Fs) -> Result<(Vec<NodeInfo>, Option<MemoryGap>)> {
    let mut nodes = read_nodes(fs)?;
    let gap = reconcile(fs, &mut nodes);
    Ok((nodes, gap))
}

/// Gives each node its share of the memory `/proc/meminfo` counts and the node files do not;
/// returns the disagreement, or `None` when the two agree within 1 %.
pub fn reconcile(fs: &Fs, nodes: &mut [NodeInfo]) -> Option<MemoryGap> {
    let mi = crate::stat::read_meminfo(fs).ok()?;
    let (total, free) = (
        mi.get("MemTotal").copied().unwrap_or(0),
        mi.get("MemFree").copied().unwrap_or(0),
    );
    let nodes_total: u64 = nodes.iter().map(|n| n.mem_total).sum();
    let nodes_free: u64 = nodes.iter().map(|n| n.mem_free).sum();
    if total == 0 || nodes.is_empty() {
        return None;
    }
    if (total.abs_diff(nodes_total) as f64) <= TOLERANCE * total as f64 {
        return None;
    }
    let zones = fs
        .read_opt("proc/zoneinfo")
        .ok()
        .flatten()
        .map(|t| unmanaged(&t, crate::page_size()))
        .unwrap_or_default();
    let z: u64 = zones.values().sum();
    let found = MemoryGap {
        nodes_total,
        nodes_free,
        meminfo_total: total,
        meminfo_free: free,
        unmanaged: z,
    };
    if nodes_total > total {
        return Some(found);
    }
    let (gap, free_gap) = (total - nodes_total, free.saturating_sub(nodes_free));
    let count = nodes.len() as f64;
    let weights: Vec<f64> = nodes
        .iter()
        .map(|n| {
            if z > 0 {
                zones.get(&n.id).copied().unwrap_or(0) as f64 / z as f64
            } else if nodes_total > 0 {
                n.mem_total as f64 / nodes_total as f64
            } else {
                1.0 / count
            }
        })
        .collect();
    for (n, w) in nodes.iter_mut().zip(weights) {
        n.mem_total += (gap as f64 * w).round() as u64;
        n.mem_free += (free_gap as f64 * w).round() as u64;
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-node tree: node meminfo, /proc/meminfo and, optionally, zoneinfo.
    fn tree(node_kb: (u64, u64), mem_kb: (u64, u64), zoneinfo: Option<&str>) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let w = |rel: &str, text: String| {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w(
            "sys/devices/system/node/node0/meminfo",
            format!(
                "Node 0 MemTotal:  {} kB\nNode 0 MemFree:  {} kB\n",
                node_kb.0, node_kb.1
            ),
        );
        w("sys/devices/system/node/node0/cpulist", "0-1\n".into());
        w(
            "proc/meminfo",
            format!("MemTotal:  {} kB\nMemFree:  {} kB\n", mem_kb.0, mem_kb.1),
        );
        if let Some(z) = zoneinfo {
            w("proc/zoneinfo", z.to_string());
        }
        d
    }

    #[test]
    fn memory_the_node_files_leave_out_is_given_back_to_the_node_and_said() {
        // This VM (2026-11-27): node 0 6252756 kB (3429216 free), /proc/meminfo 24684092 kB
        // (21860500 free); the Normal zone 5505024 present, 786432 managed pages.
        let zi = "Node 0, zone      DMA\n  pages free     3840\n        spanned  4095\n        present  3998\n        managed  3840\nNode 0, zone    DMA32\n        present  782336\n        managed  772917\nNode 0, zone   Normal\n        present  5505024\n        managed  786432\nNode 0, zone  Movable\n        present  0\n        managed  0\n";
        let d = tree((6_252_756, 3_429_216), (24_684_092, 21_860_500), Some(zi));
        let (nodes, note) = read_nodes_reconciled(&Fs::at(d.path())).unwrap();
        assert_eq!(
            nodes[0].mem_total,
            24_684_092 * 1024,
            "one node: /proc/meminfo's figure"
        );
        assert_eq!(nodes[0].mem_free, 21_860_500 * 1024);
        let gap = note.unwrap();
        assert_eq!(
            (gap.nodes_total, gap.meminfo_total),
            (6_252_756 * 1024, 24_684_092 * 1024)
        );
        let said = gap.describe(|b| format!("{} MiB", b >> 20));
        assert!(
            said.contains("count 6106 MiB of memory (3348 MiB free), /proc/meminfo 24105 MiB"),
            "{said}"
        );
        assert!(said.contains("present but not yet managed"), "{said}");
        let un = unmanaged(zi, 4096);
        assert_eq!(un[&0], (158 + 9419 + 4_718_592) * 4096);
    }

    #[test]
    fn agreeing_sources_are_left_as_they_are_and_two_nodes_share_the_gap_by_their_zones() {
        let d = tree((1_000_000, 500_000), (1_005_000, 500_000), None);
        let (nodes, note) = read_nodes_reconciled(&Fs::at(d.path())).unwrap();
        assert_eq!(
            (nodes[0].mem_total, note),
            (1_000_000 * 1024, None),
            "within 1 %"
        );

        let d = tree((4_000_000, 1_000_000), (16_000_000, 9_000_000), None);
        let p = d.path().join("sys/devices/system/node/node1");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(
            p.join("meminfo"),
            "Node 1 MemTotal: 4000000 kB\nNode 1 MemFree: 1000000 kB\n",
        )
        .unwrap();
        std::fs::write(p.join("cpulist"), "2-3\n").unwrap();
        // Node 1's zones hold three quarters of the unmanaged pages.
        std::fs::write(
            d.path().join("proc/zoneinfo"),
            "Node 0, zone Normal\n present 1000\n managed 0\nNode 1, zone Normal\n present 3000\n managed 0\n",
        )
        .unwrap();
        let (nodes, note) = read_nodes_reconciled(&Fs::at(d.path())).unwrap();
        assert!(note.is_some());
        assert_eq!(nodes[0].mem_total, (4_000_000 + 2_000_000) * 1024);
        assert_eq!(nodes[1].mem_total, (4_000_000 + 6_000_000) * 1024);
        assert_eq!(nodes[0].mem_free + nodes[1].mem_free, 9_000_000 * 1024);
    }
}
