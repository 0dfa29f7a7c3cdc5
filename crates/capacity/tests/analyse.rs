//! Fitting a measured run: a point that did not settle is replaced by the next load of its
//! sweep, and a class that no fit point measured is reported, not a failure of the whole run.

use std::collections::BTreeMap;
use std::path::Path;

use perfpilot_capacity::run::SweepResult;
use perfpilot_capacity::sweep::{ClassResult, Point};
use perfpilot_capacity::variation::Repeats;
use perfpilot_capacity::{Capacity, Measured, analyse, analyse_measured, report};
use perfpilot_model::TierModel;
use perfpilot_model::tiered::FittedTier;

const FILE: &str = r#"
name = "two classes (synthetic)"
[[tier]]
name = "db"
kind = "postgres"
cpu_quota = 0.5
[[tier]]
name = "app"
kind = "command"
command = "app --port {port}"
cpu_quota = 0.4
[[tier]]
name = "proxy"
kind = "nginx"
upstream = "app"
cores = 1
[[class]]
name = "score"
path = "/score"
[[class]]
name = "lookup"
path = "/lookup"
[[sweep]]
name = "no think"
users = [1, 2, 4, 8]
[[sweep]]
name = "lookup only"
users = [1, 4]
mix = { lookup = 1 }
"#;

/// The run a known model produces; `unsteady` points are marked as not settled.
fn run(cap: &Capacity, unsteady: &[&str]) -> Vec<SweepResult> {
    let tier = |n: &str, c: f64, d: [f64; 2]| FittedTier {
        name: n.into(),
        cores: c,
        demand: d.to_vec(),
        discipline: Default::default(),
    };
    let truth = TierModel {
        classes: vec!["score".into(), "lookup".into()],
        tiers: vec![
            tier("db", 0.5, [0.0015, 0.003]),
            tier("app", 0.4, [0.0077, 0.0002]),
            tier("proxy", 1.0, [0.000_1, 0.000_1]),
            tier("driver", 1.0, [0.000_08, 0.000_08]),
        ],
        path_delay: 0.000_2,
        outside_latency: vec![0.0, 0.0],
        fitted_from: Vec::new(),
        residuals: Vec::new(),
        notes: Vec::new(),
    };
    cap.file
        .sweep
        .iter()
        .map(|s| {
            let points = s
                .users
                .iter()
                .map(|&u| {
                    let load: Vec<(String, u32, f64)> = cap
                        .class_users(s, u)
                        .into_iter()
                        .map(|(c, n)| (c, n, 0.0))
                        .collect();
                    let p = truth.predict(&load, &s.instances).unwrap();
                    let label = Capacity::label(&s.name, u);
                    Point {
                        steady: Some(!unsteady.contains(&label.as_str())),
                        label,
                        users: u,
                        classes: p
                            .classes
                            .iter()
                            .map(|(class, x, r)| ClassResult {
                                class: class.clone(),
                                users: load.iter().find(|l| &l.0 == class).map_or(0, |l| l.1),
                                think_time: 0.0,
                                throughput: *x,
                                response_time: *r,
                                p99: None,
                                errors: 0,
                                first_error: None,
                            })
                            .collect(),
                        busy: p.busy.clone(),
                        other_busy: Some(0.0),
                        throttled: BTreeMap::new(),
                        truncate_s: 0,
                        rounds: Vec::new(),
                    }
                })
                .collect();
            SweepResult {
                name: s.name.clone(),
                think_time: 0.0,
                instances: s.instances.clone(),
                second_host: s.second_host.clone(),
                points,
                failed: Vec::new(),
                curve: Vec::new(),
                knee_users: None,
                bottleneck: String::new(),
            }
        })
        .collect()
}

/// The file fitted from the lowest point of each class (two of the first sweep), with `more`
/// added to its `[capacity]`.
fn fitted_from_the_lowest(more: &str) -> Capacity {
    Capacity::parse(
        &format!(
            "{FILE}[capacity]\nfit = [\"no think: 1\", \"no think: 2\", \"lookup only: 1\"]\n{more}"
        ),
        Path::new("two.toml"),
    )
    .unwrap()
}

/// The point labelled `label` in `sweeps`, to change.
fn point_mut<'a>(sweeps: &'a mut [SweepResult], label: &str) -> &'a mut Point {
    sweeps
        .iter_mut()
        .flat_map(|s| s.points.iter_mut())
        .find(|p| p.label == label)
        .unwrap()
}

