//! A server's signal recorded with nothing changed (`scripts/signal-trace`: a work counter and
//! the server's CPU-seconds, once a second), cut into the daemon's windows and replayed as
//! trials at every start: planned before/after trials judged two ways (whatever such a trial
//! decides other than neutral is false), and each trial design (`crate::design`) run as the
//! daemon runs it, with or without a true effect applied from where the design switches the
//! change on. `perfpilot bench verdicts` prints both; docs/optimizer.md quotes them.

use std::path::Path;

use crate::design::one_way::{self, OneWayRule};
use crate::design::replay::{self, Effect, Spec, Tally};
use crate::design::windows;
use crate::design::{DesignKind, Drift};
use crate::design::{PeriodLimits, WindowPlan};
use crate::gain::{self, Decision};
use crate::signal::SpanWindow;
use crate::tunables::Tunables;

/// A trace that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("cannot read {path}: {err}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        err: std::io::Error,
    },
    /// A row is not three numbers, or goes back in time.
    #[error(
        "{path}:{line}: {why}; a trace row is `seconds,counter,cpu_seconds` (cumulative, as `scripts/signal-trace` writes them)"
    )]
    Row {
        /// The file.
        path: String,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// Too short to cut into windows and trials.
    #[error(
        "{path}: {windows} windows of {window_s} s; a replay needs at least {need}: record longer"
    )]
    Short {
        /// The file.
        path: String,
        /// The windows it gave.
        windows: usize,
        /// The window length asked for.
        window_s: f64,
        /// The least a replay needs.
        need: usize,
    },
}

/// One reading: seconds since the first, the counter, the CPU-seconds used since the first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Seconds since the trace began.
    pub t_s: f64,
    /// The work counter (transactions, commands, …).
    pub counter: f64,
    /// The server's CPU-seconds since the trace began.
    pub cpu_s: f64,
}

/// Reads a trace: lines starting with `#` and a header line starting with a letter are
/// skipped; the rest are `seconds,counter,cpu_seconds`, in time order.
pub fn read(path: &Path) -> Result<Vec<Reading>, TraceError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| TraceError::Io {
        path: name.clone(),
        err,
    })?;
    parse(&text, &name)
}

/// As [`read`], from the text of the file `name`.
pub fn parse(text: &str, name: &str) -> Result<Vec<Reading>, TraceError> {
    let mut out: Vec<Reading> = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(|c: char| c.is_ascii_alphabetic()) {
            continue;
        }
        let row = |why: String| TraceError::Row {
            path: name.to_string(),
            line: i + 1,
            why,
        };
        let v: Vec<f64> = l
            .split(',')
            .map(|f| {
                f.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| row(format!("{f:?} is not a number")))
            })
            .collect::<Result<_, _>>()?;
        let [t_s, counter, cpu_s] = v[..] else {
            return Err(row(format!("{} fields, not 3", v.len())));
        };
        if out.last().is_some_and(|p| t_s <= p.t_s) {
            return Err(row(format!("time {t_s} is not after the row before")));
        }
        out.push(Reading {
            t_s,
            counter,
            cpu_s,
        });
    }
    Ok(out)
}

/// Work per CPU-second over consecutive windows of `window_s` seconds, cut as the daemon cuts
/// them ([`SpanWindow`]: a window ends at the reading within half a gap of its length; a
/// counter that went back starts a new one; a window that used next to no CPU gives nothing).
pub fn windows(readings: &[Reading], window_s: f64) -> Vec<f64> {
    let mut span = SpanWindow::new(window_s);
    let mut prev: Option<Reading> = None;
    let mut out = Vec::new();
    for &r in readings {
        // The daemon feeds the cores used since its last scan; the trace holds the CPU-seconds
        // since its first row.
        let cores = prev.map_or(0.0, |p| (r.cpu_s - p.cpu_s) / (r.t_s - p.t_s));
        out.extend(span.feed(r.t_s, r.counter, cores));
        prev = Some(r);
    }
    out
}

