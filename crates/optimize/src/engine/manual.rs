//! Manual tuning, per knob: someone else's setting blocks only the strategies it concerns
//! (docs/optimizer.md, *Manual tuning*).
//!
//! | knob | evidence | blocks |
//! |---|---|---|
//! | affinity | a member's mask narrower than its cgroup's effective cpuset, not set by perfpilot (or changed behind its back) | cache and memory affinity |
//! | memory policy | a policy other than `default` in `/proc/PID/numa_maps` (`numactl --membind`, `mbind`, `set_mempolicy`) | memory affinity |
//! | large pages | `THP_enabled: 0` in `/proc/PID/status` (`PR_SET_THP_DISABLE`), `HugetlbPages` > 0 there (the server's own huge pages), a range larger than 8 MiB with `nh` in its `VmFlags` in `/proc/PID/smaps` (`MADV_NOHUGEPAGE`; glibc advises thread stacks so, which are smaller) | large pages |
//! | read-ahead | a device's `read_ahead_kb` other than the kernel's default for it (128 KiB, or twice its `optimal_io_size`), unless the config names the device | read-ahead on that device |
//!
//! The cgroup's effective cpuset is the workload's world, not a setting: a mask equal to it is
//! no manual tuning, and cache and memory affinity place the workload inside it ([`World`]).

use perfpilot_observe::Topology;
use perfpilot_sys::block::QueueSettings;
use perfpilot_sys::cgroup::read::Cpuset;
use perfpilot_sys::process::tuning;
use perfpilot_sys::{CpuSet, Fs};
use perfpilot_units as units;
use serde::{Deserialize, Serialize};

use crate::strategy::StrategyKind;

/// The largest `MADV_NOHUGEPAGE` range taken for a thread stack (the default stack limit).
const STACKS_MAX: u64 = 8 << 20;

/// A setting someone else can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    /// The CPUs a process may run on.
    Affinity,
    /// Where a process's memory is allocated (`set_mempolicy`, `mbind`).
    MemoryPolicy,
    /// Huge pages for a process's memory.
    LargePages,
    /// A block device's `read_ahead_kb`.
    ReadAhead,
}

impl Knob {
    /// The name status shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Knob::Affinity => "affinity",
            Knob::MemoryPolicy => "memory policy",
            Knob::LargePages => "large pages",
            Knob::ReadAhead => "read_ahead_kb",
        }
    }

    /// The strategies a setting of this knob leaves alone.
    pub fn blocks(self) -> &'static [StrategyKind] {
        match self {
            Knob::Affinity => &[StrategyKind::CacheAffinity, StrategyKind::MemoryAffinity],
            Knob::MemoryPolicy => &[StrategyKind::MemoryAffinity],
            Knob::LargePages => &[StrategyKind::LargePages],
            Knob::ReadAhead => &[StrategyKind::ReadAhead],
        }
    }
}

impl std::fmt::Display for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A knob found set by someone else, and the evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManualSetting {
    /// The knob.
    pub knob: Knob,
    /// What was read, and where.
    pub evidence: String,
    /// The strategies it leaves alone.
    pub blocks: Vec<StrategyKind>,
}

impl ManualSetting {
    /// A setting of `knob` shown by `evidence`.
    pub fn new(knob: Knob, evidence: impl Into<String>) -> ManualSetting {
        ManualSetting {
            knob,
            evidence: evidence.into(),
            blocks: knob.blocks().to_vec(),
        }
    }

    /// `KNOB (EVIDENCE)`.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.knob, self.evidence)
    }
}

/// The CPUs and nodes a workload's cgroups allow it: its world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    /// The online CPUs its cpusets allow (every online CPU without a cpuset).
    pub cpus: CpuSet,
    /// The nodes its cpusets allow, where a cpuset says.
    pub mems: Option<CpuSet>,
    /// The cgroup whose cpuset narrows it (the first member's).
    pub by: Option<String>,
}

impl World {
    /// Whether the cpusets leave it every online CPU and node.
    pub fn is_whole(&self, topo: &Topology) -> bool {
        topo.online.is_subset(&self.cpus)
            && self
                .mems
                .as_ref()
                .is_none_or(|m| topo.nodes.iter().all(|n| m.contains(n.id)))
    }

    /// How status says where a mask is compared: the cpuset's, or the machine's CPUs.
    fn said(&self, topo: &Topology) -> String {
        match (&self.by, self.is_whole(topo)) {
            (Some(cg), false) => format!("its cgroup's cpuset {} ({cg})", self.cpus),
            _ => format!("the machine's CPUs {}", self.cpus),
        }
    }
}

/// The world of a workload whose members' cgroup cpusets are `cpusets` (`None`: not read, or
/// not mounted): their intersection with the online CPUs. A cgroup that vanished or cannot be
/// read leaves its member unconstrained (read again next scan); members in disjoint cpusets
/// leave the whole machine (no one place holds them).
pub fn world_from(topo: &Topology, cpusets: impl IntoIterator<Item = Option<Cpuset>>) -> World {
    let mut cpus = topo.online.clone();
    let mut mems: Option<CpuSet> = None;
    let mut by = None;
    for cs in cpusets {
        let Some(cs) = cs else {
            continue;
        };
        if cs.dir.is_root() {
            continue;
        }
        cpus = cpus.intersection(&cs.effective_cpus);
        if !cs.effective_mems.is_empty() {
            mems = Some(match mems {
                Some(x) => x.intersection(&cs.effective_mems),
                None => cs.effective_mems.clone(),
            });
        }
        by.get_or_insert(cs.dir.path.clone());
    }
    if cpus.is_empty() {
        return World {
            cpus: topo.online.clone(),
            mems: None,
            by: None,
        };
    }
    World { cpus, mems, by }
}

