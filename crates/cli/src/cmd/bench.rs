//! `perfpilot bench`: benchmarks that print figures, and the synthetic load they use.
//!
//! - `bench sample` spawns a population of processes and threads and reports the CPU time of a
//!   full cheap sample and of one expensive memory reading per process;
//! - `bench load` is that population's member: threads that sleep or spin, memory that is
//!   touched (optionally with `MADV_HUGEPAGE`). It prints `ready` and runs until its standard
//!   input closes. Tests use it as a workload they spawn and own.
//! - `bench drive` (`bench_drive.rs`) measures `perfpilot drive`'s CPU per request against wrk's.
//! - `bench read` (`bench_read.rs`) reads files, sequentially or at random, likewise.
//! - `bench verdicts` (`bench_verdicts.rs`) replays a signal recorded with nothing changed as
//!   no-change trials and prints how often their verdicts decided something.
//! - `bench search` (`bench_search.rs`) scores the study's iterated search on a known answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use perfpilot_observe::{Fs, Sampler, SamplerConfig};
use perfpilot_sys::mapping::AnonMapping;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Subcommand)]
enum BenchWhat {
    /// CPU cost of sampling a large population of processes and threads.
    Sample(SampleBench),
    /// A synthetic process: N threads that sleep or spin, and touched memory.
    Load(LoadArgs),
    /// CPU per request of `perfpilot drive` against wrk's, side by side (nginx pinned to one
    /// CPU, the clients to another).
    Drive(super::bench_drive::DriveBench),
    /// A reader of a directory's files: sequential passes (cold) or random blocks.
    Read(super::bench_read::ReadArgs),
    /// Replay a signal recorded with nothing changed (scripts/signal-trace) as no-change trials
    /// at every start: how often a verdict decides something from noise alone.
    Verdicts(super::bench_verdicts::VerdictsArgs),
    /// The study's iterated search on a known-answer bed (a planted response surface with
    /// 5 % noise per trial), once per seed: the chosen configuration against the true best,
    /// and the trials taken against an exhaustive run's.
    Search(super::bench_search::SearchArgs),
}

#[derive(Args)]
struct SampleBench {
    /// Processes to spawn.
    #[arg(long, default_value_t = 1000)]
    processes: usize,
    /// Threads in all (spread over the processes).
    #[arg(long, default_value_t = 10_000)]
    threads: usize,
    /// Full samples to time.
    #[arg(long, default_value_t = 12)]
    rounds: usize,
    /// Time only the default path (idle processes carried over, descriptors kept open): what
    /// a profile of the daemon's cheap sample should see, without the other paths mixed in.
    #[arg(long)]
    default_only: bool,
}

#[derive(Args, Clone)]
pub struct LoadArgs {
    /// Threads, the main thread included.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Spin instead of sleeping.
    #[arg(long)]
    busy: bool,
    /// Anonymous memory to map and touch, in MiB.
    #[arg(long, default_value_t = 0)]
    touch_mib: usize,
    /// `madvise(MADV_HUGEPAGE)` the memory before touching it.
    #[arg(long)]
    hugepage: bool,
    /// Start one more (sleeping) thread this many seconds after `ready`.
    #[arg(long, value_name = "SECONDS")]
    late_thread: Option<f64>,
    /// A label that only shows in the command line (to tell loads apart, e.g. in a config's
    /// `match = { cmdline = … }`).
    #[arg(long)]
    tag: Option<String>,
}

pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    match a.what {
        BenchWhat::Sample(s) => sample(s),
        BenchWhat::Load(l) => load(l),
        BenchWhat::Drive(d) => super::bench_drive::run(d),
        BenchWhat::Read(r) => super::bench_read::run(r),
        BenchWhat::Verdicts(v) => super::bench_verdicts::run(v),
        BenchWhat::Search(s) => super::bench_search::run(s),
    }
}

fn load(a: LoadArgs) -> anyhow::Result<()> {
    // Kept mapped until the load exits.
    let mut _mem = None;
    if a.touch_mib > 0 {
        let mut m = AnonMapping::new(a.touch_mib << 20)
            .with_context(|| format!("mapping {} MiB of anonymous memory", a.touch_mib))?;
        if a.hugepage {
            m.advise_hugepage()
                .context("asking for transparent huge pages")?;
        }
        m.touch();
        _mem = Some(m);
    }
    for _ in 1..a.threads.max(1) {
        let busy = a.busy;
        std::thread::spawn(move || {
            if busy {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            } else {
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
        });
    }
    println!("ready");
    std::io::stdout().flush()?;
    if let Some(after) = a.late_thread {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(after.max(0.0)));
            std::thread::spawn(|| {
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            });
        });
    }
    // Run until the parent closes our standard input (or kills us).
    let mut buf = [0u8; 64];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
    Ok(())
}

/// A spawned `bench load` process, killed on drop.
pub struct LoadChild(pub Child);

