//! The sampler: one [`Sample`] is a timestamped reading of the whole machine's counters.
//!
//! Cheap readings (`/proc/stat`, every process's `stat`/`status`/`io`, every thread's `stat`,
//! disks, interfaces, pressure) are taken on every sample. Expensive readings (`numa_maps` and
//! `smaps_rollup`, which walk page tables) are taken only for the top processes by CPU and only
//! every `expensive_every` samples; [`Sample::proc_memory`] holds them, for the processes they
//! were taken for.

use std::collections::{BTreeMap, HashMap};

use perfpilot_sys::block::{self, DiskStats};
use perfpilot_sys::net::{self, NetDev};
use perfpilot_sys::node;
use perfpilot_sys::perf::{Counter, Event, Target};
use perfpilot_sys::process::{MappingKind, ProcIo, ProcReader, ShmAttach, SmapsRollup};
use perfpilot_sys::stat::{self, KernelStat, Pressure};
use perfpilot_sys::{CpuSet, Error, Fs};
use serde::{Deserialize, Serialize};

/// One thread's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSample {
    /// The thread id.
    pub tid: i32,
    /// The thread's name.
    pub comm: String,
    /// Its scheduling state (`R`, `S`, `D`, …).
    pub state: char,
    /// User CPU time in clock ticks.
    pub utime: u64,
    /// System CPU time in clock ticks.
    pub stime: u64,
    /// The CPU it last ran on.
    pub processor: Option<u32>,
}

/// One process's counters (cheap readings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcSample {
    /// The process id.
    pub pid: i32,
    /// Start time in ticks after boot: with the pid, identifies the process across samples.
    pub starttime: u64,
    /// The parent's process id.
    pub ppid: i32,
    /// The real user id.
    pub uid: u32,
    /// The command name.
    pub comm: String,
    /// The command line joined with spaces (empty for kernel threads).
    pub cmdline: String,
    /// Its scheduling state (`R`, `S`, `D`, …).
    pub state: char,
    /// User CPU time in clock ticks, all threads (live and exited).
    pub utime: u64,
    /// System CPU time in clock ticks, all threads (live and exited).
    pub stime: u64,
    /// Minor page faults.
    pub minflt: u64,
    /// Major page faults (read from storage).
    pub majflt: u64,
    /// Threads in the process.
    pub num_threads: u32,
    /// Resident memory in bytes.
    pub rss: u64,
    /// The CPU it last ran on.
    pub processor: Option<u32>,
    /// Context switches where it gave up the CPU.
    pub ctxt_voluntary: u64,
    /// Context switches where it was preempted.
    pub ctxt_involuntary: u64,
    /// The CPUs it may run on.
    pub cpus_allowed: Option<CpuSet>,
    /// `None` where `/proc/<pid>/io` is not readable.
    pub io: Option<ProcIo>,
    /// True for a kernel thread (no memory map).
    pub kernel_thread: bool,
    /// Filled when the sampler reads threads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadSample>,
}

/// The expensive memory readings of one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcMemory {
    /// The process id.
    pub pid: i32,
    /// Its start time in ticks after boot (with the pid, its identity).
    pub starttime: u64,
    /// Resident bytes per NUMA node (from `numa_maps`).
    pub per_node: BTreeMap<u32, u64>,
    /// Resident private anonymous bytes per node.
    pub anon_per_node: BTreeMap<u32, u64>,
    /// Resident shared-memory bytes per node.
    pub shm_per_node: BTreeMap<u32, u64>,
    /// Its `smaps_rollup`: resident memory and huge-page coverage.
    pub rollup: SmapsRollup,
    /// The shared-memory segments it maps.
    pub shm: Vec<ShmAttach>,
}

impl ProcMemory {
    /// Share of anonymous memory mapped by huge pages (0..=1).
    pub fn anon_huge_coverage(&self) -> f64 {
        if self.rollup.anonymous == 0 {
            0.0
        } else {
            self.rollup.anon_huge as f64 / self.rollup.anonymous as f64
        }
    }
}

/// Memory of one NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMemory {
    /// The node number.
    pub node: u32,
    /// Memory of the node in bytes.
    pub total: u64,
    /// Free memory of the node in bytes.
    pub free: u64,
}

