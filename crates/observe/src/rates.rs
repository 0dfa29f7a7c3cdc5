//! Rates between two samples: per-CPU busy split, per-process and per-thread CPU, disk and
//! network throughput. Every row is a flat record, ready for a table, JSON or CSV.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::sample::{ProcMemory, ProcSample, Sample};

/// Per-CPU (or machine-wide, `cpu = None`) utilisation in percent of that CPU's time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuRate {
    /// Time of the later sample, ms since the Unix epoch.
    pub time_ms: i64,
    /// `None` for the machine-wide row.
    pub cpu: Option<u32>,
    /// Busy: user, system, interrupts and steal.
    pub busy: f64,
    /// User time including nice.
    pub user: f64,
    /// Kernel time.
    pub system: f64,
    /// Hard and soft interrupts.
    pub irq: f64,
    /// Time the hypervisor gave to someone else.
    pub steal: f64,
    /// Idle with I/O outstanding.
    pub iowait: f64,
    /// Idle.
    pub idle: f64,
    /// Context switches per second (per CPU only where perf counters were available).
    pub ctxt_per_s: Option<f64>,
}

/// A process's rates. CPU is in percent of one CPU (200 = two CPUs busy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcRate {
    /// Time of the later sample, ms since the Unix epoch.
    pub time_ms: i64,
    /// The process id.
    pub pid: i32,
    /// The command name.
    pub comm: String,
    /// The command line, joined with spaces.
    pub cmdline: String,
    /// The real user id.
    pub uid: u32,
    /// CPU, user and system.
    pub cpu: f64,
    /// User CPU.
    pub user: f64,
    /// System CPU.
    pub system: f64,
    /// The CPU it last ran on.
    pub processor: Option<u32>,
    /// Threads in the later sample.
    pub threads: u32,
    /// Resident memory in bytes, in the later sample.
    pub rss: u64,
    /// Minor page faults per second.
    pub minflt_per_s: f64,
    /// Major page faults (read from storage) per second.
    pub majflt_per_s: f64,
    /// Context switches per second, voluntary and not.
    pub ctxt_per_s: f64,
    /// Bytes read per second through system calls (`rchar`); `None` where `io` is unreadable.
    pub read_bytes_per_s: Option<f64>,
    /// Bytes written per second through system calls (`wchar`); `None` likewise.
    pub write_bytes_per_s: Option<f64>,
    /// Read and write system calls per second (`syscr + syscw`): work the kernel sees, so a
    /// proxy for requests served that needs no help from the application; `None` likewise.
    pub syscalls_per_s: Option<f64>,
    /// The CPUs it may run on, in list format (`0-3,8`).
    pub cpus_allowed: Option<String>,
    /// CPU of its children that exited during the interval and were reaped by it, the part of
    /// their lives inside the interval: a server that forks a process per connection is
    /// charged for the connections that ended (`cpu` does not hold it).
    #[serde(default)]
    pub reaped_cpu: f64,
}

/// A thread's rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadRate {
    /// Time of the later sample, ms since the Unix epoch.
    pub time_ms: i64,
    /// The process the thread belongs to.
    pub pid: i32,
    /// The thread id.
    pub tid: i32,
    /// The thread's name.
    pub comm: String,
    /// CPU in percent of one CPU, user and system.
    pub cpu: f64,
    /// User CPU in percent of one CPU.
    pub user: f64,
    /// System CPU in percent of one CPU.
    pub system: f64,
    /// The CPU it last ran on.
    pub processor: Option<u32>,
    /// Its scheduling state in the later sample (`R`, `S`, `D`, …).
    pub state: char,
}

