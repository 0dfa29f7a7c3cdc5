//! The batch: `sessions` threads started together, each running its jobs in turn (the data
//! step first, the other jobs rotated by session so that different jobs overlap), every job
//! measured and logged as it ends. A failed job is logged and the session goes on with the
//! next one that does not need its output.

use std::path::PathBuf;
use std::time::Instant;

use crate::Error;
use crate::data::ROW_BYTES;
use crate::job::{self, JobKind};
use crate::log::{JobLog, JobRecord, JobStatus, Meter};

/// What a batch runs.
#[derive(Debug, Clone)]
pub struct BatchConfig {
    /// The batch directory: `data/`, `work/`, `out/` and (by default) `logs/` under it.
    pub dir: PathBuf,
    /// Where the job logs go (default `DIR/logs`).
    pub logs: PathBuf,
    /// Concurrent sessions.
    pub sessions: u32,
    /// The table size of each session, bytes.
    pub size_bytes: u64,
    /// The seed of the generated data.
    pub seed: u64,
    /// The jobs of a session; `gen` (if listed) runs first, the rest rotated by session.
    pub jobs: Vec<JobKind>,
    /// How many times each session runs its non-`gen` jobs.
    pub rounds: u32,
    /// The I/O buffer of scans and writes, bytes (SAS `bufsize`).
    pub bufsize: usize,
    /// The memory of one sorted run, bytes (SAS `sortsize`).
    pub sortsize: usize,
    /// Rows the fit reads.
    pub fit_rows: u64,
    /// Newton iterations of the fit.
    pub fit_iterations: u32,
    /// Single-row reads of a lookup job.
    pub lookups: u64,
    /// Whether reading jobs drop the table's cached pages first, so that reads reach the
    /// device as for a table larger than memory.
    pub cold: bool,
}

impl BatchConfig {
    /// Rows per session's table.
    pub fn rows(&self) -> u64 {
        self.size_bytes / ROW_BYTES as u64
    }

    /// The jobs session `s` runs, in order.
    pub fn session_jobs(&self, s: u32) -> Vec<JobKind> {
        let mut out = Vec::new();
        if self.jobs.contains(&JobKind::Gen) {
            out.push(JobKind::Gen);
        }
        let rest: Vec<JobKind> = self
            .jobs
            .iter()
            .copied()
            .filter(|k| *k != JobKind::Gen)
            .collect();
        for _ in 0..self.rounds {
            for i in 0..rest.len() {
                out.push(rest[(i + s as usize) % rest.len()]);
            }
        }
        out
    }
}

/// What a batch did.
#[derive(Debug, Clone)]
pub struct BatchOutcome {
    /// Every job's record, in the order they ended.
    pub jobs: Vec<JobRecord>,
    /// Wall-clock seconds from the first job's start to the last one's end.
    pub elapsed_s: f64,
}

impl BatchOutcome {
    /// The jobs that failed.
    pub fn failed(&self) -> impl Iterator<Item = &JobRecord> {
        self.jobs.iter().filter(|j| j.status == JobStatus::Failed)
    }
}

/// Runs the batch: the sessions on their own threads, every job logged under `cfg.logs`.
pub fn run_batch(cfg: &BatchConfig) -> Result<BatchOutcome, Error> {
    if cfg.sessions == 0 {
        return Err(Error::Other("--sessions must be at least 1".into()));
    }
    if cfg.jobs.is_empty() {
        return Err(Error::Other("--jobs names no job".into()));
    }
    let log = JobLog::create(&cfg.logs)?;
    let start = Instant::now();
    let results: Vec<Result<Vec<JobRecord>, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..cfg.sessions)
            .map(|s| {
                let log = &log;
                std::thread::Builder::new()
                    .name(format!("session{s:02}"))
                    .spawn_scoped(scope, move || session(cfg, log, s, start))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(Error::Other("a session thread panicked".into()))),
                Err(e) => Err(Error::Other(format!("cannot start a session thread: {e}"))),
            })
            .collect()
    });
    let elapsed_s = start.elapsed().as_secs_f64();
    let mut jobs = Vec::new();
    for r in results {
        jobs.extend(r?);
    }
    jobs.sort_by_key(|j| j.start_ms);
    Ok(BatchOutcome { jobs, elapsed_s })
}

