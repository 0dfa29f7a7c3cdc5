//! Property tests over random networks: operational laws, monotonicity, bounds, and the
//! exact solver against an independent log-space convolution.

mod common;

use common::{convolution_throughput, single, st};
use perfpilot_model::{Method, Network, SolveOptions, StationKind, solve};
use proptest::prelude::*;

fn kind() -> impl Strategy<Value = StationKind> {
    prop_oneof![
        Just(StationKind::Delay),
        Just(StationKind::Queue),
        (1u32..9).prop_map(StationKind::MultiServer),
        // Non-decreasing rates (more customers never slow the station down): the class of
        // load-dependent stations for which X is non-decreasing in N.
        (0.5f64..2.0, prop::collection::vec(0.0f64..1.5, 0..4)).prop_map(|(first, steps)| {
            let mut rates = vec![first];
            for s in steps {
                rates.push(rates[rates.len() - 1] + s);
            }
            StationKind::LoadDependent(rates)
        }),
    ]
}

fn network() -> impl Strategy<Value = Network> {
    (
        prop::collection::vec((kind(), 0.01f64..5.0), 1..5),
        1u32..60,
        prop_oneof![Just(0.0), 0.0f64..5.0],
    )
        .prop_map(|(stations, n, z)| {
            let stations = stations
                .into_iter()
                .enumerate()
                .map(|(i, (k, d))| st(&format!("s{i}"), k, &[d]))
                .collect();
            single(n, z, stations)
        })
}

const TOL: f64 = 1e-9;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn laws_monotonicity_and_bounds(net in network()) {
        let sol = solve(&net, &SolveOptions::default()).unwrap();
        let z = net.classes[0].think_time;
        let mut last_x = 0.0;
        for p in &sol.curve {
            let n = f64::from(p.population);
            // ΣQ = N − X·Z (interactive response-time law).
            let sum_q: f64 = p.queue.iter().sum();
            prop_assert!((sum_q - (n - p.throughput * z)).abs() < TOL * n.max(1.0));
            // X non-decreasing in N.
            prop_assert!(p.throughput >= last_x * (1.0 - TOL), "X fell from {} to {}", last_x, p.throughput);
            last_x = p.throughput;
            // Bounds hold.
            let b = p.bounds;
            prop_assert!(p.throughput <= b.throughput_upper * (1.0 + TOL));
            prop_assert!(p.throughput >= b.throughput_lower.unwrap() * (1.0 - TOL));
            prop_assert!(p.response_time >= b.response_lower * (1.0 - TOL) - TOL);
            prop_assert!(p.response_time <= b.response_upper.unwrap() * (1.0 + TOL) + TOL);
            // Utilization within [0, 1] of the capacity; queues non-negative.
            for (k, s) in net.stations.iter().enumerate() {
                prop_assert!(p.queue[k] >= -TOL);
                if let Some(u) = p.utilization[k] {
                    prop_assert!((-TOL..=1.0 + TOL).contains(&u), "{}: U = {}", s.name, u);
                }
                if let Some(m) = s.kind.servers() {
                    prop_assert!(p.throughput * s.demand[0] <= f64::from(m) * (1.0 + TOL));
                }
            }
        }
        // Little's law at every station: Q = X · R.
        let x = sol.classes[0].throughput;
        for s in &sol.stations {
            prop_assert!((s.queue - x * s.residence[0]).abs() < TOL * s.queue.max(1.0));
            prop_assert!(s.busy >= 0.0);
        }
        prop_assert!((sol.classes[0].response_time - sol.stations.iter().map(|s| s.residence[0]).sum::<f64>()).abs() < TOL);
    }

    #[test]
    fn exact_matches_convolution(net in network()) {
        let sol = solve(&net, &SolveOptions::default()).unwrap();
        let want = convolution_throughput(&net);
        for (p, w) in sol.curve.iter().zip(&want) {
            prop_assert!(((p.throughput - w) / w).abs() < 1e-8, "N={} MVA {} convolution {}", p.population, p.throughput, w);
        }
    }

    #[test]
    fn schweitzer_converges_and_keeps_the_laws(
        demands in prop::collection::vec(0.01f64..2.0, 1..6),
        n in 1u32..200,
        z in 0.0f64..5.0,
    ) {
        let stations = demands.iter().enumerate().map(|(i, &d)| st(&format!("q{i}"), StationKind::Queue, &[d])).collect();
        let net = single(n, z, stations);
        let opts = SolveOptions { method: Method::Schweitzer, ..SolveOptions::default() };
        let sol = solve(&net, &opts).unwrap();
        prop_assert!(sol.converged && !sol.exact);
        let x = sol.classes[0].throughput;
        let sum_q: f64 = sol.stations.iter().map(|s| s.queue).sum();
        prop_assert!((sum_q - (f64::from(n) - x * z)).abs() < 1e-6 * f64::from(n));
        prop_assert!(x <= sol.classes[0].bounds.throughput_upper * (1.0 + 1e-9));
        // Within a few per cent of exact for these networks.
        let exact = solve(&net, &SolveOptions::default()).unwrap().classes[0].throughput;
        prop_assert!(((x - exact) / exact).abs() < 0.1, "schweitzer {} exact {}", x, exact);
    }
}

