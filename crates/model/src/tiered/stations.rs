//! The stations of a tier: a quota below one core, whole or fractional cores, and several
//! instances behind a balancer; and the queueing network of a model for one load.

use std::collections::BTreeMap;

use super::quota::Overlap;
use super::{PATH_STATION, TierModel};
use crate::error::ModelError;
use crate::network::{Class, Discipline, Network, Station, StationKind};

/// A model's network for one load, with what maps it back to the model.
pub(super) struct Lowered {
    /// The network to solve.
    pub network: Network,
    /// The model's indexes of the classes present, in the network's order.
    pub present: Vec<usize>,
    /// Per station, its tier's index in the model (`None`: the client and network path).
    pub tiers: Vec<Option<usize>>,
}

/// The station kind and the demand factor of an instance with `cores` of capacity.
fn kind_for(cores: f64) -> (StationKind, f64) {
    if cores <= 1.0 {
        (StationKind::Queue, 1.0 / cores)
    } else if (cores - cores.round()).abs() < 1e-9 {
        (StationKind::MultiServer(cores.round() as u32), 1.0)
    } else {
        let whole = cores.floor() as u32;
        let mut rates: Vec<f64> = (1..=whole).map(f64::from).collect();
        rates.push(cores);
        (StationKind::LoadDependent(rates), 1.0)
    }
}

/// `m` instances of `cores` each behind a balancing front (round robin under closed load):
/// one load-dependent station whose `n` requests are spread evenly, each instance serving
/// `min(its requests, cores)`. Separate stations each seeing `1/m` of the requests model random
/// routing instead, whose queueing at low load a balancer does not have (two app hosts at 2
/// users: 64 req/s predicted that way against 82.6 measured, docs/capacity.md).
fn balanced(cores: f64, m: u32) -> StationKind {
    let full = m * (cores.ceil() as u32).max(1);
    let rates = (1..=full)
        .map(|n| {
            (0..m)
                .map(|i| {
                    let share = n / m + u32::from(i < n % m);
                    f64::from(share).min(cores)
                })
                .sum()
        })
        .collect();
    StationKind::LoadDependent(rates)
}

impl TierModel {
    /// The queueing network for `load` (per class: users, think time; a class left out or
    /// with 0 users is absent) with `instances` per tier (1 when not given), and the present
    /// classes' indexes. Each class's demand away from the tier whose quota stretches it most
    /// is scaled by `overlap` (the part that stretch hides, `quota.rs`).
    pub(super) fn network(
        &self,
        load: &[(String, u32, f64)],
        instances: &BTreeMap<String, u32>,
        overlap: &Overlap,
    ) -> Result<Lowered, ModelError> {
        let present: Vec<usize> = self
            .classes
            .iter()
            .enumerate()
            .filter(|(_, c)| load.iter().any(|(n, u, _)| n == *c && *u > 0))
            .map(|(i, _)| i)
            .collect();
        if present.is_empty() {
            return Err(ModelError::NoClasses);
        }
        let classes: Vec<Class> = present
            .iter()
            .map(|&i| {
                let (_, u, z) = load
                    .iter()
                    .find(|(n, u, _)| n == &self.classes[i] && *u > 0)
                    .cloned()
                    .unwrap_or_default();
                Class::closed(&self.classes[i], u, z)
            })
            .collect();
        let mut stations = Vec::new();
        let mut tiers = Vec::new();
        for (k, t) in self.tiers.iter().enumerate() {
            if present.iter().all(|&i| t.demand[i] == 0.0) {
                continue;
            }
            let m = instances.get(&t.name).copied().unwrap_or(1).max(1);
            let (kind, factor) = if m == 1 {
                kind_for(t.cores)
            } else {
                (balanced(t.cores, m), 1.0)
            };
            tiers.push(Some(k));
            stations.push(Station {
                name: t.name.clone(),
                kind,
                discipline: t.discipline,
                demand: present
                    .iter()
                    .map(|&i| t.demand[i] * factor * overlap.factor(i, Some(k)))
                    .collect(),
            });
        }
        if self.path_delay > 0.0 {
            tiers.push(None);
            stations.push(Station {
                name: PATH_STATION.into(),
                kind: StationKind::Delay,
                discipline: Discipline::Ps,
                demand: present
                    .iter()
                    .map(|&i| self.path_delay * overlap.factor(i, None))
                    .collect(),
            });
        }
        Ok(Lowered {
            network: Network::new(stations, classes)?,
            present,
            tiers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_below_one_core_is_a_slower_queue() {
        let (k, f) = kind_for(0.5);
        assert_eq!(k, StationKind::Queue);
        assert_eq!(f, 2.0);
        assert_eq!(kind_for(2.0).0, StationKind::MultiServer(2));
        assert_eq!(kind_for(1.5).0, StationKind::LoadDependent(vec![1.0, 1.5]));
    }

    #[test]
    fn balanced_instances_serve_in_parallel_until_each_is_busy() {
        // Two app instances under 0.4-core quotas: one request 0.4 cores, two 0.8, then no more.
        assert_eq!(balanced(0.4, 2), StationKind::LoadDependent(vec![0.4, 0.8]));
        // Two of 1.5 cores: requests spread 1/0, 1/1, 2/1, 2/2.
        assert_eq!(
            balanced(1.5, 2),
            StationKind::LoadDependent(vec![1.0, 2.0, 2.5, 3.0])
        );
    }
}
