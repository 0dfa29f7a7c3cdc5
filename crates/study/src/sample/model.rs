//! A model-based proposal for the iterated search: a Gaussian process (Rasmussen & Williams
//! 2006, "Gaussian Processes for Machine Learning", ch. 2 and 5) fitted to every configuration
//! raced so far — its effect over every race round (the log of the objective, rounds' drift
//! taken out) with the noise of a mean of its trials — scores candidates by expected
//! improvement over the best predicted raced configuration (Jones, Schonlau & Welch 1998,
//! "Efficient global optimization of expensive black-box functions", J. Global Optim. 13), and
//! picks them one at a time, each pick taken as observed at its predicted mean (the "kriging
//! believer") so that the next one goes where the model is still unsure rather than next to
//! the first. The model pools every trial of the neighbours of a configuration never raced,
//! which is what draws around single elites cannot: it proposes a peak that lies between the
//! elites, or beside them, from the slope of the surface around them.
//!
//! Inputs are the parameters as coordinates in [0, 1] — a number's position in its range (of
//! its logarithm on a log scale), an ordinal's rank, a categorical level one-hot at 1/√2 (two
//! levels lie 1 apart), an inactive parameter −0.5 — under a squared-exponential kernel with a
//! length scale per parameter (automatic relevance determination, Rasmussen & Williams §5.1):
//! a common length scale and the signal variance are chosen by the marginal likelihood over a
//! small grid, then each parameter's own scale in turn, so that a parameter that hardly
//! matters stops blurring the others and one that matters sharply gets a short scale (the
//! known-answer bed's figures with and without: `docs/study-file.md`). The linear algebra
//! (Cholesky) is nalgebra's.

use std::f64::consts::{FRAC_1_SQRT_2, PI};

use nalgebra::{Cholesky, DMatrix, DVector};
use statrs::distribution::{Continuous, ContinuousCDF, Normal};

use crate::spec::{Config, Domain, Factor, Level};

/// Length scales tried (in the unit coordinates), with the signal variance's multiples.
const LENGTH_SCALES: [f64; 5] = [0.12, 0.2, 0.3, 0.45, 0.7];
const SIGNAL_SCALES: [f64; 3] = [0.5, 1.0, 2.0];

/// Length scales tried for one parameter at a time once the common one is chosen (automatic
/// relevance determination): the common ones, and longer ones for a parameter that hardly
/// matters.
const ARD_SCALES: [f64; 8] = [0.12, 0.2, 0.3, 0.45, 0.7, 1.0, 1.6, 3.0];

/// Sweeps over the parameters when choosing their length scales one at a time.
const ARD_SWEEPS: usize = 2;

/// A configuration as a point of the model's input space.
pub(crate) fn encode(factors: &[Factor], c: &Config) -> Vec<f64> {
    let mut x = Vec::new();
    for f in factors {
        let v = c.get(&f.name);
        match &f.domain {
            Domain::Categorical(levels) => {
                let at = v.and_then(|v| levels.iter().position(|l| l == v));
                x.extend((0..levels.len()).map(|i| match at {
                    Some(a) if a == i => FRAC_1_SQRT_2,
                    _ => 0.0,
                }));
            }
            d => x.push(v.map_or(-0.5, |v| position(d, v))),
        }
    }
    x
}

/// The parameter each coordinate of [`encode`]'s points belongs to (a categorical parameter's
/// one-hot coordinates share one), by the parameter's index: what the length scales are per.
pub(crate) fn groups(factors: &[Factor]) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, f) in factors.iter().enumerate() {
        let width = match &f.domain {
            Domain::Categorical(levels) => levels.len(),
            _ => 1,
        };
        out.extend(std::iter::repeat_n(i, width));
    }
    out
}

/// Where level `v` lies in an ordered domain `d`, from 0 to 1.
fn position(d: &Domain, v: &Level) -> f64 {
    let scaled = |x: f64, lo: f64, hi: f64, log: bool| {
        let (x, lo, hi) = if log {
            (x.ln(), lo.ln(), hi.ln())
        } else {
            (x, lo, hi)
        };
        if hi > lo { (x - lo) / (hi - lo) } else { 0.5 }
    };
    let number = match v {
        Level::Int(i) => Some(*i as f64),
        Level::Float(f) => Some(*f),
        _ => None,
    };
    match (d, number) {
        (Domain::Ordinal(levels), _) => match levels.iter().position(|l| l == v) {
            Some(i) if levels.len() > 1 => i as f64 / (levels.len() - 1) as f64,
            _ => 0.5,
        },
        (Domain::Integer { min, max, log }, Some(x)) => scaled(x, *min as f64, *max as f64, *log),
        (Domain::Real { min, max, log, .. }, Some(x)) => scaled(x, *min, *max, *log),
        _ => 0.5,
    }
}