/// How the no-change trials of a replay ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decisions {
    /// Kept: a false gain.
    pub keep: usize,
    /// Reverted: a false loss.
    pub revert: usize,
    /// Neutral: right.
    pub neutral: usize,
}

impl Decisions {
    fn add(&mut self, d: Decision) {
        match d {
            Decision::Keep => self.keep += 1,
            Decision::Revert => self.revert += 1,
            Decision::Neutral => self.neutral += 1,
        }
    }

    /// The trials that decided something.
    pub fn false_verdicts(&self) -> usize {
        self.keep + self.revert
    }

    /// All the trials.
    pub fn trials(&self) -> usize {
        self.keep + self.revert + self.neutral
    }
}

/// How a replay's trials are planned and judged: the daemon's tunables of the same names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplayPlan {
    /// `windows`: the least a side measures, and the baseline that plans the count.
    pub min: usize,
    /// `max_windows`.
    pub max: usize,
    /// `resolution`.
    pub resolution: f64,
    /// `confidence`.
    pub confidence: f64,
    /// `min_effect`.
    pub min_effect: f64,
}

impl Default for ReplayPlan {
    /// The daemon's defaults.
    fn default() -> ReplayPlan {
        let t = Tunables::default();
        ReplayPlan {
            min: t.window_count(),
            max: t.max_windows as usize,
            resolution: t.resolution,
            confidence: t.confidence,
            min_effect: t.min_effect,
        }
    }
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// The windows' lag-1 autocorrelation over the whole trace.
    pub lag1: f64,
    /// The windows' coefficient of variation over the whole trace.
    pub cv: f64,
    /// The windows a side each trial planned, in start order.
    pub planned: Vec<usize>,
    /// Judged with an interval that takes the windows as independent.
    pub plain: Decisions,
    /// Judged as the daemon judges (allowing for the windows' autocorrelation).
    pub serial: Decisions,
}

impl Replay {
    /// The windows a side the trials planned: the least, the median and the most; `None`
    /// without a trial.
    pub fn planned_spread(&self) -> Option<(usize, usize, usize)> {
        let mut p = self.planned.clone();
        p.sort_unstable();
        Some((*p.first()?, p[p.len() / 2], *p.last()?))
    }
}

/// Replays no-change sequential trials starting at every window of `w`: the first `plan.min`
/// windows plan the count a side (`windows::windows_needed`), the next windows are its before
/// and after; a start whose trial would run past the trace is left out.
pub fn replay(w: &[f64], plan: &ReplayPlan) -> Replay {
    let mut r = Replay {
        lag1: perfpilot_stats::serial::lag1(&[w]).unwrap_or(f64::NAN),
        cv: perfpilot_stats::cv(w),
        planned: Vec::new(),
        plain: Decisions::default(),
        serial: Decisions::default(),
    };
    for start in 0..w.len() {
        let Some(probe) = w.get(start..start + plan.min) else {
            break;
        };
        let n =
            windows::windows_needed(probe, plan.resolution, plan.confidence, plan.min, plan.max);
        let Some(after) = w.get(start + n..start + 2 * n) else {
            continue;
        };
        let before = &w[start..start + n];
        let (Some(ci), Some(g)) = (
            perfpilot_stats::ratio_of_means_ci(after, before, plan.confidence),
            gain::gain_sequential(before, after, true, plan.confidence),
        ) else {
            continue;
        };
        r.planned.push(n);
        r.plain.add(gain::decide(
            &gain::gain_from_log(ci, true, plan.confidence),
            plan.min_effect,
        ));
        r.serial.add(gain::decide(&g, plan.min_effect));
    }
    r
}

/// The least windows a replay needs: two trials' worth of the minimum.
fn least_windows(plan: &ReplayPlan) -> usize {
    4 * plan.min
}