/// One session: its jobs in turn. After a failed `gen` the jobs that read its table are
/// logged as failed without running.
fn session(
    cfg: &BatchConfig,
    log: &JobLog,
    s: u32,
    start: Instant,
) -> Result<Vec<JobRecord>, Error> {
    let mut out = Vec::new();
    let mut no_table: Option<String> = None;
    for (i, kind) in cfg.session_jobs(s).into_iter().enumerate() {
        let seq = i as u32 + 1;
        let meter = Meter::start(start)?;
        let outcome = match &no_table {
            Some(why) => Err(Error::Other(format!("not run: {why}"))),
            None => job::run(kind, cfg, s, seq),
        };
        let rec = meter.finish(s, seq, kind.name(), outcome)?;
        if kind == JobKind::Gen && rec.status == JobStatus::Failed {
            no_table = Some(format!(
                "the gen job of session {s} failed ({})",
                rec.error.as_deref().unwrap_or("")
            ));
        }
        log.write(&rec)?;
        out.push(rec);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &std::path::Path) -> BatchConfig {
        BatchConfig {
            dir: dir.to_path_buf(),
            logs: dir.join("logs"),
            sessions: 2,
            size_bytes: 2 << 20,
            seed: 11,
            jobs: JobKind::ALL.to_vec(),
            rounds: 1,
            bufsize: 256 << 10,
            sortsize: 512 << 10,
            fit_rows: 5_000,
            fit_iterations: 5,
            lookups: 2_000,
            cold: true,
        }
    }

    #[test]
    fn sessions_start_with_gen_and_rotate_the_other_jobs() {
        let c = cfg(std::path::Path::new("/x"));
        let names = |s| {
            c.session_jobs(s)
                .into_iter()
                .map(JobKind::name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(0), ["gen", "sort-agg", "fit", "lookup"]);
        assert_eq!(names(1), ["gen", "fit", "lookup", "sort-agg"]);
    }

    #[test]
    fn a_small_batch_runs_every_job_and_its_outputs_are_sorted_and_identical_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path());
        let o = run_batch(&c).unwrap();
        assert_eq!(o.jobs.len(), 8);
        assert_eq!(o.failed().count(), 0, "{:?}", o.jobs);
        let sorted = dir.path().join("out/session00/sorted.dat");
        let bytes = std::fs::read(&sorted).unwrap();
        let keys: Vec<(u32, u64)> = bytes
            .chunks(ROW_BYTES)
            .map(|b| crate::data::Row::decode(b).sort_key())
            .collect();
        assert!(keys.windows(2).all(|w| w[0] <= w[1]));
        // The filter keeps about 70 % of the rows.
        let kept = keys.len() as f64 / c.rows() as f64;
        assert!((0.6..0.8).contains(&kept), "{kept}");
        // Several sort runs were merged (sortsize is a quarter of the table).
        let sort = o.jobs.iter().find(|j| j.job == "sort-agg").unwrap();
        assert!(sort.written_bytes > 2 * bytes.len() as u64 - 1, "{sort:?}");
        let means = std::fs::read_to_string(dir.path().join("out/session00/means.csv")).unwrap();
        let table = std::fs::read(dir.path().join("data/session01.dat")).unwrap();
        let again = tempfile::tempdir().unwrap();
        run_batch(&cfg(again.path())).unwrap();
        assert_eq!(
            std::fs::read(again.path().join("data/session01.dat")).unwrap(),
            table
        );
        assert_eq!(
            std::fs::read_to_string(again.path().join("out/session00/means.csv")).unwrap(),
            means
        );
        // The work area holds no sort runs afterwards.
        let left = std::fs::read_dir(dir.path().join("work/session00"))
            .unwrap()
            .count();
        assert_eq!(left, 0);
    }

    #[test]
    fn a_failed_gen_fails_the_jobs_that_need_its_table_and_the_rest_of_the_batch_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cfg(dir.path());
        // Session 1's table path is taken by a directory: its gen cannot create the file.
        std::fs::create_dir_all(dir.path().join("data/session01.dat")).unwrap();
        c.jobs = vec![JobKind::Gen, JobKind::Lookup];
        let o = run_batch(&c).unwrap();
        let failed: Vec<_> = o.failed().map(|j| (j.session, j.job.clone())).collect();
        assert_eq!(failed, [(1, "gen".to_string()), (1, "lookup".to_string())]);
        let lookup = o
            .jobs
            .iter()
            .find(|j| j.session == 1 && j.job == "lookup")
            .unwrap();
        assert!(
            lookup
                .error
                .as_deref()
                .is_some_and(|e| e.contains("gen job of session 1 failed")),
            "{lookup:?}"
        );
        assert!(
            o.jobs
                .iter()
                .any(|j| j.session == 0 && j.job == "lookup" && j.status == JobStatus::Ok)
        );
    }

    #[test]
    fn a_table_of_another_size_is_an_error_saying_to_run_gen() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cfg(dir.path());
        c.sessions = 1;
        c.jobs = vec![JobKind::Gen];
        run_batch(&c).unwrap();
        c.jobs = vec![JobKind::Lookup];
        c.size_bytes *= 2;
        let o = run_batch(&c).unwrap();
        let e = o.jobs[0].error.clone().unwrap_or_default();
        assert!(
            e.contains("run the gen job with the same --size-mib"),
            "{e}"
        );
    }
}
