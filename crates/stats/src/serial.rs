//! Windows measured one after another are not independent samples: a server's throughput per
//! CPU-second wanders in spells longer than a window (PostgreSQL's, docs/optimizer.md), so the
//! windows before a change agree with each other more than with the windows after it, and an
//! interval that treats them as independent is too narrow. The remedy here is the classical one
//! for a stationary series: estimate the lag-1 autocorrelation and widen each side's variance of
//! the mean by what an AR(1) series of that correlation adds, with fewer effective degrees of
//! freedom.

use serde::{Deserialize, Serialize};

use crate::describe::mean;
use crate::interval::{MeanCi, log_ratio_ci};

/// The largest lag-1 autocorrelation allowed for: beyond it an AR(1) model of a few windows
/// says little, and the interval is already many times wider.
pub const RHO_MAX: f64 = 0.9;

/// The pooled lag-1 autocorrelation of `series`, each about its own mean (a change between
/// them moves the mean, not the correlation). `None` without a pair of neighbours or with no
/// spread.
pub fn lag1(series: &[&[f64]]) -> Option<f64> {
    let (mut num, mut den, mut pairs) = (0.0, 0.0, 0usize);
    for s in series {
        if s.len() < 2 {
            continue;
        }
        let m = mean(s);
        num += s.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum::<f64>();
        den += s.iter().map(|x| (x - m).powi(2)).sum::<f64>();
        pairs += s.len() - 1;
    }
    (pairs > 0 && den > 0.0 && num.is_finite()).then(|| num / den)
}

/// The lag-1 autocorrelation to allow for in series of about `n` values whose pooled estimate is
/// `r`: the estimate of a short series with its mean removed falls short by about (1 + 3ρ)/n,
/// which is added back, and the result is kept within [0, [`RHO_MAX`]]. A negative correlation
/// is not used to narrow an interval.
pub fn corrected_lag1(r: f64, n: f64) -> f64 {
    if !r.is_finite() || n < 2.0 {
        return 0.0;
    }
    (r + (1.0 + 3.0 * r) / n).clamp(0.0, RHO_MAX)
}

/// How many times the variance of the mean of `n` consecutive values of an AR(1) series with
/// lag-1 correlation `rho` exceeds what s²/n of the same values expects it to be: the mean's
/// variance grows by 1 + 2Σ(1 − k/n)ρᵏ, and s² itself falls short by 1 − 2Σ(1 − k/n)ρᵏ/(n − 1).
/// 1 for `rho` 0 or fewer than two values.
pub fn ar1_inflation(n: usize, rho: f64) -> f64 {
    if n < 2 || rho <= 0.0 {
        return 1.0;
    }
    let nf = n as f64;
    let s: f64 = (1..n)
        .map(|k| (1.0 - k as f64 / nf) * rho.powi(k as i32))
        .sum();
    let short = 1.0 - 2.0 * s / (nf - 1.0);
    if short <= 0.0 {
        return f64::INFINITY;
    }
    (1.0 + 2.0 * s) / short
}

/// The lag-1 autocorrelation an interval on `series` allows for: their pooled estimate
/// ([`lag1`]), bias-corrected for their mean length ([`corrected_lag1`]); 0 without one.
pub fn allowed_lag1(series: &[&[f64]]) -> f64 {
    let n = series.iter().map(|s| s.len()).sum::<usize>() as f64 / series.len().max(1) as f64;
    corrected_lag1(lag1(series).unwrap_or(0.0), n)
}

/// The log of `mean(numer) / mean(denom)` of two runs of consecutive windows, with its interval
/// at `level` allowing for their lag-1 autocorrelation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SerialCi {
    /// The log ratio and its interval.
    pub ci: MeanCi,
    /// The autocorrelation allowed for (0: the windows behaved as independent).
    pub rho: f64,
}

