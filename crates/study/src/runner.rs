//! The runner: trials in randomized interleaved rounds, racing, the winner's confirmation
//! against the baseline, the scaling sweep, and `--resume`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use perfpilot_drive::{
    BodyTemplate, CpuUsage, DataSource, DriveSpec, Load, Measurement, RunControl, ThinkTime,
    check_all,
};
use perfpilot_observe::Topology;
use perfpilot_store::{Store, TrialRecord};
use perfpilot_sys::Fs;
use serde::{Deserialize, Serialize};

use crate::deploy::{self, Deployed, KnobGuard};
use crate::error::{Result, StudyError};
use crate::layout::{Layout, plan};
use crate::spec::{Budget, Config, FAR_BEHIND_MIN_ROUNDS, Goal, LoadKind, Study, render};
use crate::stats::{self, Alternative, Mser, RatioCi, Rng};

/// How a run is carried out.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The store holding the run's records.
    pub store: PathBuf,
    /// Continue this run instead of starting a new one.
    pub resume: Option<i64>,
    /// Show progress on stderr.
    pub progress: bool,
    /// Set (by a Ctrl-C handler) to stop after restoring everything.
    pub stop: Arc<AtomicBool>,
    /// Where knob paths are rooted (the live system, or a temporary tree in tests).
    pub knob_fs: Fs,
    /// Override the study file's racing setting.
    pub racing: Option<bool>,
    /// Override the study file's `run.budget`.
    pub budget: Option<Budget>,
}

impl RunOptions {
    /// Options for the live system.
    pub fn new(store: PathBuf) -> RunOptions {
        RunOptions {
            store,
            resume: None,
            progress: false,
            stop: Arc::new(AtomicBool::new(false)),
            knob_fs: Fs::live(),
            racing: None,
            budget: None,
        }
    }
}

/// A configuration that cannot run on this machine.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Infeasible {
    pub config: String,
    pub reason: String,
}

/// Why a configuration left the race.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Left {
    /// Significantly worse than the best.
    #[default]
    Worse,
    /// Failed twice.
    Failed,
    /// Practically equivalent to the leader (within `objective.min_effect`): running it
    /// further could not change the choice by more than that.
    Equivalent,
    /// Tied with the leader beyond what the rounds left could resolve (conditional power
    /// below `run.futility`).
    Tied,
    /// Best in fewer than `run.min_chance` of the bootstrap resamples of the rounds so far:
    /// it practically cannot win, though no test has yet shown it worse.
    Unlikely,
    /// Significantly more than `run.far_behind` behind the leader, from round 3 on.
    #[serde(rename = "far_behind", alias = "farbehind")]
    FarBehind,
    /// Still racing when the race ended because choosing the leader was expected to cost
    /// less than `run.stop_loss`: not shown worse, and no longer worth the rounds.
    Settled,
}

/// A configuration that left the race before the last round.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Elimination {
    pub config: String,
    pub round: usize,
    /// Why: `worse than <best> (…)`, `failed twice, …` or `equivalent to <leader> …`.
    pub reason: String,
    pub p_value: Option<f64>,
    #[serde(default)]
    pub kind: Left,
}

/// Per-configuration figures.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ConfigSummary {
    pub config: String,
    pub trials: usize,
    pub ok: usize,
    pub mean: Option<f64>,
    pub stdev: Option<f64>,
    pub throughput: Option<f64>,
    pub cpu_cores: Option<f64>,
    pub eliminated_round: Option<usize>,
}

/// What a run concluded (stored as the study run's summary).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub goal: String,
    pub unit: String,
    pub higher_is_better: bool,
    pub baseline: String,
    pub winner: Option<String>,
    /// Configurations still in the race at the end (not significantly different from the
    /// winner) and those that left it as equivalent to, or tied with, the leader.
    pub indistinguishable: Vec<String>,
    /// The chance of being the best of each configuration still in the race at the end
    /// (share of bootstrap resamples of the rounds in which it has the best mean; best first,
    /// those never best left out): how firmly the rounds single out the winner.
    #[serde(default)]
    pub chance_best: Vec<(String, f64)>,
    /// The winner's gain over the baseline in the goal's direction (> 1 is better), with its
    /// 95 % confidence interval, from paired rounds.
    pub gain: Option<RatioCi>,
    /// Wilcoxon (two-sided) p-value of winner vs baseline over the paired rounds.
    pub gain_p_value: Option<f64>,
    /// "better", "not significantly different", or why there is no verdict.
    pub verdict: String,
    pub configurations: Vec<ConfigSummary>,
    pub eliminated: Vec<Elimination>,
    pub infeasible: Vec<Infeasible>,
    pub warnings: Vec<String>,
    pub rounds: usize,
    pub trials_run: usize,
    pub elapsed_s: f64,
    pub racing: bool,
}

/// The result of one trial, as stored.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TrialDetail {
    pub layout: Option<Layout>,
    pub ports: Vec<u16>,
    pub argv: Vec<Vec<String>>,
    pub env: Vec<(String, String)>,
    pub knobs: Vec<perfpilot_sys::change::Undo>,
    pub notes: Vec<String>,
    pub mser: Option<Mser>,
    pub users: usize,
    /// Cores the built-in load driver (this process) used over the measured window; `None`
    /// for an adapter command, whose driver is another program.
    #[serde(default)]
    pub driver_cores: Option<f64>,
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

/// One trial's outcome.
#[derive(Clone, Debug)]
pub struct TrialOutcome {
    /// `ok`, `violated` (a constraint failed), `failed`.
    pub status: String,
    pub reason: String,
    pub value: Option<f64>,
    pub measurement: Option<Measurement>,
    pub detail: TrialDetail,
}

/// Seconds one trial takes besides warm-up and measurement (deploy, readiness, stop).
const TRIAL_OVERHEAD_S: f64 = 1.0;

/// What `validate` prints: trials and the estimated duration.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub configurations: usize,
    pub feasible: usize,
    pub infeasible: Vec<Infeasible>,
    /// Trials with every repetition (no configuration raced out) plus confirmation.
    pub max_trials: usize,
    pub seconds_per_trial: f64,
    pub max_duration: Duration,
    /// The trials `run.budget` allows a race (`None`: no budget).
    pub budget_trials: Option<usize>,
}

/// The confirmation's trials in a run of `feasible` configurations: a pair per
/// `run.confirm_rounds` (none with a single configuration).
pub(crate) fn confirm_trials(study: &Study, feasible: usize) -> usize {
    if feasible > 1 {
        2 * study.run.confirm_rounds
    } else {
        0
    }
}

/// Whether a race that has run `used` race trials stays within a budget of `cap` trials by
/// running `round` with `alive` configurations and keeping `reserve` for the confirmation.
/// The first round always runs.
pub(crate) fn within_budget(
    cap: usize,
    used: usize,
    round: usize,
    alive: usize,
    reserve: usize,
) -> bool {
    round <= 1 || used + alive + reserve <= cap
}

