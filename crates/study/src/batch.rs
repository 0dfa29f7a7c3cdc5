//! Batch trials (`[load] kind = "batch"`): the deployment's command is a batch that runs to
//! completion. A trial runs the setup commands, starts the command on every instance (each in
//! its own process group), waits for all to exit within `load.timeout`, and measures the
//! elapsed time, the CPU time of the batch's processes (`getrusage(RUSAGE_CHILDREN)` before
//! and after) and, from the job logs it names, every job's times and bytes. A batch that
//! exits with an error or outlives its timeout fails the trial with its output's tail (the
//! run goes on); teardown and the knob guard run either way.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use perfpilot_drive::{CpuUsage, LoadShape, Measurement};
use perfpilot_store::TrialStatus;
use serde::{Deserialize, Serialize};

use crate::deploy::{self, Instance, KnobGuard, Role};
use crate::error::{JobLogError, TrialError};
use crate::layout::Layout;
use crate::spec::{Config, LoadKind, Study, render};
use crate::trial::{TrialContext, TrialDetail, TrialOutcome, objective_value};

/// `Measurement::extra` key: the batch's elapsed seconds.
pub const ELAPSED_S: &str = "elapsed_s";
/// `Measurement::extra` key: CPU seconds (user + system) of the batch's processes.
pub const CPU_S: &str = "cpu_s";
/// `Measurement::extra` key: MiB read and written (from the job logs) per elapsed second.
pub const MIB_PER_S: &str = "mib_per_s";
/// `Measurement::extra` key: core-equivalent CPU seconds (`observe::smt`): the CPU seconds
/// weighed by the share of a core a thread gets while its SMT siblings are busy.
pub const CORE_CPU_S: &str = "core_cpu_s";
/// `Measurement::extra` key: the SMT factor the core-equivalent CPU was computed with.
pub const SMT_FACTOR: &str = "smt_factor";
/// `Measurement::extra` key: MiB the jobs read.
pub const READ_MIB: &str = "read_mib";
/// `Measurement::extra` key: MiB the jobs wrote.
pub const WRITTEN_MIB: &str = "written_mib";

/// Lines of a failed batch's output quoted in the trial's reason.
const TAIL_LINES: usize = 5;

/// How a job ended, as its log says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// It completed.
    #[default]
    Ok,
    /// It failed.
    Failed,
}

/// One job of a batch, read from a job log line (batchmix's `jobs.jsonl`; fields not listed
/// here are ignored, those missing read as zero).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchJob {
    /// The instance whose log it came from.
    #[serde(default)]
    pub instance: usize,
    /// The session within the instance.
    #[serde(default)]
    pub session: u32,
    /// The job's name.
    pub job: String,
    /// How it ended.
    #[serde(default)]
    pub status: JobState,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall-clock seconds.
    #[serde(default)]
    pub real_s: f64,
    /// User CPU seconds.
    #[serde(default)]
    pub user_s: f64,
    /// System CPU seconds.
    #[serde(default)]
    pub sys_s: f64,
    /// Bytes read.
    #[serde(default)]
    pub read_bytes: u64,
    /// Bytes written.
    #[serde(default)]
    pub written_bytes: u64,
}

/// Reads a job log (one JSON object per line); an error names the file and line.
pub fn read_job_log(path: &Path, instance: usize) -> Result<Vec<BatchJob>, JobLogError> {
    let text = std::fs::read_to_string(path).map_err(|source| JobLogError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut j: BatchJob = serde_json::from_str(line).map_err(|source| JobLogError::Record {
            path: path.to_path_buf(),
            line: i + 1,
            source,
        })?;
        j.instance = instance;
        jobs.push(j);
    }
    Ok(jobs)
}

/// A running instance of the batch: killed with its process group when dropped early.
struct Running {
    inst: Instance,
    status: Option<ExitStatus>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = perfpilot_sys::signal::kill_group(self.inst.pid);
        }
    }
}

/// The last lines of an instance's output (stdout and stderr together).
fn tail(path: &Path) -> String {
    let lines = perfpilot_lab::log::tail(path, TAIL_LINES);
    if lines.is_empty() {
        return "; it printed nothing".into();
    }
    format!("; its output ends: {}", lines.join(" | "))
}

