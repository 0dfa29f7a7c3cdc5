//! What a run concluded, as stored with it: the figures of each configuration in the race and
//! in the confirmation (kept apart: a mean over both would mix rounds the losers never ran),
//! the winner's and the baseline's figures over the rounds behind the gain, the gain and its
//! verdict, the configurations that cannot be told from the winner, and the warnings and notes
//! about the measurements themselves.

use perfpilot_drive::Measurement;
use perfpilot_store::{TrialPhase, TrialRecord, TrialStatus};
use serde::{Deserialize, Serialize};

use crate::plan::Infeasible;
use crate::race::{Elimination, Left};
use crate::scores::paired_values;
use crate::spec::{Goal, LoadKind, Study};
use crate::stats::{self, Alternative, RatioCi};
use crate::trial::{TrialDetail, driver_saturation};

/// Per-configuration figures over the trials of one phase (the race, or the confirmation).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ConfigSummary {
    /// The configuration's key.
    pub config: String,
    /// Its trials in the phase.
    pub trials: usize,
    /// Those that succeeded.
    pub ok: usize,
    /// The objective's mean over the successful trials.
    pub mean: Option<f64>,
    /// The objective's standard deviation over them (with two or more).
    pub stdev: Option<f64>,
    /// Mean requests per second.
    pub throughput: Option<f64>,
    /// Mean busy cores of its instances.
    pub cpu_cores: Option<f64>,
    /// The round after which it left the race.
    pub eliminated_round: Option<usize>,
}

/// One configuration's means over the rounds where it and the other side of a comparison both
/// completed a trial.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PairedFigures {
    /// The configuration's key.
    pub config: String,
    /// The objective's mean.
    pub value: f64,
    /// Mean requests per second (`None`: no measurement to read it from).
    pub throughput: Option<f64>,
}

/// The winner against the baseline over the rounds (race and confirmation) where both
/// completed a trial: the rounds the gain is estimated from.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AgainstBaseline {
    /// The rounds where both completed a trial.
    pub rounds: usize,
    /// The winner's means over them.
    pub winner: PairedFigures,
    /// The baseline's means over them.
    pub baseline: PairedFigures,
}

/// What a run concluded (stored as the study run's summary).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// The objective, described.
    pub goal: String,
    /// The objective's unit.
    pub unit: String,
    /// The unit of a trial's throughput: `req/s`, or `jobs/s` for a batch study.
    #[serde(default = "requests_per_second")]
    pub rate_unit: String,
    /// Whether a higher objective is better.
    pub higher_is_better: bool,
    /// The baseline configuration's key.
    pub baseline: String,
    /// The best mean among the configurations left at the end.
    pub winner: Option<String>,
    /// Configurations still in the race at the end (not significantly different from the
    /// winner), those that left it as equivalent to, or tied with, the leader, and settled
    /// ones whose paired 95 % interval against the winner holds 1.
    pub indistinguishable: Vec<String>,
    /// The chance of being the best of each configuration still in the race at the end or
    /// settled (share of bootstrap resamples of the rounds in which it has the best mean; best
    /// first, those never best left out): how firmly the rounds single out the winner.
    #[serde(default)]
    pub chance_best: Vec<(String, f64)>,
    /// The winner's gain over the baseline in the goal's direction (> 1 is better), with its
    /// 95 % confidence interval, from paired rounds.
    pub gain: Option<RatioCi>,
    /// Wilcoxon (two-sided) p-value of winner vs baseline over the paired rounds.
    pub gain_p_value: Option<f64>,
    /// "better", "not significantly different", or why there is no verdict.
    pub verdict: String,
    /// The winner's and the baseline's figures over the rounds behind the gain (`None`: no
    /// winner, the baseline won, or no round where both completed a trial).
    #[serde(default)]
    pub against_baseline: Option<AgainstBaseline>,
    /// The figures of every runnable configuration over its race trials.
    pub configurations: Vec<ConfigSummary>,
    /// The winner's and the baseline's figures over their confirmation trials (empty: no
    /// confirmation ran).
    #[serde(default)]
    pub confirmation: Vec<ConfigSummary>,
    /// The configurations that left the race, in the order they left.
    pub eliminated: Vec<Elimination>,
    /// The configurations this machine cannot run.
    pub infeasible: Vec<Infeasible>,
    /// What to doubt about the run: skipped configurations, the budget's end, noise, warm-up,
    /// a saturated load driver.
    pub warnings: Vec<String>,
    /// What the run could not check, as the study chose (measurements too short for MSER-5).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Race rounds run.
    pub rounds: usize,
    /// Trials this invocation ran (a resumed run's earlier ones are not counted).
    pub trials_run: usize,
    /// Seconds this invocation took.
    pub elapsed_s: f64,
    /// Whether configurations could leave the race.
    pub racing: bool,
    /// An iterated search's iterations: each one's elites and sampling (`None`: a grid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<crate::iterate::SearchSummary>,
}