/// Plans a study on `topo`: layouts of every configuration, trials, the time it takes at most.
pub fn plan_study(study: &Study, topo: &Topology) -> Plan {
    let configs = study.configurations();
    let mut infeasible = Vec::new();
    for c in &configs {
        if let Err(e) = plan(topo, c.instances(), c.cores_per_instance(), c.binding()) {
            infeasible.push(Infeasible {
                config: c.key(),
                reason: e.to_string(),
            });
        }
    }
    let feasible = configs.len() - infeasible.len();
    let max_trials = feasible * study.run.repetitions + confirm_trials(study, feasible);
    let per = study.run.warmup.as_secs_f64()
        + study.run.measure.as_secs_f64()
        + study.run.cooldown.as_secs_f64()
        + TRIAL_OVERHEAD_S;
    Plan {
        configurations: configs.len(),
        feasible,
        infeasible,
        max_trials,
        seconds_per_trial: per,
        max_duration: Duration::from_secs_f64(per * max_trials as f64),
        budget_trials: study.run.budget.map(|b| b.trials(max_trials)),
    }
}

/// The machine facts stored with a run.
fn host_json(topo: &Topology) -> String {
    serde_json::json!({
        "online": topo.online.to_string(),
        "nodes": topo.nodes.len(),
        "llcs": topo.llcs().count(),
        "cores": topo.cores().count(),
        "smt": topo.smt_width(),
    })
    .to_string()
}

/// The objective's value of a measurement (`None` when it lacks it).
pub fn objective_value(goal: &Goal, m: &Measurement) -> Option<f64> {
    match goal {
        Goal::MaxThroughput => Some(m.throughput_rps),
        Goal::MinLatency(p) => {
            let l = m.latency.as_ref()?;
            match p.as_str() {
                "mean" => l.mean_ms,
                "p50" => l.p50_ms,
                "p75" => l.p75_ms,
                "p90" => l.p90_ms,
                "p95" => l.p95_ms,
                "p99" => l.p99_ms,
                "p99.9" => l.p99_9_ms,
                "max" => l.max_ms,
                _ => None,
            }
        }
        Goal::MinCpuPerRequest => {
            let cpu: f64 = m.cpu.as_ref()?.iter().map(|c| c.cpu_s).sum();
            (m.ok > 0).then(|| cpu * 1000.0 / m.ok as f64)
        }
    }
}

/// Everything a trial needs.
pub struct TrialContext<'a> {
    pub study: &'a Study,
    pub topo: &'a Topology,
    pub knob_fs: &'a Fs,
    /// Where knob undo records are journaled before each change (`None`: not journaled).
    pub knob_journal: Option<&'a std::path::Path>,
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
    let fail = |detail: TrialDetail, reason: String| TrialOutcome {
        status: "failed".into(),
        reason,
        value: None,
        measurement: None,
        detail,
    };
    let layout = match plan(ctx.topo, n, config.cores_per_instance(), config.binding()) {
        Ok(l) => l,
        Err(e) => return fail(detail, e.to_string()),
    };
    detail.layout = Some(layout.clone());
    let mut knobs = match ctx.knob_journal {
        Some(j) => KnobGuard::journaled(ctx.knob_fs, j),
        None => KnobGuard::new(ctx.knob_fs),
    };
    let values = deploy::values_for(config, n, None);
    for k in &study.deployment.knobs {
        let value = render(&k.value, &values);
        if let Err(e) = knobs.set(&k.path, &value) {
            detail.knobs = knobs.records().to_vec();
            let restore = knobs.restore();
            let mut reason = e;
            if !restore.is_empty() {
                reason.push_str(&format!("; restoring failed too: {}", restore.join("; ")));
            }
            return fail(detail, reason);
        }
    }
    detail.knobs = knobs.records().to_vec();
    let mut notes = Vec::new();
    let ports = match deploy::free_ports(study.deployment.base_port, n, &mut notes) {
        Ok(p) => p,
        Err(e) => return fail(detail, e),
    };
    detail.ports = ports.clone();
    let mut dep = match deploy::deploy(study, config, &layout, &ports, ctx.stop, notes) {
        Ok(d) => d,
        Err(e) => return fail(detail, e),
    };
    detail.notes = dep.notes.clone();
    detail.argv = dep.instances.iter().map(|i| i.argv.clone()).collect();
    if let Some(il) = layout.instances.first()
        && let Some(&p) = ports.first()
    {
        detail.env =
            deploy::environment(study, config, &deploy::values_for(config, n, Some((il, p))));
    }
    let measured = measure(ctx, config, &layout, &mut dep, users);
    let stop_problems = dep.stop();
    drop(dep);
    let restore_problems = knobs.restore();
    let mut m = match measured {
        Ok((m, driver_cores)) => {
            detail.driver_cores = driver_cores;
            m
        }
        Err(e) => return fail(detail, e),
    };
    detail.notes.extend(stop_problems);
    detail.notes.extend(driver_saturation(study, &detail));
    if !restore_problems.is_empty() {
        detail.notes.push(format!(
            "knobs not restored: {}",
            restore_problems.join("; ")
        ));
    }
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
            "failed".to_string(),
            "the measurement lacks the objective's value".to_string(),
        )
    } else if m.ok == 0 {
        (
            "failed".to_string(),
            format!("no request succeeded ({} errors)", m.errors),
        )
    } else if !failed.is_empty() {
        ("violated".to_string(), failed.join("; "))
    } else {
        ("ok".to_string(), String::new())
    };
    TrialOutcome {
        status,
        reason,
        value,
        measurement: Some(m),
        detail,
    }
}

/// Drives the load against a running deployment and samples CPU per instance over the
/// measured window, and the cores the built-in driver (this process) used in it.
fn measure(
    ctx: &TrialContext<'_>,
    config: &Config,
    layout: &Layout,
    dep: &mut Deployed,
    users: usize,
) -> std::result::Result<(Measurement, Option<f64>), String> {
    let study = ctx.study;
    let run = &study.run;
    let pids: Vec<u32> = dep.instances.iter().map(|i| i.pid).collect();
    // The built-in driver runs in this process; its CPU is read with the instances'.
    let builtin = matches!(study.load.kind, LoadKind::Builtin { .. });
    let me = std::process::id();
    let n = layout.instances.len();
    let targets: Vec<String> = dep
        .instances
        .iter()
        .zip(&layout.instances)
        .map(|(inst, il)| {
            let url = match &study.load.kind {
                LoadKind::Builtin { url, .. } => url.clone(),
                LoadKind::Command { .. } => "http://127.0.0.1:{port}".into(),
            };
            render(&url, &deploy::values_for(config, n, Some((il, inst.port))))
        })
        .collect();
    let stop = ctx.stop;
    let warmup = match &study.load.kind {
        LoadKind::Builtin { .. } => run.warmup,
        LoadKind::Command { .. } => Duration::ZERO,
    };
    let (result, cpu, driver) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let until = Instant::now() + warmup;
            while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let start: Vec<Option<f64>> = pids.iter().map(|&p| deploy::cpu_seconds(p)).collect();
            (Instant::now(), start, deploy::cpu_seconds(me))
        });
        let result = drive(study, config, &targets, users, stop);
        let end: Vec<Option<f64>> = pids.iter().map(|&p| deploy::cpu_seconds(p)).collect();
        let driver_end = deploy::cpu_seconds(me);
        let ended = Instant::now();
        let joined = sampler.join().ok();
        let driver = joined.as_ref().and_then(|(t0, _, driver_start)| {
            let secs = ended.duration_since(*t0).as_secs_f64().max(1e-3);
            Some((driver_end? - (*driver_start)?).max(0.0) / secs)
        });
        let cpu = joined.map(|(t0, start, _)| {
            let secs = ended.duration_since(t0).as_secs_f64().max(1e-3);
            start
                .iter()
                .zip(&end)
                .zip(&pids)
                .enumerate()
                .filter_map(|(i, ((a, b), pid))| {
                    let cpu_s = (b.as_ref()? - a.as_ref()?).max(0.0);
                    Some(CpuUsage {
                        name: format!("instance-{i}"),
                        pid: Some(*pid),
                        tier: Some("app".into()),
                        cpu_s,
                        cores: cpu_s / secs,
                    })
                })
                .collect::<Vec<_>>()
        });
        (result, cpu, driver.filter(|_| builtin))
    });
    if stop.load(Ordering::SeqCst) {
        return Err("interrupted".into());
    }
    let mut m = result?;
    if let Some(e) = dep.exited() {
        return Err(format!("{e} during the measurement"));
    }
    m.cpu = cpu;
    Ok((m, driver))
}

