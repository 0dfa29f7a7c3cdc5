//! `perfpilot drive` end to end: exit codes of thresholds and of runs where nothing succeeded,
//! JSON output and merge, Ctrl-C, and errors reported before any load is driven.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_perfpilot");

/// A tiny keep-alive HTTP/1.1 server answering every GET with 200 "ok" (thread per connection).
fn serve() -> SocketAddr {
    serve_counting().0
}

/// Like `serve`, with the count of requests the server has answered.
fn serve_counting() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let count = answered.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let count = count.clone();
            std::thread::spawn(move || answer(stream, &count));
        }
    });
    (addr, answered)
}

fn answer(mut s: TcpStream, answered: &AtomicU64) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Ok(n) = s.read(&mut chunk) else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                .is_err()
            {
                return;
            }
            answered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn perfpilot(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("perfpilot-cli-{}-{name}", std::process::id()))
}

#[test]
fn thresholds_set_the_exit_code() {
    let url = format!("http://{}/", serve());
    let base = [
        "drive",
        "--users",
        "2",
        "--duration",
        "300ms",
        "--no-progress",
        &url,
    ];
    let pass = perfpilot(
        &[
            &base[..],
            &["--fail-if", "p99<10s", "--fail-if", "errors<1%"],
        ]
        .concat(),
    );
    assert_eq!(
        pass.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&pass.stderr)
    );
    let stderr = String::from_utf8_lossy(&pass.stderr);
    assert!(stderr.contains("pass: p99<10s"), "{stderr}");
    let fail = perfpilot(&[&base[..], &["--fail-if", "p99<1us"]].concat());
    assert_eq!(fail.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&fail.stderr).contains("FAIL: p99<1us"));
    let stdout = String::from_utf8_lossy(&fail.stdout);
    assert!(
        stdout.contains("throughput:") && stdout.contains("p99.9"),
        "{stdout}"
    );
    let bad = perfpilot(&[&base[..], &["--fail-if", "p99 about 5ms"]].concat());
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("threshold"));
}

