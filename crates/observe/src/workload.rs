//! Workloads: what the optimizer reasons about. A workload is one process (its threads), or a
//! group of processes attached to the same shared-memory segment (a process-based database
//! such as PostgreSQL). Its identity is a stable signature (executable + arguments), so
//! verdicts outlive process ids.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use perfpilot_sys::CpuSet;
use perfpilot_sys::process::ShmAttach;
use serde::{Deserialize, Serialize};

use crate::rates::Rates;
use crate::sample::{ProcMemory, ProcSample, Sample};

/// One process of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// The process id.
    pub pid: i32,
    /// Its start time in ticks after boot (with the pid, its identity).
    pub starttime: u64,
    /// Its threads' ids (just the pid when threads were not read).
    pub tids: Vec<i32>,
    /// CPU in cores over the last interval.
    pub cpu_cores: f64,
    /// Resident memory in bytes.
    pub rss: u64,
    /// The CPUs it may run on.
    pub cpus_allowed: Option<CpuSet>,
    /// The CPU each thread last ran on.
    pub thread_cpus: Vec<Option<u32>>,
    /// Each thread's CPU in cores over the last interval (empty when not known).
    pub thread_cores: Vec<f64>,
}

/// A workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Stable identity: a hash of the executable and arguments (of the group's oldest process).
    pub signature: String,
    /// A readable name: the command name, with the number of processes for a group.
    pub name: String,
    /// The command name of the oldest process.
    pub comm: String,
    /// The command line of the oldest process, joined with spaces.
    pub cmdline: String,
    /// The real user id of the oldest process.
    pub uid: u32,
    /// Its processes.
    pub members: Vec<Member>,
    /// The shared-memory segments that tie a group together (empty for a single process).
    pub shared: Vec<ShmAttach>,
    /// Seconds since the oldest member started.
    pub age_s: f64,
    /// CPU in cores over the last interval, all members, with what their children that ended
    /// in it used (a process-per-connection server's connections that came and went).
    pub cpu_cores: f64,
    /// Threads of all members (one per member whose threads were not read).
    pub threads: usize,
    /// Resident bytes of all members (shared pages counted once per member).
    pub rss: u64,
}

impl Workload {
    /// All (pid, tid) pairs.
    pub fn tasks(&self) -> impl Iterator<Item = (i32, i32)> + '_ {
        self.members
            .iter()
            .flat_map(|m| m.tids.iter().map(move |t| (m.pid, *t)))
    }

    /// The process ids.
    pub fn pids(&self) -> Vec<i32> {
        self.members.iter().map(|m| m.pid).collect()
    }

    /// The union of the CPUs its threads last ran on.
    pub fn cpus_used(&self) -> CpuSet {
        self.members
            .iter()
            .flat_map(|m| m.thread_cpus.iter().flatten().copied())
            .collect()
    }
}

/// FNV-1a, 64 bit: a stable hash (the standard library's hasher may change between releases,
/// and signatures are stored).
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The signature of a process: its command line (executable and arguments) and, for a group,
/// a marker that it is one.
pub fn signature(p: &ProcSample, group: bool) -> String {
    let key = if p.cmdline.is_empty() {
        &p.comm
    } else {
        &p.cmdline
    };
    let h = stable_hash(key.as_bytes());
    if group {
        format!("{h:016x}-shm")
    } else {
        format!("{h:016x}")
    }
}

