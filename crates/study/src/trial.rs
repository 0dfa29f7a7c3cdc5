//! One trial: the knobs set, the configuration deployed on its layout, the load driven and
//! measured (`measure`), its constraints and warm-up checked; every knob restored and
//! every instance stopped before it returns. And the trial as a stored record.

use std::sync::atomic::AtomicBool;

use perfpilot_drive::{Measurement, check_all};
use perfpilot_observe::Topology;
use perfpilot_store::{TrialPhase, TrialRecord, TrialStatus};
use perfpilot_sys::Fs;
use serde::{Deserialize, Serialize};

use crate::deploy::{self, KnobGuard};
use crate::error::TrialError;
use crate::layout::{Layout, plan};
use crate::measure::measure;
use crate::spec::{Config, Goal, Level, LoadKind, Study, render};
use crate::stats::{self, Mser};
use perfpilot_sys::change::{Applied, Change};

/// The result of one trial, as stored.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TrialDetail {
    /// Where each instance ran (`None`: the layout could not be planned).
    pub layout: Option<Layout>,
    /// The instances' ports.
    pub ports: Vec<u16>,
    /// Each instance's command line.
    pub argv: Vec<Vec<String>>,
    /// The first instance's environment: `[deployment.env]` filled in, `LD_PRELOAD` for the
    /// allocator.
    pub env: Vec<(String, String)>,
    /// The undo records of the knobs the trial set.
    pub knobs: Vec<perfpilot_sys::change::Undo>,
    /// Notes from deploying and stopping, a saturated load driver, knobs not restored.
    pub notes: Vec<String>,
    /// MSER-5 on the per-second throughput (`None`: too few seconds).
    pub mser: Option<Mser>,
    /// The users driving the load, over all instances.
    pub users: usize,
    /// Cores the built-in load driver (this process) used over the measured window; `None`
    /// for an adapter command, whose driver is another program.
    #[serde(default)]
    pub driver_cores: Option<f64>,
    /// A batch trial's jobs, from its job logs (`load.jobs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<crate::batch::BatchJob>,
    /// The scratch file system's loop device (`loop3`), when the study has `[storage]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The host that ran the trial, as `--hosts` named it (`local`, `10.0.0.2:7071`); `None`
    /// for a run without `--hosts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// The built-in driver counts as saturated from this share of its threads' CPU on.
const DRIVER_SATURATED: f64 = 0.9;

/// Why a trial's measurement says more about the built-in load driver than about the
/// deployment: the driver's process kept its threads at least 90 % busy, so the load, not the
/// deployment, set the throughput. `None` when it had room (or for an adapter command).
pub fn driver_saturation(study: &Study, detail: &TrialDetail) -> Option<String> {
    let LoadKind::Builtin { threads, .. } = &study.load.kind else {
        return None;
    };
    let cores = detail.driver_cores?;
    (cores >= DRIVER_SATURATED * *threads as f64).then(|| {
        format!(
            "the load driver was saturated ({cores:.2} cores busy of its {threads} thread(s)): the throughput is the driver's limit, not the deployment's; raise load.threads (on a machine with CPUs to spare), drive from another machine, or make requests costlier for the service"
        )
    })
}

/// One trial's outcome (also what a study worker sends back, `crate::hosts`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrialOutcome {
    /// Ok, violated (a constraint failed) or failed.
    pub status: TrialStatus,
    /// Why it failed or which constraints it violated (empty when ok).
    pub reason: String,
    /// The objective's value.
    pub value: Option<f64>,
    /// The load driver's measurement (`None` when the trial failed before or during it).
    pub measurement: Option<Measurement>,
    /// Layout, ports, command lines, knobs, warm-up analysis.
    pub detail: TrialDetail,
}

/// The objective's value of a measurement (`None` when it lacks it).
pub fn objective_value(goal: &Goal, m: &Measurement) -> Option<f64> {
    match goal {
        Goal::MaxThroughput => Some(m.throughput_rps),
        Goal::MinLatency(p) => m.latency.as_ref()?.by_name(p),
        Goal::MinCpuPerRequest => {
            let cpu: f64 = m.cpu.as_ref()?.iter().map(|c| c.cpu_s).sum();
            (m.ok > 0).then(|| cpu * 1000.0 / m.ok as f64)
        }
        Goal::MinElapsed => m.extra.get(crate::batch::ELAPSED_S).copied(),
        Goal::MinCpuTime => m.extra.get(crate::batch::CPU_S).copied(),
        Goal::MaxMbPerSec => m.extra.get(crate::batch::MIB_PER_S).copied(),
    }
}

