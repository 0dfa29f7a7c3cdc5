//! Published networks with known answers, and the stability of load-dependent MVA.

mod common;

use common::{convolution_throughput, single, st};
use perfpilot_model::{MultiServerMethod, SolveOptions, StationKind, solve};

/// Jain, *The Art of Computer Systems Performance Analysis* (1991), Example 35.5: the
/// timesharing system of Example 34.2 with 3 users solved by convolution. Demands: CPU 0.78 s,
/// disk A 2.34 s, disk B 1.56 s; think time 4.68 s. Published: X = 0.264, R = 6.694,
/// U_CPU = 0.206, U_A = 0.618, U_B = 0.412, mean queue at disk A = 0.97.
///
/// The MVA recursion by hand (Q(0) = 0):
///   N=1: R = 0.78+2.34+1.56 = 4.68, X = 1/9.36 = 0.106838, Q = (0.08333, 0.25, 0.16667)
///   N=2: R = (0.845, 2.925, 1.82) Σ=5.59, X = 2/10.27 = 0.194742
///   N=3: R = Σ 6.694177, X = 3/11.374177 = 0.263755, Q_A = 0.968750
#[test]
fn jain_example_35_5_timesharing() {
    let net = single(
        3,
        4.68,
        vec![
            st("cpu", StationKind::Queue, &[0.78]),
            st("disk A", StationKind::Queue, &[2.34]),
            st("disk B", StationKind::Queue, &[1.56]),
        ],
    );
    let sol = solve(&net, &SolveOptions::default()).unwrap();
    let c = &sol.classes[0];
    assert!((c.throughput - 0.264).abs() < 1e-3, "X = {}", c.throughput);
    assert!(
        (c.response_time - 6.694).abs() < 1e-3,
        "R = {}",
        c.response_time
    );
    let u: Vec<f64> = sol
        .stations
        .iter()
        .map(|s| s.utilization.unwrap())
        .collect();
    for (got, want) in u.iter().zip([0.206, 0.618, 0.412]) {
        assert!((got - want).abs() < 1e-3, "U = {got}, want {want}");
    }
    assert!((sol.stations[1].queue - 0.97).abs() < 1e-2);
    // The hand recursion, to 1e-6.
    let x: Vec<f64> = sol.curve.iter().map(|p| p.throughput).collect();
    for (got, want) in x.iter().zip([0.106838, 0.194742, 0.263755]) {
        assert!((got - want).abs() < 1e-6, "X = {got}, want {want}");
    }
    assert!((sol.stations[1].queue - 0.968750).abs() < 1e-6);
    assert_eq!(sol.bottleneck, "disk A");
}

/// A saturated 8-server station at N = 200 must deliver X = 8 / D. The textbook recursion
/// (p(0) = 1 − Σ p(j)) goes negative here.
#[test]
fn saturated_eight_server_station_gives_eight() {
    let net = single(
        200,
        0.0,
        vec![st("cores", StationKind::MultiServer(8), &[1.0])],
    );
    let sol = solve(&net, &SolveOptions::default()).unwrap();
    for p in &sol.curve {
        assert!(p.throughput > 0.0 && p.throughput.is_finite());
        let want = f64::from(p.population.min(8));
        assert!(
            (p.throughput - want).abs() < 1e-9,
            "N={} X={}",
            p.population,
            p.throughput
        );
    }
    // With think time and a second queue the station still saturates at 8.
    let net = single(
        200,
        5.0,
        vec![
            st("cores", StationKind::MultiServer(8), &[1.0]),
            st("disk", StationKind::Queue, &[0.05]),
        ],
    );
    let sol = solve(&net, &SolveOptions::default()).unwrap();
    assert!(
        (sol.classes[0].throughput - 8.0).abs() < 1e-6,
        "{}",
        sol.classes[0].throughput
    );
    for s in &sol.stations {
        assert!(s.queue >= 0.0 && s.residence[0] >= 0.0);
    }
}

/// m = 64, N = 1000: every point of the curve against the log-space convolution algorithm.
#[test]
fn sixty_four_servers_thousand_clients_match_convolution() {
    for z in [0.0, 10.0, 40.0] {
        let net = single(
            1000,
            z,
            vec![
                st("app", StationKind::MultiServer(64), &[1.0]),
                st("db", StationKind::Queue, &[0.01]),
                st("lan", StationKind::Delay, &[0.2]),
            ],
        );
        let sol = solve(&net, &SolveOptions::default()).unwrap();
        let want = convolution_throughput(&net);
        for (p, w) in sol.curve.iter().zip(&want) {
            assert!(
                ((p.throughput - w) / w).abs() < 1e-9,
                "Z={z} N={} X={} convolution={w}",
                p.population,
                p.throughput
            );
        }
        assert!(sol.curve.last().unwrap().throughput <= 64.0 + 1e-9);
    }
}

/// Two multi-server stations and a general load-dependent one (4 sub-networks per level).
#[test]
fn several_load_dependent_stations_match_convolution() {
    let net = single(
        150,
        3.0,
        vec![
            st("a", StationKind::MultiServer(4), &[0.4]),
            st("b", StationKind::MultiServer(16), &[1.5]),
            st(
                "c",
                StationKind::LoadDependent(vec![1.0, 1.7, 2.2, 2.5]),
                &[0.2],
            ),
            st("d", StationKind::Queue, &[0.05]),
        ],
    );
    let sol = solve(&net, &SolveOptions::default()).unwrap();
    let want = convolution_throughput(&net);
    for (p, w) in sol.curve.iter().zip(&want) {
        assert!(
            ((p.throughput - w) / w).abs() < 1e-9,
            "N={} {} vs {w}",
            p.population,
            p.throughput
        );
    }
}

