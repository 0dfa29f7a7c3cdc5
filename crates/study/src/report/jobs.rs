//! The per-job table of a batch study's report, in the manner of the seed's tables: for each
//! configuration and job, the mean real time, user and system CPU time and bytes of the job
//! over the trials that completed, from the job logs kept in each trial's detail.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use perfpilot_store::{TrialRecord, TrialStatus};
use perfpilot_units::MarkdownTable;
use serde::Serialize;

use perfpilot_drive::Measurement;

use crate::batch::{self, BatchJob};
use crate::stats;
use crate::trial::TrialDetail;

/// One job of one configuration, over its completed trials.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct JobTimes {
    /// The configuration's key.
    pub config: String,
    /// The job's name.
    pub job: String,
    /// Runs of the job counted (over every session, instance and trial).
    pub runs: usize,
    /// Mean real time, s.
    pub real_s: f64,
    /// Mean user CPU time, s.
    pub user_s: f64,
    /// Mean system CPU time, s.
    pub sys_s: f64,
    /// Mean MiB read.
    pub read_mib: f64,
    /// Mean MiB written.
    pub written_mib: f64,
}

/// A batch configuration's totals, over its completed trials.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BatchTotals {
    /// The configuration's key.
    pub config: String,
    /// Completed trials.
    pub trials: usize,
    /// Mean elapsed seconds.
    pub elapsed_s: f64,
    /// Mean CPU seconds of the batch's processes.
    pub cpu_s: f64,
    /// Mean core-equivalent CPU seconds (`None`: not measured).
    pub core_cpu_s: Option<f64>,
    /// Mean MiB/s read and written (`None`: no job log).
    pub mib_per_s: Option<f64>,
}

/// Elapsed, CPU and core-equivalent CPU per configuration, from the batch measurements.
pub fn batch_totals(trials: &[TrialRecord]) -> Vec<BatchTotals> {
    let mut by: BTreeMap<String, Vec<Measurement>> = BTreeMap::new();
    for t in trials.iter().filter(|t| t.status == TrialStatus::Ok) {
        let Some(m) = t
            .measurement
            .as_deref()
            .and_then(|j| Measurement::from_json(j).ok())
        else {
            continue;
        };
        if m.source == "batch" {
            by.entry(t.config.clone()).or_default().push(m);
        }
    }
    by.into_iter()
        .map(|(config, ms)| {
            let mean_of = |key: &str| {
                let v: Vec<f64> = ms
                    .iter()
                    .filter_map(|m| m.extra.get(key).copied())
                    .collect();
                (v.len() == ms.len()).then(|| stats::mean(&v))
            };
            BatchTotals {
                trials: ms.len(),
                elapsed_s: mean_of(batch::ELAPSED_S).unwrap_or(f64::NAN),
                cpu_s: mean_of(batch::CPU_S).unwrap_or(f64::NAN),
                core_cpu_s: mean_of(batch::CORE_CPU_S),
                mib_per_s: mean_of(batch::MIB_PER_S),
                config,
            }
        })
        .collect()
}

/// The "Batch totals" section (nothing without batch trials).
pub fn totals_markdown(s: &mut String, rows: &[BatchTotals]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "## Batch totals

Means over the completed trials; core-equivalent CPU weighs CPU time by the share of a core a thread gets while its SMT siblings are busy.
"
    );
    let mut t = MarkdownTable::new(&[
        "configuration",
        "trials",
        "elapsed s",
        "CPU s",
        "core-equivalent CPU s",
        "MiB/s",
    ]);
    let opt = |v: Option<f64>| v.map_or("–".to_string(), |x| format!("{x:.2}"));
    for r in rows {
        t.row(&[
            r.config.clone(),
            r.trials.to_string(),
            format!("{:.2}", r.elapsed_s),
            format!("{:.2}", r.cpu_s),
            opt(r.core_cpu_s),
            opt(r.mib_per_s),
        ]);
    }
    let _ = writeln!(s, "{}", t.render());
}

