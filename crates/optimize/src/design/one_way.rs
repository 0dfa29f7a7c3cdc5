//! The rule for a change that can be neither undone nor compared with a control (huge pages
//! where the kernel does not split them back, on a server without a sibling). Such a trial
//! cannot be made to cancel drift, so it is made to finish: its windows a side are capped so
//! that it ends within a time bound, and at its end it says exactly what its windows showed —
//!
//! - a gain (the interval clears `min_effect`): kept;
//! - no loss worse than `harm_bound` (the interval's low end above 1 − bound, the gain itself
//!   unresolved): kept, and said to be only that;
//! - a loss (the interval below 1): ended;
//! - otherwise neutral: ended.
//!
//! Where the store holds earlier verdicts of the same strategy on the same kind of server, they
//! form a prior (`perfpilot_stats::prior`) and the interval is a credible one; the verdict says
//! so. A kept action is watched after its verdict: a later look that shows a loss ends it.

use perfpilot_stats::mean;
use perfpilot_stats::prior::{Belief, se_of_interval};
use serde::{Deserialize, Serialize};

use super::windows;
use crate::gain::{self, Decision, Gain};

/// What a verdict showed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Shown {
    /// An effect (a gain cleared `min_effect`, or a loss), or nothing (neutral).
    #[default]
    Effect,
    /// Only that the change did not cost more than `bound` (a one-way change kept without a
    /// resolved gain).
    NoHarm {
        /// The loss ruled out, e.g. 0.02 for 2 %.
        bound: f64,
    },
}

/// Earlier verdicts as a prior, with what they were.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prior {
    /// The belief about the log gain.
    pub belief: Belief,
    /// How many earlier verdicts formed it.
    pub verdicts: usize,
    /// Of what: `large_pages on postgresql`.
    pub of: String,
}

impl Prior {
    /// The prior from earlier verdicts' gains (ratio with its interval at `confidence`) of
    /// `of`; `None` from fewer than two.
    pub fn from_gains(gains: &[Gain], of: &str, floor_sd: f64) -> Option<Prior> {
        let earlier: Vec<(f64, f64)> = gains
            .iter()
            .filter(|g| g.ratio > 0.0 && g.ci_low > 0.0 && g.ci_high > 0.0)
            .map(|g| {
                (
                    g.ratio.ln(),
                    se_of_interval(g.ci_low.ln(), g.ci_high.ln(), g.confidence),
                )
            })
            .collect();
        Some(Prior {
            belief: Belief::from_earlier(&earlier, floor_sd)?,
            verdicts: earlier.len(),
            of: of.to_string(),
        })
    }
}

/// The one-way rule of a trial.
#[derive(Debug, Clone, PartialEq)]
pub struct OneWayRule {
    /// The loss a no-harm keep rules out.
    pub harm_bound: f64,
    /// The most windows a side, from the time bound.
    pub windows_cap: usize,
    /// Earlier verdicts as a prior.
    pub prior: Option<Prior>,
    /// The least drift between the two sides allowed for (sd of the log level, `drift_floor`).
    pub drift_floor: f64,
    /// Seconds from its start by which it ends (`verdict_within_s`).
    pub within_s: f64,
    /// The workload's windows before the trial, nothing changed (`one_way_history_s` of them):
    /// spells of its own that its few windows a side would miss.
    pub history: Vec<f64>,
}

/// The variance of the log ratio of the mean of `n` windows to the mean of the `n` before them
/// with nothing changed, estimated from each side's own windows and the workload's windows
/// before the trial (`history`) at shorter spans (a variance-time fit): for spans b up to half
/// a side, or up to n where the history holds two blocks of b, the mean square of the log
/// ratios of adjacent blocks of b windows, fitted as noise that averages out (A/b) plus a drift
/// that grows with the distance (κ·b), and read off at b = n. A workload that steps by a fifth
/// on its own every few minutes shows it in its history, where a side of a few minutes may sit
/// inside one spell. `None` when there are too few windows or the fit has nothing to stand on.
pub fn null_variance(off: &[f64], on: &[f64], history: &[f64], n: usize) -> Option<f64> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    let longest = (off.len().min(on.len()) / 2).max((history.len() / 2).min(n));
    if longest < 2 {
        return None;
    }
    for b in 1..=longest {
        let mut sq = Vec::new();
        for xs in [off, on, history] {
            if xs.len() < 2 * b {
                continue;
            }
            for i in 0..=xs.len() - 2 * b {
                let (a, c) = (mean(&xs[i..i + b]), mean(&xs[i + b..i + 2 * b]));
                if a > 0.0 && c > 0.0 {
                    sq.push((c / a).ln().powi(2));
                }
            }
        }
        if !sq.is_empty() {
            points.push((b as f64, mean(&sq)));
        }
    }
    if points.len() < 2 {
        return None;
    }
    // Least squares of v(b) = A/b + κ·b, both kept non-negative.
    let (mut s11, mut s12, mut s22, mut y1, mut y2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(b, v) in &points {
        let (x1, x2) = (1.0 / b, b);
        s11 += x1 * x1;
        s12 += x1 * x2;
        s22 += x2 * x2;
        y1 += x1 * v;
        y2 += x2 * v;
    }
    let det = s11 * s22 - s12 * s12;
    let (a, k) = if det.abs() > 1e-12 {
        ((y1 * s22 - y2 * s12) / det, (y2 * s11 - y1 * s12) / det)
    } else {
        (y1 / s11, 0.0)
    };
    let (a, k) = match (a >= 0.0, k >= 0.0) {
        (true, true) => (a, k),
        (false, _) => (0.0, y2 / s22),
        (true, false) => (y1 / s11, 0.0),
    };
    let n = n.max(1) as f64;
    Some(a / n + k * n)
}