/// An empty summary of a throughput goal: what tests and callers fill in part of.
impl Default for Summary {
    fn default() -> Summary {
        Summary {
            goal: String::new(),
            unit: requests_per_second(),
            rate_unit: requests_per_second(),
            higher_is_better: true,
            baseline: String::new(),
            winner: None,
            indistinguishable: Vec::new(),
            chance_best: Vec::new(),
            gain: None,
            gain_p_value: None,
            verdict: String::new(),
            against_baseline: None,
            configurations: Vec::new(),
            confirmation: Vec::new(),
            eliminated: Vec::new(),
            infeasible: Vec::new(),
            warnings: Vec::new(),
            notes: Vec::new(),
            rounds: 0,
            trials_run: 0,
            elapsed_s: 0.0,
            racing: false,
            search: None,
        }
    }
}

impl Summary {
    /// Whether the winner is the configuration to deploy: it is the baseline, or the
    /// confirmation shows it significantly better (the verdict's rule). `false` without a
    /// winner.
    pub fn winner_shown_better(&self) -> bool {
        match &self.winner {
            Some(w) => *w == self.baseline || significantly_better(self.gain.as_ref()),
            None => false,
        }
    }
}

/// Whether a `gain` over the baseline is significantly better: its 95 % interval lies above 1.
pub fn significantly_better(gain: Option<&RatioCi>) -> bool {
    gain.is_some_and(|g| g.low > 1.0)
}

/// The figures of configuration `key` over its trials of `phase`.
pub(crate) fn summarize(
    trials: &[TrialRecord],
    phase: TrialPhase,
    key: &str,
    elim: &[Elimination],
) -> ConfigSummary {
    let mine: Vec<&TrialRecord> = trials
        .iter()
        .filter(|t| t.phase == phase && t.config == key)
        .collect();
    let vals: Vec<f64> = mine
        .iter()
        .filter(|t| t.status == TrialStatus::Ok)
        .filter_map(|t| t.value)
        .collect();
    let ms: Vec<Measurement> = mine
        .iter()
        .filter(|t| t.status == TrialStatus::Ok)
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
    ConfigSummary {
        config: key.to_string(),
        trials: mine.len(),
        ok: vals.len(),
        mean: (!vals.is_empty()).then(|| stats::mean(&vals)),
        stdev: (vals.len() > 1).then(|| stats::stdev(&vals)),
        throughput: (!thr.is_empty()).then(|| stats::mean(&thr)),
        cpu_cores: (!cpu.is_empty()).then(|| stats::mean(&cpu)),
        eliminated_round: elim.iter().find(|e| e.config == key).map(|e| e.round),
    }
}

/// The race and confirmation figures of every configuration in `keys`, and the confirmation
/// figures of the winner and the baseline (those of them with confirmation trials).
pub(crate) fn phase_figures(
    trials: &[TrialRecord],
    keys: &[String],
    winner: Option<&str>,
    baseline: &str,
    elim: &[Elimination],
) -> (Vec<ConfigSummary>, Vec<ConfigSummary>) {
    let race = keys
        .iter()
        .map(|k| summarize(trials, TrialPhase::Race, k, elim))
        .collect();
    let mut confirmed: Vec<&str> = winner.into_iter().collect();
    if !confirmed.contains(&baseline) {
        confirmed.push(baseline);
    }
    let confirm = confirmed
        .into_iter()
        .map(|k| summarize(trials, TrialPhase::Confirm, k, elim))
        .filter(|c| c.trials > 0)
        .collect();
    (race, confirm)
}

