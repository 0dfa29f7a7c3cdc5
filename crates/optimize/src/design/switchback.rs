//! Switchback: the change switched on and off in periods, each pair of periods in a seeded
//! random order, judged on the differences within pairs. A drift slower than a pair cancels
//! inside each difference; what is left is judged with a Student t interval widened for
//! neighbouring differences being alike (AR(1) at their lag-1 autocorrelation,
//! `perfpilot_stats::serial_mean_ci`; Newey–West's kernel variance kept its level worse on a
//! dozen differences, docs/optimizer.md). The differences of a well-chosen period are close to
//! independent, where before/after windows need a model of a wander they only glimpsed. The
//! pairs before a step of the workload's own load are dropped ([`Switchback::record`]).
//!
//! A period opens with `settle` windows that are not judged (the change taking hold, a cache
//! refilling) and then `measure` windows; its length is chosen from the signal's baseline so
//! that the pairs' differences are as precise as the time spent allows (see [`PeriodPlan`]).

use perfpilot_stats::{Rng, mean};

use super::windows;
use super::{EndReason, Looks, Rest, Step};
use crate::gain::{self, Decision, Gain};

/// How a switchback trial cuts its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeriodPlan {
    /// Windows dropped at the start of each period.
    pub settle: usize,
    /// Windows judged in each period.
    pub measure: usize,
    /// Pairs before the first look.
    pub pairs_min: usize,
    /// Pairs at most: then the trial ends.
    pub pairs_max: usize,
}

/// What bounds a period plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeriodLimits {
    /// The signal's window, seconds.
    pub window_s: f64,
    /// How long the change takes to settle after a switch, seconds.
    pub settle_s: f64,
    /// The longest period allowed, seconds: longer ones let the drift back in.
    pub period_max_s: f64,
    /// The windows a whole trial may take (both states together, settling included).
    pub budget_windows: usize,
    /// Pairs before the first look.
    pub pairs_min: usize,
    /// Seconds one switch takes inside the daemon's scan, on and off alike on average (0: at
    /// once). A collapse of gigabytes takes seconds, while no window is judged.
    pub switch_s: f64,
    /// With slow switches, the trial's time bound from its start (`verdict_within_s`), at
    /// least the budget's windows: those alone would not bound its time.
    pub within_s: f64,
    /// Seconds of the trial gone when the periods are planned (its baseline, the first making
    /// of the change).
    pub spent_s: f64,
}

impl PeriodLimits {
    /// The seconds the budget's windows span.
    pub fn windows_s(&self) -> f64 {
        self.budget_windows as f64 * self.window_s.max(1e-3)
    }

    /// The seconds the periods may take in all, switches included: with slow switches and a
    /// time bound, its time less what the trial spent (not less than the windows' own); else
    /// the windows', which the switches then share.
    pub fn budget_s(&self) -> f64 {
        if self.switch_s > 0.0 && self.within_s > 0.0 {
            self.windows_s().max(self.within_s - self.spent_s)
        } else {
            self.windows_s()
        }
    }
}

/// Why a switchback trial cannot be planned for this signal.
#[derive(Debug, Clone, PartialEq)]
pub struct PeriodRefused {
    /// Why, in a sentence.
    pub why: String,
}

/// The most windows a period judges: beyond this the pairs are too few to judge them.
const MEASURE_MAX: usize = 8;

/// Switches per pair on average: one between its periods, and one before it half the time
/// (the next pair's first state is a coin, and the same state needs no switch).
const SWITCHES_PER_PAIR: f64 = 1.5;

/// The least step of the workload's own level that drops the pairs before it: a smaller one
/// shifts a pair's difference by less than the gains the strategies seek, and is left to the
/// interval.
const REGIME_MIN_STEP: f64 = 0.15;