/// A block device's rates (iostat's columns).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskRate {
    /// Time of the later sample, ms since the Unix epoch.
    pub time_ms: i64,
    /// The device name.
    pub device: String,
    /// Reads completed per second.
    pub reads_per_s: f64,
    /// Writes completed per second.
    pub writes_per_s: f64,
    /// Megabytes (10^6 bytes) read per second.
    pub read_mb_per_s: f64,
    /// Megabytes (10^6 bytes) written per second.
    pub write_mb_per_s: f64,
    /// Average time an I/O took, queue included (ms).
    pub await_ms: f64,
    /// Average time the device was busy per I/O (ms).
    pub service_ms: f64,
    /// Share of time with I/O in flight (%).
    pub util: f64,
    /// Average number of I/Os in flight.
    pub queue: f64,
}

/// A network interface's rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetRate {
    /// Time of the later sample, ms since the Unix epoch.
    pub time_ms: i64,
    /// The interface name.
    pub interface: String,
    /// Packets received per second.
    pub rx_packets_per_s: f64,
    /// Packets sent per second.
    pub tx_packets_per_s: f64,
    /// Megabytes (10^6 bytes) received per second.
    pub rx_mb_per_s: f64,
    /// Megabytes (10^6 bytes) sent per second.
    pub tx_mb_per_s: f64,
    /// Receive errors per second.
    pub rx_errors_per_s: f64,
    /// Send errors per second.
    pub tx_errors_per_s: f64,
}

/// Everything computed between two samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Time of the later sample.
    pub time_ms: i64,
    /// Seconds between the two samples (by the monotonic clock where it is usable).
    pub interval_s: f64,
    /// The machine-wide CPU row.
    pub total: CpuRate,
    /// One row per CPU present in both samples.
    pub cpus: Vec<CpuRate>,
    /// One row per process present in both samples.
    pub processes: Vec<ProcRate>,
    /// One row per thread, where both samples read threads.
    pub threads: Vec<ThreadRate>,
    /// One row per block device present in both samples.
    pub disks: Vec<DiskRate>,
    /// One row per interface present in both samples.
    pub nets: Vec<NetRate>,
}

/// Two samples cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The samples are in the wrong order, or taken at the same time.
    #[error("the second sample is not later than the first")]
    NotLater,
    /// The boot time changed: the counters restarted.
    #[error("the machine rebooted between the two samples")]
    Rebooted,
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn cpu_rate(
    time_ms: i64,
    cpu: Option<u32>,
    a: &perfpilot_sys::stat::CpuTimes,
    b: &perfpilot_sys::stat::CpuTimes,
) -> CpuRate {
    let d = |x: u64, y: u64| y.saturating_sub(x);
    let user = d(a.user, b.user) + d(a.nice, b.nice);
    let system = d(a.system, b.system);
    let irq = d(a.irq, b.irq) + d(a.softirq, b.softirq);
    let steal = d(a.steal, b.steal);
    let iowait = d(a.iowait, b.iowait);
    let idle = d(a.idle, b.idle);
    let whole = user + system + irq + steal + iowait + idle;
    CpuRate {
        time_ms,
        cpu,
        busy: pct(user + system + irq + steal, whole),
        user: pct(user, whole),
        system: pct(system, whole),
        irq: pct(irq, whole),
        steal: pct(steal, whole),
        iowait: pct(iowait, whole),
        idle: pct(idle, whole),
        ctxt_per_s: None,
    }
}

impl Rates {
    /// Rates from sample `a` to the later sample `b`. Processes and threads are matched by pid
    /// (and start time, so a reused pid is not mistaken for the old process); CPUs, disks and
    /// interfaces present in only one sample are left out.
    pub fn between(a: &Sample, b: &Sample) -> Result<Rates, DeltaError> {
        if b.kernel.btime != a.kernel.btime
            && a.kernel.btime != 0
            && b.kernel.btime.abs_diff(a.kernel.btime) > 2
        {
            return Err(DeltaError::Rebooted);
        }
        let dt = if b.mono_ns > a.mono_ns && b.mono_ns - a.mono_ns < 86_400 * 1_000_000_000 * 365 {
            (b.mono_ns - a.mono_ns) as f64 / 1e9
        } else {
            (b.time_ms - a.time_ms) as f64 / 1e3
        };
        if dt <= 0.0 {
            return Err(DeltaError::NotLater);
        }
        let span = Span {
            t: b.time_ms,
            dt,
            ticks: b.ticks_per_sec.max(1) as f64,
        };
        let mut total = cpu_rate(span.t, None, &a.kernel.total, &b.kernel.total);
        total.ctxt_per_s = Some(span.per_s(a.kernel.ctxt, b.kernel.ctxt));
        let (processes, threads) = span.processes(a, b);
        Ok(Rates {
            time_ms: span.t,
            interval_s: dt,
            total,
            cpus: span.cpus(a, b),
            processes,
            threads,
            disks: span.disks(a, b),
            nets: span.nets(a, b),
        })
    }
}