/// Runs one batch trial of `config` (`tconf`: the configuration with the scratch file
/// system's `mount` and `device`, for templates) on `layout`, `knobs` already set; restores
/// the knobs before it returns.
pub(crate) fn run(
    ctx: &TrialContext<'_>,
    tconf: &Config,
    layout: &Layout,
    mut knobs: KnobGuard,
    mut detail: TrialDetail,
) -> TrialOutcome {
    let study = ctx.study;
    let LoadKind::Batch { timeout, jobs, .. } = &study.load.kind else {
        return failed(detail, "not a batch study".into());
    };
    let n = layout.instances.len();
    let values = deploy::values_for(tconf, n, None);
    let workdir = study.deployment.workdir.as_deref();
    let result = study
        .deployment
        .setup
        .iter()
        .map(|cmd| render(cmd, &values))
        .try_for_each(|cmd| {
            deploy::shell(&cmd, workdir).map_err(|source| TrialError::Setup { cmd, source })
        })
        .and_then(|()| execute(ctx, tconf, layout, *timeout, jobs.as_deref(), &mut detail));
    for cmd in &study.deployment.teardown {
        let cmd = render(cmd, &values);
        if let Err(e) = deploy::shell(&cmd, workdir) {
            detail.notes.push(format!("teardown {cmd:?}: {e}"));
        }
    }
    let restore = knobs.restore();
    if !restore.is_empty() {
        detail
            .notes
            .push(format!("knobs not restored: {}", restore.join("; ")));
    }
    let m = match result {
        Ok(m) => m,
        Err(e) => return failed(detail, e.to_string()),
    };
    let value = objective_value(&study.objective.goal, &m);
    let (status, reason) = match value {
        Some(_) => (TrialStatus::Ok, String::new()),
        None => (
            TrialStatus::Failed,
            "the batch's measurement lacks the objective's value (MiB/s needs load.jobs: a job log with read_bytes and written_bytes)".to_string(),
        ),
    };
    TrialOutcome {
        status,
        reason,
        value,
        measurement: Some(m),
        detail,
    }
}

fn failed(detail: TrialDetail, reason: String) -> TrialOutcome {
    TrialOutcome {
        status: TrialStatus::Failed,
        reason,
        value: None,
        measurement: None,
        detail,
    }
}

/// Starts the instances, waits for them within `timeout`, reads the job logs and builds the
/// measurement; an error is the trial's failure.
fn execute(
    ctx: &TrialContext<'_>,
    tconf: &Config,
    layout: &Layout,
    timeout: Duration,
    jobs: Option<&str>,
    detail: &mut TrialDetail,
) -> Result<Measurement, TrialError> {
    let stat_before = perfpilot_sys::stat::read_kernel_stat(&perfpilot_sys::Fs::live()).ok();
    let cpu_before = perfpilot_sys::children_cpu_time();
    let wall_start = SystemTime::now();
    let start = Instant::now();
    let mut running = start_instances(ctx.study, tconf, layout, detail)?;
    wait_all(ctx, &mut running, start, timeout)?;
    let elapsed = start.elapsed().as_secs_f64().max(1e-6);
    let cpu_s = perfpilot_sys::children_cpu_time()
        .saturating_sub(cpu_before)
        .as_secs_f64();
    let stat_after = perfpilot_sys::stat::read_kernel_stat(&perfpilot_sys::Fs::live()).ok();
    let core = match (stat_before, stat_after) {
        (Some(a), Some(b)) => Some(core_weight(ctx, layout, &a, &b)),
        _ => None,
    };
    // The job logs, read whatever the exit status (a failed job is named by them).
    let log_problems = match jobs {
        Some(t) => read_job_logs(ctx.study, tconf, layout, t, detail),
        None => Vec::new(),
    };
    judge(&running, log_problems, detail)?;
    let mut m = measurement(
        ctx.study,
        detail,
        wall_start,
        elapsed,
        cpu_s,
        jobs.is_some(),
    );
    if let Some((w, factor)) = core {
        m.extra.insert(CORE_CPU_S.into(), cpu_s * w);
        m.extra.insert(SMT_FACTOR.into(), factor);
    }
    Ok(m)
}

