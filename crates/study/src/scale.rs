//! The scaling mode (`study scale`): one fresh deployment of the study's `[scaling]`
//! configuration per user count, the saturation point and the knee of the sweep, and its points
//! as a model file's measurements.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use perfpilot_lab::MachineFacts;
use perfpilot_observe::Topology;
use perfpilot_store::{RunState, Store, TrialPhase, TrialStatus};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StudyError};
use crate::progress::Progress;
use crate::runner::{RunOptions, knob_journal};
use crate::spec::Study;
use crate::trial::{TrialContext, driver_saturation, run_trial, to_record};

/// One point of a load sweep.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ScalePoint {
    /// The users driving the load.
    pub users: usize,
    /// Requests per second.
    pub throughput: f64,
    /// Mean response time in seconds.
    pub response_time_s: Option<f64>,
    /// The 99th percentile of the response time, in ms.
    pub p99_ms: Option<f64>,
    /// Requests that failed.
    pub errors: u64,
    /// Busy cores per tier (`app`: all instances).
    pub cpu: BTreeMap<String, f64>,
    /// Busy cores of the built-in load driver (`None` for an adapter command).
    #[serde(default)]
    pub driver_cores: Option<f64>,
}

/// The outcome of the scaling mode.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Scaling {
    /// The study run that stored the sweep.
    pub run: i64,
    /// The configuration swept.
    pub config: String,
    /// One point per user count that measured.
    pub points: Vec<ScalePoint>,
    /// The fewest users reaching 95 % of the highest throughput.
    pub saturation_users: Option<usize>,
    /// The users with the highest power (throughput / response time): the knee.
    pub knee_users: Option<usize>,
    /// User counts whose trial failed, with the reason.
    pub failed: Vec<(usize, String)>,
    /// Points where the measurement is the driver's limit rather than the deployment's.
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl Scaling {
    /// The points as `[[measurements]]` of a model file (`perfpilot model fit`).
    pub fn model_toml(&self, think_time_s: f64) -> String {
        let mut s = format!(
            "# perfpilot study scale, run {}: {}\n",
            self.run, self.config
        );
        for p in &self.points {
            s.push_str(&format!(
                "\n[[measurements]]\nlabel = \"{} users\"\nclients = {}\nthink_time = {:?}\nthroughput = {:.3}\n",
                p.users, p.users, think_time_s, p.throughput
            ));
            if let Some(r) = p.response_time_s {
                s.push_str(&format!("response_time = {r:.6}\n"));
            }
            if !p.cpu.is_empty() {
                let u: Vec<String> = p.cpu.iter().map(|(k, v)| format!("{k} = {v:.3}")).collect();
                s.push_str(&format!("utilization = {{ {} }}\n", u.join(", ")));
            }
        }
        s
    }
}

/// Finds the saturation point and the knee of a sweep.
pub fn saturation_and_knee(points: &[ScalePoint]) -> (Option<usize>, Option<usize>) {
    let max = points.iter().map(|p| p.throughput).fold(0.0, f64::max);
    let sat = (max > 0.0)
        .then(|| {
            points
                .iter()
                .filter(|p| p.throughput >= 0.95 * max)
                .map(|p| p.users)
                .min()
        })
        .flatten();
    let knee = points
        .iter()
        .filter_map(|p| {
            let r = p.response_time_s.filter(|r| *r > 0.0)?;
            Some((p.users, p.throughput / r))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(u, _)| u);
    (sat, knee)
}

/// The user counts a sweep takes when none are given: the study's `scaling.users`, else these.
pub const DEFAULT_USERS: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// The scaling mode: one fresh deployment of the scaling configuration per user count in
/// `users` (empty: the study's `scaling.users`, else [`DEFAULT_USERS`]).
pub fn run_scaling(
    study: &Study,
    topo: &Topology,
    opts: &RunOptions,
    users: &[usize],
) -> Result<Scaling> {
    let users = if !users.is_empty() {
        users
    } else if !study.scaling.users.is_empty() {
        &study.scaling.users
    } else {
        &DEFAULT_USERS[..]
    };
    let mut store = Store::open(&opts.store)?;
    let run_id = store.study_begin(
        &format!("{} (scaling)", study.name),
        &study.path.display().to_string(),
        &study.source,
        &MachineFacts::with_topology(&perfpilot_sys::Fs::live(), topo).to_json(),
    )?;
    let config = &study.scaling.config;
    let progress = Progress::new(opts.progress, users.len());
    let journal = knob_journal(opts)?;
    let ctx = TrialContext {
        study,
        topo,
        knob_fs: &opts.knob_fs,
        knob_journal: Some(&journal),
        stop: &opts.stop,
    };
    let mut points = Vec::new();
    let mut failed = Vec::new();
    let mut warnings = Vec::new();
    for (i, &u) in users.iter().enumerate() {
        if opts.stop.load(Ordering::SeqCst) {
            store.study_set_state(run_id, RunState::Interrupted, None)?;
            progress.finish();
            return Err(StudyError::Interrupted);
        }
        progress.message(format!("{u} users"));
        let o = run_trial(&ctx, config, Some(u));
        if opts.stop.load(Ordering::SeqCst) {
            store.study_set_state(run_id, RunState::Interrupted, None)?;
            progress.finish();
            return Err(StudyError::Interrupted);
        }
        store.trial_add(&to_record(run_id, TrialPhase::Scale, i + 1, config, &o))?;
        progress.inc();
        progress.round(format!("point {} of {} ({u} users)", i + 1, users.len()));
        if let Some(why) = driver_saturation(study, &o.detail) {
            warnings.push(format!(
                "{u} users: {why}; the saturation point and knee may be the driver's"
            ));
        }
        match (o.status, &o.measurement) {
            (TrialStatus::Ok | TrialStatus::Violated, Some(m)) => {
                let mut cpu = BTreeMap::new();
                if let Some(c) = &m.cpu {
                    cpu.insert("app".to_string(), c.iter().map(|x| x.cores).sum());
                }
                points.push(ScalePoint {
                    users: u,
                    throughput: m.throughput_rps,
                    response_time_s: m
                        .latency
                        .as_ref()
                        .and_then(|l| l.mean_ms)
                        .map(|v| v / 1000.0),
                    p99_ms: m.latency.as_ref().and_then(|l| l.p99_ms),
                    errors: m.errors,
                    cpu,
                    driver_cores: o.detail.driver_cores,
                });
            }
            _ => failed.push((u, o.reason.clone())),
        }
        std::thread::sleep(study.run.cooldown);
    }
    progress.finish();
    let (saturation_users, knee_users) = saturation_and_knee(&points);
    if points.is_empty() {
        // Nothing measured: a failed run, not a sweep with no saturation point.
        let why = match failed.first() {
            Some((u, reason)) => format!(
                "none of its {} load points completed; the first ({u} users) failed: {reason}",
                users.len()
            ),
            None => "it measured no load point".to_string(),
        };
        store.study_set_state(run_id, RunState::Failed, None)?;
        return Err(StudyError::NoTrialCompleted {
            run: run_id,
            store: opts.store.clone(),
            why,
        });
    }
    let s = Scaling {
        run: run_id,
        config: config.key(),
        points,
        saturation_users,
        knee_users,
        failed,
        warnings,
    };
    store.study_set_state(
        run_id,
        RunState::Done,
        Some(&serde_json::json!({ "scaling": s }).to_string()),
    )?;
    Ok(s)
}
