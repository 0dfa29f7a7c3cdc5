//! Windows before the change, then after it. The baseline fixes how many windows each side
//! measures from its own noise; the windows after the change drop a transient (and, once, the
//! windows before a step: the change settling), and interim looks keep a clear gain early, each
//! at the verdicts' level shared out over the looks. A loss is not decided early: a change may
//! pay its cost first (docs/optimizer.md, "Interim looks"). Only ratios to a control drop a
//! transient before the change, or wait out ratios that still climb after it; a one-way trial
//! drops nothing and takes no interim look.
//!
//! The values are the signal's windows, or, with a concurrent control, the ratio of the
//! treated workload's window to its control's over the same span: what moves the whole
//! machine moves both and cancels in the ratio. The treated workload's own windows are kept
//! beside the ratios, so that a control that exits leaves a before/after trial on them.

use super::drift::Drift;
use super::one_way::{self, OneWayRule, Shown};
use super::windows;
use super::{EndReason, Looks, Rest, Step};
use crate::gain::{self, Decision, Gain};
use crate::tunables::Tunables;

/// How many windows a sequential trial measures: at least `min` a side, as many as its
/// baseline's noise needs for an interval of about ±`resolution`, up to `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowPlan {
    /// The least windows a side.
    pub min: usize,
    /// The most windows a side.
    pub max: usize,
    /// The interval's half-width the count aims for (on the ratio).
    pub resolution: f64,
    /// How the looks decide.
    pub looks: Looks,
}

impl WindowPlan {
    /// The plan the tunables give.
    pub fn of(tun: &Tunables) -> WindowPlan {
        WindowPlan {
            min: tun.window_count(),
            max: tun.max_windows as usize,
            resolution: tun.resolution,
            looks: Looks {
                confidence: tun.confidence,
                min_effect: tun.min_effect,
                rest_share: tun.rest_change_max,
            },
        }
    }

    /// Exactly `n` windows a side, whatever the noise.
    pub fn fixed(n: usize) -> WindowPlan {
        WindowPlan {
            min: n,
            max: n,
            resolution: 1.0,
            looks: Looks {
                confidence: 0.95,
                min_effect: 0.02,
                rest_share: 0.0,
            },
        }
    }
}

/// How many times its windows a side a sequential trial drops as transients before it gives up
/// on a signal that does not settle.
const SETTLE_LIMIT: usize = 4;

/// What [`Sequential`] drops from the start of one side's windows.
enum Cut {
    /// A transient (MSER) of this many windows.
    Transient(usize),
    /// The windows before a step.
    Step(perfpilot_stats::Shift),
    /// The first half (this many) of ratios that still climb.
    Climb(perfpilot_stats::Trend, usize),
}

/// An interim look that decided a sequential trial before its planned windows after the change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EarlyLook {
    /// The confidence level of each look: the verdicts' level shared out over the looks
    /// (Bonferroni), so looking early does not make a false verdict more likely.
    pub confidence: f64,
    /// The looks the trial could take, the planned one included.
    pub looks: usize,
    /// The windows after the change it had planned.
    pub planned: usize,
}

/// The treated workload's own windows beside the ratios of a controlled trial.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Raw {
    /// Before the change.
    pub off: Vec<f64>,
    /// After it.
    pub on: Vec<f64>,
}

/// A running before/after trial.
#[derive(Debug, Clone, PartialEq)]
pub struct Sequential {
    plan: WindowPlan,
    /// Whether a larger value is better.
    pub hib: bool,
    /// The windows before the change (ratios, with a control).
    pub off: Vec<f64>,
    /// The windows after it.
    pub on: Vec<f64>,
    /// With a concurrent control: the treated workload's own windows.
    pub raw: Option<Raw>,
    /// Busy cores of the rest of the machine with each window before and after the change.
    rest_off: Vec<f64>,
    rest_on: Vec<f64>,
    cpus: usize,
    /// Windows dropped as transients.
    pub dropped: usize,
    /// Whether the windows after the change were already cut at a step (once: a signal that
    /// steps back and forth is noise to measure through, not a settling to wait out).
    stepped: bool,
    /// The windows each side measures, fixed from the settled baseline's noise.
    pub needed: Option<usize>,
    /// Set when an interim look decided the trial.
    pub early: Option<EarlyLook>,
    /// The one-way rule's time bound and no-harm keep (and, with no control, its prior): for a
    /// change that cannot be undone, one-way or against a control.
    pub one_way: Option<OneWayRule>,
    /// What a comparison on the signal itself allows for its drift (not applied to the ratios
    /// to a control, which cancel what moves both).
    pub drift: Option<Drift>,
}

