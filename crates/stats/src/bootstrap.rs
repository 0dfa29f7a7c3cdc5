//! Bootstrap of blocked measurements.

use crate::rng::Rng;

/// Each column's chance of being the best (the highest mean), as the share of `resamples`
/// bootstrap resamples of the blocks (rows drawn with replacement; `seed` makes it
/// reproducible) in which it has the highest mean; a tie goes to the first column. It says
/// how firmly the blocks single out their best column: were the rounds measured again under
/// the same conditions, how often would the pick stay. It cannot see drift between runs made
/// at different times, so it is an upper bound on a repeated study's agreement. `None` with
/// fewer than two blocks, ragged rows or a non-finite value.
pub fn chance_best(blocks: &[Vec<f64>], resamples: usize, seed: u64) -> Option<Vec<f64>> {
    let k = blocks.first()?.len();
    if blocks.len() < 2
        || resamples == 0
        || k == 0
        || blocks
            .iter()
            .any(|r| r.len() != k || r.iter().any(|v| !v.is_finite()))
    {
        return None;
    }
    let mut rng = Rng::new(seed);
    let mut wins = vec![0usize; k];
    let mut sums = vec![0.0; k];
    for _ in 0..resamples {
        sums.iter_mut().for_each(|s| *s = 0.0);
        for _ in 0..blocks.len() {
            let row = &blocks[rng.below(blocks.len())];
            for (s, v) in sums.iter_mut().zip(row) {
                *s += v;
            }
        }
        let mut best = 0;
        for j in 1..k {
            if sums[j] > sums[best] {
                best = j;
            }
        }
        wins[best] += 1;
    }
    Some(
        wins.into_iter()
            .map(|w| w as f64 / resamples as f64)
            .collect(),
    )
}