impl OneWayRule {
    /// `g`, the gain of `on` over `off`, widened to what a no-change comparison of this length
    /// varies by on these windows and the history ([`null_variance`]: drift included), and at
    /// least by the floor's drift; then combined with the prior where there is one.
    pub fn judge(&self, g: Gain, off: &[f64], on: &[f64]) -> Gain {
        let n = off.len().min(on.len());
        let null = null_variance(off, on, &self.history, n).unwrap_or(0.0);
        self.with_prior(widen(g, self.drift_floor, null))
    }

    /// `g` combined with the prior, where there is one: the interval becomes a credible
    /// interval at the same level.
    pub fn with_prior(&self, g: Gain) -> Gain {
        let Some(p) = &self.prior else {
            return g;
        };
        if !(g.ci_low > 0.0 && g.ci_high > 0.0 && g.ratio > 0.0) {
            return g;
        }
        let se = se_of_interval(g.ci_low.ln(), g.ci_high.ln(), g.confidence);
        let post = p.belief.update(g.ratio.ln(), se);
        let (lo, hi) = post.interval(g.confidence);
        Gain {
            ratio: post.mean.exp(),
            ci_low: lo.exp(),
            ci_high: hi.exp(),
            ..g
        }
    }

    /// The decision at the trial's end, and what it showed.
    pub fn decide(&self, g: &Gain, min_effect: f64) -> (Decision, Shown) {
        match gain::decide(g, min_effect) {
            Decision::Neutral if g.ci_low > 1.0 - self.harm_bound => (
                Decision::Keep,
                Shown::NoHarm {
                    bound: self.harm_bound,
                },
            ),
            d => (d, Shown::Effect),
        }
    }
}

/// `g` widened, the interval's quantile kept, to a standard error of at least its own with
/// `floor` (sd on the log scale) of drift added, and at least `null` (a variance).
fn widen(g: Gain, floor: f64, null: f64) -> Gain {
    if !(g.ci_low > 0.0 && g.ci_high > 0.0 && g.ratio > 0.0) {
        return g;
    }
    let (lo, hi, mid) = (g.ci_low.ln(), g.ci_high.ln(), g.ratio.ln());
    let se = se_of_interval(lo, hi, g.confidence);
    if !(se > 0.0 && se.is_finite()) {
        return g;
    }
    let wanted = (se * se + floor * floor).max(null);
    let k = (wanted.sqrt() / se).max(1.0);
    Gain {
        ci_low: (mid - (mid - lo) * k).exp(),
        ci_high: (mid + (hi - mid) * k).exp(),
        ..g
    }
}

/// The windows a side a one-way trial may measure so that it ends within `within_s` seconds
/// of its start: both sides and the time the change takes (`apply_s`) in windows of `window_s`,
/// at least `min`.
pub fn windows_cap(within_s: f64, apply_s: f64, window_s: f64, min: usize) -> usize {
    let w = ((within_s - apply_s).max(0.0) / window_s.max(1e-3) / 2.0).floor() as usize;
    w.max(min)
}

/// What a look of the watch after a verdict found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WatchStep {
    /// Nothing yet.
    Continue,
    /// A loss: the action ends.
    Harm(Gain),
    /// The watch is over: nothing more to look at.
    Done,
}

/// The watch of a one-way action after its verdict: its windows from then on against the
/// baseline it was judged by, looked at every `every` windows, each look at the verdicts'
/// level shared out over all of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Watch {
    baseline: Vec<f64>,
    hib: bool,
    recent: Vec<f64>,
    seen: usize,
    every: usize,
    looks: usize,
    confidence: f64,
}

impl Watch {
    /// A watch of `windows` windows after the verdict against `baseline`.
    pub fn new(
        baseline: Vec<f64>,
        hib: bool,
        windows: usize,
        every: usize,
        confidence: f64,
    ) -> Watch {
        let every = every.max(2);
        Watch {
            looks: (windows / every).max(1),
            baseline,
            hib,
            recent: Vec::new(),
            seen: 0,
            every,
            confidence,
        }
    }

    /// The windows still to watch.
    pub fn left(&self) -> usize {
        (self.looks * self.every).saturating_sub(self.seen)
    }

    /// Takes in one window; looks every `every` windows at the last baseline's worth of them.
    pub fn record(&mut self, v: f64) -> WatchStep {
        self.seen += 1;
        self.recent.push(v);
        let keep = self.baseline.len().max(self.every);
        if self.recent.len() > keep {
            self.recent.remove(0);
        }
        if !self.seen.is_multiple_of(self.every) {
            return WatchStep::Continue;
        }
        let level = windows::look_level(self.confidence, self.looks);
        if let Some(g) = gain::gain_sequential(&self.baseline, &self.recent, self.hib, level)
            && g.ci_high < 1.0
        {
            return WatchStep::Harm(g);
        }
        if self.seen >= self.looks * self.every {
            WatchStep::Done
        } else {
            WatchStep::Continue
        }
    }
}

#[cfg(test)]
mod tests;
