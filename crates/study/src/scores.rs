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
        .filter_map(|k| Some((k, mean_score(goal, trials, k, through_round)?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k.clone())
}

/// Configurations among `keys` with a score, by their mean score over the race rounds up to
/// `through_round`, best first (ties in `keys`' order).
pub(crate) fn ranked_means(
    goal: &Goal,
    trials: &[TrialRecord],
    keys: &[String],
    through_round: usize,
) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = keys
        .iter()
        .filter_map(|k| Some((k.clone(), mean_score(goal, trials, k, through_round)?)))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// Configuration `key`'s mean score over its race trials up to `through_round` (`None`:
/// none has a score).
fn mean_score(goal: &Goal, trials: &[TrialRecord], key: &str, through_round: usize) -> Option<f64> {
    let v: Vec<f64> = trials
        .iter()
        .filter(|t| {
            t.phase == TrialPhase::Race && t.config == key && t.round <= through_round as i64
        })
        .filter_map(|t| score(goal, t))
        .collect();
    (!v.is_empty()).then(|| stats::mean(&v))
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

/// Each of `keys`' effect in a two-way additive model of the race results — log score =
/// round effect + configuration effect + noise — fitted by least squares over every
/// successful race trial of `trials` (alternating means until it settles), with how many
/// trials it rests on. The round effects take up the machine's drift from round to round, as
/// the blocks of the rank tests do; unlike a mean over one race's rounds, a configuration's
/// effect rests on every round it ran in, paired through the configurations each round
/// shares with others. In the goal's direction (higher is better); comparable between
/// configurations whose rounds are connected through shared configurations. Keys without a
/// trial are left out.
pub(crate) fn block_effects(
    goal: &Goal,
    trials: &[TrialRecord],
    keys: &[String],
) -> Vec<(String, f64, usize)> {
    let obs: Vec<(i64, &str, f64)> = trials
        .iter()
        .filter(|t| t.phase == TrialPhase::Race)
        .filter_map(|t| {
            let v = t
                .value
                .filter(|v| *v > 0.0 && t.status == TrialStatus::Ok)?;
            let y = if goal.higher_is_better() {
                v.ln()
            } else {
                -v.ln()
            };
            Some((t.round, t.config.as_str(), y))
        })
        .collect();
    let mut rounds: std::collections::BTreeMap<i64, f64> = Default::default();
    let mut configs: std::collections::BTreeMap<&str, f64> = Default::default();
    for (r, c, _) in &obs {
        rounds.insert(*r, 0.0);
        configs.insert(c, 0.0);
    }
    for _ in 0..200 {
        let mut change: f64 = 0.0;
        // Configuration effects given the round effects, then round effects given those.
        let mut sums: std::collections::BTreeMap<&str, (f64, usize)> = Default::default();
        for (r, c, y) in &obs {
            let e = sums.entry(c).or_default();
            e.0 += y - rounds[r];
            e.1 += 1;
        }
        for (c, (s, n)) in sums {
            let new = s / n as f64;
            change = change.max((new - configs[c]).abs());
            configs.insert(c, new);
        }
        let mut sums: std::collections::BTreeMap<i64, (f64, usize)> = Default::default();
        for (r, c, y) in &obs {
            let e = sums.entry(*r).or_default();
            e.0 += y - configs[c];
            e.1 += 1;
        }
        for (r, (s, n)) in sums {
            let new = s / n as f64;
            change = change.max((new - rounds[&r]).abs());
            rounds.insert(r, new);
        }
        if change < 1e-12 {
            break;
        }
    }
    keys.iter()
        .filter_map(|k| {
            let n = obs.iter().filter(|(_, c, _)| *c == k).count();
            Some((k.clone(), *configs.get(k.as_str())?, n))
        })
        .collect()
}
