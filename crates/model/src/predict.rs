//! Prediction over clients and replicated nodes, validation against measured points, and
//! throughput-per-cost rankings (scale-up vs scale-out).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::mva::{Method, SolveOptions, solve};
use crate::network::{Network, StationKind};
use crate::point::LoadPoint;

/// One predicted configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionRow {
    /// Concurrent clients.
    pub clients: u32,
    /// Replicas of the replicated station (1 when nothing is replicated).
    pub replicas: u32,
    /// Predicted requests per second.
    pub throughput: f64,
    /// Predicted seconds per request (think time not included).
    pub response_time: f64,
    /// (station, utilization) for every non-delay station.
    pub utilization: Vec<(String, f64)>,
    /// The station with the highest utilization per server.
    pub bottleneck: String,
}

/// Predicts a single-class network over client counts and, optionally, over replica counts
/// of one station (replicas are separate stations with visit ratio 1/m).
pub fn predict(
    net: &Network,
    clients: &[u32],
    replicate: Option<(&str, &[u32])>,
    opts: &SolveOptions,
) -> Result<Vec<PredictionRow>, ModelError> {
    single_class(net, "prediction")?;
    if let Some(c) = clients.iter().find(|&&c| c == 0) {
        return Err(ModelError::ZeroPopulation {
            class: format!("{} (clients = {c})", net.classes[0].name),
        });
    }
    let variants: Vec<(u32, Network)> = match replicate {
        None => vec![(1, net.clone())],
        Some((name, counts)) => counts
            .iter()
            .map(|&m| net.with_replicas(name, m).map(|n| (m, n)))
            .collect::<Result<_, _>>()?,
    };
    let mut rows = Vec::new();
    for (m, variant) in variants {
        rows.extend(
            solve_at(&variant, clients, variant.classes[0].think_time, opts)?
                .into_iter()
                .map(|mut r| {
                    r.replicas = m;
                    r
                }),
        );
    }
    Ok(rows)
}

fn single_class(net: &Network, what: &str) -> Result<(), ModelError> {
    if net.classes.len() != 1 {
        return Err(ModelError::File(format!(
            "{what} needs a single-class network; this one has {} classes",
            net.classes.len()
        )));
    }
    Ok(())
}

/// Solves `net` at each client count with think time `z`; one exact solve gives them all.
fn solve_at(
    net: &Network,
    clients: &[u32],
    z: f64,
    opts: &SolveOptions,
) -> Result<Vec<PredictionRow>, ModelError> {
    let mut base = net.clone();
    base.classes[0].think_time = z;
    let row = |sol: &crate::mva::Solution, n: u32, idx: Option<usize>| {
        let (x, r, utils): (f64, f64, Vec<Option<f64>>) = match idx {
            Some(i) => {
                let p = &sol.curve[i];
                (p.throughput, p.response_time, p.utilization.clone())
            }
            None => (
                sol.classes[0].throughput,
                sol.classes[0].response_time,
                sol.stations.iter().map(|s| s.utilization).collect(),
            ),
        };
        let utilization: Vec<(String, f64)> = base
            .stations
            .iter()
            .zip(utils)
            .filter_map(|(s, u)| u.map(|u| (s.name.clone(), u)))
            .collect();
        let bottleneck = base
            .stations
            .iter()
            .filter(|s| s.kind != StationKind::Delay)
            .map(|s| (x * s.demand[0] / s.kind.max_rate(), &s.name))
            .fold(None::<(f64, &String)>, |b, c| match b {
                Some(b) if b.0 >= c.0 => Some(b),
                _ => Some(c),
            })
            .map(|(_, n)| n.clone())
            .unwrap_or_default();
        PredictionRow {
            clients: n,
            replicas: 1,
            throughput: x,
            response_time: r,
            utilization,
            bottleneck,
        }
    };
    let mut rows = Vec::with_capacity(clients.len());
    if opts.method == Method::Exact {
        let max = clients.iter().copied().max().unwrap_or(1).max(1);
        base.classes[0].population = max;
        let with_curve = SolveOptions {
            curve: true,
            ..*opts
        };
        let sol = solve(&base, &with_curve)?;
        for &n in clients {
            rows.push(row(&sol, n, Some(n as usize - 1)));
        }
    } else {
        for &n in clients {
            base.classes[0].population = n;
            let sol = solve(&base, opts)?;
            rows.push(row(&sol, n, None));
        }
    }
    Ok(rows)
}

