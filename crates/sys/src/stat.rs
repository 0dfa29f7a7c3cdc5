//! System-wide readings: `/proc/stat`, `/proc/meminfo`, `/proc/loadavg`, `/proc/pressure/*`,
//! and the transparent-huge-page settings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fs::{for_each_kv, parse_kb};
use crate::{Error, Fs, Result};

/// CPU time counters of one logical CPU (or of all, for the `cpu` line), in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTimes {
    /// Running user code (guest time included).
    pub user: u64,
    /// Running user code at a positive nice value.
    pub nice: u64,
    /// Running kernel code.
    pub system: u64,
    /// Idle.
    pub idle: u64,
    /// Idle with I/O outstanding.
    pub iowait: u64,
    /// Serving hardware interrupts.
    pub irq: u64,
    /// Serving software interrupts.
    pub softirq: u64,
    /// Wanting to run while the hypervisor ran someone else.
    pub steal: u64,
    /// Running a guest (also counted in `user`).
    pub guest: u64,
    /// Running a niced guest (also counted in `nice`).
    pub guest_nice: u64,
}

impl CpuTimes {
    /// Ticks spent in any state. Guest time is already counted in user time by the kernel.
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }
}

/// A reading of `/proc/stat`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelStat {
    /// The aggregate `cpu` line.
    pub total: CpuTimes,
    /// Per logical CPU, keyed by CPU number. Offline CPUs have no line.
    pub cpus: BTreeMap<u32, CpuTimes>,
    /// Context switches since boot (all CPUs).
    pub ctxt: u64,
    /// Boot time, seconds since the epoch.
    pub btime: u64,
    /// Forks since boot.
    pub processes: u64,
    /// Runnable tasks right now.
    pub procs_running: u64,
    /// Tasks blocked on I/O right now.
    pub procs_blocked: u64,
}

/// Reads and parses `/proc/stat`.
pub fn read_kernel_stat(fs: &Fs) -> Result<KernelStat> {
    let path = fs.path("proc/stat");
    let text = crate::fs::read_string(&path)?;
    parse_kernel_stat(&text, &path)
}

/// Parses the text of `/proc/stat`.
pub fn parse_kernel_stat(text: &str, path: &std::path::Path) -> Result<KernelStat> {
    let mut ks = KernelStat::default();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        let mut it = line.split_ascii_whitespace();
        let Some(key) = it.next() else { continue };
        if let Some(cpu) = key.strip_prefix("cpu") {
            let mut v = [0u64; 10];
            let mut n = 0;
            for (slot, tok) in v.iter_mut().zip(&mut it) {
                *slot = tok.parse().map_err(|_| {
                    Error::parse(path, lineno, format!("{key}: {tok:?} is not a number"))
                })?;
                n += 1;
            }
            if n < 4 {
                return Err(Error::parse(
                    path,
                    lineno,
                    format!("{key}: expected at least 4 counters, found {n}"),
                ));
            }
            let t = CpuTimes {
                user: v[0],
                nice: v[1],
                system: v[2],
                idle: v[3],
                iowait: v[4],
                irq: v[5],
                softirq: v[6],
                steal: v[7],
                guest: v[8],
                guest_nice: v[9],
            };
            if cpu.is_empty() {
                ks.total = t;
            } else {
                let id = cpu
                    .parse()
                    .map_err(|_| Error::parse(path, lineno, format!("{key:?} is not cpuN")))?;
                ks.cpus.insert(id, t);
            }
            continue;
        }
        let value = || -> Result<u64> {
            let tok = line.split_ascii_whitespace().nth(1).unwrap_or("");
            tok.parse()
                .map_err(|_| Error::parse(path, lineno, format!("{key}: {tok:?} is not a number")))
        };
        match key {
            "ctxt" => ks.ctxt = value()?,
            "btime" => ks.btime = value()?,
            "processes" => ks.processes = value()?,
            "procs_running" => ks.procs_running = value()?,
            "procs_blocked" => ks.procs_blocked = value()?,
            _ => {}
        }
    }
    Ok(ks)
}

