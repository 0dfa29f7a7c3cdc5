//! The daemon on real servers with no signal configured: it finds their built-in preset
//! (Redis, PostgreSQL) and, on PostgreSQL started after it, promotes the shared buffer pool to
//! huge pages and judges the action on PostgreSQL's own transaction rate. The configs match
//! only the servers these tests start (`only_matched`), so nothing else on the machine is
//! touched; `shmem_enabled` is restored by the daemon at stop and by a guard here.

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use perfpilot_testkit as kit;

mod support;
use support::{
    Dir, Load, SHMEM_ENABLED, ShmemGuard, daemon, finish, pgbench_select_load, selected,
    status_if_written, terminate, wait_until,
};

static SERIAL: Mutex<()> = Mutex::new(());

/// The workloads of the daemon's last status.
fn workloads(s: &serde_json::Value) -> Vec<serde_json::Value> {
    s["daemon"]["workloads"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn redis_with_no_signal_configured_is_judged_by_its_preset() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let redis = kit::start_redis();
    let bench = kit::require("redis-benchmark");
    let _load = Load(
        Command::new(bench)
            .args([
                "-p",
                &redis.port.to_string(),
                "-t",
                "get",
                "-c",
                "4",
                "-n",
                "100000000",
                "-q",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let dir = Dir::new("redis-preset");
    let cfg = dir.config(
        "only_matched = true\n[[workload]]\nmatch = { comm = \"redis-server\" }\n[tunables]\ninterval_s = 1\nmin_age_s = 1\nmin_cpu_cores = 0.05\nrest_change_max = 0\nlarge_pages = false\ncache_affinity = false\nmemory_affinity = false\nread_ahead = false\n",
    );
    let d = daemon(&cfg, &dir.state(), "120s");
    let mut last = serde_json::Value::Null;
    let found = wait_until(Duration::from_secs(60), || {
        let Some(s) = status_if_written(&dir.state()) else {
            return false;
        };
        last = s;
        workloads(&last).iter().any(|w| {
            w["signal_source"] == "preset"
                && w["signal"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("redis:"))
        })
    });
    terminate(&d);
    let log = finish(d);
    assert!(found, "no redis preset in status: {last:#}\n{log}");
    let w = workloads(&last)
        .into_iter()
        .find(|w| w["signal_source"] == "preset")
        .unwrap();
    let signal = w["signal"].as_str().unwrap();
    assert!(signal.contains("total_commands_processed"), "{signal}");
    assert!(
        signal.contains(&redis.port.to_string()) || signal.contains(".sock"),
        "{signal}"
    );
    // The better source it passed over is named: no probe was configured.
    assert_eq!(
        w["signal_passed_over"][0], "probe: none configured",
        "{w:#}"
    );
}

#[test]
fn postgres_started_after_the_daemon_has_its_buffer_pool_promoted_and_judged_on_its_own_transaction_rate()
 {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kit::is_root() {
        println!("skipped: raising shmem_enabled and peer authentication need root");
        return;
    }
    let _shmem = ShmemGuard::take();
    let dir = Dir::new("pg-pool");
    let cfg = dir.config(
        "only_matched = true\n[[workload]]\nmatch = { comm = \"postgres\" }\n[tunables]\ninterval_s = 5\nmin_age_s = 40\nmin_cpu_cores = 0.2\nwindows = 8\nmax_windows = 8\nrest_change_max = 0\nmin_effect = 0.005\none_way_history_s = 40\ncache_affinity = false\nmemory_affinity = false\nread_ahead = false\n",
    );
    // min_age_s leaves PostgreSQL time to load and prewarm its pool before a trial: huge pages
    // are made of populated memory only. A database gains a few per cent (×1.04 here with a
    // 300 MB table). PostgreSQL's backends publish their counts at most once a second, so a
    // window of 2 s carries ±50 % of quantization: 5 s windows, eight a side, and a 0.5 %
    // minimum effect resolve a few per cent.
    let d = daemon(&cfg, &dir.state(), "600s");
    // The daemon raises shmem_enabled from `never` at start, before PostgreSQL maps its pool.
    let raised = wait_until(Duration::from_secs(30), || {
        selected(&std::fs::read_to_string(SHMEM_ENABLED).unwrap()) != "never"
    });
    let pg = kit::start_postgres_with(&[("shared_buffers", "1GB"), ("huge_pages", "off")]);
    let _load = pgbench_select_load(pg.port, 20, 580);
    let mut last = serde_json::Value::Null;
    let decided = wait_until(Duration::from_secs(480), || {
        let Some(s) = status_if_written(&dir.state()) else {
            return false;
        };
        last = s;
        last["actions"].as_array().into_iter().flatten().any(|a| {
            a["strategy"] == "large_pages"
                && a["workload"] != "shmem_enabled"
                && matches!(a["state"].as_str(), Some("kept" | "ended" | "reverted"))
        })
    });
    let status_now = last.clone();
    terminate(&d);
    let log = finish(d);
    assert!(
        raised,
        "the daemon did not raise shmem_enabled at start:\n{log}"
    );
    assert!(
        decided,
        "no large-pages verdict in time: {status_now:#}\n{log}"
    );
    let pg_workload = workloads(&status_now)
        .into_iter()
        .find(|w| w["name"].as_str().is_some_and(|n| n.contains("postgres")))
        .unwrap_or_else(|| panic!("no postgres workload: {status_now:#}"));
    assert_eq!(pg_workload["signal_source"], "preset", "{pg_workload:#}");
    assert!(
        pg_workload["signal"]
            .as_str()
            .is_some_and(|s| s.starts_with("postgresql:")),
        "{pg_workload:#}"
    );
    let action = status_now["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["strategy"] == "large_pages" && a["workload"] != "shmem_enabled")
        .unwrap();
    // Kept or not is the data's call: at this size on a 2-CPU VM the gain is a few per cent at
    // most (measured 0.998 [0.975, 1.021] and 1.036 [0.950, 1.129]); what must hold is that
    // the pool itself was promoted and judged with an interval on PostgreSQL's own rate.
    assert!(
        matches!(action["state"].as_str(), Some("kept" | "ended")),
        "{action:#}\n{log}"
    );
    assert!(
        action["verdict"]["gain"]["ci_low"].is_number(),
        "{action:#}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("step applied:") && !l.contains("step applied: 0 of")),
        "no huge page was made of the pool:\n{log}"
    );
    assert!(
        action["verdict"]["signal"]
            .as_str()
            .is_some_and(|s| s.starts_with("postgresql:")),
        "{action:#}"
    );
    // Where the pool cannot be split back (no debugfs here), the trial is one-way: its signal
    // was watched unchanged first (40 s: 5 windows of 8 s), and the design says so.
    if let Some(l) = log.lines().find(|l| l.contains("trial starts")) {
        println!("{l}");
    }
    if log.contains("trial starts") && log.contains("one-way") {
        let watched = log
            .split(" windows watched before the change")
            .next()
            .and_then(|head| head.rsplit(' ').next())
            .and_then(|n| n.parse::<usize>().ok());
        assert!(watched.is_some_and(|n| n >= 5), "{log}");
    }
    assert!(
        action["reason"]
            .as_str()
            .unwrap()
            .contains("MiB of shared memory")
            && !action["reason"]
                .as_str()
                .unwrap()
                .contains(" 0 MiB of shared"),
        "the pool itself was promoted: {action:#}"
    );
    // At stop the daemon put shmem_enabled back (huge pages it promoted stay).
    assert_eq!(
        selected(&std::fs::read_to_string(SHMEM_ENABLED).unwrap()),
        _shmem.0,
        "{log}"
    );
}
