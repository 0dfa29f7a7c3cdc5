//! The exact solvers against the continuous-time Markov chain of the same network, built
//! state by state and solved directly (Gaussian elimination) for small populations.
//!
//! Routing: class c leaves any station for a station it visits (think time counting as one),
//! chosen uniformly, so every visited station has visit ratio 1 and service time = demand.
//! Stations serve by processor sharing with the total-population rate α(n) (product form).

#![allow(clippy::needless_range_loop)]

mod common;

use std::collections::HashMap;

use common::{class, st};
use perfpilot_model::{Network, SolveOptions, StationKind, solve};

struct Chain {
    throughput: Vec<f64>,
    /// queue[k][c] for the declared stations.
    queue: Vec<Vec<f64>>,
}

fn compositions(n: u32, slots: usize) -> Vec<Vec<u32>> {
    if slots == 1 {
        return vec![vec![n]];
    }
    let mut out = Vec::new();
    for first in 0..=n {
        for mut rest in compositions(n - first, slots - 1) {
            rest.insert(0, first);
            out.push(rest);
        }
    }
    out
}

fn solve_ctmc(net: &Network) -> Chain {
    let nc = net.classes.len();
    let k = net.stations.len();
    let ks = k + 1; // last slot = think (a delay)
    // Stations each class visits (think included when Z > 0).
    let visits: Vec<Vec<usize>> = (0..nc)
        .map(|c| {
            let mut v: Vec<usize> = (0..k)
                .filter(|&s| net.stations[s].demand[c] > 0.0)
                .collect();
            if net.classes[c].think_time > 0.0 {
                v.push(k);
            }
            v
        })
        .collect();
    let service = |s: usize, c: usize| {
        if s == k {
            net.classes[c].think_time
        } else {
            net.stations[s].demand[c]
        }
    };
    // States: counts[s * nc + c].
    let mut per_class: Vec<Vec<Vec<u32>>> = Vec::new();
    for c in 0..nc {
        per_class.push(compositions(net.classes[c].population, visits[c].len()));
    }
    let mut states: Vec<Vec<u32>> = vec![vec![0; ks * nc]];
    for c in 0..nc {
        let mut next = Vec::new();
        for base in &states {
            for comp in &per_class[c] {
                let mut s = base.clone();
                for (i, &slot) in visits[c].iter().enumerate() {
                    s[slot * nc + c] = comp[i];
                }
                next.push(s);
            }
        }
        states = next;
    }
    let index: HashMap<Vec<u32>, usize> = states
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, s)| (s, i))
        .collect();
    let n = states.len();
    // rate of class c completing at slot s in state st.
    let rate = |st: &[u32], s: usize, c: usize| -> f64 {
        let nkc = st[s * nc + c];
        if nkc == 0 {
            return 0.0;
        }
        let nk: u32 = (0..nc).map(|d| st[s * nc + d]).sum();
        let kind = if s == k {
            StationKind::Delay
        } else {
            net.stations[s].kind.clone()
        };
        kind.rate(nk) * f64::from(nkc) / f64::from(nk) / service(s, c)
    };
    // Generator, transposed: a[to][from].
    let mut a = vec![vec![0.0; n]; n];
    for (i, stt) in states.iter().enumerate() {
        for c in 0..nc {
            for &s in &visits[c] {
                let r = rate(stt, s, c);
                if r == 0.0 {
                    continue;
                }
                let p = 1.0 / visits[c].len() as f64;
                for &t in &visits[c] {
                    if t == s {
                        continue; // a self-loop changes nothing
                    }
                    let mut to = stt.clone();
                    to[s * nc + c] -= 1;
                    to[t * nc + c] += 1;
                    let j = index[&to];
                    a[j][i] += r * p;
                    a[i][i] -= r * p;
                }
            }
        }
    }
    // Replace the last equation by Σ π = 1 and solve.
    let mut b = vec![0.0; n];
    a[n - 1] = vec![1.0; n];
    b[n - 1] = 1.0;
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))
            .unwrap();
        a.swap(col, piv);
        b.swap(col, piv);
        for row in 0..n {
            if row != col && a[row][col] != 0.0 {
                let f = a[row][col] / a[col][col];
                for x in col..n {
                    a[row][x] -= f * a[col][x];
                }
                b[row] -= f * b[col];
            }
        }
    }
    let pi: Vec<f64> = (0..n).map(|i| b[i] / a[i][i]).collect();
    let mut throughput = vec![0.0; nc];
    let mut queue = vec![vec![0.0; nc]; k];
    for (i, stt) in states.iter().enumerate() {
        for c in 0..nc {
            // Throughput = completions at one visited slot (visit ratio 1).
            let s0 = visits[c][0];
            throughput[c] += pi[i] * rate(stt, s0, c);
            for (s, q) in queue.iter_mut().enumerate() {
                q[c] += pi[i] * f64::from(stt[s * nc + c]);
            }
        }
    }
    Chain { throughput, queue }
}