/// Seidmann's approximation is exact for m = 1 and close (not exact) for m > 1.
#[test]
fn seidmann_is_an_approximation() {
    let net = single(
        30,
        2.0,
        vec![
            st("app", StationKind::MultiServer(4), &[0.4]),
            st("db", StationKind::Queue, &[0.08]),
        ],
    );
    let exact = solve(&net, &SolveOptions::default()).unwrap();
    let seid = solve(
        &net,
        &SolveOptions {
            multiserver: MultiServerMethod::Seidmann,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    let (xe, xs) = (exact.classes[0].throughput, seid.classes[0].throughput);
    assert!(((xe - xs) / xe).abs() < 0.05, "exact {xe} seidmann {xs}");
    assert!(
        (xe - xs).abs() > 1e-6,
        "Seidmann should differ from exact for m = 4"
    );
    assert!(seid.method.contains("Seidmann"));
    // Saturation throughput agrees: 4 / 0.4 = 10.
    let big = net.with_populations(&[500]).unwrap();
    let s = solve(
        &big,
        &SolveOptions {
            multiserver: MultiServerMethod::Seidmann,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    assert!((s.classes[0].throughput - 10.0).abs() < 1e-6);
}

/// Replicated multi-server tiers (identical stations share sub-network solutions) against the
/// convolution algorithm; the replicas also get identical results.
#[test]
fn replicated_multiserver_tiers_match_convolution() {
    let base = single(
        120,
        0.5,
        vec![
            st("app", StationKind::MultiServer(4), &[0.3]),
            st("db", StationKind::MultiServer(2), &[0.02]),
        ],
    );
    let net = base.with_replicas("app", 7).unwrap();
    let sol = solve(&net, &SolveOptions::default()).unwrap();
    let want = convolution_throughput(&net);
    for (p, w) in sol.curve.iter().zip(&want) {
        assert!(
            ((p.throughput - w) / w).abs() < 1e-9,
            "N={} {} vs {w}",
            p.population,
            p.throughput
        );
    }
    let q0 = sol.stations[0].queue;
    assert!(
        sol.stations[..7]
            .iter()
            .all(|s| (s.queue - q0).abs() < 1e-9)
    );
}

/// The textbook recursion (p(0|n) = 1 − Σ_{j≥1} p(j|n)) on the same network, to show the test
/// case discriminates: it goes negative and ends with a negative throughput, while the stable
/// solver gives X = 8.
#[test]
fn textbook_recursion_fails_where_the_stable_one_holds() {
    let (m, d, dq, z, n_max) = (8u32, 1.0f64, 0.05f64, 5.0f64, 200u32);
    let mut p = vec![1.0f64];
    let (mut q_queue, mut x, mut went_negative) = (0.0f64, 0.0f64, false);
    for n in 1..=n_max as usize {
        let r: f64 = (1..=n)
            .map(|j| j as f64 / f64::from((j as u32).min(m)) * p[j - 1])
            .sum::<f64>()
            * d;
        let rq = dq * (1.0 + q_queue);
        x = n as f64 / (r + rq + z);
        q_queue = x * rq;
        let mut next = vec![0.0; n + 1];
        for j in 1..=n {
            next[j] = d * x / f64::from((j as u32).min(m)) * p[j - 1];
        }
        next[0] = 1.0 - next[1..].iter().sum::<f64>();
        went_negative |= next.iter().any(|&v| v < 0.0);
        p = next;
    }
    assert!(went_negative && (x - 8.0).abs() > 1.0, "naive X = {x}");
    let net = single(
        n_max,
        z,
        vec![
            st("cores", StationKind::MultiServer(m), &[d]),
            st("disk", StationKind::Queue, &[dq]),
        ],
    );
    let sol = solve(&net, &SolveOptions::default()).unwrap();
    assert!((sol.classes[0].throughput - 8.0).abs() < 1e-6);
}

/// Lazowska et al., *Quantitative System Performance* (1984), the two-class example of § 7.4
/// (p. 142; also the example of the R `queueing` package's multi-class closed network): one
/// customer per class, no think time; class 1 visits (10, 9) with service (1/10, 1/3) s,
/// class 2 visits (5, 4) with service (2/5, 1) s, i.e. demands D1 = (1, 3), D2 = (2, 4).
/// Exact multi-class MVA by hand:
///   (1,0): R = 1 + 3, X1 = 1/4, Q = (1/4, 3/4);  (0,1): R = 2 + 4, X2 = 1/6, Q = (1/3, 2/3)
///   (1,1): class 1: R = 1(1 + 1/3) + 3(1 + 2/3) = 19/3, X1 = 3/19 = 0.157895
///          class 2: R = 2(1 + 1/4) + 4(1 + 3/4) = 19/2, X2 = 2/19 = 0.105263
#[test]
fn lazowska_two_class_example() {
    let net = perfpilot_model::Network::new(
        vec![
            st("cpu", StationKind::Queue, &[1.0, 2.0]),
            st("disk", StationKind::Queue, &[3.0, 4.0]),
        ],
        vec![common::class("1", 1, 0.0), common::class("2", 1, 0.0)],
    )
    .unwrap();
    let sol = solve(&net, &SolveOptions::default()).unwrap();
    assert!((sol.classes[0].throughput - 3.0 / 19.0).abs() < 1e-12);
    assert!((sol.classes[1].throughput - 2.0 / 19.0).abs() < 1e-12);
    assert!((sol.classes[0].response_time - 19.0 / 3.0).abs() < 1e-12);
    assert!((sol.classes[1].response_time - 9.5).abs() < 1e-12);
    // Utilization of the disk: 3·3/19 + 4·2/19 = 17/19.
    assert!((sol.stations[1].busy - 17.0 / 19.0).abs() < 1e-12);
}