/// The interval between two samples: when it ends, how long it lasted, the clock ticks of a
/// second; each kind of rate is computed over it.
struct Span {
    t: i64,
    dt: f64,
    ticks: f64,
}

impl Span {
    /// A counter's rate per second.
    fn per_s(&self, x: u64, y: u64) -> f64 {
        y.saturating_sub(x) as f64 / self.dt
    }

    /// CPU ticks as a percentage of one CPU.
    fn cpu_pct(&self, x: u64, y: u64) -> f64 {
        y.saturating_sub(x) as f64 / self.ticks / self.dt * 100.0
    }

    /// Each CPU's rates (CPUs in both samples).
    fn cpus(&self, a: &Sample, b: &Sample) -> Vec<CpuRate> {
        b.kernel
            .cpus
            .iter()
            .filter_map(|(cpu, tb)| {
                let ta = a.kernel.cpus.get(cpu)?;
                let mut r = cpu_rate(self.t, Some(*cpu), ta, tb);
                r.ctxt_per_s = match (&a.cpu_ctxt, &b.cpu_ctxt) {
                    (Some(ca), Some(cb)) => Some(self.per_s(*ca.get(cpu)?, *cb.get(cpu)?)),
                    _ => None,
                };
                Some(r)
            })
            .collect()
    }

    /// Each process's rates and its threads': processes in both samples, and those born
    /// during the interval (all their CPU time belongs to it).
    fn processes(&self, a: &Sample, b: &Sample) -> (Vec<ProcRate>, Vec<ThreadRate>) {
        let prev: HashMap<(i32, u64), &ProcSample> = a
            .processes
            .iter()
            .map(|p| ((p.pid, p.starttime), p))
            .collect();
        let lives = Lives::between(a, b);
        let mut processes = Vec::new();
        let mut threads = Vec::new();
        for p in &b.processes {
            let born;
            let q = match prev.get(&(p.pid, p.starttime)) {
                Some(q) => *q,
                None if lives.born_during(p) => {
                    born = Lives::unborn(p);
                    &born
                }
                None => continue,
            };
            processes.push(self.process(q, p, &lives));
            self.threads(q, p, &mut threads);
        }
        (processes, threads)
    }

    /// One process's rates from its samples `q` (before) and `p` (after).
    fn process(&self, q: &ProcSample, p: &ProcSample, lives: &Lives) -> ProcRate {
        let io = |f: fn(&perfpilot_sys::process::ProcIo) -> u64| match (&q.io, &p.io) {
            (Some(x), Some(y)) => Some(self.per_s(f(x), f(y))),
            _ => None,
        };
        ProcRate {
            time_ms: self.t,
            pid: p.pid,
            comm: p.comm.clone(),
            cmdline: p.cmdline.clone(),
            uid: p.uid,
            cpu: self.cpu_pct(q.utime + q.stime, p.utime + p.stime),
            reaped_cpu: self.cpu_pct(q.children_time + lives.gone_children(p), p.children_time),
            user: self.cpu_pct(q.utime, p.utime),
            system: self.cpu_pct(q.stime, p.stime),
            processor: p.processor,
            threads: p.num_threads,
            rss: p.rss,
            minflt_per_s: self.per_s(q.minflt, p.minflt),
            majflt_per_s: self.per_s(q.majflt, p.majflt),
            ctxt_per_s: self.per_s(
                q.ctxt_voluntary + q.ctxt_involuntary,
                p.ctxt_voluntary + p.ctxt_involuntary,
            ),
            read_bytes_per_s: io(|x| x.rchar),
            write_bytes_per_s: io(|x| x.wchar),
            syscalls_per_s: io(|x| x.syscr + x.syscw),
            cpus_allowed: p.cpus_allowed.as_ref().map(|c| c.to_string()),
        }
    }

