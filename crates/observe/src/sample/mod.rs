//! Samples: one [`Sample`] is a timestamped reading of the whole machine's counters, taken by a
//! [`Sampler`]. This file holds the record types; the sampler itself is in `sampler.rs`.
//!
//! Cheap readings (`/proc/stat`, every process's `stat`/`status`/`io`, every thread's `stat`,
//! disks, interfaces, pressure) are taken on every sample. Expensive readings (`numa_maps` and
//! `smaps_rollup`, which walk page tables) are taken only for the top processes by CPU and only
//! every `expensive_every` samples; [`Sample::proc_memory`] holds them, for the processes they
//! were taken for.

use std::collections::BTreeMap;
use std::sync::Arc;

use perfpilot_sys::block::DiskStats;
use perfpilot_sys::net::NetDev;
use perfpilot_sys::process::{ProcIo, ShmAttach, SmapsRollup};
use perfpilot_sys::stat::{KernelStat, Pressure};
use perfpilot_sys::{CpuSet, Error};
use serde::{Deserialize, Serialize};

mod sampler;

pub use sampler::{SampleError, Sampler, SamplerConfig};

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

/// A process's thread readings, shared rather than copied: a sampler carries an idle
/// process's readings over from one sample to the next, and keeping them for the next sample
/// then costs a reference count instead of a copy of every thread's reading and name.
/// Reads as a slice of [`ThreadSample`]; built from a `Vec` or an iterator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Threads(Arc<[ThreadSample]>);

impl Threads {
    /// True when no thread was read (the sampler was not asked to, or a kernel thread).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::ops::Deref for Threads {
    type Target = [ThreadSample];

    fn deref(&self) -> &[ThreadSample] {
        &self.0
    }
}

impl From<Vec<ThreadSample>> for Threads {
    fn from(v: Vec<ThreadSample>) -> Self {
        Threads(v.into())
    }
}

impl FromIterator<ThreadSample> for Threads {
    fn from_iter<I: IntoIterator<Item = ThreadSample>>(iter: I) -> Self {
        Threads(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a Threads {
    type Item = &'a ThreadSample;
    type IntoIter = std::slice::Iter<'a, ThreadSample>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Serialize for Threads {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

impl<'de> Deserialize<'de> for Threads {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<ThreadSample>::deserialize(d).map(Threads::from)
    }
}

/// One process's counters (cheap readings).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// CPU ticks (user and system) of its children that exited and were reaped by it: what a
    /// server that forks a process per connection spent on the connections that ended.
    #[serde(default)]
    pub children_time: u64,
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
    #[serde(default, skip_serializing_if = "Threads::is_empty")]
    pub threads: Threads,
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

impl Sample {
    /// Ticks since boot at the time of the sample (from the wall clock and `btime`, so to
    /// within a second).
    pub fn uptime_ticks(&self) -> u64 {
        let now_s = self.time_ms as f64 / 1000.0;
        let up = (now_s - self.kernel.btime as f64).max(0.0);
        (up * self.ticks_per_sec as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn shared_thread_readings_are_stored_as_the_list_they_were() {
        let t = |tid| ThreadSample {
            tid,
            comm: format!("worker-{tid}"),
            state: 'S',
            utime: 7,
            stime: 1,
            processor: Some(3),
        };
        let p = ProcSample {
            pid: 5,
            threads: vec![t(5), t(6)].into(),
            ..ProcSample::default()
        };
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["threads"][1]["comm"], "worker-6");
        let back: ProcSample = serde_json::from_value(json).unwrap();
        assert_eq!(back, p);
        // A copy shares the readings; none read leaves the field out of the record.
        assert!(std::ptr::eq(p.clone().threads.as_ptr(), p.threads.as_ptr()));
        let none = serde_json::to_value(ProcSample::default()).unwrap();
        assert!(none.get("threads").is_none());
        let back: ProcSample = serde_json::from_value(none).unwrap();
        assert!(back.threads.is_empty());
    }

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
