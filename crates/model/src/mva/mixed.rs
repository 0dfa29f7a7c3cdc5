//! Mixed networks: open classes alongside closed ones (or alone).

use crate::error::ModelError;
use crate::network::{Network, StationKind};

use super::asymptotic::BoundsBase;
use super::results::{finish, station_results};
use super::{Solution, SolveOptions, solve};

/// Mixed networks (Lazowska et al., QSP § 7.4): open classes take a share `U_k^o = Σ λ_c D_kc`
/// of each queueing station; the closed classes are solved (by the chosen method) with their
/// demands inflated to `D / (1 − U_k^o)`; an open class then resides
/// `D_kc (1 + Q_k^closed) / (1 − U_k^o)` at a queue and `D_kc` at a delay. Exact for delay and
/// single-server queueing stations; open load on multi-server or load-dependent stations is
/// refused.
pub(super) fn mixed(net: &Network, opts: &SolveOptions) -> Result<Solution, ModelError> {
    let nc = net.classes.len();
    let open: Vec<bool> = net.classes.iter().map(|c| c.is_open()).collect();
    let closed: Vec<usize> = (0..nc).filter(|&c| !open[c]).collect();
    let mut u_open = vec![0.0; net.stations.len()];
    for (k, s) in net.stations.iter().enumerate() {
        u_open[k] = (0..nc)
            .filter_map(|c| net.classes[c].arrival_rate.map(|l| l * s.demand[c]))
            .sum();
        if u_open[k] == 0.0 {
            continue;
        }
        match s.kind {
            StationKind::Delay => {}
            StationKind::Queue | StationKind::MultiServer(1) => {
                if u_open[k] >= 1.0 {
                    return Err(ModelError::OpenSaturated {
                        station: s.name.clone(),
                        utilization: u_open[k],
                    });
                }
            }
            _ => {
                return Err(ModelError::Unsupported {
                    method: "mixed open/closed MVA",
                    station: s.name.clone(),
                    reason: "open classes may visit delay and single-server queueing stations only"
                        .into(),
                });
            }
        }
    }
    let inflate = |k: usize| match net.stations[k].kind {
        StationKind::Delay => 1.0,
        _ => 1.0 / (1.0 - u_open[k]),
    };
    // The closed sub-network (stations no closed class visits are left out).
    let mut closed_sol = None;
    let mut kept: Vec<usize> = Vec::new();
    if !closed.is_empty() {
        let mut stations = Vec::new();
        for (k, s) in net.stations.iter().enumerate() {
            let demand: Vec<f64> = closed.iter().map(|&c| s.demand[c] * inflate(k)).collect();
            if demand.iter().any(|&d| d > 0.0) {
                kept.push(k);
                stations.push(crate::network::Station {
                    demand,
                    ..s.clone()
                });
            }
        }
        let classes = closed.iter().map(|&c| net.classes[c].clone()).collect();
        let sub = Network { stations, classes };
        sub.check()?;
        closed_sol = Some(solve(&sub, opts)?);
    }
    let mut x = vec![0.0; nc];
    let mut residence = vec![vec![0.0; nc]; net.stations.len()];
    let mut q_closed = vec![0.0; net.stations.len()];
    let mut ld_util = vec![None; net.stations.len()];
    if let Some(sol) = &closed_sol {
        for (i, &c) in closed.iter().enumerate() {
            x[c] = sol.classes[i].throughput;
        }
        for (j, &k) in kept.iter().enumerate() {
            q_closed[k] = sol.stations[j].queue;
            ld_util[k] = sol.stations[j].utilization;
            for (i, &c) in closed.iter().enumerate() {
                residence[k][c] = sol.stations[j].residence[i];
            }
        }
    }
    for c in (0..nc).filter(|&c| open[c]) {
        x[c] = net.classes[c].arrival_rate.unwrap_or(0.0);
        for (k, s) in net.stations.iter().enumerate() {
            let d = s.demand[c];
            residence[k][c] = match s.kind {
                StationKind::Delay => d,
                _ => d * (1.0 + q_closed[k]) * inflate(k),
            };
        }
    }
    let mut stations = station_results(net, &x, &residence, |_| None);
    for (k, s) in stations.iter_mut().enumerate() {
        if matches!(net.stations[k].kind, StationKind::LoadDependent(_)) {
            s.utilization = ld_util[k];
        }
    }
    let (exact, converged, iterations, method) = match &closed_sol {
        Some(sol) => (
            sol.exact,
            sol.converged,
            sol.iterations,
            format!(
                "mixed open/closed MVA ({} for the closed classes)",
                sol.method
            ),
        ),
        None => (true, true, 0, "open network (product form)".to_string()),
    };
    let mut out = finish(
        net,
        &method,
        exact,
        converged,
        iterations,
        &x,
        stations,
        Vec::new(),
    );
    for (c, cl) in out.classes.iter_mut().enumerate() {
        if open[c] {
            cl.bounds = BoundsBase::new(net, c).open();
        }
    }
    Ok(out)
}
