//! End-to-end tests of the `batchmix` binary on a tiny batch: every job logged with its
//! figures, a bad flag named, a failed job failing the exit status with its log named.

use std::process::Command;

use perfpilot_batchmix::{JOBS_FILE, JobStatus, read_jobs};

const BIN: &str = env!("CARGO_BIN_EXE_batchmix");

fn tiny(dir: &std::path::Path) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--dir").arg(dir).args([
        "--sessions",
        "2",
        "--size-mib",
        "2",
        "--sortsize-mib",
        "1",
        "--fit-rows",
        "5000",
        "--fit-iterations",
        "3",
        "--lookups",
        "1000",
        "--rounds",
        "1",
    ]);
    c
}

#[test]
fn a_tiny_batch_logs_every_job_with_real_time_cpu_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let out = tiny(dir.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("batch: 8 jobs in"), "{stdout}");
    let jobs = read_jobs(&dir.path().join("logs").join(JOBS_FILE)).unwrap();
    assert_eq!(jobs.len(), 8);
    for j in &jobs {
        assert_eq!(j.status, JobStatus::Ok, "{j:?}");
        assert!(j.real_s > 0.0, "{j:?}");
        let log = dir.path().join(format!(
            "logs/session{:02}-{:02}-{}.log",
            j.session, j.seq, j.job
        ));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("real time") && text.contains("system cpu time"),
            "{text}"
        );
    }
    let gen_ = jobs.iter().find(|j| j.job == "gen").unwrap();
    assert!(gen_.written_bytes >= 2 << 20, "{gen_:?}");
    let sort = jobs.iter().find(|j| j.job == "sort-agg").unwrap();
    assert!(sort.read_bytes >= 2 << 20, "{sort:?}");
}

#[test]
fn an_unknown_job_is_an_error_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = tiny(dir.path())
        .args(["--jobs", "gen,regress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--jobs") && err.contains("\"regress\""),
        "{err}"
    );
}

#[test]
fn a_failed_job_fails_the_batch_and_names_its_log() {
    let dir = tempfile::tempdir().unwrap();
    // Lookups without a table: every lookup fails, saying to run gen first.
    let out = tiny(dir.path())
        .args(["--jobs", "lookup"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("job lookup of session 0") && err.contains(".log"),
        "{err}"
    );
}