/// System-wide memory readings, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemMemory {
    /// `MemTotal`.
    pub total: u64,
    /// `MemAvailable`: what can be allocated without swapping.
    pub available: u64,
    /// `AnonHugePages`: anonymous memory in transparent huge pages.
    pub anon_huge: u64,
    /// `ShmemPmdMapped`: shared memory mapped by huge pages.
    pub shmem_pmd_mapped: u64,
    /// Per NUMA node.
    pub nodes: Vec<NodeMemory>,
}

/// Pressure-stall readings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PressureSample {
    /// CPU pressure; `None` on kernels without PSI.
    pub cpu: Option<Pressure>,
    /// Memory pressure; `None` on kernels without PSI.
    pub memory: Option<Pressure>,
    /// I/O pressure; `None` on kernels without PSI.
    pub io: Option<Pressure>,
}

/// How many readings a sample skipped, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skips {
    /// Processes or threads that exited while they were read (normal).
    pub vanished: u32,
    /// Files the kernel would not let us read.
    pub permission: u32,
    /// Files whose content did not parse.
    pub malformed: u32,
    /// Other read errors.
    pub other: u32,
    /// The first few messages, for the log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
}

impl Skips {
    fn count(&mut self, e: &Error) {
        if e.is_vanished() {
            self.vanished += 1;
            return;
        }
        if e.is_permission() {
            self.permission += 1;
        } else if matches!(e, Error::Parse { .. }) {
            self.malformed += 1;
        } else {
            self.other += 1;
        }
        if self.messages.len() < 5 {
            self.messages.push(e.to_string());
        }
    }

    /// True when nothing but vanished processes was skipped.
    pub fn is_clean(&self) -> bool {
        self.permission == 0 && self.malformed == 0 && self.other == 0
    }
}

/// One timestamped reading of the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// Monotonic clock, nanoseconds (for intervals).
    pub mono_ns: u64,
    /// Clock ticks per second of the CPU-time counters.
    pub ticks_per_sec: u64,
    /// `/proc/stat`: CPU times, context switches, boot time.
    pub kernel: KernelStat,
    /// Context switches per CPU since the sampler started (perf software counters), where
    /// permitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ctxt: Option<BTreeMap<u32, u64>>,
    /// System-wide memory.
    pub memory: SystemMemory,
    /// Pressure-stall readings.
    pub pressure: PressureSample,
    /// Every process read (cheap readings).
    pub processes: Vec<ProcSample>,
    /// Expensive readings, for the processes they were taken for in this sample.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proc_memory: Vec<ProcMemory>,
    /// Block device counters.
    pub disks: Vec<DiskStats>,
    /// Network interface counters.
    pub nets: Vec<NetDev>,
    /// What was skipped, and why.
    pub skips: Skips,
}

/// What the sampler reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplerConfig {
    /// Read every thread's counters.
    pub threads: bool,
    /// Restrict process readings to these pids (and always take their expensive readings).
    pub pids: Option<Vec<i32>>,
    /// Number of processes (top by CPU) whose expensive readings are taken.
    pub expensive_top: usize,
    /// Take expensive readings every N-th sample (1 = every sample, 0 = never).
    pub expensive_every: u32,
    /// Count context switches per CPU with perf software counters (needs root).
    pub per_cpu_ctxt: bool,
    /// For a process that used no CPU tick and started no thread since the previous sample,
    /// carry over its `status`, `io` and thread readings instead of reading them again (its
    /// `stat` is always read). Saves most of a sample's cost on a mostly idle population.
    pub reuse_idle: bool,
    /// Read an idle process in full every N-th sample anyway (at a phase set by its pid, so
    /// the full reads spread over the samples): carried-over readings (context switches,
    /// affinity, I/O counters) are never older than N intervals.
    pub idle_refresh_every: u32,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            threads: true,
            pids: None,
            expensive_top: 5,
            expensive_every: 5,
            per_cpu_ctxt: true,
            reuse_idle: true,
            idle_refresh_every: 6,
        }
    }
}