/// The per-job figures of the trials that completed, by configuration then job name.
pub fn job_times(trials: &[TrialRecord]) -> Vec<JobTimes> {
    let mut by: BTreeMap<(String, String), Vec<BatchJob>> = BTreeMap::new();
    for t in trials.iter().filter(|t| t.status == TrialStatus::Ok) {
        let Ok(d) = serde_json::from_str::<TrialDetail>(&t.detail) else {
            continue;
        };
        for j in d.jobs {
            by.entry((t.config.clone(), j.job.clone()))
                .or_default()
                .push(j);
        }
    }
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    by.into_iter()
        .map(|((config, job), js)| {
            let mean =
                |f: &dyn Fn(&BatchJob) -> f64| stats::mean(&js.iter().map(f).collect::<Vec<_>>());
            JobTimes {
                config,
                job,
                runs: js.len(),
                real_s: mean(&|j| j.real_s),
                user_s: mean(&|j| j.user_s),
                sys_s: mean(&|j| j.sys_s),
                read_mib: mean(&|j| mib(j.read_bytes)),
                written_mib: mean(&|j| mib(j.written_bytes)),
            }
        })
        .collect()
}

/// The batch sections of a report: totals per configuration, then job times.
pub fn sections(s: &mut String, totals: &[BatchTotals], jobs: &[JobTimes]) {
    totals_markdown(s, totals);
    markdown(s, jobs);
}

/// The "Job times" section (nothing when no trial kept job logs).
pub fn markdown(s: &mut String, rows: &[JobTimes]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "## Job times\n\nMeans per job run over the completed trials (from the job logs).\n"
    );
    let mut t = MarkdownTable::new(&[
        "configuration",
        "job",
        "runs",
        "real s",
        "user s",
        "system s",
        "MiB read",
        "MiB written",
    ]);
    for r in rows {
        t.row(&[
            r.config.clone(),
            r.job.clone(),
            r.runs.to_string(),
            format!("{:.2}", r.real_s),
            format!("{:.2}", r.user_s),
            format!("{:.2}", r.sys_s),
            format!("{:.1}", r.read_mib),
            format!("{:.1}", r.written_mib),
        ]);
    }
    let _ = writeln!(s, "{}", t.render());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::JobState;
    use perfpilot_store::TrialPhase;

    fn trial(config: &str, status: TrialStatus, jobs: Vec<BatchJob>) -> TrialRecord {
        let d = TrialDetail {
            jobs,
            ..TrialDetail::default()
        };
        TrialRecord {
            id: 0,
            study: 1,
            phase: TrialPhase::Race,
            round: 1,
            config: config.into(),
            factors: "[]".into(),
            status,
            reason: String::new(),
            value: Some(1.0),
            measurement: None,
            detail: serde_json::to_string(&d).unwrap(),
            created_ms: 0,
        }
    }

    fn job(name: &str, real: f64) -> BatchJob {
        BatchJob {
            job: name.into(),
            status: JobState::Ok,
            real_s: real,
            user_s: real / 2.0,
            read_bytes: 1 << 20,
            ..BatchJob::default()
        }
    }

    #[test]
    fn job_times_average_completed_trials_per_configuration_and_job() {
        let trials = vec![
            trial(
                "fs=ext4",
                TrialStatus::Ok,
                vec![job("fit", 2.0), job("sort", 1.0)],
            ),
            trial("fs=ext4", TrialStatus::Ok, vec![job("fit", 4.0)]),
            trial("fs=ext4", TrialStatus::Failed, vec![job("fit", 100.0)]),
            trial("fs=xfs", TrialStatus::Ok, vec![job("fit", 1.0)]),
        ];
        let rows = job_times(&trials);
        assert_eq!(rows.len(), 3);
        let fit = &rows[0];
        assert_eq!((fit.config.as_str(), fit.job.as_str()), ("fs=ext4", "fit"));
        assert_eq!(fit.runs, 2);
        assert!((fit.real_s - 3.0).abs() < 1e-9 && (fit.user_s - 1.5).abs() < 1e-9);
        assert!((fit.read_mib - 1.0).abs() < 1e-9);
        let mut s = String::new();
        markdown(&mut s, &rows);
        assert!(s.contains("| fs=xfs | fit | 1 | 1.00 | 0.50 |"), "{s}");
        let mut empty = String::new();
        markdown(&mut empty, &[]);
        assert!(empty.is_empty());
    }
}