/// Replays the readings of the trace `name` in windows of `window_s`: the windows it gave and
/// what the replay found, or [`TraceError::Short`] when they are too few for two trials.
pub fn replay_readings(
    readings: &[Reading],
    name: &str,
    window_s: f64,
    plan: &ReplayPlan,
) -> Result<(usize, Replay), TraceError> {
    let w = windows(readings, window_s);
    if w.len() < least_windows(plan) {
        return Err(TraceError::Short {
            path: name.to_string(),
            windows: w.len(),
            window_s,
            need: least_windows(plan),
        });
    }
    Ok((w.len(), replay(&w, plan)))
}

/// Reads `path` and replays it in windows of `window_s`.
pub fn replay_file(
    path: &Path,
    window_s: f64,
    plan: &ReplayPlan,
) -> Result<(usize, Replay), TraceError> {
    replay_readings(&read(path)?, &path.display().to_string(), window_s, plan)
}

/// The designs a replay can run, by their `--design` names: the daemon's four, and the old
/// interleaved pairs for comparison.
pub const DESIGNS: [&str; 5] = [
    "switchback",
    "control",
    "before_after",
    "one_way",
    "interleave",
];

/// What a design replay is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct DesignReplayOptions {
    /// The window length, seconds.
    pub window_s: f64,
    /// The true effect (its settling in windows).
    pub effect: Effect,
    /// A trial starts at every `stride`-th window.
    pub stride: usize,
    /// The seed of the switchback orders.
    pub seed: u64,
    /// The tunables the designs take their bounds from (`windows`, `max_windows`,
    /// `resolution`, `confidence`, `min_effect`, `period_max_s`, `switch_settle_s`,
    /// `harm_bound`, `drift_floor`, `one_way_history_s`, `verdict_within_s`).
    pub tun: Tunables,
    /// Seconds each switch of a switchback takes (the trace flows on, unjudged).
    pub switch_s: f64,
    /// Whether the switchback's periods are planned for the switches' time, as the daemon
    /// plans them once it has timed the first making of the change.
    pub switch_planned: bool,
}

/// What one design's replay found.
#[derive(Debug, Clone, PartialEq)]
pub struct DesignReplay {
    /// The design's name.
    pub design: &'static str,
    /// How its trials ended.
    pub tally: Tally,
    /// The median seconds from a trial's start to its verdict.
    pub median_decision_s: f64,
}

/// The replayed form of design `name`; `None` for a name it does not know.
pub fn design_spec(name: &str, o: &DesignReplayOptions) -> Option<Spec> {
    let tun = &o.tun;
    let history = (tun.one_way_history_s / o.window_s.max(1e-3)).ceil() as usize;
    // The time bound of a change that cannot be undone (one-way, or against a control).
    let bound = OneWayRule {
        windows_cap: one_way::windows_cap(
            tun.verdict_within_s,
            0.0,
            o.window_s,
            tun.window_count(),
        ),
        no_harm: Some(tun.harm_bound),
        prior: None,
        within_s: tun.verdict_within_s,
    };
    Some(match name {
        "switchback" => Spec::Switchback {
            limits: PeriodLimits {
                window_s: o.window_s,
                settle_s: tun.switch_settle_s,
                period_max_s: tun.period_max_s,
                budget_windows: 2 * tun.max_windows as usize,
                pairs_min: 3,
                switch_s: if o.switch_planned { o.switch_s } else { 0.0 },
                within_s: tun.verdict_within_s,
                spent_s: 0.0,
            },
            switch_windows: (o.switch_s / o.window_s).ceil() as usize,
        },
        "before_after" => Spec::Sequential {
            one_way: None,
            controlled: false,
            drift: Drift::of_design(DesignKind::BeforeAfter, tun.drift_floor),
            history,
        },
        // Judged on the ratios to the control, which cancel what moves both; as the daemon
        // judges huge pages that are not split back: within the time bound, with a no-harm keep.
        "control" => Spec::Sequential {
            one_way: Some(bound.clone()),
            controlled: true,
            drift: Drift::of_design(DesignKind::Control, tun.drift_floor),
            history: 0,
        },
        "one_way" => Spec::Sequential {
            one_way: Some(bound.clone()),
            controlled: false,
            drift: Drift::of_design(DesignKind::OneWay, tun.drift_floor),
            history,
        },
        "interleave" => Spec::Interleave,
        _ => return None,
    })
}