/// As [`crate::ratio_of_means_ci`], for windows measured in sequence: each side's variance of
/// the mean is widened by [`ar1_inflation`] at the pooled, bias-corrected lag-1
/// autocorrelation of both sides ([`allowed_lag1`]), and its degrees of freedom shrink to its
/// effective count. `None` when a side has fewer than two values or a non-positive mean.
pub fn serial_ratio_of_means_ci(numer: &[f64], denom: &[f64], level: f64) -> Option<SerialCi> {
    let rho = allowed_lag1(&[numer, denom]);
    let inflation = [
        ar1_inflation(numer.len(), rho),
        ar1_inflation(denom.len(), rho),
    ];
    let ci = log_ratio_ci(numer, denom, level, inflation)?;
    Some(SerialCi { ci, rho })
}

/// The interval at `level` of the mean of a series of consecutive values (a switchback trial's
/// pair differences), its variance widened by [`ar1_inflation`] at the series' bias-corrected
/// lag-1 autocorrelation and its degrees of freedom counted on the effective number of values.
/// Newey–West's kernel estimate was the other candidate; on a dozen or two values it missed
/// far more often than its level (the test below measures both). `None` with fewer than two
/// values or a non-finite one.
pub fn serial_mean_ci(xs: &[f64], level: f64) -> Option<SerialCi> {
    let n = xs.len();
    if n < 2 || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let rho = allowed_lag1(&[xs]);
    let f = ar1_inflation(n, rho);
    let f = if f.is_finite() {
        f.max(1.0)
    } else {
        f64::INFINITY
    };
    let se = (f * crate::stdev(xs).powi(2) / n as f64).sqrt();
    let df = (n as f64 / f - 1.0).max(1.0);
    let m = mean(xs);
    let half = crate::t_quantile(df, 0.5 + level / 2.0) * se;
    Some(SerialCi {
        ci: MeanCi {
            mean: m,
            low: m - half,
            high: m + half,
        },
        rho,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rng;

    #[test]
    fn independent_values_need_no_widening_and_correlated_ones_need_more_as_they_are_fewer() {
        assert_eq!(ar1_inflation(13, 0.0), 1.0);
        assert_eq!(ar1_inflation(1, 0.5), 1.0);
        // Long series tend to (1 + ρ)/(1 − ρ) = 3 at ρ = 0.5.
        assert!((ar1_inflation(10_000, 0.5) - 3.0).abs() < 0.01);
        // A short series' s² falls short too, so the factor is not much smaller.
        let short = ar1_inflation(6, 0.5);
        assert!(short > 2.0 && short < 3.5, "{short}");
    }

    #[test]
    fn the_lag1_estimate_pools_series_about_their_own_means() {
        // Two alternating series: perfectly anti-correlated, whatever their levels.
        let a = [1.0, -1.0, 1.0, -1.0];
        let b = [11.0, 9.0, 11.0, 9.0];
        let r = lag1(&[&a, &b]).unwrap();
        assert!((r + 0.75).abs() < 1e-12, "{r}");
        // Negative correlation is not used to narrow anything.
        assert_eq!(corrected_lag1(r, 4.0), 0.0);
        assert_eq!(lag1(&[&[1.0, 1.0]]), None);
        assert!(corrected_lag1(0.95, 100.0) <= RHO_MAX);
    }

    /// One continuous AR(1) series of log-normal windows at `cv`, cut into before and after.
    fn before_after(rng: &mut Rng, n: usize, rho: f64, cv: f64) -> (Vec<f64>, Vec<f64>) {
        let mut e = rng.normal();
        let mut xs = Vec::with_capacity(2 * n);
        for _ in 0..2 * n {
            xs.push((cv * e).exp());
            e = rho * e + (1.0 - rho * rho).sqrt() * rng.normal();
        }
        let after = xs.split_off(n);
        (xs, after)
    }

    #[test]
    fn on_correlated_windows_with_no_change_the_interval_excludes_one_about_as_often_as_its_level_says()
     {
        // 2,000 seeded no-change trials of 13 windows a side at cv 3.6 %. Taken as independent,
        // windows correlated at 0.6 give a "significant" change in about 30 % of trials; allowed
        // for, in about 7 %; with no correlation the allowance costs little.
        let mut rng = Rng::new(19);
        let trials = 2000;
        let mut rate = |rho: f64| {
            let (mut plain, mut serial) = (0, 0);
            for _ in 0..trials {
                let (b, a) = before_after(&mut rng, 13, rho, 0.036);
                let p = crate::ratio_of_means_ci(&a, &b, 0.95).unwrap();
                plain += usize::from(p.low > 0.0 || p.high < 0.0);
                let s = serial_ratio_of_means_ci(&a, &b, 0.95).unwrap().ci;
                serial += usize::from(s.low > 0.0 || s.high < 0.0);
            }
            (plain as f64 / trials as f64, serial as f64 / trials as f64)
        };
        let (plain, serial) = rate(0.6);
        assert!(plain > 0.2, "plain {plain}");
        assert!(serial < 0.09, "serial {serial}");
        let (plain, serial) = rate(0.0);
        assert!(
            plain < 0.07 && serial < 0.06,
            "plain {plain}, serial {serial}"
        );
    }

    #[test]
    fn a_steady_pair_of_runs_is_not_widened() {
        let (a, b) = ([12.0, 12.0, 12.0], [10.0, 10.0, 10.0]);
        let s = serial_ratio_of_means_ci(&a, &b, 0.95).unwrap();
        assert!((s.ci.mean - 1.2f64.ln()).abs() < 1e-12);
        assert_eq!(Some(s.ci), crate::ratio_of_means_ci(&a, &b, 0.95));
        assert!(serial_ratio_of_means_ci(&[1.0], &[1.0, 2.0], 0.95).is_none());
    }

    /// Newey–West's variance of a mean with `lags` Bartlett-weighted lags (for comparison).
    fn newey_west(xs: &[f64], lags: usize) -> f64 {
        let n = xs.len();
        let m = mean(xs);
        let d: Vec<f64> = xs.iter().map(|x| x - m).collect();
        let gamma = |k: usize| d.iter().zip(&d[k..]).map(|(a, b)| a * b).sum::<f64>() / n as f64;
        let lrv = gamma(0)
            + (1..=lags)
                .map(|k| 2.0 * (1.0 - k as f64 / (lags as f64 + 1.0)) * gamma(k))
                .sum::<f64>();
        lrv.max(0.0) / n as f64
    }

    #[test]
    fn on_a_dozen_correlated_values_the_serial_interval_keeps_nearer_its_level_than_newey_west() {
        // 4,000 AR(1) series of 12 values at ρ = 0.3, mean 0: the share of 95 % intervals that
        // miss 0. Newey–West (bandwidth 2, t on 11 degrees of freedom) misses more than one in
        // ten even with no correlation; the AR(1) widening about 7 % at 0.3, under 5 % at 0.
        let mut rng = Rng::new(11);
        let rate = |rng: &mut Rng, rho: f64| {
            let (mut nw, mut serial) = (0, 0);
            for _ in 0..4000 {
                let mut e = rng.normal();
                let xs: Vec<f64> = (0..12)
                    .map(|_| {
                        let v = e;
                        e = rho * e + (1.0 - rho * rho).sqrt() * rng.normal();
                        v
                    })
                    .collect();
                let half = crate::t_quantile(11.0, 0.975) * newey_west(&xs, 2).sqrt();
                nw += usize::from(mean(&xs).abs() > half);
                let s = serial_mean_ci(&xs, 0.95).unwrap().ci;
                serial += usize::from(s.low > 0.0 || s.high < 0.0);
            }
            (nw as f64 / 4000.0, serial as f64 / 4000.0)
        };
        let (nw, serial) = rate(&mut rng, 0.3);
        assert!(nw > 0.1, "Newey-West {nw}");
        assert!(serial < 0.085, "serial {serial}");
        let (nw, serial) = rate(&mut rng, 0.0);
        assert!(
            serial < 0.05 && nw > serial,
            "Newey-West {nw}, serial {serial}"
        );
        assert!(serial_mean_ci(&[1.0], 0.95).is_none());
    }
}