/// The trials of `winner` and `baseline` in every (phase, round) where both completed one, in
/// the order of the phase's word, then the round: the order these pairs always had.
fn completed_pairs<'a>(
    trials: &'a [TrialRecord],
    winner: &str,
    baseline: &str,
) -> Vec<(&'a TrialRecord, &'a TrialRecord)> {
    let mut keys: Vec<(&str, i64)> = trials.iter().map(|t| (t.phase.as_str(), t.round)).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|(phase, round)| {
            let get = |k: &str| {
                trials.iter().find(|t| {
                    t.phase.as_str() == phase
                        && t.round == round
                        && t.config == k
                        && t.status == TrialStatus::Ok
                        && t.value.is_some()
                })
            };
            Some((get(winner)?, get(baseline)?))
        })
        .collect()
}

/// The gain of configuration `winner` over `baseline` in the goal's direction with its 95 %
/// interval, and the two-sided Wilcoxon p-value, over every (phase, round) where both ran
/// successfully.
pub(crate) fn paired_gain(
    goal: &Goal,
    trials: &[TrialRecord],
    winner: &str,
    baseline: &str,
) -> (Option<RatioCi>, Option<f64>) {
    let mut cand = Vec::new();
    let mut base = Vec::new();
    for (w, b) in completed_pairs(trials, winner, baseline) {
        let (Some(a), Some(b)) = (w.value, b.value) else {
            continue;
        };
        if goal.higher_is_better() {
            cand.push(a);
            base.push(b);
        } else {
            // Gain in the goal's direction: baseline / winner.
            cand.push(b);
            base.push(a);
        }
    }
    let gain = stats::paired_ratio_ci(&cand, &base, 0.95);
    let p = stats::wilcoxon(&cand, &base, Alternative::TwoSided).map(|w| w.p_value);
    (gain, p)
}

/// The means of `winner` and `baseline` over the rounds where both completed a trial (those
/// [`paired_gain`] reads); `None` when the winner is the baseline or there is no such round.
pub(crate) fn against_baseline(
    trials: &[TrialRecord],
    winner: &str,
    baseline: &str,
) -> Option<AgainstBaseline> {
    if winner == baseline {
        return None;
    }
    let pairs = completed_pairs(trials, winner, baseline);
    if pairs.is_empty() {
        return None;
    }
    let figures = |key: &str, ts: Vec<&TrialRecord>| {
        let values: Vec<f64> = ts.iter().filter_map(|t| t.value).collect();
        let thr: Vec<f64> = ts
            .iter()
            .filter_map(|t| t.measurement.as_deref())
            .filter_map(|j| Measurement::from_json(j).ok())
            .map(|m| m.throughput_rps)
            .collect();
        PairedFigures {
            config: key.to_string(),
            value: stats::mean(&values),
            // Only when every round has it, so both sides average the same rounds.
            throughput: (thr.len() == ts.len()).then(|| stats::mean(&thr)),
        }
    };
    Some(AgainstBaseline {
        rounds: pairs.len(),
        winner: figures(winner, pairs.iter().map(|p| p.0).collect()),
        baseline: figures(baseline, pairs.iter().map(|p| p.1).collect()),
    })
}