/// An observation: a configuration's point, its estimated effect and that estimate's
/// variance.
pub(crate) struct Observed {
    pub x: Vec<f64>,
    pub y: f64,
    pub var: f64,
}

/// A Gaussian process fitted to observations.
pub(crate) struct Model {
    xs: Vec<Vec<f64>>,
    /// The observations' mean, taken out before fitting.
    mean: f64,
    /// The length scale of each coordinate.
    lengths: Vec<f64>,
    signal: f64,
    /// The lower Cholesky factor of K + noise.
    chol: DMatrix<f64>,
    /// (K + noise)⁻¹ (y − mean).
    alpha: Vec<f64>,
}

impl Model {
    /// The model of `obs` whose length scales and signal variance give the highest marginal
    /// likelihood: [`Model::fit_common`]'s, then each parameter's own length scale (`groups`:
    /// each coordinate's parameter) chosen in turn, holding the others, for [`ARD_SWEEPS`]
    /// sweeps; `None` with fewer than three observations.
    pub(crate) fn fit(obs: &[Observed], groups: &[usize]) -> Option<Model> {
        let mut best = Model::fit_common(obs)?;
        if groups.len() != best.1.lengths.len() {
            return Some(best.1);
        }
        let parameters = groups.iter().max().map_or(0, |g| g + 1);
        for _ in 0..ARD_SWEEPS {
            for g in 0..parameters {
                let (base, signal) = (best.1.lengths.clone(), best.1.signal);
                for &l in &ARD_SCALES {
                    let mut lengths = base.clone();
                    for (c, _) in groups.iter().enumerate().filter(|(_, x)| **x == g) {
                        lengths[c] = l;
                    }
                    if lengths != base {
                        best.1.consider(obs, lengths, signal, &mut best.0);
                    }
                }
            }
            let (lengths, signal) = (best.1.lengths.clone(), best.1.signal);
            for s in [0.5, 0.7, 1.4, 2.0] {
                best.1
                    .consider(obs, lengths.clone(), s * signal, &mut best.0);
            }
        }
        Some(best.1)
    }

    /// The model of `obs` with one length scale for every coordinate, it and the signal
    /// variance chosen over a grid by the marginal likelihood, with that likelihood; `None` with
    /// fewer than three observations.
    fn fit_common(obs: &[Observed]) -> Option<(f64, Model)> {
        if obs.len() < 3 {
            return None;
        }
        let width = obs[0].x.len();
        let mean = obs.iter().map(|o| o.y).sum::<f64>() / obs.len() as f64;
        let spread = obs.iter().map(|o| (o.y - mean).powi(2)).sum::<f64>() / obs.len() as f64;
        let spread = spread.max(1e-8);
        let mut best: Option<(f64, Model)> = None;
        for &length in &LENGTH_SCALES {
            for &s in &SIGNAL_SCALES {
                if let Some((m, ll)) = Model::with(obs, mean, vec![length; width], s * spread)
                    && best.as_ref().is_none_or(|(b, _)| ll > *b)
                {
                    best = Some((ll, m));
                }
            }
        }
        best
    }

    /// Replaces this model (of log marginal likelihood `ll`) by the one of `obs` with `lengths`
    /// and `signal` when that one's likelihood is higher.
    fn consider(&mut self, obs: &[Observed], lengths: Vec<f64>, signal: f64, ll: &mut f64) {
        if let Some((m, l)) = Model::with(obs, self.mean, lengths, signal)
            && l > *ll
        {
            *self = m;
            *ll = l;
        }
    }