/// A sample that could not be taken at all.
#[derive(Debug, thiserror::Error)]
#[error("cannot take a sample: {0}")]
pub struct SampleError(#[from] pub Error);

/// Takes samples.
pub struct Sampler {
    fs: Fs,
    reader: ProcReader,
    cfg: SamplerConfig,
    cmdlines: HashMap<(i32, u64), String>,
    prev_ticks: HashMap<(i32, u64), u64>,
    /// Per process: its previous reading (carried over while it stays idle).
    prev_full: HashMap<(i32, u64), ProcSample>,
    cpu_counters: Vec<(u32, Counter)>,
    /// Why per-CPU context switches are not available, if they are not.
    pub cpu_ctxt_unavailable: Option<String>,
    taken: u64,
}

use perfpilot_sys::clock::mono_ns;

impl Sampler {
    /// A sampler of `fs`. Per-CPU counters are opened only on the live system.
    pub fn new(fs: &Fs, cfg: SamplerConfig) -> Sampler {
        let mut s = Sampler {
            fs: fs.clone(),
            reader: ProcReader::new(fs),
            cfg,
            cmdlines: HashMap::new(),
            prev_ticks: HashMap::new(),
            prev_full: HashMap::new(),
            cpu_counters: Vec::new(),
            cpu_ctxt_unavailable: None,
            taken: 0,
        };
        if !s.cfg.per_cpu_ctxt {
            s.cpu_ctxt_unavailable = Some("per-CPU context switches not requested".into());
        } else if !fs.is_live() {
            s.cpu_ctxt_unavailable = Some("per-CPU context switches need the live system".into());
        } else {
            s.open_cpu_counters();
        }
        s
    }

    fn open_cpu_counters(&mut self) {
        let online = match node::read_cpu_masks(&self.fs) {
            Ok(m) => m.online,
            Err(e) => {
                self.cpu_ctxt_unavailable = Some(e.to_string());
                return;
            }
        };
        for cpu in online.iter() {
            match Counter::open(Event::ContextSwitches, Target::Cpu(cpu)) {
                Ok(c) => self.cpu_counters.push((cpu, c)),
                Err(e) => {
                    self.cpu_counters.clear();
                    self.cpu_ctxt_unavailable =
                        Some(format!("per-CPU context switches unavailable: {e}"));
                    return;
                }
            }
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Takes one sample. Only an unreadable `/proc/stat` fails it; everything else is skipped
    /// and counted in [`Sample::skips`].
    pub fn sample(&mut self) -> Result<Sample, SampleError> {
        let time_ms = perfpilot_sys::clock::now_ms();
        let mono = mono_ns();
        let kernel = stat::read_kernel_stat(&self.fs)?;
        let mut skips = Skips::default();
        let cpu_ctxt = if self.cpu_counters.is_empty() {
            None
        } else {
            let mut m = BTreeMap::new();
            for (cpu, c) in &self.cpu_counters {
                match c.read() {
                    Ok(r) => {
                        m.insert(*cpu, r.value);
                    }
                    Err(e) => skips.count(&e),
                }
            }
            Some(m)
        };
        let memory = self.system_memory(&mut skips);
        let pressure = PressureSample {
            cpu: self
                .opt(stat::read_pressure(&self.fs, "cpu"), &mut skips)
                .flatten(),
            memory: self
                .opt(stat::read_pressure(&self.fs, "memory"), &mut skips)
                .flatten(),
            io: self
                .opt(stat::read_pressure(&self.fs, "io"), &mut skips)
                .flatten(),
        };
        let processes = self.processes(&mut skips)?;
        let proc_memory = if self.expensive_due() {
            self.expensive(&processes, &mut skips)
        } else {
            Vec::new()
        };
        // Remember CPU ticks to rank the next sample's expensive readings.
        self.prev_ticks = processes
            .iter()
            .map(|p| ((p.pid, p.starttime), p.utime + p.stime))
            .collect();

        let disks = match (
            block::read_diskstats(&self.fs),
            block::block_devices(&self.fs),
        ) {
            (Ok(d), Ok(whole)) => d.into_iter().filter(|d| whole.contains(&d.name)).collect(),
            (Err(e), _) | (_, Err(e)) => {
                skips.count(&e);
                Vec::new()
            }
        };
        let nets = self
            .opt(net::read_net_dev(&self.fs), &mut skips)
            .unwrap_or_default();
        self.taken += 1;
        Ok(Sample {
            time_ms,
            mono_ns: mono,
            ticks_per_sec: perfpilot_sys::clock_ticks_per_sec(),
            kernel,
            cpu_ctxt,
            memory,
            pressure,
            processes,
            proc_memory,
            disks,
            nets,
            skips,
        })
    }

    fn opt<T>(&self, r: perfpilot_sys::Result<T>, skips: &mut Skips) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                skips.count(&e);
                None
            }
        }
    }

    fn expensive_due(&self) -> bool {
        self.cfg.expensive_every > 0
            && self
                .taken
                .is_multiple_of(u64::from(self.cfg.expensive_every))
    }

    fn system_memory(&self, skips: &mut Skips) -> SystemMemory {
        let mut m = SystemMemory::default();
        if let Some(mi) = self.opt(stat::read_meminfo(&self.fs), skips) {
            let g = |k: &str| mi.get(k).copied().unwrap_or(0);
            m.total = g("MemTotal");
            m.available = g("MemAvailable");
            m.anon_huge = g("AnonHugePages");
            m.shmem_pmd_mapped = g("ShmemPmdMapped");
        }
        if let Some(nodes) = self.opt(node::read_nodes(&self.fs), skips) {
            m.nodes = nodes
                .iter()
                .map(|n| NodeMemory {
                    node: n.id,
                    total: n.mem_total,
                    free: n.mem_free,
                })
                .collect();
        }
        m
    }

    fn processes(&mut self, skips: &mut Skips) -> Result<Vec<ProcSample>, SampleError> {
        let pids = match &self.cfg.pids {
            Some(p) => p.clone(),
            None => self.reader.pids()?,
        };
        let page = perfpilot_sys::page_size();
        let mut out = Vec::with_capacity(pids.len());
        let mut full = HashMap::with_capacity(if self.cfg.reuse_idle { pids.len() } else { 0 });
        for pid in pids {
            match self.process(pid, page, skips) {
                Ok(p) => {
                    if self.cfg.reuse_idle {
                        full.insert((p.pid, p.starttime), p.clone());
                    }
                    out.push(p);
                }
                Err(e) => skips.count(&e),
            }
        }
        self.prev_full = full;
        // Forget the command lines of processes that are gone.
        if self.cmdlines.len() > out.len() * 2 + 64 {
            let live: std::collections::HashSet<_> =
                out.iter().map(|p| (p.pid, p.starttime)).collect();
            self.cmdlines.retain(|k, _| live.contains(k));
        }
        Ok(out)
    }

    /// Reads one process (or carries over the previous reading of an idle one).
    fn process(
        &mut self,
        pid: i32,
        page: u64,
        skips: &mut Skips,
    ) -> perfpilot_sys::Result<ProcSample> {
        let st = self.reader.stat(pid)?;
        let key = (pid, st.starttime);
        // Each idle process is read in full once every `idle_refresh_every` samples, at a phase
        // set by its pid, so the full reads spread evenly over the samples.
        let every = u64::from(self.cfg.idle_refresh_every.max(1));
        let due = self.taken % every == pid.unsigned_abs() as u64 % every;
        if !due
            && let Some(prev) = self.prev_full.get(&key).filter(|_| self.cfg.reuse_idle)
            && prev.utime + prev.stime == st.utime + st.stime
            && prev.num_threads == st.num_threads
        {
            let mut p = prev.clone();
            p.state = st.state;
            p.minflt = st.minflt;
            p.majflt = st.majflt;
            p.rss = st.rss_pages * page;
            p.processor = st.processor;
            return Ok(p);
        }
        let status = self.reader.status(pid)?;
        let cmdline = match self.cmdlines.get(&key) {
            Some(c) => c.clone(),
            None => {
                let c = self.reader.cmdline(pid)?.join(" ");
                self.cmdlines.insert(key, c.clone());
                c
            }
        };
        let io = match self.reader.io(pid) {
            Ok(io) => Some(io),
            Err(e) if e.is_vanished() => return Err(e),
            Err(e) if e.is_permission() => None,
            Err(e) => {
                skips.count(&e);
                None
            }
        };
        let mut threads = Vec::new();
        if self.cfg.threads && !status.kernel_thread {
            self.reader.task_stats(pid, |r| match r {
                Ok(t) => threads.push(ThreadSample {
                    tid: t.pid,
                    comm: t.comm,
                    state: t.state,
                    utime: t.utime,
                    stime: t.stime,
                    processor: t.processor,
                }),
                Err(e) => skips.count(&e),
            })?;
        }
        let p = ProcSample {
            pid,
            starttime: st.starttime,
            ppid: st.ppid,
            uid: status.uid,
            comm: st.comm,
            cmdline,
            state: st.state,
            utime: st.utime,
            stime: st.stime,
            minflt: st.minflt,
            majflt: st.majflt,
            num_threads: st.num_threads,
            rss: st.rss_pages * page,
            processor: st.processor,
            ctxt_voluntary: status.voluntary_ctxt_switches,
            ctxt_involuntary: status.nonvoluntary_ctxt_switches,
            cpus_allowed: status.cpus_allowed,
            io,
            kernel_thread: status.kernel_thread,
            threads,
        };
        Ok(p)
    }

    /// Chooses the processes for expensive readings: the requested pids, else the top by CPU
    /// since the previous sample (by resident memory on the first sample).
    fn expensive(&mut self, procs: &[ProcSample], skips: &mut Skips) -> Vec<ProcMemory> {
        let mut chosen: Vec<&ProcSample> = procs.iter().filter(|p| !p.kernel_thread).collect();
        if self.cfg.pids.is_none() {
            let score = |p: &ProcSample| -> (u64, u64) {
                let now = p.utime + p.stime;
                let prev = self.prev_ticks.get(&(p.pid, p.starttime)).copied();
                (prev.map(|v| now.saturating_sub(v)).unwrap_or(0), p.rss)
            };
            chosen.sort_by_key(|p| std::cmp::Reverse(score(p)));
            chosen.truncate(self.cfg.expensive_top);
        }
        let mut out = Vec::new();
        for p in chosen {
            match self.memory_of(p.pid, p.starttime) {
                Ok(m) => out.push(m),
                Err(e) => skips.count(&e),
            }
        }
        out
    }

    /// Takes the expensive readings of one process now.
    pub fn memory_of(&mut self, pid: i32, starttime: u64) -> perfpilot_sys::Result<ProcMemory> {
        let ranges = self.reader.numa_maps(pid)?;
        let rollup = self.reader.smaps_rollup(pid)?;
        let shm = self.reader.shm_attachments(pid)?;
        let mut m = ProcMemory {
            pid,
            starttime,
            per_node: BTreeMap::new(),
            anon_per_node: BTreeMap::new(),
            shm_per_node: BTreeMap::new(),
            rollup,
            shm,
        };
        for r in &ranges {
            for (node, bytes) in r.bytes_per_node() {
                *m.per_node.entry(node).or_default() += bytes;
                match r.kind {
                    MappingKind::Anon => *m.anon_per_node.entry(node).or_default() += bytes,
                    MappingKind::SysvShm { .. } | MappingKind::PosixShm { .. } => {
                        *m.shm_per_node.entry(node).or_default() += bytes
                    }
                    MappingKind::File { .. } => {}
                }
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn skips_are_sorted_by_cause() {
        let mut s = Skips::default();
        s.count(&Error::Vanished {
            path: PathBuf::from("/proc/1/stat"),
        });
        assert!(s.is_clean());
        s.count(&Error::Io {
            path: PathBuf::from("/proc/1/numa_maps"),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
        s.count(&Error::Parse {
            path: PathBuf::from("/proc/2/stat"),
            line: 1,
            msg: "bad".into(),
        });
        assert_eq!(
            (s.vanished, s.permission, s.malformed, s.other),
            (1, 1, 1, 0)
        );
        assert!(!s.is_clean());
        assert_eq!(s.messages.len(), 2);
        assert!(s.messages[0].contains("/proc/1/numa_maps"));
    }
}
