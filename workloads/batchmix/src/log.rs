//! The job log: what each job used, measured on its own thread like SAS's `fullstimer` (real
//! time, user and system CPU, bytes read and written), written as a text log per job and as
//! one JSON line per job in `jobs.jsonl`, the file `perfpilot study` reads.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use perfpilot_sys::Fs;
use perfpilot_sys::process::{ProcIo, parse_io, parse_stat};
use serde::{Deserialize, Serialize};

use crate::Error;

/// The file of job records (one JSON object per line) in the log directory.
pub const JOBS_FILE: &str = "jobs.jsonl";

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// It completed and its checks passed.
    Ok,
    /// It stopped on an error (the record's `error` says which).
    Failed,
}

/// What one job used (a line of `jobs.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The session it ran in, from 0.
    pub session: u32,
    /// Its place in the session, from 1.
    pub seq: u32,
    /// The job's name (`gen`, `sort-agg`, `fit`, `lookup`).
    pub job: String,
    /// Ok or failed.
    pub status: JobStatus,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall-clock seconds from start to end.
    pub real_s: f64,
    /// User CPU seconds of the job's thread.
    pub user_s: f64,
    /// System CPU seconds of the job's thread.
    pub sys_s: f64,
    /// Bytes the job read through system calls (`rchar`: page-cache hits included).
    pub read_bytes: u64,
    /// Bytes the job wrote through system calls (`wchar`).
    pub written_bytes: u64,
    /// Bytes fetched from storage for the job (`read_bytes` of `/proc/thread-self/io`).
    pub storage_read_bytes: u64,
    /// Bytes the job dirtied for storage (`write_bytes`).
    pub storage_written_bytes: u64,
    /// Milliseconds since the batch started when the job started.
    pub start_ms: u64,
    /// A figure of the job's result (rows written, the fit's log-likelihood, rows found), so
    /// runs can be checked against each other.
    pub result: String,
}

/// The thread's CPU times and I/O counters at one moment.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Instant,
    utime: u64,
    stime: u64,
    io: ProcIo,
}

fn read_thread() -> Result<Reading, Error> {
    let fs = Fs::live();
    let at = Instant::now();
    let stat_text = fs.read("proc/thread-self/stat").map_err(Error::Proc)?;
    let st =
        parse_stat(stat_text.as_bytes(), &fs.path("proc/thread-self/stat")).map_err(Error::Proc)?;
    let io_text = fs.read("proc/thread-self/io").map_err(Error::Proc)?;
    let io = parse_io(&io_text, &fs.path("proc/thread-self/io")).map_err(Error::Proc)?;
    Ok(Reading {
        at,
        utime: st.utime,
        stime: st.stime,
        io,
    })
}

/// Measures one job on the calling thread: started by [`Meter::start`], read by
/// [`Meter::finish`] on the same thread.
#[derive(Debug)]
pub struct Meter {
    start: Reading,
    start_ms: u64,
}

impl Meter {
    /// Starts measuring; `batch_start` is when the batch began.
    pub fn start(batch_start: Instant) -> Result<Meter, Error> {
        let start = read_thread()?;
        Ok(Meter {
            start_ms: start.at.duration_since(batch_start).as_millis() as u64,
            start,
        })
    }

    /// The record of the job measured since [`Meter::start`].
    pub fn finish(
        &self,
        session: u32,
        seq: u32,
        job: &str,
        outcome: Result<String, Error>,
    ) -> Result<JobRecord, Error> {
        let end = read_thread()?;
        let tick = perfpilot_sys::clock_ticks_per_sec() as f64;
        let (status, error, result) = match outcome {
            Ok(r) => (JobStatus::Ok, None, r),
            Err(e) => (JobStatus::Failed, Some(e.to_string()), String::new()),
        };
        let d = |a: u64, b: u64| b.saturating_sub(a);
        Ok(JobRecord {
            session,
            seq,
            job: job.to_string(),
            status,
            error,
            real_s: end.at.duration_since(self.start.at).as_secs_f64(),
            user_s: d(self.start.utime, end.utime) as f64 / tick,
            sys_s: d(self.start.stime, end.stime) as f64 / tick,
            read_bytes: d(self.start.io.rchar, end.io.rchar),
            written_bytes: d(self.start.io.wchar, end.io.wchar),
            storage_read_bytes: d(self.start.io.read_bytes, end.io.read_bytes),
            storage_written_bytes: d(self.start.io.write_bytes, end.io.write_bytes),
            start_ms: self.start_ms,
            result,
        })
    }
}

