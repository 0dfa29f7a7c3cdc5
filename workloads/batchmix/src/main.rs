//! `batchmix`: runs a mixed analytics batch (see the library docs) and prints a line per job
//! and the totals; exits 1 when a job failed, naming it and its log.

use std::path::PathBuf;

use clap::Parser;
use perfpilot_batchmix::{BatchConfig, JOBS_FILE, JobKind, JobStatus, run_batch};

/// A mixed analytics batch: concurrent sessions of scan/sort/aggregate, model-fit and
/// random-lookup jobs over generated data, each job logged like SAS fullstimer.
#[derive(Parser, Debug)]
#[command(name = "batchmix", version, about)]
struct Args {
    /// The batch directory (data/, work/, out/ and logs/ go under it).
    #[arg(long)]
    dir: PathBuf,
    /// Where the job logs and jobs.jsonl go (default DIR/logs).
    #[arg(long)]
    logs: Option<PathBuf>,
    /// Concurrent sessions.
    #[arg(long, default_value_t = 4)]
    sessions: u32,
    /// The table of each session, MiB.
    #[arg(long, default_value_t = 128)]
    size_mib: u64,
    /// The seed of the generated data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The jobs of a session, comma-separated (gen runs first, the rest rotate by session).
    #[arg(long, default_value = "gen,sort-agg,fit,lookup")]
    jobs: String,
    /// How many times a session runs its jobs other than gen.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// The I/O buffer of scans and writes, KiB (SAS bufsize).
    #[arg(long, default_value_t = 256)]
    bufsize_kib: usize,
    /// The memory of one sorted run, MiB (SAS sortsize).
    #[arg(long, default_value_t = 32)]
    sortsize_mib: usize,
    /// Rows the fit reads.
    #[arg(long, default_value_t = 1_000_000)]
    fit_rows: u64,
    /// Newton iterations of the fit (CPU time grows with it).
    #[arg(long, default_value_t = 300)]
    fit_iterations: u32,
    /// Single-row reads of a lookup job.
    #[arg(long, default_value_t = 200_000)]
    lookups: u64,
    /// Keep the tables' cached pages when a job starts (default: each reading job drops its
    /// table's pages first, as for data larger than memory).
    #[arg(long)]
    warm: bool,
}

fn main() {
    perfpilot_sys::signal::end_on_closed_pipe();
    let args = Args::parse();
    match run(args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("batchmix: {e}");
            std::process::exit(2);
        }
    }
}

fn run(args: Args) -> Result<bool, String> {
    let jobs = args
        .jobs
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(JobKind::parse)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--jobs: {e}"))?;
    if args.bufsize_kib == 0 || args.sortsize_mib == 0 {
        return Err("--bufsize-kib and --sortsize-mib must be at least 1".into());
    }
    let cfg = BatchConfig {
        logs: args.logs.clone().unwrap_or_else(|| args.dir.join("logs")),
        dir: args.dir,
        sessions: args.sessions,
        size_bytes: args.size_mib << 20,
        seed: args.seed,
        jobs,
        rounds: args.rounds,
        bufsize: args.bufsize_kib << 10,
        sortsize: args.sortsize_mib << 20,
        fit_rows: args.fit_rows,
        fit_iterations: args.fit_iterations,
        lookups: args.lookups,
        cold: !args.warm,
    };
    let o = run_batch(&cfg).map_err(|e| e.to_string())?;
    println!(
        "{:<8} {:>4} {:<9} {:>9} {:>9} {:>9} {:>10} {:>10}  status",
        "session", "step", "job", "real s", "user s", "sys s", "read MiB", "write MiB"
    );
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    for j in &o.jobs {
        println!(
            "{:<8} {:>4} {:<9} {:>9.2} {:>9.2} {:>9.2} {:>10.1} {:>10.1}  {}",
            j.session,
            j.seq,
            j.job,
            j.real_s,
            j.user_s,
            j.sys_s,
            mib(j.read_bytes),
            mib(j.written_bytes),
            match j.status {
                JobStatus::Ok => "ok".to_string(),
                JobStatus::Failed => format!("FAILED: {}", j.error.as_deref().unwrap_or("")),
            }
        );
    }
    let sum = |f: fn(&perfpilot_batchmix::JobRecord) -> f64| o.jobs.iter().map(f).sum::<f64>();
    println!(
        "batch: {} jobs in {:.2} s elapsed; job real time {:.2} s, user {:.2} s, system {:.2} s; read {:.1} MiB, written {:.1} MiB; log {}",
        o.jobs.len(),
        o.elapsed_s,
        sum(|j| j.real_s),
        sum(|j| j.user_s),
        sum(|j| j.sys_s),
        o.jobs.iter().map(|j| mib(j.read_bytes)).sum::<f64>(),
        o.jobs.iter().map(|j| mib(j.written_bytes)).sum::<f64>(),
        cfg.logs.join(JOBS_FILE).display()
    );
    let failed: Vec<_> = o.failed().collect();
    for j in &failed {
        eprintln!(
            "batchmix: job {} of session {} (step {}) failed: {} (log {})",
            j.job,
            j.session,
            j.seq,
            j.error.as_deref().unwrap_or(""),
            cfg.logs
                .join(format!(
                    "session{:02}-{:02}-{}.log",
                    j.session, j.seq, j.job
                ))
                .display()
        );
    }
    Ok(failed.is_empty())
}
