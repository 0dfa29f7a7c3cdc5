//! Weighted choice: draws an index with probability proportional to its weight, from the
//! seeded [`Rng`] (a load driver's request mix, any other weighted pick).

use crate::rng::Rng;

/// Indices `0..n` drawn with probability `weight[i] / sum(weights)`: one uniform draw and a
/// binary search over the cumulative weights.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightedChoice {
    cumulative: Vec<f64>,
}

impl WeightedChoice {
    /// The choice over `weights`; `None` when there is none, or one is not finite or not
    /// positive (a weight of 0 would be a row never chosen, which is better left out).
    pub fn new(weights: &[f64]) -> Option<WeightedChoice> {
        if weights.is_empty() || weights.iter().any(|w| !w.is_finite() || *w <= 0.0) {
            return None;
        }
        let mut sum = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                sum += w;
                sum
            })
            .collect();
        Some(WeightedChoice { cumulative })
    }

    /// The number of choices.
    pub fn len(&self) -> usize {
        self.cumulative.len()
    }

    /// Always false: a choice has at least one index.
    pub fn is_empty(&self) -> bool {
        self.cumulative.is_empty()
    }

    /// The probability of index `i` (0 for an index out of range).
    pub fn probability(&self, i: usize) -> f64 {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let before = i
            .checked_sub(1)
            .and_then(|j| self.cumulative.get(j))
            .copied()
            .unwrap_or(0.0);
        self.cumulative.get(i).map_or(0.0, |c| (c - before) / total)
    }

    /// Draws one index.
    pub fn draw(&self, rng: &mut Rng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        // next_f64 is in (0, 1], so u is in (0, total] and some cumulative weight is >= u.
        let u = rng.next_f64() * total;
        self.cumulative
            .partition_point(|c| *c < u)
            .min(self.cumulative.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_follow_the_weights_within_half_a_percent_over_a_million_draws() {
        let choice = WeightedChoice::new(&[90.0, 5.0, 5.0]).unwrap();
        let mut rng = Rng::new(42);
        let n = 1_000_000;
        let mut counts = [0u64; 3];
        for _ in 0..n {
            counts[choice.draw(&mut rng)] += 1;
        }
        for (i, want) in [0.90, 0.05, 0.05].into_iter().enumerate() {
            let got = counts[i] as f64 / n as f64;
            assert!((got - want).abs() < 0.005, "index {i}: {got} vs {want}");
            assert!((choice.probability(i) - want).abs() < 1e-12);
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_sequence() {
        let choice = WeightedChoice::new(&[1.0, 2.0, 3.5]).unwrap();
        let (mut a, mut b) = (Rng::new(9), Rng::new(9));
        let xs: Vec<usize> = (0..200).map(|_| choice.draw(&mut a)).collect();
        let ys: Vec<usize> = (0..200).map(|_| choice.draw(&mut b)).collect();
        assert_eq!(xs, ys);
        assert!(xs.contains(&0) && xs.contains(&1) && xs.contains(&2));
    }

    #[test]
    fn no_weights_or_a_weight_that_is_not_positive_is_refused() {
        assert!(WeightedChoice::new(&[]).is_none());
        assert!(WeightedChoice::new(&[1.0, 0.0]).is_none());
        assert!(WeightedChoice::new(&[1.0, -2.0]).is_none());
        assert!(WeightedChoice::new(&[f64::NAN]).is_none());
        assert!(WeightedChoice::new(&[f64::INFINITY]).is_none());
        let one = WeightedChoice::new(&[0.3]).unwrap();
        assert_eq!(one.draw(&mut Rng::new(1)), 0);
        assert_eq!(one.len(), 1);
    }
}
