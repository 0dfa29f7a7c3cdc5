//! Prometheus remote write against a real Prometheus (Debian's package, unpacked by
//! `scripts/prometheus`) with its remote-write receiver enabled: the live series arrive and
//! read back through its query API.

use std::process::Command;
use std::time::Duration;

use perfpilot_drive::Interval;
use perfpilot_drive::remote_write::push_live;
use perfpilot_fetch as fetch;
use perfpilot_testkit::{ServerProcess, TempDir, free_port, serve};

fn prometheus() -> ServerProcess {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/prometheus");
    let out = Command::new(script)
        .output()
        .expect("run scripts/prometheus");
    assert!(
        out.status.success(),
        "scripts/prometheus: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let dir = TempDir::new("prometheus");
    let port = free_port();
    let config = dir.0.join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 1h\n").unwrap();
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.0.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--web.enable-remote-write-receiver");
    serve("prometheus", cmd, dir, port, None)
}

#[test]
fn the_live_series_arrive_in_prometheus_and_read_back_through_its_query_api() {
    let p = prometheus();
    let base = format!("http://127.0.0.1:{}", p.port);
    // Ready: the TSDB is open once /-/ready answers 200.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fetch::get(&format!("{base}/-/ready"), Duration::from_secs(1)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "prometheus never became ready"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let (tx, rx) = std::sync::mpsc::channel();
    for t in 0..3 {
        let mut i = Interval::new(t);
        i.window_start_ms = now_ms - 10_000;
        i.requests = 100;
        i.ok = 99;
        i.errors = 1;
        for v in 1..=99 {
            i.hist.record_us(v * 100);
        }
        tx.send(i).unwrap();
    }
    drop(tx);
    let report = push_live(
        &format!("{base}/api/v1/write"),
        &[("run".into(), "rw-test".into())],
        &rx,
        &|w| panic!("unexpected warning: {w}"),
    );
    assert_eq!((report.delivered, report.undelivered), (3, 0), "{report:?}");
    let q = |expr: &str| {
        let url = format!("{base}/api/v1/query?query={expr}");
        fetch::get(&url, Duration::from_secs(5)).unwrap().body
    };
    let body = q("perfpilot_drive_requests_total%7Brun%3D%22rw-test%22%7D");
    assert!(body.contains("\"300\""), "{body}");
    let body = q("perfpilot_drive_latency_seconds%7Bquantile%3D%220.99%22%7D");
    assert!(body.contains("\"job\":\"perfpilot-drive\""), "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let p99: f64 = v["data"]["result"][0]["value"][1]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((0.0095..=0.0105).contains(&p99), "p99 {p99} s");
}