impl Sequential {
    /// A trial of `plan` whose baseline opens with `seed` (the readings the steady gate took).
    pub fn new(plan: WindowPlan, hib: bool, seed: Vec<f64>) -> Sequential {
        Sequential {
            plan,
            hib,
            off: seed,
            on: Vec::new(),
            raw: None,
            rest_off: Vec::new(),
            rest_on: Vec::new(),
            cpus: 0,
            dropped: 0,
            stepped: false,
            needed: None,
            early: None,
            one_way: None,
            drift: None,
        }
    }

    /// As [`Sequential::new`], judged on the ratio to a control: `seed` are ratios, `raw_seed`
    /// the treated workload's own readings.
    pub fn controlled(plan: WindowPlan, hib: bool, seed: Vec<f64>, raw_seed: Vec<f64>) -> Self {
        Sequential {
            raw: Some(Raw {
                off: raw_seed,
                on: Vec::new(),
            }),
            ..Sequential::new(plan, hib, seed)
        }
    }

    /// The plan it runs.
    pub fn plan(&self) -> WindowPlan {
        self.plan
    }

    /// The windows each side measures: the noise-fixed count once known, else the minimum.
    pub fn windows_each_side(&self) -> usize {
        self.needed.unwrap_or(self.plan.min)
    }

    /// Whether the baseline is complete, so that the change should be in effect.
    pub fn want_on(&self) -> bool {
        self.needed.is_some_and(|n| self.off.len() >= n) || !self.on.is_empty()
    }

    /// Takes in one window with the change `on` or not (`raw`: the treated workload's own
    /// value, with a control) and says what follows.
    pub fn record(&mut self, on: bool, value: f64, raw: Option<f64>, rest: Option<Rest>) -> Step {
        if !on && self.want_on() {
            // A window measured off after the baseline was complete (the change was still
            // being applied): not a baseline window any more, not an after window yet.
            return Step::Continue;
        }
        let (v, r) = if on {
            (&mut self.on, &mut self.rest_on)
        } else {
            (&mut self.off, &mut self.rest_off)
        };
        v.push(value);
        if let Some(rest) = rest {
            r.push(rest.cores);
            self.cpus = rest.cpus;
        }
        if let (Some(raw), Some(x)) = (self.raw.as_mut(), raw) {
            if on { &mut raw.on } else { &mut raw.off }.push(x);
        }
        if on { self.after() } else { self.baseline() }
    }

    /// Falls back from the ratios to the treated workload's own windows (its control exited):
    /// `false` when there was no control.
    pub fn drop_control(&mut self) -> bool {
        let Some(raw) = self.raw.take() else {
            return false;
        };
        self.off = raw.off;
        self.on = raw.on;
        // The ratios' noise planned the count; the signal alone is noisier.
        self.needed = None;
        self.early = None;
        // Before and after on the signal, without the history a one-way trial watches first:
        // too weak to keep a change for doing no harm.
        if let Some(r) = self.one_way.as_mut() {
            r.no_harm = None;
        }
        true
    }

    /// Whether every window is judged, none dropped as a transient or a step and no interim
    /// look taken: a trial bounded in time on the signal itself (one-way), which cannot tell
    /// the change settling from a spell of the workload's own; ratios to a control cancel such
    /// spells.
    fn keeps_every_window(&self) -> bool {
        self.one_way.is_some() && self.raw.is_none()
    }

    /// A baseline window was added.
    fn baseline(&mut self) -> Step {
        if self.off.len() < self.plan.min {
            return Step::Continue;
        }
        let note = match self.settle(false) {
            Err(end) => return Step::End(end),
            Ok(n) => n,
        };
        if self.off.len() < self.plan.min {
            return note.map_or(Step::Continue, Step::Note);
        }
        if self.needed.is_none() {
            return self.plan_windows().map_or(Step::Continue, Step::Note);
        }
        note.map_or(Step::Continue, Step::Note)
    }

