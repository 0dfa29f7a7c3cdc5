//! What earlier trials of the same change say about the next one: a normal belief about a log
//! effect, formed from earlier estimates (empirical Bayes: their spread beyond their own noise is
//! how much the true effect varies from one trial to the next) and updated with a new estimate
//! by precision weighting. The result is a credible interval, not a confidence interval; callers
//! say so where they show it.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal as StatrsNormal};

use crate::describe::mean;

/// A normal belief about a quantity (here a log effect).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Belief {
    /// Its mean.
    pub mean: f64,
    /// Its standard deviation.
    pub sd: f64,
}

/// The standard normal quantile at `p`.
pub fn z_quantile(p: f64) -> f64 {
    StatrsNormal::new(0.0, 1.0)
        .map(|n| n.inverse_cdf(p))
        .unwrap_or(f64::NAN)
}

impl Belief {
    /// The belief about the next trial's effect from earlier `(estimate, standard error)`
    /// pairs: centred on their mean, as wide as the true effects vary between trials
    /// (their variance less their mean squared error, at least `floor_sd`) plus the
    /// uncertainty of that mean itself. `None` from fewer than two estimates or a non-finite
    /// one: one earlier trial says too little about how much trials differ.
    pub fn from_earlier(earlier: &[(f64, f64)], floor_sd: f64) -> Option<Belief> {
        let k = earlier.len();
        if k < 2
            || earlier
                .iter()
                .any(|(e, s)| !e.is_finite() || !s.is_finite())
        {
            return None;
        }
        let e: Vec<f64> = earlier.iter().map(|p| p.0).collect();
        let m = mean(&e);
        let spread = e.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (k - 1) as f64;
        let noise = earlier.iter().map(|p| p.1 * p.1).sum::<f64>() / k as f64;
        let tau2 = (spread - noise).max(floor_sd * floor_sd);
        let sd = (tau2 + (tau2 + noise) / k as f64).sqrt();
        Some(Belief { mean: m, sd })
    }

    /// This belief updated with an estimate `x` of standard error `se` (precision-weighted).
    /// An estimate without a finite, positive standard error leaves it as it is.
    pub fn update(self, x: f64, se: f64) -> Belief {
        if !(se > 0.0 && se.is_finite() && x.is_finite()) {
            return self;
        }
        let (wp, wx) = (1.0 / (self.sd * self.sd), 1.0 / (se * se));
        Belief {
            mean: (wp * self.mean + wx * x) / (wp + wx),
            sd: (1.0 / (wp + wx)).sqrt(),
        }
    }

    /// The central interval holding `level` of the belief.
    pub fn interval(self, level: f64) -> (f64, f64) {
        let z = z_quantile(0.5 + level / 2.0);
        (self.mean - z * self.sd, self.mean + z * self.sd)
    }
}

/// The standard error a normal interval of `level` from `low` to `high` implies: a t interval
/// read this way is taken as a little wider than it is, never narrower.
pub fn se_of_interval(low: f64, high: f64, level: f64) -> f64 {
    (high - low) / (2.0 * z_quantile(0.5 + level / 2.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earlier_estimates_that_agree_give_a_belief_no_narrower_than_the_floor() {
        let b = Belief::from_earlier(&[(0.09, 0.04), (0.10, 0.05), (0.08, 0.04)], 0.03).unwrap();
        assert!((b.mean - 0.09).abs() < 1e-12);
        // Their spread is within their noise: the floor, plus the mean's own uncertainty.
        assert!(b.sd >= 0.03 && b.sd < 0.05, "{b:?}");
        assert!(Belief::from_earlier(&[(0.09, 0.04)], 0.03).is_none());
        assert!(Belief::from_earlier(&[(0.09, 0.04), (f64::NAN, 0.1)], 0.03).is_none());
    }

    #[test]
    fn earlier_estimates_that_disagree_give_a_wide_belief() {
        let b = Belief::from_earlier(&[(-0.10, 0.02), (0.20, 0.02), (0.05, 0.02)], 0.03).unwrap();
        assert!(b.sd > 0.15, "{b:?}");
    }

    #[test]
    fn an_update_moves_the_belief_toward_the_more_precise_side_and_narrows_it() {
        let prior = Belief {
            mean: 0.1,
            sd: 0.05,
        };
        let post = prior.update(0.0, 0.05);
        assert!((post.mean - 0.05).abs() < 1e-12);
        assert!((post.sd - 0.05 / 2f64.sqrt()).abs() < 1e-12);
        let post = prior.update(0.0, 0.005);
        assert!(post.mean < 0.002, "{post:?}");
        assert_eq!(prior.update(0.0, f64::INFINITY), prior);
        let (lo, hi) = post.interval(0.95);
        assert!(lo < post.mean && hi > post.mean);
        assert!((se_of_interval(-1.959_964, 1.959_964, 0.95) - 1.0).abs() < 1e-5);
    }
}
