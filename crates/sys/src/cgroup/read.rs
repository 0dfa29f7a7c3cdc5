//! One group's files in either layout: CPU quota (`cpu.max`; v1 `cpu.cfs_quota_us` and
//! `cpu.cfs_period_us`), CPU use (`cpu.stat`; v1 `cpuacct.usage` and `cpu.stat`), cpusets
//! (`cpuset.cpus` and `cpuset.cpus.effective`; v1 `cpuset.cpus` and `cpuset.effective_cpus`),
//! memory (`memory.current`, `memory.max` and `memory.stat`; v1 `memory.usage_in_bytes`,
//! `memory.limit_in_bytes` and `memory.stat`) and pressure (`cpu.pressure`, `memory.pressure`,
//! `io.pressure`, v2 only).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Dir, Hierarchies, Membership, Version};
use crate::stat::Pressure;
use crate::{CpuSet, Error, Fs, Result};

/// v1 prints "no limit" as a huge page-rounded number; anything from here up is no limit.
const NO_LIMIT: u64 = 1 << 60;

/// A CPU quota: `quota` of CPU time per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quota {
    /// CPU time allowed per period, microseconds.
    pub quota_us: u64,
    /// The period, microseconds.
    pub period_us: u64,
}

impl Quota {
    /// The quota in cores (0.5: half a CPU's time).
    pub fn cores(&self) -> f64 {
        self.quota_us as f64 / self.period_us.max(1) as f64
    }
}

/// CPU use of a group since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuStat {
    /// CPU time used by its processes (v2 `usage_usec`; v1 `cpuacct.usage`).
    pub usage: Duration,
    /// Quota periods that have elapsed while it had runnable work (`nr_periods`).
    pub periods: u64,
    /// Periods in which the quota throttled it (`nr_throttled`).
    pub throttled_periods: u64,
    /// Time its threads were throttled (v2 `throttled_usec`; v1 `throttled_time`).
    pub throttled: Duration,
}

/// A group's cpuset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpuset {
    /// The group whose files these are (the nearest ancestor that has them, on v2 where a
    /// group without the cpuset controller enabled has none).
    pub dir: Dir,
    /// The CPUs asked for (`cpuset.cpus`); empty on v2 means "the parent's".
    pub cpus: CpuSet,
    /// The CPUs its processes may use (`cpuset.cpus.effective`).
    pub effective_cpus: CpuSet,
    /// The nodes its processes may allocate from (`cpuset.mems.effective`).
    pub effective_mems: CpuSet,
}

/// Memory use of a group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryUse {
    /// Memory charged to it now, bytes (`memory.current`; v1 `memory.usage_in_bytes`).
    pub current: u64,
    /// Its limit, bytes, where one is set (`memory.max`; v1 `memory.limit_in_bytes`).
    pub limit: Option<u64>,
    /// `memory.stat`, bytes or counts per key (`anon`, `file`; v1 `rss`, `cache`, …).
    pub stat: BTreeMap<String, u64>,
}

/// Pressure stalls of one group (v2 only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupPressure {
    /// `cpu.pressure`.
    pub cpu: Option<Pressure>,
    /// `memory.pressure`.
    pub memory: Option<Pressure>,
    /// `io.pressure`.
    pub io: Option<Pressure>,
}

fn number(fs: &Fs, rel: &str) -> Result<Option<u64>> {
    let Some(text) = fs.read_opt(rel)? else {
        return Ok(None);
    };
    let t = text.trim();
    if t == "max" {
        return Ok(Some(u64::MAX));
    }
    t.parse()
        .map(Some)
        .map_err(|_| Error::parse(fs.path(rel), 1, format!("not a number: {t:?}")))
}

/// Parses `key value` lines (`cpu.stat`, `memory.stat`).
fn key_values(fs: &Fs, rel: &str) -> Result<Option<BTreeMap<String, u64>>> {
    let Some(text) = fs.read_opt(rel)? else {
        return Ok(None);
    };
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let mut it = line.split_ascii_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next()) else {
            continue;
        };
        let v: u64 = v.parse().map_err(|_| {
            Error::parse(fs.path(rel), i + 1, format!("{k}: {v:?} is not a number"))
        })?;
        out.insert(k.to_string(), v);
    }
    Ok(Some(out))
}

