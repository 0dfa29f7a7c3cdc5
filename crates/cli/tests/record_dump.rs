//! `perfpilot record` → `perfpilot dump` round trips, crash recovery and bad store paths.

use std::process::{Command, Stdio};
use std::time::Duration;

const EXE: &str = env!("CARGO_BIN_EXE_perfpilot");

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("perfpilot-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn db(&self) -> String {
        self.0.join("store.db").to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn perfpilot(args: &[&str]) -> std::process::Output {
    Command::new(EXE).args(args).output().unwrap()
}

fn ok_stdout(args: &[&str]) -> String {
    let out = perfpilot(args);
    assert!(
        out.status.success(),
        "perfpilot {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn record_then_dump_in_every_format() {
    let dir = TempDir::new("roundtrip");
    let db = dir.db();
    // A busy child of ours, to find in the process rows.
    let mut child = Command::new(EXE)
        .args(["bench", "load", "--threads", "2", "--busy"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let rec = perfpilot(&[
        "record",
        "--interval",
        "400ms",
        "--for",
        "1900ms",
        "--store",
        &db,
        "--memory-every",
        "1",
    ]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        rec.status.success(),
        "{}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let err = String::from_utf8_lossy(&rec.stderr);
    let written: usize = err
        .split("wrote ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary in {err}"));
    assert!(written >= 4, "{err}");

    let cpus = std::thread::available_parallelism().unwrap().get();
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&ok_stdout(&["dump", "--store", &db, "--what", "cpu"])).unwrap();
    assert_eq!(
        rows.len(),
        (written - 1) * (cpus + 1),
        "one row per CPU and one for all, per interval"
    );
    for r in &rows {
        let busy = r["busy"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&busy));
        let parts = ["user", "system", "irq", "steal", "iowait", "idle"]
            .iter()
            .map(|k| r[k].as_f64().unwrap())
            .sum::<f64>();
        assert!((parts - 100.0).abs() < 0.5, "shares add up to 100: {r}");
    }

    let csv = ok_stdout(&[
        "dump", "--store", &db, "--what", "process", "--format", "csv", "--pid", &pid,
    ]);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let cpu_col = header.iter().position(|h| *h == "cpu").unwrap();
    let pid_col = header.iter().position(|h| *h == "pid").unwrap();
    let body: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert!(!body.is_empty(), "rows for pid {pid}: {csv}");
    assert!(body.iter().all(|r| r[pid_col] == pid));
    assert!(
        body.iter()
            .any(|r| r[cpu_col].parse::<f64>().unwrap() > 1.0),
        "the busy child used CPU: {csv}"
    );

    let om = ok_stdout(&[
        "dump",
        "--store",
        &db,
        "--what",
        "cpu",
        "--format",
        "openmetrics",
    ]);
    assert!(om.contains("# TYPE perfpilot_cpu_busy gauge"), "{om}");
    assert!(om.contains("perfpilot_cpu_busy{cpu=\"all\"}"), "{om}");
    assert!(om.trim_end().ends_with("# EOF"));

    let threads: Vec<serde_json::Value> = serde_json::from_str(&ok_stdout(&[
        "dump", "--store", &db, "--what", "thread", "--pid", &pid,
    ]))
    .unwrap();
    assert!(
        threads
            .iter()
            .filter(|t| t["cpu"].as_f64().unwrap() > 1.0)
            .count()
            >= 1
    );

    // A range in the future has no rows, and says so.
    let out = perfpilot(&[
        "dump",
        "--store",
        &db,
        "--what",
        "cpu",
        "--from",
        "2999-01-01T00:00:00Z",
    ]);
    assert!(out.status.success());
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rows.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no cpu rows"));
}

#[test]
fn a_killed_recorder_leaves_a_readable_store() {
    let dir = TempDir::new("crash");
    let db = dir.db();
    let mut rec = Command::new(EXE)
        .args([
            "record",
            "--interval",
            "100ms",
            "--store",
            &db,
            "--no-threads",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Let it write a few samples (however slow the machine), then kill it mid-run.
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        let out = perfpilot(&["dump", "--store", &db, "--what", "net"]);
        if out.status.success()
            && serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout)
                .is_ok_and(|rows| !rows.is_empty())
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SIGKILL: no chance to finish a write cleanly.
    rec.kill().unwrap();
    rec.wait().unwrap();
    let out = perfpilot(&["dump", "--store", &db, "--what", "net"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!rows.is_empty());
    // And recording can go on in the same store.
    let out = perfpilot(&[
        "record",
        "--interval",
        "100ms",
        "--for",
        "300ms",
        "--store",
        &db,
        "--no-threads",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_unwritable_store_fails_at_start_naming_the_path() {
    let dir = TempDir::new("badstore");
    let file = dir.0.join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let bad = file.join("store.db");
    let out = perfpilot(&["record", "--for", "1s", "--store", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(bad.to_str().unwrap()) || err.contains(file.to_str().unwrap()),
        "{err}"
    );
    let out = perfpilot(&[
        "dump",
        "--what",
        "cpu",
        "--store",
        dir.0.join("absent.db").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no store at"));
}