fn drive(
    study: &Study,
    config: &Config,
    targets: &[String],
    users: usize,
    stop: &AtomicBool,
) -> std::result::Result<Measurement, String> {
    let run = &study.run;
    match &study.load.kind {
        LoadKind::Builtin {
            method,
            headers,
            body,
            data,
            think_time,
            timeout,
            threads,
            ..
        } => {
            let think = ThinkTime::parse(think_time).map_err(|e| e.to_string())?;
            let mut spec = DriveSpec::new(targets.to_vec(), Load::Closed { users, think });
            spec.method = method.clone();
            spec.headers = headers.clone();
            if let Some(b) = body {
                let ds = match data {
                    Some(p) => Some(DataSource::from_csv(p).map_err(|e| e.to_string())?),
                    None => None,
                };
                spec.body = Some(BodyTemplate::compile(b, ds.as_ref()).map_err(|e| e.to_string())?);
            }
            spec.timeout = *timeout;
            spec.warmup = run.warmup;
            spec.duration = run.measure;
            spec.threads = *threads;
            // Ctrl-C ends the drive early; the stop flag (set by the caller's handler) then
            // stops the study.
            let control = RunControl {
                progress: false,
                ctrl_c: true,
            };
            let _ = stop;
            perfpilot_drive::run(&spec, &control).map_err(|e| format!("load driver: {e}"))
        }
        LoadKind::Command { command, meaning } => {
            let mut values = deploy::values_for(config, targets.len(), None);
            values.insert("targets".into(), targets.join(","));
            values.insert("users".into(), users.to_string());
            values.insert("duration_s".into(), run.measure.as_secs().to_string());
            values.insert("warmup_s".into(), run.warmup.as_secs().to_string());
            values.insert(
                "ports".into(),
                targets
                    .iter()
                    .filter_map(|t| t.rsplit(':').next())
                    .collect::<Vec<_>>()
                    .join(","),
            );
            let line = render(command, &values);
            let argv = vec!["sh".to_string(), "-c".to_string(), line];
            let meaning = if meaning == "latency_ms" {
                perfpilot_drive::adapters::NumberMeaning::LatencyMs
            } else {
                perfpilot_drive::adapters::NumberMeaning::Throughput
            };
            perfpilot_drive::adapters::run_command(&argv, meaning)
                .map_err(|e| format!("load command: {e}"))
        }
    }
}

/// One racing decision.
#[derive(Debug, Clone, PartialEq)]
pub struct RaceStep {
    /// The column with the highest rank sum.
    pub best: usize,
    /// The test that gated the step: `Friedman` (three or more configurations, Conover's F
    /// form) or `Wilcoxon` (two).
    pub test: &'static str,
    /// The gate test's p-value.
    pub p_value: f64,
    /// Columns significantly worse than the best, with the p-value of that comparison
    /// (Conover's two-sided multiple comparison after Friedman, one-sided Wilcoxon with two).
    pub losers: Vec<(usize, f64)>,
}

/// The racing step of F-Race (Birattari et al., 2002) on `blocks` (rows: rounds; columns:
/// configurations; higher is better). With three or more configurations: when Friedman's test
/// (Conover's F form) rejects at `alpha`, every configuration whose rank sum falls short of the
/// best's by more than Conover's least significant difference loses. With two: the one-sided
/// Wilcoxon signed-rank test of the better against the other. `None` when the gate test does
/// not reject.
pub fn race_step(blocks: &[Vec<f64>], alpha: f64) -> Option<RaceStep> {
    let k = blocks.first()?.len();
    let col = |j: usize| blocks.iter().map(|row| row[j]).collect::<Vec<f64>>();
    if k == 2 {
        let (a, b) = (col(0), col(1));
        // With two columns the higher rank sum is the column winning more rounds.
        let a_wins = blocks.iter().filter(|row| row[0] > row[1]).count();
        let b_wins = blocks.iter().filter(|row| row[1] > row[0]).count();
        let (best, worst, w) = if a_wins >= b_wins {
            (0, 1, stats::wilcoxon(&a, &b, Alternative::Greater)?)
        } else {
            (1, 0, stats::wilcoxon(&b, &a, Alternative::Greater)?)
        };
        return (w.p_value < alpha).then(|| RaceStep {
            best,
            test: "Wilcoxon",
            p_value: w.p_value,
            losers: vec![(worst, w.p_value)],
        });
    }
    let f = stats::friedman(blocks)?;
    if f.f_p_value >= alpha {
        return None;
    }
    let best = (0..k).max_by(|&a, &c| f.rank_sums[a].total_cmp(&f.rank_sums[c]))?;
    let lsd = f.least_significant_difference(alpha);
    let losers = (0..k)
        .filter(|&j| j != best && f.rank_sums[best] - f.rank_sums[j] > lsd)
        .map(|j| (j, f.pair_p_value(best, j)))
        .collect();
    Some(RaceStep {
        best,
        test: "Friedman",
        p_value: f.f_p_value,
        losers,
    })
}

/// The racing decision after `round` on the configurations `alive` (by key), from the race
/// trials of rounds 1..=`round`: from round 3 those far behind the leader ([`far_behind`]);
/// from `run.min_rounds` those significantly worse than the best ([`race_step`]), then among
/// the rest those equivalent to the leader or tied with it beyond what the rounds left could
/// resolve, then those unlikely to be the best, and last, when choosing the leader is expected
/// to cost less than `run.stop_loss`, all but the leader ([`settled`]).
pub fn race_round(
    study: &Study,
    trials: &[TrialRecord],
    alive: &[String],
    round: usize,
) -> Vec<Elimination> {
    let goal = &study.objective.goal;
    let mut out = far_behind(study, trials, alive, round);
    if round < study.run.min_rounds {
        return out;
    }
    let rest: Vec<String> = staying(alive, &out).cloned().collect();
    if rest.len() < 2 {
        return out;
    }
    let b = blocks(goal, trials, &rest, round);
    if let Some(step) = race_step(&b, study.run.alpha) {
        for (j, p) in step.losers {
            out.push(Elimination {
                config: rest[j].clone(),
                round,
                reason: format!(
                    "worse than {} ({} p = {:.4}, pairwise p = {:.4})",
                    rest[step.best], step.test, step.p_value, p
                ),
                p_value: Some(p),
                kind: Left::Worse,
            });
        }
    }
    let close = close_to_leader(study, trials, alive, &out, round);
    out.extend(close);
    let unlikely = unlikely_to_win(study, trials, alive, &out, round);
    out.extend(unlikely);
    let settled = settled(study, trials, alive, &out, round);
    out.extend(settled);
    out
}

