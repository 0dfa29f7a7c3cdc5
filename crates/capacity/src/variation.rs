//! How much the measured system moved by itself, apart from the model: the tiers' CPU per
//! request at held-out points against the fitted demands, and one load point measured again
//! and again on one deployment (`[capacity] repeat`). A prediction cannot be nearer a single
//! measurement than that point's own spread, whatever the model (docs/capacity.md).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use perfpilot_model::{TierCheck, TierModel};
use perfpilot_stats::describe;
use serde::{Deserialize, Serialize};

use crate::deploy::Deployed;
use crate::error::{CapacityError, Result};
use crate::spec::{Capacity, SweepFile};
use crate::sweep::{self, Point};

/// The throughput error the validation is judged at, %: a repeated point's measurements within
/// it of their mean are those a model exact about the mean would meet.
pub const WITHIN_PCT: f64 = 5.0;

/// How far a held-out point's CPU per request may be from the fitted demand before it is said.
const DRIFT: f64 = 0.10;

/// Per tier that was the bottleneck somewhere: the held-out points where its CPU per request
/// moved more than [`DRIFT`] from the fitted demand. At a point the bottleneck bounds, the
/// predicted throughput misses by about that ratio whatever the queueing, so the table's
/// errors there are the system's change, not the model's.
pub(crate) fn demand_drift(checks: &[TierCheck]) -> Vec<String> {
    let mut by_tier: BTreeMap<&str, Vec<(&str, f64)>> = BTreeMap::new();
    for c in checks.iter().filter(|c| !c.fitted) {
        if let Some(&r) = c.demand_ratio.get(&c.bottleneck)
            && (r - 1.0).abs() > DRIFT
        {
            by_tier
                .entry(c.bottleneck.as_str())
                .or_default()
                .push((c.label.as_str(), r));
        }
    }
    by_tier
        .into_iter()
        .map(|(tier, points)| {
            let (lo, hi) = points
                .iter()
                .fold((f64::INFINITY, 0.0_f64), |(lo, hi), (_, r)| (lo.min(*r), hi.max(*r)));
            let range = if (hi - lo).abs() < 0.005 {
                format!("×{lo:.2}")
            } else {
                format!("×{lo:.2} … ×{hi:.2}")
            };
            format!(
                "the demand moved: at {} held-out point(s) the {tier} tier, the bottleneck there, used {range} of the CPU per request fitted ({}); at a point it bounds, the predicted throughput misses by about that much whatever the model",
                points.len(),
                points
                    .iter()
                    .map(|(l, r)| format!("{l} ×{r:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect()
}

/// Held-out points of one class where the same tier, with the same instances, was saturated in
/// the measurement and in the model, which predicts one throughput there (within 1 %): past
/// saturation every queueing model of one class gives one number, the bottleneck's capacity
/// over its demand, so how far apart these points measured bounds any model's error there.
/// (With several classes the saturated total depends on the classes' shares, which a model may
/// let move with the load.)
#[derive(Clone, Debug, PartialEq)]
pub struct SaturatedSpread {
    /// The saturated tier.
    pub tier: String,
    /// The points, as labelled.
    pub labels: Vec<String>,
    /// The most the model predicts at any of them, req/s (its saturated throughput).
    pub predicted: f64,
    /// Least and most throughput measured among them, req/s.
    pub min: f64,
    /// Most throughput measured.
    pub max: f64,
}

impl SaturatedSpread {
    /// The smallest largest error, %, one predicted throughput can have over these points: that
    /// of the value between `min` and `max` equally far from both in relative terms.
    pub fn least_error_pct(&self) -> f64 {
        100.0 * (self.max - self.min) / (self.max + self.min)
    }
}

/// How close to its capacity a tier must be predicted to count as saturated.
const SATURATED: f64 = 0.99;

/// How close to its capacity a tier must have measured to count as saturated (a quota is not
/// used to the last percent: 0.38 … 0.40 of 0.4 cores at saturation here).
const MEASURED_SATURATED: f64 = 0.95;

/// The groups of two or more held-out points that share a saturated bottleneck, its instances
/// and the predicted throughput ([`SaturatedSpread`]), the widest spread first.
pub fn saturated_groups(checks: &[TierCheck], model: &TierModel) -> Vec<SaturatedSpread> {
    let capacity = |c: &TierCheck| -> Option<f64> {
        let t = model.tiers.iter().find(|t| t.name == c.bottleneck)?;
        Some(t.cores * f64::from(c.instances.get(&t.name).copied().unwrap_or(1)))
    };
    // Indices into `checks`, so that a group's labels keep the run's order.
    let mut saturated: Vec<(usize, &TierCheck)> = checks
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.fitted && c.measured_throughput > 0.0 && c.per_class.len() <= 1)
        .filter(|(_, c)| {
            let (meas, pred) = c.busy.get(&c.bottleneck).copied().unwrap_or((0.0, 0.0));
            capacity(c).is_some_and(|cap| {
                cap > 0.0 && pred >= SATURATED * cap && meas >= MEASURED_SATURATED * cap
            })
        })
        .collect();
    saturated.sort_by(|(_, a), (_, b)| {
        (&a.bottleneck, &a.instances)
            .cmp(&(&b.bottleneck, &b.instances))
            .then(a.predicted_throughput.total_cmp(&b.predicted_throughput))
    });
    let mut groups: Vec<Vec<(usize, &TierCheck)>> = Vec::new();
    for (i, c) in saturated {
        match groups.last_mut() {
            Some(g)
                if g[0].1.bottleneck == c.bottleneck
                    && g[0].1.instances == c.instances
                    && (c.predicted_throughput / g[0].1.predicted_throughput - 1.0).abs()
                        < 0.01 =>
            {
                g.push((i, c))
            }
            _ => groups.push(vec![(i, c)]),
        }
    }
    let mut out = groups
        .into_iter()
        .filter(|g| g.len() >= 2)
        .map(|mut g| {
            let tier = g[0].1.bottleneck.clone();
            let predicted = g
                .iter()
                .map(|(_, c)| c.predicted_throughput)
                .fold(0.0, f64::max);
            let measured: Vec<f64> = g.iter().map(|(_, c)| c.measured_throughput).collect();
            g.sort_by_key(|(i, _)| *i);
            SaturatedSpread {
                tier,
                labels: g.iter().map(|(_, c)| c.label.clone()).collect(),
                predicted,
                min: measured.iter().copied().fold(f64::INFINITY, f64::min),
                max: measured.iter().copied().fold(0.0, f64::max),
            }
        })
        .collect::<Vec<_>>();
    out.sort_by(|a, b| b.least_error_pct().total_cmp(&a.least_error_pct()));
    out
}

/// One load point measured again and again in a row on one deployment.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Repeats {
    /// `SWEEP: USERS`.
    pub label: String,
    /// The measurements, in order (the sweep's own measurement of the point not among them).
    pub points: Vec<Point>,
}

/// What the repeats say.
#[derive(Clone, Debug, PartialEq)]
pub struct Spread {
    /// Measurements.
    pub n: usize,
    /// Mean throughput, req/s.
    pub mean: f64,
    /// The throughputs' coefficient of variation, %.
    pub cv_pct: f64,
    /// Least throughput.
    pub min: f64,
    /// Most throughput.
    pub max: f64,
    /// Lag-1 autocorrelation of the throughputs in measuring order: near 0 when neighbours
    /// differ as much as any two, near 1 when the system wanders slowly.
    pub lag1: Option<f64>,
    /// Measurements within ±[`WITHIN_PCT`] of the mean.
    pub within: usize,
    /// Per tier (and the driver): CPU per request, ms, mean and coefficient of variation (%).
    pub cpu_per_request: BTreeMap<String, (f64, f64)>,
}

impl Repeats {
    /// The spread of the measurements; `None` with fewer than two that did work.
    pub fn spread(&self) -> Option<Spread> {
        let used: Vec<&Point> = self
            .points
            .iter()
            .filter(|p| p.throughput() > 0.0)
            .collect();
        if used.len() < 2 {
            return None;
        }
        let xs: Vec<f64> = used.iter().map(|p| p.throughput()).collect();
        let mean = describe::mean(&xs);
        let mut cpu_per_request = BTreeMap::new();
        for tier in used[0].busy.keys() {
            let d: Vec<f64> = used
                .iter()
                .map(|p| p.busy.get(tier).copied().unwrap_or(0.0) / p.throughput() * 1e3)
                .collect();
            let m = describe::mean(&d);
            if m > 0.0 {
                cpu_per_request.insert(tier.clone(), (m, 100.0 * describe::cv(&d)));
            }
        }
        Some(Spread {
            n: xs.len(),
            mean,
            cv_pct: 100.0 * describe::cv(&xs),
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(0.0, f64::max),
            lag1: perfpilot_stats::serial::lag1(&[&xs]),
            within: xs
                .iter()
                .filter(|v| ((*v / mean - 1.0) * 100.0).abs() <= WITHIN_PCT)
                .count(),
            cpu_per_request,
        })
    }
}

/// Measures `users` of `sweep` `cap.repeat` times in a row on `dep`, printing each. A failed
/// measurement is printed and left out; an interruption stops the run.
pub fn measure_again(
    cap: &Capacity,
    dep: &mut Deployed,
    sweep: &SweepFile,
    users: u32,
    stop: &AtomicBool,
    progress: &dyn Fn(&str),
) -> Result<Repeats> {
    let label = Capacity::label(&sweep.name, users);
    progress(&format!(
        "  {label} again, {} times: the machine's repeatability",
        cap.repeat
    ));
    let mut points = Vec::new();
    for i in 1..=cap.repeat {
        match sweep::measure(cap, dep, sweep, users, stop) {
            Ok(p) => {
                progress(&format!(
                    "    {i}: {:.1} req/s, {:.2} ms",
                    p.throughput(),
                    p.response_time() * 1e3
                ));
                points.push(p);
            }
            Err(CapacityError::Interrupted) => return Err(CapacityError::Interrupted),
            Err(e) => {
                progress(&format!("    {i}: failed: {e}"));
                if dep.exited().is_some() {
                    break;
                }
            }
        }
    }
    Ok(Repeats { label, points })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(x: f64, app_busy: f64) -> Point {
        Point {
            label: "no think: 2".into(),
            users: 2,
            classes: vec![crate::sweep::ClassResult {
                class: "score".into(),
                users: 2,
                think_time: 0.0,
                throughput: x,
                response_time: 2.0 / x,
                p99: None,
                errors: 0,
                first_error: None,
            }],
            busy: [("app".to_string(), app_busy)].into(),
            other_busy: None,
            throttled: BTreeMap::new(),
            steady: Some(true),
            truncate_s: 0,
            rounds: Vec::new(),
        }
    }

    #[test]
    fn repeats_of_one_load_give_its_spread_and_how_many_lie_within_five_percent_of_the_mean() {
        // Mean 50: 47 and 53 are 6 % away, the rest within 5 %.
        let r = Repeats {
            label: "no think: 2".into(),
            points: [50.0, 47.0, 53.0, 51.0, 49.0]
                .iter()
                .map(|&x| point(x, 0.4))
                .collect(),
        };
        let s = r.spread().unwrap();
        assert_eq!(s.n, 5);
        assert!((s.mean - 50.0).abs() < 1e-9);
        assert_eq!((s.min, s.max), (47.0, 53.0));
        assert_eq!(s.within, 3);
        // sd of (0, -3, 3, 1, -1) = sqrt(20 / 4) = 2.236: cv 4.47 %.
        assert!((s.cv_pct - 4.472).abs() < 0.01, "{}", s.cv_pct);
        // The app's CPU per request is 0.4 / X: its mean over the repeats, in ms.
        let (d, cv) = s.cpu_per_request["app"];
        let want = [50.0, 47.0, 53.0, 51.0, 49.0]
            .iter()
            .map(|x| 400.0 / x)
            .sum::<f64>()
            / 5.0;
        assert!((d - want).abs() < 1e-9 && cv > 4.0 && cv < 5.0, "{d} {cv}");
        assert!(s.lag1.is_some());
    }

    #[test]
    fn fewer_than_two_working_repeats_have_no_spread() {
        let one = Repeats {
            label: "x: 1".into(),
            points: vec![point(50.0, 0.4), point(0.0, 0.0)],
        };
        assert_eq!(one.spread(), None);
    }
}
