//! The built-in driver against a local test server: think-time and rate accuracy, the
//! open-loop stall, error paths, histogram merging.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use perfpilot_drive::{
    BodyTemplate, DataSource, DriveSpec, LatencyHistogram, Load, LoadShape, Measurement,
    RunControl, ThinkTime, run,
};

fn spec(targets: Vec<String>, load: Load, warmup_ms: u64, duration_ms: u64) -> DriveSpec {
    let mut s = DriveSpec::new(targets, load);
    s.warmup = Duration::from_millis(warmup_ms);
    s.duration = Duration::from_millis(duration_ms);
    s.threads = 2;
    s
}

fn quiet() -> RunControl {
    RunControl::default()
}

/// Closed loop: the interactive response time law, X = N / (R + Z).
fn check_response_time_law(think: ThinkTime, tolerance: f64) {
    let server = TestServer::start();
    let users = 20;
    let s = spec(
        vec![server.url("/delay/10")],
        Load::Closed { users, think },
        500,
        3000,
    );
    let m = run(&s, &quiet()).unwrap();
    assert_eq!(m.errors, 0, "{m:?}");
    let r = m.latency.as_ref().unwrap().mean_ms.unwrap() / 1000.0;
    let z = think.mean().as_secs_f64();
    let expected = users as f64 / (r + z);
    let err = (m.throughput_rps - expected).abs() / expected;
    assert!(
        err < tolerance,
        "X = {:.1}/s, N/(R+Z) = {expected:.1}/s (R = {:.2} ms), off by {:.1} %",
        m.throughput_rps,
        r * 1000.0,
        err * 100.0
    );
    // The per-second series adds up to the totals.
    let series_total: u64 = m.series.iter().map(|p| p.requests).sum();
    assert_eq!(series_total, m.requests);
    assert_eq!(m.series.len(), 3);
}

#[test]
fn closed_loop_constant_think_time_follows_n_over_r_plus_z() {
    check_response_time_law(ThinkTime::Constant(Duration::from_millis(40)), 0.05);
}

#[test]
fn closed_loop_exponential_think_time_follows_n_over_r_plus_z() {
    check_response_time_law(ThinkTime::Exponential(Duration::from_millis(40)), 0.12);
}

#[test]
fn the_realised_think_time_is_reported_and_the_law_holds_for_it_closely() {
    let server = TestServer::start();
    let users = 4;
    let think = ThinkTime::Exponential(Duration::from_millis(20));
    let s = spec(
        vec![server.url("/delay/10")],
        Load::Closed { users, think },
        300,
        2000,
    );
    let m = run(&s, &quiet()).unwrap();
    assert_eq!(m.errors, 0, "{m:?}");
    let z = m.extra[perfpilot_drive::THINK_MEAN_MS] / 1e3;
    let pauses = m.extra[perfpilot_drive::THINK_PAUSES];
    // Each response of the window is followed by one pause that begins in it.
    assert!(
        (pauses - m.requests as f64).abs() <= users as f64,
        "{pauses} pauses for {} requests",
        m.requests
    );
    // With the realised Z, the law holds to the window's edges (a user's cycle in ~250), where
    // the asked mean is off by the draws' wander (the test above allows 12 % for it).
    let r = m.latency.as_ref().unwrap().mean_ms.unwrap() / 1000.0;
    let expected = users as f64 / (r + z);
    let err = (m.throughput_rps - expected).abs() / expected;
    assert!(
        err < 0.04,
        "X = {:.1}/s, N/(R+Z) = {expected:.1}/s with the realised Z = {:.2} ms, off by {:.1} %",
        m.throughput_rps,
        z * 1e3,
        err * 100.0
    );
    // No think time, no pauses to report.
    let s = spec(
        vec![server.url("/")],
        Load::Closed {
            users: 2,
            think: ThinkTime::Zero,
        },
        100,
        500,
    );
    let m = run(&s, &quiet()).unwrap();
    assert!(m.requests > 0);
    assert!(
        !m.extra.contains_key(perfpilot_drive::THINK_MEAN_MS),
        "{:?}",
        m.extra
    );
}

/// Drives the test server open loop at `rate` over `connections` for `seconds` (after 300 ms of
/// warm-up) and checks that the requests and the rate are within 5 % of the schedule.
fn open_loop_at(rate: f64, connections: usize, seconds: u64) -> Measurement {
    let server = TestServer::start();
    let s = spec(
        vec![server.url("/")],
        Load::Open { rate, connections },
        300,
        seconds * 1000,
    );
    let m = run(&s, &quiet()).unwrap();
    let expected = rate * seconds as f64;
    assert!(
        (m.requests as f64 - expected).abs() / expected < 0.05,
        "{} requests in {seconds} s at {rate}/s",
        m.requests
    );
    assert!(
        (m.throughput_rps - rate).abs() / rate < 0.05,
        "{}",
        m.throughput_rps
    );
    m
}