impl PeriodPlan {
    /// The plan for a signal whose baseline windows are `baseline`: `settle` windows cover
    /// `settle_s`, and `measure` is the count that makes the interval at the last look
    /// narrowest within the budget's time, switches included, for windows alike from one to
    /// the next as the baseline's are (AR(1) at its lag-1 autocorrelation). Where switches
    /// share or overrun that time, slow ones buy longer periods: fewer switches for the same
    /// judged windows. Refused when even
    /// one judged window does not fit in `period_max_s`, or the budget holds fewer pairs than
    /// the first look needs.
    pub fn for_signal(baseline: &[f64], l: &PeriodLimits) -> Result<PeriodPlan, PeriodRefused> {
        let w = l.window_s.max(1e-3);
        // Switches fall between windows (a window ends, the change is switched, the next one
        // starts): a change that takes hold at once needs no window dropped.
        let settle = (l.settle_s / w).ceil() as usize;
        let fit = ((l.period_max_s / w).floor() as usize).saturating_sub(settle);
        if fit == 0 {
            return Err(PeriodRefused {
                why: format!(
                    "its windows of {} s with {settle} to settle and one to judge do not fit in a period of at most {} s (period_max_s): a switchback of this signal would judge its lumps, not the change",
                    units_s(w),
                    units_s(l.period_max_s)
                ),
            });
        }
        let rho = perfpilot_stats::serial::allowed_lag1(&[baseline]);
        let pairs_min = l.pairs_min.max(3);
        let budget_s = l.budget_s();
        let switch_s = l.switch_s.max(0.0);
        // The pairs the budget's windows hold, then fewer where their switches overrun the
        // time: a switch of a second adds its second, it does not open the whole time bound.
        let pairs_of = |m: usize| {
            let windows = 2.0 * (settle + m) as f64 * w;
            let by_windows = (l.windows_s() / windows + 1e-9).floor() as usize;
            let by_time = (budget_s / (windows + SWITCHES_PER_PAIR * switch_s) + 1e-9).floor();
            by_windows.min(by_time as usize)
        };
        // The half-width the last look's interval will have, per unit of the windows' spread:
        // shorter periods give more pairs (and degrees of freedom), longer ones lose less to
        // settling and switching; neighbours alike favour the short ones, whose pairs cancel
        // what they share.
        let width = |m: usize| {
            let pairs = pairs_of(m);
            (pairs >= pairs_min).then(|| {
                let t = perfpilot_stats::t_quantile(pairs as f64 - 1.0, 0.975);
                t * (pair_variance(settle, m, rho) / pairs as f64).sqrt()
            })
        };
        let Some(measure) = (1..=fit.min(MEASURE_MAX))
            .filter_map(|m| width(m).map(|w| (m, w)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(m, _)| m)
        else {
            let switches = if switch_s > 0.0 {
                format!(" with switches of {}", units_s(switch_s))
            } else {
                String::new()
            };
            return Err(PeriodRefused {
                why: format!(
                    "periods of {} windows{switches} fit fewer than {pairs_min} pairs in the trial's {}",
                    settle + 1,
                    units_s(budget_s)
                ),
            });
        };
        Ok(PeriodPlan {
            settle,
            measure,
            pairs_min,
            pairs_max: pairs_of(measure),
        })
    }

    /// One period's windows, settling included.
    pub fn period(&self) -> usize {
        self.settle + self.measure
    }

    /// The plan in words, for notes and `status`.
    pub fn describe(&self) -> String {
        format!(
            "{} windows each ({} settling, {} judged), {} to {} pairs",
            self.period(),
            self.settle,
            self.measure,
            self.pairs_min,
            self.pairs_max
        )
    }
}

fn units_s(s: f64) -> String {
    perfpilot_units::duration_secs(s)
}

/// The variance of the difference of the means of the judged windows of two adjacent periods
/// (each `settle` dropped, then `m` judged) of a unit-variance AR(1) series of correlation
/// `rho`.
pub fn pair_variance(settle: usize, m: usize, rho: f64) -> f64 {
    let p = settle + m;
    let a: Vec<usize> = (settle..p).collect();
    let b: Vec<usize> = (p + settle..2 * p).collect();
    let cov = |x: &[usize], y: &[usize]| {
        x.iter()
            .flat_map(|i| y.iter().map(move |j| rho.powi(i.abs_diff(*j) as i32)))
            .sum::<f64>()
    };
    let mf = (m * m) as f64;
    (cov(&a, &a) + cov(&b, &b) - 2.0 * cov(&a, &b)) / mf
}

/// One pair of periods: the change on in one, off in the other, in the order drawn.
#[derive(Debug, Clone, Default, PartialEq)]
struct Pair {
    first_on: bool,
    on: Vec<f64>,
    off: Vec<f64>,
    rest_on: Vec<f64>,
    rest_off: Vec<f64>,
}

impl Pair {
    /// The log of on over off, turned round for a lower-is-better signal.
    fn difference(&self, hib: bool) -> Option<f64> {
        let (a, b) = (mean(&self.on), mean(&self.off));
        if !(a > 0.0 && b > 0.0) {
            return None;
        }
        let d = (a / b).ln();
        Some(if hib { d } else { -d })
    }

