//! Bard–Schweitzer approximate MVA: a fixed-point iteration at the final population only,
//! where a customer arriving at a station sees its queue with itself removed in proportion
//! (`Q_k − Q_kc / N_c`). Multi-server stations arrive here already split by Seidmann's
//! approximation; general load-dependent stations are refused when lowering.

// The iteration indexes queue and residence arrays by station and class, like the formulas.
#![allow(clippy::needless_range_loop)]

use crate::error::ModelError;
use crate::network::Network;

use super::asymptotic::bounds;
use super::lower::{IKind, Internal};
use super::results::{finish, station_results};
use super::{CurvePoint, Solution, SolveOptions};

pub(super) fn schweitzer(
    net: &Network,
    it: &Internal,
    opts: &SolveOptions,
) -> Result<Solution, ModelError> {
    let nc = it.pops.len();
    let ka = it.kind.len();
    let pops: Vec<f64> = it.pops.iter().map(|&p| f64::from(p)).collect();
    // Start with each class spread evenly over the stations it visits.
    let mut q = vec![vec![0.0; nc]; ka];
    for c in 0..nc {
        let visited = (0..ka).filter(|&k| it.demand[k][c] > 0.0).count().max(1);
        for qk in q.iter_mut() {
            qk[c] = pops[c] / visited as f64;
        }
        for k in 0..ka {
            if it.demand[k][c] == 0.0 {
                q[k][c] = 0.0;
            }
        }
    }
    let mut r = vec![vec![0.0; nc]; ka];
    let mut x = vec![0.0; nc];
    let mut converged = false;
    let mut iterations = 0;
    while iterations < opts.max_iterations {
        iterations += 1;
        for c in 0..nc {
            let mut sum = it.think[c];
            for k in 0..ka {
                let d = it.demand[k][c];
                r[k][c] = match it.kind[k] {
                    IKind::Delay => d,
                    _ if d == 0.0 => 0.0,
                    // The work of those ahead, each at its own class's demand.
                    IKind::Fcfs => {
                        d + (0..nc)
                            .map(|j| {
                                let seen = q[k][j] - if j == c { q[k][c] / pops[c] } else { 0.0 };
                                it.demand[k][j] * seen
                            })
                            .sum::<f64>()
                    }
                    _ => {
                        let qk: f64 = q[k].iter().sum();
                        d * (1.0 + qk - q[k][c] / pops[c])
                    }
                };
                sum += r[k][c];
            }
            x[c] = pops[c] / sum;
        }
        let mut delta: f64 = 0.0;
        for k in 0..ka {
            for c in 0..nc {
                let new = x[c] * r[k][c];
                delta = delta.max((new - q[k][c]).abs() / pops[c]);
                q[k][c] = new;
            }
        }
        if delta < opts.tolerance {
            converged = true;
            break;
        }
    }
    let mut residence = vec![vec![0.0; nc]; net.stations.len()];
    for k in 0..ka {
        for c in 0..nc {
            residence[it.orig[k]][c] += r[k][c];
        }
    }
    let stations = station_results(net, &x, &residence, |_| None);
    let mut curve = Vec::new();
    if nc == 1 {
        curve.push(CurvePoint {
            population: it.pops[0],
            throughput: x[0],
            response_time: stations.iter().map(|s| s.residence[0]).sum(),
            utilization: stations.iter().map(|s| s.utilization).collect(),
            queue: stations.iter().map(|s| s.queue).collect(),
            bounds: bounds(net, 0, it.pops[0]),
        });
    }
    Ok(finish(
        net,
        "Bard-Schweitzer approximate MVA (Seidmann for multi-server stations)",
        false,
        converged,
        iterations,
        &x,
        stations,
        curve,
    ))
}
