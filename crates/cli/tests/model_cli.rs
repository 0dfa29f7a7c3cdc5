//! `perfpilot model …` run as a process on the example models.

use std::path::PathBuf;
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("runs the perfpilot binary")
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// A file in a per-test scratch directory, removed with it when dropped.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn scratch(name: &str) -> Scratch {
    let dir =
        std::env::temp_dir().join(format!("perfpilot-model-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    Scratch(dir.join(name))
}

#[test]
fn validate_prints_the_trade_table() {
    let out = ok(&["model", "validate", "examples/models/trade.toml"]);
    assert!(out.contains("X meas") && out.contains("R pred ms"), "{out}");
    assert!(out.contains("20 clients (Table 2)"), "{out}");
    assert!(out.contains("1117.40") && out.contains("1119.64"), "{out}");
    assert!(out.contains("[fitted]"));
    assert_eq!(
        out.matches("(predicted; no measurement)").count(),
        3,
        "{out}"
    );
    assert!(out.contains("largest |error|"));
}

#[test]
fn validate_json_is_plain_data() {
    let out = ok(&["model", "validate", "examples/models/trade.toml", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let rows = v["validation"]["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1);
    let err = rows[0]["throughput_error_pct"].as_f64().expect("a number");
    assert!(err.abs() < 1.0, "{err}");
    assert_eq!(v["predicted_only"].as_array().map(Vec::len), Some(3));
}

#[test]
fn solve_fit_and_predict() {
    let out = ok(&["model", "solve", "examples/models/three-tier.toml"]);
    assert!(out.contains("bottleneck: app"), "{out}");
    let out = ok(&[
        "model",
        "solve",
        "examples/models/three-tier.toml",
        "--method",
        "schweitzer",
    ]);
    assert!(out.contains("converged after"), "{out}");
    let out = ok(&[
        "model",
        "solve",
        "examples/models/three-tier.toml",
        "--curve",
        "--population",
        "5",
    ]);
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("5 ")),
        "{out}"
    );
    let out = ok(&["model", "fit", "examples/models/trade.toml"]);
    assert!(out.contains("3.573") && out.contains("0.680"), "{out}");
    let out = ok(&[
        "model",
        "predict",
        "examples/models/trade.toml",
        "--clients",
        "20,200",
        "--replicas",
        "1,9",
    ]);
    assert!(out.contains("throughput per cost"), "{out}");
    let json = ok(&["model", "predict", "examples/models/trade.toml", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(20));
    assert_eq!(v["cost"].as_array().map(Vec::len), Some(4));
    let out = ok(&[
        "model",
        "solve",
        "examples/models/two-classes.json",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["classes"].as_array().map(Vec::len), Some(2));
}

#[test]
fn convert_to_jmva_and_back_solves_the_same() {
    let xml = scratch("three-tier.jmva");
    ok(&[
        "model",
        "convert",
        "examples/models/three-tier.toml",
        xml.to_str().expect("utf-8 path"),
    ]);
    let text = std::fs::read_to_string(&*xml).expect("written");
    assert!(text.contains("<ldstation name=\"app\">"));
    let a: serde_json::Value = serde_json::from_str(&ok(&[
        "model",
        "solve",
        "examples/models/three-tier.toml",
        "--json",
    ]))
    .expect("json");
    let b: serde_json::Value = serde_json::from_str(&ok(&[
        "model",
        "solve",
        xml.to_str().expect("utf-8 path"),
        "--json",
    ]))
    .expect("json");
    let (xa, xb) = (
        a["classes"][0]["throughput"].as_f64().expect("x"),
        b["classes"][0]["throughput"].as_f64().expect("x"),
    );
    assert!((xa - xb).abs() < 1e-9, "{xa} vs {xb}");
}

#[test]
fn convert_says_what_it_wrote_and_what_the_format_left_out() {
    let xml = scratch("trade.jmva");
    let x = xml.to_str().expect("utf-8 path");
    let out = ok(&["model", "convert", "examples/models/trade.toml", x]);
    assert_eq!(
        out.lines().next(),
        Some(
            format!(
                "wrote {x} (JMT JMVA XML, from examples/models/trade.toml): the network: 1 class, \
                 2 stations, demands fitted from 1 measured point"
            )
            .as_str()
        ),
        "{out}"
    );
    assert!(
        out.contains("not in this format: name and description, 1 measured point, [fit], [predict], 4 configurations"),
        "{out}"
    );
    let json = scratch("trade.json");
    let j = json.to_str().expect("utf-8 path");
    let out = ok(&["model", "convert", "examples/models/trade.toml", j]);
    assert_eq!(
        out.trim_end(),
        format!(
            "wrote {j} (JSON, from examples/models/trade.toml): 1 class, 2 stations, 1 measured \
             point, [fit], [predict], 4 configurations"
        ),
    );
    assert!(std::fs::metadata(&*json).is_ok_and(|m| m.len() > 0));
}

#[test]
fn bad_input_fails_naming_the_station() {
    let bad = scratch("bad.toml");
    std::fs::write(
        &*bad,
        "[[classes]]\nname = \"c\"\npopulation = 3\n[[stations]]\nname = \"dbtier\"\nkind = \"multiserver\"\nservers = 0\ndemand = 0.1\n",
    )
    .expect("write");
    let out = run(&["model", "solve", bad.to_str().expect("utf-8 path")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`dbtier`") && err.contains("servers = 0"),
        "{err}"
    );
    let out = run(&["model", "solve", "examples/models/does-not-exist.toml"]);
    assert!(!out.status.success());
}
