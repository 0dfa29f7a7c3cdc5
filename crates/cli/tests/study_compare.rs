//! `perfpilot study compare` across two machines' stores, built from synthetic runs: the
//! machines side by side, the per-configuration ratios in text and JSON, configurations one
//! run measured, and stores of different schema versions refused naming both.

use std::path::Path;
use std::process::{Command, Output};

use perfpilot_drive::{CpuUsage, LoadShape, Measurement};
use perfpilot_store::{RunState, Store, TrialPhase, TrialRecord, TrialStatus};
use perfpilot_study::Summary;

fn perfpilot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfpilot"))
        .args(args)
        .output()
        .unwrap()
}

/// A finished run's summary: a throughput goal, or with `latency` a p99 goal.
fn summary(winner: &str, latency: bool) -> Summary {
    let (goal, unit) = if latency {
        ("minimize p99 latency (ms)", "ms")
    } else {
        ("maximize throughput (requests/s)", "req/s")
    };
    Summary {
        goal: goal.into(),
        unit: unit.into(),
        higher_is_better: !latency,
        baseline: "instances=1".into(),
        winner: Some(winner.into()),
        verdict: "better".into(),
        rounds: 4,
        ..Summary::default()
    }
}

/// A store at `path` holding one finished run of a throughput goal on machine `host` (stored
/// host facts): four race rounds of each `(instances, req/s, busy cores)`.
fn store_with_run(path: &Path, host: &str, configs: &[(i64, f64, f64)]) {
    store_with_goal(path, host, configs, false);
}

/// As [`store_with_run`], with a p99 goal when `latency`.
fn store_with_goal(path: &Path, host: &str, configs: &[(i64, f64, f64)], latency: bool) {
    let mut s = Store::open(path).unwrap();
    let run = s
        .study_begin("synthetic", "synthetic.toml", "name = \"synthetic\"", host)
        .unwrap();
    for round in 1..=4i64 {
        let noise = [0.98, 1.02, 1.0, 1.01][round as usize - 1];
        for &(instances, rps, cores) in configs {
            let mut m = Measurement::empty(
                "perfpilot-drive",
                LoadShape::External {
                    description: "synthetic".into(),
                },
            );
            m.throughput_rps = rps * noise;
            m.cpu = Some(vec![CpuUsage {
                name: "app".into(),
                pid: None,
                tier: None,
                cpu_s: cores * 10.0,
                cores,
            }]);
            s.trial_add(&TrialRecord {
                id: 0,
                study: run,
                phase: TrialPhase::Race,
                round,
                config: format!("instances={instances}"),
                factors: format!(r#"[["instances",{instances}]]"#),
                status: TrialStatus::Ok,
                reason: String::new(),
                value: Some(rps * noise),
                measurement: Some(m.to_json()),
                detail: "{}".into(),
                created_ms: 0,
            })
            .unwrap();
        }
    }
    let sum = serde_json::to_string(&summary("instances=2", latency)).unwrap();
    s.study_set_state(run, RunState::Done, Some(&sum)).unwrap();
}

/// Writes `version` as the SQLite header's user_version (bytes 60..64, big-endian), the
/// store's schema version, as another perfpilot would have left it. The store is closed, so
/// its write-ahead log is already folded into the file.
fn set_schema_version(path: &Path, version: u32) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[60..64].copy_from_slice(&version.to_be_bytes());
    std::fs::write(path, bytes).unwrap();
}

const IVY: &str = r#"{"online":"0-3","nodes":1,"llcs":1,"cores":2,"smt":2,"cpu_model":"Intel(R) Xeon(R) CPU E5-2690 v2 @ 3.00GHz","kernel":"6.1.0-ivy","hostname":"ivy","memory_bytes":8589934592}"#;
const P8: &str = r#"{"online":"0-15","nodes":2,"llcs":2,"cores":2,"smt":8,"cpu_model":"POWER8E (raw), altivec supported","kernel":"6.1.0-p8","hostname":"p8","memory_bytes":34359738368}"#;