/// Replays design `name` over the windows `w` (for `control`, the ratios of the treated trace's
/// windows to its control's: `control` gives the control's windows).
pub fn replay_design(
    name: &'static str,
    w: &[f64],
    control: Option<&[f64]>,
    o: &DesignReplayOptions,
) -> Option<DesignReplay> {
    let spec = design_spec(name, o)?;
    let series: Vec<f64> = match (name, control) {
        ("control", Some(c)) => w
            .iter()
            .zip(c)
            .filter(|(_, c)| **c > 0.0)
            .map(|(v, c)| v / c)
            .collect(),
        ("control", None) => return None,
        _ => w.to_vec(),
    };
    // The rest of the machine is not in a trace.
    let mut plan = WindowPlan::of(&o.tun);
    plan.looks.rest_share = 0.0;
    let tally = replay::replay_all(&spec, &series, o.effect, &plan, o.stride, o.seed);
    Some(DesignReplay {
        design: name,
        median_decision_s: tally.median_windows() * o.window_s,
        tally,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_row_that_is_not_three_numbers_in_time_order_is_refused_with_its_line() {
        let ok = parse("# note\nt_s,xacts,cpu_s\n0,0,0\n1,100,0.5\n", "t.csv").unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(
            ok[1],
            Reading {
                t_s: 1.0,
                counter: 100.0,
                cpu_s: 0.5
            }
        );
        let e = parse("0,0,0\n1,x,0.5\n", "t.csv").unwrap_err().to_string();
        assert!(e.starts_with("t.csv:2: \"x\" is not a number"), "{e}");
        let e = parse("0,0\n", "t.csv").unwrap_err().to_string();
        assert!(e.contains("t.csv:1: 2 fields, not 3"), "{e}");
        let e = parse("1,0,0\n1,5,0.1\n", "t.csv").unwrap_err().to_string();
        assert!(e.contains("t.csv:2: time 1 is not after"), "{e}");
    }

    #[test]
    fn windows_hold_the_work_per_cpu_second_of_each_stretch_and_skip_a_counter_reset() {
        // 1,000 units a second at half a core: 2,000 per CPU-second; a reset at 5 s.
        let rows: Vec<Reading> = (0..=12)
            .map(|i| {
                let t = i as f64;
                let counter = if i < 5 {
                    1000.0 * t
                } else {
                    1000.0 * (t - 5.0)
                };
                Reading {
                    t_s: t,
                    counter,
                    cpu_s: 0.5 * t,
                }
            })
            .collect();
        let w = windows(&rows, 4.0);
        assert_eq!(w, vec![2000.0, 2000.0]);
    }

    #[test]
    fn a_replay_of_a_steady_signal_decides_nothing_and_a_slow_wander_fools_the_plain_interval_far_more()
     {
        let plan = ReplayPlan::default();
        // Alternating ±1 %: steady, independent-looking windows.
        let steady: Vec<f64> = (0..60)
            .map(|i| if i % 2 == 0 { 101.0 } else { 99.0 })
            .collect();
        let r = replay(&steady, &plan);
        assert!(
            r.plain.trials() > 40 && r.plain.false_verdicts() == 0,
            "{r:?}"
        );
        assert_eq!(r.serial.false_verdicts(), 0);
        // A slow wander (±5 % over 40 windows) with a little wobble: neighbours are alike.
        let wander: Vec<f64> = (0..120)
            .map(|i| {
                let phase = std::f64::consts::TAU * i as f64 / 40.0;
                100.0 + 5.0 * phase.sin() + [0.0, 1.0, -1.0, 0.5][i % 4]
            })
            .collect();
        let r = replay(&wander, &plan);
        assert!(r.lag1 > 0.8, "{r:?}");
        assert!(
            r.plain.false_verdicts() > 2 * r.serial.false_verdicts() + 5,
            "{r:?}"
        );
    }
}