/// `/proc/meminfo` as bytes per key (`MemTotal`, `AnonHugePages`, …).
pub fn read_meminfo(fs: &Fs) -> Result<BTreeMap<String, u64>> {
    let path = fs.path("proc/meminfo");
    let text = crate::fs::read_string(&path)?;
    let mut out = BTreeMap::new();
    let mut err = None;
    for_each_kv(&text, |line, k, v| match parse_kb(&path, line, k, v) {
        Ok(n) => {
            out.insert(k.to_string(), n);
        }
        Err(e) => {
            err.get_or_insert(e);
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Load averages from `/proc/loadavg`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadAvg {
    /// Over the last minute.
    pub one: f64,
    /// Over the last five minutes.
    pub five: f64,
    /// Over the last fifteen minutes.
    pub fifteen: f64,
}

/// Reads `/proc/loadavg`.
pub fn read_loadavg(fs: &Fs) -> Result<LoadAvg> {
    let path = fs.path("proc/loadavg");
    let text = crate::fs::read_string(&path)?;
    let v: Vec<f64> = text
        .split_ascii_whitespace()
        .take(3)
        .map(|t| t.parse::<f64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| {
            Error::parse(
                &path,
                1,
                format!("expected three load averages, got {:?}", text.trim()),
            )
        })?;
    if v.len() < 3 {
        return Err(Error::parse(&path, 1, "expected three load averages"));
    }
    Ok(LoadAvg {
        one: v[0],
        five: v[1],
        fifteen: v[2],
    })
}

/// One line (`some` or `full`) of a pressure-stall file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PressureLine {
    /// Share of time (percent) stalled over the last 10 s.
    pub avg10: f64,
    /// Share of time (percent) stalled over the last 60 s.
    pub avg60: f64,
    /// Share of time (percent) stalled over the last 300 s.
    pub avg300: f64,
    /// Total stall time in microseconds.
    pub total_us: u64,
}

/// A pressure-stall reading (`/proc/pressure/{cpu,memory,io}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Pressure {
    /// Time some tasks were stalled.
    pub some: PressureLine,
    /// Absent for CPU pressure on older kernels.
    pub full: Option<PressureLine>,
}

/// Reads `/proc/pressure/<resource>` (`cpu`, `memory` or `io`); `Ok(None)` on kernels without PSI.
pub fn read_pressure(fs: &Fs, resource: &str) -> Result<Option<Pressure>> {
    read_pressure_at(fs, &format!("proc/pressure/{resource}"))
}

/// Reads a pressure-stall file at `rel` (the system's, or a cgroup v2 group's `cpu.pressure`,
/// `memory.pressure`, `io.pressure`); `Ok(None)` where it is absent.
pub fn read_pressure_at(fs: &Fs, rel: &str) -> Result<Option<Pressure>> {
    let path = fs.path(rel);
    let Some(text) = fs.read_opt(rel)? else {
        return Ok(None);
    };
    let mut p = Pressure::default();
    let mut seen_some = false;
    for (i, line) in text.lines().enumerate() {
        let mut it = line.split_ascii_whitespace();
        let kind = it.next().unwrap_or("");
        let mut pl = PressureLine::default();
        for tok in it {
            let (k, v) = tok
                .split_once('=')
                .ok_or_else(|| Error::parse(&path, i + 1, format!("{tok:?} is not key=value")))?;
            let bad = || Error::parse(&path, i + 1, format!("{k}: {v:?} is not a number"));
            match k {
                "avg10" => pl.avg10 = v.parse().map_err(|_| bad())?,
                "avg60" => pl.avg60 = v.parse().map_err(|_| bad())?,
                "avg300" => pl.avg300 = v.parse().map_err(|_| bad())?,
                "total" => pl.total_us = v.parse().map_err(|_| bad())?,
                _ => {}
            }
        }
        match kind {
            "some" => {
                p.some = pl;
                seen_some = true;
            }
            "full" => p.full = Some(pl),
            "" => {}
            other => {
                return Err(Error::parse(
                    &path,
                    i + 1,
                    format!("unknown pressure line {other:?}"),
                ));
            }
        }
    }
    if !seen_some {
        return Err(Error::parse(&path, 1, "no \"some\" line"));
    }
    Ok(Some(p))
}

/// The transparent-huge-page settings (`/sys/kernel/mm/transparent_hugepage/*`): the selected
/// value of each (`[madvise]` → `madvise`); `None` where the file is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThpSettings {
    /// `enabled`: `always`, `madvise` or `never`.
    pub enabled: Option<String>,
    /// `defrag`: how hard a fault tries to get a huge page.
    pub defrag: Option<String>,
    /// `shmem_enabled`: huge pages for tmpfs/shared memory.
    pub shmem_enabled: Option<String>,
}

/// The bracketed choice of a sysfs selector file (`always [madvise] never` → `madvise`).
pub fn selected_choice(text: &str) -> Option<&str> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(&text[start + 1..end])
}

/// Reads the transparent-huge-page settings.
pub fn read_thp(fs: &Fs) -> Result<ThpSettings> {
    let get = |name: &str| -> Result<Option<String>> {
        let rel = format!("sys/kernel/mm/transparent_hugepage/{name}");
        Ok(fs
            .read_opt(&rel)?
            .map(|t| selected_choice(&t).unwrap_or(t.trim()).to_string()))
    };
    Ok(ThpSettings {
        enabled: get("enabled")?,
        defrag: get("defrag")?,
        shmem_enabled: get("shmem_enabled")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn kernel_stat_parses_cpus_and_counters() {
        let text = "cpu  10 1 20 300 4 5 6 7 0 0\ncpu0 5 0 10 150 2 2 3 3 0 0\ncpu2 5 1 10 150 2 3 3 4 0 0\nintr 1 2 3\nctxt 9876\nbtime 1700000000\nprocesses 42\nprocs_running 3\nprocs_blocked 1\n";
        let ks = parse_kernel_stat(text, Path::new("/proc/stat")).unwrap();
        assert_eq!(ks.total.user, 10);
        assert_eq!(ks.total.steal, 7);
        assert_eq!(ks.cpus.len(), 2);
        assert!(ks.cpus.contains_key(&2) && !ks.cpus.contains_key(&1));
        assert_eq!(ks.cpus[&2].irq, 3);
        assert_eq!(ks.ctxt, 9876);
        assert_eq!(ks.procs_running, 3);
        assert_eq!(ks.total.total(), 10 + 1 + 20 + 300 + 4 + 5 + 6 + 7);
    }

    #[test]
    fn kernel_stat_error_names_path_and_line() {
        let text = "cpu  1 2 3 4\ncpu0 1 x 3 4\n";
        let e = parse_kernel_stat(text, Path::new("/fixture/proc/stat")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("/fixture/proc/stat:2:"), "{msg}");
        assert!(msg.contains("\"x\""), "{msg}");
    }

    #[test]
    fn selected_choice_reads_brackets() {
        assert_eq!(selected_choice("always [madvise] never\n"), Some("madvise"));
        assert_eq!(
            selected_choice("always within_size advise [never] deny force"),
            Some("never")
        );
        assert_eq!(selected_choice("no brackets"), None);
    }
}
