//! Warm-up detection in a measured series.

use serde::{Deserialize, Serialize};

use crate::describe::mean;

/// The outcome of MSER-5 on a series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Mser {
    /// Observations to drop from the start (a multiple of 5).
    pub truncate: usize,
    /// Whether a steady state was found: the optimum lies in the first half of the series.
    pub steady: bool,
}

/// MSER-5 (White 1997): the series is averaged in batches of 5; the truncation point `d`
/// minimizes `Σ_{i≥d} (Z_i − Z̄_d)² / (m − d)²` over the batch means `Z`, searched over the
/// first half; an optimum at the end of the first half means no steady state. `None` with
/// fewer than 4 batches (20 observations).
pub fn mser5(series: &[f64]) -> Option<Mser> {
    mser(series, 5)
}

/// MSER with batches of `batch` observations (MSER-5 is `batch = 5`; a short series, such as
/// the optimizer's few evaluation windows, uses `batch = 1`). `truncate` is a multiple of
/// `batch`. `None` with fewer than 4 batches, or `batch = 0`.
pub fn mser(series: &[f64], batch: usize) -> Option<Mser> {
    if batch == 0 {
        return None;
    }
    let batches: Vec<f64> = series.chunks_exact(batch).map(mean).collect();
    let m = batches.len();
    if m < 4 {
        return None;
    }
    let mut best = (f64::INFINITY, 0usize);
    // White's rule: search the first half; an optimum at its end means the series never
    // settled.
    let half = m / 2;
    for d in 0..=half {
        let tail = &batches[d..];
        let mu = mean(tail);
        let ss: f64 = tail.iter().map(|z| (z - mu).powi(2)).sum();
        let k = (m - d) as f64;
        let stat = ss / (k * k);
        // Strictly smaller (beyond rounding) so a flat tail keeps the earliest point.
        if !best.0.is_finite() || stat < best.0 * (1.0 - 1e-12) {
            best = (stat, d);
        }
    }
    Some(Mser {
        truncate: best.1 * batch,
        steady: best.1 < half,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mser_of_single_windows_drops_a_start_up_transient_and_keeps_a_flat_series() {
        // Two windows of a server loading its data set, then its steady rate.
        let m = mser(&[3.0, 9.0, 100.0, 102.0, 99.0, 101.0], 1).unwrap();
        assert_eq!(m.truncate, 2);
        assert!(m.steady);
        let m = mser(&[100.0, 102.0, 99.0, 101.0, 100.0, 98.0], 1).unwrap();
        assert_eq!(m.truncate, 0);
        // A climb that goes on through the series never settles.
        let m = mser(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], 1).unwrap();
        assert!(!m.steady, "{m:?}");
        assert!(mser(&[1.0, 2.0, 3.0], 1).is_none());
        assert!(mser(&[1.0; 8], 0).is_none());
    }
}