/// The affinity setting of `w`, if any: a member whose mask is narrower than its world and is
/// not `ours` (the mask perfpilot bound it to).
pub fn affinity(
    topo: &Topology,
    world: &World,
    masks: &[(i32, Option<CpuSet>)],
    ours: Option<&CpuSet>,
) -> Option<ManualSetting> {
    for (pid, mask) in masks {
        let Some(mask) = mask else { continue };
        if world.cpus.is_subset(mask) || ours == Some(mask) {
            continue;
        }
        let evidence = if world.is_whole(topo) {
            format!("pid {pid} has affinity {mask} (not set by perfpilot)")
        } else {
            format!(
                "pid {pid} has affinity {mask}, narrower than {} (not set by perfpilot)",
                world.said(topo)
            )
        };
        return Some(ManualSetting::new(Knob::Affinity, evidence));
    }
    None
}

/// The slow evidence of one process (its memory policy, huge-page refusals and own huge
/// pages), read from `numa_maps`, `smaps` and `status`; a process that is gone or unreadable
/// gives none.
pub fn process_settings(fs: &Fs, pid: i32) -> Vec<ManualSetting> {
    let mut out = Vec::new();
    if let Ok(Some(text)) = fs.read_opt(&format!("proc/{pid}/numa_maps"))
        && let Some(p) = tuning::memory_policy(&text)
    {
        out.push(ManualSetting::new(
            Knob::MemoryPolicy,
            format!(
                "pid {pid}: policy {} on {} of {} ranges in /proc/{pid}/numa_maps",
                p.policy, p.ranges, p.of
            ),
        ));
    }
    if let Ok(Some(text)) = fs.read_opt(&format!("proc/{pid}/status"))
        && let Ok(st) = perfpilot_sys::process::parse_status(&text, &fs.path("status"))
    {
        if st.thp_enabled == Some(false) {
            out.push(ManualSetting::new(
                Knob::LargePages,
                format!(
                    "pid {pid}: THP_enabled 0 in /proc/{pid}/status (prctl PR_SET_THP_DISABLE)"
                ),
            ));
        } else if st.hugetlb_pages > 0 {
            out.push(ManualSetting::new(
                Knob::LargePages,
                format!(
                    "pid {pid}: maps {} of its own huge pages (HugetlbPages in /proc/{pid}/status)",
                    units::bytes(st.hugetlb_pages)
                ),
            ));
        }
    }
    if !out.iter().any(|s| s.knob == Knob::LargePages)
        && let Ok(Some(text)) = fs.read_opt(&format!("proc/{pid}/smaps"))
    {
        // Thread stacks are not a choice about the workload's memory: glibc advises them
        // MADV_NOHUGEPAGE (seen on sharedcache's 2 MiB Rust stacks and rustc's here), and
        // they are at most the stack limit, 8 MiB by default. Larger ranges count.
        let nh = tuning::nohugepage_ranges(&text, STACKS_MAX + 1);
        if let Some((a, b)) = nh.first() {
            let total: u64 = nh.iter().map(|(a, b)| b - a).sum();
            out.push(ManualSetting::new(
                Knob::LargePages,
                format!(
                    "pid {pid}: {} in {} advised MADV_NOHUGEPAGE (VmFlags nh in /proc/{pid}/smaps, first {a:x}-{b:x})",
                    units::bytes(total),
                    units::counted(nh.len() as u64, "range", "ranges"),
                ),
            ));
        }
    }
    out
}

/// The kernel's own `read_ahead_kb` for a device: 128 KiB, or twice its optimal I/O size
/// where that is larger (the block layer's rule since Linux 5.x; older kernels used 128 KiB).
pub fn default_read_ahead_kb(q: &QueueSettings) -> Vec<u64> {
    let mut v = vec![128];
    if let Some(opt) = q.optimal_io_size
        && 2 * opt / 1024 > 128
    {
        v.push(2 * opt / 1024);
    }
    v
}

/// The read-ahead setting of device `name`, if it is not the kernel's default.
pub fn read_ahead(name: &str, q: &QueueSettings) -> Option<ManualSetting> {
    let now = q.read_ahead_kb?;
    let defaults = default_read_ahead_kb(q);
    if defaults.contains(&now) {
        return None;
    }
    Some(ManualSetting::new(
        Knob::ReadAhead,
        format!(
            "{name}: read_ahead_kb {now} in /sys/block/{name}/queue, not the kernel's default {} (optimal_io_size {}); name the device in read_ahead_devices to let perfpilot tune it",
            defaults[defaults.len() - 1],
            q.optimal_io_size.unwrap_or(0)
        ),
    ))
}
