//! The rank tests of a study: Friedman across configurations with Conover's multiple
//! comparisons (as in F-Race), Wilcoxon signed-rank between two, the Hodges–Lehmann interval
//! and the equivalence check built on it. Distributions come from `statrs`; exact small-sample
//! Wilcoxon p-values are computed by enumerating the signed-rank distribution. The statistics
//! the optimizer shares (summaries, t intervals, expected loss, MSER-5, the bootstrap, the
//! generator) live in `perfpilot-stats` and are re-exported here.

pub use perfpilot_stats::{
    Mser, RatioCi, Rng, chance_best, conditional_power, cv, expected_loss, mean, mser5,
    paired_ratio_ci, stdev, upper_bound,
};

use statrs::distribution::{ChiSquared, ContinuousCDF, FisherSnedecor, Normal, StudentsT};

/// Ranks `xs` from 1 (smallest) to n, ties sharing their average rank.
pub fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..xs.len()).collect();
    idx.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut out = vec![0.0; xs.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && xs[idx[j + 1]] == xs[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            out[k] = avg;
        }
        i = j + 1;
    }
    out
}

/// The result of a Friedman test.
#[derive(Debug, Clone, PartialEq)]
pub struct Friedman {
    /// The tie-corrected statistic T1, χ² with k − 1 degrees of freedom under H0.
    pub statistic: f64,
    /// T1's p-value from the χ² approximation.
    pub p_value: f64,
    /// Conover's T2 = (b − 1)·T1 / (b·(k − 1) − T1), F with (k − 1, (b − 1)(k − 1)) degrees
    /// of freedom under H0: better than the χ² form with few blocks (Conover 1999, §5.8).
    /// Infinite when every block ranks the treatments alike.
    pub f_statistic: f64,
    /// T2's p-value.
    pub f_p_value: f64,
    /// The rank sum of each treatment over the blocks (higher = larger values).
    pub rank_sums: Vec<f64>,
    /// The mean rank of each treatment (higher = larger values).
    pub mean_ranks: Vec<f64>,
    /// Blocks.
    pub blocks: usize,
    /// Σ of the squared within-block ranks (Conover's A1), for the multiple comparisons.
    pub sum_sq_ranks: f64,
}

impl Friedman {
    /// Degrees of freedom (b − 1)(k − 1) and the standard error of a rank-sum difference in
    /// Conover's multiple comparison: √(2·(b·A1 − Σ R_j²) / ((b − 1)(k − 1))).
    fn conover(&self) -> (f64, f64) {
        let b = self.blocks as f64;
        let k = self.rank_sums.len() as f64;
        let df = (b - 1.0) * (k - 1.0);
        let spread =
            (b * self.sum_sq_ranks - self.rank_sums.iter().map(|r| r * r).sum::<f64>()).max(0.0);
        (df, (2.0 * spread / df).sqrt())
    }

    /// Conover's multiple comparison after a Friedman test: the least difference of rank sums
    /// at which two treatments differ at two-sided level `alpha`, t(1 − α/2; df) · se.
    /// Zero when every block ranks the treatments alike (any difference is then significant).
    pub fn least_significant_difference(&self, alpha: f64) -> f64 {
        let (df, se) = self.conover();
        perfpilot_stats::t_quantile(df, 1.0 - alpha / 2.0) * se
    }

    /// The two-sided p-value of Conover's comparison of treatments `i` and `j` (the level at
    /// which their rank-sum difference would just be the least significant one).
    pub fn pair_p_value(&self, i: usize, j: usize) -> f64 {
        let (df, se) = self.conover();
        let diff = (self.rank_sums[i] - self.rank_sums[j]).abs();
        if se <= 0.0 {
            return if diff > 0.0 { 0.0 } else { 1.0 };
        }
        StudentsT::new(0.0, 1.0, df)
            .map(|d| (2.0 * d.sf(diff / se)).min(1.0))
            .unwrap_or(1.0)
    }
}

