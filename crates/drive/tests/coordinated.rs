//! Coordinated drivers on loopback: workers in threads of this process, a coordinator, and the
//! in-process test server as the target. The same across network namespaces, with real worker
//! processes, is `crates/cli/tests/drive_netns.rs`.

mod common;

use std::io::BufReader;
use std::net::TcpListener;
use std::time::Duration;

use common::{TestServer, free_port};
use perfpilot_drive::coord::wire::{Msg, PROTOCOL, WireLoad, WireSpec};
use perfpilot_drive::coord::{
    CoordinatorConfig, Dialer, Link, WorkerConfig, coordinate, serve_session,
};
use perfpilot_fetch::lines::{recv, send};

const VERSION: &str = "9.9.9-test";

/// A URL nobody answers (these runs are refused before any request).
fn nobody() -> String {
    format!("http://127.0.0.1:{}/", free_port())
}

/// A worker on a loopback port, serving one session in a thread.
fn worker(version: &str, skew_ms: i64) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let cfg = WorkerConfig {
        version: version.to_string(),
        clock_skew_ms: skew_ms,
        cpu_clock: None,
    };
    std::thread::spawn(move || {
        if let Ok((s, peer)) = l.accept() {
            let _ = serve_session(Link::tcp(s, peer.to_string()).unwrap(), &cfg);
        }
    });
    addr
}

fn spec(url: String, users: usize, duration_ms: u64) -> WireSpec {
    WireSpec {
        targets: vec![url],
        method: "GET".into(),
        headers: vec![],
        body: None,
        data: None,
        load: WireLoad::Closed {
            users,
            think: "10ms".into(),
        },
        timeout_ms: 2000,
        warmup_ms: 0,
        duration_ms,
        threads: Some(1),
        http: "auto".into(),
        insecure: false,
        ca_pem: None,
        slot_offset: 0,
        schedule_offset_us: 0,
    }
}

fn config(workers: Vec<String>, spec: WireSpec) -> CoordinatorConfig {
    CoordinatorConfig {
        workers,
        dialer: Dialer::default(),
        spec,
        version: VERSION.to_string(),
        max_clock_offset: Duration::from_millis(50),
        start_delay: Duration::from_millis(300),
        stop: None,
    }
}

#[test]
fn two_workers_split_the_users_and_their_seconds_merge_live_and_exactly() {
    let server = TestServer::start();
    let cfg = config(
        vec![worker(VERSION, 0), worker(VERSION, 0)],
        // Long enough for merged seconds to be printed live (each about 1.5 s after it ends),
        // also on a loaded machine: at 2 s they were sometimes all merged only at the end.
        spec(server.url("/"), 5, 4000),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let lines = std::sync::Mutex::new(Vec::new());
    let out = coordinate(&cfg, &[tx], &|l| lines.lock().unwrap().push(l.to_string())).unwrap();
    let live: Vec<_> = rx.try_iter().collect();
    let m = &out.merged;
    assert_eq!(out.workers.len(), 2);
    let shares: Vec<String> = out.workers.iter().map(|w| w.share_text()).collect();
    assert_eq!(shares, ["3 users", "2 users"]);
    let parts: Vec<u64> = out
        .workers
        .iter()
        .map(|w| w.measurement.as_ref().unwrap().requests)
        .collect();
    assert!(parts.iter().all(|r| *r > 0), "{parts:?}");
    assert_eq!(m.requests, parts.iter().sum::<u64>());
    assert_eq!(m.errors, 0, "{m:?}");
    // The merged histogram holds every response of both workers; the live seconds add up to it.
    assert_eq!(m.histogram().unwrap().unwrap().len(), m.ok);
    assert_eq!(live.iter().map(|i| i.requests).sum::<u64>(), m.requests);
    assert_eq!(m.series.len(), live.len());
    assert!(
        m.series.iter().all(|p| p.p99_ms.is_some()),
        "{:?}",
        m.series
    );
    assert_eq!(m.extra.get("workers"), Some(&2.0));
    assert_eq!(m.extra.get("workers_lost"), Some(&0.0));
    // Both workers share this host's clock.
    assert!(out.workers.iter().all(|w| w.clock_offset_ms.abs() < 50.0));
    assert!(
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("merged over 2 workers"))
    );
}