/// The text log of a job, in the shape of SAS's `fullstimer` notes.
pub fn fullstimer(r: &JobRecord) -> String {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut s = format!(
        "NOTE: job {} (session {}, step {}) {}.\n",
        r.job,
        r.session,
        r.seq,
        match r.status {
            JobStatus::Ok => "completed",
            JobStatus::Failed => "FAILED",
        }
    );
    if let Some(e) = &r.error {
        s.push_str(&format!("ERROR: {e}\n"));
    }
    s.push_str(&format!(
        "NOTE: used (total process time):\n      real time           {:.2} seconds\n      user cpu time       {:.2} seconds\n      system cpu time     {:.2} seconds\n      bytes read          {:.1} MiB ({:.1} MiB from storage)\n      bytes written       {:.1} MiB ({:.1} MiB to storage)\n",
        r.real_s,
        r.user_s,
        r.sys_s,
        mib(r.read_bytes),
        mib(r.storage_read_bytes),
        mib(r.written_bytes),
        mib(r.storage_written_bytes),
    ));
    if !r.result.is_empty() {
        s.push_str(&format!("NOTE: result: {}\n", r.result));
    }
    s
}

/// The log directory: a text log per job and `jobs.jsonl`, shared by the sessions.
#[derive(Debug)]
pub struct JobLog {
    dir: PathBuf,
    jsonl: Mutex<std::fs::File>,
}

impl JobLog {
    /// Creates `dir` and an empty `jobs.jsonl` in it.
    pub fn create(dir: &Path) -> Result<JobLog, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create the log directory", dir, e))?;
        let path = dir.join(JOBS_FILE);
        let f = std::fs::File::create(&path).map_err(|e| Error::io("create", &path, e))?;
        Ok(JobLog {
            dir: dir.to_path_buf(),
            jsonl: Mutex::new(f),
        })
    }

    /// Writes job `r`'s text log and appends its line to `jobs.jsonl`.
    pub fn write(&self, r: &JobRecord) -> Result<(), Error> {
        let path = self.dir.join(format!(
            "session{:02}-{:02}-{}.log",
            r.session, r.seq, r.job
        ));
        std::fs::write(&path, fullstimer(r)).map_err(|e| Error::io("write", &path, e))?;
        let mut line = serde_json::to_string(r).map_err(|e| Error::Other(e.to_string()))?;
        line.push('\n');
        let mut f = self
            .jsonl
            .lock()
            .map_err(|_| Error::Other("the job log's lock was poisoned".into()))?;
        let jsonl = self.dir.join(JOBS_FILE);
        f.write_all(line.as_bytes())
            .and_then(|()| f.flush())
            .map_err(|e| Error::io("append to", &jsonl, e))
    }
}

/// Reads `jobs.jsonl`; a malformed line is an error naming the file and line.
pub fn read_jobs(path: &Path) -> Result<Vec<JobRecord>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                Error::Other(format!(
                    "{}:{}: not a job record: {e}",
                    path.display(),
                    i + 1
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_on_this_thread_is_measured_with_its_cpu_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let m = Meter::start(Instant::now()).unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let back = std::fs::read(&path).unwrap();
        let mut x = 0u64;
        let until = Instant::now() + std::time::Duration::from_millis(150);
        while Instant::now() < until {
            x = x
                .wrapping_mul(31)
                .wrapping_add(back[x as usize % back.len()] as u64);
        }
        let r = m.finish(1, 2, "probe", Ok(format!("{x}"))).unwrap();
        assert!(r.written_bytes >= 1 << 20, "{r:?}");
        assert!(r.read_bytes >= 1 << 20, "{r:?}");
        assert!(r.real_s >= 0.15, "{r:?}");
        assert!(r.user_s + r.sys_s > 0.0, "{r:?}");
        let text = fullstimer(&r);
        assert!(text.contains("real time"), "{text}");
        assert!(text.contains("user cpu time"), "{text}");
    }

    #[test]
    fn records_written_are_read_back_and_a_bad_line_names_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let log = JobLog::create(dir.path()).unwrap();
        let m = Meter::start(Instant::now()).unwrap();
        let r = m
            .finish(0, 1, "gen", Err(Error::Other("disk full".into())))
            .unwrap();
        log.write(&r).unwrap();
        let back = read_jobs(&dir.path().join(JOBS_FILE)).unwrap();
        assert_eq!(back, vec![r]);
        let text = std::fs::read_to_string(dir.path().join("session00-01-gen.log")).unwrap();
        assert!(
            text.contains("FAILED") && text.contains("disk full"),
            "{text}"
        );
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "{}\n").unwrap();
        let e = read_jobs(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.jsonl:1:"), "{e}");
    }
}
