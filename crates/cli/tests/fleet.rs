//! The fleet on one machine (`scripts/fleet`): three hosts, each a network and PID namespace
//! with its own daemon, state, config and workload, scraped by a real Prometheus (Debian's,
//! `scripts/prometheus`) in a hub namespace. Hosts 1 and 2 try an action that hurts (the
//! workload's signal halves when it is bound) and revert it; host 3, started afterwards, asks
//! the fleet and skips it. Then every daemon is up, a PromQL query returns each host's actions,
//! and every expression of the Grafana dashboard and the alert rules returns data.
//!
//! Needs root (namespaces) and `apt-get download` (Prometheus); without them the test says so
//! and passes without checking anything else.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod support;
use support::{EXE, wait_until};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fleet, torn down on drop (also when an assertion fails).
struct Fleet(PathBuf);

impl Fleet {
    fn script(&self, args: &[&str]) -> std::process::Output {
        Command::new(repo().join("scripts/fleet"))
            .args(args)
            .env("PERFPILOT_BIN", EXE)
            .output()
            .unwrap()
    }

    /// `perfpilot ARGS` in the hub, where Prometheus is 127.0.0.1:9090.
    fn hub(&self, args: &[&str]) -> std::process::Output {
        let mut a = vec!["exec", self.0.to_str().unwrap(), EXE];
        a.extend_from_slice(args);
        self.script(&a)
    }

