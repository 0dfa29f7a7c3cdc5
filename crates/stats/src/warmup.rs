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
    let batches: Vec<f64> = series.chunks_exact(5).map(mean).collect();
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
        truncate: best.1 * 5,
        steady: best.1 < half,
    })
}
