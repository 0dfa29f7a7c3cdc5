//! A level shift inside a measured series: a run of windows that sat at one level and then
//! stepped to another (a server still settling after a change, a phase of other work starting).
//! MSER finds a warm-up at the start of a series; a step in its second half is beyond its search
//! (White's rule looks at the first half only), so a plateau that later steps up reads as steady.
//! A change that sets in slowly shows neither: its windows climb ([`trend`]).

use serde::{Deserialize, Serialize};

use crate::describe::mean;
use crate::interval::t_quantile;

/// The split of a series into a before and an after whose levels differ most.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Shift {
    /// Values before the step (the after part starts at this index).
    pub at: usize,
    /// The after part's geometric mean over the before part's.
    pub ratio: f64,
    /// Welch's t of the difference of the parts' mean logs.
    pub t: f64,
    /// The |t| a shift must reach: Welch's quantile at `1 − alpha / (2 · splits tried)`
    /// (Bonferroni: the largest of many t's is not one t).
    pub critical: f64,
}

impl Shift {
    /// Whether the step is beyond what noise gives at the chosen level.
    pub fn significant(&self) -> bool {
        self.t.abs() >= self.critical
    }
}

/// The split of `series` (positive values, compared on the log scale so a step up and the
/// matching step down weigh the same) with the largest |Welch t| between its parts, each part
/// at least `min_segment` long. `None` when the series is shorter than two parts, holds a value
/// that is not positive and finite, or is flat.
pub fn level_shift(series: &[f64], min_segment: usize, alpha: f64) -> Option<Shift> {
    let min_segment = min_segment.max(2);
    let n = series.len();
    if n < 2 * min_segment || series.iter().any(|v| !v.is_finite() || *v <= 0.0) {
        return None;
    }
    let logs: Vec<f64> = series.iter().map(|v| v.ln()).collect();
    let splits = n - 2 * min_segment + 1;
    let mut best: Option<(usize, f64, f64, f64)> = None;
    for at in min_segment..=n - min_segment {
        let (before, after) = logs.split_at(at);
        let Some((t, df, diff)) = welch(before, after) else {
            continue;
        };
        if best.is_none_or(|(_, bt, _, _)| t.abs() > bt.abs()) {
            best = Some((at, t, df, diff));
        }
    }
    let (at, t, df, diff) = best?;
    Some(Shift {
        at,
        ratio: diff.exp(),
        t,
        critical: t_quantile(df, 1.0 - alpha / (2.0 * splits as f64)),
    })
}

/// A series that moves one way throughout: the least-squares slope of its logs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Trend {
    /// The fitted level at the last value over the fitted level at the first.
    pub ratio: f64,
    /// The slope's t.
    pub t: f64,
    /// The |t| it must reach: Student's quantile at `1 − alpha / 2` on n − 2 degrees of freedom.
    pub critical: f64,
}

impl Trend {
    /// Whether the slope is beyond what noise gives at the chosen level.
    pub fn significant(&self) -> bool {
        self.t.abs() >= self.critical
    }
}

/// The trend of `series` (positive values, on the log scale); `None` for fewer than four values,
/// a value that is not positive and finite, or a series on an exact line (no residual).
pub fn trend(series: &[f64], alpha: f64) -> Option<Trend> {
    let n = series.len();
    if n < 4 || series.iter().any(|v| !v.is_finite() || *v <= 0.0) {
        return None;
    }
    let logs: Vec<f64> = series.iter().map(|v| v.ln()).collect();
    let xs: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let (mx, my) = (mean(&xs), mean(&logs));
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    let sxy: f64 = xs.iter().zip(&logs).map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = sxy / sxx;
    let rss: f64 = xs
        .iter()
        .zip(&logs)
        .map(|(x, y)| (y - my - slope * (x - mx)).powi(2))
        .sum();
    let df = (n - 2) as f64;
    let se = (rss / df / sxx).sqrt();
    if se.is_nan() || se <= 1e-12 {
        return None;
    }
    Some(Trend {
        ratio: (slope * (n - 1) as f64).exp(),
        t: slope / se,
        critical: t_quantile(df, 1.0 - alpha / 2.0),
    })
}