    /// Whether the rest of the machine's move (`busier_on`: it used more with the change on)
    /// could have made this pair's difference: only when the busier period is the one whose
    /// signal was worse. A rest that rose with the better signal is most often the workload's
    /// own clients and the kernel serving them, which follow its rate; contention there only
    /// shrinks the difference, and a load step lands in either state with the order's coin.
    fn contention_explains(&self, busier_on: bool, hib: bool) -> bool {
        match self.difference(hib) {
            Some(d) => (d < 0.0) == busier_on,
            None => true,
        }
    }
}

/// A running switchback trial.
#[derive(Debug, Clone)]
pub struct Switchback {
    plan: PeriodPlan,
    rng: Rng,
    hib: bool,
    /// Complete pairs that are judged.
    pairs: Vec<Pair>,
    /// The pair being measured.
    cur: Pair,
    /// Whether the second period of the pair is running.
    second: bool,
    /// Windows seen in the running period, settling included.
    seen: usize,
    /// Pairs dropped because the rest of the machine moved between their periods.
    pub dropped_pairs: usize,
    /// Pairs dropped because the workload's own level stepped (its load changed) while they
    /// ran: those before the step and the one across it. Once per trial.
    pub regime_dropped: usize,
    /// The machine's CPUs as last read.
    cpus: usize,
    looks: Looks,
    /// Set when a look decided the trial.
    pub decided: Option<(Gain, Decision)>,
}

impl Switchback {
    /// A switchback trial of `plan`, its pairs' order drawn from `seed`.
    pub fn new(plan: PeriodPlan, seed: u64, hib: bool, looks: Looks) -> Switchback {
        let mut rng = Rng::new(seed);
        let first_on = rng.next_u64() & 1 == 1;
        Switchback {
            plan,
            rng,
            hib,
            pairs: Vec::new(),
            cur: Pair {
                first_on,
                ..Pair::default()
            },
            second: false,
            seen: 0,
            dropped_pairs: 0,
            regime_dropped: 0,
            cpus: 0,
            looks,
            decided: None,
        }
    }

    /// The plan it runs.
    pub fn plan(&self) -> PeriodPlan {
        self.plan
    }

    /// Takes `plan` in place of the one it runs, while no pair is complete (the switches'
    /// time is measured only once the change is first made): the period under way keeps its
    /// windows and ends at the new length. `false` once a pair is complete.
    pub fn replan(&mut self, plan: PeriodPlan) -> bool {
        if self.pairs.len() + self.dropped_pairs + self.regime_dropped > 0 {
            return false;
        }
        self.plan = plan;
        true
    }

    /// Whether the change should be on during the next window.
    pub fn want_on(&self) -> bool {
        self.cur.first_on != self.second
    }

    /// The pairs judged so far.
    pub fn pairs(&self) -> usize {
        self.pairs.len()
    }

    /// Takes in one window measured wholly with the change `on` (a window that saw a switch is
    /// not given). Returns what follows.
    pub fn record(&mut self, on: bool, value: f64, rest: Option<Rest>) -> Step {
        if on != self.want_on() {
            // Measured in the state the design did not ask for (the engine could not switch):
            // it is not judged.
            return Step::Continue;
        }
        self.seen += 1;
        if self.seen > self.plan.settle {
            let (v, r) = if on {
                (&mut self.cur.on, &mut self.cur.rest_on)
            } else {
                (&mut self.cur.off, &mut self.cur.rest_off)
            };
            v.push(value);
            if let Some(rest) = rest {
                r.push(rest.cores);
                self.cpus = rest.cpus;
            }
        }
        if self.seen < self.plan.period() {
            return Step::Continue;
        }
        self.seen = 0;
        if !self.second {
            self.second = true;
            return Step::Continue;
        }
        self.second = false;
        let first_on = self.rng.next_u64() & 1 == 1;
        let pair = std::mem::replace(
            &mut self.cur,
            Pair {
                first_on,
                ..Pair::default()
            },
        );
        if let Some((before, after)) = windows::rest_moved(
            &pair.rest_off,
            &pair.rest_on,
            self.cpus,
            self.looks.rest_share,
        ) && pair.contention_explains(after > before, self.hib)
        {
            self.dropped_pairs += 1;
            return Step::Note(format!(
                "a pair of periods dropped: the rest of the machine used {before:.2} cores with the change off and {after:.2} with it on"
            ));
        }
        self.pairs.push(pair);
        if let Some(note) = self.regime_step() {
            return Step::Note(note);
        }
        self.look()
    }