impl LoadChild {
    fn spawn(args: &[String]) -> anyhow::Result<LoadChild> {
        let exe = std::env::current_exe().context("locating the perfpilot binary")?;
        let mut child = Command::new(exe)
            .args(["bench", "load"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning a bench load process")?;
        let out = child.stdout.take().context("no stdout")?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        if line.trim() != "ready" {
            let _ = child.kill();
            bail!("bench load did not start (said {line:?})");
        }
        Ok(LoadChild(child))
    }
}

impl Drop for LoadChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cpu_ms<T>(f: impl FnOnce() -> T) -> (T, f64, f64) {
    let c0 = perfpilot_sys::self_cpu_time();
    let w0 = Instant::now();
    let r = f();
    let cpu = (perfpilot_sys::self_cpu_time() - c0).as_secs_f64() * 1e3;
    (r, cpu, w0.elapsed().as_secs_f64() * 1e3)
}

fn sample(a: SampleBench) -> anyhow::Result<()> {
    if a.processes == 0 || a.threads < a.processes {
        bail!(
            "--threads ({}) must be at least --processes ({}), which must be positive",
            a.threads,
            a.processes
        );
    }
    eprintln!(
        "spawning {} processes with {} threads in all …",
        a.processes, a.threads
    );
    let mut children = Vec::with_capacity(a.processes);
    for i in 0..a.processes {
        let t = a.threads / a.processes + usize::from(i < a.threads % a.processes);
        children.push(LoadChild::spawn(&["--threads".into(), t.to_string()])?);
    }
    let pids: Vec<i32> = children.iter().map(|c| c.0.id() as i32).collect();
    let fs = Fs::live();
    perfpilot_sys::raise_open_files_limit(1 << 18);
    let mut report = Vec::new();
    // (threads, carry idle over, keep descriptors open, what): every path side by side in one
    // run, so that their ratios hold on a noisy machine.
    let modes = [
        (
            true,
            false,
            false,
            "threads read every time, files opened each time",
        ),
        (
            true,
            false,
            true,
            "threads read every time, descriptors kept open",
        ),
        (
            true,
            true,
            false,
            "idle processes carried over, files opened each time",
        ),
        (
            true,
            true,
            true,
            "idle processes carried over, descriptors kept open (default)",
        ),
        (false, false, false, "no threads, files opened each time"),
        (false, false, true, "no threads, descriptors kept open"),
    ];
    let mut means = Vec::new();
    for (threads, reuse_idle, keep, what) in modes {
        if a.default_only && !(threads && reuse_idle && keep) {
            continue;
        }
        let config = SamplerConfig {
            threads,
            reuse_idle,
            expensive_every: 0,
            keep_open: if keep {
                SamplerConfig::default().keep_open
            } else {
                0
            },
            ..SamplerConfig::default()
        };
        let m = sample_mode(&fs, config, a.rounds)?;
        report.push(m.line(what));
        means.push((m.mean, m.counted));
    }
    if a.default_only {
        drop(children);
        println!("{}", report.join("\n"));
        return Ok(());
    }
    // A thread's cost: reading every thread minus reading none, over the threads read.
    for (with, without, what) in [
        (0, 4, "files opened each time"),
        (1, 5, "descriptors kept open"),
    ] {
        let (m1, (_, t)) = means[with];
        let (m0, (p, _)) = means[without];
        report.push(format!(
            "per thread, {what}: {:.2} µs CPU; per process without threads: {:.2} µs",
            (m1 - m0) * 1e3 / t.max(1) as f64,
            m0 * 1e3 / p.max(1) as f64
        ));
    }
    report.push(expensive_reading(&fs, &pids));
    drop(children);
    for line in report {
        println!("{line}");
    }
    Ok(())
}

/// What `rounds` cheap samples of one sampler configuration cost.
struct ModeCost {
    /// Mean CPU per sample, ms.
    mean: f64,
    /// CPU per sample, ms, sorted.
    cpu: Vec<f64>,
    /// Wall time per sample, ms, sorted.
    wall: Vec<f64>,
    /// Processes and threads the last sample read.
    counted: (usize, usize),
    /// Descriptors the sampler kept open.
    kept_open: usize,
}

impl ModeCost {
    fn line(&self, what: &str) -> String {
        let (cpu, wall) = (&self.cpu, &self.wall);
        format!(
            "cheap sample, {what}: {} processes, {} threads, {} descriptors kept; CPU mean {:.1} ms, median {:.1} ms (min {:.1}, max {:.1}), wall median {:.1} ms; at a 5 s interval: {:.2} % of one CPU",
            self.counted.0,
            self.counted.1,
            self.kept_open,
            self.mean,
            cpu[cpu.len() / 2],
            cpu[0],
            cpu[cpu.len() - 1],
            wall[wall.len() / 2],
            self.mean / 5000.0 * 100.0
        )
    }
}

/// A first sample (not counted: it opens and learns everything), then `rounds` measured ones.
fn sample_mode(fs: &Fs, config: SamplerConfig, rounds: usize) -> anyhow::Result<ModeCost> {
    let mut s = Sampler::new(fs, config);
    let (first, _, _) = cpu_ms(|| s.sample());
    let first = first?;
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    let mut counted = (0, 0);
    for _ in 0..rounds {
        let (r, c, w) = cpu_ms(|| s.sample());
        let r = r?;
        counted = (
            r.processes.len(),
            r.processes.iter().map(|p| p.threads.len()).sum::<usize>(),
        );
        cpu.push(c);
        wall.push(w);
    }
    drop(first);
    let mean = cpu.iter().sum::<f64>() / cpu.len().max(1) as f64;
    cpu.sort_by(f64::total_cmp);
    wall.sort_by(f64::total_cmp);
    Ok(ModeCost {
        mean,
        cpu,
        wall,
        counted,
        kept_open: s.kept_open(),
    })
}

/// The expensive reading (numa_maps, smaps_rollup, maps) of up to 200 of `pids`, per process.
fn expensive_reading(fs: &Fs, pids: &[i32]) -> String {
    let mut s = Sampler::new(fs, SamplerConfig::default());
    let n = pids.len().min(200);
    let (res, c, w) = cpu_ms(|| {
        let mut ok = 0;
        for &pid in &pids[..n] {
            if s.memory_of(pid, 0).is_ok() {
                ok += 1;
            }
        }
        ok
    });
    format!(
        "expensive reading (numa_maps + smaps_rollup + maps) of {res}/{n} processes: {:.3} ms CPU and {:.3} ms wall per process",
        c / n.max(1) as f64,
        w / n.max(1) as f64
    )
}
