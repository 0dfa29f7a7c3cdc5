//! The built-in driver with a request profile against a local test server: each kind's counts
//! add up to the totals, the mix follows the weights, bodies arrive with their size, and the
//! same profile draws the same requests run after run.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Received, TestServer};
use perfpilot_drive::{DriveSpec, Load, Measurement, RequestProfile, RunControl, ThinkTime, run};

const MIX: &str = "name,weight,method,url,body_bytes,header:x-kind
get,60,GET,/docs/doc-{{rand:1-50}},,get
search,20,GET,/search?q={{rand:1-9}}&limit=10,,
put,15,PUT,/docs/new-{{seq}},3000,put
gone,5,GET,/missing/{{seq}},,
";

fn spec(server: &TestServer, profile: &str, load: Load, duration_ms: u64) -> DriveSpec {
    let profile =
        RequestProfile::parse(profile, Path::new("mix.csv"), Some(&server.url(""))).unwrap();
    let mut s = DriveSpec::new(Vec::new(), load);
    s.profile = Some(profile);
    s.warmup = Duration::from_millis(200);
    s.duration = Duration::from_millis(duration_ms);
    s.threads = 2;
    s
}

/// Every kind's counts add up to the run's, and each kind's share is within `tolerance` of its
/// weight's.
fn check_kinds(m: &Measurement, tolerance: f64) {
    let kinds = &m.request_kinds;
    assert_eq!(
        kinds.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        ["get", "search", "put", "gone"]
    );
    assert_eq!(kinds.iter().map(|k| k.requests).sum::<u64>(), m.requests);
    assert_eq!(kinds.iter().map(|k| k.ok).sum::<u64>(), m.ok);
    assert_eq!(kinds.iter().map(|k| k.errors).sum::<u64>(), m.errors);
    for k in kinds {
        let share = k.requests as f64 / m.requests as f64;
        assert!(
            (share - k.weight_share).abs() < tolerance,
            "{}: {share:.3} of the requests, weight {:.3}",
            k.name,
            k.weight_share
        );
        let l = k.latency.as_ref().expect("each kind has latencies");
        assert!(l.p50_ms <= l.p90_ms && l.p90_ms <= l.p99_ms && l.p99_ms <= l.max_ms);
    }
    // The kind the server does not know fails on its own; the others do not fail.
    let gone = &kinds[3];
    assert_eq!(
        (gone.errors, gone.status.get("404")),
        (gone.requests, Some(&gone.requests))
    );
    assert!(kinds[..3].iter().all(|k| k.errors == 0), "{kinds:?}");
    assert!(
        m.first_error
            .as_deref()
            .unwrap_or("")
            .contains("request \"gone\""),
        "{:?}",
        m.first_error
    );
}

/// What the server received matches the profile: documents in range, PUT bodies of 3000 bytes.
fn check_received(received: &[Received], at_least_puts: u64) {
    let mut puts = 0;
    for r in received {
        if let Some(n) = r.path.strip_prefix("/docs/doc-") {
            let n: u32 = n.parse().unwrap();
            assert!(
                (1..=50).contains(&n) && r.method == "GET" && r.body_len == 0,
                "{r:?}"
            );
        } else if r.path.starts_with("/docs/new-") {
            assert_eq!((r.method.as_str(), r.body_len), ("PUT", 3000), "{r:?}");
            puts += 1;
        } else {
            assert!(
                r.path.starts_with("/search?q=") || r.path.starts_with("/missing/"),
                "{r:?}"
            );
        }
    }
    assert!(
        puts >= at_least_puts,
        "{puts} PUTs received, {at_least_puts} counted"
    );
}

#[test]
fn a_closed_loop_profile_counts_each_kind_follows_the_weights_and_sends_the_bodies() {
    let server = TestServer::start();
    let s = spec(
        &server,
        MIX,
        Load::Closed {
            users: 8,
            think: ThinkTime::Zero,
        },
        1500,
    );
    let m = run(&s, &RunControl::default()).unwrap();
    assert!(
        m.requests > 1000,
        "too few requests to judge the mix: {}",
        m.requests
    );
    check_kinds(&m, 0.03);
    check_received(&server.received(), m.request_kinds[2].requests);
    // The per-kind figures survive JSON and a merge adds them.
    let back = Measurement::from_json(&m.to_json()).unwrap();
    let counts = |m: &Measurement| -> Vec<_> {
        m.request_kinds
            .iter()
            .map(|k| {
                (
                    k.name.clone(),
                    k.requests,
                    k.errors,
                    k.status.clone(),
                    k.histogram.clone(),
                )
            })
            .collect()
    };
    assert_eq!(counts(&back), counts(&m));
    let mut other = m.clone();
    other.start = "another run".to_string();
    let merged = Measurement::merge(&[m.clone(), other]).unwrap();
    assert_eq!(
        merged.request_kinds[0].requests,
        2 * m.request_kinds[0].requests
    );
}

#[test]
fn an_open_loop_profile_keeps_the_rate_and_counts_each_kind() {
    let server = TestServer::start();
    let s = spec(
        &server,
        MIX,
        Load::Open {
            rate: 1000.0,
            connections: 4,
        },
        1500,
    );
    let m = run(&s, &RunControl::default()).unwrap();
    assert!(
        (m.requests as f64 - 1500.0).abs() < 150.0,
        "{} requests",
        m.requests
    );
    check_kinds(&m, 0.05);
    check_received(&server.received(), m.request_kinds[2].requests);
}

#[test]
fn the_same_profile_and_seed_draw_the_same_requests_in_the_same_order_and_another_seed_does_not() {
    let first_requests = |seed: u64| {
        let server = TestServer::start();
        let mut s = spec(
            &server,
            MIX,
            Load::Closed {
                users: 1,
                think: ThinkTime::Zero,
            },
            300,
        );
        s.threads = 1;
        s.seed = seed;
        run(&s, &RunControl::default()).unwrap();
        let got: Vec<(String, String)> = server
            .received()
            .into_iter()
            .take(100)
            .map(|r| (r.method, r.path))
            .collect();
        assert_eq!(got.len(), 100, "fewer than 100 requests in 500 ms");
        got
    };
    let (a, b) = (first_requests(7), first_requests(7));
    assert_eq!(a, b);
    assert_ne!(a, first_requests(8));
    assert!(a.iter().any(|(m, _)| m == "PUT") && a.iter().any(|(m, _)| m == "GET"));
}