#[test]
fn schweitzer_reports_non_convergence_when_capped() {
    let net = single(
        500,
        1.0,
        vec![
            st("a", StationKind::Queue, &[0.3]),
            st("b", StationKind::Queue, &[0.29]),
        ],
    );
    let opts = SolveOptions {
        method: Method::Schweitzer,
        max_iterations: 2,
        ..SolveOptions::default()
    };
    let sol = solve(&net, &opts).unwrap();
    assert!(!sol.converged);
    assert_eq!(sol.iterations, 2);
}

#[test]
fn multi_class_bounds_and_laws() {
    let net = Network::new(
        vec![
            st("cpu", StationKind::Queue, &[0.2, 0.05]),
            st("disk", StationKind::MultiServer(2), &[0.3, 0.4]),
        ],
        vec![common::class("a", 5, 1.0), common::class("b", 4, 0.0)],
    )
    .unwrap();
    let sol = solve(&net, &SolveOptions::default()).unwrap();
    for (c, cl) in sol.classes.iter().enumerate() {
        let n = f64::from(cl.population);
        let q: f64 = sol.stations.iter().map(|s| s.queue_per_class[c]).sum();
        assert!((q - (n - cl.throughput * cl.think_time)).abs() < 1e-9);
        assert!(cl.throughput <= cl.bounds.throughput_upper + 1e-12);
        assert!(cl.bounds.throughput_lower.is_none());
    }
    assert!(sol.curve.is_empty());
}

#[test]
fn multi_class_schweitzer_is_close_to_exact() {
    let net = Network::new(
        vec![
            st("cpu", StationKind::Queue, &[0.05, 0.02]),
            st("disk", StationKind::Queue, &[0.04, 0.08]),
            st("app", StationKind::MultiServer(4), &[0.1, 0.1]),
            st("lan", StationKind::Delay, &[0.01, 0.01]),
        ],
        vec![common::class("a", 30, 1.0), common::class("b", 20, 2.0)],
    )
    .unwrap();
    let exact = solve(&net, &SolveOptions::default()).unwrap();
    let approx = solve(
        &net,
        &SolveOptions {
            method: Method::Schweitzer,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    assert!(approx.converged && approx.iterations > 1);
    for (e, a) in exact.classes.iter().zip(&approx.classes) {
        assert!(
            ((e.throughput - a.throughput) / e.throughput).abs() < 0.05,
            "{}: exact {} schweitzer {}",
            e.name,
            e.throughput,
            a.throughput
        );
    }
}