#[test]
fn an_unsettled_fit_point_is_replaced_by_the_next_load_of_its_sweep() {
    let cap = fitted_from_the_lowest("");
    let r = analyse(&cap, run(&cap, &["no think: 1", "lookup only: 1"]), vec![]).unwrap();
    let fitted: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.fitted)
        .map(|c| c.label.as_str())
        .collect();
    assert_eq!(fitted, ["no think: 2", "no think: 4", "lookup only: 4"]);
    assert!(
        r.notes.iter().any(|n| n
            == "lookup only: 1: not used for fitting: the throughput did not reach a steady state (MSER); fitted from lookup only: 4 instead"),
        "{:#?}",
        r.notes
    );
    // Every point, the unsettled ones too, is predicted from the known model's own numbers.
    assert_eq!(r.checks.len(), 6);
    for c in &r.checks {
        assert!(c.throughput_error_pct.abs() < 0.5, "{c:?}");
    }
}

#[test]
fn a_class_without_a_fit_point_is_reported_and_the_rest_is_still_analysed() {
    // The default fit: the two lowest points of the first sweep, which has no lookups.
    let cap = Capacity::parse(FILE, Path::new("two.toml")).unwrap();
    let r = analyse(&cap, run(&cap, &[]), vec![]).unwrap();
    assert_eq!(r.checks.len(), 4, "the lookup points are not predicted");
    assert!(
        r.notes.iter().any(|n| n
            == "lookup only: 4: not predicted: class `lookup` has no fitted demand (no point it was measured at was used for fitting)"),
        "{:#?}",
        r.notes
    );
    let lookups = r.sweeps.iter().find(|s| s.name == "lookup only").unwrap();
    assert!(lookups.curve.is_empty());
}

#[test]
fn two_unsettled_fit_points_of_one_sweep_get_two_different_stand_ins() {
    let cap = Capacity::parse(FILE, Path::new("two.toml")).unwrap();
    let r = analyse(&cap, run(&cap, &["no think: 1", "no think: 2"]), vec![]).unwrap();
    let fitted: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.fitted)
        .map(|c| c.label.as_str())
        .collect();
    assert_eq!(fitted, ["no think: 4", "no think: 8"]);
}

#[test]
fn when_no_point_settled_the_wanted_ones_are_fitted_from_with_a_note() {
    let cap = Capacity::parse(FILE, Path::new("two.toml")).unwrap();
    let all = [
        "no think: 1",
        "no think: 2",
        "no think: 4",
        "no think: 8",
        "lookup only: 1",
        "lookup only: 4",
    ];
    let r = analyse(&cap, run(&cap, &all), vec![]).unwrap();
    let fitted: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.fitted)
        .map(|c| c.label.as_str())
        .collect();
    assert_eq!(fitted, ["no think: 1", "no think: 2"]);
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("no think: 1: fitted from although it did not settle")),
        "{:#?}",
        r.notes
    );
}

#[test]
fn a_held_out_point_whose_bottleneck_used_more_cpu_per_request_is_named_in_a_note() {
    let cap = fitted_from_the_lowest("");
    let mut sweeps = run(&cap, &[]);
    // At 8 users the app, saturated, served a fifth fewer requests on the same busy cores:
    // 1.25 times the CPU per request the fit found.
    let p = point_mut(&mut sweeps, "no think: 8");
    for c in &mut p.classes {
        c.throughput /= 1.25;
    }
    let r = analyse(&cap, sweeps, vec![]).unwrap();
    let drift: Vec<&String> = r
        .notes
        .iter()
        .filter(|n| n.starts_with("the demand moved"))
        .collect();
    assert_eq!(drift.len(), 1, "{:#?}", r.notes);
    assert!(
        drift[0].contains("the app tier") && drift[0].contains("no think: 8 ×1.25"),
        "{}",
        drift[0]
    );
    // The points the model produced itself are not named.
    assert!(!drift[0].contains("no think: 4"), "{}", drift[0]);
}

#[test]
fn a_run_with_repeats_reports_the_spread_of_the_repeated_point_beside_the_held_out_errors() {
    let cap = fitted_from_the_lowest("repeat = 5\n");
    assert_eq!(cap.repeat_point(), Some((0, 1)));
    let sweeps = run(&cap, &[]);
    // The same load measured five more times: ×0.9 and ×1.1 lie 10 % from the mean (1.0).
    let first = sweeps[0].points[0].clone();
    let points = [1.0, 0.9, 1.1, 1.02, 0.98]
        .iter()
        .map(|f| {
            let mut p = first.clone();
            for c in &mut p.classes {
                c.throughput *= f;
            }
            p
        })
        .collect();
    let m = Measured {
        machine: vec![],
        sweeps,
        elapsed_s: 12.0,
        repeats: Some(Repeats {
            label: first.label.clone(),
            points,
        }),
    };
    let r = analyse_measured(&cap, m).unwrap();
    assert_eq!(r.elapsed_s, 12.0);
    let md = report::to_markdown(&r);
    assert!(
        md.contains("Throughput within ±5 % at 3 of 3 held-out points."),
        "{md}"
    );
    assert!(
        md.contains("Repeatability: `no think: 1` measured 5 more times in a row")
            && md.contains("cv 7.2 %")
            && md.contains("3 of 5 single measurements lie within ±5 % of their mean")
            && md.contains("The sweep's own measurement of the point was ×1.000 of their mean."),
        "{md}"
    );
    let html = report::to_html(&r);
    assert!(
        html.contains("<p>Repeatability: <code>no think: 1</code> measured 5 more times"),
        "{html}"
    );
    // Without repeats the paragraph is absent.
    let plain = analyse(&cap, run(&cap, &[]), vec![]).unwrap();
    assert!(!report::to_markdown(&plain).contains("Repeatability"));
}

