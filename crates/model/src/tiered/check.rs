//! A fitted model against measured points: the predicted throughput and response time at each
//! point, and how far each tier's CPU per request there was from the fitted demand.
//!
//! A held-out point can miss for two reasons: the queueing model is wrong, or the system changed
//! (a tier used more CPU per request than at the fit points: a shared VM's neighbours, caches
//! under more load). The check separates them by predicting each point a second time with
//! every tier's demand scaled to what the point measured ([`OwnDemand`]): what is left there is
//! the model's own error.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{TierModel, TierPoint, TierPrediction, TierSpec};
use crate::error::ModelError;
use crate::predict::err_pct;

/// Measured vs predicted at one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierCheck {
    /// The point.
    pub label: String,
    /// Whether the model was fitted from it.
    pub fitted: bool,
    /// Total users.
    pub users: u32,
    /// Think time of the first class, seconds.
    pub think_time: f64,
    /// Instances per tier (when not 1).
    pub instances: BTreeMap<String, u32>,
    /// Measured requests per second (all classes).
    pub measured_throughput: f64,
    /// Predicted requests per second.
    pub predicted_throughput: f64,
    /// (predicted − measured) / measured × 100.
    pub throughput_error_pct: f64,
    /// Measured mean response time, seconds (throughput-weighted over classes).
    pub measured_response: f64,
    /// Predicted, seconds.
    pub predicted_response: f64,
    /// (predicted − measured) / measured × 100.
    pub response_error_pct: f64,
    /// Per class (class, measured X, predicted X, measured R, predicted R) when there are
    /// several classes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_class: Vec<(String, f64, f64, f64, f64)>,
    /// Per tier, (measured busy cores, predicted busy cores).
    pub busy: BTreeMap<String, (f64, f64)>,
    /// Per tier, the measured busy cores over what the fitted demands give at the measured
    /// throughputs (`Σ_c X_c D_c`): 1 when the tier's CPU per request is the fitted one, 1.4
    /// when it used 40 % more per request here than at the fit points.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub demand_ratio: BTreeMap<String, f64>,
    /// The same point predicted with every tier's demand scaled by its [`demand_ratio`]
    /// (absent in checks saved before it was added, and where no tier has a demand).
    ///
    /// [`demand_ratio`]: TierCheck::demand_ratio
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_own_demand: Option<OwnDemand>,
    /// The predicted bottleneck.
    pub bottleneck: String,
}

/// A point predicted with the CPU per request it measured: the queueing model's own error,
/// without the system's change of demand since the fit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OwnDemand {
    /// Predicted requests per second.
    pub predicted_throughput: f64,
    /// (predicted − measured) / measured × 100.
    pub throughput_error_pct: f64,
    /// Predicted mean response time, seconds.
    pub predicted_response: f64,
    /// (predicted − measured) / measured × 100.
    pub response_error_pct: f64,
}

impl TierModel {
    /// Predicts every point and compares with what was measured.
    pub fn validate(&self, points: &[TierPoint]) -> Result<Vec<TierCheck>, ModelError> {
        let tiers: Vec<TierSpec> = self
            .tiers
            .iter()
            .map(|t| TierSpec {
                name: t.name.clone(),
                cores: t.cores,
                discipline: t.discipline,
            })
            .collect();
        points
            .iter()
            .map(|p| {
                p.check(&tiers)?;
                let (load, instances) = self.load_of(p);
                let pred = self.predict(&load, &instances)?;
                let (mx, mr) = measured(p);
                let demand_ratio = self.demand_ratio(p);
                let at_own_demand = if demand_ratio.is_empty() {
                    None
                } else {
                    let own = self
                        .with_demands_scaled(&demand_ratio)
                        .predict(&load, &instances)?;
                    Some(OwnDemand {
                        predicted_throughput: own.throughput(),
                        throughput_error_pct: err_pct(own.throughput(), mx),
                        predicted_response: own.response_time(),
                        response_error_pct: err_pct(own.response_time(), mr),
                    })
                };
                Ok(TierCheck {
                    label: p.label.clone(),
                    fitted: self.fitted_from.contains(&p.label),
                    users: p.users(),
                    think_time: p.classes.first().map_or(0.0, |c| c.think_time),
                    instances: p.instances.clone(),
                    measured_throughput: mx,
                    predicted_throughput: pred.throughput(),
                    throughput_error_pct: err_pct(pred.throughput(), mx),
                    measured_response: mr,
                    predicted_response: pred.response_time(),
                    response_error_pct: err_pct(pred.response_time(), mr),
                    per_class: per_class(p, &pred),
                    busy: self
                        .tiers
                        .iter()
                        .map(|t| {
                            (
                                t.name.clone(),
                                (
                                    p.busy.get(&t.name).copied().unwrap_or(0.0),
                                    pred.busy.get(&t.name).copied().unwrap_or(0.0),
                                ),
                            )
                        })
                        .collect(),
                    demand_ratio,
                    at_own_demand,
                    bottleneck: pred.bottleneck,
                })
            })
            .collect()
    }

    /// Per tier with a measured CPU at `p`: its busy cores there over `Σ_c X_c D_c` at the
    /// fitted demands and the measured throughputs.
    fn demand_ratio(&self, p: &TierPoint) -> BTreeMap<String, f64> {
        self.tiers
            .iter()
            .filter_map(|t| {
                let at_fit: f64 = p
                    .classes
                    .iter()
                    .filter(|c| c.users > 0)
                    .filter_map(|c| {
                        let k = self.classes.iter().position(|n| n == &c.class)?;
                        Some(c.throughput * t.demand[k])
                    })
                    .sum();
                let measured = p.busy.get(&t.name).copied()?;
                (at_fit > 0.0).then(|| (t.name.clone(), measured / at_fit))
            })
            .collect()
    }

    /// This model with each tier's demands (all classes) multiplied by its `ratio` (1 where
    /// none is given); the path delay and the latency-window correction stay.
    fn with_demands_scaled(&self, ratio: &BTreeMap<String, f64>) -> TierModel {
        let mut m = self.clone();
        for t in &mut m.tiers {
            let r = ratio.get(&t.name).copied().unwrap_or(1.0);
            for d in &mut t.demand {
                *d *= r;
            }
        }
        m
    }
}

/// The measured throughput (all classes) and throughput-weighted response time of `p`.
fn measured(p: &TierPoint) -> (f64, f64) {
    let x = p.throughput();
    let r = if x > 0.0 {
        p.classes
            .iter()
            .filter(|c| c.users > 0)
            .map(|c| c.throughput * c.response_time)
            .sum::<f64>()
            / x
    } else {
        0.0
    };
    (x, r)
}

/// Per class (class, measured X, predicted X, measured R, predicted R) when `p` has several.
fn per_class(p: &TierPoint, pred: &TierPrediction) -> Vec<(String, f64, f64, f64, f64)> {
    if p.classes.len() < 2 {
        return Vec::new();
    }
    p.classes
        .iter()
        .filter(|c| c.users > 0)
        .map(|c| {
            let (px, pr) = pred
                .classes
                .iter()
                .find(|q| q.0 == c.class)
                .map_or((0.0, 0.0), |q| (q.1, q.2));
            (c.class.clone(), c.throughput, px, c.response_time, pr)
        })
        .collect()
}