fn compare(net: &Network) {
    let chain = solve_ctmc(net);
    let sol = solve(net, &SolveOptions::default()).unwrap();
    for (c, cl) in sol.classes.iter().enumerate() {
        let want = chain.throughput[c];
        assert!(
            ((cl.throughput - want) / want).abs() < 1e-8,
            "class {c}: MVA X = {}, CTMC X = {want}",
            cl.throughput
        );
    }
    for (k, s) in sol.stations.iter().enumerate() {
        for c in 0..net.classes.len() {
            let want = chain.queue[k][c];
            assert!(
                (s.queue_per_class[c] - want).abs() < 1e-8,
                "station {} class {c}: MVA Q = {}, CTMC Q = {want}",
                s.name,
                s.queue_per_class[c]
            );
        }
    }
}

#[test]
fn single_class_queues_and_delay() {
    let net = Network::new(
        vec![
            st("cpu", StationKind::Queue, &[0.3]),
            st("disk", StationKind::Queue, &[0.5]),
            st("net", StationKind::Delay, &[0.2]),
        ],
        vec![class("c", 6, 1.5)],
    )
    .unwrap();
    compare(&net);
}

#[test]
fn single_class_multiserver_and_load_dependent() {
    for n in 1..=7 {
        let net = Network::new(
            vec![
                st("app", StationKind::MultiServer(3), &[0.9]),
                st("db", StationKind::Queue, &[0.25]),
                st(
                    "ld",
                    StationKind::LoadDependent(vec![1.0, 1.5, 1.8]),
                    &[0.3],
                ),
            ],
            vec![class("c", n, 0.7)],
        )
        .unwrap();
        compare(&net);
    }
}

#[test]
fn saturated_multiserver_without_think_time() {
    let net = Network::new(
        vec![
            st("app", StationKind::MultiServer(2), &[1.0]),
            st("db", StationKind::Queue, &[0.1]),
        ],
        vec![class("c", 8, 0.0)],
    )
    .unwrap();
    compare(&net);
}

#[test]
fn two_classes_exact_multiclass_mva() {
    let net = Network::new(
        vec![
            st("cpu", StationKind::Queue, &[0.2, 0.05]),
            st("disk", StationKind::Queue, &[0.1, 0.4]),
            st("lan", StationKind::Delay, &[0.05, 0.0]),
        ],
        vec![class("a", 3, 1.0), class("b", 2, 0.5)],
    )
    .unwrap();
    compare(&net);
}

#[test]
fn two_classes_with_multiserver_station() {
    let net = Network::new(
        vec![
            st("app", StationKind::MultiServer(2), &[0.6, 0.3]),
            st("db", StationKind::Queue, &[0.1, 0.2]),
            st("only a", StationKind::Queue, &[0.15, 0.0]),
        ],
        vec![class("a", 3, 0.8), class("b", 3, 0.0)],
    )
    .unwrap();
    compare(&net);
}
