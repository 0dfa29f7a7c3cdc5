//! The report of a stored study run: the race's and the confirmation's figures and trials in
//! tables of their own, the scaling view (throughput and CPU vs instances), the effect of each
//! factor, the best configuration against the baseline with its evidence, and the apply script
//! (the winner's when it is shown better than the baseline, else the baseline's unless forced).
//! Rendered as JSON, Markdown or HTML (inline SVG charts drawn by `perfpilot-chart`).

mod apply;
mod html;
pub mod jobs;
mod markdown;

use std::collections::BTreeMap;
use std::path::Path;

use perfpilot_drive::Measurement;
use perfpilot_store::{RunState, Store, StudyRecord, TrialPhase, TrialRecord, TrialStatus};
use serde::Serialize;

use crate::error::{Result, StudyError};
use crate::scale::Scaling;
use crate::spec::{Config, Level, Study};
use crate::stats;
use crate::summary::{Summary, against_baseline, phase_figures};

pub use apply::{Apply, ApplyError, apply_script};
pub use html::{facts_table, machine_rows, markdown_body, to_html};
pub use markdown::to_markdown;

/// One row of the trial table.
#[derive(Clone, Debug, Serialize)]
pub struct TrialRow {
    /// The trial's id in the store.
    pub id: i64,
    /// The part of the run it belongs to.
    pub phase: TrialPhase,
    /// Its round within the phase.
    pub round: i64,
    /// The configuration's key.
    pub config: String,
    /// How it ended.
    pub status: TrialStatus,
    /// Why it failed or violated a constraint.
    pub reason: String,
    /// The objective's value.
    pub value: Option<f64>,
    /// Requests per second.
    pub throughput: Option<f64>,
    /// The 99th percentile of the response time, in ms.
    pub p99_ms: Option<f64>,
    /// Requests that failed.
    pub errors: Option<u64>,
    /// Busy cores of its instances.
    pub cpu_cores: Option<f64>,
}

/// Throughput and CPU at one instance count (the best configuration with that many instances),
/// over race trials.
#[derive(Clone, Debug, Serialize)]
pub struct ScalingRow {
    /// The instance count.
    pub instances: usize,
    /// The configuration with the best mean objective among those with that many instances.
    pub config: String,
    /// Its mean requests per second.
    pub throughput: f64,
    /// Its mean busy cores.
    pub cpu_cores: Option<f64>,
    /// Throughput per busy core.
    pub per_core: Option<f64>,
}

/// The mean objective at each level of a factor, over every successful race trial.
#[derive(Clone, Debug, Serialize)]
pub struct FactorEffect {
    /// The factor's name.
    pub factor: String,
    /// `(level, mean value, trials, mean / overall mean)`.
    pub levels: Vec<(String, f64, usize, f64)>,
}

/// A study run's report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The study run's id.
    pub run: i64,
    /// The study's name.
    pub name: String,
    /// The path the study file was run from.
    pub file: String,
    /// Where the run stands.
    pub state: RunState,
    /// Facts about the machine it ran on.
    pub host: serde_json::Value,
    /// What the run concluded (`None`: unfinished, or a load sweep).
    pub summary: Option<Summary>,
    /// The load sweep (`None`: not a sweep, or unfinished).
    pub scaling: Option<Scaling>,
    /// Every trial.
    pub trials: Vec<TrialRow>,
    /// Throughput and CPU per instance count.
    pub scaling_view: Vec<ScalingRow>,
    /// The effect of each factor.
    pub effects: Vec<FactorEffect>,
    /// The apply script: the winner's when it is the baseline or shown significantly better
    /// than it (or forced), else the baseline's (`None`: no winner, no layout, or a baseline
    /// that never completed a trial and no `force`).
    pub apply: Option<Apply>,
    /// Why the apply script deploys what it does, when that is not simply the winner.
    pub apply_note: Option<String>,
    /// A batch study's per-job figures by configuration (empty otherwise).
    pub jobs: Vec<jobs::JobTimes>,
    /// A batch study's elapsed, CPU and core-equivalent CPU by configuration.
    pub batch: Vec<jobs::BatchTotals>,
}

/// How a report is built.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReportOptions {
    /// Write the winner's apply script even when it is not shown better than the baseline.
    pub force: bool,
}