/// Everything a trial needs.
pub struct TrialContext<'a> {
    /// The study the trial belongs to.
    pub study: &'a Study,
    /// The machine's topology, for the layout.
    pub topo: &'a Topology,
    /// Where knob paths are rooted (the live system, or a temporary tree in tests).
    pub knob_fs: &'a Fs,
    /// Where knob undo records are journaled before each change (`None`: not journaled).
    pub knob_journal: Option<&'a std::path::Path>,
    /// Set (by a Ctrl-C handler) to end the trial early.
    pub stop: &'a AtomicBool,
}

/// Runs one trial of `config` with `users` total users: knobs, deployment, load, CPU per
/// instance, constraints, MSER-5. Every knob is restored and every instance stopped before it
/// returns (or unwinds).
pub fn run_trial(ctx: &TrialContext<'_>, config: &Config, users: Option<usize>) -> TrialOutcome {
    let study = ctx.study;
    let n = config.instances();
    let users = users.unwrap_or(study.load.users_per_instance * n);
    let mut detail = TrialDetail {
        users,
        ..TrialDetail::default()
    };
    let layout = match plan(ctx.topo, n, config.cores_per_instance(), config.binding()) {
        Ok(l) => l,
        Err(e) => return failed(detail, e.to_string()),
    };
    detail.layout = Some(layout.clone());
    let Armed { knobs, tconf } = match arm(ctx, config, &mut detail) {
        Ok(a) => a,
        Err(e) => return failed(detail, e.to_string()),
    };
    if matches!(study.load.kind, LoadKind::Batch { .. }) {
        let mut o = crate::batch::run(ctx, &tconf, &layout, knobs, detail);
        if let Some(m) = &mut o.measurement {
            m.name = Some(config.key());
        }
        return o;
    }
    let run = Deployment {
        config,
        tconf: &tconf,
        layout: &layout,
        users,
    };
    match run.measure(ctx, knobs, &mut detail) {
        Ok(m) => judge(study, config, m, detail),
        Err(e) => failed(detail, e.to_string()),
    }
}

/// A failed trial's outcome.
fn failed(detail: TrialDetail, reason: String) -> TrialOutcome {
    TrialOutcome {
        status: TrialStatus::Failed,
        reason,
        value: None,
        measurement: None,
        detail,
    }
}

/// A trial's knobs, set, and the configuration its templates read (with the scratch file
/// system's `mount` and `device`).
struct Armed {
    knobs: KnobGuard,
    tconf: Config,
}

/// Makes the scratch file system (when the study has `[storage]`) and sets the knobs of
/// `config`; their undo records go to `detail`. `Err` is the trial's failure, everything set
/// restored again.
fn arm(
    ctx: &TrialContext<'_>,
    config: &Config,
    detail: &mut TrialDetail,
) -> Result<Armed, TrialError> {
    let study = ctx.study;
    let n = config.instances();
    let mut knobs = match ctx.knob_journal {
        Some(j) => KnobGuard::journaled(ctx.knob_fs, j),
        None => KnobGuard::new(ctx.knob_fs),
    };
    // The scratch file system first: knob paths may name its device. Templates read the
    // trial's configuration with its inactive parameters empty.
    let mut tconf = study.for_templates(config);
    if let Some(st) = &study.storage {
        let made = st
            .spec(&deploy::values_for(&tconf, n, None))
            .map_err(TrialError::from)
            .and_then(|spec| Ok(knobs.change(&Change::ScratchFs { spec })?));
        match made {
            Ok(Applied::ScratchFs { device, mount }) => {
                let m = mount.display().to_string();
                tconf.0.push(("mount".into(), Level::Str(m)));
                tconf.0.push(("device".into(), Level::Str(device.clone())));
                detail.device = Some(device);
            }
            Ok(other) => return Err(TrialError::StorageOutcome(format!("{other:?}"))),
            Err(e) => {
                return Err(TrialError::Storage {
                    source: Box::new(e),
                    unrestored: unwind(&mut knobs, detail),
                });
            }
        }
    }
    let values = deploy::values_for(&tconf, n, None);
    for k in &study.deployment.knobs {
        let value = render(&k.value, &values);
        if let Err(e) = knobs.set(&render(&k.path, &values), &value) {
            return Err(TrialError::Knobs {
                source: Box::new(e),
                unrestored: unwind(&mut knobs, detail),
            });
        }
    }
    detail.knobs = knobs.records().to_vec();
    Ok(Armed { knobs, tconf })
}