/// The verdict on a winner's `gain` over the baseline.
pub(crate) fn verdict(gain: Option<RatioCi>) -> String {
    match gain {
        Some(g) if significantly_better(Some(&g)) => format!(
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
    }
}

/// The configurations the winner cannot be told from: those left at the end (`alive`) that
/// are neither the winner nor significantly `worse`, and those that left as equivalent, tied,
/// or settled with a paired 95 % interval against the winner that holds 1.
pub(crate) fn indistinguishable(
    trials: &[TrialRecord],
    alive: &[String],
    winner: Option<&str>,
    worse: &[String],
    eliminated: &[Elimination],
) -> Vec<String> {
    alive
        .iter()
        .filter(|k| Some(k.as_str()) != winner)
        .filter(|k| !worse.contains(k))
        .cloned()
        .chain(
            eliminated
                .iter()
                .filter(|e| match e.kind {
                    Left::Equivalent | Left::Tied => true,
                    // A settled configuration steadily behind the winner is not one it
                    // cannot be told from: only those whose paired 95 % interval holds 1.
                    Left::Settled => winner.is_none_or(|w| {
                        let (x, y) = paired_values(trials, &e.config, w, e.round as i64);
                        stats::paired_ratio_ci(&x, &y, 0.95)
                            .is_none_or(|ci| ci.low <= 1.0 && ci.high >= 1.0)
                    }),
                    _ => false,
                })
                .map(|e| e.config.clone()),
        )
        .collect()
}

/// Warnings about the measurements: the baseline's noise against the effect sought, trials
/// that never reached a steady state, and a saturated load driver.
pub(crate) fn measurement_warnings(
    study: &Study,
    trials: &[TrialRecord],
    baseline: &str,
) -> Vec<String> {
    let mut warnings = Vec::new();
    // Noise: the baseline's run-to-run variation against the effect sought.
    let base_vals: Vec<f64> = trials
        .iter()
        .filter(|t| t.config == baseline && t.status == TrialStatus::Ok)
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
    warnings
}

fn requests_per_second() -> String {
    "req/s".into()
}

/// The unit of `study`'s trial throughputs.
pub(crate) fn rate_unit(study: &Study) -> String {
    match study.load.kind {
        LoadKind::Batch { .. } => "jobs/s".into(),
        _ => requests_per_second(),
    }
}

/// Notes on what the run could not check because of how the study is set up: measurements
/// too short for MSER-5 (a quick study's choice, not a fault of the measurements). Only the
/// built-in driver records the per-second series MSER-5 reads; a batch or a load command
/// has none whatever the measure.
pub(crate) fn measurement_notes(study: &Study, trials: &[TrialRecord]) -> Vec<String> {
    if !matches!(study.load.kind, LoadKind::Builtin { .. })
        || study.run.measure >= std::time::Duration::from_secs(20)
    {
        return Vec::new();
    }
    // Measured trials only: a failed deployment has no series to judge.
    let mut race = trials
        .iter()
        .filter(|t| t.phase == TrialPhase::Race && t.measurement.is_some())
        .filter_map(|t| serde_json::from_str::<TrialDetail>(&t.detail).ok())
        .peekable();
    if race.peek().is_none() || race.any(|d| d.mser.is_some()) {
        return Vec::new();
    }
    vec![format!(
        "run.measure ({:?}) gives fewer than the 20 per-second points MSER-5 needs, so whether run.warmup ({:?}) was long enough was not checked; a measure of 20s or more checks it",
        study.run.measure, study.run.warmup
    )]
}

/// Lines of a failure's reason quoted when a run fails (the end of a long stderr).
const TAIL_LINES: usize = 8;

/// Why a run has no winner, as `(verdict, error)`: how many trials failed or broke a
/// constraint, and for the error the end of the first one's reason.
pub(crate) fn no_trial_completed(trials: &[TrialRecord]) -> (String, String) {
    let count = |s: TrialStatus| trials.iter().filter(|t| t.status == s).count();
    let (ok, failed, violated) = (
        count(TrialStatus::Ok),
        count(TrialStatus::Failed),
        count(TrialStatus::Violated),
    );
    let mut counts = format!("{failed} failed, {violated} broke a constraint of the objective");
    // Trials of configurations that later left the race (failing twice) may have completed.
    let none = if ok == 0 {
        format!("none of its {} trials completed", trials.len())
    } else {
        counts.insert_str(0, &format!("{ok} completed, "));
        "no configuration left at the race's end completed a trial".to_string()
    };
    let verdict = format!("{none} ({counts})");
    let Some(first) = trials.iter().find(|t| t.status != TrialStatus::Ok) else {
        return (verdict, format!("no trial ran ({counts})"));
    };
    let lines: Vec<&str> = first
        .reason
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n  ");
    let error = format!(
        "{none} ({counts}); the first, {} round {} of {}, {}:\n  {tail}",
        first.phase,
        first.round,
        first.config,
        if first.status == TrialStatus::Failed {
            "failed"
        } else {
            "broke a constraint"
        },
    );
    (verdict, error)
}