#[test]
fn compare_across_two_stores_prints_the_machines_and_the_ratio_per_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("ivy.db"), dir.path().join("p8.db"));
    // b does 1.2× a's work on twice the busy cores; instances=4 ran on b only.
    store_with_run(&a, IVY, &[(1, 1000.0, 1.0), (2, 1800.0, 2.0)]);
    store_with_run(
        &b,
        P8,
        &[(1, 1200.0, 2.0), (2, 2160.0, 4.0), (4, 3000.0, 8.0)],
    );
    let (sa, sb) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = perfpilot(&["study", "compare", "1", "1", "--store", sa, "--store-b", sb]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    // The machines first, side by side.
    assert!(lines[0].starts_with("machine"), "{stdout}");
    for (row, x, y) in [
        ("CPUs", "4 (2 cores × SMT2)", "16 (2 cores × SMT8)"),
        ("CPU model", "E5-2690 v2", "POWER8E"),
        ("memory", "8 GiB", "32 GiB"),
        ("kernel", "6.1.0-ivy", "6.1.0-p8"),
        ("hostname", "ivy", "p8"),
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(row) && l.contains(x) && l.contains(y)),
            "{row}: {stdout}"
        );
    }
    // The verdict, then the ratios below it.
    let verdict = lines
        .iter()
        .position(|l| l.starts_with("agree: the same winner"))
        .expect("the verdict");
    let table = lines
        .iter()
        .position(|l| l.contains("per configuration both measured"))
        .expect("the ratio table");
    assert!(verdict < table, "{stdout}");
    let row = |key: &str| {
        lines[table..]
            .iter()
            .find(|l| l.trim_start().starts_with(key))
            .copied()
            .unwrap_or_else(|| panic!("{key}: {stdout}"))
    };
    // Result ×1.2, per core ×0.6, per instance ×1.2 (same instances on both).
    let one = row("instances=1 ");
    assert!(
        one.contains("4/4") && one.matches("×1.200").count() == 2,
        "{one}"
    );
    assert!(one.contains("×0.600"), "{one}");
    assert!(row("instances=2 ").contains("×1.200 (1."), "{stdout}");
    assert!(
        stdout.contains(&format!("only in run 1 ({sb}): instances=4")),
        "{stdout}"
    );

    let json = perfpilot(&[
        "study",
        "compare",
        "1",
        "1",
        "--store",
        sa,
        "--store-b",
        sb,
        "--json",
    ]);
    assert!(json.status.success());
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let cross = &v["cross"];
    assert_eq!(cross["machine_b"]["hostname"], "p8");
    assert_eq!(cross["only_b"][0], "instances=4");
    let r = &cross["configs"][0];
    assert_eq!(r["config"], "instances=1");
    let (lo, hi) = (
        r["result"]["low"].as_f64().unwrap(),
        r["result"]["high"].as_f64().unwrap(),
    );
    assert!(lo < 1.2 && 1.2 < hi && lo > 1.0, "{r}");
    assert!((r["per_core"]["ratio"].as_f64().unwrap() - 0.6).abs() < 1e-9);

    // A run of another goal: no ratios, and a line saying why.
    let c = dir.path().join("latency.db");
    store_with_goal(&c, P8, &[(1, 1200.0, 2.0)], true);
    let out = perfpilot(&[
        "study",
        "compare",
        "1",
        "1",
        "--store",
        sa,
        "--store-b",
        c.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("no ratios: the runs have different goals (maximize throughput (requests/s) in req/s, minimize p99 latency (ms) in ms)"),
        "{stdout}"
    );
    assert!(!stdout.contains("×1.200"), "{stdout}");
}

#[test]
fn stores_of_different_schema_versions_are_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("here.db"), dir.path().join("there.db"));
    store_with_run(&a, IVY, &[(1, 1000.0, 1.0)]);
    store_with_run(&b, P8, &[(1, 1200.0, 2.0)]);
    let current = perfpilot_store::schema::SCHEMA_VERSION;
    let (sa, sb) = (a.to_str().unwrap(), b.to_str().unwrap());

    // A newer perfpilot wrote b.
    set_schema_version(&b, 99);
    let out = perfpilot(&["study", "compare", "1", "1", "--store", sa, "--store-b", sb]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for part in [
        format!("{sa} (schema version {current})"),
        format!("{sb} (schema version 99)"),
        format!("compare them with the perfpilot that wrote {sb}"),
    ] {
        assert!(stderr.contains(&part), "{part}: {stderr}");
    }

    // An older one wrote b: refused, and b is left as it was (not upgraded behind the user).
    set_schema_version(&b, 2);
    let out = perfpilot(&["study", "compare", "1", "1", "--store", sa, "--store-b", sb]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{sb} (schema version 2)"))
            && stderr.contains(&format!("perfpilot study list --store {sb}")),
        "{stderr}"
    );
    assert_eq!(Store::schema_version_at(&b).unwrap(), 2);
}