/// Friedman's test on `blocks` (rows: blocks such as rounds; columns: treatments such as
/// configurations, all rows the same length ≥ 2). `None` with fewer than 2 blocks or 2
/// treatments, or when every block is all ties.
pub fn friedman(blocks: &[Vec<f64>]) -> Option<Friedman> {
    let n = blocks.len();
    let k = blocks.first()?.len();
    if n < 2 || k < 2 || blocks.iter().any(|b| b.len() != k) {
        return None;
    }
    let mut sums = vec![0.0; k];
    let mut tie_term = 0.0;
    let mut sum_sq_ranks = 0.0;
    for b in blocks {
        let r = ranks(b);
        for (s, v) in sums.iter_mut().zip(&r) {
            *s += v;
            sum_sq_ranks += v * v;
        }
        // Σ (t³ − t) over groups of ties in this block.
        let mut sorted = b.clone();
        sorted.sort_by(f64::total_cmp);
        let mut i = 0;
        while i < sorted.len() {
            let mut j = i;
            while j + 1 < sorted.len() && sorted[j + 1] == sorted[i] {
                j += 1;
            }
            let t = (j - i + 1) as f64;
            tie_term += t * t * t - t;
            i = j + 1;
        }
    }
    let (nf, kf) = (n as f64, k as f64);
    let q = 12.0 / (nf * kf * (kf + 1.0)) * sums.iter().map(|r| r * r).sum::<f64>()
        - 3.0 * nf * (kf + 1.0);
    let correction = 1.0 - tie_term / (nf * kf * (kf * kf - 1.0));
    if correction <= 0.0 {
        return None;
    }
    let statistic = q / correction;
    let p_value = ChiSquared::new(kf - 1.0)
        .map(|d| d.sf(statistic.max(0.0)))
        .unwrap_or(1.0);
    let denominator = nf * (kf - 1.0) - statistic;
    let (f_statistic, f_p_value) = if denominator <= 1e-12 * nf * kf {
        (f64::INFINITY, 0.0)
    } else {
        let t2 = (nf - 1.0) * statistic.max(0.0) / denominator;
        let p = FisherSnedecor::new(kf - 1.0, (nf - 1.0) * (kf - 1.0))
            .map(|d| d.sf(t2))
            .unwrap_or(1.0);
        (t2, p)
    };
    Some(Friedman {
        statistic,
        p_value,
        f_statistic,
        f_p_value,
        mean_ranks: sums.iter().map(|s| s / nf).collect(),
        rank_sums: sums,
        blocks: n,
        sum_sq_ranks,
    })
}

/// Which alternative a Wilcoxon test examines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alternative {
    /// x − y tends to be positive.
    Greater,
    /// x − y tends to be negative.
    Less,
    /// x − y tends to either side.
    TwoSided,
}

/// The result of a Wilcoxon signed-rank test.
#[derive(Debug, Clone, PartialEq)]
pub struct Wilcoxon {
    /// W+: the sum of the ranks of the positive differences.
    pub w_plus: f64,
    /// Pairs with a non-zero difference.
    pub n: usize,
    /// The p-value of the alternative asked for.
    pub p_value: f64,
    /// Whether the p-value is exact (enumerated) or from the normal approximation.
    pub exact: bool,
}

/// Wilcoxon's signed-rank test on the pairs `(x[i], y[i])`: zero differences are dropped
/// (Wilcoxon's method), tied absolute differences share their average rank. Exact p-values by
/// enumeration for n ≤ 30 (ties included), else the normal approximation with tie and
/// continuity corrections. `None` when no pair differs.
pub fn wilcoxon(x: &[f64], y: &[f64], alt: Alternative) -> Option<Wilcoxon> {
    let d: Vec<f64> = x
        .iter()
        .zip(y)
        .map(|(a, b)| a - b)
        .filter(|v| *v != 0.0 && v.is_finite())
        .collect();
    let n = d.len();
    if n == 0 {
        return None;
    }
    let abs: Vec<f64> = d.iter().map(|v| v.abs()).collect();
    let r = ranks(&abs);
    let w_plus: f64 = d
        .iter()
        .zip(&r)
        .filter(|(v, _)| **v > 0.0)
        .map(|(_, r)| r)
        .sum();
    let total = (n * (n + 1)) as f64 / 2.0;
    if n <= 30 {
        // Ranks are multiples of 0.5: count sign assignments by doubled rank sums.
        let twice: Vec<usize> = r.iter().map(|v| (v * 2.0).round() as usize).collect();
        let counts = signed_rank_counts(&twice);
        let max = counts.len() - 1;
        let all: f64 = counts.iter().sum();
        let w2 = (w_plus * 2.0).round() as usize;
        let ge: f64 = counts[w2.min(max)..].iter().sum::<f64>() / all;
        let le: f64 = counts[..=w2.min(max)].iter().sum::<f64>() / all;
        let p = match alt {
            Alternative::Greater => ge,
            Alternative::Less => le,
            Alternative::TwoSided => (2.0 * ge.min(le)).min(1.0),
        };
        return Some(Wilcoxon {
            w_plus,
            n,
            p_value: p,
            exact: true,
        });
    }
    let nf = n as f64;
    let mean = total / 2.0;
    let mut tie = 0.0;
    let mut sorted = abs.clone();
    sorted.sort_by(f64::total_cmp);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && sorted[j + 1] == sorted[i] {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        tie += t * t * t - t;
        i = j + 1;
    }
    let var = nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0 - tie / 48.0;
    let sd = var.sqrt();
    let norm = Normal::standard();
    let upper = |w: f64| 1.0 - norm.cdf((w - mean - 0.5) / sd);
    let lower = |w: f64| norm.cdf((w - mean + 0.5) / sd);
    let p = match alt {
        Alternative::Greater => upper(w_plus),
        Alternative::Less => lower(w_plus),
        Alternative::TwoSided => (2.0 * upper(w_plus).min(lower(w_plus))).min(1.0),
    };
    Some(Wilcoxon {
        w_plus,
        n,
        p_value: p,
        exact: false,
    })
}