/// Groups the processes of `cur` into workloads. `shm` gives the shared-memory segments of the
/// processes whose maps were read (others count as attaching none); `rates` gives CPU over
/// the last interval. Kernel threads are left out.
pub fn group(cur: &Sample, rates: &Rates, shm: &HashMap<i32, Vec<ShmAttach>>) -> Vec<Workload> {
    let procs: Vec<&ProcSample> = cur.processes.iter().filter(|p| !p.kernel_thread).collect();
    let index: HashMap<i32, usize> = procs.iter().enumerate().map(|(i, p)| (p.pid, i)).collect();
    // Union-find over processes sharing a segment.
    let mut parent: Vec<usize> = (0..procs.len()).collect();
    fn find(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    let mut by_segment: BTreeMap<&ShmAttach, Vec<usize>> = BTreeMap::new();
    for (pid, segs) in shm {
        if let Some(&i) = index.get(pid) {
            for s in segs {
                by_segment.entry(s).or_default().push(i);
            }
        }
    }
    for members in by_segment.values() {
        for w in members.windows(2) {
            let (a, b) = (find(&mut parent, w[0]), find(&mut parent, w[1]));
            if a != b {
                parent[a] = b;
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..procs.len() {
        let r = find(&mut parent, i);
        groups.entry(r).or_default().push(i);
    }
    // Each process's own CPU and its reaped children's, in cores.
    let cpu: HashMap<i32, (f64, f64)> = rates
        .processes
        .iter()
        .map(|p| (p.pid, (p.cpu / 100.0, p.reaped_cpu / 100.0)))
        .collect();
    let thread_cpu: HashMap<i32, f64> = rates
        .threads
        .iter()
        .map(|t| (t.tid, t.cpu / 100.0))
        .collect();
    let uptime_ticks = cur.uptime_ticks();
    let mut out = Vec::new();
    for members in groups.values() {
        let oldest = members
            .iter()
            .map(|&i| procs[i])
            .min_by_key(|p| (p.starttime, p.pid))
            .expect("a group has members");
        let is_group = members.len() > 1;
        let mut shared = BTreeSet::new();
        if is_group {
            for &i in members {
                for s in shm.get(&procs[i].pid).into_iter().flatten() {
                    if by_segment.get(s).is_some_and(|v| v.len() > 1) {
                        shared.insert(s.clone());
                    }
                }
            }
        }
        let ms: Vec<Member> = members
            .iter()
            .map(|&i| {
                let p = procs[i];
                let (tids, thread_cpus) = if p.threads.is_empty() {
                    (vec![p.pid], vec![p.processor])
                } else {
                    (
                        p.threads.iter().map(|t| t.tid).collect(),
                        p.threads.iter().map(|t| t.processor).collect(),
                    )
                };
                let thread_cores = tids
                    .iter()
                    .map(|t| thread_cpu.get(t).copied().unwrap_or(0.0))
                    .collect();
                Member {
                    pid: p.pid,
                    starttime: p.starttime,
                    thread_cores,
                    tids,
                    cpu_cores: cpu.get(&p.pid).map_or(0.0, |c| c.0),
                    rss: p.rss,
                    cpus_allowed: p.cpus_allowed.clone(),
                    thread_cpus,
                }
            })
            .collect();
        let ticks = cur.ticks_per_sec.max(1) as f64;
        out.push(Workload {
            signature: signature(oldest, is_group),
            name: if is_group {
                format!("{} (+{} processes)", oldest.comm, members.len() - 1)
            } else {
                oldest.comm.clone()
            },
            comm: oldest.comm.clone(),
            cmdline: oldest.cmdline.clone(),
            uid: oldest.uid,
            age_s: uptime_ticks.saturating_sub(oldest.starttime) as f64 / ticks,
            cpu_cores: ms
                .iter()
                .map(|m| m.cpu_cores + cpu.get(&m.pid).map_or(0.0, |c| c.1))
                .sum(),
            threads: ms.iter().map(|m| m.tids.len()).sum(),
            rss: ms.iter().map(|m| m.rss).sum(),
            shared: shared.into_iter().collect(),
            members: ms,
        });
    }
    out.sort_by(|a, b| b.cpu_cores.total_cmp(&a.cpu_cores));
    out
}

/// Memory of a workload per NUMA node, from the members' expensive readings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadMemory {
    /// Resident bytes per NUMA node.
    pub per_node: BTreeMap<u32, u64>,
    /// Resident private anonymous bytes per node.
    pub anon_per_node: BTreeMap<u32, u64>,
    /// Resident shared-memory bytes per node (counted once per member).
    pub shm_per_node: BTreeMap<u32, u64>,
    /// Anonymous bytes (`smaps_rollup`).
    pub anonymous: u64,
    /// Of those, bytes in transparent huge pages.
    pub anon_huge: u64,
    /// Shared memory mapped by huge pages (counted once per member).
    pub shmem_pmd_mapped: u64,
}

impl WorkloadMemory {
    /// Sums the readings of the members that have one.
    pub fn of<'a>(readings: impl IntoIterator<Item = &'a ProcMemory>) -> WorkloadMemory {
        let mut w = WorkloadMemory::default();
        for m in readings {
            for (n, b) in &m.per_node {
                *w.per_node.entry(*n).or_default() += b;
            }
            for (n, b) in &m.anon_per_node {
                *w.anon_per_node.entry(*n).or_default() += b;
            }
            for (n, b) in &m.shm_per_node {
                *w.shm_per_node.entry(*n).or_default() += b;
            }
            w.anonymous += m.rollup.anonymous;
            w.anon_huge += m.rollup.anon_huge;
            w.shmem_pmd_mapped += m.rollup.shmem_pmd_mapped;
        }
        w
    }

    /// Resident bytes in all.
    pub fn total(&self) -> u64 {
        self.per_node.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{PressureSample, Skips, SystemMemory, ThreadSample};

    fn proc(pid: i32, starttime: u64, cmd: &str, threads: &[i32]) -> ProcSample {
        ProcSample {
            pid,
            starttime,
            ppid: 1,
            uid: 0,
            comm: cmd.split(' ').next().unwrap_or(cmd).into(),
            cmdline: cmd.into(),
            state: 'S',
            utime: 0,
            stime: 0,
            children_time: 0,
            minflt: 0,
            majflt: 0,
            num_threads: threads.len() as u32,
            rss: 1 << 20,
            processor: Some(0),
            ctxt_voluntary: 0,
            ctxt_involuntary: 0,
            cpus_allowed: None,
            io: None,
            kernel_thread: false,
            threads: threads
                .iter()
                .map(|&tid| ThreadSample {
                    tid,
                    comm: "t".into(),
                    state: 'S',
                    utime: 0,
                    stime: 0,
                    processor: Some(1),
                })
                .collect(),
        }
    }

    /// Three PostgreSQL processes (10, 11, 12) and a Java process (20), booted at 1000 s,
    /// sampled at 2000 s.
    fn servers() -> Sample {
        Sample {
            time_ms: 2_000_000,
            mono_ns: 0,
            ticks_per_sec: 100,
            kernel: perfpilot_sys::stat::KernelStat {
                btime: 1000,
                ..Default::default()
            },
            cpu_ctxt: None,
            memory: SystemMemory::default(),
            pressure: PressureSample::default(),
            processes: vec![
                proc(10, 500, "postgres -D /data", &[10]),
                proc(11, 600, "postgres: checkpointer", &[11]),
                proc(12, 700, "postgres: walwriter", &[12]),
                proc(20, 800, "java -jar app.jar", &[20, 21, 22]),
            ],
            proc_memory: vec![],
            disks: vec![],
            nets: vec![],
            skips: Skips::default(),
        }
    }

    fn idle_rates() -> Rates {
        Rates {
            time_ms: 0,
            interval_s: 1.0,
            total: dummy_cpu(),
            cpus: vec![],
            processes: vec![],
            threads: vec![],
            disks: vec![],
            nets: vec![],
        }
    }

    #[test]
    fn processes_sharing_a_segment_form_one_workload() {
        let (s, rates) = (servers(), idle_rates());
        let seg = ShmAttach::Sysv {
            key: 0x52e2c1,
            shmid: 7,
        };
        let shm: HashMap<i32, Vec<ShmAttach>> = [
            (10, vec![seg.clone()]),
            (11, vec![seg.clone()]),
            (12, vec![seg.clone()]),
        ]
        .into();
        let w = group(&s, &rates, &shm);
        assert_eq!(w.len(), 2);
        let pg = w.iter().find(|w| w.members.len() == 3).unwrap();
        assert_eq!(pg.comm, "postgres");
        assert_eq!(pg.shared, vec![seg]);
        assert!(pg.signature.ends_with("-shm"));
        assert_eq!(pg.pids(), vec![10, 11, 12]);
        let java = w.iter().find(|w| w.comm == "java").unwrap();
        assert_eq!(java.threads, 3);
        assert_eq!(java.cpus_used().to_string(), "1");
        // Age: booted at 1000 s, now 2000 s, started 800 ticks (8 s) after boot.
        assert!((java.age_s - 992.0).abs() < 1e-6);
        // The signature is stable: same command line, same signature.
        assert_eq!(
            java.signature,
            signature(&proc(99, 1, "java -jar app.jar", &[99]), false)
        );
        assert_ne!(
            java.signature,
            signature(&proc(99, 1, "java -jar other.jar", &[99]), false)
        );
    }

    #[test]
    fn a_forked_servers_cpu_holds_the_connections_that_ended_and_began_between_two_samples() {
        // Postmaster 10 (its buffer pool ties the group) uses 20 ticks of its own in 2 s;
        // backend 11 ends between the samples with 50 ticks, 30 of them by the first; backend
        // 13 begins after the first and uses 40. (20 + 20 + 40) / 200 ticks = 0.4 cores, where
        // counting only the processes in both samples gives 0.1 (a PostgreSQL trial's windows
        // read 25 % more transactions per CPU-second whenever pgbench reconnected).
        let at = |t_ms: i64, processes| Sample {
            time_ms: t_ms,
            mono_ns: t_ms as u64 * 1_000_000,
            processes,
            ..servers()
        };
        let cpu = |p: ProcSample, ppid, utime, children_time| ProcSample {
            ppid,
            utime,
            children_time,
            ..p
        };
        let a = at(
            2_000_000,
            vec![
                cpu(proc(10, 500, "postgres -D /data", &[10]), 1, 500, 0),
                cpu(proc(11, 600, "postgres: app", &[11]), 10, 30, 0),
            ],
        );
        let b = at(
            2_002_000,
            vec![
                cpu(proc(10, 500, "postgres -D /data", &[10]), 1, 520, 50),
                cpu(proc(13, 100_050, "postgres: app", &[13]), 10, 40, 0),
            ],
        );
        let pool = ShmAttach::SharedAnon { inode: 2054 };
        let shm: HashMap<i32, Vec<ShmAttach>> = [(10, vec![pool.clone()]), (13, vec![pool])].into();
        let rates = Rates::between(&a, &b).unwrap();
        let w = group(&b, &rates, &shm);
        assert_eq!(w.len(), 1);
        assert!((w[0].cpu_cores - 0.4).abs() < 1e-9, "{}", w[0].cpu_cores);
        // The members keep their own CPU; the reaped backend's is the group's.
        let own: Vec<f64> = w[0].members.iter().map(|m| m.cpu_cores).collect();
        assert_eq!(own, vec![0.1, 0.2]);
    }

    #[test]
    fn a_forked_server_is_one_workload_by_the_dev_zero_memory_its_processes_inherit() {
        let (s, rates) = (servers(), idle_rates());
        // The postmaster's buffer pool, inherited by its children; java maps a /dev/zero
        // object of its own (another inode), which ties it to no one.
        let pool = ShmAttach::SharedAnon { inode: 2054 };
        let shm: HashMap<i32, Vec<ShmAttach>> = [
            (10, vec![pool.clone()]),
            (11, vec![pool.clone()]),
            (12, vec![pool.clone()]),
            (20, vec![ShmAttach::SharedAnon { inode: 9 }]),
        ]
        .into();
        let w = group(&s, &rates, &shm);
        assert_eq!(w.len(), 2);
        let pg = w.iter().find(|w| w.comm == "postgres").unwrap();
        assert_eq!(pg.pids(), vec![10, 11, 12]);
        assert_eq!(pg.shared, vec![pool]);
        assert_eq!(pg.name, "postgres (+2 processes)");
        let java = w.iter().find(|w| w.comm == "java").unwrap();
        assert!(java.shared.is_empty() && !java.signature.ends_with("-shm"));
    }

    fn dummy_cpu() -> crate::rates::CpuRate {
        crate::rates::CpuRate {
            time_ms: 0,
            cpu: None,
            busy: 0.0,
            user: 0.0,
            system: 0.0,
            irq: 0.0,
            steal: 0.0,
            iowait: 0.0,
            idle: 0.0,
            ctxt_per_s: None,
        }
    }
}
