//! A design run over a series of windows measured with nothing changed (a recorded trace, or a
//! simulated series in the tests), with a true effect applied from wherever the design switches
//! the change on: how often each design decides, what, and how soon. The same state machines
//! the daemon's trials run; only the windows come from the series.

use super::drift::Drift;
use super::one_way::{OneWayRule, Shown};
use super::{EndReason, PeriodLimits, PeriodPlan, Sequential, Step, Switchback, WindowPlan};
use crate::gain::{self, Decision, Gain};

/// A true effect: the ratio the change multiplies the signal by once settled, reached (and left
/// again when the change is switched off) over `settle` windows in equal steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Effect {
    /// The multiplicative effect (1: none).
    pub ratio: f64,
    /// Windows the change takes to take (or lose) its full effect.
    pub settle: f64,
}

impl Effect {
    /// No effect.
    pub const NONE: Effect = Effect {
        ratio: 1.0,
        settle: 0.0,
    };
}

/// How a replayed trial is designed.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    /// Before and after (`one_way`: with the one-way rule; `controlled`: on ratios to a
    /// control).
    Sequential {
        /// The one-way rule's time bound, no-harm keep (and prior), when the change cannot be
        /// undone.
        one_way: Option<OneWayRule>,
        /// Judged on ratios to a control (the series): steps after the change are waited out,
        /// and the windows a side follow the ratios' noise under the time bound.
        controlled: bool,
        /// What it allows for drift; its history is taken from the series.
        drift: Option<Drift>,
        /// Windows of the series its drift sees before the trial (its history): a trial that
        /// would start before that many is not replayed (the daemon would still be watching).
        history: usize,
    },
    /// Switchback periods within these limits (a signal they refuse gives no trial).
    Switchback {
        /// What bounds the periods (`switch_s`: the switches' time the plan knows of).
        limits: PeriodLimits,
        /// Windows of the series that pass, unjudged, while the change is switched (a collapse
        /// of gigabytes inside the daemon's scan); the first making of the change is one.
        switch_windows: usize,
    },
    /// The old interleaved design: one window on, one off, alternating, judged on the pairs
    /// (a switchback of one window a period, nothing settling, in a fixed order).
    Interleave,
}

/// How one replayed trial ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// The decision (neutral for a trial that ended without a verdict).
    pub decision: Decision,
    /// What it showed.
    pub shown: Shown,
    /// The gain, where one was estimated.
    pub gain: Option<Gain>,
    /// Windows from the trial's start to its verdict.
    pub windows: usize,
    /// Why it ended.
    pub ended: &'static str,
}

/// The effect's level after a window, moving toward `target` (1 off, the ratio on).
fn step_level(level: f64, target: f64, settle: f64) -> f64 {
    if settle <= 0.0 {
        return target;
    }
    let stepsize = (target - 1.0).abs().max((level - 1.0).abs()) / (settle + 1.0);
    if (target - level).abs() <= stepsize {
        target
    } else {
        level + stepsize * (target - level).signum()
    }
}

/// Replays one trial starting at window `start` of `series`; `None` when the series ends
/// before the trial does.
pub fn run(
    spec: &Spec,
    series: &[f64],
    start: usize,
    effect: Effect,
    plan: &WindowPlan,
    seed: u64,
) -> Option<Outcome> {
    match spec {
        Spec::Sequential {
            one_way,
            controlled,
            drift,
            history,
        } => {
            let drift = match drift {
                Some(d) => Some(Drift {
                    history: series.get(start.checked_sub(*history)?..start)?.to_vec(),
                    ..d.clone()
                }),
                None => None,
            };
            let mut s = if *controlled {
                Sequential::controlled(*plan, true, Vec::new(), Vec::new())
            } else {
                Sequential::new(*plan, true, Vec::new())
            };
            s.one_way = one_way.clone();
            s.drift = drift;
            sequential(s, series, start, effect)
        }
        Spec::Switchback {
            limits,
            switch_windows,
        } => switchback(*limits, *switch_windows, series, start, effect, plan, seed),
        Spec::Interleave => interleave(series, start, effect, plan),
    }
}

