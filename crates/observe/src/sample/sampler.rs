//! The [`Sampler`]: what it reads ([`SamplerConfig`]), and how it reads it cheaply (buffers
//! reused, idle processes carried over, expensive readings for the top processes only).

use std::collections::{BTreeMap, HashMap, HashSet};

use perfpilot_sys::clock::mono_ns;
use perfpilot_sys::perf::{Counter, Event, Target};
use perfpilot_sys::process::{
    MapRange, MappingKind, NumaRange, ProcReader, ShmAttach, SmapsRollup, TaskStat,
};
use perfpilot_sys::{Error, Fs};
use perfpilot_sys::{block, net, node, stat};
use serde::{Deserialize, Serialize};

use super::{
    NodeMemory, PressureSample, ProcMemory, ProcSample, Sample, Skips, SystemMemory, ThreadSample,
    Threads,
};

/// A process's identity across samples: its pid and start time.
type Key = (i32, u64);

/// The maps keyed by process are looked up once or twice per process per sample: a fast
/// hash (foldhash) instead of the default SipHash, which guards against flooding by keys
/// an adversary chooses; pids and start times are the kernel's.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

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
    /// Keep up to this many descriptors of `stat` (processes' and threads'), `status` and `io`
    /// open between samples and re-read them instead of opening the files again (0: open every
    /// time); only files read in two samples in a row are kept. At most half of the open-file
    /// limit is used, whatever this says.
    #[serde(default = "default_keep_open")]
    pub keep_open: usize,
}

fn default_keep_open() -> usize {
    // About 4.4 KiB of kernel memory each once read (docs/reliability.md): at most ~70 MiB.
    16_384
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
            keep_open: default_keep_open(),
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
    cmdlines: FastMap<Key, String>,
    prev_ticks: FastMap<Key, u64>,
    /// Per process: its previous reading (carried over while it stays idle).
    prev_full: FastMap<Key, ProcSample>,
    /// The map the next pass fills, kept between passes for its allocation.
    next_full: FastMap<Key, ProcSample>,
    /// The process `stat` being read, kept for its command name's allocation.
    stat: TaskStat,
    cpu_counters: Vec<(u32, Counter)>,
    /// Why per-CPU context switches are not available, if they are not.
    pub cpu_ctxt_unavailable: Option<String>,
    taken: u64,
}

