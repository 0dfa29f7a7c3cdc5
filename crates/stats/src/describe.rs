//! Descriptive statistics.

use serde::{Deserialize, Serialize};

/// Mean; `NaN` for no values.
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Sample standard deviation (n − 1); `NaN` for fewer than two values, where it is undefined.
pub fn stdev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return f64::NAN;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// Coefficient of variation (stdev / |mean|); `NaN` for fewer than two values or a mean that
/// is zero or not finite.
pub fn cv(xs: &[f64]) -> f64 {
    let m = mean(xs);
    if m == 0.0 || !m.is_finite() {
        return f64::NAN;
    }
    stdev(xs) / m.abs()
}

/// The median of `xs` (the mean of the middle two for an even count); NaN when empty. NaNs
/// in `xs` sort last.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Count, mean and sample standard deviation of a set of values (as [`mean`] and [`stdev`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation.
    pub sd: f64,
}

impl Summary {
    /// The summary of `xs`.
    pub fn of(xs: &[f64]) -> Summary {
        Summary {
            n: xs.len(),
            mean: mean(xs),
            sd: stdev(xs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewer_than_two_values_have_no_spread() {
        assert!(mean(&[]).is_nan());
        assert!(stdev(&[3.0]).is_nan());
        assert!(cv(&[3.0]).is_nan());
        let s = Summary::of(&[3.0]);
        assert_eq!((s.n, s.mean), (1, 3.0));
        assert!(s.sd.is_nan());
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn the_sample_deviation_divides_by_n_minus_one() {
        let xs = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean(&xs), 5.0);
        assert!((stdev(&xs) - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert!((cv(&xs) - (32.0f64 / 7.0).sqrt() / 5.0).abs() < 1e-12);
        assert!(cv(&[-1.0, 1.0]).is_nan());
    }
}