/// The configurations among `keys` not already in `leaving`.
fn staying<'a>(
    keys: &'a [String],
    leaving: &'a [Elimination],
) -> impl Iterator<Item = &'a String> + 'a {
    keys.iter()
        .filter(move |k| !leaving.iter().any(|e| &e.config == *k))
}

/// Configurations among `keys` more than `run.far_behind` behind the leader (the best mean
/// score among them) with significance: over the race rounds where both succeeded, the
/// one-sided upper bound at `run.alpha` of the configuration's paired ratio to the leader (in
/// the goal's direction; Student t on the log ratios) lies below 1 − `run.far_behind`. It
/// acts from round [`FAR_BEHIND_MIN_ROUNDS`], before the rank tests may: a rank test over a
/// dozen configurations and three rounds cannot tell half the throughput from 3 % less (both
/// are "last in every round"), this test can, and a config within a few percent of the leader
/// is not at risk (its ratio would have to look 20 % short with a small spread in every round;
/// one disturbed round widens the interval instead). The leader stays.
fn far_behind(
    study: &Study,
    trials: &[TrialRecord],
    keys: &[String],
    round: usize,
) -> Vec<Elimination> {
    let margin = study.run.far_behind;
    if margin <= 0.0 || round < FAR_BEHIND_MIN_ROUNDS || keys.len() < 2 {
        return Vec::new();
    }
    let goal = &study.objective.goal;
    let Some(leader) = best_mean(goal, trials, keys, round) else {
        return Vec::new();
    };
    let floor = (1.0 - margin).ln();
    keys.iter()
        .filter(|k| **k != leader)
        .filter_map(|k| {
            // The configuration's share of the leader per round, in the goal's direction.
            let d = log_advantage(goal, trials, k, &leader, round);
            let high = stats::upper_bound(&d, study.run.alpha)?;
            (high < floor).then(|| Elimination {
                config: k.clone(),
                round,
                reason: format!(
                    "far behind {leader}: ×{:.3} of it over {} rounds, at most ×{:.3} at one-sided {:.0} % (run.far_behind {:.0} %)",
                    stats::mean(&d).exp(),
                    d.len(),
                    high.exp(),
                    (1.0 - study.run.alpha) * 100.0,
                    margin * 100.0
                ),
                p_value: None,
                kind: Left::FarBehind,
            })
        })
        .collect()
}

/// Rounds before the chance-of-best rule. With n rounds a bootstrap has C(2n − 1, n) distinct
/// resamples (10 with three rounds, 1,716 with seven), and a configuration hit by bursts of
/// host noise in two or three of its first rounds looks hopeless for a while: on the 2-core VM
/// a race starting the rule at round 5 dropped the exhaustive run's winner that way in a noisy
/// period, and on the exhaustive run's own rounds (replayed over 300 orders) starting at 7
/// picked its winner in 99.3 % of orders against 96.0 % from round 5, for 41 % of its trials
/// instead of 37 %.
pub const CHANCE_MIN_ROUNDS: usize = 7;

/// Configurations among `keys` (not already leaving in `leaving`) whose chance of having the
/// best mean, over [`BOOTSTRAP_RESAMPLES`] bootstrap resamples of rounds 1..=`round` (whole
/// rounds, so the drift between rounds stays out), is below `run.min_chance`. A test asks
/// whether a configuration is worse than the best by more than chance; this asks whether it
/// can still be the best, which a configuration a little but steadily behind cannot, long
/// before a rank test with few rounds can say so. Resampling whole rounds keeps it robust to a
/// disturbed trial: resamples without that round still see the configuration as it is. The
/// configuration most often best always stays.
fn unlikely_to_win(
    study: &Study,
    trials: &[TrialRecord],
    keys: &[String],
    leaving: &[Elimination],
    round: usize,
) -> Vec<Elimination> {
    let floor = study.run.min_chance;
    if floor <= 0.0 || round < CHANCE_MIN_ROUNDS {
        return Vec::new();
    }
    let staying: Vec<String> = staying(keys, leaving).cloned().collect();
    if staying.len() < 2 {
        return Vec::new();
    }
    let b = blocks(&study.objective.goal, trials, &staying, round);
    let seed = study.run.seed ^ 0xB007_5742 ^ round as u64;
    let Some(chance) = stats::chance_best(&b, BOOTSTRAP_RESAMPLES, seed) else {
        return Vec::new();
    };
    let top = (0..chance.len())
        .max_by(|&a, &c| chance[a].total_cmp(&chance[c]))
        .unwrap_or(0);
    staying
        .into_iter()
        .zip(chance)
        .enumerate()
        .filter(|(j, (_, c))| *j != top && *c < floor)
        .map(|(_, (config, c))| Elimination {
            config,
            round,
            reason: format!(
                "unlikely to be the best: best in {:.1} % of {BOOTSTRAP_RESAMPLES} bootstrap resamples of the {round} rounds (below run.min_chance {:.1} %)",
                c * 100.0,
                floor * 100.0
            ),
            p_value: None,
            kind: Left::Unlikely,
        })
        .collect()
}