    /// A window after the change was added.
    fn after(&mut self) -> Step {
        let planned = self.windows_each_side();
        if self.on.len() < planned {
            return self.look();
        }
        let note = match self.settle(true) {
            Err(end) => return Step::End(end),
            Ok(n) => n,
        };
        if self.on.len() < self.windows_each_side() {
            return note.map_or(Step::Continue, Step::Note);
        }
        match self.rest_moved() {
            Some((before, after)) => Step::End(EndReason::RestMoved { before, after }),
            None => Step::End(EndReason::Complete),
        }
    }

    /// The rest of the machine's move between the sides, when it moved too far to judge (not
    /// checked with a control: the control sees the same machine).
    fn rest_moved(&self) -> Option<(f64, f64)> {
        if self.raw.is_some() {
            return None;
        }
        windows::rest_moved(
            &self.rest_off,
            &self.rest_on,
            self.cpus,
            self.plan.looks.rest_share,
        )
    }

    /// Drops a transient from the start of one side's windows (`on`: after the change), or,
    /// once, the windows after the change before a step inside them, or the first half of
    /// ratios to a control that still climb. `Ok(Some(note))` when
    /// something was dropped; `Err` when more than [`SETTLE_LIMIT`] × the windows a side were
    /// dropped in all.
    fn settle(&mut self, on: bool) -> Result<Option<String>, EndReason> {
        let limit = SETTLE_LIMIT * self.windows_each_side();
        let resolution = self.plan.resolution;
        // On the signal itself, the windows before the change are all kept: the steady gate
        // (and a one-way trial's history) waited out a warm-up, and cutting a wandering
        // baseline where it settled would pick it by the spell it sits in, the windows after
        // it then likely in another. After the change a one-way trial keeps all its windows too.
        if (!on && self.raw.is_none()) || self.keeps_every_window() {
            return Ok(None);
        }
        let controlled = self.raw.is_some();
        let obs = if on { &mut self.on } else { &mut self.off };
        // After the change, once, also a step inside the windows: the change settling (a
        // server on a plateau for minutes after its memory was collapsed). Before it (ratios to
        // a control), MSER waits out a warm-up; a step there is the workload's own. Ratios to
        // a control that still climb are the change setting in (the control cancels spells of
        // the workload's own): their first half is dropped, as often as they climb.
        let cut = match windows::transient(obs) {
            0 if !on => return Ok(None),
            0 => match windows::level_shift(obs, resolution) {
                Some(s) if !self.stepped => Cut::Step(s),
                _ if !controlled => return Ok(None),
                _ => match windows::climbing(obs, resolution) {
                    Some(t) => Cut::Climb(t, obs.len() / 2),
                    None => return Ok(None),
                },
            },
            d => Cut::Transient(d),
        };
        let d = match cut {
            Cut::Transient(d) | Cut::Climb(_, d) => d,
            Cut::Step(s) => {
                self.stepped = true;
                s.at
            }
        };
        obs.drain(..d);
        let rest = if on {
            &mut self.rest_on
        } else {
            &mut self.rest_off
        };
        rest.drain(..d.min(rest.len()));
        if let Some(raw) = self.raw.as_mut() {
            let r = if on { &mut raw.on } else { &mut raw.off };
            r.drain(..d.min(r.len()));
        }
        self.dropped += d;
        if self.dropped > limit {
            return Err(EndReason::NotSettled {
                dropped: self.dropped,
            });
        }
        let side = if on { "after the change" } else { "before it" };
        Ok(Some(match cut {
            Cut::Step(s) => format!(
                "{d} windows {side} dropped: the signal stepped ×{:.3} after them; {} dropped so far",
                s.ratio, self.dropped
            ),
            Cut::Climb(t, _) => format!(
                "{d} windows {side} dropped: the ratios still climbed ×{:.3} across them; {} dropped so far",
                t.ratio, self.dropped
            ),
            Cut::Transient(_) => format!(
                "{d} windows {side} dropped as a transient; {} dropped so far",
                self.dropped
            ),
        }))
    }