    /// The model with these hyperparameters and its log marginal likelihood.
    fn with(obs: &[Observed], mean: f64, lengths: Vec<f64>, signal: f64) -> Option<(Model, f64)> {
        let n = obs.len();
        let xs: Vec<Vec<f64>> = obs.iter().map(|o| o.x.clone()).collect();
        let mut k = vec![vec![0.0; n]; n];
        for i in 0..n {
            for j in 0..=i {
                let v = kernel(&xs[i], &xs[j], &lengths, signal);
                k[i][j] = v;
                k[j][i] = v;
            }
            k[i][i] += obs[i].var.max(1e-10);
        }
        let factor = Cholesky::new(DMatrix::from_fn(n, n, |i, j| k[i][j]))?;
        let y: Vec<f64> = obs.iter().map(|o| o.y - mean).collect();
        let alpha = factor
            .solve(&DVector::from_column_slice(&y))
            .as_slice()
            .to_vec();
        let chol = factor.unpack();
        let fit: f64 = y.iter().zip(&alpha).map(|(a, b)| a * b).sum();
        let logdet: f64 = (0..n).map(|i| chol[(i, i)].ln()).sum();
        let ll = -0.5 * fit - logdet - 0.5 * n as f64 * (2.0 * PI).ln();
        let model = Model {
            xs,
            mean,
            lengths,
            signal,
            chol,
            alpha,
        };
        Some((model, ll))
    }

    /// The kernel between `x` and each observation.
    fn cross(&self, x: &[f64]) -> Vec<f64> {
        (self.xs.iter())
            .map(|o| kernel(x, o, &self.lengths, self.signal))
            .collect()
    }

    /// The predicted mean and variance at `x`.
    pub(crate) fn predict(&self, x: &[f64]) -> (f64, f64) {
        let kx = self.cross(x);
        let mu = self.mean + kx.iter().zip(&self.alpha).map(|(a, b)| a * b).sum::<f64>();
        let v = forward(&self.chol, &kx);
        let var = self.signal - v.iter().map(|a| a * a).sum::<f64>();
        (mu, var.max(0.0))
    }

    /// `k` of `candidates` picked one at a time by expected improvement over `incumbent`, each
    /// pick then taken as observed at its predicted mean (its variance, and its neighbours',
    /// shrink); indices into `candidates`, best first.
    pub(crate) fn propose(&self, candidates: &[Vec<f64>], k: usize, incumbent: f64) -> Vec<usize> {
        // Posterior covariance with the picks so far, by rank-one updates: cov_t(x, p) =
        // cov_0(x, p) − Σ_q u_q(x) u_q(p), u_q the scaled covariance with pick q.
        let mut means = Vec::with_capacity(candidates.len());
        let mut var = Vec::with_capacity(candidates.len());
        let mut whitened = Vec::with_capacity(candidates.len());
        for x in candidates {
            let kx = self.cross(x);
            means.push(self.mean + kx.iter().zip(&self.alpha).map(|(a, b)| a * b).sum::<f64>());
            let w = forward(&self.chol, &kx);
            var.push((self.signal - w.iter().map(|a| a * a).sum::<f64>()).max(0.0));
            whitened.push(w);
        }
        let mut us: Vec<Vec<f64>> = Vec::new();
        let mut picked: Vec<usize> = Vec::new();
        for _ in 0..k.min(candidates.len()) {
            let best = (0..candidates.len())
                .filter(|i| !picked.contains(i))
                .map(|i| (i, expected_improvement(means[i], var[i], incumbent)))
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
            let Some((p, _)) = best else {
                break;
            };
            picked.push(p);
            let denom = var[p].max(1e-12).sqrt();
            let u: Vec<f64> = (0..candidates.len())
                .map(|i| {
                    let prior = kernel(&candidates[i], &candidates[p], &self.lengths, self.signal);
                    let explained: f64 = whitened[i]
                        .iter()
                        .zip(&whitened[p])
                        .map(|(a, b)| a * b)
                        .sum();
                    let picks: f64 = us.iter().map(|q| q[i] * q[p]).sum();
                    (prior - explained - picks) / denom
                })
                .collect();
            for (v, ui) in var.iter_mut().zip(&u) {
                *v = (*v - ui * ui).max(0.0);
            }
            us.push(u);
        }
        picked
    }
}

/// Expected improvement over `incumbent` of a normal prediction (mean `mu`, variance `var`).
fn expected_improvement(mu: f64, var: f64, incumbent: f64) -> f64 {
    let sd = var.sqrt();
    if sd < 1e-12 {
        return (mu - incumbent).max(0.0);
    }
    let Ok(n) = Normal::new(0.0, 1.0) else {
        return (mu - incumbent).max(0.0);
    };
    let z = (mu - incumbent) / sd;
    (mu - incumbent) * n.cdf(z) + sd * n.pdf(z)
}