/// Replays the before/after trial `s` over `series` from window `start`.
fn sequential(mut s: Sequential, series: &[f64], start: usize, effect: Effect) -> Option<Outcome> {
    let mut level = 1.0;
    for (i, v) in series.iter().enumerate().skip(start) {
        let on = s.want_on();
        level = if on {
            step_level(level, effect.ratio, effect.settle)
        } else {
            1.0
        };
        if let Step::End(end) = s.record(on, v * level, None, None) {
            let (gain, decision, shown) = match (&end, s.decide()) {
                (EndReason::Complete, Some((g, d, shown))) => (Some(g), d, shown),
                _ => (None, Decision::Neutral, Shown::Effect),
            };
            return Some(Outcome {
                decision,
                shown,
                gain,
                windows: i + 1 - start,
                ended: end.label(),
            });
        }
    }
    None
}

fn switchback(
    limits: PeriodLimits,
    switch_windows: usize,
    series: &[f64],
    start: usize,
    effect: Effect,
    plan: &WindowPlan,
    seed: u64,
) -> Option<Outcome> {
    let base = series.get(start..start + plan.min)?;
    let p = PeriodPlan::for_signal(base, &limits).ok()?;
    let mut sb = Switchback::new(p, seed, true, plan.looks);
    let mut level = 1.0;
    let (mut was_on, mut switching) = (false, 0);
    for (i, v) in series.iter().enumerate().skip(start + plan.min) {
        let on = sb.want_on();
        if on != was_on {
            was_on = on;
            switching = switch_windows;
        }
        if switching > 0 {
            switching -= 1;
            continue;
        }
        level = step_level(level, if on { effect.ratio } else { 1.0 }, effect.settle);
        if let Step::End(end) = sb.record(on, v * level, None) {
            let decided = sb.decided;
            return Some(Outcome {
                decision: decided.map_or(Decision::Neutral, |d| d.1),
                shown: Shown::Effect,
                gain: decided.map(|d| d.0),
                windows: i + 1 - start,
                ended: end.label(),
            });
        }
    }
    None
}

fn interleave(series: &[f64], start: usize, effect: Effect, plan: &WindowPlan) -> Option<Outcome> {
    let n = plan.min;
    let w = series.get(start..start + 2 * n)?;
    let mut level = 1.0;
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for (k, v) in w.iter().enumerate() {
        let is_on = k % 2 == 1;
        level = step_level(level, if is_on { effect.ratio } else { 1.0 }, effect.settle);
        if is_on { &mut on } else { &mut off }.push(v * level);
    }
    let g = gain::gain_paired(&off, &on, true, plan.looks.confidence)?;
    Some(Outcome {
        decision: gain::decide(&g, plan.looks.min_effect),
        shown: Shown::Effect,
        gain: Some(g),
        windows: 2 * n,
        ended: EndReason::Complete.label(),
    })
}

/// What the trials of a replay decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Trials replayed.
    pub trials: usize,
    /// Kept with a resolved gain.
    pub kept: usize,
    /// Kept as a one-way change that did no harm (gain unresolved).
    pub kept_no_harm: usize,
    /// Reverted (or, for a one-way change, ended as a loss).
    pub reverted: usize,
    /// Neutral, or ended without a verdict.
    pub neutral: usize,
    /// Windows from each trial's start to its verdict.
    pub windows: Vec<usize>,
}

impl Tally {
    /// Counts one trial.
    pub fn add(&mut self, o: &Outcome) {
        self.trials += 1;
        match (o.decision, o.shown) {
            (Decision::Keep, Shown::NoHarm { .. }) => self.kept_no_harm += 1,
            (Decision::Keep, _) => self.kept += 1,
            (Decision::Revert, _) => self.reverted += 1,
            (Decision::Neutral, _) => self.neutral += 1,
        }
        self.windows.push(o.windows);
    }

    /// Trials whose claim would be false if the change had no effect: a resolved gain or a
    /// loss (a no-harm keep claims only that there was no loss, which holds).
    pub fn decided_no_change(&self) -> usize {
        self.kept + self.reverted
    }

    /// The median windows from start to verdict.
    pub fn median_windows(&self) -> f64 {
        let w: Vec<f64> = self.windows.iter().map(|&x| x as f64).collect();
        perfpilot_stats::median(&w)
    }
}

/// Replays a trial from every `stride`-th window of `series` (each seeded by its start) and
/// tallies them.
pub fn replay_all(
    spec: &Spec,
    series: &[f64],
    effect: Effect,
    plan: &WindowPlan,
    stride: usize,
    seed: u64,
) -> Tally {
    let mut t = Tally::default();
    for start in (0..series.len()).step_by(stride.max(1)) {
        let s = perfpilot_stats::rng::mix64(seed ^ start as u64);
        if let Some(o) = run(spec, series, start, effect, plan, s) {
            t.add(&o);
        }
    }
    t
}

#[cfg(test)]
mod tests;
