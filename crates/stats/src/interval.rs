//! Confidence intervals: of a mean, of a ratio from paired runs, of a ratio of two means.
//!
//! Ratios are estimated on the log scale, where a gain and the matching loss are symmetric, and
//! exponentiated back.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::describe::{mean, stdev};

/// The `p`-quantile of Student's t with `df` degrees of freedom; infinite when `df` is not a
/// positive number (no interval can be given).
pub fn t_quantile(df: f64, p: f64) -> f64 {
    StudentsT::new(0.0, 1.0, df)
        .map(|t| t.inverse_cdf(p))
        .unwrap_or(f64::INFINITY)
}

/// An estimate with its two-sided confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanCi {
    /// The estimate.
    pub mean: f64,
    /// The interval's low end.
    pub low: f64,
    /// The interval's high end.
    pub high: f64,
}

/// The Student-t interval at `level` (e.g. 0.95) of the mean of `xs`. `None` with fewer than
/// two values or a non-finite one.
pub fn mean_ci(xs: &[f64], level: f64) -> Option<MeanCi> {
    if xs.len() < 2 || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let n = xs.len() as f64;
    let m = mean(xs);
    let se = stdev(xs) / n.sqrt();
    let t = t_quantile(n - 1.0, 0.5 + level / 2.0);
    Some(MeanCi {
        mean: m,
        low: m - t * se,
        high: m + t * se,
    })
}

/// The one-sided upper confidence bound at `alpha` of the mean of `xs` (Student t). `None`
/// with fewer than two values or a non-finite one.
pub fn upper_bound(xs: &[f64], alpha: f64) -> Option<f64> {
    if xs.len() < 2 || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let n = xs.len() as f64;
    let t = t_quantile(n - 1.0, 1.0 - alpha);
    Some(mean(xs) + t * stdev(xs) / n.sqrt())
}

/// A ratio with its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RatioCi {
    /// Geometric mean of the paired ratios.
    pub ratio: f64,
    /// The interval's low end.
    pub low: f64,
    /// The interval's high end.
    pub high: f64,
    /// The pairs it was estimated from.
    pub pairs: usize,
}

/// The gain `candidate / baseline` from paired runs: the geometric mean of the per-pair ratios
/// with a Student-t interval at `level` on their logarithms. `None` with fewer than 2 pairs or
/// a non-positive value.
pub fn paired_ratio_ci(candidate: &[f64], baseline: &[f64], level: f64) -> Option<RatioCi> {
    let logs: Vec<f64> = candidate
        .iter()
        .zip(baseline)
        .map(|(c, b)| (c / b).ln())
        .collect();
    let ci = mean_ci(&logs, level)?;
    Some(RatioCi {
        ratio: ci.mean.exp(),
        low: ci.low.exp(),
        high: ci.high.exp(),
        pairs: logs.len(),
    })
}

/// The log of the ratio of means `mean(numer) / mean(denom)` of two independent samples with
/// its interval at `level`: the delta method's standard error and Welch–Satterthwaite degrees
/// of freedom. `None` when a side has fewer than two values or a non-positive mean.
pub fn ratio_of_means_ci(numer: &[f64], denom: &[f64], level: f64) -> Option<MeanCi> {
    log_ratio_ci(numer, denom, level, [1.0, 1.0])
}

/// As [`ratio_of_means_ci`], with each side's variance of the mean multiplied by its
/// `inflation` (numerator, denominator) and its degrees of freedom counted on its effective
/// number of values, n / inflation (`crate::serial`: windows that are not independent).
pub(crate) fn log_ratio_ci(
    numer: &[f64],
    denom: &[f64],
    level: f64,
    inflation: [f64; 2],
) -> Option<MeanCi> {
    let (nn, nd) = (numer.len(), denom.len());
    if nn < 2 || nd < 2 {
        return None;
    }
    let (mn, md) = (mean(numer), mean(denom));
    if !(mn > 0.0 && md > 0.0) {
        return None;
    }
    let [fn_, fd] = inflation.map(|f| {
        if f.is_finite() {
            f.max(1.0)
        } else {
            f64::INFINITY
        }
    });
    let vn = fn_ * stdev(numer).powi(2) / (nn as f64 * mn.powi(2));
    let vd = fd * stdev(denom).powi(2) / (nd as f64 * md.powi(2));
    // Each side keeps at least one degree of freedom, however correlated its values.
    let dfn = (nn as f64 / fn_ - 1.0).max(1.0);
    let dfd = (nd as f64 / fd - 1.0).max(1.0);
    let se = (vn + vd).sqrt();
    let df = if se > 0.0 && se.is_finite() {
        (vn + vd).powi(2) / (vn.powi(2) / dfn + vd.powi(2) / dfd)
    } else {
        (nn + nd - 2) as f64
    };
    let log_r = (mn / md).ln();
    let t = t_quantile(df.max(1.0), 0.5 + level / 2.0);
    Some(MeanCi {
        mean: log_r,
        low: log_r - t * se,
        high: log_r + t * se,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_t_quantile_matches_tables_and_refuses_no_freedom() {
        // t(0.975; 4) = 2.776 (any table).
        assert!((t_quantile(4.0, 0.975) - 2.776_445).abs() < 1e-5);
        assert!(t_quantile(0.0, 0.975).is_infinite());
    }

    #[test]
    fn a_paired_ratio_is_the_geometric_mean_of_the_pairs() {
        let c = [110.0, 220.0, 330.0];
        let b = [100.0, 200.0, 300.0];
        let r = paired_ratio_ci(&c, &b, 0.95).unwrap();
        assert!((r.ratio - 1.1).abs() < 1e-12 && r.pairs == 3);
        // No spread: the interval closes on the ratio.
        assert!((r.low - 1.1).abs() < 1e-12 && (r.high - 1.1).abs() < 1e-12);
        assert!(paired_ratio_ci(&[1.0, 0.0], &[1.0, 1.0], 0.95).is_none());
        assert!(paired_ratio_ci(&[1.0], &[1.0], 0.95).is_none());
    }

    #[test]
    fn the_mean_interval_widens_with_the_level() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        let a = mean_ci(&xs, 0.90).unwrap();
        let b = mean_ci(&xs, 0.99).unwrap();
        assert_eq!(a.mean, 2.5);
        assert!(b.low < a.low && b.high > a.high);
        // t(0.95; 3) · sd/√n = 2.353 · 1.291/2.
        assert!((upper_bound(&xs, 0.05).unwrap() - (2.5 + 2.353_363 * 0.645_497)).abs() < 1e-4);
    }

    #[test]
    fn a_ratio_of_means_refuses_a_non_positive_mean() {
        assert!(ratio_of_means_ci(&[1.0, -3.0], &[1.0, 2.0], 0.95).is_none());
        let r = ratio_of_means_ci(&[12.0, 12.0], &[10.0, 10.0], 0.95).unwrap();
        assert!((r.mean - 1.2f64.ln()).abs() < 1e-12 && r.low == r.mean);
    }
}