fn decode_summary(run: &StudyRecord) -> (Option<Summary>, Option<Scaling>) {
    let Some(text) = &run.summary else {
        return (None, None);
    };
    if let Ok(s) = serde_json::from_str::<Summary>(text) {
        return (Some(s), None);
    }
    #[derive(serde::Deserialize)]
    struct Wrap {
        scaling: Scaling,
    }
    (
        None,
        serde_json::from_str::<Wrap>(text).ok().map(|w| w.scaling),
    )
}

/// Builds the report of run `run` from `store`, with the default [`ReportOptions`].
pub fn build(store: &Store, run: i64) -> Result<Report> {
    build_with(store, run, ReportOptions::default())
}

/// Builds the report of run `run` from `store`.
pub fn build_with(store: &Store, run: i64, opts: ReportOptions) -> Result<Report> {
    let rec = store.study(run)?.ok_or_else(|| StudyError::NoRun {
        store: store.path().to_path_buf(),
        run,
    })?;
    let trials = store.trials(run)?;
    let (mut summary, scaling) = decode_summary(&rec);
    // The figures are read again from the trials: runs stored before race and confirmation
    // were kept apart get separate tables too.
    if let Some(sum) = &mut summary {
        let keys: Vec<String> = sum
            .configurations
            .iter()
            .map(|c| c.config.clone())
            .collect();
        (sum.configurations, sum.confirmation) = phase_figures(
            &trials,
            &keys,
            sum.winner.as_deref(),
            &sum.baseline,
            &sum.eliminated,
        );
        sum.against_baseline = sum
            .winner
            .as_deref()
            .and_then(|w| against_baseline(&trials, w, &sum.baseline));
    }
    let rows = trial_rows(&trials);
    let study = Study::parse(&rec.spec, Path::new(&rec.file)).ok();
    let higher = summary.as_ref().is_none_or(|s| s.higher_is_better);
    let by_config = race_figures(&trials, &rows);
    let scaling_view = scaling_view(&by_config, higher);
    let effects = study
        .as_ref()
        .map_or_else(Vec::new, |study| effects(study, &by_config));

    let (apply, apply_note) = match (&study, &summary) {
        (Some(study), Some(sum)) => choose_apply(study, run, &trials, sum, opts.force),
        _ => (None, None),
    };
    Ok(Report {
        run,
        name: rec.name.clone(),
        file: rec.file.clone(),
        state: rec.state,
        host: serde_json::from_str(&rec.host).unwrap_or(serde_json::Value::Null),
        summary,
        scaling,
        trials: rows,
        scaling_view,
        effects,
        apply,
        apply_note,
        jobs: jobs::job_times(&trials),
        batch: jobs::batch_totals(&trials),
    })
}

/// One row per trial, with its measurement's headline figures.
fn trial_rows(trials: &[TrialRecord]) -> Vec<TrialRow> {
    trials
        .iter()
        .map(|t| {
            let m = t
                .measurement
                .as_deref()
                .and_then(|j| Measurement::from_json(j).ok());
            TrialRow {
                id: t.id,
                phase: t.phase,
                round: t.round,
                config: t.config.clone(),
                status: t.status,
                reason: t.reason.clone(),
                value: t.value,
                throughput: m.as_ref().map(|m| m.throughput_rps),
                p99_ms: m
                    .as_ref()
                    .and_then(|m| m.latency.as_ref())
                    .and_then(|l| l.p99_ms),
                errors: m.as_ref().map(|m| m.errors),
                cpu_cores: m
                    .as_ref()
                    .and_then(|m| m.cpu.as_ref())
                    .map(|c| c.iter().map(|u| u.cores).sum()),
            }
        })
        .collect()
}

/// A configuration's figures over its race trials that completed.
struct ConfigFigures {
    /// Its levels.
    config: Config,
    /// The objective's values.
    values: Vec<f64>,
    /// The throughputs.
    throughputs: Vec<f64>,
    /// The busy cores.
    cores: Vec<f64>,
}

