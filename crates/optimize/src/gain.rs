//! The verdict's types and statistics: the gain of an action as a ratio with a confidence
//! interval, from windows measured before and after (or interleaved off/on pairs, which cancel
//! drift), and the decision it gives.

use serde::{Deserialize, Serialize};

/// The gain of an action: `ratio` > 1 means better, whatever the signal's direction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Gain {
    /// The estimated gain (after / before, turned round for a lower-is-better signal).
    pub ratio: f64,
    /// The confidence interval's low end.
    pub ci_low: f64,
    /// The confidence interval's high end.
    pub ci_high: f64,
    /// The interval's confidence level (e.g. 0.95).
    pub confidence: f64,
    /// The lag-1 autocorrelation of the windows the interval allowed for (sequential windows;
    /// 0 for interleaved pairs or windows that behaved as independent).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub serial: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// What to do with an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The gain's interval clears the minimum effect.
    Keep,
    /// The action made things worse.
    Revert,
    /// Not distinguishable from no effect: reverted and remembered.
    Neutral,
}

/// Gain from windows measured in sequence before and after (Welch, on the log of the ratio of
/// means by the delta method), widened for the windows' lag-1 autocorrelation: a signal that
/// wanders in spells longer than a window makes neighbouring windows alike, and taken as
/// independent they give a "clear" gain from nothing (perfpilot_stats::serial). `None` when a
/// side has fewer than two windows or a non-positive mean.
pub fn gain_sequential(
    before: &[f64],
    after: &[f64],
    higher_is_better: bool,
    confidence: f64,
) -> Option<Gain> {
    let s = perfpilot_stats::serial_ratio_of_means_ci(after, before, confidence)?;
    Some(Gain {
        serial: s.rho,
        ..gain_from_log(s.ci, higher_is_better, confidence)
    })
}

/// Gain from interleaved pairs (`off[i]`, `on[i]` measured next to each other): a paired t
/// interval on the log ratios. Pairs with a non-positive value are left out; `None` with fewer
/// than two usable pairs.
pub fn gain_paired(
    off: &[f64],
    on: &[f64],
    higher_is_better: bool,
    confidence: f64,
) -> Option<Gain> {
    let logs: Vec<f64> = off
        .iter()
        .zip(on)
        .filter(|(x, y)| **x > 0.0 && **y > 0.0)
        .map(|(x, y)| (y / x).ln())
        .collect();
    let ci = perfpilot_stats::mean_ci(&logs, confidence)?;
    Some(gain_from_log(ci, higher_is_better, confidence))
}

/// The gain from an interval on the log of `on / off`, turned round for a lower-is-better
/// signal so that a ratio above 1 is always an improvement.
pub(crate) fn gain_from_log(
    ci: perfpilot_stats::MeanCi,
    higher_is_better: bool,
    confidence: f64,
) -> Gain {
    let (mean, low, high) = if higher_is_better {
        (ci.mean, ci.low, ci.high)
    } else {
        (-ci.mean, -ci.high, -ci.low)
    };
    Gain {
        ratio: mean.exp(),
        ci_low: low.exp(),
        ci_high: high.exp(),
        confidence,
        serial: 0.0,
    }
}

/// Keep when the interval's low end clears `1 + min_effect`, revert when its high end is below
/// 1, neutral otherwise.
pub fn decide(g: &Gain, min_effect: f64) -> Decision {
    if g.ci_low > 1.0 + min_effect {
        Decision::Keep
    } else if g.ci_high < 1.0 {
        Decision::Revert
    } else {
        Decision::Neutral
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clear_gain_is_kept_with_a_sane_interval() {
        let before = [100.0, 102.0, 98.0, 101.0, 99.0, 100.0];
        let after = [120.0, 121.0, 119.0, 122.0, 118.0, 120.0];
        let g = gain_sequential(&before, &after, true, 0.95).unwrap();
        assert!((g.ratio - 1.2).abs() < 1e-9);
        assert!(g.ci_low > 1.17 && g.ci_high < 1.23, "{g:?}");
        assert_eq!(decide(&g, 0.02), Decision::Keep);
        // The same figures for a lower-is-better signal are a loss.
        let g = gain_sequential(&before, &after, false, 0.95).unwrap();
        assert!((g.ratio - 1.0 / 1.2).abs() < 1e-9);
        assert_eq!(decide(&g, 0.02), Decision::Revert);
    }

    #[test]
    fn noise_is_neutral() {
        let before = [100.0, 110.0, 90.0, 105.0, 95.0, 100.0];
        let after = [101.0, 92.0, 108.0, 99.0, 104.0, 97.0];
        let g = gain_sequential(&before, &after, true, 0.95).unwrap();
        assert!(g.ci_low < 1.0 && g.ci_high > 1.0);
        assert_eq!(decide(&g, 0.02), Decision::Neutral);
    }

    #[test]
    fn pairing_cancels_drift() {
        // A signal drifting upwards by 10 per window; the action adds 3 %.
        let off: Vec<f64> = (0..6).map(|i| 100.0 + 20.0 * i as f64).collect();
        let on: Vec<f64> = (0..6).map(|i| (110.0 + 20.0 * i as f64) * 1.03).collect();
        let paired = gain_paired(&off, &on, true, 0.95).unwrap();
        let independent = gain_sequential(&off, &on, true, 0.95).unwrap();
        assert!(paired.ci_high - paired.ci_low < (independent.ci_high - independent.ci_low) / 3.0);
        assert_eq!(decide(&paired, 0.02), Decision::Keep);
        assert_eq!(decide(&independent, 0.02), Decision::Neutral);
    }

    #[test]
    fn the_interval_has_its_coverage() {
        // 2000 experiments with no effect: about 5 % of 95 % intervals miss 1.
        let mut rng = perfpilot_stats::Rng::new(0x9e37_79b9_7f4a_7c15);
        let mut normal = || rng.normal();
        let mut misses = 0;
        for _ in 0..2000 {
            let b: Vec<f64> = (0..6).map(|_| 100.0 + 5.0 * normal()).collect();
            let a: Vec<f64> = (0..6).map(|_| 100.0 + 5.0 * normal()).collect();
            let g = gain_sequential(&b, &a, true, 0.95).unwrap();
            if g.ci_low > 1.0 || g.ci_high < 1.0 {
                misses += 1;
            }
        }
        assert!(
            (50..=160).contains(&misses),
            "{misses} of 2000 intervals missed"
        );
    }
}
