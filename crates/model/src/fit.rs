//! Fitting service demands from measured load points.
//!
//! For every queueing station `k` and measured point `i` the utilization law says
//! `U_ik = X_i · D_k`, with `U_ik` the busy cores of the tier and `X_i` the throughput. Across
//! several points the demand is the non-negative least-squares solution
//! `D_k = max(0, Σ_i X_i U_ik / Σ_i X_i²)` (one unknown per station, so the NNLS problem has
//! this closed form). Each point is then checked against the interactive response-time law
//! `R = N / X − Z`, and the residuals of both laws are reported.

use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::network::{Class, Network, Station};
use crate::point::LoadPoint;

/// Where a station's demand came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FittedDemand {
    /// The station.
    pub station: String,
    /// Seconds per request.
    pub demand: f64,
    /// Measured points used (0 = the model's stated demand was kept).
    pub points: usize,
}

/// Utilization-law residual of one station at one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Residual {
    /// The measured point's label.
    pub label: String,
    /// The station.
    pub station: String,
    /// Measured busy cores.
    pub measured: f64,
    /// X · D with the fitted demand.
    pub fitted: f64,
    /// measured − fitted.
    pub residual: f64,
}

/// Response-time-law check of one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseCheck {
    /// The point's label.
    pub label: String,
    /// Concurrent clients of the point.
    pub clients: u32,
    /// Think time of the point, seconds.
    pub think_time: f64,
    /// Measured throughput, requests per second.
    pub throughput: f64,
    /// Measured response time, seconds, when the point has one.
    pub measured_response: Option<f64>,
    /// N / X − Z.
    pub law_response: f64,
    /// (measured − law) / law × 100, when the response time was measured.
    pub error_pct: Option<f64>,
    /// Σ of fitted demands (the least time one request can take).
    pub demand_total: f64,
    /// The fitted demands do not fit in the response time: the measurements disagree.
    pub demands_exceed_response: bool,
}

/// The result of [`fit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitReport {
    /// The network with the fitted demands, the class's population and the mean measured
    /// think time.
    pub network: Network,
    /// Per station, its demand and how many points it was fitted from.
    pub demands: Vec<FittedDemand>,
    /// Utilization-law residuals, per station and point.
    pub residuals: Vec<Residual>,
    /// Response-time-law check, per point.
    pub response_law: Vec<ResponseCheck>,
    /// Root mean square of residual / measured over all residuals with measured > 0.
    pub rms_relative_residual: f64,
}

/// Fits the demands of `stations` for one closed class from measured points. A station whose
/// `demand` is empty is unknown and must be measured; one with a demand keeps it when no point
/// measures it. The fitted network has the class's population and the mean measured think time.
pub fn fit(
    stations: &[Station],
    class: &Class,
    measurements: &[LoadPoint],
) -> Result<FitReport, ModelError> {
    if class.is_open() {
        return Err(ModelError::File(format!(
            "class `{}`: fitting needs a closed class (clients and think time)",
            class.name
        )));
    }
    if measurements.is_empty() {
        return Err(ModelError::BadMeasurement {
            label: "(none)".into(),
            field: "measurements".into(),
            message: "fitting needs at least one measured point".into(),
        });
    }
    for m in measurements {
        m.check(stations)?;
    }
    let mut fitted = Vec::with_capacity(stations.len());
    let mut demands = Vec::with_capacity(stations.len());
    let mut residuals = Vec::new();
    for s in stations {
        let pts: Vec<(&LoadPoint, f64)> = measurements
            .iter()
            .filter_map(|m| m.utilization.get(&s.name).map(|&u| (m, u)))
            .collect();
        let d = if pts.is_empty() {
            match s.demand.first() {
                Some(&d) if s.demand.len() == 1 => d,
                _ => {
                    return Err(ModelError::Unfittable {
                        station: s.name.clone(),
                    });
                }
            }
        } else {
            let sxu: f64 = pts.iter().map(|(m, u)| m.throughput * u).sum();
            let sxx: f64 = pts.iter().map(|(m, _)| m.throughput * m.throughput).sum();
            (sxu / sxx).max(0.0)
        };
        for (m, u) in &pts {
            residuals.push(Residual {
                label: m.name(),
                station: s.name.clone(),
                measured: *u,
                fitted: m.throughput * d,
                residual: u - m.throughput * d,
            });
        }
        demands.push(FittedDemand {
            station: s.name.clone(),
            demand: d,
            points: pts.len(),
        });
        fitted.push(Station {
            demand: vec![d],
            ..s.clone()
        });
    }
    let think = measurements.iter().map(|m| m.think_time).sum::<f64>() / measurements.len() as f64;
    let class = Class {
        think_time: think,
        ..class.clone()
    };
    let network = Network::new(fitted, vec![class])?;
    let demand_total: f64 = network
        .stations
        .iter()
        .map(|s| s.demand[0] * s.kind.fastest_per_customer())
        .sum();
    let response_law = measurements
        .iter()
        .map(|m| {
            let law = f64::from(m.clients) / m.throughput - m.think_time;
            ResponseCheck {
                label: m.name(),
                clients: m.clients,
                think_time: m.think_time,
                throughput: m.throughput,
                measured_response: m.response_time,
                law_response: law,
                error_pct: m.response_time.map(|r| (r - law) / law * 100.0),
                demand_total,
                demands_exceed_response: demand_total > law * (1.0 + 1e-6),
            }
        })
        .collect();
    let rel: Vec<f64> = residuals
        .iter()
        .filter(|r| r.measured > 0.0)
        .map(|r| r.residual / r.measured)
        .collect();
    let rms_relative_residual = if rel.is_empty() {
        0.0
    } else {
        (rel.iter().map(|v| v * v).sum::<f64>() / rel.len() as f64).sqrt()
    };
    Ok(FitReport {
        network,
        demands,
        residuals,
        response_law,
        rms_relative_residual,
    })
}
