//! The cost of `/metrics` with 1,000 workloads watched and 5,000 actions in the journal:
//! building and encoding the families (once per scan), answering a scrape (the cached text),
//! and the daemon's CPU per scrape, as a share of one CPU at one scrape every 5 s.
//!
//! `cargo bench -p perfpilot-export --bench metrics` prints the figures (docs/metrics.md).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use perfpilot_export::families::{self, Figures};
use perfpilot_export::format::to_prometheus;
use perfpilot_export::journal::Journal;
use perfpilot_export::serve::{Endpoint, Pages};
use perfpilot_optimize::counters::COUNTERS;
use perfpilot_optimize::cpu::CpuTime;
use perfpilot_optimize::engine::{Status, WorkloadClass, WorkloadStatus};
use perfpilot_store::ActionRecord;
use perfpilot_store::journal::ActionState;

const WORKLOADS: usize = 1000;
const ACTIONS: i64 = 5000;
const RENDERS: usize = 50;
const SCRAPES: usize = 500;

fn status() -> Status {
    let classes = WorkloadClass::ALL;
    Status {
        interval_s: 5.0,
        scans: 1000,
        workloads: (0..WORKLOADS)
            .map(|i| WorkloadStatus {
                signature: format!("{i:016x}"),
                name: format!("service-{i}"),
                pids: vec![1000 + i as i32],
                cpu_cores: 0.5,
                threads: 8,
                rss: 1 << 30,
                age_s: 3600.0,
                signal: None,
                signal_source: None,
                signal_passed_over: vec![],
                state: "optimized: nothing more to do".into(),
                class: classes[i % classes.len()],
                capacity: None,
                cgroup: None,
                container: None,
                cpuset: None,
                manual: vec![],
            })
            .collect(),
        ..Status::default()
    }
}

fn journal() -> Journal {
    let strategies = [
        "cache_affinity",
        "memory_affinity",
        "large_pages",
        "read_ahead",
    ];
    let decisions = ["keep", "revert", "neutral"];
    let records: Vec<ActionRecord> = (0..ACTIONS)
        .map(|id| ActionRecord {
            id,
            signature: format!("{:016x}", id % WORKLOADS as i64),
            workload: format!("service-{}", id % WORKLOADS as i64),
            strategy: strategies[id as usize % 4].into(),
            state: ActionState::Reverted,
            changes: "{}".into(),
            undo: "[]".into(),
            reason: String::new(),
            note: String::new(),
            verdict: Some(format!(
                "{{\"decision\":\"{}\",\"gain\":{{\"ratio\":{}}}}}",
                decisions[id as usize % 3],
                0.9 + (id % 20) as f64 / 100.0
            )),
            created_ms: id,
            updated_ms: id,
        })
        .collect();
    let mut j = Journal::default();
    j.take(&records);
    j
}

fn get(addr: std::net::SocketAddr) -> usize {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n").expect("write");
    let mut body = Vec::new();
    s.read_to_end(&mut body).expect("read");
    body.len()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let st = status();
    let j = journal();
    let scans = families::scan_histogram();
    let figures = Figures {
        status: &st,
        effective_interval_s: 5.0,
        configured_interval_s: 5.0,
        cpu: CpuTime::now(),
        totals: COUNTERS.totals(),
    };
    let mut render = Vec::new();
    let mut om = String::new();
    for _ in 0..RENDERS {
        let t = Instant::now();
        om = families::render(&figures, &j, &scans);
        let _ = to_prometheus(&om);
        render.push(t.elapsed());
    }
    render.sort();
    println!(
        "render (once per scan): {WORKLOADS} workloads, {ACTIONS} actions: median {:.2} ms, max {:.2} ms; {} bytes, {} lines",
        ms(render[RENDERS / 2]),
        ms(render[RENDERS - 1]),
        om.len(),
        om.lines().count()
    );

    let pages = Arc::new(RwLock::new(Pages {
        prometheus: to_prometheus(&om),
        openmetrics: om,
        status: String::new(),
    }));
    let ep = Endpoint::start(
        "127.0.0.1:0".parse().expect("addr"),
        pages,
        perfpilot_export::Access::default(),
    )
    .expect("listen");
    let addr = ep.addr();
    get(addr);
    let mut answer = Vec::new();
    let cpu0 = CpuTime::now();
    for _ in 0..SCRAPES {
        let t = Instant::now();
        get(addr);
        answer.push(t.elapsed());
    }
    let cpu1 = CpuTime::now();
    answer.sort();
    // The client here runs in the same process: its CPU is counted too, so this is an upper
    // bound on the daemon's share.
    let per_scrape = (cpu1.monitoring + cpu1.changes)
        .saturating_sub(cpu0.monitoring + cpu0.changes)
        .as_secs_f64()
        / SCRAPES as f64;
    println!(
        "scrape /metrics ({SCRAPES} GETs over loopback): median {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        ms(answer[SCRAPES / 2]),
        ms(answer[SCRAPES * 99 / 100]),
        ms(answer[SCRAPES - 1])
    );
    println!(
        "CPU per scrape (server and client): {:.3} ms; one scrape every 5 s: {:.4} % of one CPU",
        per_scrape * 1e3,
        per_scrape / 5.0 * 100.0
    );
}