impl Sampler {
    /// A sampler of `fs`. Per-CPU counters are opened only on the live system.
    pub fn new(fs: &Fs, cfg: SamplerConfig) -> Sampler {
        let mut s = Sampler {
            fs: fs.clone(),
            reader: ProcReader::new(fs),
            cfg,
            cmdlines: FastMap::default(),
            prev_ticks: FastMap::default(),
            prev_full: FastMap::default(),
            next_full: FastMap::default(),
            stat: TaskStat::default(),
            cpu_counters: Vec::new(),
            cpu_ctxt_unavailable: None,
            taken: 0,
        };
        let half_limit = usize::try_from(perfpilot_sys::open_files_limit().0 / 2).unwrap_or(0);
        s.reader.keep_stat_open(s.cfg.keep_open.min(half_limit));
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

    /// Descriptors kept open between samples now.
    pub fn kept_open(&self) -> usize {
        self.reader.kept_open()
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
        self.prev_ticks.clear();
        self.prev_ticks.extend(
            processes
                .iter()
                .map(|p| ((p.pid, p.starttime), p.utime + p.stime)),
        );

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
        // Node figures with what the node files leave out (perfpilot_sys::zones).
        if let Some((nodes, _)) =
            self.opt(perfpilot_sys::zones::read_nodes_reconciled(&self.fs), skips)
        {
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
        let mut full = std::mem::take(&mut self.next_full);
        full.clear();
        if self.cfg.reuse_idle {
            full.reserve(pids.len());
        }
        for pid in pids {
            match self.process(pid, page, skips) {
                Ok(p) => {
                    if self.cfg.reuse_idle {
                        // A copy for the next pass: the thread readings are shared, not copied.
                        full.insert((p.pid, p.starttime), p.clone());
                    }
                    out.push(p);
                }
                Err(e) => skips.count(&e),
            }
        }
        // What is left of the previous pass's readings is of processes that are gone.
        self.prev_full.clear();
        self.next_full = std::mem::replace(&mut self.prev_full, full);
        self.reader.end_pass();
        // Forget the command lines of processes that are gone.
        if self.cmdlines.len() > out.len() * 2 + 64 {
            let live: HashSet<Key> = out.iter().map(|p| (p.pid, p.starttime)).collect();
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
        // Into the kept reading: an idle process carried over allocates nothing for its name.
        let mut st = std::mem::take(&mut self.stat);
        let r = self.reader.stat_into(pid, &mut st);
        let p = r.and_then(|()| self.process_from(pid, &st, page, skips));
        self.stat = st;
        p
    }

    /// Reads one process whose `stat` is `st` (or carries over the previous reading).
    fn process_from(
        &mut self,
        pid: i32,
        st: &TaskStat,
        page: u64,
        skips: &mut Skips,
    ) -> perfpilot_sys::Result<ProcSample> {
        let key = (pid, st.starttime);
        // The previous reading, taken out (not copied): the pass's readings replace them all.
        let prev = if self.cfg.reuse_idle {
            self.prev_full.remove(&key)
        } else {
            None
        };
        let idle = prev.as_ref().is_some_and(|prev| {
            prev.utime + prev.stime == st.utime + st.stime && prev.num_threads == st.num_threads
        });
        // Each idle process is read in full once every `idle_refresh_every` samples, at a phase
        // set by its pid, so the full reads spread evenly over the samples.
        let every = u64::from(self.cfg.idle_refresh_every.max(1));
        let due = self.taken % every == pid.unsigned_abs() as u64 % every;
        if !due
            && idle
            && let Some(mut p) = prev
        {
            p.state = st.state;
            p.minflt = st.minflt;
            p.majflt = st.majflt;
            p.rss = st.rss_pages.saturating_mul(page);
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
        let mut threads = Threads::default();
        // An idle process read again only because its refresh is due: no thread of it can have
        // used CPU, so if it still has the same threads their readings are carried over (their
        // last CPU and state may be older; affinity actions ask the kernel anyway).
        let same_threads = self.cfg.threads
            && idle
            && prev.as_ref().is_some_and(|prev| {
                !prev.threads.is_empty()
                    && self.reader.tids(pid).is_ok_and(|tids| {
                        tids.len() == prev.threads.len()
                            && tids.iter().zip(&prev.threads).all(|(a, t)| *a == t.tid)
                    })
            });
        if same_threads && let Some(prev) = prev {
            threads = prev.threads;
        } else if self.cfg.threads && !status.kernel_thread {
            let mut read = Vec::with_capacity(st.num_threads as usize);
            self.reader.task_stats(pid, |r| match r {
                Ok(t) => read.push(ThreadSample {
                    tid: t.pid,
                    comm: t.comm,
                    state: t.state,
                    utime: t.utime,
                    stime: t.stime,
                    processor: t.processor,
                }),
                Err(e) => skips.count(&e),
            })?;
            threads = read.into();
        }
        let p = ProcSample {
            pid,
            starttime: st.starttime,
            ppid: st.ppid,
            uid: status.uid,
            comm: st.comm.clone(),
            cmdline,
            state: st.state,
            utime: st.utime,
            stime: st.stime,
            children_time: st.cutime + st.cstime,
            minflt: st.minflt,
            majflt: st.majflt,
            num_threads: st.num_threads,
            rss: st.rss_pages.saturating_mul(page),
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
        Ok(Self::memory(pid, starttime, &ranges, rollup, shm))
    }

    /// The expensive readings of one process and its `maps`, which is read once for both.
    pub fn memory_and_maps_of(
        &mut self,
        pid: i32,
        starttime: u64,
    ) -> perfpilot_sys::Result<(ProcMemory, Vec<MapRange>)> {
        let ranges = self.reader.numa_maps(pid)?;
        let rollup = self.reader.smaps_rollup(pid)?;
        let (maps, shm) = self.reader.maps_and_shm(pid)?;
        Ok((Self::memory(pid, starttime, &ranges, rollup, shm), maps))
    }

    fn memory(
        pid: i32,
        starttime: u64,
        ranges: &[NumaRange],
        rollup: SmapsRollup,
        shm: Vec<ShmAttach>,
    ) -> ProcMemory {
        let mut m = ProcMemory {
            pid,
            starttime,
            per_node: BTreeMap::new(),
            anon_per_node: BTreeMap::new(),
            shm_per_node: BTreeMap::new(),
            rollup,
            shm,
        };
        for r in ranges {
            for (node, bytes) in r.bytes_per_node() {
                let add = |map: &mut BTreeMap<u32, u64>| {
                    let v = map.entry(node).or_default();
                    *v = v.saturating_add(bytes);
                };
                add(&mut m.per_node);
                match r.kind {
                    MappingKind::Anon => add(&mut m.anon_per_node),
                    MappingKind::SysvShm { .. }
                    | MappingKind::PosixShm { .. }
                    | MappingKind::SharedAnon { .. } => add(&mut m.shm_per_node),
                    MappingKind::File { .. } => {}
                }
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PostgreSQL's postmaster as `/proc` shows it: 2 MiB of private memory and 8 MiB of its
    /// `/dev/zero` buffer pool resident, 4 MiB of that in a huge page.
    const NUMA_MAPS: &str = "\
55f1c1e3f000 default heap anon=512 dirty=512 N0=512 kernelpagesize_kB=4
7f5a1e400000 default file=/dev/zero\\040(deleted) dirty=2048 mapmax=3 N0=2048 kernelpagesize_kB=4
7f5aa2b1b000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=100 N0=100 kernelpagesize_kB=4
";
    const MAPS: &str = "\
55f1c1e3f000-55f1c203f000 rw-p 00000000 00:00 0 [heap]
7f5a1e400000-7f5aa2b00000 rw-s 00000000 00:01 2054 /dev/zero (deleted)
7f5aa2b1b000-7f5aa2b80000 r-xp 00000000 fd:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6
";
    const ROLLUP: &str = "\
55f1c1e3f000-7ffc00000000 ---p 00000000 00:00 0 [rollup]
Rss: 10640 kB
Anonymous: 2048 kB
AnonHugePages: 0 kB
ShmemPmdMapped: 4096 kB
";

    #[test]
    fn kept_descriptors_give_the_same_readings_as_files_opened_afresh() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let me = std::process::id() as i32;
        let mut sampler = Sampler::new(
            &Fs::live(),
            SamplerConfig {
                pids: Some(vec![me]),
                reuse_idle: false,
                per_cpu_ctxt: false,
                expensive_every: 0,
                ..SamplerConfig::default()
            },
        );
        // A thread that spins until told to stop, then sleeps (its CPU time frozen).
        let (spin, paused) = (
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicBool::new(false)),
        );
        let (s2, p2) = (spin.clone(), paused.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let spinner = std::thread::spawn(move || {
            let link = std::fs::read_link("/proc/thread-self").unwrap();
            let tid: i32 = link.file_name().unwrap().to_str().unwrap().parse().unwrap();
            tx.send(tid).unwrap();
            let mut x = 0u64;
            while s2.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            p2.store(true, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_secs(60));
        });
        let tid = rx.recv().unwrap();
        let ticks = |s: &Sample| -> u64 {
            let p = s.processes.iter().find(|p| p.pid == me).unwrap();
            let t = p.threads.iter().find(|t| t.tid == tid).unwrap();
            t.utime + t.stime
        };
        let afresh = || {
            let t = ProcReader::new(&Fs::live()).task_stat(me, tid).unwrap();
            t.utime + t.stime
        };
        // Files are kept once they were opened in two samples in a row.
        sampler.sample().unwrap();
        let first = ticks(&sampler.sample().unwrap());
        assert!(
            sampler.kept_open() >= 2,
            "stat of the process and of its threads kept"
        );
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while afresh() < first + 5 && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        spin.store(false, Ordering::SeqCst);
        while !paused.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let second = ticks(&sampler.sample().unwrap());
        assert!(
            second >= first + 5,
            "the kept descriptor read {first} then {second}"
        );
        assert_eq!(second, afresh());
        drop(spinner);
    }

    #[test]
    fn shared_anonymous_memory_is_counted_as_the_processs_shared_memory() {
        let root = std::env::temp_dir().join(format!("perfpilot-sampler-{}", std::process::id()));
        let dir = root.join("proc/10");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("numa_maps"), NUMA_MAPS).unwrap();
        std::fs::write(dir.join("maps"), MAPS).unwrap();
        std::fs::write(dir.join("smaps_rollup"), ROLLUP).unwrap();
        let mut sampler = Sampler::new(&Fs::at(&root), SamplerConfig::default());
        let m = sampler.memory_of(10, 1);
        let both = sampler.memory_and_maps_of(10, 1);
        std::fs::remove_dir_all(&root).unwrap();
        let m = m.unwrap();
        // Read with the maps (one reading of them for both), the memory is the same.
        let (m2, maps) = both.unwrap();
        assert_eq!(m2, m);
        assert_eq!(maps.len(), 3);
        assert_eq!(m.shm_per_node[&0], 8 << 20);
        assert_eq!(m.anon_per_node[&0], 2 << 20);
        assert_eq!(m.per_node[&0], (10 << 20) + 100 * 4096);
        assert_eq!(m.rollup.shmem_pmd_mapped, 4 << 20);
        assert_eq!(m.shm, vec![ShmAttach::SharedAnon { inode: 2054 }]);
    }
}
