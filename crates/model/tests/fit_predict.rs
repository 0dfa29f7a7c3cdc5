//! Fitting, prediction, validation and cost ranking, including the Trade example file.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{class, single, st};
use perfpilot_model::{
    Configuration, LoadPoint, ModelError, ModelFile, SolveOptions, StationKind, fit, predict,
    rank_by_cost, solve, validate,
};

fn point(
    label: &str,
    clients: u32,
    z: f64,
    x: f64,
    r: Option<f64>,
    u: &[(&str, f64)],
) -> LoadPoint {
    LoadPoint {
        label: label.into(),
        clients,
        think_time: z,
        throughput: x,
        response_time: r,
        utilization: u.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        cores: BTreeMap::new(),
    }
}

/// Measurements generated from a known network are fitted back exactly, and the model then
/// predicts the other points with zero error.
#[test]
fn fit_recovers_known_demands() {
    let truth = single(
        10,
        0.5,
        vec![
            st("app", StationKind::MultiServer(4), &[0.08]),
            st("db", StationKind::Queue, &[0.03]),
        ],
    );
    let exact = solve(
        &truth.with_populations(&[80]).unwrap(),
        &SolveOptions::default(),
    )
    .unwrap();
    let points: Vec<LoadPoint> = [10u32, 20, 40, 80]
        .iter()
        .map(|&n| {
            let p = &exact.curve[n as usize - 1];
            point(
                &format!("{n}"),
                n,
                0.5,
                p.throughput,
                Some(p.response_time),
                &[("app", p.throughput * 0.08), ("db", p.throughput * 0.03)],
            )
        })
        .collect();
    let skeleton = vec![
        st("app", StationKind::MultiServer(4), &[]),
        st("db", StationKind::Queue, &[]),
    ];
    let rep = fit(&skeleton, &class("c", 10, 0.0), &points).unwrap();
    assert!((rep.demands[0].demand - 0.08).abs() < 1e-12);
    assert!((rep.demands[1].demand - 0.03).abs() < 1e-12);
    assert_eq!(rep.demands[0].points, 4);
    assert!(rep.rms_relative_residual < 1e-12);
    for c in &rep.response_law {
        assert!(c.error_pct.unwrap().abs() < 1e-9, "{c:?}");
        assert!(!c.demands_exceed_response);
    }
    assert!((rep.network.classes[0].think_time - 0.5).abs() < 1e-12);
    let v = validate(&rep.network, &points, &[], &SolveOptions::default()).unwrap();
    assert!(v.max_abs_response_error_pct < 1e-6 && v.max_abs_throughput_error_pct < 1e-6);
}

/// Inconsistent points: the least-squares demand and its residuals, by hand.
/// D = (10·1 + 20·3) / (10² + 20²) = 70 / 500 = 0.14; residuals 1 − 1.4 = −0.4, 3 − 2.8 = 0.2.
#[test]
fn least_squares_across_points_reports_residuals() {
    let pts = [
        point("a", 5, 1.0, 10.0, Some(0.4), &[("cpu", 1.0)]),
        point("b", 30, 1.0, 20.0, None, &[("cpu", 3.0)]),
    ];
    let rep = fit(
        &[st("cpu", StationKind::MultiServer(4), &[])],
        &class("c", 5, 0.0),
        &pts,
    )
    .unwrap();
    assert!((rep.demands[0].demand - 0.14).abs() < 1e-12);
    assert!((rep.residuals[0].residual + 0.4).abs() < 1e-12);
    assert!((rep.residuals[1].residual - 0.2).abs() < 1e-12);
    // Response-time law: point a: N/X − Z = 5/10 − 1 = −0.5 → impossible, flagged; error %.
    let a = &rep.response_law[0];
    assert!((a.law_response + 0.5).abs() < 1e-12);
    assert!(a.demands_exceed_response);
    // b: 30/20 − 1 = 0.5 ≥ 0.14.
    assert!(!rep.response_law[1].demands_exceed_response);
    assert!(rep.response_law[1].error_pct.is_none());
}

#[test]
fn zero_utilization_everywhere_is_a_station_no_class_visits() {
    let e = fit(
        &[st("idle", StationKind::Queue, &[])],
        &class("c", 5, 0.0),
        &[point("p", 5, 1.0, 3.0, None, &[("idle", 0.0)])],
    )
    .unwrap_err();
    assert_eq!(
        e,
        ModelError::NotVisited {
            station: "idle".into()
        }
    );
}

#[test]
fn replicas_split_the_demand_and_raise_capacity() {
    let net = single(
        40,
        0.0,
        vec![
            st("app", StationKind::MultiServer(2), &[0.1]),
            st("db", StationKind::Queue, &[0.01]),
        ],
    );
    let r = net.with_replicas("app", 4).unwrap();
    assert_eq!(r.stations.len(), 5);
    assert_eq!(r.stations[0].name, "app#1");
    assert!((r.stations[3].demand[0] - 0.025).abs() < 1e-15);
    let rows = predict(
        &net,
        &[10, 40],
        Some(("app", &[1, 4])),
        &SolveOptions::default(),
    )
    .unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!((rows[0].replicas, rows[0].clients), (1, 10));
    // One node saturates at 2 / 0.1 = 20/s; four nodes at 2 / 0.025 = 80/s each (db: 100/s).
    assert!(
        (rows[1].throughput - 20.0).abs() < 1e-3,
        "{}",
        rows[1].throughput
    );
    assert_eq!(rows[1].bottleneck, "app");
    assert!(
        rows[3].throughput > 60.0 && rows[3].throughput <= 80.0,
        "{}",
        rows[3].throughput
    );
    assert_eq!(rows[3].bottleneck, "app#1");
    assert!(predict(&net, &[0], None, &SolveOptions::default()).is_err());
    assert!(net.with_replicas("nosuch", 2).is_err());
}