#[test]
fn open_loop_keeps_the_rate() {
    let m = open_loop_at(300.0, 6, 2);
    assert!(matches!(m.load, LoadShape::Open { connections: 6, .. }));
}

#[test]
fn open_loop_keeps_a_rate_of_a_thousand_a_second_with_a_latency_for_every_request() {
    let m = open_loop_at(1000.0, 8, 3);
    let latency = m.latency.as_ref().expect("latencies");
    assert_eq!(
        latency.count,
        Some(m.requests),
        "every request has a latency"
    );
    assert!(matches!(
        m.load,
        LoadShape::Open {
            rate_per_s,
            connections: 8
        } if rate_per_s == 1000.0
    ));
}

#[test]
fn open_loop_shows_a_stall_that_closed_loop_hides() {
    // Open loop: 200/s. The server pauses 1 s once; every request due during the pause waits.
    let server = TestServer::start();
    let open = spec(
        vec![server.url("/delay/1")],
        Load::Open {
            rate: 200.0,
            connections: 4,
        },
        0,
        3000,
    );
    server.stall_once(Duration::from_millis(1000), Duration::from_secs(1));
    let m_open = run(&open, &quiet()).unwrap();
    // Closed loop: 4 users without think time; each user sees the pause once.
    let server = TestServer::start();
    let closed = spec(
        vec![server.url("/delay/1")],
        Load::Closed {
            users: 4,
            think: ThinkTime::Zero,
        },
        0,
        3000,
    );
    server.stall_once(Duration::from_millis(1000), Duration::from_secs(1));
    let m_closed = run(&closed, &quiet()).unwrap();
    let open_p99 = m_open.latency.as_ref().unwrap().p99_ms.unwrap();
    let closed_p99 = m_closed.latency.as_ref().unwrap().p99_ms.unwrap();
    let closed_max = m_closed.latency.as_ref().unwrap().max_ms.unwrap();
    assert!(
        open_p99 > 500.0,
        "open-loop p99 {open_p99} ms should show the 1 s stall"
    );
    assert!(
        closed_p99 < 100.0,
        "closed-loop p99 {closed_p99} ms hides the stall"
    );
    assert!(
        closed_max > 500.0,
        "the closed loop did see the stall once per user: max {closed_max}"
    );
}

#[test]
fn unreachable_target_is_counted_not_hung() {
    let port = common::free_port();
    let s = spec(
        vec![format!("http://127.0.0.1:{port}/")],
        Load::Closed {
            users: 2,
            think: ThinkTime::Zero,
        },
        0,
        500,
    );
    let started = Instant::now();
    let m = run(&s, &quiet()).unwrap();
    // Refused connections fail at once; the run ends at its 0.5 s, not at a connect timeout.
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(m.ok, 0);
    assert!(m.errors > 0);
    assert_eq!(m.errors_by_kind.get("connect"), Some(&m.errors));
    assert!(m.latency.is_none() && m.histogram.is_none());
    // Each user backs off 1, 2, 4, … ms between attempts: about 10 each in 0.5 s, not 50.
    assert!(m.requests <= 2 * 12, "{} attempts", m.requests);
    assert_eq!(
        m.first_error.as_deref(),
        Some(format!("connection refused by 127.0.0.1:{port}: is the server up?").as_str())
    );
}

#[test]
fn resets_statuses_and_timeouts_are_errors_by_kind() {
    let server = TestServer::start();
    let s = spec(
        vec![
            server.url("/reset"),
            server.url("/status/503"),
            server.url("/delay/2000"),
            server.url("/"),
        ],
        Load::Closed {
            users: 4,
            think: ThinkTime::Constant(Duration::from_millis(20)),
        },
        0,
        1000,
    );
    let mut s = s;
    s.timeout = Duration::from_millis(200);
    let m = run(&s, &quiet()).unwrap();
    assert!(
        m.errors_by_kind.get("reset").copied().unwrap_or(0) > 0,
        "{:?}",
        m.errors_by_kind
    );
    assert!(
        m.errors_by_kind.get("status").copied().unwrap_or(0) > 0,
        "{:?}",
        m.errors_by_kind
    );
    assert!(
        m.errors_by_kind.get("timeout").copied().unwrap_or(0) > 0,
        "{:?}",
        m.errors_by_kind
    );
    assert!(m.status.get("503").copied().unwrap_or(0) > 0);
    assert!(m.status.get("200").copied().unwrap_or(0) > 0);
    assert_eq!(m.requests, m.ok + m.errors);
    let by_kind: u64 = m.errors_by_kind.values().sum();
    assert_eq!(by_kind, m.errors);
}

