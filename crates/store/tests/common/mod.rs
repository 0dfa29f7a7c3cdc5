//! Synthetic samples for the store's tests and examples.
#![allow(dead_code)]

use perfpilot_observe::sample::{
    NodeMemory, PressureSample, ProcSample, Sample, Skips, SystemMemory, ThreadSample,
};
use perfpilot_sys::CpuSet;
use perfpilot_sys::block::DiskStats;
use perfpilot_sys::net::NetDev;
use perfpilot_sys::process::ProcIo;
use perfpilot_sys::stat::{CpuTimes, KernelStat};

/// The shared seeded generator, drawing the `u64`s these fixtures take.
pub struct Rng(perfpilot_stats::Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(perfpilot_stats::Rng::new(seed))
    }
    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const COMMS: &[&str] = &[
    "postgres",
    "java",
    "nginx",
    "sshd",
    "systemd",
    "kworker/3:1",
    "python3",
    "redis-server",
    "bash",
    "containerd",
    "chronyd",
    "node",
];

/// Sample number `i` of a machine with `procs` processes of `threads` threads each, taken at
/// `time_ms`. Counters grow with `i` like a real machine's; names and command lines repeat
/// across samples like they do.
pub fn synthetic(i: u64, procs: usize, threads: usize, time_ms: i64) -> Sample {
    let mut rng = Rng::new(i + 1);
    let cpus = 64u32;
    let mut kernel = KernelStat {
        ctxt: 1_000_000 + i * 12_345,
        btime: 1_763_700_000,
        processes: 50_000 + i * 7,
        procs_running: 3,
        procs_blocked: 0,
        ..Default::default()
    };
    for c in 0..cpus {
        let t = CpuTimes {
            user: 10_000 + i * 300 + rng.below(300),
            system: 5_000 + i * 100 + rng.below(100),
            idle: 100_000 + i * 400 + rng.below(400),
            iowait: 100 + i,
            irq: 10,
            softirq: 50 + i,
            ..Default::default()
        };
        kernel.total.user += t.user;
        kernel.total.system += t.system;
        kernel.total.idle += t.idle;
        kernel.cpus.insert(c, t);
    }
    let all = CpuSet::parse("0-63").ok();
    let processes = (0..procs)
        .map(|p| {
            let pid = 1000 + p as i32 * 7;
            let comm = COMMS[p % COMMS.len()].to_string();
            let mut prng = Rng::new(p as u64 + 17);
            let cmdline = format!(
                "/usr/bin/{comm} --config /etc/{comm}/{}.conf --worker-id {p} --token {:x}",
                prng.below(50),
                prng.next()
            );
            let utime = (p as u64 % 97) * 10 + i * (p as u64 % 5) + rng.below(3);
            let threads: Vec<ThreadSample> = (0..threads)
                .map(|t| ThreadSample {
                    tid: pid + t as i32,
                    comm: format!("{comm}-w{t}"),
                    state: if rng.below(10) == 0 { 'R' } else { 'S' },
                    utime: utime / threads.max(1) as u64 + rng.below(5),
                    stime: rng.below(20) + i,
                    processor: Some(rng.below(cpus.into()) as u32),
                })
                .collect();
            ProcSample {
                pid,
                starttime: 4_000 + p as u64 * 3,
                ppid: 1,
                uid: (p % 3) as u32 * 1000,
                comm,
                cmdline,
                state: 'S',
                utime,
                stime: utime / 3,
                children_time: 0,
                minflt: 10_000 + i * 17 + rng.below(100),
                majflt: p as u64 % 11,
                num_threads: threads.len() as u32,
                rss: (p as u64 % 200 + 1) << 20,
                processor: Some(rng.below(cpus.into()) as u32),
                ctxt_voluntary: 500 + i * 3 + rng.below(10),
                ctxt_involuntary: 20 + i,
                cpus_allowed: all.clone(),
                io: Some(ProcIo {
                    rchar: (1 << 20) + rng.below(1 << 20),
                    wchar: (1 << 19) + rng.below(1 << 19),
                    syscr: 1000 + i,
                    syscw: 500 + i,
                    read_bytes: 4096 * (i + p as u64),
                    write_bytes: 4096 * i,
                    cancelled_write_bytes: 0,
                }),
                kernel_thread: false,
                threads: threads.into(),
            }
        })
        .collect();
    Sample {
        time_ms,
        mono_ns: 1_000_000_000 * (i + 1),
        ticks_per_sec: 100,
        kernel,
        cpu_ctxt: None,
        memory: SystemMemory {
            total: 256 << 30,
            available: 128 << 30,
            anon_huge: 2 << 30,
            shmem_pmd_mapped: 0,
            nodes: vec![
                NodeMemory {
                    node: 0,
                    total: 128 << 30,
                    free: 64 << 30,
                },
                NodeMemory {
                    node: 1,
                    total: 128 << 30,
                    free: 60 << 30,
                },
            ],
        },
        pressure: PressureSample::default(),
        processes,
        proc_memory: Vec::new(),
        disks: vec![DiskStats {
            major: 259,
            minor: 0,
            name: "nvme0n1".into(),
            reads: 1000 + i * 10,
            writes: 500 + i * 5,
            ..Default::default()
        }],
        nets: vec![NetDev {
            name: "eth0".into(),
            rx_bytes: (1 << 30) + i * 1500,
            tx_bytes: (1 << 29) + i * 900,
            ..Default::default()
        }],
        skips: Skips::default(),
    }
}

/// A sample padded with `pad` bytes of incompressible command line, to fill a store quickly.
pub fn bulky(i: u64, time_ms: i64, pad: usize) -> Sample {
    let mut s = synthetic(i, 2, 1, time_ms);
    let mut rng = Rng::new(i * 31 + 7);
    s.processes[0].cmdline = (0..pad)
        .map(|_| char::from(b'!' + rng.below(90) as u8))
        .collect();
    s
}
