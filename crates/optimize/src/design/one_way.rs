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
//! Its interval allows for the workload's drift (`drift`: its windows before the trial, watched
//! for `one_way_history_s`, and at least `drift_floor`).
//!
//! The time bound and the no-harm keep ([`decide`]) serve every change that cannot be undone,
//! also one judged against a concurrent control: ending it neutral would leave it in place all
//! the same, and its ratios to the control need no drift allowance and no prior.
//!
//! Where the store holds earlier verdicts of the same strategy on the same kind of server, they
//! form a prior (`perfpilot_stats::prior`) and the interval is a credible one; the verdict says
//! so. A kept action is watched after its verdict: a later look that shows a loss ends it.

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

/// The one-way rule of a trial: its time bound, its no-harm keep, and its prior where it has
/// no control.
#[derive(Debug, Clone, PartialEq)]
pub struct OneWayRule {
    /// The loss a keep without a resolved gain rules out (`harm_bound`); `None` once a
    /// controlled trial lost its control.
    pub no_harm: Option<f64>,
    /// The most windows a side, from the time bound.
    pub windows_cap: usize,
    /// Earlier verdicts as a prior.
    pub prior: Option<Prior>,
    /// Seconds from its start by which it ends (`verdict_within_s`).
    pub within_s: f64,
}

impl OneWayRule {
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
}

/// The decision at the end of a trial of a change that cannot be undone, and what it showed: a
/// neutral gain whose interval rules out a loss worse than `harm_bound` is kept as no harm.
pub fn decide(g: &Gain, min_effect: f64, harm_bound: f64) -> (Decision, Shown) {
    match gain::decide(g, min_effect) {
        Decision::Neutral if g.ci_low > 1.0 - harm_bound => {
            (Decision::Keep, Shown::NoHarm { bound: harm_bound })
        }
        d => (d, Shown::Effect),
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