/// Per configuration (by key), its figures over race trials only: every configuration ran in
/// every round it was in the race, while the confirmation adds rounds of two of them only.
fn race_figures(trials: &[TrialRecord], rows: &[TrialRow]) -> BTreeMap<String, ConfigFigures> {
    let mut by_config: BTreeMap<String, ConfigFigures> = BTreeMap::new();
    for (t, row) in trials.iter().zip(rows) {
        if t.status != TrialStatus::Ok || t.phase != TrialPhase::Race {
            continue;
        }
        let Ok(cfg) = serde_json::from_str::<Config>(&t.factors) else {
            continue;
        };
        let e = by_config
            .entry(t.config.clone())
            .or_insert_with(|| ConfigFigures {
                config: cfg,
                values: Vec::new(),
                throughputs: Vec::new(),
                cores: Vec::new(),
            });
        if let Some(v) = t.value {
            e.values.push(v);
        }
        if let Some(x) = row.throughput {
            e.throughputs.push(x);
        }
        if let Some(c) = row.cpu_cores {
            e.cores.push(c);
        }
    }
    by_config
}

/// The scaling view: per instance count, the configuration with the best mean objective
/// (`higher`: whether higher is better).
fn scaling_view(by_config: &BTreeMap<String, ConfigFigures>, higher: bool) -> Vec<ScalingRow> {
    let mut best_per_n: BTreeMap<usize, (String, f64, f64, Option<f64>)> = BTreeMap::new();
    for (key, f) in by_config {
        if f.values.is_empty() || f.throughputs.is_empty() {
            continue;
        }
        let m = stats::mean(&f.values);
        let s = if higher { m } else { -m };
        let cpu = (!f.cores.is_empty()).then(|| stats::mean(&f.cores));
        let n = f.config.instances();
        if best_per_n.get(&n).is_none_or(|b| s > b.1) {
            best_per_n.insert(n, (key.clone(), s, stats::mean(&f.throughputs), cpu));
        }
    }
    best_per_n
        .into_iter()
        .map(|(n, (config, _, thr, cpu))| ScalingRow {
            instances: n,
            config,
            throughput: thr,
            cpu_cores: cpu,
            per_core: cpu.filter(|c| *c > 0.0).map(|c| thr / c),
        })
        .collect()
}

/// Each factor's effect: per level, the mean objective of the race trials at that level and
/// its ratio to the overall mean.
fn effects(study: &Study, by_config: &BTreeMap<String, ConfigFigures>) -> Vec<FactorEffect> {
    let all: Vec<f64> = by_config
        .values()
        .flat_map(|e| e.values.iter().copied())
        .collect();
    let overall = stats::mean(&all);
    let mut effects = Vec::new();
    for f in &study.factors {
        // A range's values: those its configurations took, in order.
        let values: Vec<Level> = match f.levels() {
            Some(l) => l.to_vec(),
            None => {
                let mut seen: Vec<Level> = by_config
                    .values()
                    .filter_map(|e| e.config.get(&f.name).cloned())
                    .collect();
                seen.sort_by(|a, b| level_order(a).total_cmp(&level_order(b)));
                seen.dedup();
                seen
            }
        };
        let mut levels = Vec::new();
        for l in &values {
            let v: Vec<f64> = by_config
                .values()
                .filter(|e| e.config.get(&f.name) == Some(l))
                .flat_map(|e| e.values.iter().copied())
                .collect();
            if !v.is_empty() {
                let m = stats::mean(&v);
                levels.push((l.to_string(), m, v.len(), m / overall));
            }
        }
        effects.push(FactorEffect {
            factor: f.name.clone(),
            levels,
        });
    }
    effects
}

/// The apply script of the configuration to deploy and, when that is not simply the winner,
/// why: the winner when it is the baseline or shown significantly better than it (the
/// verdict's rule) or `force` is given; else the baseline, or nothing when the baseline never
/// completed a trial (no layout to deploy, no comparison to judge the winner by).
fn choose_apply(
    study: &Study,
    run: i64,
    trials: &[perfpilot_store::TrialRecord],
    sum: &Summary,
    force: bool,
) -> (Option<Apply>, Option<String>) {
    let Some(winner) = &sum.winner else {
        return (None, None);
    };
    let script = |key: &str| {
        trials
            .iter()
            .find(|t| t.config == key && t.status == TrialStatus::Ok)
            .and_then(|t| apply_script(study, run, t, Some(sum)).ok())
    };
    if sum.winner_shown_better() {
        return (script(winner), None);
    }
    let baseline = &sum.baseline;
    if force {
        let note = format!(
            "the apply script deploys the winner {winner} as --force asks, although it is not significantly better than the baseline {baseline} ({})",
            sum.verdict
        );
        return (script(winner), Some(note));
    }
    match script(baseline) {
        Some(a) => (
            Some(a),
            Some(format!(
                "the apply script deploys the baseline {baseline}: the winner {winner} is not significantly better than it ({}); `perfpilot study report {run} --apply DIR --force` deploys the winner",
                sum.verdict
            )),
        ),
        None => (
            None,
            Some(format!(
                "no apply script: the winner {winner} is not shown better than the baseline {baseline}, which never completed a trial; `perfpilot study report {run} --apply DIR --force` deploys the winner"
            )),
        ),
    }
}

