//! Every report type — a study run, a load sweep (`study scale`) and a capacity run — rendered
//! to HTML and opened in headless Chromium (Debian's `chromium`, installed by
//! scripts/install-deps): the DOM it built has the title above the charts, SVG paths that are
//! drawn (non-empty `d`), no literal Markdown backticks, no resources fetched from the network,
//! and the console reported no error; a screenshot of each is taken. With
//! `PERFPILOT_SCREENSHOTS=DIR` the screenshots are kept there (docs/img holds the ones in the
//! README).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use perfpilot_capacity::run::SweepResult;
use perfpilot_capacity::sweep::{ClassResult, Point};
use perfpilot_capacity::{Capacity, analyse, report as capacity_report};
use perfpilot_model::TierModel;
use perfpilot_model::tiered::FittedTier;
use perfpilot_store::{RunState, TrialPhase, TrialStatus};
use perfpilot_study::report::{self, Report, ScalingRow, TrialRow};
use perfpilot_study::{ScalePoint, Scaling};

fn chromium() -> PathBuf {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|b| {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join(b))
                    .find(|p| p.is_file())
            })
        })
        .unwrap_or_else(|| panic!("chromium is not installed: run scripts/install-deps (it installs the Debian package chromium)"))
}

/// Chromium's flags for a throw-away headless run as root in a container.
fn headless(dir: &Path) -> Vec<String> {
    vec![
        "--headless".into(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--no-first-run".into(),
        "--disable-extensions".into(),
        "--disable-background-networking".into(),
        "--enable-logging=stderr".into(),
        "--v=0".into(),
        format!("--user-data-dir={}", dir.join("profile").display()),
    ]
}

/// Opens `html` in Chromium: (the DOM it built, its log, the screenshot's path).
fn open(name: &str, html: &str, dir: &Path) -> (String, String, PathBuf) {
    let page = dir.join(format!("{name}.html"));
    std::fs::write(&page, html).unwrap();
    let url = format!("file://{}", page.display());
    let out = Command::new(chromium())
        .args(headless(dir))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium --dump-dom");
    assert!(
        out.status.success(),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let shot = dir.join(format!("{name}.png"));
    let out2 = Command::new(chromium())
        .args(headless(dir))
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1000,1600")
        .arg("--hide-scrollbars")
        .arg(&url)
        .output()
        .expect("run chromium --screenshot");
    assert!(
        out2.status.success(),
        "chromium --screenshot failed: {}",
        String::from_utf8_lossy(&out2.stderr)
    );
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out2.stderr)
    );
    (dom, log, shot)
}

/// What every report must show in the browser.
fn check(name: &str, html: &str, charts: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (dom, log, shot) = open(name, html, dir.path());
    let h1 = dom
        .find("<h1>")
        .unwrap_or_else(|| panic!("{name}: no <h1> in the DOM"));
    let svg = dom
        .find("<svg")
        .unwrap_or_else(|| panic!("{name}: no chart in the DOM"));
    assert!(
        h1 < svg,
        "{name}: the title must come before the first chart"
    );
    assert!(
        dom.matches("<svg").count() >= charts,
        "{name}: fewer than {charts} charts"
    );
    // Every chart drew something: paths with coordinates.
    let drawn = dom
        .split("<path d=\"")
        .skip(1)
        .filter(|rest| rest.starts_with('M') && rest.find('"').is_some_and(|e| e > 8))
        .count();
    assert!(drawn >= charts * 3, "{name}: only {drawn} drawn paths");
    assert!(!dom.contains(" d=\"\""), "{name}: an empty path");
    assert!(!dom.contains('`'), "{name}: a literal Markdown backtick");
    for external in ["http://", "https://", "<script", "<link"] {
        let outside = dom
            .match_indices(external)
            .filter(|(i, _)| !dom[..*i].ends_with("xmlns=\""))
            .count();
        assert_eq!(outside, 0, "{name}: {external} in the page");
    }
    for bad in ["CONSOLE", "Uncaught", "Failed to load resource"] {
        let hit = log
            .lines()
            .find(|l| l.contains(bad) && !l.contains("Fontconfig"));
        assert!(hit.is_none(), "{name}: the console reported: {hit:?}");
    }
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "{name}: the screenshot is only {size} bytes");
    if let Some(keep) = std::env::var_os("PERFPILOT_SCREENSHOTS") {
        std::fs::create_dir_all(&keep).unwrap();
        std::fs::copy(&shot, Path::new(&keep).join(format!("report-{name}.png"))).unwrap();
    }
}

fn study_report(scaling: Option<Scaling>) -> Report {
    let trial = |id: i64, config: &str, x: f64| TrialRow {
        id,
        phase: TrialPhase::Race,
        round: id,
        config: config.into(),
        status: TrialStatus::Ok,
        reason: String::new(),
        value: Some(x),
        throughput: Some(x),
        p99_ms: Some(4.2),
        errors: Some(0),
        cpu_cores: Some(1.5),
    };
    Report {
        run: 3,
        name: "scoring-spss".into(),
        file: "examples/studies/scoring-spss.toml".into(),
        state: RunState::Done,
        host: serde_json::json!({"online": "0-1", "nodes": 1, "llcs": 1, "cores": 2, "smt": 1}),
        summary: None,
        scaling,
        trials: vec![
            trial(1, "instances=1", 900.0),
            trial(2, "instances=2", 1500.0),
        ],
        scaling_view: vec![
            ScalingRow {
                instances: 1,
                config: "instances=1".into(),
                throughput: 900.0,
                cpu_cores: Some(0.9),
                per_core: Some(1000.0),
            },
            ScalingRow {
                instances: 2,
                config: "instances=2".into(),
                throughput: 1500.0,
                cpu_cores: Some(1.7),
                per_core: Some(882.0),
            },
        ],
        effects: Vec::new(),
        apply: None,
        apply_note: None,
        jobs: Vec::new(),
        batch: Vec::new(),
    }
}

