//! A live report of the machine, frame by frame: the rates since the previous sample, the top
//! processes by CPU with where they last ran, their latest memory reading and their hardware
//! counter rates, and their threads. `perfpilot observe` paces the frames and prints them.

use std::collections::BTreeMap;
use std::time::Duration;

use perfpilot_sys::Fs;
use perfpilot_sys::perf::{self, Event};
use serde::Serialize;

use crate::pmu::PmuSet;
use crate::rates::{
    CpuRate, DeltaError, DiskRate, MemoryBook, NetRate, ProcRate, Rates, ThreadRate,
};
use crate::sample::{
    PressureSample, ProcMemory, Sample, SampleError, Sampler, SamplerConfig, Skips, SystemMemory,
};
use crate::topology::{Topology, TopologyError};

/// What a [`Watch`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchConfig {
    /// Time between frames; the caller paces them, this only goes into the notes.
    pub interval: Duration,
    /// Processes per frame, the top ones by CPU.
    pub top: usize,
    /// Report the threads of the shown processes.
    pub threads: bool,
    /// Only these processes (empty: all); their memory placement is read on every frame.
    pub pids: Vec<i32>,
    /// Processes (top by CPU) whose memory placement is read (numa_maps, smaps_rollup).
    pub memory_top: usize,
    /// Read the memory placement every N-th frame (when no pids are given).
    pub memory_every: u32,
}