/// The CPU quota of group `d` (`cpu` controller); `None` without one.
pub fn cpu_max(fs: &Fs, d: &Dir) -> Result<Option<Quota>> {
    match d.version {
        Version::V2 => {
            let rel = d.file("cpu.max");
            let Some(text) = fs.read_opt(&rel)? else {
                return Ok(None);
            };
            let mut it = text.split_ascii_whitespace();
            let (q, p) = (it.next().unwrap_or(""), it.next().unwrap_or("100000"));
            if q == "max" {
                return Ok(None);
            }
            let bad = || {
                Error::parse(
                    fs.path(&rel),
                    1,
                    format!("not `QUOTA PERIOD`: {:?}", text.trim()),
                )
            };
            Ok(Some(Quota {
                quota_us: q.parse().map_err(|_| bad())?,
                period_us: p.parse().map_err(|_| bad())?,
            }))
        }
        Version::V1 => {
            let q = fs.read_opt(&d.file("cpu.cfs_quota_us"))?;
            let Some(q) = q.map(|t| t.trim().to_string()) else {
                return Ok(None);
            };
            if q.starts_with('-') {
                return Ok(None);
            }
            let quota_us = q.parse().map_err(|_| {
                Error::parse(
                    fs.path(&d.file("cpu.cfs_quota_us")),
                    1,
                    format!("not a number: {q:?}"),
                )
            })?;
            let period_us = number(fs, &d.file("cpu.cfs_period_us"))?.unwrap_or(100_000);
            Ok(Some(Quota {
                quota_us,
                period_us,
            }))
        }
    }
}

/// The nearest quota on the way from `d` to its hierarchy's root: a parent's quota binds its
/// children too. The smallest one found in cores, with the group that sets it.
pub fn effective_quota(fs: &Fs, d: &Dir) -> Result<Option<(Quota, Dir)>> {
    let mut best: Option<(Quota, Dir)> = None;
    for g in d.ancestry() {
        if let Some(q) = cpu_max(fs, &g)?
            && best.as_ref().is_none_or(|(b, _)| q.cores() < b.cores())
        {
            best = Some((q, g));
        }
    }
    Ok(best)
}

/// CPU use of a group: `cpu` is its group in the `cpu` hierarchy, `acct` in the `cpuacct` one
/// (the same directory on v2 and where the two are co-mounted).
pub fn cpu_stat(fs: &Fs, cpu: &Dir, acct: &Dir) -> Result<CpuStat> {
    let stat = key_values(fs, &cpu.file("cpu.stat"))?.unwrap_or_default();
    let get = |k: &str| stat.get(k).copied().unwrap_or(0);
    let mut s = CpuStat {
        periods: get("nr_periods"),
        throttled_periods: get("nr_throttled"),
        ..CpuStat::default()
    };
    match cpu.version {
        Version::V2 => {
            if !stat.contains_key("usage_usec") {
                return Err(Error::parse(
                    fs.path(&cpu.file("cpu.stat")),
                    1,
                    "no usage_usec line (is this a cgroup v2 group?)",
                ));
            }
            s.usage = Duration::from_micros(get("usage_usec"));
            s.throttled = Duration::from_micros(get("throttled_usec"));
        }
        Version::V1 => {
            let rel = acct.file("cpuacct.usage");
            let ns = number(fs, &rel)?.ok_or_else(|| Error::Io {
                path: fs.path(&rel),
                source: std::io::ErrorKind::NotFound.into(),
            })?;
            s.usage = Duration::from_nanos(ns);
            s.throttled = Duration::from_nanos(get("throttled_time"));
        }
    }
    Ok(s)
}

/// The cpuset of group `d`: its own files, or on v2 (where a group gets them only when its
/// parent enables the controller for it) those of its nearest ancestor that has them. `None`
/// where no group up to the root has them (cpuset not mounted).
pub fn cpuset(fs: &Fs, d: &Dir) -> Result<Option<Cpuset>> {
    let (cpus_f, eff_f, mems_f) = match d.version {
        Version::V2 => (
            "cpuset.cpus",
            "cpuset.cpus.effective",
            "cpuset.mems.effective",
        ),
        Version::V1 => (
            "cpuset.cpus",
            "cpuset.effective_cpus",
            "cpuset.effective_mems",
        ),
    };
    let set = |rel: String| -> Result<Option<CpuSet>> {
        match fs.read_opt(&rel)? {
            Some(t) => CpuSet::parse(&t)
                .map(Some)
                .map_err(|e| Error::parse(fs.path(&rel), 1, e.reason)),
            None => Ok(None),
        }
    };
    for g in d.ancestry() {
        let Some(effective) = set(g.file(eff_f))? else {
            // v1 kernels before 4.7 have no effective file: the asked-for CPUs are in force.
            if d.version == Version::V1
                && let Some(c) = set(g.file(cpus_f))?
            {
                let mems = set(g.file("cpuset.mems"))?.unwrap_or_default();
                return Ok(Some(Cpuset {
                    dir: g,
                    cpus: c.clone(),
                    effective_cpus: c,
                    effective_mems: mems,
                }));
            }
            continue;
        };
        let mut mems = set(g.file(mems_f))?;
        if mems.is_none() && d.version == Version::V1 {
            mems = set(g.file("cpuset.mems"))?;
        }
        return Ok(Some(Cpuset {
            cpus: set(g.file(cpus_f))?.unwrap_or_default(),
            effective_cpus: effective,
            effective_mems: mems.unwrap_or_default(),
            dir: g,
        }));
    }
    Ok(None)
}