fn scaling() -> Scaling {
    let points = [1usize, 2, 4, 8, 16, 32]
        .iter()
        .map(|&u| {
            let x = 2000.0 * u as f64 / (u as f64 + 3.0);
            ScalePoint {
                users: u,
                throughput: x,
                response_time_s: Some(u as f64 / x),
                p99_ms: Some(u as f64 / x * 2500.0),
                errors: 0,
                cpu: [("app".to_string(), x / 1100.0)].into(),
                driver_cores: Some(0.2),
            }
        })
        .collect();
    Scaling {
        run: 4,
        config: "instances=1 cores_per_instance=2".into(),
        points,
        saturation_users: Some(16),
        knee_users: Some(4),
        failed: Vec::new(),
        warnings: Vec::new(),
    }
}

const CAPACITY: &str = r#"
name = "three tiers (synthetic)"
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
[[sweep]]
name = "no think"
users = [1, 2, 4, 8, 16]
[[sweep]]
name = "two app hosts"
users = [1, 4, 16]
instances = { app = 2 }
second_host = "app"
"#;

/// A capacity run whose points a known model produced (with 2 % noise on the held-out ones).
fn capacity_run() -> perfpilot_capacity::CapacityRun {
    let cap = Capacity::parse(CAPACITY, Path::new("synthetic.toml")).unwrap();
    let tier = |n: &str, c: f64, d: f64| FittedTier {
        name: n.into(),
        cores: c,
        demand: vec![d],
        discipline: Default::default(),
    };
    let truth = TierModel {
        classes: vec!["score".into()],
        tiers: vec![
            tier("db", 0.5, 0.003),
            tier("app", 0.4, 0.004),
            tier("proxy", 1.0, 0.000_05),
            tier("driver", 1.0, 0.000_04),
        ],
        path_delay: 0.000_2,
        outside_latency: vec![0.0],
        fitted_from: Vec::new(),
        residuals: Vec::new(),
        notes: Vec::new(),
    };
    let sweeps = cap
        .file
        .sweep
        .iter()
        .map(|s| {
            let points = s
                .users
                .iter()
                .enumerate()
                .map(|(i, &u)| {
                    let p = truth
                        .predict(&[("score".into(), u, 0.0)], &s.instances)
                        .unwrap();
                    let noise = if i < 2 {
                        1.0
                    } else {
                        1.0 + 0.02 * (i as f64 - 2.5).signum()
                    };
                    let mean = Point {
                        label: Capacity::label(&s.name, u),
                        users: u,
                        classes: vec![ClassResult {
                            class: "score".into(),
                            users: u,
                            think_time: 0.0,
                            throughput: p.throughput() * noise,
                            response_time: p.response_time() / noise,
                            p99: None,
                            errors: 0,
                            first_error: None,
                        }],
                        busy: p.busy.clone(),
                        other_busy: Some(0.05),
                        throttled: BTreeMap::new(),
                        steady: Some(true),
                        truncate_s: 0,
                        rounds: Vec::new(),
                    };
                    // Measured in two rounds 2 % apart, whose mean is the point.
                    let round = |f: f64| {
                        let mut q = mean.clone();
                        q.classes[0].throughput *= f;
                        q
                    };
                    Point {
                        rounds: vec![round(1.01), round(0.99)],
                        ..mean
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
        .collect();
    let machine = vec![("logical CPUs".to_string(), "2".to_string())];
    let mut run = analyse(&cap, sweeps, machine).unwrap();
    // The first fit point measured three more times, 3 % apart.
    let first = run.sweeps[0].points[0].clone();
    run.repeats = Some(perfpilot_capacity::variation::Repeats {
        label: first.label.clone(),
        points: [0.97, 1.0, 1.03]
            .iter()
            .map(|f| {
                let mut p = first.clone();
                p.classes[0].throughput *= f;
                p
            })
            .collect(),
    });
    run
}

#[test]
fn a_study_report_opens_in_chromium_with_its_title_first_and_drawn_charts() {
    check("study", &report::to_html(&study_report(None)), 1);
}

#[test]
fn a_load_sweep_report_opens_in_chromium_with_separate_throughput_and_response_axes() {
    let html = report::to_html(&study_report(Some(scaling())));
    assert!(html.contains("throughput (req/s)") && html.contains("mean response time (ms)"));
    assert!(html.contains("(log scale)"));
    assert!(
        html.contains("<th>CPUs online</th><td>0-1</td>"),
        "the machine as a table"
    );
    check("scale", &html, 2);
}

#[test]
fn a_capacity_report_opens_in_chromium_with_the_model_over_the_measured_points() {
    let run = capacity_run();
    let (x, r) = run.held_out_errors();
    assert!(
        x < 2.5 && r < 2.5,
        "synthetic points within their 2 % noise: {x} {r}"
    );
    assert!(
        run.held_out_errors_at_own_demand().is_some(),
        "every point measured its tiers' CPU"
    );
    let html = capacity_report::to_html(&run);
    for part in [
        "measured, held out",
        "measured, fitted from",
        "Per-tier utilisation",
        "cost ranking",
        "Measured vs predicted",
        "X error, own CPU",
        "measured 3 more times in a row",
        "<th>X per round</th>",
        "mean of up to 2 rounds",
        "Throughput within ±5 % at",
    ] {
        assert!(html.contains(part), "{part}");
    }
    check("capacity", &html, 5);
}