#[test]
fn json_files_merge_and_show() {
    let url = format!("http://{}/", serve());
    let (a, b, m) = (tmp("a.json"), tmp("b.json"), tmp("m.json"));
    // Two driver processes at the same time, as a study would run one per client machine.
    let spawn = |out: &PathBuf| {
        Command::new(BIN)
            .args([
                "drive",
                "--rate",
                "100/s",
                "-c",
                "2",
                "--duration",
                "1s",
                "--quiet",
                &url,
                "--json",
            ])
            .arg(out)
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let (mut pa, mut pb) = (spawn(&a), spawn(&b));
    assert!(pa.wait().unwrap().success() && pb.wait().unwrap().success());
    let out = Command::new(BIN)
        .args(["drive", "merge"])
        .args([&a, &b])
        .arg("--json")
        .arg(&m)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |p: &PathBuf| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let (ja, jb, jm) = (read(&a), read(&b), read(&m));
    assert_eq!(jm["schema"], 1);
    assert_eq!(
        jm["requests"].as_u64().unwrap(),
        ja["requests"].as_u64().unwrap() + jb["requests"].as_u64().unwrap()
    );
    assert_eq!(
        jm["latency"]["count"].as_u64().unwrap(),
        ja["latency"]["count"].as_u64().unwrap() + jb["latency"]["count"].as_u64().unwrap()
    );
    assert!(
        (jm["throughput_rps"].as_f64().unwrap() - 200.0).abs() < 20.0,
        "{}",
        jm["throughput_rps"]
    );
    let show = perfpilot(&[
        "drive",
        "show",
        m.to_str().unwrap(),
        "--fail-if",
        "throughput>=150",
    ]);
    assert!(show.status.success());
    assert!(String::from_utf8_lossy(&show.stdout).contains("2 merged runs"));
    for p in [a, b, m] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn a_closed_port_fails_the_run_says_why_and_is_not_hammered() {
    // A port nothing listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/");
    let json = tmp("refused.json");
    let out = perfpilot(&[
        "drive",
        "--users",
        "2",
        "--duration",
        "2s",
        "--no-progress",
        "--json",
        json.to_str().unwrap(),
        &url,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    let why = stderr
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no line on stderr"));
    assert!(why.starts_with("error: every one of the "), "{why}");
    assert!(why.contains("(connect "), "{why}");
    assert!(
        why.ends_with(&format!(
            "the first: connection refused by 127.0.0.1:{port}: is the server up?"
        )),
        "{why}"
    );
    // The measurement is still written, and each user backed off: about 11 attempts each in
    // 2 s (1, 2, 4, … ms apart, then 1 s), where it used to be some 200 a second.
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let attempts = m["errors_by_kind"]["connect"].as_u64().unwrap();
    assert_eq!(m["requests"].as_u64(), Some(attempts));
    assert!(
        (2..=2 * 14).contains(&attempts),
        "{attempts} connect attempts"
    );
    let _ = std::fs::remove_file(json);
}

#[test]
fn merging_one_run_twice_is_refused_naming_the_files() {
    let url = format!("http://{}/", serve());
    let a = tmp("once.json");
    let run = perfpilot(&[
        "drive",
        "--users",
        "1",
        "--duration",
        "300ms",
        "--quiet",
        "--json",
        a.to_str().unwrap(),
        &url,
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let path = a.to_str().unwrap();
    let out = perfpilot(&["drive", "merge", path, path]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{path} and {path} are the same run (perfpilot-drive against {url}, started "
        )),
        "{err}"
    );
    assert!(err.contains("it would count twice"), "{err}");
    assert!(out.stdout.is_empty(), "nothing merged is printed");
    let _ = std::fs::remove_file(a);
}

#[test]
fn ctrl_c_prints_the_partial_summary() {
    let (addr, answered) = serve_counting();
    let url = format!("http://{addr}/");
    let child = Command::new(BIN)
        .args([
            "drive",
            "--users",
            "2",
            "--think-time",
            "10ms",
            "--duration",
            "60s",
            &url,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt only once the run is under way (requests answered), however slow the machine.
    let t = std::time::Instant::now();
    while answered.load(Ordering::Relaxed) < 20 && t.elapsed() < Duration::from_secs(50) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("requests:") && stdout.contains("200 "),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
}

#[test]
fn missing_csv_column_fails_before_driving() {
    let csv = tmp("rows.csv");
    std::fs::write(&csv, "a,b\n1,2\n").unwrap();
    let out = perfpilot(&[
        "drive",
        "--users",
        "1",
        "--duration",
        "1s",
        "--body",
        "{\"v\": {{c}}}",
        "--data",
        csv.to_str().unwrap(),
        "http://127.0.0.1:9/",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("column \"c\"") && err.contains("a, b"),
        "{err}"
    );
    let _ = std::fs::remove_file(csv);
}

#[test]
fn adapter_for_a_command() {
    let out = perfpilot(&[
        "drive",
        "command",
        "--json",
        "-",
        "--",
        "sh",
        "-c",
        "echo 42.5",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["throughput_rps"], 42.5);
    assert_eq!(v["source"], "command");
}

#[test]
fn a_run_logged_to_a_file_prints_a_progress_line_every_ten_seconds() {
    let url = format!("http://{}/", serve());
    let out = perfpilot(&[
        "drive",
        "--users",
        "1",
        "--think-time",
        "10ms",
        "--warmup",
        "1s",
        "--duration",
        "11s",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("progress: "))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("measure") && lines[0].contains("requests"),
        "{stderr}"
    );
    // No terminal, so no bar drawn with escape codes.
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}

#[test]
fn csv_and_hlog_are_written_and_a_remote_write_receiver_that_is_down_only_warns() {
    let url = format!("http://{}/", serve());
    let dir = std::env::temp_dir().join(format!("perfpilot-drive-outputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, hlog) = (dir.join("s.csv"), dir.join("s.hlog"));
    // A port nobody listens on.
    let down = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = perfpilot(&[
        "drive",
        "-u",
        "2",
        "--think-time",
        "20ms",
        "-d",
        "2s",
        "--no-progress",
        "--csv",
        csv.to_str().unwrap(),
        "--hlog",
        hlog.to_str().unwrap(),
        "--remote-write",
        &format!("http://{down}/api/v1/write"),
        &url,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("the run goes on") && stderr.contains("not delivered"),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("t_s,time,requests,ok"), "{text}");
    assert_eq!(lines.len(), 3, "a header and one row per second: {text}");
    let log = std::fs::read_to_string(&hlog).unwrap();
    assert!(
        log.contains("#[StartTime: ") && log.contains(",HIST"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--summary-export` writes k6's summary data object: the same counts and percentiles as the
/// Measurement JSON of the same run, and each threshold under its metric with its verdict.
#[test]
fn a_k6_summary_export_agrees_with_the_measurement_and_carries_the_thresholds() {
    let url = format!("http://{}/", serve());
    let (json, k6) = (tmp("k6-m.json"), tmp("k6-summary.json"));
    let out = perfpilot(&[
        "drive",
        "--users",
        "2",
        "--duration",
        "300ms",
        "--no-progress",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
        "--summary-export",
        k6.to_str().unwrap(),
        "--fail-if",
        "p99<10s",
        "--fail-if",
        "p50<1us",
        &url,
    ]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&k6).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&k6);
    let metrics = &s["metrics"];
    assert!(m["requests"].as_u64().unwrap() > 0);
    assert_eq!(metrics["http_reqs"]["values"]["count"], m["requests"]);
    assert_eq!(metrics["http_req_failed"]["values"]["passes"], m["errors"]);
    let d = &metrics["http_req_duration"];
    assert_eq!(d["contains"], "time");
    assert_eq!(d["values"]["p(99)"], m["latency"]["p99_ms"]);
    assert_eq!(d["values"]["med"], m["latency"]["p50_ms"]);
    assert_eq!(d["thresholds"]["p(99)<10000"]["ok"], true, "{d}");
    assert_eq!(d["thresholds"]["med<0.001"]["ok"], false, "{d}");
    assert_eq!(metrics["vus"]["values"]["value"], 2);
}