/// Starts the batch on every instance of `layout` (ports from the deployment's base port); the
/// command lines go to `detail`.
fn start_instances(
    study: &Study,
    tconf: &Config,
    layout: &Layout,
    detail: &mut TrialDetail,
) -> Result<Vec<Running>, TrialError> {
    let ports: Vec<u16> = (0..layout.instances.len())
        .map(|i| study.deployment.base_port.saturating_add(i as u16))
        .collect();
    let started =
        deploy::start_instances(study, tconf, layout, &ports, Role::Batch, &mut detail.notes)?;
    detail.argv.extend(started.iter().map(|i| i.argv.clone()));
    Ok(started
        .into_iter()
        .map(|inst| Running { inst, status: None })
        .collect())
}

/// Waits for every instance to exit, within `timeout` of `start`; an instance still running
/// then is killed (when `running` is dropped).
fn wait_all(
    ctx: &TrialContext<'_>,
    running: &mut [Running],
    start: Instant,
    timeout: Duration,
) -> Result<(), TrialError> {
    loop {
        for r in running.iter_mut() {
            if r.status.is_none()
                && let Some(s) = r.inst.server.exit_status()
            {
                r.status = Some(s);
            }
        }
        if running.iter().all(|r| r.status.is_some()) {
            return Ok(());
        }
        if ctx.stop.load(Ordering::SeqCst) {
            return Err(TrialError::Interrupted);
        }
        if start.elapsed() > timeout {
            let late: Vec<String> = running
                .iter()
                .filter(|r| r.status.is_none())
                .map(|r| format!("instance {}{}", r.inst.index, tail(&r.inst.log)))
                .collect();
            return Err(TrialError::BatchTimeout {
                timeout,
                late: late.join("; "),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads the job log of every instance (`template`: `load.jobs`) into `detail`; returns the
/// logs that could not be read.
fn read_job_logs(
    study: &Study,
    tconf: &Config,
    layout: &Layout,
    template: &str,
    detail: &mut TrialDetail,
) -> Vec<JobLogError> {
    let n = layout.instances.len();
    let mut problems = Vec::new();
    for (i, il) in layout.instances.iter().enumerate() {
        let port = study.deployment.base_port.saturating_add(i as u16);
        let values = deploy::values_for(tconf, n, Some((il, port)));
        let path = PathBuf::from(render(template, &values));
        match read_job_log(&path, i) {
            Ok(j) => detail.jobs.extend(j),
            Err(e) => problems.push(e),
        }
    }
    problems
}

/// Fails the trial when an instance exited unsuccessfully, a job log could not be read, or a
/// job log names failed jobs.
fn judge(
    running: &[Running],
    log_problems: Vec<JobLogError>,
    detail: &TrialDetail,
) -> Result<(), TrialError> {
    let failed_jobs: Vec<String> = detail
        .jobs
        .iter()
        .filter(|j| j.status == JobState::Failed)
        .map(|j| {
            format!(
                "job {} (instance {}, session {}): {}",
                j.job,
                j.instance,
                j.session,
                j.error.as_deref().unwrap_or("failed")
            )
        })
        .collect();
    if let Some(r) = running
        .iter()
        .find(|r| r.status.is_some_and(|s| !s.success()))
    {
        return Err(TrialError::BatchExited {
            instance: r.inst.index,
            status: r.status.map(|s| s.to_string()).unwrap_or_default(),
            tail: tail(&r.inst.log),
            failed: failed_jobs,
        });
    }
    if !log_problems.is_empty() {
        return Err(TrialError::JobLogs(log_problems));
    }
    if !failed_jobs.is_empty() {
        return Err(TrialError::JobsFailed(failed_jobs));
    }
    Ok(())
}

/// The weight turning the batch's CPU seconds into core-equivalent seconds (and the SMT
/// factor used): the busy-weighted mean over the CPUs the instances could run on, from the
/// per-CPU times of `/proc/stat` before and after the batch.
fn core_weight(
    ctx: &TrialContext<'_>,
    layout: &Layout,
    a: &perfpilot_sys::stat::KernelStat,
    b: &perfpilot_sys::stat::KernelStat,
) -> (f64, f64) {
    use perfpilot_observe::smt::{FactorSource, SmtFactors, mean_weight};
    let mut busy = std::collections::BTreeMap::new();
    for (cpu, t1) in &b.cpus {
        let Some(t0) = a.cpus.get(cpu) else { continue };
        let total = t1.total().saturating_sub(t0.total());
        let idle = (t1.idle + t1.iowait).saturating_sub(t0.idle + t0.iowait);
        if total > 0 {
            busy.insert(
                *cpu,
                100.0 * total.saturating_sub(idle) as f64 / total as f64,
            );
        }
    }
    let width = ctx.topo.smt_width();
    let mut factors = SmtFactors::default();
    if let LoadKind::Batch {
        smt_factor: Some(f),
        ..
    } = &ctx.study.load.kind
    {
        // Validated when the study was loaded.
        let _ = factors.set(width, *f, FactorSource::Configured);
    }
    let bound: Vec<u32> = layout
        .instances
        .iter()
        .filter(|i| i.bound)
        .flat_map(|i| i.cpuset.iter().collect::<Vec<_>>())
        .collect();
    let cpus: Vec<u32> = if bound.is_empty() {
        ctx.topo.online.iter().collect()
    } else {
        bound
    };
    (
        mean_weight(ctx.topo, &busy, &factors, cpus.into_iter()),
        factors.factor(width).0,
    )
}

/// The batch's measurement: one "request" per job (or per instance without a job log).
fn measurement(
    study: &crate::spec::Study,
    detail: &TrialDetail,
    wall_start: SystemTime,
    elapsed: f64,
    cpu_s: f64,
    with_log: bool,
) -> Measurement {
    let mut m = Measurement::empty(
        "batch",
        LoadShape::External {
            description: study.deployment.command.clone(),
        },
    );
    m.start = humantime::format_rfc3339_millis(wall_start).to_string();
    m.end =
        humantime::format_rfc3339_millis(wall_start + Duration::from_secs_f64(elapsed)).to_string();
    m.duration_s = elapsed;
    let count = if with_log {
        detail.jobs.len()
    } else {
        detail.argv.len()
    } as u64;
    m.requests = count;
    m.ok = count;
    m.throughput_rps = count as f64 / elapsed;
    m.cpu = Some(vec![CpuUsage {
        name: "batch".into(),
        pid: None,
        tier: Some("batch".into()),
        cpu_s,
        cores: cpu_s / elapsed,
    }]);
    m.extra.insert(ELAPSED_S.into(), elapsed);
    m.extra.insert(CPU_S.into(), cpu_s);
    if with_log {
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        let read: f64 = detail.jobs.iter().map(|j| mib(j.read_bytes)).sum();
        let written: f64 = detail.jobs.iter().map(|j| mib(j.written_bytes)).sum();
        m.extra.insert(READ_MIB.into(), read);
        m.extra.insert(WRITTEN_MIB.into(), written);
        m.extra.insert(MIB_PER_S.into(), (read + written) / elapsed);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_log_line_reads_with_defaults_and_a_bad_line_names_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("jobs.jsonl");
        std::fs::write(
            &p,
            "{\"session\":1,\"job\":\"fit\",\"status\":\"ok\",\"real_s\":2.5,\"user_s\":2.0,\"sys_s\":0.1,\"read_bytes\":10,\"written_bytes\":0,\"extra\":1}\n\n{\"job\":\"gen\",\"status\":\"failed\",\"error\":\"disk full\"}\n",
        )
        .unwrap();
        let jobs = read_job_log(&p, 3).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].instance, 3);
        assert_eq!(jobs[0].real_s, 2.5);
        assert_eq!(jobs[1].status, JobState::Failed);
        assert_eq!(jobs[1].error.as_deref(), Some("disk full"));
        std::fs::write(&p, "{\"job\":\"a\"}\nnot json\n").unwrap();
        let e = read_job_log(&p, 0).unwrap_err().to_string();
        assert!(e.contains("jobs.jsonl:2:"), "{e}");
    }
}