    /// An instant query's samples, or none while Prometheus does not answer.
    fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        let out = self.hub(&[
            "fleet",
            "query",
            "--prometheus",
            "http://127.0.0.1:9090",
            "--json",
            expr,
        ]);
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap_or_default()
    }

    fn log(&self, file: &str) -> String {
        std::fs::read_to_string(self.0.join(file)).unwrap_or_default()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let out = self.script(&["down", self.0.to_str().unwrap()]);
        if !out.status.success() {
            eprintln!("fleet down: {}", String::from_utf8_lossy(&out.stderr));
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unsupported() -> Option<String> {
    if !perfpilot_sys::user::is_root() {
        return Some("not root: network namespaces need root".into());
    }
    let probe = Command::new("ip").args(["netns", "list"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        return Some("`ip netns` is not available".into());
    }
    let prom = Command::new(repo().join("scripts/prometheus")).output();
    match prom {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "no Prometheus: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("no Prometheus: {e}")),
    }
}

/// Expressions as Prometheus runs them: the dashboard's variables filled in.
fn concrete(expr: &str) -> String {
    expr.replace("$job", "perfpilot")
        .replace("$instance", ".+")
        .replace("$__rate_interval", "1m")
}

/// The query of an alert rule: its expression left of the final threshold comparison.
fn alert_query(expr: &str) -> String {
    for op in [" == ", " > ", " < ", " >= ", " <= "] {
        if let Some((q, threshold)) = expr.rsplit_once(op)
            && threshold.trim().parse::<f64>().is_ok()
        {
            return q.to_string();
        }
    }
    expr.to_string()
}

#[test]
fn a_fleet_of_three_namespace_hosts_shares_its_verdicts_through_prometheus() {
    if let Some(why) = unsupported() {
        eprintln!("fleet test not run: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("perfpilot-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fleet = Fleet(dir.clone());
    let d = dir.to_str().unwrap();
    let up = fleet.script(&["up", d, "3", "--hold", "2"]);
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );

    // Hosts 1 and 2 revert the action that hurts; Prometheus gathers both verdicts.
    let outcome = "perfpilot_strategy_outcome{strategy=\"cache_affinity\"}";
    let reverted = wait_until(Duration::from_secs(240), || {
        let s = fleet.query(outcome);
        s.len() == 2 && s.iter().all(|x| x["labels"]["decision"] != "keep")
    });
    assert!(
        reverted,
        "two reverted verdicts never reached Prometheus: {:?}\nh1:\n{}\nh2:\n{}\nprometheus:\n{}",
        fleet.query(outcome),
        fleet.log("h1/daemon.log"),
        fleet.log("h2/daemon.log"),
        fleet.log("prometheus.log")
    );

    // Each daemon listens on its namespace's every address, as in a DaemonSet: allowed, with
    // a warning.
    assert!(
        fleet
            .log("h1/daemon.log")
            .contains("0.0.0.0:10187, which is not a loopback address"),
        "{}",
        fleet.log("h1/daemon.log")
    );

    // Host 3 asks the fleet before trying the same strategy on the same workload, and skips it.
    let start = fleet.script(&["start", d, "3"]);
    assert!(start.status.success());
    let status3 = dir.join("h3/state/status.json");
    let mut state = String::new();
    let skipped = wait_until(Duration::from_secs(60), || {
        let v: serde_json::Value = std::fs::read(&status3)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        state = v["workloads"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w["state"].as_str())
            .find(|s| s.contains("skipped"))
            .unwrap_or_default()
            .to_string();
        !state.is_empty()
    });
    assert!(
        skipped,
        "host 3 did not skip: {state}\n{}",
        fleet.log("h3/daemon.log")
    );
    assert!(
        state.contains("cache_affinity skipped: fleet: reverted on 2 of 2 hosts"),
        "{state}"
    );

    // Every daemon is up, and the fleet's actions come back per host: two on hosts 1 and 2,
    // none on host 3 (it never tried).
    let all_up = wait_until(Duration::from_secs(30), || {
        let s = fleet.query("up{job=\"perfpilot\"}");
        s.len() == 3 && s.iter().all(|x| x["value"] == 1.0)
    });
    assert!(all_up, "{:?}", fleet.query("up"));
    let mut per_host = Vec::new();
    let counted = wait_until(Duration::from_secs(30), || {
        per_host = fleet.query("sum by (instance) (perfpilot_actions_total{job=\"perfpilot\"})");
        per_host.len() == 3
    });
    assert!(counted, "{per_host:?}");
    let actions_of = |ip: &str| {
        per_host
            .iter()
            .find(|x| x["labels"]["instance"] == format!("{ip}:10187"))
            .and_then(|x| x["value"].as_f64())
            .unwrap_or(-1.0)
    };
    assert!(actions_of("10.77.0.11") >= 1.0, "{per_host:?}");
    assert!(actions_of("10.77.0.12") >= 1.0, "{per_host:?}");
    assert_eq!(actions_of("10.77.0.13"), 0.0, "{per_host:?}");
    let h3 = Command::new(EXE)
        .args(["status", "--json", "--state-dir"])
        .arg(dir.join("h3/state"))
        .output()
        .unwrap();
    let h3: serde_json::Value = serde_json::from_slice(&h3.stdout).unwrap();
    assert_eq!(h3["actions"].as_array().map(Vec::len), Some(0), "{h3}");

    // `fleet status` tallies the pair: tried on 2 hosts, kept on none.
    let fs = fleet.hub(&[
        "fleet",
        "status",
        "--prometheus",
        "http://127.0.0.1:9090",
        "--json",
    ]);
    let fs: serde_json::Value = serde_json::from_slice(&fs.stdout).unwrap();
    assert_eq!(fs["up"], 3, "{fs}");
    let row = &fs["verdicts"][0];
    assert_eq!(row["strategy"], "cache_affinity", "{fs}");
    assert_eq!(
        (row["tried"].as_u64(), row["kept"].as_u64()),
        (Some(2), Some(0)),
        "{fs}"
    );
    assert!(row["median_gain"].as_f64().unwrap() < 1.0, "{fs}");

    // Every dashboard and alert expression returns data from this fleet.
    let dash: serde_json::Value = serde_json::from_slice(
        &std::fs::read(repo().join("deploy/grafana/perfpilot-fleet.json")).unwrap(),
    )
    .unwrap();
    let mut exprs: Vec<String> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(concrete))
        .collect();
    let rules =
        std::fs::read_to_string(repo().join("deploy/prometheus/perfpilot-alerts.yml")).unwrap();
    let alerts: Vec<String> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr: "))
        .map(alert_query)
        .collect();
    assert_eq!(alerts.len(), 4, "{rules}");
    exprs.extend(alerts);
    for e in &exprs {
        let mut got = Vec::new();
        let ok = wait_until(Duration::from_secs(30), || {
            got = fleet.query(e);
            !got.is_empty()
        });
        assert!(ok, "no data for {e}");
    }
    // The rules load in Prometheus (it was started with them) and pass promtool.
    let prom = String::from_utf8(
        Command::new(repo().join("scripts/prometheus"))
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let promtool = Path::new(prom.trim()).with_file_name("promtool");
    let check = Command::new(promtool)
        .args(["check", "rules"])
        .arg(repo().join("deploy/prometheus/perfpilot-alerts.yml"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}
