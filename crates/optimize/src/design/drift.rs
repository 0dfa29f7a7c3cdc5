//! How far a signal moves on its own between the two sides of a before/after comparison. The
//! windows of each side vary within a spell, but a workload's level also wanders over minutes
//! (a build elsewhere, a vCPU's speed, the server's own cycles), and a side of a few minutes can
//! sit inside one spell: an interval from the windows' scatter alone would call such a step the
//! change's effect. The allowance is read from the sides' own windows and from the workload's
//! windows before the trial (its history), at spans up to the trial's length.

use perfpilot_stats::mean;
use perfpilot_stats::prior::se_of_interval;

use super::DesignKind;
use crate::gain::Gain;

/// What a before/after comparison on the signal itself allows for its drift.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Drift {
    /// The least drift between the two sides allowed for (sd of the log level; the one-way
    /// rule's `drift_floor`, 0 for a change that can be undone).
    pub floor: f64,
    /// The workload's windows before the trial, nothing changed: spells of its own that its few
    /// windows a side would miss.
    pub history: Vec<f64>,
}

impl Drift {
    /// The allowance a trial of design `kind` is judged with, before its history is filled in:
    /// a one-way trial's, at least `floor`; a before/after trial's, none beyond what it sees;
    /// `None` for designs whose comparisons cancel drift (switchback pairs, ratios to a
    /// control). The daemon's trials and their replays both take it from here, and the designs
    /// given one watch their signal unchanged before they start.
    pub fn of_design(kind: DesignKind, floor: f64) -> Option<Drift> {
        match kind {
            DesignKind::OneWay => Some(Drift {
                floor,
                history: Vec::new(),
            }),
            DesignKind::BeforeAfter => Some(Drift::default()),
            DesignKind::Switchback | DesignKind::Control => None,
        }
    }

    /// `g`, the gain of `on` over `off`, widened to what a no-change comparison of this length
    /// varies by on these windows and the history ([`null_variance`]), and at least by the
    /// floor's drift.
    pub fn widen(&self, g: Gain, off: &[f64], on: &[f64]) -> Gain {
        let n = off.len().min(on.len());
        // The sides' own fit as well: a calm history must not narrow what the sides show.
        let own = null_variance(off, on, &[], n).unwrap_or(0.0);
        let null = null_variance(off, on, &self.history, n).unwrap_or(0.0);
        widen(g, self.floor, own.max(null))
    }
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

#[cfg(test)]
mod tests;