/// Memory use of group `d`.
pub fn memory(fs: &Fs, d: &Dir) -> Result<MemoryUse> {
    let (cur_f, max_f) = match d.version {
        Version::V2 => ("memory.current", "memory.max"),
        Version::V1 => ("memory.usage_in_bytes", "memory.limit_in_bytes"),
    };
    let rel = d.file(cur_f);
    let current = number(fs, &rel)?.ok_or_else(|| Error::Io {
        path: fs.path(&rel),
        source: std::io::ErrorKind::NotFound.into(),
    })?;
    let limit = number(fs, &d.file(max_f))?.filter(|v| *v < NO_LIMIT);
    let stat = key_values(fs, &d.file("memory.stat"))?.unwrap_or_default();
    Ok(MemoryUse {
        current,
        limit,
        stat,
    })
}

/// The nearest memory limit on the way from `d` to the root, with the group that sets it.
pub fn effective_memory_limit(fs: &Fs, d: &Dir) -> Result<Option<(u64, Dir)>> {
    let file = match d.version {
        Version::V2 => "memory.max",
        Version::V1 => "memory.limit_in_bytes",
    };
    for g in d.ancestry() {
        if let Some(v) = number(fs, &g.file(file))?
            && v < NO_LIMIT
        {
            return Ok(Some((v, g)));
        }
    }
    Ok(None)
}

/// Pressure stalls of group `d` (v2 only: v1 groups have no pressure files).
pub fn pressure(fs: &Fs, d: &Dir) -> Result<GroupPressure> {
    if d.version == Version::V1 {
        return Ok(GroupPressure::default());
    }
    Ok(GroupPressure {
        cpu: crate::stat::read_pressure_at(fs, &d.file("cpu.pressure"))?,
        memory: crate::stat::read_pressure_at(fs, &d.file("memory.pressure"))?,
        io: crate::stat::read_pressure_at(fs, &d.file("io.pressure"))?,
    })
}

/// The effective cpuset of process `pid`'s cgroup; `None` where cpusets are not mounted. For
/// many processes at once, [`Cpusets`] reads less.
pub fn cpuset_of_pid(fs: &Fs, pid: i32) -> Result<Option<Cpuset>> {
    Cpusets::new(fs).of_pid(pid)
}

/// The cpusets of many processes read together (a scan's workloads): the hierarchies are
/// detected once and each group's cpuset files read once, where [`cpuset_of_pid`] detects and
/// walks them for every process (on a server with many processes in one group, most of the
/// daemon's `/sys/fs/cgroup` reads; docs/reliability.md). It remembers what it read: make a
/// new one for each pass, so that a group changed since is read again.
#[derive(Debug)]
pub struct Cpusets {
    fs: Fs,
    /// Detected at the first process asked about.
    hierarchies: Option<Hierarchies>,
    /// Each group's cpuset, by the group `/proc/PID/cgroup` names.
    groups: HashMap<Dir, Option<Cpuset>>,
    /// Each process's, by pid (a process asked about twice reads `/proc/PID/cgroup` once).
    pids: HashMap<i32, Option<Cpuset>>,
}

impl Cpusets {
    /// Nothing read yet, of `fs`.
    pub fn new(fs: &Fs) -> Cpusets {
        Cpusets {
            fs: fs.clone(),
            hierarchies: None,
            groups: HashMap::new(),
            pids: HashMap::new(),
        }
    }

    /// The mounted hierarchies (detected once).
    pub fn hierarchies(&mut self) -> &Hierarchies {
        self.hierarchies
            .get_or_insert_with(|| Hierarchies::detect(&self.fs))
    }

    /// The effective cpuset of process `pid`'s cgroup, as [`cpuset_of_pid`]. A failed reading
    /// (the process exited, a file would not parse) is not remembered.
    pub fn of_pid(&mut self, pid: i32) -> Result<Option<Cpuset>> {
        if let Some(c) = self.pids.get(&pid) {
            return Ok(c.clone());
        }
        let m = Membership::of_pid(&self.fs, pid)?;
        let c = self.of_membership(&m)?;
        self.pids.insert(pid, c.clone());
        Ok(c)
    }

    /// The effective cpuset of the group a process of membership `m` is in: for a caller that
    /// keeps processes' `/proc/PID/cgroup` readings across passes (they rarely move) while
    /// their groups' cpusets are read afresh each pass.
    pub fn of_membership(&mut self, m: &Membership) -> Result<Option<Cpuset>> {
        // On a hybrid machine cpuset is a v1 controller; where both trees could say, v1 wins
        // (`home` looks there first), the v2 tree's root files otherwise.
        Ok(match m.dir(self.hierarchies(), "cpuset") {
            Some(d) => match self.groups.get(&d) {
                Some(c) => c.clone(),
                None => {
                    let c = cpuset(&self.fs, &d)?;
                    self.groups.insert(d, c.clone());
                    c
                }
            },
            None => None,
        })
    }
}
