//! What a run concluded, as stored with it: the figures of each configuration, the winner's
//! gain over the baseline and its verdict, the configurations that cannot be told from the
//! winner, and the warnings about the measurements themselves.

use perfpilot_drive::Measurement;
use perfpilot_store::{TrialPhase, TrialRecord, TrialStatus};
use serde::{Deserialize, Serialize};

use crate::plan::Infeasible;
use crate::race::{Elimination, Left};
use crate::scores::paired_values;
use crate::spec::{Config, Goal, Study};
use crate::stats::{self, Alternative, RatioCi};
use crate::trial::{TrialDetail, driver_saturation};

/// Per-configuration figures.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ConfigSummary {
    /// The configuration's key.
    pub config: String,
    /// Its trials, race and confirmation.
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

/// What a run concluded (stored as the study run's summary).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// The objective, described.
    pub goal: String,
    /// The objective's unit.
    pub unit: String,
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
    /// The figures of every runnable configuration.
    pub configurations: Vec<ConfigSummary>,
    /// The configurations that left the race, in the order they left.
    pub eliminated: Vec<Elimination>,
    /// The configurations this machine cannot run.
    pub infeasible: Vec<Infeasible>,
    /// What to doubt about the run: skipped configurations, the budget's end, noise, warm-up,
    /// a saturated load driver.
    pub warnings: Vec<String>,
    /// Race rounds run.
    pub rounds: usize,
    /// Trials this invocation ran (a resumed run's earlier ones are not counted).
    pub trials_run: usize,
    /// Seconds this invocation took.
    pub elapsed_s: f64,
    /// Whether configurations could leave the race.
    pub racing: bool,
}

/// The figures of configuration `c` over its trials.
pub(crate) fn summarize(trials: &[TrialRecord], c: &Config, elim: &[Elimination]) -> ConfigSummary {
    let key = c.key();
    let mine: Vec<&TrialRecord> = trials.iter().filter(|t| t.config == key).collect();
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
    // In the order of the phase's word, then the round: the order these pairs always had.
    let mut keys: Vec<(&str, i64)> = trials.iter().map(|t| (t.phase.as_str(), t.round)).collect();
    keys.sort();
    keys.dedup();
    for (phase, round) in keys {
        let get = |k: &str| {
            trials
                .iter()
                .find(|t| {
                    t.phase.as_str() == phase
                        && t.round == round
                        && t.config == k
                        && t.status == TrialStatus::Ok
                })
                .and_then(|t| t.value)
        };
        if let (Some(a), Some(b)) = (get(winner), get(baseline)) {
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
    let gain = stats::paired_ratio_ci(&cand, &base, 0.95);
    let p = stats::wilcoxon(&cand, &base, Alternative::TwoSided).map(|w| w.p_value);
    (gain, p)
}

/// The verdict on a winner's `gain` over the baseline.
pub(crate) fn verdict(gain: Option<RatioCi>) -> String {
    match gain {
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
/// that never reached a steady state, a saturated load driver, and measurements too short for
/// MSER-5.
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
    if details
        .iter()
        .filter(|(t, _)| t.phase == TrialPhase::Race)
        .all(|(_, d)| d.mser.is_none())
    {
        warnings.push("measurements shorter than 20 s: MSER-5 warm-up detection needs at least 20 per-second points".into());
    }
    warnings
}
