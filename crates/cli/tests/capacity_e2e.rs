//! `perfpilot capacity` end to end on a small deployment with tiny durations: PostgreSQL under
//! a CPU quota, the scoring service (with its per-request lookup) under another, nginx in
//! front; a sweep of 1, 2 and 4 users, a think-time sweep on the same deployment and a sweep
//! with a second app instance on a second host (a network namespace), every point measured in
//! two rounds. The run fits from the two lowest points, checks the others, and writes
//! run.json, validation.md and report.html. Timing figures are not asserted (they are
//! the command's output, quoted in docs/capacity.md from a quiet run).

use std::path::PathBuf;
use std::process::{Command, Stdio};

const EXE: &str = env!("CARGO_BIN_EXE_perfpilot");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `scoring` binary of this build.
fn scoring() -> PathBuf {
    perfpilot_testkit::workspace_bin("scoring", "perfpilot-scoring")
}

#[test]
fn a_capacity_run_on_three_tiers_fits_from_two_points_and_checks_the_rest() {
    if !perfpilot_testkit::is_root() {
        eprintln!("skipped: CPU groups and network namespaces need root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("request.json");
    std::fs::write(
        &body,
        r#"{"sepal length (cm)": 5.9, "sepal width (cm)": 3.0, "petal length (cm)": 4.2, "petal width (cm)": 1.5}"#,
    )
    .unwrap();
    let file = dir.path().join("tiny.toml");
    std::fs::write(
        &file,
        format!(
            r#"
name = "tiny"
[[tier]]
name = "db"
kind = "postgres"
cpu_quota = 0.5
[[tier]]
name = "app"
kind = "command"
command = "{bin} --listen {{host}}:{{port}} --models {models} --threads 2 --db 'host={{db.host}} port={{db.port}} user=postgres dbname=postgres' --db-rows 500"
ready = "http://{{host}}:{{port}}/health"
cpu_quota = 0.5
[[tier]]
name = "proxy"
kind = "nginx"
upstream = "app"
cores = 1
balance = "least_conn"
[[class]]
name = "score"
path = "/score/iris-forest"
method = "POST"
headers = {{ "content-type" = "application/json" }}
body_file = "{body}"
[[sweep]]
name = "one app"
users = [1, 2, 4]
[[sweep]]
name = "two apps"
users = [2]
instances = {{ app = 2 }}
second_host = "app"
[[sweep]]
name = "think"
users = [2]
think_time = "exp:10ms"
[capacity]
warmup = "1s"
deploy_warmup = "2s"
measure = "4s"
repeat = 2
rounds = 2
"#,
            bin = scoring().display(),
            models = repo().join("examples/scoring/models").display(),
            body = body.display(),
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let child = Command::new(EXE)
        .arg("capacity")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The run's second host is named for its pid (`lab::netns`): what it leaves is found by it.
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    let checks = run["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 5, "{stdout}");
    let fitted: Vec<&str> = checks
        .iter()
        .filter(|c| c["fitted"] == true)
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    // The two lowest points, each unless it did not settle on a loaded machine: then the next
    // load of the sweep stood in, and a note says so.
    let notes: Vec<&str> = run["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    // (When no point settled at all, the two are fitted from anyway, with a note; when the
    // next load is itself a fit point, nothing stands in and the fit uses the other one.)
    for wanted in ["one app: 1", "one app: 2"] {
        let left_out = notes
            .iter()
            .any(|n| n.starts_with(&format!("{wanted}: not used for fitting: ")));
        assert!(
            fitted.contains(&wanted) || left_out,
            "{wanted}: neither fitted from nor said why: {fitted:?} {notes:#?}"
        );
    }
    assert!(!fitted.is_empty() && fitted.len() <= 2, "{fitted:?}");
    for c in checks {
        let x = c["predicted_throughput"].as_f64().unwrap();
        assert!(x > 0.0 && x.is_finite(), "{c}");
        assert!(c["measured_throughput"].as_f64().unwrap() > 0.0, "{c}");
    }
    // Every tier's CPU was measured through its CPU group, the second app instance's too.
    let two = &run["sweeps"][1]["points"][0]["busy"];
    for tier in ["db", "app", "proxy", "driver"] {
        assert!(two[tier].as_f64().unwrap() > 0.0, "{tier}: {two}");
    }
    assert!(stdout.contains("| one app: 4 |"), "{stdout}");
    // Every point was measured in two rounds and is their mean; the think-time sweep shared the
    // first sweep's deployment (two deployments for three sweeps), in the file's order.
    let names: Vec<&str> = run["sweeps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["one app", "two apps", "think"]);
    // A point's (or a round's) requests per second over its classes.
    let total = |p: &serde_json::Value| -> f64 {
        p["classes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["throughput"].as_f64().unwrap())
            .sum()
    };
    for p in run["sweeps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["points"].as_array().unwrap())
    {
        let rounds = p["rounds"].as_array().unwrap_or_else(|| panic!("{p}"));
        assert_eq!(rounds.len(), 2, "{p}");
        let mean = rounds.iter().map(total).sum::<f64>() / 2.0;
        let x = total(p);
        // The mean of both, or of the one without failed requests.
        assert!(
            (x - mean).abs() < 1e-6 || rounds.iter().any(|r| (total(r) - x).abs() < 1e-6),
            "{p}"
        );
    }
    assert_eq!(stderr.matches(": deploying").count(), 2, "{stderr}");
    assert!(
        stderr.contains("sweep one app, think: deploying"),
        "{stderr}"
    );
    assert!(
        stdout.contains("X per round") && stdout.contains("up to 2 rounds"),
        "{stdout}"
    );
    // The first fit point was measured twice more on its sweep's deployment, and the report
    // says how far its measurements spread.
    assert_eq!(run["repeats"]["label"], "one app: 1", "{}", run["repeats"]);
    let again = run["repeats"]["points"].as_array().unwrap();
    assert_eq!(again.len(), 2, "{stderr}");
    assert!(
        again
            .iter()
            .all(|p| p["label"] == "one app: 1" && p["busy"]["app"].as_f64().unwrap() > 0.0)
    );
    assert!(
        stdout.contains("Repeatability: `one app: 1` measured 2 more times in a row"),
        "{stdout}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("Sweep two apps"));
    // Nothing left behind: no CPU group, no namespace.
    let groups = std::fs::read_dir("/sys/fs/cgroup/cpu")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("perfpilot-cap-")
                })
                .count()
        })
        .unwrap_or(0);
    assert_eq!(groups, 0, "CPU groups left behind");
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    assert!(
        !ns.contains(&format!("perfpilot-{pid}x")),
        "a namespace left behind: {ns}"
    );
    let links: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("pp{pid}j")))
        .collect();
    assert!(links.is_empty(), "interfaces left behind: {links:?}");
}