/// The squared-exponential kernel with a length scale per coordinate.
fn kernel(a: &[f64], b: &[f64], lengths: &[f64], signal: f64) -> f64 {
    let d2: f64 = (a.iter().zip(b).zip(lengths))
        .map(|((x, y), l)| (x - y) * (x - y) / (l * l))
        .sum();
    signal * (-0.5 * d2).exp()
}

/// Solves L z = b for the lower-triangular Cholesky factor `l` (its diagonal is positive).
fn forward(l: &DMatrix<f64>, b: &[f64]) -> Vec<f64> {
    l.solve_lower_triangular(&DVector::from_column_slice(b))
        .map_or_else(|| vec![0.0; b.len()], |z| z.as_slice().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_solves_the_lower_factor_of_a_small_system() {
        let a = DMatrix::from_row_slice(3, 3, &[4.0, 2.0, 0.4, 2.0, 3.0, 0.5, 0.4, 0.5, 2.0]);
        let l = Cholesky::new(a).unwrap().unpack();
        let b = [1.0, 2.0, 3.0];
        let z = forward(&l, &b);
        let back = &l * DVector::from_column_slice(&z);
        for (got, want) in back.iter().zip(b) {
            assert!((got - want).abs() < 1e-12, "{got} against {want}");
        }
        assert!(Cholesky::new(DMatrix::from_row_slice(2, 2, &[1.0, 2.0, 2.0, 1.0])).is_none());
    }

    #[test]
    fn the_model_proposes_the_peak_between_observed_points() {
        // y = −(x − 0.6)², observed on a grid that skips 0.6; candidates on a fine grid.
        let f = |x: f64| -(x - 0.6) * (x - 0.6);
        let obs: Vec<Observed> = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.8, 0.9, 1.0]
            .iter()
            .map(|&x| Observed {
                x: vec![x],
                y: f(x),
                var: 1e-6,
            })
            .collect();
        let m = Model::fit(&obs, &[0]).unwrap();
        let (mu, _) = m.predict(&[0.6]);
        assert!((mu - f(0.6)).abs() < 0.01, "predicted {mu} at the peak");
        let cands: Vec<Vec<f64>> = (0..=20).map(|i| vec![i as f64 / 20.0]).collect();
        let incumbent = f(0.5);
        let picks = m.propose(&cands, 3, incumbent);
        // The first pick is the peak (0.6 = candidate 12) or its nearest neighbour.
        assert!((11..=13).contains(&picks[0]), "{picks:?}");
        // The believer spreads the picks: no candidate twice.
        let mut sorted = picks.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 3, "{picks:?}");
    }

    #[test]
    fn relevance_determination_gives_a_parameter_that_does_not_matter_a_long_length_scale() {
        // y = sin(3 x0); x1 is irrelevant. Points on a 7 × 7 grid, little noise.
        let mut obs = Vec::new();
        for i in 0..7 {
            for j in 0..7 {
                let (a, b) = (i as f64 / 6.0, j as f64 / 6.0);
                obs.push(Observed {
                    x: vec![a, b],
                    y: (3.0 * a).sin(),
                    var: 1e-4,
                });
            }
        }
        let ard = Model::fit(&obs, &[0, 1]).unwrap();
        assert!(ard.lengths[1] >= 2.0 * ard.lengths[0], "{:?}", ard.lengths);
        // The common length scale alone is one number for both.
        let (_, iso) = Model::fit_common(&obs).unwrap();
        assert_eq!(iso.lengths[0], iso.lengths[1]);
    }

    #[test]
    fn a_categorical_parameters_coordinates_share_one_length_scale() {
        let study =
            crate::spec::Study::parse(crate::surface::STUDY, std::path::Path::new("k.toml"))
                .unwrap();
        // instances, threads, cache_mb, gc (2 levels), gc_threads, malloc (2 levels).
        assert_eq!(groups(&study.factors), [0, 1, 2, 3, 3, 4, 5, 5]);
        let c = &study.run.baseline;
        assert_eq!(encode(&study.factors, c).len(), 8);
    }

    #[test]
    fn too_few_observations_give_no_model() {
        let o = |x: f64| Observed {
            x: vec![x],
            y: x,
            var: 0.01,
        };
        assert!(Model::fit(&[o(0.0), o(1.0)], &[0]).is_none());
        assert!(Model::fit(&[o(0.0), o(0.5), o(1.0)], &[0]).is_some());
    }
}