/// Welch's t of `b`'s mean over `a`'s, its degrees of freedom, and the difference of the means;
/// `None` when both parts are flat.
fn welch(a: &[f64], b: &[f64]) -> Option<(f64, f64, f64)> {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (ma, mb) = (mean(a), mean(b));
    let va = a.iter().map(|x| (x - ma).powi(2)).sum::<f64>() / (na - 1.0) / na;
    let vb = b.iter().map(|x| (x - mb).powi(2)).sum::<f64>() / (nb - 1.0) / nb;
    let se2 = va + vb;
    // Flat parts leave only rounding in the variances.
    if !se2.is_finite() || se2.sqrt() <= 1e-12 * ma.abs().max(mb.abs()).max(1.0) {
        return None;
    }
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    Some(((mb - ma) / se2.sqrt(), df, mb - ma))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Normal draws, for series of known noise.
    fn noisy(rng: &mut Rng, n: usize, level: f64, cv: f64) -> Vec<f64> {
        (0..n).map(|_| level * (1.0 + cv * rng.normal())).collect()
    }

    #[test]
    fn a_plateau_that_steps_up_is_found_where_it_steps() {
        // PostgreSQL's work per CPU-second after its buffer pool was collapsed (the 17:11 demo,
        // docs/proofs.md): 13 windows at 16.2–17.2 k, then 10 at 18.2–18.8 k.
        let after = [
            16704.0, 16655.0, 16451.0, 16391.0, 16619.0, 17129.0, 16904.0, 17169.0, 16244.0,
            16590.0, 16476.0, 16575.0, 16506.0, 18169.0, 18703.0, 18618.0, 18538.0, 18518.0,
            18279.0, 18733.0, 18806.0, 18314.0, 18659.0,
        ];
        let s = level_shift(&after, 3, 0.01).unwrap();
        assert_eq!(s.at, 13);
        assert!((s.ratio - 1.113).abs() < 0.001, "{s:?}");
        assert!((s.t - 18.4).abs() < 0.05, "{s:?}");
        assert!(s.significant(), "{s:?}");
    }

    #[test]
    fn noise_alone_seldom_reads_as_a_shift() {
        let mut rng = Rng::new(7);
        let runs = 2000;
        let found = (0..runs)
            .filter(|_| {
                level_shift(&noisy(&mut rng, 23, 1000.0, 0.05), 3, 0.01)
                    .is_some_and(|s| s.significant())
            })
            .count();
        // The Bonferroni bound keeps it near alpha; Welch's df on 3-window parts is rough.
        assert!(found < runs * 4 / 100, "{found} of {runs}");
        // A step of 10 % at cv 5 % after 13 of 23 windows is found, at its place, more often
        // than not (59 % with this seed).
        let stepped = (0..runs)
            .filter(|_| {
                let mut v = noisy(&mut rng, 13, 1000.0, 0.05);
                v.extend(noisy(&mut rng, 10, 1100.0, 0.05));
                level_shift(&v, 3, 0.01).is_some_and(|s| s.significant() && s.at.abs_diff(13) <= 2)
            })
            .count();
        assert!(stepped > runs / 2, "{stepped} of {runs}");
    }

    #[test]
    fn a_short_flat_or_non_positive_series_has_no_shift() {
        assert_eq!(level_shift(&[1.0, 2.0, 3.0, 4.0, 5.0], 3, 0.01), None);
        assert_eq!(level_shift(&[5.0; 10], 3, 0.01), None);
        assert_eq!(level_shift(&[1.0, 2.0, 0.0, 4.0, 5.0, 6.0], 3, 0.01), None);
        assert_eq!(
            level_shift(&[1.0, 2.0, f64::NAN, 4.0, 5.0, 6.0], 3, 0.01),
            None
        );
        // A step down weighs as its step up.
        let up = level_shift(&[10.0, 11.0, 10.5, 20.0, 21.0, 20.5], 3, 0.01).unwrap();
        let down = level_shift(&[20.0, 21.0, 20.5, 10.0, 11.0, 10.5], 3, 0.01).unwrap();
        assert_eq!(up.at, 3);
        assert_eq!(down.at, 3);
        assert!((up.t + down.t).abs() < 0.5, "{up:?} {down:?}");
    }

    #[test]
    fn a_slow_climb_reads_as_a_trend_and_noise_alone_seldom_does() {
        let mut rng = Rng::new(11);
        let runs = 2000;
        let flat = (0..runs)
            .filter(|_| {
                trend(&noisy(&mut rng, 12, 1000.0, 0.03), 0.01).is_some_and(|t| t.significant())
            })
            .count();
        assert!(flat < runs * 2 / 100, "{flat} of {runs}");
        // Climbing 12 % over 12 windows at cv 3 %: found about four times in five (80 % with
        // this seed), its size about right.
        let climbs: Vec<Trend> = (0..runs)
            .filter_map(|_| {
                let v: Vec<f64> = noisy(&mut rng, 12, 1.0, 0.03)
                    .iter()
                    .enumerate()
                    .map(|(i, x)| x * 1000.0 * (1.0 + 0.12 * i as f64 / 11.0))
                    .collect();
                trend(&v, 0.01)
            })
            .collect();
        let found = climbs.iter().filter(|t| t.significant()).count();
        assert!(found > runs * 7 / 10, "{found} of {runs}");
        let mean_ratio = climbs.iter().map(|t| t.ratio).sum::<f64>() / runs as f64;
        assert!((mean_ratio - 1.12).abs() < 0.01, "{mean_ratio}");
        assert_eq!(trend(&[1.0, 2.0, 3.0], 0.01), None);
        assert_eq!(trend(&[5.0; 6], 0.01), None);
        assert_eq!(trend(&[1.0, 2.0, 0.0, 4.0], 0.01), None);
    }
}