    /// Drops the pairs before a step of the workload's own level and the one across it, once
    /// per trial: a server whose load changes (Redis loading its keys, then serving reads)
    /// steps in both states at once, and the pair across the step would differ by the step,
    /// not by the change. A step counts when the windows of each state, in time order, show
    /// one (`windows::level_shift`, at least [`REGIME_MIN_STEP`]) in the same direction within
    /// a pair of each other; the change itself, on in every pair, cannot make one.
    fn regime_step(&mut self) -> Option<String> {
        if self.regime_dropped > 0 {
            return None;
        }
        let (off, on) = self.windows();
        let a = windows::level_shift(&off, REGIME_MIN_STEP)?;
        let b = windows::level_shift(&on, REGIME_MIN_STEP)?;
        // The first pair whose windows of that state all come after the step.
        let m = self.plan.measure.max(1);
        let (pa, pb) = (a.at.div_ceil(m), b.at.div_ceil(m));
        if (a.ratio > 1.0) != (b.ratio > 1.0) || pa.abs_diff(pb) > 1 {
            return None;
        }
        let n = pa.max(pb).min(self.pairs.len());
        self.pairs.drain(..n);
        self.regime_dropped = n;
        Some(format!(
            "{n} pairs of periods dropped: the workload's own level stepped ×{:.2} with the change off and ×{:.2} with it on (its load changed); judging goes on from the pairs after the step",
            a.ratio, b.ratio
        ))
    }

    /// The differences of the judged pairs.
    fn differences(&self) -> Vec<f64> {
        self.pairs
            .iter()
            .filter_map(|p| p.difference(self.hib))
            .collect()
    }

    /// The gain so far at `confidence` (the interval of the mean difference); the verdict's
    /// level is the look's that decided it.
    pub fn gain(&self, confidence: f64) -> Option<Gain> {
        let d = self.differences();
        let s = perfpilot_stats::serial_mean_ci(&d, confidence)?;
        // The differences are already turned round for the signal's direction.
        Some(Gain {
            serial: s.rho,
            ..gain::gain_from_log(s.ci, true, confidence)
        })
    }

    /// A look after a complete pair: a decision at the look's share of the error from the first
    /// look on (`windows::spent_level`: half for the last), and the end at the last pair whatever
    /// it shows.
    fn look(&mut self) -> Step {
        let n = self.pairs.len();
        if n < self.plan.pairs_min {
            return Step::Continue;
        }
        let total = self.looks_planned();
        let k = n - self.plan.pairs_min + 1;
        let level = windows::spent_level(self.looks.confidence, k, total);
        let Some(g) = self.gain(level) else {
            return if n >= self.plan.pairs_max {
                Step::End(EndReason::Complete)
            } else {
                Step::Continue
            };
        };
        let d = gain::decide(&g, self.looks.min_effect);
        if d != Decision::Neutral || n >= self.plan.pairs_max {
            self.decided = Some((g, d));
            return Step::End(EndReason::Complete);
        }
        Step::Continue
    }

    /// Every judged window with the change off, then with it on.
    pub fn windows(&self) -> (Vec<f64>, Vec<f64>) {
        let off = self.pairs.iter().flat_map(|p| p.off.clone()).collect();
        let on = self.pairs.iter().flat_map(|p| p.on.clone()).collect();
        (off, on)
    }

    /// The looks a trial of this plan may take.
    pub fn looks_planned(&self) -> usize {
        self.plan.pairs_max - self.plan.pairs_min + 1
    }
}

#[cfg(test)]
mod tests;