    /// A process's thread rates, into `out`.
    fn threads(&self, q: &ProcSample, p: &ProcSample, out: &mut Vec<ThreadRate>) {
        // Thread rates need threads in both samples; a thread absent from `q` started during
        // the interval, so all its CPU time belongs to it.
        if p.threads.is_empty() || q.threads.is_empty() {
            return;
        }
        let pt: HashMap<i32, _> = q.threads.iter().map(|t| (t.tid, t)).collect();
        for th in &p.threads {
            let (u0, s0) = pt
                .get(&th.tid)
                .map(|o| (o.utime, o.stime))
                .unwrap_or((0, 0));
            out.push(ThreadRate {
                time_ms: self.t,
                pid: p.pid,
                tid: th.tid,
                comm: th.comm.clone(),
                cpu: self.cpu_pct(u0 + s0, th.utime + th.stime),
                user: self.cpu_pct(u0, th.utime),
                system: self.cpu_pct(s0, th.stime),
                processor: th.processor,
                state: th.state,
            });
        }
    }

    /// Each disk's rates (disks in both samples).
    fn disks(&self, a: &Sample, b: &Sample) -> Vec<DiskRate> {
        let dt = self.dt;
        b.disks
            .iter()
            .filter_map(|d| {
                let o = a.disks.iter().find(|x| x.name == d.name)?;
                let ios = (d.reads + d.writes).saturating_sub(o.reads + o.writes);
                let wait_ms = (d.read_ms + d.write_ms).saturating_sub(o.read_ms + o.write_ms);
                let io_ms = d.io_ms.saturating_sub(o.io_ms);
                Some(DiskRate {
                    time_ms: self.t,
                    device: d.name.clone(),
                    reads_per_s: self.per_s(o.reads, d.reads),
                    writes_per_s: self.per_s(o.writes, d.writes),
                    read_mb_per_s: self.per_s(o.sectors_read, d.sectors_read) * 512.0 / 1e6,
                    write_mb_per_s: self.per_s(o.sectors_written, d.sectors_written) * 512.0 / 1e6,
                    await_ms: if ios == 0 {
                        0.0
                    } else {
                        wait_ms as f64 / ios as f64
                    },
                    service_ms: if ios == 0 {
                        0.0
                    } else {
                        io_ms as f64 / ios as f64
                    },
                    util: (io_ms as f64 / (dt * 1e3) * 100.0).min(100.0),
                    queue: d.weighted_io_ms.saturating_sub(o.weighted_io_ms) as f64 / (dt * 1e3),
                })
            })
            .collect()
    }

    /// Each network interface's rates (interfaces in both samples).
    fn nets(&self, a: &Sample, b: &Sample) -> Vec<NetRate> {
        b.nets
            .iter()
            .filter_map(|n| {
                let o = a.nets.iter().find(|x| x.name == n.name)?;
                Some(NetRate {
                    time_ms: self.t,
                    interface: n.name.clone(),
                    rx_packets_per_s: self.per_s(o.rx_packets, n.rx_packets),
                    tx_packets_per_s: self.per_s(o.tx_packets, n.tx_packets),
                    rx_mb_per_s: self.per_s(o.rx_bytes, n.rx_bytes) / 1e6,
                    tx_mb_per_s: self.per_s(o.tx_bytes, n.tx_bytes) / 1e6,
                    rx_errors_per_s: self.per_s(o.rx_errors, n.rx_errors),
                    tx_errors_per_s: self.per_s(o.tx_errors, n.tx_errors),
                })
            })
            .collect()
    }
}

