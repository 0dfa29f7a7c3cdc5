//! Two classes of very different service times at one FCFS server (a thread pool taking
//! requests in arrival order), against a discrete-event simulation: the FCFS heuristic of the
//! exact recursion and of Bard–Schweitzer predicts each class's throughput, where processor
//! sharing lets the short requests pass the long ones and overstates them several times.

mod common;

use std::collections::VecDeque;

use common::exp_draw;
use perfpilot_model::{
    Class, Discipline, Method, Network, SolveOptions, Station, StationKind, solve,
};
use perfpilot_stats::Rng;

/// Closed classes `(users, think)`: think (exponential), then one FCFS server with
/// exponential service of mean `service[c]`. Per class throughput after a warm-up.
fn simulate(classes: &[(u32, f64)], service: &[f64], completions: u64) -> Vec<f64> {
    let mut rng = Rng::new(0x5EED_FCF5_0000_0002);
    // Customers thinking: (wake time, class).
    let mut thinking: Vec<(f64, usize)> = Vec::new();
    for (c, &(n, z)) in classes.iter().enumerate() {
        for _ in 0..n {
            thinking.push((exp_draw(&mut rng, z), c));
        }
    }
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut in_service: Option<(f64, usize)> = None;
    let (mut done, mut t0) = (0u64, 0.0);
    let warm = completions / 10;
    let mut counted = vec![0u64; classes.len()];
    loop {
        // The next event: a wake-up or the service's end.
        let (i, wake) = thinking
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.0.total_cmp(&b.1.0))
            .map(|(i, t)| (i, t.0))
            .unwrap_or((usize::MAX, f64::INFINITY));
        let end = in_service.map_or(f64::INFINITY, |s| s.0);
        let now = wake.min(end);
        if wake <= end {
            let (_, c) = thinking.swap_remove(i);
            queue.push_back(c);
        } else if let Some((_, c)) = in_service.take() {
            done += 1;
            if done == warm {
                t0 = now;
            } else if done > warm {
                counted[c] += 1;
            }
            if done >= warm + completions {
                return counted.iter().map(|&k| k as f64 / (now - t0)).collect();
            }
            thinking.push((now + exp_draw(&mut rng, classes[c].1), c));
        }
        if in_service.is_none()
            && let Some(c) = queue.pop_front()
        {
            in_service = Some((now + exp_draw(&mut rng, service[c]), c));
        }
    }
}

fn network(classes: &[(u32, f64)], service: &[f64], discipline: Discipline) -> Network {
    Network::new(
        vec![Station {
            name: "pool".into(),
            kind: StationKind::Queue,
            discipline,
            demand: service.to_vec(),
        }],
        classes
            .iter()
            .enumerate()
            .map(|(c, &(n, z))| Class::closed(&format!("c{c}"), n, z))
            .collect(),
    )
    .expect("a valid network")
}

fn throughputs(net: &Network, method: Method) -> Vec<f64> {
    let opts = SolveOptions {
        method,
        curve: false,
        ..SolveOptions::default()
    };
    solve(net, &opts)
        .expect("solved")
        .classes
        .iter()
        .map(|c| c.throughput)
        .collect()
}

#[test]
fn short_requests_behind_long_ones_at_an_fcfs_pool_are_predicted_by_the_fcfs_heuristic() {
    // The capacity run's app tier: scoring at 21.5 ms and lookups at 0.5 ms of a 0.4-core
    // quota, a 2.4 ms path outside it (docs/capacity.md).
    let service = [0.0215, 0.0005];
    for users in [1, 2, 4, 8] {
        let classes = [(users, 0.0024), (users, 0.0024)];
        let sim = simulate(&classes, &service, 400_000);
        let fcfs = network(&classes, &service, Discipline::Fcfs);
        let ps = network(&classes, &service, Discipline::Ps);
        for method in [Method::Exact, Method::Schweitzer] {
            let x = throughputs(&fcfs, method);
            let err: Vec<f64> = (0..2).map(|c| x[c] / sim[c] - 1.0).collect();
            let say = format!(
                "{users} users, {method:?}: FCFS heuristic {x:.1?} against simulated {sim:.1?} req/s"
            );
            assert!(err[0].abs() < 0.05, "the long class: {say}");
            // The short class's wait is overstated at low load (an arriving lookup is taken to
            // find the long request's whole service ahead): -33 % at 1 user each, -4 % at 8.
            if users >= 4 {
                assert!(err[1].abs() < 0.10, "the short class: {say}");
            } else {
                assert!((-0.40..0.0).contains(&err[1]), "the short class: {say}");
            }
        }
        // Processor sharing lets the lookups pass: several times the simulated rate.
        let x = throughputs(&ps, Method::Exact);
        assert!(
            x[1] > 1.5 * sim[1],
            "{users} users: PS lookups {:.1} against simulated {:.1} req/s",
            x[1],
            sim[1]
        );
    }
}

#[test]
fn with_one_demand_for_every_class_fcfs_is_solved_exactly_like_ps() {
    let classes = [(3, 0.01), (2, 0.02)];
    let service = [0.005, 0.005];
    let f = solve(
        &network(&classes, &service, Discipline::Fcfs),
        &SolveOptions::default(),
    )
    .expect("solved");
    let p = solve(
        &network(&classes, &service, Discipline::Ps),
        &SolveOptions::default(),
    )
    .expect("solved");
    assert!(f.exact, "{}", f.method);
    assert_eq!(f.method, "exact MVA");
    for (a, b) in f.classes.iter().zip(&p.classes) {
        assert!((a.throughput - b.throughput).abs() < 1e-12);
    }
    let d = solve(
        &network(&classes, &[0.005, 0.02], Discipline::Fcfs),
        &SolveOptions::default(),
    )
    .expect("solved");
    assert!(!d.exact);
    assert_eq!(
        d.method,
        "exact MVA recursion, FCFS heuristic for class-dependent demands"
    );
}