#[test]
fn cost_ranking_orders_by_throughput_per_cost() {
    let net = single(
        100,
        0.0,
        vec![
            st("app", StationKind::MultiServer(4), &[0.04]),
            st("db", StationKind::MultiServer(4), &[0.01]),
        ],
    );
    let prices: BTreeMap<String, f64> =
        [("app".to_string(), 10_000.0), ("db".to_string(), 10_000.0)].into();
    let configs = vec![
        Configuration {
            name: "1 app".into(),
            ..Default::default()
        },
        Configuration {
            name: "3 app".into(),
            replicas: [("app".to_string(), 3)].into(),
            ..Default::default()
        },
        Configuration {
            name: "scale-up 16 cores".into(),
            servers: [("app".to_string(), 16)].into(),
            price: Some(90_000.0),
            ..Default::default()
        },
    ];
    let rows = rank_by_cost(&net, &configs, &prices, 100, &SolveOptions::default()).unwrap();
    // 1 app: X = 100/s for 20k; 3 app: ~300/s for 40k; scale-up: ~400/s for 90k.
    assert_eq!(rows[0].name, "3 app");
    assert_eq!(rows[1].name, "1 app");
    assert_eq!(rows[2].name, "scale-up 16 cores");
    assert!((rows[1].cost - 20_000.0).abs() < 1e-9);
    assert!(
        rows.windows(2)
            .all(|w| w[0].throughput_per_kcost >= w[1].throughput_per_kcost)
    );
    let bad = vec![Configuration {
        name: "x".into(),
        ..Default::default()
    }];
    assert!(rank_by_cost(&net, &bad, &BTreeMap::new(), 100, &SolveOptions::default()).is_err());
}

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/models")
        .join(name)
}

/// The Trade example: demands fitted from Table 2's point, validated at that point.
#[test]
fn trade_example_fits_and_validates() {
    let file = ModelFile::from_path(&example("trade.toml")).unwrap();
    let (net, report) = file.resolved().unwrap();
    let report = report.expect("the Trade file fits its demands");
    // Utilization law: 3.992 / 1117.4 and 0.76 / 1117.4.
    assert!((report.demands[0].demand - 3.992 / 1117.4).abs() < 1e-12);
    assert!((report.demands[1].demand - 0.76 / 1117.4).abs() < 1e-12);
    let v = validate(
        &net,
        &file.measurements,
        &["20 clients (Table 2)".into()],
        &SolveOptions::default(),
    )
    .unwrap();
    assert_eq!(v.rows.len(), 1);
    assert!(v.rows[0].fitted && v.rows[0].response_derived);
    assert!(
        v.max_abs_throughput_error_pct < 1.0,
        "{}",
        v.max_abs_throughput_error_pct
    );
    assert!(v.max_abs_response_error_pct < 1.0);
    let rows = predict(&net, &[160], None, &SolveOptions::default()).unwrap();
    // Saturated WAS tier: X → 4 / D_was.
    assert!((rows[0].throughput - 4.0 / (3.992 / 1117.4)).abs() < 1e-6);
}

#[test]
fn every_example_loads_and_solves() {
    for name in ["trade.toml", "three-tier.toml", "two-classes.json"] {
        let file = ModelFile::from_path(&example(name)).unwrap();
        let (net, _) = file.resolved().unwrap();
        let sol = solve(&net, &file.solver).unwrap();
        assert!(sol.classes.iter().all(|c| c.throughput > 0.0), "{name}");
        // TOML and JSON round trips of the file itself.
        let again = ModelFile::parse_toml(&file.to_toml().unwrap()).unwrap();
        assert_eq!(again, file, "{name} TOML round trip");
        let again = ModelFile::parse_json(&file.to_json().unwrap()).unwrap();
        assert_eq!(again, file, "{name} JSON round trip");
    }
}

#[test]
fn curve_can_be_left_out_without_changing_results() {
    let net = single(
        50,
        1.0,
        vec![
            st("a", StationKind::Queue, &[0.05]),
            st("b", StationKind::MultiServer(2), &[0.08]),
        ],
    );
    let full = solve(&net, &SolveOptions::default()).unwrap();
    let opts = SolveOptions {
        curve: false,
        ..SolveOptions::default()
    };
    let bare = solve(&net, &opts).unwrap();
    assert_eq!(full.curve.len(), 50);
    assert!(bare.curve.is_empty());
    assert_eq!(full.classes, bare.classes);
    // Prediction still works when the options say no curve.
    let rows = predict(&net, &[10, 50], None, &opts).unwrap();
    assert!((rows[1].throughput - full.classes[0].throughput).abs() < 1e-12);
}
