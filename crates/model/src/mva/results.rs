//! Results common to every solver: per-station results from the class throughputs and
//! residence times, and the [`Solution`] with per-class results, bounds and the bottleneck.

use crate::network::{Network, StationKind};

use super::asymptotic::bounds;
use super::{ClassResult, CurvePoint, Solution, StationResult};

pub(super) fn utilization(kind: &StationKind, busy: f64, p0: Option<f64>) -> Option<f64> {
    match kind {
        StationKind::Delay => None,
        StationKind::Queue => Some(busy),
        StationKind::MultiServer(m) => Some(busy / f64::from(*m)),
        StationKind::LoadDependent(_) => p0.map(|p| 1.0 - p),
    }
}

pub(super) fn station_results(
    net: &Network,
    x: &[f64],
    residence: &[Vec<f64>],
    p0: impl Fn(usize) -> Option<f64>,
) -> Vec<StationResult> {
    net.stations
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let busy: f64 = s.demand.iter().zip(x).map(|(d, x)| d * x).sum();
            let queue_per_class: Vec<f64> =
                residence[k].iter().zip(x).map(|(r, x)| r * x).collect();
            StationResult {
                name: s.name.clone(),
                kind: s.kind.label(),
                servers: s.kind.servers(),
                demand: s.demand.clone(),
                busy,
                utilization: utilization(&s.kind, busy, p0(k)),
                queue: queue_per_class.iter().sum(),
                residence: residence[k].clone(),
                queue_per_class,
            }
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    net: &Network,
    method: &str,
    exact: bool,
    converged: bool,
    iterations: u32,
    x: &[f64],
    stations: Vec<StationResult>,
    curve: Vec<CurvePoint>,
) -> Solution {
    let classes = net
        .classes
        .iter()
        .enumerate()
        .map(|(c, cl)| ClassResult {
            name: cl.name.clone(),
            population: cl.population,
            think_time: cl.think_time,
            throughput: x[c],
            response_time: stations.iter().map(|s| s.residence[c]).sum(),
            bounds: bounds(net, c, cl.population),
        })
        .collect();
    let bottleneck = net
        .stations
        .iter()
        .zip(&stations)
        .filter(|(s, _)| s.kind != StationKind::Delay)
        .map(|(s, r)| (r.busy / s.kind.max_rate(), &s.name))
        .fold(None::<(f64, &String)>, |best, cur| match best {
            Some(b) if b.0 >= cur.0 => Some(b),
            _ => Some(cur),
        })
        .map(|(_, n)| n.clone())
        .unwrap_or_default();
    Solution {
        method: method.to_string(),
        exact,
        converged,
        iterations,
        classes,
        stations,
        bottleneck,
        curve,
    }
}