#[test]
fn a_stop_reaches_every_worker_and_the_parts_measured_so_far_are_merged() {
    let server = TestServer::start();
    let mut cfg = config(
        vec![worker(VERSION, 0), worker(VERSION, 0)],
        spec(server.url("/"), 2, 60_000),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    cfg.stop = Some(stop.clone());
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2500));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let begun = std::time::Instant::now();
    let out = coordinate(&cfg, &[], &|_| {}).unwrap();
    setter.join().unwrap();
    assert!(
        begun.elapsed() < Duration::from_secs(20),
        "the 60 s run was not stopped"
    );
    assert!(out.workers.iter().all(|w| w.lost.is_none()));
    assert!(
        out.merged.ok > 0 && out.merged.duration_s < 10.0,
        "{:?}",
        out.merged
    );
}

#[test]
fn a_worker_of_another_version_is_refused_with_both_versions_named() {
    let cfg = config(vec![worker("0.0.1-old", 0)], spec(nobody(), 1, 500));
    let e = coordinate(&cfg, &[], &|_| {}).unwrap_err().to_string();
    assert!(e.contains("0.0.1-old") && e.contains(VERSION), "{e}");
}

#[test]
fn a_clock_off_beyond_the_bound_is_refused_and_one_within_it_is_corrected() {
    let cfg = config(vec![worker(VERSION, 800)], spec(nobody(), 1, 500));
    let e = coordinate(&cfg, &[], &|_| {}).unwrap_err().to_string();
    assert!(
        e.contains("ahead of") && e.contains("--max-clock-offset"),
        "{e}"
    );

    let server = TestServer::start();
    let mut cfg = config(vec![worker(VERSION, -30)], spec(server.url("/"), 2, 1000));
    cfg.max_clock_offset = Duration::from_millis(100);
    let out = coordinate(&cfg, &[], &|_| {}).unwrap();
    let off = out.workers[0].clock_offset_ms;
    assert!((-35.0..=-25.0).contains(&off), "measured offset {off} ms");
    assert!(out.merged.ok > 0);
}

#[test]
fn a_worker_that_dies_is_reported_with_the_load_it_lost_and_the_rest_is_kept() {
    let server = TestServer::start();
    // A worker that answers hello and pings, sends one second, and dies.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dying = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        while let Ok(Some(m)) = recv(&mut r) {
            match m {
                Msg::Hello { .. } => send(
                    &mut w,
                    &Msg::Hello {
                        version: VERSION.into(),
                        protocol: PROTOCOL,
                    },
                )
                .unwrap(),
                Msg::Ping { t0_us } => send(
                    &mut w,
                    &Msg::Pong {
                        t0_us,
                        worker_us: t0_us,
                    },
                )
                .unwrap(),
                Msg::Start { .. } => {
                    send(&mut w, &Msg::Alive).unwrap();
                    return; // the connection drops: the process died
                }
                _ => {}
            }
        }
    });
    let cfg = config(
        vec![worker(VERSION, 0), dying.clone()],
        spec(server.url("/"), 4, 3000),
    );
    let lines = std::sync::Mutex::new(Vec::new());
    let out = coordinate(&cfg, &[], &|l| lines.lock().unwrap().push(l.to_string())).unwrap();
    let lost = &out.workers[1];
    assert_eq!(lost.addr, dying);
    assert!(lost.lost.is_some());
    assert_eq!(out.merged.extra.get("lost_users"), Some(&2.0));
    assert_eq!(out.merged.extra.get("workers_lost"), Some(&1.0));
    assert!(
        out.merged.ok > 0,
        "the live worker's results are kept: {:?}",
        out.workers
            .iter()
            .map(|w| (&w.lost, w.measurement.as_ref().map(|m| (m.requests, m.ok))))
            .collect::<Vec<_>>()
    );
    // The lost worker's part has the run's window, so the merged window is the run's.
    let lost_part = lost.measurement.as_ref().unwrap();
    assert!(!lost_part.start.is_empty() && !out.merged.start.is_empty());
    assert!(
        out.merged.start <= lost_part.start,
        "{} vs {}",
        out.merged.start,
        lost_part.start
    );
    let said = lines.lock().unwrap().join("\n");
    assert!(
        said.contains(&format!("worker {dying} lost")) && said.contains("2 users"),
        "{said}"
    );
}