/// Records what `knobs` set in `detail` and restores it; returns what could not be restored.
fn unwind(knobs: &mut KnobGuard, detail: &mut TrialDetail) -> Vec<String> {
    detail.knobs = knobs.records().to_vec();
    knobs.restore()
}

/// A served configuration to deploy and measure.
struct Deployment<'a> {
    /// The configuration as the study names it.
    config: &'a Config,
    /// The configuration its templates read.
    tconf: &'a Config,
    layout: &'a Layout,
    users: usize,
}

impl Deployment<'_> {
    /// Takes ports, deploys, drives and measures; stops the instances and restores `knobs`
    /// before it returns. The ports, command lines, environment and notes go to `detail`.
    fn measure(
        &self,
        ctx: &TrialContext<'_>,
        mut knobs: KnobGuard,
        detail: &mut TrialDetail,
    ) -> Result<Measurement, TrialError> {
        let study = ctx.study;
        let n = self.config.instances();
        let mut notes = Vec::new();
        let ports = perfpilot_lab::port::free_ports_from(study.deployment.base_port, n, &mut notes)
            .map_err(TrialError::Ports)?;
        detail.ports = ports.clone();
        let mut dep = deploy::deploy(study, self.tconf, self.layout, &ports, ctx.stop, notes)?;
        detail.notes = dep.notes.clone();
        detail.argv = dep.instances.iter().map(|i| i.argv.clone()).collect();
        if let Some(il) = self.layout.instances.first()
            && let Some(&p) = ports.first()
        {
            let values = deploy::values_for(self.tconf, n, Some((il, p)));
            detail.env = deploy::environment(study, self.config, &values);
        }
        let measured = measure(ctx, self.tconf, self.layout, &mut dep, self.users);
        let stop_problems = dep.stop();
        drop(dep);
        let restore_problems = knobs.restore();
        let (m, driver_cores) = measured?;
        detail.driver_cores = driver_cores;
        detail.notes.extend(stop_problems);
        detail.notes.extend(driver_saturation(study, detail));
        if !restore_problems.is_empty() {
            detail.notes.push(format!(
                "knobs not restored: {}",
                restore_problems.join("; ")
            ));
        }
        Ok(m)
    }
}

/// The outcome of measurement `m` of `config`: MSER-5, the objective's value and the
/// constraints checked.
fn judge(
    study: &Study,
    config: &Config,
    mut m: Measurement,
    mut detail: TrialDetail,
) -> TrialOutcome {
    // MSER-5 on the per-second throughput.
    let series: Vec<f64> = m.series.iter().map(|p| p.requests as f64).collect();
    detail.mser = stats::mser5(&series);
    m.name = Some(config.key());
    let value = objective_value(&study.objective.goal, &m);
    let failed: Vec<String> = check_all(&study.objective.thresholds(), &m)
        .into_iter()
        .filter(|o| !o.passed)
        .map(|o| o.to_string())
        .collect();
    let (status, reason) = if value.is_none() {
        (
            TrialStatus::Failed,
            "the measurement lacks the objective's value".to_string(),
        )
    } else if m.ok == 0 && !matches!(study.load.kind, LoadKind::Command { .. }) {
        // An adapter command prints one number, not request counts: its ok count is always 0.
        (
            TrialStatus::Failed,
            format!("no request succeeded ({} errors)", m.errors),
        )
    } else if !failed.is_empty() {
        (TrialStatus::Violated, failed.join("; "))
    } else {
        (TrialStatus::Ok, String::new())
    };
    TrialOutcome {
        status,
        reason,
        value,
        measurement: Some(m),
        detail,
    }
}

/// The record of trial `o` of `config`, in `phase` and `round` of study run `study_id`, as
/// the store keeps it.
pub(crate) fn to_record(
    study_id: i64,
    phase: TrialPhase,
    round: usize,
    config: &Config,
    o: &TrialOutcome,
) -> TrialRecord {
    TrialRecord {
        id: 0,
        study: study_id,
        phase,
        round: round as i64,
        config: config.key(),
        factors: serde_json::to_string(config).unwrap_or_default(),
        status: o.status,
        reason: o.reason.clone(),
        value: o.value,
        measurement: o.measurement.as_ref().map(Measurement::to_json),
        detail: serde_json::to_string(&o.detail).unwrap_or_else(|_| "{}".into()),
        created_ms: 0,
    }
}