/// Configurations among `keys` (not already leaving in `leaving`) close to the leader, the
/// best mean score among the rest, over the race rounds where both succeeded:
/// - equivalent (with `run.drop_equivalent`): the paired ratio's distribution-free
///   (Hodges–Lehmann) interval at 1 − 2α lies within 1 ± `objective.min_effect` (two
///   one-sided tests at α; from 5 rounds on);
/// - tied: the rounds left could show it worse only with a conditional power below
///   `run.futility`, were its observed shortfall real.
///
/// Either way more rounds would not change the choice by more than the effect sought or than
/// the study can resolve, so they leave the race; the leader stays.
fn close_to_leader(
    study: &Study,
    trials: &[TrialRecord],
    keys: &[String],
    leaving: &[Elimination],
    round: usize,
) -> Vec<Elimination> {
    let goal = &study.objective.goal;
    let delta = study.objective.min_effect;
    let staying: Vec<&String> = staying(keys, leaving).collect();
    let Some(leader) = best_mean(goal, trials, staying.iter().copied(), round) else {
        return Vec::new();
    };
    let level = 1.0 - 2.0 * study.run.alpha;
    let mut out = Vec::new();
    for k in staying.into_iter().filter(|k| **k != leader) {
        let (x, y) = paired_values(trials, k, &leader, round as i64);
        let Some((same, ci)) = stats::equivalent(&x, &y, delta, level) else {
            continue;
        };
        if study.run.drop_equivalent && delta > 0.0 && same {
            out.push(Elimination {
                config: k.clone(),
                round,
                reason: format!(
                    "equivalent to {leader} within {:.1} %: ratio ×{:.3} ({:.0} % CI {:.3}–{:.3}, {} pairs)",
                    delta * 100.0,
                    ci.ratio,
                    level * 100.0,
                    ci.low,
                    ci.high,
                    ci.pairs
                ),
                p_value: None,
                kind: Left::Equivalent,
            });
            continue;
        }
        // The leader's advantage per round, in the goal's direction.
        let d = log_advantage(goal, trials, &leader, k, round);
        if study.run.futility > 0.0
            && let Some(cp) = stats::conditional_power(&d, study.run.repetitions, study.run.alpha)
            && cp < study.run.futility
        {
            let wide = stats::paired_ratio_ci(&x, &y, 0.95).unwrap_or(ci);
            out.push(Elimination {
                config: k.clone(),
                round,
                reason: format!(
                    "tied with {leader}: ratio ×{:.3} (95 % CI {:.3}–{:.3}, {} pairs); the {} rounds left would show a difference with probability {:.0} % (< run.futility {:.0} %)",
                    wide.ratio,
                    wide.low,
                    wide.high,
                    wide.pairs,
                    study.run.repetitions - round,
                    cp * 100.0,
                    study.run.futility * 100.0
                ),
                p_value: None,
                kind: Left::Tied,
            });
        }
    }
    out
}

/// The race's end by expected loss: when choosing the leader (the best mean among `keys`
/// not already in `leaving`) now is expected to cost less than `run.stop_loss` of its score,
/// every other configuration still racing leaves. The expected loss is the sum over them of
/// E[max(0, μ)], μ a rival's mean advantage over the leader in paired log ratios with a
/// Student-t posterior ([`stats::expected_loss`]; Chick & Inoue's expected opportunity cost,
/// Bonferroni form), in log-ratio units (ln(1 + x) ≈ x for the small shares it is compared
/// with). It ends a group of near-ties that no rank test has separated, once further rounds
/// could gain only what the user said is not worth them; a rival that is close but uncertain
/// keeps the loss up and the race going. With a rival lacking the three paired rounds a loss
/// needs, the race goes on. Not at the last round, where the race ends anyway.
fn settled(
    study: &Study,
    trials: &[TrialRecord],
    keys: &[String],
    leaving: &[Elimination],
    round: usize,
) -> Vec<Elimination> {
    let bound = study.run.stop_loss;
    // At the last round the race ends anyway; NaN (never from a parsed file) is off too.
    if bound.is_nan() || bound <= 0.0 || round >= study.run.repetitions {
        return Vec::new();
    }
    let goal = &study.objective.goal;
    let staying: Vec<&String> = staying(keys, leaving).collect();
    if staying.len() < 2 {
        return Vec::new();
    }
    let Some(leader) = best_mean(goal, trials, staying.iter().copied(), round) else {
        return Vec::new();
    };
    let mut loss = 0.0;
    let mut rivals = Vec::new();
    for k in staying.into_iter().filter(|k| **k != leader) {
        let d = log_advantage(goal, trials, k, &leader, round);
        let Some(e) = stats::expected_loss(&d) else {
            return Vec::new();
        };
        loss += e;
        rivals.push((k, stats::mean(&d).exp(), d.len()));
    }
    if loss >= bound {
        return Vec::new();
    }
    rivals
        .into_iter()
        .map(|(k, ratio, pairs)| Elimination {
            config: k.clone(),
            round,
            reason: format!(
                "settled: ×{ratio:.3} of {leader} over {pairs} rounds; choosing the leader now costs {:.2} % in expectation (below run.stop_loss {:.2} %)",
                loss * 100.0,
                bound * 100.0
            ),
            p_value: None,
            kind: Left::Settled,
        })
        .collect()
}

/// The configuration among `keys` with the best mean score over the race rounds up to
/// `through_round`; `None` when none has a score.
pub(crate) fn best_mean<'a>(
    goal: &Goal,
    trials: &[TrialRecord],
    keys: impl IntoIterator<Item = &'a String>,
    through_round: usize,
) -> Option<String> {
    keys.into_iter()
        .filter_map(|k| {
            let v: Vec<f64> = trials
                .iter()
                .filter(|t| t.phase == "race" && &t.config == k && t.round <= through_round as i64)
                .filter_map(|t| score(goal, t))
                .collect();
            (!v.is_empty()).then(|| (k, stats::mean(&v)))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k.clone())
}

/// Resamples of the rounds behind `chance_best`.
pub(crate) const BOOTSTRAP_RESAMPLES: usize = 2000;

/// Each of `keys`' chance of having the best mean over rounds `1..=rounds` (a bootstrap of
/// the rounds; a failed trial counts as worse than every other of its round), best first,
/// configurations never best left out. Empty with fewer than two configurations or rounds.
pub(crate) fn chance_of_best(
    goal: &Goal,
    trials: &[TrialRecord],
    keys: &[String],
    rounds: usize,
    seed: u64,
) -> Vec<(String, f64)> {
    if keys.len() < 2 {
        return Vec::new();
    }
    let b = blocks(goal, trials, keys, rounds);
    let Some(chance) = stats::chance_best(&b, BOOTSTRAP_RESAMPLES, seed ^ 0xB007_5742) else {
        return Vec::new();
    };
    let mut out: Vec<(String, f64)> = keys
        .iter()
        .cloned()
        .zip(chance)
        .filter(|(_, c)| *c > 0.0)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// The race trial of configuration `key` in `round` (the latest, should a resumed run hold
/// two).
pub(crate) fn race_trial<'a>(
    trials: &'a [TrialRecord],
    key: &str,
    round: i64,
) -> Option<&'a TrialRecord> {
    trials
        .iter()
        .rev()
        .find(|t| t.phase == "race" && t.round == round && t.config == key)
}

/// The objective's value of configuration `key`'s successful race trial in `round`, when
/// positive (a ratio needs it).
pub(crate) fn race_value(trials: &[TrialRecord], key: &str, round: i64) -> Option<f64> {
    race_trial(trials, key, round)
        .filter(|t| t.status == "ok")
        .and_then(|t| t.value)
        .filter(|v| *v > 0.0)
}

/// The values of configurations `x` and `y` in the race rounds 1..=`through_round` where both
/// succeeded, round by round (the pairs of a paired comparison).
pub(crate) fn paired_values(
    trials: &[TrialRecord],
    x: &str,
    y: &str,
    through_round: i64,
) -> (Vec<f64>, Vec<f64>) {
    (1..=through_round)
        .filter_map(|r| Some((race_value(trials, x, r)?, race_value(trials, y, r)?)))
        .unzip()
}