#[test]
fn body_template_with_csv_rows_is_sent() {
    let server = TestServer::start();
    let data = DataSource::from_csv_text("x,y\n1,a\n2,b\n", std::path::Path::new("d.csv")).unwrap();
    let mut s = spec(
        vec![server.url("/")],
        Load::Closed {
            users: 1,
            think: ThinkTime::Zero,
        },
        0,
        300,
    );
    s.method = "POST".to_string();
    s.headers
        .push(("content-type".to_string(), "application/json".to_string()));
    s.body = Some(BodyTemplate::compile(r#"{"x": {{x}}, "y": "{{y}}"}"#, Some(&data)).unwrap());
    let m = run(&s, &quiet()).unwrap();
    assert!(m.ok > 0 && m.errors == 0, "{m:?}");
}

#[test]
fn bad_specs_are_rejected_before_driving() {
    let load = Load::Closed {
        users: 1,
        think: ThinkTime::Zero,
    };
    for bad in ["ftp://x/", "not a url", "https://[::1/"] {
        let s = spec(vec![bad.to_string()], load, 0, 100);
        assert!(run(&s, &quiet()).is_err(), "{bad}");
    }
    let mut s = spec(vec!["http://127.0.0.1:9/".to_string()], load, 0, 100);
    s.method = "BAD METHOD".to_string();
    assert!(run(&s, &quiet()).is_err());
}

#[test]
fn histograms_merge_exactly_through_json() {
    let mut a = LatencyHistogram::new();
    let mut b = LatencyHistogram::new();
    let mut all = LatencyHistogram::new();
    let mut x: u64 = 12345;
    for i in 0..20_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v = 50 + (x >> 40) % 200_000 + if i % 997 == 0 { 3_000_000 } else { 0 };
        if i % 3 == 0 {
            a.record_us(v)
        } else {
            b.record_us(v)
        }
        all.record_us(v);
    }
    let mk = |h: &LatencyHistogram, start: &str| {
        let mut m = Measurement::empty(
            "perfpilot-drive",
            LoadShape::Open {
                rate_per_s: 1.0,
                connections: 1,
            },
        );
        m.requests = h.len();
        m.ok = h.len();
        m.start = start.to_string();
        m.end = "2026-01-01T00:01:00.000Z".to_string();
        m.duration_s = 60.0;
        m.throughput_rps = h.len() as f64 / 60.0;
        m.latency = h.latency();
        m.histogram = Some(h.to_data());
        Measurement::from_json(&m.to_json()).unwrap()
    };
    let ma = mk(&a, "2026-01-01T00:00:00.000Z");
    let mb = mk(&b, "2026-01-01T00:00:01.000Z");
    // Large values are kept, not clipped to the histogram's initial range.
    assert!(
        all.quantile_us(1.0) >= 3_000_000,
        "{}",
        all.quantile_us(1.0)
    );
    let merged = Measurement::merge(&[ma, mb]).unwrap();
    let mh = merged.histogram().unwrap().unwrap();
    assert_eq!(
        mh, all,
        "the merged histogram equals the histogram of all values"
    );
    assert_eq!(merged.latency, all.latency());
    assert_eq!(merged.requests, 20_000);
    assert_eq!(merged.start, "2026-01-01T00:00:00.000Z");
    assert!((merged.throughput_rps - 20_000.0 / 60.0).abs() < 1e-9);
    for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
        assert_eq!(mh.quantile_us(q), all.quantile_us(q));
    }
    // A newer schema is refused rather than misread.
    let mut newer = merged.clone();
    newer.schema = 99;
    assert!(Measurement::from_json(&newer.to_json()).is_err());
    assert!(
        LatencyHistogram::from_data(&perfpilot_drive::HistogramData {
            unit: "us".into(),
            encoding: "hdrhistogram-v2-deflate-base64".into(),
            data: "not base64!".into()
        })
        .is_err()
    );
}

#[test]
fn outstanding_requests_do_not_extend_the_run() {
    let server = TestServer::start();
    let mut s = spec(
        vec![server.url("/delay/30000")],
        Load::Closed {
            users: 2,
            think: ThinkTime::Zero,
        },
        0,
        500,
    );
    s.timeout = Duration::from_secs(60);
    let started = Instant::now();
    let m = run(&s, &quiet()).unwrap();
    // The responses would take 30 s; a run that waited for them would end after that.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(m.requests, 0, "nothing completed inside the window");
}