    /// Fixes how many windows each side measures from the settled baseline's noise, once; a
    /// one-way trial measures `max_windows`, or fewer where its time bound allows fewer (it
    /// cannot be tried again, and a calm baseline says little of the spells to come); a
    /// controlled trial bounded in time measures what its ratios' noise asks, at most what the
    /// bound allows. A count above the minimum is noted.
    fn plan_windows(&mut self) -> Option<String> {
        let p = self.plan;
        let bounded = "as many as the time bound allows".to_string();
        let (n, why) = match self.one_way.as_ref().map(|r| r.windows_cap) {
            Some(cap) if self.raw.is_some() => match self.by_noise() {
                (n, _) if n > cap => (cap.max(p.min), bounded),
                by_noise => by_noise,
            },
            Some(cap) if cap < p.max => (cap.max(p.min), bounded),
            Some(_) => (
                p.max,
                "max_windows: a change that cannot be undone cannot be tried again".to_string(),
            ),
            None => self.by_noise(),
        };
        self.needed = Some(n);
        (n > p.min).then(|| format!("measuring the baseline: {n} windows a side ({why})"))
    }

    /// The windows a side the baseline's noise asks for, and why.
    fn by_noise(&self) -> (usize, String) {
        let p = self.plan;
        let n = windows::windows_needed(&self.off, p.resolution, p.looks.confidence, p.min, p.max);
        let cv = perfpilot_stats::cv(&self.off) * 100.0;
        let most = if n == p.max {
            ", at most max_windows"
        } else {
            ""
        };
        (
            n,
            format!(
                "its windows vary by {cv:.1} %, for an interval of ±{:.0} %{most}",
                p.resolution * 100.0
            ),
        )
    }

    /// An interim look after the change, each window from the plan's minimum until the planned
    /// count: a gain clear at the looks' shared-out level keeps the action now. Windows still
    /// settling (a transient or a step inside them) wait for the planned count, which drops them.
    fn look(&mut self) -> Step {
        let planned = self.windows_each_side();
        let n = self.on.len();
        // A one-way trial judges all its windows: a few after the change can sit inside one
        // spell of the workload's own, which no drift allowance read from its history foresees.
        if n < self.plan.min || n >= planned || self.keeps_every_window() {
            return Step::Continue;
        }
        let res = self.plan.resolution;
        if windows::transient(&self.on) > 0
            || windows::level_shift(&self.on, res).is_some()
            || (self.raw.is_some() && windows::climbing(&self.on, res).is_some())
            || self.rest_moved().is_some()
        {
            return Step::Continue;
        }
        let looks = planned - self.plan.min + 1;
        let confidence = windows::look_level(self.plan.looks.confidence, looks);
        let Some(g) = self.gain(confidence) else {
            return Step::Continue;
        };
        if gain::decide(&g, self.plan.looks.min_effect) != Decision::Keep {
            return Step::Continue;
        }
        self.early = Some(EarlyLook {
            confidence,
            looks,
            planned,
        });
        Step::End(EndReason::Complete)
    }

    /// The gain of the windows after the change over those before at `confidence`: on the
    /// signal itself widened for its drift, and under the one-way rule combined with its prior
    /// where it has one.
    pub fn gain(&self, confidence: f64) -> Option<Gain> {
        let mut g = gain::gain_sequential(&self.off, &self.on, self.hib, confidence)?;
        if let (None, Some(d)) = (&self.raw, &self.drift) {
            g = d.widen(g, &self.off, &self.on);
        }
        Some(match &self.one_way {
            Some(r) => r.with_prior(g),
            None => g,
        })
    }

    /// The verdict's gain, decision and what it showed, once the trial ended complete: at an
    /// early look's level when one decided it.
    pub fn decide(&self) -> Option<(Gain, Decision, Shown)> {
        let confidence = self
            .early
            .map_or(self.plan.looks.confidence, |e| e.confidence);
        let g = self.gain(confidence)?;
        let min_effect = self.plan.looks.min_effect;
        let (d, shown) = match self.one_way.as_ref().and_then(|r| r.no_harm) {
            Some(bound) => one_way::decide(&g, min_effect, bound),
            None => (gain::decide(&g, min_effect), Shown::Effect),
        };
        Some((g, d, shown))
    }
}

#[cfg(test)]
mod tests;