/// The null distribution of the signed-rank sum: `counts[s]` is the number of the 2ⁿ sign
/// assignments whose positive ranks sum to `s`, for the given (doubled, so that tied half
/// ranks stay integers) ranks.
fn signed_rank_counts(twice_ranks: &[usize]) -> Vec<f64> {
    let max: usize = twice_ranks.iter().sum();
    let mut counts = vec![0f64; max + 1];
    counts[0] = 1.0;
    for &t in twice_ranks {
        for s in (t..=max).rev() {
            counts[s] += counts[s - t];
        }
    }
    counts
}

/// A location estimate with its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LocationCi {
    /// The Hodges–Lehmann estimate.
    pub estimate: f64,
    /// The interval's low end.
    pub low: f64,
    /// The interval's high end.
    pub high: f64,
    /// The interval's exact coverage (the signed-rank distribution is discrete, so it is the
    /// smallest achievable level at or above the one asked for).
    pub level: f64,
}

/// The Hodges–Lehmann estimate of the centre of the differences `d` (the median of their
/// Walsh averages (dᵢ + dⱼ)/2, i ≤ j) with the distribution-free confidence interval that
/// inverts Wilcoxon's signed-rank test (Hollander & Wolfe, §3.3): the (c+1)-th smallest and
/// largest Walsh averages, c the largest count with P(W⁺ ≤ c) ≤ (1 − level)/2. Exact for
/// n ≤ 30, normal approximation beyond. Unlike a Student-t interval it is not widened by one
/// disturbed pair. `None` with fewer pairs than the level can be reached with (2·2⁻ⁿ must not
/// exceed 1 − level: n ≥ 5 for 90 %) or a non-finite value.
pub fn hodges_lehmann_ci(d: &[f64], level: f64) -> Option<LocationCi> {
    let n = d.len();
    if n == 0 || d.iter().any(|v| !v.is_finite()) || !(0.0..1.0).contains(&level) {
        return None;
    }
    let mut walsh = Vec::with_capacity(n * (n + 1) / 2);
    for i in 0..n {
        for j in i..n {
            walsh.push((d[i] + d[j]) / 2.0);
        }
    }
    walsh.sort_by(f64::total_cmp);
    let m = walsh.len();
    let tail = (1.0 - level) / 2.0;
    let (c, p_c) = if n <= 30 {
        // Ranks 1..n, doubled: W⁺'s exact distribution, in steps of 2.
        let twice: Vec<usize> = (1..=n).map(|r| 2 * r).collect();
        let counts = signed_rank_counts(&twice);
        let all: f64 = counts.iter().sum();
        let mut cum = 0.0;
        let mut found = None;
        for w in 0..=m {
            cum += counts[2 * w] / all;
            if cum > tail {
                break;
            }
            found = Some((w, cum));
        }
        found?
    } else {
        let nf = n as f64;
        let z = Normal::standard().inverse_cdf(1.0 - tail);
        let c = (nf * (nf + 1.0) / 4.0 - z * (nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0).sqrt())
            .floor();
        if c < 0.0 {
            return None;
        }
        (c as usize, tail)
    };
    let estimate = if m % 2 == 1 {
        walsh[m / 2]
    } else {
        (walsh[m / 2 - 1] + walsh[m / 2]) / 2.0
    };
    Some(LocationCi {
        estimate,
        low: walsh[c],
        high: walsh[m - 1 - c],
        level: 1.0 - 2.0 * p_c,
    })
}

/// Whether the paired ratio `x / y` is practically equivalent to 1: the Hodges–Lehmann
/// interval ([`hodges_lehmann_ci`]) of the paired log ratios at `level` lies inside
/// [1 / (1 + δ), 1 + δ] (two one-sided tests at (1 − level) / 2 each). Distribution-free, so
/// one disturbed pair (a trial that a burst of host noise slowed by a quarter) does not widen
/// it the way it widens a Student-t interval; the price is that it needs 5 pairs at 90 %.
/// The ratio is the estimate's exponential. `None` with too few pairs for `level`, or
/// non-positive values.
pub fn equivalent(x: &[f64], y: &[f64], delta: f64, level: f64) -> Option<(bool, RatioCi)> {
    let d: Vec<f64> = x.iter().zip(y).map(|(a, b)| (a / b).ln()).collect();
    let ci = hodges_lehmann_ci(&d, level)?;
    let zone = (1.0 + delta.max(0.0)).ln();
    let ratio = RatioCi {
        ratio: ci.estimate.exp(),
        low: ci.low.exp(),
        high: ci.high.exp(),
        pairs: d.len(),
    };
    Some((ci.low > -zone && ci.high < zone, ratio))
}
