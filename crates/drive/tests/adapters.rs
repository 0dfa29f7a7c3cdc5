//! Each adapter on the real tool's output: the tests start nginx, redis-server and a throw-away
//! PostgreSQL 15 cluster on free loopback ports and stop them on drop (also on panic).

mod common;

use perfpilot_drive::adapters::{self, NumberMeaning};

fn s(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[test]
fn wrk_against_nginx() {
    common::require("wrk");
    let nginx = common::start_nginx();
    let url = format!("http://127.0.0.1:{}/", nginx.port);
    let m = adapters::run_wrk(&s(&["-t1", "-c4", "-d1s", "--latency", &url])).unwrap();
    assert_eq!(m.source, "wrk");
    assert!(m.requests > 100, "{m:?}");
    assert_eq!(m.errors, 0);
    assert!(m.throughput_rps > 0.0);
    let l = m.latency.as_ref().unwrap();
    assert!(l.p50_ms.is_some() && l.p99_ms.is_some() && l.mean_ms.is_some());
    assert!(l.p50_ms <= l.p99_ms);
    assert!(!m.start.is_empty() && m.end >= m.start);
    // Non-2xx responses are errors of kind "status".
    let url = format!("http://127.0.0.1:{}/missing", nginx.port);
    let m = adapters::run_wrk(&s(&["-t1", "-c2", "-d1s", &url])).unwrap();
    assert!(m.errors > 0 && m.ok == 0, "{m:?}");
    assert_eq!(m.errors_by_kind.get("status"), Some(&m.errors));
}

#[test]
fn redis_benchmark_against_redis() {
    common::require("redis-benchmark");
    let redis = common::start_redis();
    let ms = adapters::run_redis_benchmark(&s(&[
        "-h",
        "127.0.0.1",
        "-p",
        &redis.port.to_string(),
        "-n",
        "3000",
        "-c",
        "4",
        "-t",
        "set,get",
    ]))
    .unwrap();
    let names: Vec<_> = ms
        .iter()
        .map(|m| m.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["SET", "GET"]);
    for m in &ms {
        assert_eq!(m.requests, 3000);
        assert!(m.throughput_rps > 0.0);
        let l = m.latency.as_ref().unwrap();
        assert!(l.p50_ms.is_some() && l.p99_ms.is_some() && l.max_ms.is_some());
    }
}

#[test]
fn pgbench_against_postgres() {
    common::require("pgbench");
    let pg = common::start_postgres();
    let port = pg.port.to_string();
    let conn = ["-h", "127.0.0.1", "-p", &port, "-U", "postgres"];
    let mut init = s(&conn);
    init.extend(s(&["-i", "-s", "1", "-q", "postgres"]));
    adapters::run_captured("pgbench", &init).unwrap();
    let mut args = s(&conn);
    args.extend(s(&["-c", "2", "-j", "1", "-T", "2", "-P", "1", "postgres"]));
    let m = adapters::run_pgbench(&args).unwrap();
    assert!(m.ok > 10, "{m:?}");
    assert_eq!(m.errors, 0);
    assert!(m.throughput_rps > 0.0);
    assert_eq!(m.duration_s, 2.0);
    assert!(m.latency.as_ref().unwrap().mean_ms.unwrap() > 0.0);
    assert!(!m.series.is_empty(), "per-second series from -P 1");
    // A failing run is an error naming the command, not a bogus measurement.
    let mut bad = s(&conn);
    bad.extend(s(&["-T", "1", "no_such_database"]));
    let err = adapters::run_pgbench(&bad).unwrap_err().to_string();
    assert!(err.contains("pgbench") && err.contains("failed"), "{err}");
}

#[test]
fn any_command_that_prints_a_number() {
    let m = adapters::run_command(
        &s(&["sh", "-c", "echo 'rate: 1234.5 ops/s'"]),
        NumberMeaning::Throughput,
    )
    .unwrap();
    assert_eq!(m.throughput_rps, 1234.5);
    assert_eq!(m.extra["value"], 1234.5);
    let err =
        adapters::run_command(&s(&["sh", "-c", "echo nothing"]), NumberMeaning::Value).unwrap_err();
    assert!(err.to_string().contains("printed no number"), "{err}");
    let err = adapters::run_command(&s(&["/nonexistent/tool"]), NumberMeaning::Value).unwrap_err();
    assert!(err.to_string().contains("cannot be started"), "{err}");
}