/// The advantage of configuration `x` over `y` in the race rounds 1..=`through_round` where
/// both succeeded, round by round: the log ratio of their values in the goal's direction
/// (positive when `x` did better).
pub(crate) fn log_advantage(
    goal: &Goal,
    trials: &[TrialRecord],
    x: &str,
    y: &str,
    through_round: usize,
) -> Vec<f64> {
    let (a, b) = paired_values(trials, x, y, through_round as i64);
    a.iter()
        .zip(&b)
        .map(|(a, b)| {
            if goal.higher_is_better() {
                (a / b).ln()
            } else {
                (b / a).ln()
            }
        })
        .collect()
}

/// Score: higher is better; `None` for failed or violated trials.
pub(crate) fn score(goal: &Goal, t: &TrialRecord) -> Option<f64> {
    if t.status != "ok" {
        return None;
    }
    let v = t.value?;
    Some(if goal.higher_is_better() { v } else { -v })
}

/// Scores of `configs` in `round` rows; missing or failed scores are replaced by a value
/// worse than every score of the row.
pub(crate) fn blocks(
    goal: &Goal,
    trials: &[TrialRecord],
    configs: &[String],
    rounds: usize,
) -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    for r in 1..=rounds {
        let row: Vec<Option<f64>> = configs
            .iter()
            .map(|c| race_trial(trials, c, r as i64).and_then(|t| score(goal, t)))
            .collect();
        let min = row.iter().flatten().copied().fold(f64::INFINITY, f64::min);
        let worst = if min.is_finite() {
            min - 1.0 - min.abs()
        } else {
            0.0
        };
        out.push(row.into_iter().map(|v| v.unwrap_or(worst)).collect());
    }
    out
}

fn to_record(
    study_id: i64,
    phase: &str,
    round: usize,
    config: &Config,
    o: &TrialOutcome,
) -> TrialRecord {
    TrialRecord {
        id: 0,
        study: study_id,
        phase: phase.into(),
        round: round as i64,
        config: config.key(),
        factors: serde_json::to_string(config).unwrap_or_default(),
        status: o.status.clone(),
        reason: o.reason.clone(),
        value: o.value,
        measurement: o.measurement.as_ref().map(Measurement::to_json),
        detail: serde_json::to_string(&o.detail).unwrap_or_else(|_| "{}".into()),
        created_ms: 0,
    }
}

/// Progress on stderr.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(show: bool, total: usize) -> Progress {
        let bar = show.then(|| {
            let b = indicatif::ProgressBar::with_draw_target(
                Some(total as u64),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} trials, ~{eta} left (at most) {msg}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b
        });
        Progress { bar }
    }
    fn message(&self, m: String) {
        if let Some(b) = &self.bar {
            b.set_message(m);
        }
    }
    fn inc(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }
    fn shrink(&self, by: usize) {
        if let Some(b) = &self.bar
            && let Some(len) = b.length()
        {
            b.set_length(len.saturating_sub(by as u64).max(b.position()));
        }
    }
    fn println(&self, m: String) {
        match &self.bar {
            Some(b) => b.println(m),
            None => eprintln!("{m}"),
        }
    }
    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// The outcome of `run_study`.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run: i64,
    pub summary: Summary,
}

/// The knob journal next to the store (`<store>.knobs-journal.json`): knobs a killed run left
/// changed are restored from it first.
fn knob_journal(opts: &RunOptions) -> Result<PathBuf, StudyError> {
    let journal = opts.store.with_extension("knobs-journal.json");
    for line in deploy::recover_knobs(&opts.knob_fs, &journal).map_err(StudyError::Failed)? {
        eprintln!("perfpilot study: {line}");
    }
    Ok(journal)
}

/// Ends a run that stopped on `e`: the progress bar, and the run's state in the store
/// (interrupted or failed). Returns the error to report (the store's, if that write fails).
fn end_run(store: &mut Store, run_id: i64, progress: &Progress, e: StudyError) -> StudyError {
    progress.finish();
    let state = if matches!(e, StudyError::Interrupted) {
        "interrupted"
    } else {
        "failed"
    };
    match store.study_set_state(run_id, state, None) {
        Ok(()) => e,
        Err(se) => se.into(),
    }
}