/// Measured vs predicted utilization of one station at one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UtilizationCheck {
    /// The station.
    pub station: String,
    /// Busy cores measured.
    pub measured: f64,
    /// Busy cores predicted (X · D).
    pub predicted: f64,
    /// (predicted − measured) / measured × 100.
    pub error_pct: f64,
}

/// One row of a validation table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationRow {
    /// The point's label (or "N clients").
    pub label: String,
    /// Concurrent clients of the point.
    pub clients: u32,
    /// Think time of the point, seconds.
    pub think_time: f64,
    /// Whether this point was used to fit the demands.
    pub fitted: bool,
    /// Requests per second measured.
    pub measured_throughput: f64,
    /// Requests per second predicted.
    pub predicted_throughput: f64,
    /// (predicted − measured) / measured × 100.
    pub throughput_error_pct: f64,
    /// Measured response time, or N/X − Z when the point did not measure it.
    pub measured_response: f64,
    /// Whether `measured_response` was derived by the response-time law.
    pub response_derived: bool,
    /// Seconds per request predicted.
    pub predicted_response: f64,
    /// (predicted − measured) / measured × 100.
    pub response_error_pct: f64,
    /// Per station with a measured utilization.
    pub utilization: Vec<UtilizationCheck>,
}

/// A validation table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    /// One row per measured point.
    pub rows: Vec<ValidationRow>,
    /// Largest |error %| of response time over points not used for fitting (all points when
    /// every point was used).
    pub max_abs_response_error_pct: f64,
    /// Largest |error %| of throughput, over the same points.
    pub max_abs_throughput_error_pct: f64,
}

/// (predicted − measured) / measured × 100; 0 when both are 0, infinite when only the
/// measurement is.
pub(crate) fn err_pct(predicted: f64, measured: f64) -> f64 {
    if measured == 0.0 {
        if predicted == 0.0 { 0.0 } else { f64::INFINITY }
    } else {
        (predicted - measured) / measured * 100.0
    }
}

/// Predicts every measured point (its clients and think time) and compares.
/// `fitted_labels` names the points used for fitting, to mark them in the table.
pub fn validate(
    net: &Network,
    measurements: &[LoadPoint],
    fitted_labels: &[String],
    opts: &SolveOptions,
) -> Result<Validation, ModelError> {
    single_class(net, "validation")?;
    let mut rows = Vec::with_capacity(measurements.len());
    for m in measurements {
        m.check(&net.stations)?;
        let p = solve_at(net, &[m.clients], m.think_time, opts)?.remove(0);
        let (measured_response, response_derived) = match m.response_time {
            Some(r) => (r, false),
            None => (f64::from(m.clients) / m.throughput - m.think_time, true),
        };
        let utilization = m
            .utilization
            .iter()
            .map(|(name, &u)| {
                let d = net
                    .stations
                    .iter()
                    .find(|s| &s.name == name)
                    .map_or(0.0, |s| s.demand[0]);
                let predicted = p.throughput * d;
                UtilizationCheck {
                    station: name.clone(),
                    measured: u,
                    predicted,
                    error_pct: err_pct(predicted, u),
                }
            })
            .collect();
        rows.push(ValidationRow {
            label: m.name(),
            clients: m.clients,
            think_time: m.think_time,
            fitted: fitted_labels.contains(&m.name()),
            measured_throughput: m.throughput,
            predicted_throughput: p.throughput,
            throughput_error_pct: err_pct(p.throughput, m.throughput),
            measured_response,
            response_derived,
            predicted_response: p.response_time,
            response_error_pct: err_pct(p.response_time, measured_response),
            utilization,
        });
    }
    let held_out: Vec<&ValidationRow> = rows.iter().filter(|r| !r.fitted).collect();
    let pool: Vec<&ValidationRow> = if held_out.is_empty() {
        rows.iter().collect()
    } else {
        held_out
    };
    let max_r = pool
        .iter()
        .map(|r| r.response_error_pct.abs())
        .fold(0.0, f64::max);
    let max_x = pool
        .iter()
        .map(|r| r.throughput_error_pct.abs())
        .fold(0.0, f64::max);
    Ok(Validation {
        rows,
        max_abs_response_error_pct: max_r,
        max_abs_throughput_error_pct: max_x,
    })
}