#[test]
fn saturated_held_out_points_that_measured_apart_bound_any_models_error_and_the_report_says_so() {
    let cap = fitted_from_the_lowest("");
    // As measured from the known model, the saturated points agree: the bound is 0.
    let r = analyse(&cap, run(&cap, &[]), vec![]).unwrap();
    let groups = perfpilot_capacity::variation::saturated_groups(&r.checks, &r.model);
    assert_eq!(groups.len(), 1, "{groups:?}");
    let sp = &groups[0];
    assert_eq!(sp.tier, "app");
    assert_eq!(sp.labels, ["no think: 4", "no think: 8"]);
    assert!(sp.least_error_pct() < 0.1, "{sp:?}");
    assert!(!report::to_markdown(&r).contains("No model of this run"));
    // The app served a quarter more at 8 users on the same cores: a model predicting one
    // throughput for both misses one by at least 0.25 / 2.25 = 11.1 %.
    let mut sweeps = run(&cap, &[]);
    let p = point_mut(&mut sweeps, "no think: 8");
    for c in &mut p.classes {
        c.throughput *= 1.25;
    }
    let r = analyse(&cap, sweeps, vec![]).unwrap();
    let md = report::to_markdown(&r);
    assert!(
        md.contains("At 2 of them (no think: 4, no think: 8) the app tier was saturated, measured and in the model")
            && md.contains("misses one of them by at least 11.1 %. No model of this run meets ±5 % at every held-out point."),
        "{md}"
    );
    // Measured at 90 % of the app's cores, 8 users was not saturated: a model may predict it
    // apart from 4 users, and nothing is bounded.
    let mut sweeps = run(&cap, &[]);
    let p = point_mut(&mut sweeps, "no think: 8");
    p.busy.insert("app".into(), 0.9 * 0.4);
    let r = analyse(&cap, sweeps, vec![]).unwrap();
    assert_eq!(
        perfpilot_capacity::variation::saturated_groups(&r.checks, &r.model),
        []
    );
}

#[test]
fn points_measured_in_rounds_are_fitted_and_checked_at_their_mean_and_the_table_shows_each_round() {
    let cap = fitted_from_the_lowest("rounds = 2\n");
    let mut sweeps = run(&cap, &[]);
    // Every point measured twice: once 20 % fast, once 20 % slow (throughput and CPU alike, so
    // the CPU per request is the truth's). Their mean is the truth, so fitting from it and
    // checking against it meets the model exactly.
    for p in sweeps.iter_mut().flat_map(|s| s.points.iter_mut()) {
        let scaled = |f: f64| {
            let mut q = p.clone();
            for c in &mut q.classes {
                c.throughput *= f;
            }
            for b in q.busy.values_mut() {
                *b *= f;
            }
            q
        };
        let (fast, slow) = (scaled(1.2), scaled(0.8));
        // A saved run keeps the rounds; the point itself is recombined when analysed.
        *p = Point {
            rounds: vec![fast, slow],
            ..scaled(1.2)
        };
    }
    let r = analyse(&cap, sweeps, Vec::new()).unwrap();
    let (ex, er) = r.held_out_errors();
    assert!(ex < 0.5 && er < 0.5, "{ex} {er}");
    let p = r.sweeps[0]
        .points
        .iter()
        .find(|p| p.label == "no think: 4")
        .unwrap();
    assert_eq!(p.rounds.len(), 2);
    assert!((p.rounds[0].throughput() / p.throughput() - 1.2).abs() < 1e-9);
    let md = report::to_markdown(&r);
    assert!(md.contains("| X per round |"), "{md}");
    assert!(
        md.contains("mean of up to 2 rounds") && md.contains("20.0 % at the median point"),
        "{md}"
    );
    let html = report::to_html(&r);
    assert!(html.contains("<th>X per round</th>"));
}

#[test]
fn a_measurement_that_failed_is_said_in_the_notes_and_the_report() {
    let cap = fitted_from_the_lowest("rounds = 2\n");
    let mut sweeps = run(&cap, &[]);
    sweeps[0].failed.push((
        8,
        "round 2 of 2: the load driver failed: connection refused".into(),
    ));
    let r = analyse(&cap, sweeps, Vec::new()).unwrap();
    let want = "no think: 8: a measurement failed: round 2 of 2: the load driver failed: connection refused";
    assert!(r.notes.iter().any(|n| n == want), "{:#?}", r.notes);
    assert!(report::to_markdown(&r).contains(want));
}
