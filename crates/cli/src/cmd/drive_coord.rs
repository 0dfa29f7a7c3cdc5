//! `perfpilot drive --worker` and `--coordinator`: coordinated drivers on several hosts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use perfpilot_drive::coord::{self, CoordinatorConfig, Dialer, Link, WorkerConfig};
use perfpilot_drive::{Interval, Measurement};
use perfpilot_units as units;

use super::remote::{ListenArgs, TlsArgs, log, stdio_peer};

/// perfpilot's version: a coordinator and its workers must agree on it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Serves coordinators on `--listen`, or the one on stdin and stdout (`--stdio`, under ssh);
/// after one session when `once`.
pub fn worker(listen: &ListenArgs, tls: &TlsArgs, once: bool) -> Result<()> {
    let cfg = WorkerConfig {
        version: VERSION.to_string(),
        clock_skew_ms: 0,
        cpu_clock: Some(perfpilot_sys::self_cpu_time),
    };
    if listen.stdio {
        let peer = stdio_peer();
        log(&format!(
            "perfpilot {VERSION} drive worker on stdio for {peer}"
        ));
        let end = coord::serve_session(Link::stdio(peer.clone()), &cfg)
            .with_context(|| format!("coordinator {peer}"))?;
        log(&format!(
            "coordinator {peer}: {}",
            match end {
                coord::SessionEnd::Ran => "share run and reported",
                coord::SessionEnd::HungUp => "hung up before a run",
            }
        ));
        return Ok(());
    }
    let l = listen.bind(tls, "10.0.0.2:7070")?;
    log(&format!(
        "perfpilot {VERSION} drive worker listening on {} ({})",
        l.listener
            .local_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string()),
        l.how
    ));
    coord::serve(&l.listener, &l.admission, &cfg, log, once);
    Ok(())
}

/// Runs the coordinated load and prints one line per worker; returns the merged measurement,
/// whether a worker was lost, and whether Ctrl-C stopped the run.
pub fn coordinate(
    workers: Vec<String>,
    dialer: Dialer,
    spec: coord::wire::WireSpec,
    max_clock_offset: Duration,
    live: &[std::sync::mpsc::Sender<Interval>],
    progress: bool,
) -> Result<(Measurement, bool, bool)> {
    // Ctrl-C stops every worker; the parts measured so far are merged and printed.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
            .context("cannot install the Ctrl-C handler")?;
    }
    let cfg = CoordinatorConfig {
        workers,
        dialer,
        spec,
        version: VERSION.to_string(),
        max_clock_offset,
        start_delay: Duration::from_secs(1),
        stop: Some(stop.clone()),
    };
    let out = coord::coordinate(&cfg, live, &|line| {
        if progress || line.contains(" lost ") {
            eprintln!("{line}");
        }
    })?;
    for w in &out.workers {
        let measured = w.measurement.as_ref().map_or_else(
            || "nothing measured".to_string(),
            |m| {
                format!(
                    "{} requests, {}",
                    units::count(m.requests),
                    units::rate(m.throughput_rps, "req")
                )
            },
        );
        let state = match &w.lost {
            Some((why, after)) => {
                format!(
                    "LOST after {after} s ({why}): its {} are missing",
                    w.share_text()
                )
            }
            None => "ok".to_string(),
        };
        eprintln!(
            "worker {}: {}, clock {:+.2} ms (±{:.2} ms), {measured}: {state}",
            w.addr,
            w.share_text(),
            w.clock_offset_ms,
            w.rtt_ms / 2.0,
        );
    }
    let lost = out.workers.iter().any(|w| w.lost.is_some());
    Ok((out.merged, lost, stop.load(Ordering::Relaxed)))
}