/// The report as pretty JSON.
pub fn to_json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The winner's and the baseline's figures: "means over the 8 rounds both completed (race
/// and confirmation): W 12618.3 req/s; the baseline B 11296.0 req/s", or when the baseline
/// won, "the baseline B's mean over its 5 completed race trials: 11296.0 req/s" (with the
/// objective's value when it is not the throughput); `None` without a winner or such trials.
pub fn figures_line(sum: &Summary) -> Option<String> {
    // The throughput objective's value is the throughput itself: quoted once.
    let throughput_goal = sum.higher_is_better && sum.unit == "req/s";
    let figures = |value: f64, throughput: Option<f64>| match (throughput_goal, throughput) {
        (true, _) => format!("{value:.1} {}", sum.unit),
        (false, None) => format!("{value:.2} {}", sum.unit),
        (false, Some(t)) => format!("{value:.2} {} at {t:.1} {}", sum.unit, sum.rate_unit),
    };
    if let Some(a) = &sum.against_baseline {
        return Some(format!(
            "means over the {} rounds both completed (race and confirmation): {} {}; the baseline {} {}",
            a.rounds,
            a.winner.config,
            figures(a.winner.value, a.winner.throughput),
            a.baseline.config,
            figures(a.baseline.value, a.baseline.throughput)
        ));
    }
    let b = sum
        .configurations
        .iter()
        .find(|c| c.config == sum.baseline && sum.winner.as_ref() == Some(&c.config))?;
    Some(format!(
        "the baseline {}'s mean over its {} completed race trials: {}",
        b.config,
        b.ok,
        figures(b.mean?, b.throughput)
    ))
}

/// "Chance of being the best …: A 86 %; B 7 %", the configurations a bootstrap of the rounds
/// ever finds best; `None` when there is no figure (one configuration, or an old summary).
pub fn chance_best_line(chance: &[(String, f64)]) -> Option<String> {
    if chance.is_empty() {
        return None;
    }
    let parts: Vec<String> = chance
        .iter()
        .map(|(k, c)| format!("{k} {:.0} %", c * 100.0))
        .collect();
    Some(format!(
        "Chance of being the best (bootstrap of the rounds; measuring again at another time can differ more): {}",
        parts.join("; ")
    ))
}

/// One iteration of an iterated search in a line: its rounds, budget and trials, the
/// configurations raced (new among them), draws made again, a soft restart, why it ended,
/// the elites it kept.
pub fn iteration_line(it: &crate::iterate::IterationSummary) -> String {
    let mut extra = Vec::new();
    let r = &it.redrawn;
    if r.forbidden + r.cannot_run + r.repeated > 0 {
        extra.push(format!(
            "draws made again: {} forbidden, {} not runnable here, {} repeats",
            r.forbidden, r.cannot_run, r.repeated
        ));
    }
    if it.soft_restart {
        extra.push("models soft-restarted".into());
    }
    let extra = match extra.is_empty() {
        true => String::new(),
        false => format!(" ({})", extra.join("; ")),
    };
    format!(
        "iteration {}: rounds {}–{}, {} of {} trials, {} configurations ({} new){extra}; ended: {}; elites: {}",
        it.iteration,
        it.rounds.0,
        it.rounds.1,
        it.trials,
        it.budget,
        it.raced,
        it.new,
        it.ended,
        it.elites
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// A mean with four significant digits or so (`426.8`, `1.234`, `0.01234`).
pub(crate) fn figure(x: f64) -> String {
    let digits = match x.abs() {
        a if a >= 1000.0 => 0,
        a if a >= 100.0 => 1,
        a if a >= 10.0 => 2,
        a if a >= 1.0 => 3,
        _ => 5,
    };
    format!("{x:.digits$}")
}

/// A numeric level's value, for ordering a range's values (others order as 0).
fn level_order(l: &Level) -> f64 {
    match l {
        Level::Int(i) => *i as f64,
        Level::Float(x) => *x,
        _ => 0.0,
    }
}