/// Why a [`Watch`] could not start or produce a frame.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The topology could not be read.
    #[error("reading the topology")]
    Topology(#[source] TopologyError),
    /// A sample could not be taken.
    #[error(transparent)]
    Sample(#[from] SampleError),
    /// Two samples could not be compared (a reboot or a clock going back between them).
    #[error(transparent)]
    Rates(#[from] DeltaError),
    /// None of the given processes exists.
    #[error("none of the processes {0:?} exists")]
    NoProcess(Vec<i32>),
}

/// One report: the machine's rates over the interval and the shown processes and threads.
#[derive(Debug, Clone, Serialize)]
pub struct Frame {
    /// End of the interval, milliseconds since the epoch (left to the caller to print in
    /// its own format).
    #[serde(skip)]
    pub time_ms: i64,
    /// Length of the interval, seconds.
    pub interval_s: f64,
    /// All CPUs together.
    pub total: CpuRate,
    /// Each online CPU.
    pub cpus: Vec<CpuRate>,
    /// The shown processes, busiest first.
    pub processes: Vec<ProcView>,
    /// Threads of the shown processes, by pid and then busiest first (when asked for).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadRate>,
    /// Block devices.
    pub disks: Vec<DiskRate>,
    /// Network interfaces.
    pub nets: Vec<NetRate>,
    /// Pressure-stall readings at the end of the interval.
    pub pressure: PressureSample,
    /// What the latest sample skipped.
    pub skips: Skips,
    /// System memory at the end of the interval.
    #[serde(skip)]
    pub memory: SystemMemory,
}

/// One shown process.
#[derive(Debug, Clone, Serialize)]
pub struct ProcView {
    /// Its rates over the interval.
    #[serde(flatten)]
    pub rate: ProcRate,
    /// NUMA node of the CPU it last ran on.
    pub last_cpu_node: Option<u32>,
    /// LLC domain of the CPU it last ran on.
    pub last_cpu_llc: Option<u32>,
    /// The latest memory placement reading.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<ProcMemory>,
    /// How old that reading is, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_age_s: Option<f64>,
    /// Hardware counter rates per second, where the machine has a PMU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pmu: Option<BTreeMap<Event, f64>>,
}

impl ProcView {
    /// Cycles per instruction over the interval: `None` without counters, NaN when no
    /// instruction was counted.
    pub fn cpi(&self) -> Option<f64> {
        let pmu = self.pmu.as_ref()?;
        let g = |e: Event| pmu.get(&e).copied().unwrap_or(0.0);
        Some(if g(Event::Instructions) > 0.0 {
            g(Event::Cycles) / g(Event::Instructions)
        } else {
            f64::NAN
        })
    }
}

/// A running report: holds the previous sample, the memory readings and the counters.
pub struct Watch {
    cfg: WatchConfig,
    topology: Topology,
    sampler: Sampler,
    pmu: Option<PmuSet>,
    pmu_prev: BTreeMap<i32, BTreeMap<Event, u64>>,
    book: MemoryBook,
    prev: Sample,
    notes: Vec<String>,
}

impl Watch {
    /// Reads the topology and takes the first sample. Fails when none of `cfg.pids` exists.
    pub fn start(fs: &Fs, cfg: WatchConfig) -> Result<Watch, WatchError> {
        let topology = Topology::read(fs).map_err(WatchError::Topology)?;
        let pmu_supported = perf::hardware_support();
        let sampler_cfg = SamplerConfig {
            // PMU counters follow threads, so they need the thread readings.
            threads: cfg.threads || pmu_supported.is_ok(),
            pids: (!cfg.pids.is_empty()).then(|| cfg.pids.clone()),
            expensive_top: cfg.memory_top,
            expensive_every: if cfg.pids.is_empty() {
                cfg.memory_every
            } else {
                1
            },
            ..SamplerConfig::default()
        };
        let mut sampler = Sampler::new(fs, sampler_cfg);
        let mut notes = notes(&cfg, &sampler, &pmu_supported);
        if let Some(gap) = &topology.memory_gap {
            notes.push(format!("memory: {}", gap.describe(perfpilot_units::bytes)));
        }
        let pmu = pmu_supported.is_ok().then(|| PmuSet::new(&Event::HARDWARE));
        let mut book = MemoryBook::default();
        let prev = sampler.sample()?;
        book.update(&prev);
        if !cfg.pids.is_empty() && prev.processes.is_empty() {
            return Err(WatchError::NoProcess(cfg.pids));
        }
        Ok(Watch {
            cfg,
            topology,
            sampler,
            pmu,
            pmu_prev: BTreeMap::new(),
            book,
            prev,
            notes,
        })
    }

    /// The machine's topology, read at the start.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// What is not measured, and how often the expensive readings are taken: say it once.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Takes a sample and reports the interval since the previous one.
    pub fn next_frame(&mut self) -> Result<Frame, WatchError> {
        let cur = self.sampler.sample()?;
        self.book.update(&cur);
        let rates = Rates::between(&self.prev, &cur)?;
        let Rates {
            time_ms,
            interval_s,
            total,
            cpus,
            mut processes,
            threads,
            disks,
            nets,
            ..
        } = rates;
        processes.sort_by(|x, y| y.cpu.total_cmp(&x.cpu));
        processes.truncate(self.cfg.top);
        let mut pmu_rates = self.pmu_rates(&cur, &processes, interval_s);
        let threads: Vec<ThreadRate> = if self.cfg.threads {
            let mut t: Vec<ThreadRate> = threads
                .into_iter()
                .filter(|t| processes.iter().any(|p| p.pid == t.pid))
                .collect();
            t.sort_by(|x, y| x.pid.cmp(&y.pid).then(y.cpu.total_cmp(&x.cpu)));
            t
        } else {
            Vec::new()
        };
        let views = processes
            .into_iter()
            .map(|p| {
                let starttime = cur
                    .processes
                    .iter()
                    .find(|q| q.pid == p.pid)
                    .map(|q| q.starttime)
                    .unwrap_or(0);
                let mem = self.book.get(p.pid, starttime);
                let loc = p.processor.and_then(|c| self.topology.locate(c));
                ProcView {
                    last_cpu_node: loc.map(|l| l.node),
                    last_cpu_llc: loc.map(|l| l.llc),
                    memory: mem.map(|(_, m)| m.clone()),
                    memory_age_s: mem.map(|(t, _)| (cur.time_ms - t) as f64 / 1e3),
                    pmu: pmu_rates.remove(&p.pid),
                    rate: p,
                }
            })
            .collect();
        let frame = Frame {
            time_ms,
            interval_s,
            total,
            cpus,
            processes: views,
            threads,
            disks,
            nets,
            pressure: cur.pressure.clone(),
            skips: cur.skips.clone(),
            memory: cur.memory.clone(),
        };
        self.prev = cur;
        Ok(frame)
    }

    /// Counter rates per second of the shown processes; the counters follow the shown set.
    fn pmu_rates(
        &mut self,
        cur: &Sample,
        shown: &[ProcRate],
        interval_s: f64,
    ) -> BTreeMap<i32, BTreeMap<Event, f64>> {
        let mut out = BTreeMap::new();
        let Some(set) = self.pmu.as_mut() else {
            return out;
        };
        let pids: Vec<i32> = shown.iter().map(|p| p.pid).collect();
        set.retain(&pids);
        for p in cur.processes.iter().filter(|p| pids.contains(&p.pid)) {
            let tids: Vec<i32> = p.threads.iter().map(|t| t.tid).collect();
            set.track(p.pid, p.starttime, &tids);
            let Some(now) = set.read(p.pid) else {
                continue;
            };
            if let Some(before) = self.pmu_prev.get(&p.pid) {
                let r = now
                    .iter()
                    .map(|(e, v)| {
                        let delta = v.saturating_sub(before.get(e).copied().unwrap_or(0));
                        (*e, delta as f64 / interval_s)
                    })
                    .collect();
                out.insert(p.pid, r);
            }
            self.pmu_prev.insert(p.pid, now);
        }
        out
    }
}

/// The notes of a report: PMU support, per-CPU context switches, memory reading rate.
fn notes(cfg: &WatchConfig, sampler: &Sampler, pmu_supported: &Result<(), String>) -> Vec<String> {
    let mut notes = Vec::new();
    match pmu_supported {
        Ok(()) => notes.push(
            "PMU counters: cycles, instructions, LLC and dTLB misses per shown process".to_string(),
        ),
        Err(reason) => notes.push(format!("PMU counters: not supported ({reason})")),
    }
    if let Some(why) = &sampler.cpu_ctxt_unavailable {
        notes.push(format!(
            "per-CPU context switches: {why}; the machine-wide rate is shown"
        ));
    }
    let every_s = cfg.interval.as_secs_f64() * f64::from(sampler.config().expensive_every.max(1));
    notes.push(if cfg.pids.is_empty() {
        format!(
            "memory placement and huge pages (numa_maps, smaps_rollup) are read for the top {} processes every {} reports ({every_s:.0} s): they walk page tables",
            cfg.memory_top, cfg.memory_every
        )
    } else {
        "memory placement and huge pages are read for the given processes on every report"
            .to_string()
    });
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(pmu: Option<BTreeMap<Event, f64>>) -> ProcView {
        ProcView {
            rate: ProcRate {
                time_ms: 1,
                pid: 7,
                comm: "x".into(),
                cmdline: "x".into(),
                uid: 0,
                cpu: 50.0,
                user: 40.0,
                system: 10.0,
                processor: Some(1),
                threads: 1,
                rss: 4096,
                minflt_per_s: 0.0,
                majflt_per_s: 0.0,
                ctxt_per_s: 0.0,
                read_bytes_per_s: None,
                write_bytes_per_s: None,
                syscalls_per_s: None,
                cpus_allowed: None,
                reaped_cpu: 0.0,
            },
            last_cpu_node: Some(0),
            last_cpu_llc: Some(0),
            memory: None,
            memory_age_s: None,
            pmu,
        }
    }

    #[test]
    fn a_shown_process_serializes_flat_without_the_readings_it_lacks() {
        let v = serde_json::to_value(view(None)).unwrap();
        assert_eq!(v["pid"], 7);
        assert_eq!(v["last_cpu_node"], 0);
        assert!(v.get("memory").is_none() && v.get("pmu").is_none());
    }

    #[test]
    fn cycles_per_instruction_come_from_the_counter_rates() {
        assert_eq!(view(None).cpi(), None);
        let pmu = BTreeMap::from([(Event::Cycles, 3e9), (Event::Instructions, 2e9)]);
        assert_eq!(view(Some(pmu)).cpi(), Some(1.5));
        let idle = BTreeMap::from([(Event::Cycles, 1e6)]);
        assert!(view(Some(idle)).cpi().is_some_and(f64::is_nan));
    }
}