/// A deployment to price: replicas per station (scale-out), servers per node (scale-up),
/// demand scale per station (faster or slower nodes), and its price.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Configuration {
    /// Unique name, for the ranking.
    pub name: String,
    /// Replicas per station (scale-out; default 1).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replicas: BTreeMap<String, u32>,
    /// Servers per node per station (scale-up).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub servers: BTreeMap<String, u32>,
    /// Factor on a station's demands (a faster node < 1).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub demand_scale: BTreeMap<String, f64>,
    /// Total price; when absent, Σ over stations of nodes × the station's price per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
}

/// One ranked configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostRow {
    /// The configuration's name.
    pub name: String,
    /// Clients it was priced at.
    pub clients: u32,
    /// Predicted requests per second.
    pub throughput: f64,
    /// Predicted seconds per request.
    pub response_time: f64,
    /// Its total price.
    pub cost: f64,
    /// Requests per second per 1000 units of cost.
    pub throughput_per_kcost: f64,
    /// The station with the highest utilization per server.
    pub bottleneck: String,
}

/// Applies a configuration to a network.
pub fn configure(net: &Network, cfg: &Configuration) -> Result<Network, ModelError> {
    let mut out = net.clone();
    for (name, &m) in &cfg.servers {
        let k = out.station_index(name)?;
        let s = &mut out.stations[k];
        s.kind = match (&s.kind, m) {
            (_, 0) => {
                return Err(ModelError::ZeroServers {
                    station: name.clone(),
                });
            }
            (StationKind::Delay, _) | (StationKind::LoadDependent(_), _) => {
                return Err(ModelError::StationField {
                    station: name.clone(),
                    field: "servers",
                    message: format!(
                        "configuration `{}` sets servers on a {} station",
                        cfg.name,
                        s.kind.label()
                    ),
                });
            }
            (_, 1) => StationKind::Queue,
            (_, m) => StationKind::MultiServer(m),
        };
    }
    for (name, &f) in &cfg.demand_scale {
        let k = out.station_index(name)?;
        if !f.is_finite() || f <= 0.0 {
            return Err(ModelError::StationField {
                station: name.clone(),
                field: "demand_scale",
                message: format!("configuration `{}`: {f} must be > 0", cfg.name),
            });
        }
        for d in &mut out.stations[k].demand {
            *d *= f;
        }
    }
    for (name, &m) in &cfg.replicas {
        out = out.with_replicas(name, m)?;
    }
    out.check()?;
    Ok(out)
}

/// Ranks configurations by throughput per cost at `clients` (best first).
pub fn rank_by_cost(
    net: &Network,
    configs: &[Configuration],
    prices: &BTreeMap<String, f64>,
    clients: u32,
    opts: &SolveOptions,
) -> Result<Vec<CostRow>, ModelError> {
    single_class(net, "cost ranking")?;
    let mut rows = Vec::with_capacity(configs.len());
    for cfg in configs {
        let variant = configure(net, cfg)?;
        let cost = match cfg.price {
            Some(p) => p,
            None => {
                if prices.is_empty() {
                    return Err(ModelError::File(format!(
                        "configuration `{}`: give `price`, or a `price` per node on the stations",
                        cfg.name
                    )));
                }
                net.stations
                    .iter()
                    .map(|s| {
                        let nodes = cfg.replicas.get(&s.name).copied().unwrap_or(1);
                        f64::from(nodes) * prices.get(&s.name).copied().unwrap_or(0.0)
                    })
                    .sum()
            }
        };
        if !cost.is_finite() || cost <= 0.0 {
            return Err(ModelError::File(format!(
                "configuration `{}`: cost is {cost}; it must be > 0",
                cfg.name
            )));
        }
        let p = solve_at(&variant, &[clients], variant.classes[0].think_time, opts)?.remove(0);
        rows.push(CostRow {
            name: cfg.name.clone(),
            clients,
            throughput: p.throughput,
            response_time: p.response_time,
            cost,
            throughput_per_kcost: p.throughput / cost * 1000.0,
            bottleneck: p.bottleneck,
        });
    }
    rows.sort_by(|a, b| b.throughput_per_kcost.total_cmp(&a.throughput_per_kcost));
    Ok(rows)
}