/// Runs (or resumes) a study and stores every trial and the summary.
pub fn run_study(study: &Study, topo: &Topology, opts: &RunOptions) -> Result<RunOutcome> {
    let started = Instant::now();
    let mut store = Store::open(&opts.store)?;
    let (run_id, existing) = match opts.resume {
        Some(id) => {
            if store.study(id)?.is_none() {
                return Err(StudyError::NoRun {
                    store: opts.store.clone(),
                    run: id,
                });
            }
            store.study_set_state(id, "running", None)?;
            (id, store.trials(id)?)
        }
        None => (
            store.study_begin(
                &study.name,
                &study.path.display().to_string(),
                &study.source,
                &host_json(topo),
            )?,
            Vec::new(),
        ),
    };
    let plan_ = plan_study(study, topo);
    let racing = opts.racing.unwrap_or(study.run.racing);
    let goal = &study.objective.goal;
    let all = study.configurations();
    let infeasible = plan_.infeasible.clone();
    let feasible: Vec<Config> = all
        .into_iter()
        .filter(|c| !infeasible.iter().any(|i| i.config == c.key()))
        .collect();
    let baseline = study.run.baseline.clone();
    if let Some(i) = infeasible.iter().find(|i| i.config == baseline.key()) {
        store.study_set_state(run_id, "failed", None)?;
        return Err(StudyError::Failed(format!(
            "the baseline {} cannot run on this machine: {}",
            i.config, i.reason
        )));
    }
    // The budget binds a race only; an exhaustive run takes every trial.
    let budget = opts.budget.or(study.run.budget).filter(|_| racing);
    let cap = budget.map(|b| b.trials(plan_.max_trials));
    let reserve = confirm_trials(study, feasible.len());
    let mut budget_end: Option<usize> = None;
    let progress = Progress::new(
        opts.progress,
        cap.map_or(plan_.max_trials, |c| c.min(plan_.max_trials)),
    );
    let journal = knob_journal(opts)?;
    let ctx = TrialContext {
        study,
        topo,
        knob_fs: &opts.knob_fs,
        knob_journal: Some(&journal),
        stop: &opts.stop,
    };
    let mut trials: Vec<TrialRecord> = existing.clone();
    let mut trials_run = 0usize;
    let mut driver_warned = false;
    let mut warnings = Vec::new();
    for i in &infeasible {
        warnings.push(format!("skipped {}: {}", i.config, i.reason));
    }
    let mut alive: Vec<Config> = feasible.clone();
    let mut eliminated: Vec<Elimination> = Vec::new();
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut rounds_done = 0;

    // One trial, reused from the store when resuming.
    let mut one = |phase: &str,
                   round: usize,
                   c: &Config,
                   trials: &mut Vec<TrialRecord>,
                   store: &mut Store|
     -> Result<()> {
        if trials
            .iter()
            .any(|t| t.phase == phase && t.round == round as i64 && t.config == c.key())
        {
            progress.inc();
            return Ok(());
        }
        if opts.stop.load(Ordering::SeqCst) {
            return Err(StudyError::Interrupted);
        }
        progress.message(format!("{phase} round {round}: {}", c.key()));
        let o = run_trial(&ctx, c, None);
        if opts.stop.load(Ordering::SeqCst) {
            return Err(StudyError::Interrupted);
        }
        trials_run += 1;
        let rec = to_record(run_id, phase, round, c, &o);
        if o.status != "ok" {
            progress.println(format!(
                "trial {phase} {round} {}: {}: {}",
                c.key(),
                o.status,
                o.reason
            ));
        }
        if let Some(m) = &o.detail.mser
            && !m.steady
        {
            progress.println(format!(
                "warning: {} ({phase} round {round}) never reached a steady state (MSER-5 truncation point {} s of {} s); lengthen warmup or measure",
                c.key(),
                m.truncate,
                study.run.measure.as_secs()
            ));
        }
        if !driver_warned && let Some(why) = driver_saturation(study, &o.detail) {
            driver_warned = true;
            progress.println(format!(
                "warning: {} ({phase} round {round}): {why}",
                c.key()
            ));
        }
        store.trial_add(&rec)?;
        trials.push(rec);
        progress.inc();
        std::thread::sleep(study.run.cooldown);
        Ok(())
    };

    let result: Result<()> = (|| {
        for round in 1..=study.run.repetitions {
            // The budget: no round that would leave too few trials for the confirmation
            // (the first round always runs). Rounds before this one count, so a resumed run
            // whose store holds later rounds is judged as it was when it ran.
            let used = trials
                .iter()
                .filter(|t| t.phase == "race" && t.round < round as i64)
                .count();
            if let Some(cap) = cap
                && !within_budget(cap, used, round, alive.len(), reserve)
            {
                budget_end = Some(round - 1);
                break;
            }
            let mut order = alive.clone();
            Rng::new(
                study
                    .run
                    .seed
                    .wrapping_mul(1_000_003)
                    .wrapping_add(round as u64),
            )
            .shuffle(&mut order);
            for c in &order {
                one("race", round, c, &mut trials, &mut store)?;
            }
            rounds_done = round;
            // Configurations that keep failing leave the race.
            let keys: Vec<String> = alive.iter().map(Config::key).collect();
            for k in &keys {
                if let Some(t) = race_trial(&trials, k, round as i64)
                    && t.status == "failed"
                {
                    let f = failures.entry(k.clone()).or_default();
                    *f += 1;
                    if *f >= 2 && k != &baseline.key() {
                        eliminated.push(Elimination {
                            config: k.clone(),
                            round,
                            reason: format!("failed twice, last: {}", t.reason),
                            p_value: None,
                            kind: Left::Failed,
                        });
                        alive.retain(|c| &c.key() != k);
                        progress.shrink(study.run.repetitions - round);
                    }
                }
            }
            if racing && alive.len() > 1 {
                let keys: Vec<String> = alive.iter().map(Config::key).collect();
                for e in race_round(study, &trials, &keys, round) {
                    progress.println(format!(
                        "round {round}: {} left the race: {}",
                        e.config, e.reason
                    ));
                    alive.retain(|c| c.key() != e.config);
                    progress.shrink(study.run.repetitions - round);
                    eliminated.push(e);
                }
            }
            if alive.len() <= 1 {
                break;
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        return Err(end_run(&mut store, run_id, &progress, e));
    }

    if let (Some(r), Some(b), Some(c)) = (budget_end, budget, cap) {
        let m = format!(
            "the race ended at its budget (run.budget {b}: {c} trials with the confirmation) after round {r}, {} configurations not separated; the winner is the best mean among them",
            alive.len()
        );
        progress.println(m.clone());
        warnings.push(m);
    }

    // Without racing, the same tests over every round say which configurations are
    // significantly worse than the best (for the summary only; nothing was dropped).
    let mut worse: Vec<String> = Vec::new();
    if !racing && alive.len() > 1 {
        let keys: Vec<String> = alive.iter().map(Config::key).collect();
        let b = blocks(goal, &trials, &keys, rounds_done);
        if let Some(step) = race_step(&b, study.run.alpha) {
            worse = step.losers.iter().map(|(j, _)| keys[*j].clone()).collect();
        }
    }

    // The winner: the best mean score among the survivors.
    let alive_keys: Vec<String> = alive.iter().map(Config::key).collect();
    let winner = best_mean(goal, &trials, &alive_keys, rounds_done)
        .and_then(|k| alive.iter().find(|c| c.key() == k).cloned());

    // Over the finalists: those left and those the race's end settled.
    let finalists: Vec<String> = alive_keys
        .iter()
        .cloned()
        .chain(
            eliminated
                .iter()
                .filter(|e| e.kind == Left::Settled)
                .map(|e| e.config.clone()),
        )
        .collect();
    let chance_best = chance_of_best(goal, &trials, &finalists, rounds_done, study.run.seed);

    // Confirmation: paired rounds of winner and baseline.
    let mut gain = None;
    let mut gain_p = None;
    let verdict;
    match &winner {
        None => verdict = "no configuration completed a trial".to_string(),
        Some(w) if w.key() == baseline.key() => {
            verdict = "the baseline is the best configuration".to_string();
        }
        Some(w) => {
            let confirm: Result<()> = (|| {
                for round in 1..=study.run.confirm_rounds {
                    let mut pair = [w.clone(), baseline.clone()];
                    Rng::new(study.run.seed ^ 0xC0FF_EE00 ^ round as u64).shuffle(&mut pair);
                    for c in &pair {
                        one("confirm", round, c, &mut trials, &mut store)?;
                    }
                }
                Ok(())
            })();
            if let Err(e) = confirm {
                return Err(end_run(&mut store, run_id, &progress, e));
            }
            // Pairs: every (phase, round) where both ran successfully.
            let mut cand = Vec::new();
            let mut base = Vec::new();
            let mut keys: Vec<(String, i64)> =
                trials.iter().map(|t| (t.phase.clone(), t.round)).collect();
            keys.sort();
            keys.dedup();
            for (phase, round) in keys {
                let get = |k: &str| {
                    trials
                        .iter()
                        .find(|t| {
                            t.phase == phase
                                && t.round == round
                                && t.config == k
                                && t.status == "ok"
                        })
                        .and_then(|t| t.value)
                };
                if let (Some(a), Some(b)) = (get(&w.key()), get(&baseline.key())) {
                    if goal.higher_is_better() {
                        cand.push(a);
                        base.push(b);
                    } else {
                        // Gain in the goal's direction: baseline / winner.
                        cand.push(b);
                        base.push(a);
                    }
                }
            }
            gain = stats::paired_ratio_ci(&cand, &base, 0.95);
            gain_p = stats::wilcoxon(&cand, &base, Alternative::TwoSided).map(|w| w.p_value);
            verdict = match gain {
                Some(g) if g.low > 1.0 => format!(
                    "better than the baseline: gain ×{:.3} (95 % CI {:.3}–{:.3}, {} pairs)",
                    g.ratio, g.low, g.high, g.pairs
                ),
                Some(g) if g.high < 1.0 => format!(
                    "worse than the baseline in paired rounds: ×{:.3} (95 % CI {:.3}–{:.3}); keep the baseline",
                    g.ratio, g.low, g.high
                ),
                Some(g) => format!(
                    "not significantly different from the baseline: ×{:.3} (95 % CI {:.3}–{:.3}, {} pairs)",
                    g.ratio, g.low, g.high, g.pairs
                ),
                None => "too few paired rounds for a confidence interval".to_string(),
            };
        }
    }
    progress.finish();

    // Noise: the baseline's run-to-run variation against the effect sought.
    let base_vals: Vec<f64> = trials
        .iter()
        .filter(|t| t.config == baseline.key() && t.status == "ok")
        .filter_map(|t| t.value)
        .collect();
    if base_vals.len() >= 2 {
        let cv = stats::cv(&base_vals);
        if cv > study.objective.min_effect {
            warnings.push(format!(
                "the baseline varies {:.1} % run to run, more than the {:.1} % effect sought (objective.min_effect): lengthen measure or add repetitions",
                cv * 100.0,
                study.objective.min_effect * 100.0
            ));
        }
    }
    let details: Vec<(&TrialRecord, TrialDetail)> = trials
        .iter()
        .filter_map(|t| Some((t, serde_json::from_str::<TrialDetail>(&t.detail).ok()?)))
        .collect();
    let unsteady = details
        .iter()
        .filter(|(_, d)| d.mser.is_some_and(|m| !m.steady))
        .count();
    if unsteady > 0 {
        warnings.push(format!(
            "{unsteady} trial(s) never reached a steady state (MSER-5): lengthen warmup or measure"
        ));
    }
    let saturated: Vec<&TrialDetail> = details
        .iter()
        .map(|(_, d)| d)
        .filter(|d| driver_saturation(study, d).is_some())
        .collect();
    if let Some(why) = saturated.first().and_then(|d| driver_saturation(study, d)) {
        warnings.push(format!(
            "in {} of {} trials {why}",
            saturated.len(),
            details.len()
        ));
    }
    if details
        .iter()
        .filter(|(t, _)| t.phase == "race")
        .all(|(_, d)| d.mser.is_none())
    {
        warnings.push("measurements shorter than 20 s: MSER-5 warm-up detection needs at least 20 per-second points".into());
    }
    let configurations = feasible
        .iter()
        .map(|c| summarize(goal, &trials, c, &eliminated))
        .collect();
    let summary = Summary {
        goal: goal.describe(),
        unit: goal.unit().into(),
        higher_is_better: goal.higher_is_better(),
        baseline: baseline.key(),
        winner: winner.as_ref().map(Config::key),
        indistinguishable: alive
            .iter()
            .map(Config::key)
            .filter(|k| Some(k) != winner.as_ref().map(Config::key).as_ref())
            .filter(|k| !worse.contains(k))
            .chain(
                eliminated
                    .iter()
                    .filter(|e| match e.kind {
                        Left::Equivalent | Left::Tied => true,
                        // A settled configuration steadily behind the winner is not one it
                        // cannot be told from: only those whose paired 95 % interval holds 1.
                        Left::Settled => winner.as_ref().is_none_or(|w| {
                            let (x, y) =
                                paired_values(&trials, &e.config, &w.key(), e.round as i64);
                            stats::paired_ratio_ci(&x, &y, 0.95)
                                .is_none_or(|ci| ci.low <= 1.0 && ci.high >= 1.0)
                        }),
                        _ => false,
                    })
                    .map(|e| e.config.clone()),
            )
            .collect(),
        chance_best,
        gain,
        gain_p_value: gain_p,
        verdict,
        configurations,
        eliminated,
        infeasible,
        warnings,
        rounds: rounds_done,
        trials_run,
        elapsed_s: started.elapsed().as_secs_f64(),
        racing,
    };
    let json = serde_json::to_string(&summary).unwrap_or_default();
    store.study_set_state(run_id, "done", Some(&json))?;
    Ok(RunOutcome {
        run: run_id,
        summary,
    })
}

fn summarize(
    goal: &Goal,
    trials: &[TrialRecord],
    c: &Config,
    elim: &[Elimination],
) -> ConfigSummary {
    let key = c.key();
    let mine: Vec<&TrialRecord> = trials.iter().filter(|t| t.config == key).collect();
    let vals: Vec<f64> = mine
        .iter()
        .filter(|t| t.status == "ok")
        .filter_map(|t| t.value)
        .collect();
    let ms: Vec<Measurement> = mine
        .iter()
        .filter(|t| t.status == "ok")
        .filter_map(|t| t.measurement.as_deref())
        .filter_map(|j| Measurement::from_json(j).ok())
        .collect();
    let thr: Vec<f64> = ms.iter().map(|m| m.throughput_rps).collect();
    let cpu: Vec<f64> = ms
        .iter()
        .filter_map(|m| {
            m.cpu
                .as_ref()
                .map(|c| c.iter().map(|u| u.cores).sum::<f64>())
        })
        .collect();
    let _ = goal;
    ConfigSummary {
        config: key.clone(),
        trials: mine.len(),
        ok: vals.len(),
        mean: (!vals.is_empty()).then(|| stats::mean(&vals)),
        stdev: (vals.len() > 1).then(|| stats::stdev(&vals)),
        throughput: (!thr.is_empty()).then(|| stats::mean(&thr)),
        cpu_cores: (!cpu.is_empty()).then(|| stats::mean(&cpu)),
        eliminated_round: elim.iter().find(|e| e.config == key).map(|e| e.round),
    }
}

/// One point of a load sweep.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ScalePoint {
    pub users: usize,
    pub throughput: f64,
    /// Mean response time in seconds.
    pub response_time_s: Option<f64>,
    pub p99_ms: Option<f64>,
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
    pub run: i64,
    pub config: String,
    pub points: Vec<ScalePoint>,
    /// The fewest users reaching 95 % of the highest throughput.
    pub saturation_users: Option<usize>,
    /// The users with the highest power (throughput / response time): the knee.
    pub knee_users: Option<usize>,
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

/// The scaling mode: one fresh deployment of the scaling configuration per user count.
pub fn run_scaling(
    study: &Study,
    topo: &Topology,
    opts: &RunOptions,
    users: &[usize],
) -> Result<Scaling> {
    let mut store = Store::open(&opts.store)?;
    let run_id = store.study_begin(
        &format!("{} (scaling)", study.name),
        &study.path.display().to_string(),
        &study.source,
        &host_json(topo),
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
            store.study_set_state(run_id, "interrupted", None)?;
            progress.finish();
            return Err(StudyError::Interrupted);
        }
        progress.message(format!("{u} users"));
        let o = run_trial(&ctx, config, Some(u));
        if opts.stop.load(Ordering::SeqCst) {
            store.study_set_state(run_id, "interrupted", None)?;
            progress.finish();
            return Err(StudyError::Interrupted);
        }
        store.trial_add(&to_record(run_id, "scale", i + 1, config, &o))?;
        progress.inc();
        if let Some(why) = driver_saturation(study, &o.detail) {
            warnings.push(format!(
                "{u} users: {why}; the saturation point and knee may be the driver's"
            ));
        }
        match (&o.status[..], &o.measurement) {
            ("ok" | "violated", Some(m)) => {
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
        "done",
        Some(&serde_json::json!({ "scaling": s }).to_string()),
    )?;
    Ok(s)
}
