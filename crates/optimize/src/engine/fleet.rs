//! The fleet's say in what is tried: a strategy reverted on most hosts that tried it on the
//! same workload signature is skipped, one kept on most is tried before the others.

use super::Engine;
use crate::fleet::{Advice, Priors};
use crate::strategy::StrategyKind;

impl Engine {
    /// Takes in the fleet's latest verdicts (`None`: none configured, or none read yet).
    pub fn set_fleet(&mut self, priors: Option<Priors>) {
        self.fleet = priors;
    }

    /// What the fleet says of `kind` on `signature`.
    pub(super) fn fleet_advice(&self, signature: &str, kind: StrategyKind) -> Option<Advice> {
        self.fleet.as_ref()?.advice(signature, kind)
    }

    /// `kinds` with those the fleet kept on most hosts first, in their order otherwise.
    pub(super) fn fleet_order(&self, signature: &str, kinds: &[StrategyKind]) -> Vec<StrategyKind> {
        let first =
            |k: &StrategyKind| matches!(self.fleet_advice(signature, *k), Some(Advice::First(_)));
        let mut v: Vec<StrategyKind> = kinds.iter().copied().filter(first).collect();
        v.extend(kinds.iter().copied().filter(|k| !first(k)));
        v
    }
}