/// Which processes began or ended between two samples: a process that began is charged all its
/// counters (they started at zero inside the interval); one that ended and was reaped by a
/// process still alive is charged to that parent's `reaped_cpu`, less what it had used by the
/// first sample (already counted then).
struct Lives {
    /// Processes starting at or after this tick began inside the interval (a second early:
    /// the first sample's uptime comes from the wall clock).
    born_from: u64,
    /// Per parent pid, the ticks its children that ended had used by the first sample.
    gone: HashMap<i32, u64>,
}

impl Lives {
    fn between(a: &Sample, b: &Sample) -> Lives {
        let live: std::collections::HashSet<(i32, u64)> =
            b.processes.iter().map(|p| (p.pid, p.starttime)).collect();
        let mut gone = HashMap::new();
        for q in &a.processes {
            if !live.contains(&(q.pid, q.starttime)) {
                *gone.entry(q.ppid).or_insert(0) += q.utime + q.stime + q.children_time;
            }
        }
        Lives {
            born_from: a.uptime_ticks().saturating_sub(a.ticks_per_sec),
            gone,
        }
    }

    /// Whether `p`, absent from the first sample, began after it (rather than was not read).
    fn born_during(&self, p: &ProcSample) -> bool {
        p.starttime >= self.born_from
    }

    /// The readings of `p` before it began: zero (with an `io` file where it has one).
    fn unborn(p: &ProcSample) -> ProcSample {
        ProcSample {
            pid: p.pid,
            starttime: p.starttime,
            io: p.io.map(|_| perfpilot_sys::process::ProcIo::default()),
            ..ProcSample::default()
        }
    }

    /// The ticks the children of `p` that ended had used by the first sample.
    fn gone_children(&self, p: &ProcSample) -> u64 {
        self.gone.get(&p.pid).copied().unwrap_or(0)
    }
}

/// The latest expensive reading for each process, kept across samples (they are taken at a
/// lower rate than the cheap ones).
#[derive(Debug, Default, Clone)]
pub struct MemoryBook {
    by_proc: HashMap<(i32, u64), (i64, ProcMemory)>,
}

impl MemoryBook {
    /// Takes in the expensive readings of a sample and forgets processes no longer present.
    pub fn update(&mut self, s: &Sample) {
        for m in &s.proc_memory {
            self.by_proc
                .insert((m.pid, m.starttime), (s.time_ms, m.clone()));
        }
        let live: std::collections::HashSet<_> =
            s.processes.iter().map(|p| (p.pid, p.starttime)).collect();
        if !live.is_empty() {
            self.by_proc.retain(|k, _| live.contains(k));
        }
    }

