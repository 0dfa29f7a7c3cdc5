//! Ranking and selection: what choosing a leader is expected to cost, and whether a continued
//! comparison could still reach significance.

use statrs::distribution::{Continuous, ContinuousCDF, Normal, StudentsT};

use crate::describe::{mean, stdev};

/// The expected loss of preferring a leader to a rival, from `d`, the rival's advantage over
/// the leader in paired rounds (log ratios in the goal's direction: positive when the rival
/// did better): E[max(0, μ)] where μ, the mean advantage, has the Student-t posterior of a
/// flat prior, m + s·T with ν = n − 1 (m the mean, s the standard error). With z = m / s this
/// is s·(z·F(z) + (ν + z²)/(ν − 1)·f(z)), F and f the t distribution's CDF and density
/// (Chick & Inoue's expected opportunity cost, t form). `None` with fewer than 3 differences
/// (ν must exceed 1 for the mean to exist) or a non-finite one.
pub fn expected_loss(d: &[f64]) -> Option<f64> {
    if d.len() < 3 || d.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let n = d.len() as f64;
    let m = mean(d);
    let s = stdev(d) / n.sqrt();
    if s <= 0.0 {
        return Some(m.max(0.0));
    }
    let nu = n - 1.0;
    let t = StudentsT::new(0.0, 1.0, nu).ok()?;
    let z = m / s;
    Some(s * (z * t.cdf(z) + (nu + z * z) / (nu - 1.0) * t.pdf(z)))
}

/// The conditional power of a one-sided test at level `alpha` that the differences `d` have a
/// positive mean, once `total` of them will have been seen and the rest follow the observed
/// mean m and spread s (stochastic curtailment): Φ((m·√N/s − z(1 − α)) / √((N − n)/N)).
/// `None` with fewer than 2 differences or no more to come.
pub fn conditional_power(d: &[f64], total: usize, alpha: f64) -> Option<f64> {
    let n = d.len();
    if n < 2 || total <= n {
        return None;
    }
    let m = mean(d);
    let s = stdev(d);
    if s <= 0.0 || !s.is_finite() {
        return Some(if m > 0.0 { 1.0 } else { 0.0 });
    }
    let norm = Normal::standard();
    let z = norm.inverse_cdf(1.0 - alpha);
    let nn = total as f64;
    let rest = ((nn - n as f64) / nn).sqrt();
    Some(norm.cdf((m * nn.sqrt() / s - z) / rest))
}
