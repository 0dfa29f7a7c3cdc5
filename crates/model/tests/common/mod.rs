//! Helpers shared by the integration tests.
#![allow(dead_code)]

use perfpilot_model::{Class, Discipline, Network, Station, StationKind};

pub fn st(name: &str, kind: StationKind, demand: &[f64]) -> Station {
    Station {
        name: name.into(),
        kind,
        discipline: Discipline::Ps,
        demand: demand.to_vec(),
    }
}

pub fn class(name: &str, n: u32, z: f64) -> Class {
    Class::closed(name, n, z)
}

pub fn single(n: u32, z: f64, stations: Vec<Station>) -> Network {
    Network::new(stations, vec![class("c", n, z)]).expect("valid test network")
}

/// log-sum-exp of two log values.
pub fn lse(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY {
        return b;
    }
    if b == f64::NEG_INFINITY {
        return a;
    }
    let m = a.max(b);
    m + ((a - m).exp() + (b - m).exp()).ln()
}

/// Independent reference: single-class throughput X(1..=N) by the convolution algorithm in
/// log space (Buzen), for any mix of delay / queue / multi-server / load-dependent stations.
pub fn convolution_throughput(net: &Network) -> Vec<f64> {
    let n = net.classes[0].population as usize;
    let z = net.classes[0].think_time;
    // log G over populations 0..=n; start with the think time as a delay.
    let mut log_g: Vec<f64> = (0..=n)
        .map(|j| {
            if z > 0.0 {
                j as f64 * z.ln() - ln_factorial(j)
            } else if j == 0 {
                0.0
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect();
    for s in &net.stations {
        let d = s.demand[0];
        let mut log_f = vec![0.0; n + 1];
        for j in 1..=n {
            log_f[j] = log_f[j - 1] + d.ln() - s.kind.rate(j as u32).ln();
        }
        let mut next = vec![f64::NEG_INFINITY; n + 1];
        for (t, out) in next.iter_mut().enumerate() {
            for j in 0..=t {
                *out = lse(*out, log_f[j] + log_g[t - j]);
            }
        }
        log_g = next;
    }
    (1..=n).map(|t| (log_g[t - 1] - log_g[t]).exp()).collect()
}

pub fn ln_factorial(j: usize) -> f64 {
    (1..=j).map(|i| (i as f64).ln()).sum()
}

/// An exponentially distributed draw with the given mean, from the shared seeded generator.
pub fn exp_draw(rng: &mut perfpilot_stats::Rng, mean: f64) -> f64 {
    -mean * rng.next_f64().ln()
}
