//! A run's race trials read as scores: one configuration's value in a round, two
//! configurations' values paired round by round, their log advantage, the best mean, and the
//! rounds × configurations blocks the rank tests take. The racing rules, the summary, the
//! replay and the comparison of two runs all read the trials through these.

use perfpilot_store::{TrialPhase, TrialRecord, TrialStatus};

use crate::spec::Goal;
use crate::stats;

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
                .filter(|t| {
                    t.phase == TrialPhase::Race && &t.config == k && t.round <= through_round as i64
                })
                .filter_map(|t| score(goal, t))
                .collect();
            (!v.is_empty()).then(|| (k, stats::mean(&v)))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k.clone())
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
        .find(|t| t.phase == TrialPhase::Race && t.round == round && t.config == key)
}

/// The objective's value of configuration `key`'s successful race trial in `round`, when
/// positive (a ratio needs it).
pub(crate) fn race_value(trials: &[TrialRecord], key: &str, round: i64) -> Option<f64> {
    race_trial(trials, key, round)
        .filter(|t| t.status == TrialStatus::Ok)
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
    if t.status != TrialStatus::Ok {
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
