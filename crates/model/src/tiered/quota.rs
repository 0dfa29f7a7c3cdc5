//! A tier under a CPU quota below one core, and the time its requests spend elsewhere.
//!
//! The model serves such a tier at `D/c`: the quota stretches a request's CPU `D` to `D/c` of
//! wall time. But the kernel hands quota to each CPU in slices that outlive the period (since
//! Linux 5.4), so a tier blocked on a call downstream, or idle while the reply travels, keeps
//! what it did not use and spends it when the request is back: the time at the other tiers and
//! on the path overlaps the stretch `D/c − D` instead of adding to it. Product-form MVA sums the
//! residence times, so each class's demand away from its most stretching tier is scaled down
//! until the time it hides equals `min(time elsewhere, stretch)`, a fixed point of the solved
//! network (measured against the sum in docs/capacity.md).

use crate::mva::Solution;

use super::TierModel;

/// Rounds of the fixed point; each halves the distance to the next estimate.
const ROUNDS: usize = 60;
/// The fixed point has settled when no factor moves by more than this.
const SETTLED: f64 = 1e-9;

/// Per model class: the tier whose quota stretches its requests most, that stretch, and the
/// factor on the class's demand everywhere else.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Overlap {
    /// Per class: (tier index, stretch `D (1/c − 1)` in seconds), or none.
    stretch: Vec<Option<(usize, f64)>>,
    /// Per class: the factor on its demand away from that tier (1: nothing hidden).
    factor: Vec<f64>,
}

impl Overlap {
    /// The stretches of `model`'s classes, every factor still 1.
    pub(super) fn of(model: &TierModel) -> Overlap {
        let stretch = (0..model.classes.len())
            .map(|i| {
                model
                    .tiers
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.cores < 1.0 && t.demand[i] > 0.0)
                    .map(|(k, t)| (k, t.demand[i] * (1.0 / t.cores - 1.0)))
                    .max_by(|a, b| a.1.total_cmp(&b.1))
            })
            .collect();
        Overlap {
            stretch,
            factor: vec![1.0; model.classes.len()],
        }
    }

    /// The overlap scaled to `share` of itself (0: none, every factor 1; 1: as it is).
    pub(super) fn share(&self, share: f64) -> Overlap {
        Overlap {
            stretch: self.stretch.clone(),
            factor: self
                .factor
                .iter()
                .map(|f| 1.0 - share * (1.0 - f))
                .collect(),
        }
    }

    /// Whether any class has a stretch to hide time in.
    pub(super) fn any(&self) -> bool {
        self.stretch.iter().any(Option::is_some)
    }

    /// The factor on class `class`'s demand at tier `tier` (`None`: the path).
    pub(super) fn factor(&self, class: usize, tier: Option<usize>) -> f64 {
        match self.stretch.get(class).copied().flatten() {
            Some((k, _)) if tier == Some(k) => 1.0,
            Some(_) => self.factor.get(class).copied().unwrap_or(1.0),
            None => 1.0,
        }
    }

    /// One round: from `sol` (the network solved with the current factors, its classes in
    /// `present` order, its stations' tiers in `tiers`, `None` for the path), moves each factor
    /// half way to the one that hides `min(time elsewhere, stretch)`. Returns the largest move.
    pub(super) fn step(
        &mut self,
        sol: &Solution,
        present: &[usize],
        tiers: &[Option<usize>],
    ) -> f64 {
        let mut moved: f64 = 0.0;
        for (a, &i) in present.iter().enumerate() {
            let Some((k, stretch)) = self.stretch[i] else {
                continue;
            };
            let scaled: f64 = sol
                .stations
                .iter()
                .zip(tiers)
                .filter(|(_, tier)| **tier != Some(k))
                .map(|(st, _)| st.residence.get(a).copied().unwrap_or(0.0))
                .sum();
            let f = self.factor[i];
            // The residence elsewhere as it would be unscaled (proportional to the demand).
            let elsewhere = scaled / f.max(f64::MIN_POSITIVE);
            let target = if elsewhere > 0.0 {
                (1.0 - elsewhere.min(stretch) / elsewhere).max(0.0)
            } else {
                1.0
            };
            let next = 0.5 * (f + target);
            moved = moved.max((next - f).abs());
            self.factor[i] = next;
        }
        moved
    }

    /// Whether `moved` (from [`Overlap::step`]) means the fixed point has settled, or the
    /// rounds are spent.
    pub(super) fn settled(moved: f64, round: usize) -> bool {
        moved < SETTLED || round + 1 >= ROUNDS
    }
}