    /// The latest reading of a process, with the time it was taken.
    pub fn get(&self, pid: i32, starttime: u64) -> Option<(i64, &ProcMemory)> {
        self.by_proc.get(&(pid, starttime)).map(|(t, m)| (*t, m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{PressureSample, Skips, SystemMemory, ThreadSample};
    use perfpilot_sys::block::DiskStats;
    use perfpilot_sys::stat::{CpuTimes, KernelStat};

    fn times(user: u64, system: u64, idle: u64) -> CpuTimes {
        CpuTimes {
            user,
            system,
            idle,
            ..CpuTimes::default()
        }
    }

    fn proc(pid: i32, starttime: u64, utime: u64, threads: Vec<ThreadSample>) -> ProcSample {
        ProcSample {
            pid,
            starttime,
            ppid: 1,
            uid: 0,
            comm: "p".into(),
            cmdline: "p".into(),
            state: 'R',
            utime,
            stime: 0,
            children_time: 0,
            minflt: 0,
            majflt: 0,
            num_threads: threads.len() as u32,
            rss: 0,
            processor: Some(0),
            ctxt_voluntary: 0,
            ctxt_involuntary: 0,
            cpus_allowed: None,
            io: None,
            kernel_thread: false,
            threads: threads.into(),
        }
    }

    fn thread(tid: i32, utime: u64) -> ThreadSample {
        ThreadSample {
            tid,
            comm: "t".into(),
            state: 'R',
            utime,
            stime: 0,
            processor: Some(0),
        }
    }

    fn sample(
        t_s: u64,
        cpus: &[(u32, CpuTimes)],
        procs: Vec<ProcSample>,
        disks: Vec<DiskStats>,
    ) -> Sample {
        Sample {
            time_ms: (t_s * 1000) as i64,
            mono_ns: t_s * 1_000_000_000,
            ticks_per_sec: 100,
            kernel: KernelStat {
                total: cpus.iter().fold(CpuTimes::default(), |a, (_, c)| CpuTimes {
                    user: a.user + c.user,
                    system: a.system + c.system,
                    idle: a.idle + c.idle,
                    ..a
                }),
                cpus: cpus.iter().copied().collect(),
                btime: 1000,
                ..KernelStat::default()
            },
            cpu_ctxt: None,
            memory: SystemMemory::default(),
            pressure: PressureSample::default(),
            processes: procs,
            proc_memory: Vec::new(),
            disks,
            nets: Vec::new(),
            skips: Skips::default(),
        }
    }

    #[test]
    fn cpu_split_and_an_offlined_cpu() {
        let a = sample(
            10,
            &[(0, times(100, 50, 1000)), (1, times(0, 0, 1000))],
            vec![],
            vec![],
        );
        // Over 2 s (200 ticks per CPU), CPU 0: 150 user, 50 system; CPU 1 went offline.
        let b = sample(12, &[(0, times(250, 100, 1000))], vec![], vec![]);
        let r = Rates::between(&a, &b).unwrap();
        assert_eq!(r.cpus.len(), 1, "the offline CPU is left out");
        let c = &r.cpus[0];
        assert_eq!(c.cpu, Some(0));
        assert!((c.user - 75.0).abs() < 1e-9 && (c.system - 25.0).abs() < 1e-9 && c.busy == 100.0);
        assert!((r.interval_s - 2.0).abs() < 1e-9);
    }

    #[test]
    fn process_and_thread_cpu_with_pid_reuse_and_new_threads() {
        let a = sample(
            0,
            &[(0, times(0, 0, 0))],
            vec![
                proc(10, 5, 100, vec![thread(10, 60), thread(11, 40)]),
                proc(20, 7, 50, vec![]),
            ],
            vec![],
        );
        let b = sample(
            1,
            &[(0, times(100, 0, 0))],
            vec![
                // 10: +80 ticks in 1 s = 80 %; thread 12 is new (20 ticks, all in this interval).
                proc(
                    10,
                    5,
                    180,
                    vec![thread(10, 100), thread(11, 60), thread(12, 20)],
                ),
                // pid 20 was reused by a process that began in the interval (other start
                // time): its own 3 ticks, not a difference from the old one's 50.
                proc(20, 99, 3, vec![]),
            ],
            vec![],
        );
        let r = Rates::between(&a, &b).unwrap();
        let cpu: Vec<(i32, f64)> = r.processes.iter().map(|p| (p.pid, p.cpu)).collect();
        assert_eq!(cpu, vec![(10, 80.0), (20, 3.0)]);
        let t: Vec<(i32, f64)> = r.threads.iter().map(|t| (t.tid, t.cpu)).collect();
        assert_eq!(t, vec![(10, 40.0), (11, 20.0), (12, 20.0)]);
    }

    #[test]
    fn processes_that_began_or_ended_between_the_samples_are_charged_for_their_part_of_it() {
        // Booted at 1000 s; samples at 1010 s and 1012 s (uptime 1000 and 1200 ticks).
        let child = |pid, start, utime| ProcSample {
            ppid: 10,
            ..proc(pid, start, utime, vec![])
        };
        let parent = |utime, children_time| ProcSample {
            children_time,
            ..proc(10, 100, utime, vec![])
        };
        let a = sample(1010, &[], vec![parent(500, 0), child(11, 900, 30)], vec![]);
        let b = sample(
            1012,
            &[],
            vec![
                // Child 11 ended with 50 ticks (30 by the first sample); another began and
                // ended between the samples with 30: the parent reaped 80.
                parent(520, 80),
                // Began after the first sample: all its 40 ticks are the interval's.
                child(12, 1050, 40),
                // Not read the first time but older than it: no rate, not 9,999 ticks.
                proc(40, 100, 9999, vec![]),
            ],
            vec![],
        );
        let r = Rates::between(&a, &b).unwrap();
        let by_pid: HashMap<i32, (f64, f64)> = r
            .processes
            .iter()
            .map(|p| (p.pid, (p.cpu, p.reaped_cpu)))
            .collect();
        assert_eq!(by_pid.len(), 2, "{by_pid:?}");
        // 2 s of 100 ticks: the parent's own 20 ticks (10 %), its children's 20 + 30 (25 %).
        assert_eq!(by_pid[&10], (10.0, 25.0));
        assert_eq!(by_pid[&12], (20.0, 0.0));
    }

    #[test]
    fn system_calls_per_second_count_reads_and_writes_and_need_io_in_both_samples() {
        let io = |rchar: u64, syscr: u64, syscw: u64| perfpilot_sys::process::ProcIo {
            rchar,
            syscr,
            syscw,
            ..Default::default()
        };
        let with_io = |pid: i32, io| ProcSample {
            io,
            ..proc(pid, 1, 0, vec![])
        };
        let a = sample(
            0,
            &[],
            vec![with_io(10, Some(io(0, 100, 50))), with_io(20, None)],
            vec![],
        );
        // 2 s: 300 reads and 100 writes, 4000 bytes read; pid 20's io stayed unreadable.
        let b = sample(
            2,
            &[],
            vec![
                with_io(10, Some(io(4000, 400, 150))),
                with_io(20, Some(io(1, 1, 1))),
            ],
            vec![],
        );
        let r = Rates::between(&a, &b).unwrap();
        let by_pid = |pid: i32| r.processes.iter().find(|p| p.pid == pid).unwrap();
        assert_eq!(by_pid(10).syscalls_per_s, Some(200.0));
        assert_eq!(by_pid(10).read_bytes_per_s, Some(2000.0));
        assert_eq!(by_pid(20).syscalls_per_s, None);
    }

    #[test]
    fn disk_rates_like_iostat() {
        let d = |reads: u64, sectors: u64, read_ms: u64, io_ms: u64, weighted: u64| DiskStats {
            name: "sda".into(),
            reads,
            sectors_read: sectors,
            read_ms,
            io_ms,
            weighted_io_ms: weighted,
            ..DiskStats::default()
        };
        let a = sample(0, &[], vec![], vec![d(0, 0, 0, 0, 0)]);
        // 2 s: 200 reads of 8 sectors, 400 ms waiting in all, device busy 300 ms, 800 ms·I/O.
        let b = sample(2, &[], vec![], vec![d(200, 1600, 400, 300, 800)]);
        let r = Rates::between(&a, &b).unwrap();
        let x = &r.disks[0];
        assert_eq!(x.reads_per_s, 100.0);
        assert!((x.read_mb_per_s - 1600.0 * 512.0 / 2.0 / 1e6).abs() < 1e-12);
        assert_eq!(x.await_ms, 2.0);
        assert_eq!(x.service_ms, 1.5);
        assert_eq!(x.util, 15.0);
        assert_eq!(x.queue, 0.4);
    }

    #[test]
    fn reboot_and_time_order_are_refused() {
        let a = sample(5, &[], vec![], vec![]);
        let mut b = sample(6, &[], vec![], vec![]);
        b.kernel.btime = 99_999;
        assert_eq!(Rates::between(&a, &b), Err(DeltaError::Rebooted));
        let c = sample(5, &[], vec![], vec![]);
        assert_eq!(Rates::between(&a, &c), Err(DeltaError::NotLater));
    }
}
