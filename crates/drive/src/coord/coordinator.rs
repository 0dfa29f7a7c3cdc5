//! `perfpilot drive --coordinator`: connects to the workers, refuses one of another version,
//! measures each one's clock offset (corrected, or refused over the bound), splits the load by
//! users or rate, starts every share at the same instant, merges the streamed seconds live,
//! and merges the measurements at the end; a worker that is lost is reported with the load it
//! carried and the part it measured before is kept.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::dial::{Dialer, closed_early};
use super::link::{Link, LinkReader, LinkWriter};
use super::wire::{Msg, PROTOCOL, WireLoad, WireSpec};
use crate::error::{DriveError, invalid};
use crate::hist::LatencyHistogram;
use crate::interval::Interval;
use crate::measurement::{LoadShape, Measurement};

/// Silence from a worker for this long during a run means it is lost (it says `alive` every
/// second).
pub const WORKER_SILENCE: Duration = Duration::from_secs(10);

/// A coordinated run.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// Worker addresses (`ssh://host`, `host:port`, …: [`super::dial`]).
    pub workers: Vec<String>,
    /// How workers are reached.
    pub dialer: Dialer,
    /// The whole run; each worker gets its share.
    pub spec: WireSpec,
    /// perfpilot's version, which every worker must run too.
    pub version: String,
    /// A worker whose clock is further off than this is refused; closer ones are corrected.
    pub max_clock_offset: Duration,
    /// From the last worker's clock check to the common start.
    pub start_delay: Duration,
    /// Set (say by a Ctrl-C handler) to stop every worker early; each then sends what it
    /// measured so far.
    pub stop: Option<Arc<AtomicBool>>,
}

/// What one worker did.
#[derive(Clone, Debug)]
pub struct WorkerReport {
    /// Its address.
    pub addr: String,
    /// Its share of the load.
    pub share: WireLoad,
    /// Its clock minus this host's, ms (corrected in the start time it was given).
    pub clock_offset_ms: f64,
    /// The round trip of the best clock reading, ms.
    pub rtt_ms: f64,
    /// Its measurement (a lost worker's is made of the seconds it sent before).
    pub measurement: Option<Measurement>,
    /// Why it was lost, and after how many seconds of the window.
    pub lost: Option<(String, u64)>,
}

impl WorkerReport {
    /// The lost load in words (`25 users`, `500 req/s over 8 connections`).
    pub fn share_text(&self) -> String {
        match &self.share {
            WireLoad::Closed { users, .. } => format!("{users} users"),
            WireLoad::Open { rate, connections } => {
                format!("{rate:.0} req/s over {connections} connections")
            }
        }
    }
}

/// A coordinated run's outcome.
#[derive(Clone, Debug)]
pub struct Coordinated {
    /// Every worker's measurement merged; `extra` holds `workers`, `workers_lost` and the load
    /// lost (`lost_users` or `lost_rate_per_s`).
    pub merged: Measurement,
    /// Each worker.
    pub workers: Vec<WorkerReport>,
}

fn worker_err(addr: &str, reason: impl Into<String>) -> DriveError {
    DriveError::Worker {
        addr: addr.to_string(),
        reason: reason.into(),
    }
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Splits the run into `n` shares: users (or connections) as evenly as possible, the rate in
/// equal parts with schedules interleaved.
pub fn split(spec: &WireSpec, n: usize) -> Result<Vec<WireSpec>, DriveError> {
    let total = spec.slots();
    if n == 0 {
        return Err(invalid("workers", "", "at least one worker is needed"));
    }
    if total < n {
        let what = match spec.load {
            WireLoad::Closed { .. } => "users",
            WireLoad::Open { .. } => "connections",
        };
        return Err(invalid(
            "load",
            &total.to_string(),
            format!("{total} {what} cannot be split over {n} workers: give at least one each"),
        ));
    }
    let mut offset = 0;
    Ok((0..n)
        .map(|i| {
            let slots = total / n + usize::from(i < total % n);
            let mut s = spec.clone();
            s.slot_offset = offset;
            offset += slots;
            match &spec.load {
                WireLoad::Closed { think, .. } => {
                    s.load = WireLoad::Closed {
                        users: slots,
                        think: think.clone(),
                    };
                }
                WireLoad::Open { rate, .. } => {
                    s.load = WireLoad::Open {
                        rate: rate / n as f64,
                        connections: slots,
                    };
                    // Worker i sends i/rate after worker 0: the shares interleave.
                    s.schedule_offset_us = (i as f64 * 1e6 / rate) as u64;
                }
            }
            s
        })
        .collect())
}

/// A connected worker before the start.
struct Session {
    addr: String,
    writer: LinkWriter,
    reader: LinkReader,
    offset_us: i64,
    rtt_us: i64,
}

/// What a worker's program is asked to run over SSH.
const WORKER_ARGS: [&str; 3] = ["drive", "--worker", "--stdio"];

/// Connects, says hello, checks the version and measures the clock offset.
fn open(addr: &str, cfg: &CoordinatorConfig) -> Result<Session, DriveError> {
    let Link {
        mut reader, writer, ..
    } = cfg.dialer.dial(addr, &WORKER_ARGS).map_err(|why| {
        worker_err(
            addr,
            format!("{why}: is `perfpilot drive --worker` listening there?"),
        )
    })?;
    reader.set_timeout(Some(WORKER_SILENCE));
    let io = |e: std::io::Error| worker_err(addr, e.to_string());
    writer
        .send(&Msg::Hello {
            version: cfg.version.clone(),
            protocol: PROTOCOL,
        })
        .map_err(io)?;
    match reader.recv().map_err(io)? {
        Some(Msg::Hello { version, protocol }) => {
            if version != cfg.version || protocol != PROTOCOL {
                return Err(worker_err(
                    addr,
                    format!(
                        "the worker runs perfpilot {version} (protocol {protocol}), this \
                         coordinator perfpilot {} (protocol {PROTOCOL}): run the same version on \
                         both",
                        cfg.version
                    ),
                ));
            }
        }
        Some(Msg::Refused { reason }) => return Err(worker_err(addr, reason)),
        Some(other) => return Err(worker_err(addr, format!("expected hello, got {other:?}"))),
        None => {
            return Err(worker_err(
                addr,
                format!("{} at hello", closed_early(writer.transport_said())),
            ));
        }
    }
    // NTP's estimate: the worker read its clock halfway through the round trip; the reading
    // with the shortest round trip is the most certain.
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..8 {
        let t0 = now_us();
        writer.send(&Msg::Ping { t0_us: t0 }).map_err(io)?;
        let Some(Msg::Pong { t0_us, worker_us }) = reader.recv().map_err(io)? else {
            return Err(worker_err(addr, "did not answer the clock ping"));
        };
        let t1 = now_us();
        if t0_us != t0 {
            return Err(worker_err(addr, "answered another clock ping"));
        }
        let rtt = t1 - t0;
        let offset = worker_us - (t0 + t1) / 2;
        if best.is_none_or(|(r, _)| rtt < r) {
            best = Some((rtt, offset));
        }
    }
    let (rtt_us, offset_us) = best.unwrap_or((0, 0));
    let bound = cfg.max_clock_offset.as_micros() as i64;
    if offset_us.abs() > bound {
        return Err(worker_err(
            addr,
            format!(
                "its clock is {:.1} ms {} this host's (measured to ±{:.1} ms), more than the \
                 {} ms allowed (--max-clock-offset): synchronize the clocks (chrony, NTP)",
                offset_us.abs() as f64 / 1000.0,
                if offset_us > 0 { "ahead of" } else { "behind" },
                rtt_us as f64 / 2000.0,
                cfg.max_clock_offset.as_millis()
            ),
        ));
    }
    Ok(Session {
        addr: addr.to_string(),
        writer,
        reader,
        offset_us,
        rtt_us,
    })
}

/// What the reader thread of one worker passes on.
enum Event {
    Msg(Box<Msg>),
    Lost(String),
}

/// A worker's seconds so far.
#[derive(Default)]
struct Seen {
    last_t: Option<u64>,
    requests: u64,
    ok: u64,
    errors: u64,
    hist: LatencyHistogram,
}

/// Runs the coordinated load. Each merged second goes to `live`; `progress` gets a line per
/// second and per event (a worker lost).
pub fn coordinate(
    cfg: &CoordinatorConfig,
    live: &[Sender<Interval>],
    progress: &dyn Fn(&str),
) -> Result<Coordinated, DriveError> {
    let shares = split(&cfg.spec, cfg.workers.len())?;
    // The spec is checked here before any worker is contacted.
    let checked = cfg.spec.to_drive_spec(&std::env::temp_dir())?;
    if let Some(ca) = &checked.tls.ca_file {
        let _ = std::fs::remove_file(ca);
    }
    let mut sessions = Vec::new();
    for addr in &cfg.workers {
        sessions.push(open(addr, cfg)?);
    }
    let start_ms = (now_us() / 1000) as u64 + cfg.start_delay.as_millis() as u64;
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Event)>();
    let (mut reports, writers) = start(sessions, shares, start_ms, &tx)?;
    drop(tx);
    let mut merge = LiveMerge::new(reports.len(), start_ms + cfg.spec.warmup_ms, live, progress);
    let mut stopping = false;
    loop {
        let (i, ev) = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(x) => x,
            Err(RecvTimeoutError::Timeout) => {
                if !stopping && cfg.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
                    stopping = true;
                    progress("stopping every worker; each sends what it measured so far");
                    for w in &writers {
                        let _ = w.send(&Msg::Stop);
                    }
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        merge.on_event(i, ev, &mut reports);
    }
    merge.emit(true);
    let merged = merge_parts(cfg, &mut reports, &merge)?;
    Ok(Coordinated {
        merged,
        workers: reports,
    })
}

/// Sends every worker its share and the common start (corrected by its clock offset), and
/// starts a thread per worker that passes its messages on to `tx`.
fn start(
    sessions: Vec<Session>,
    shares: Vec<WireSpec>,
    start_ms: u64,
    tx: &Sender<(usize, Event)>,
) -> Result<(Vec<WorkerReport>, Vec<LinkWriter>), DriveError> {
    let mut reports = Vec::new();
    let mut writers = Vec::new();
    for (i, (s, share)) in sessions.into_iter().zip(shares).enumerate() {
        let start_at_ms = (start_ms as i64 + s.offset_us / 1000).max(0) as u64;
        let load = share.load.clone();
        s.writer
            .send(&Msg::Start {
                spec: share,
                start_at_ms,
            })
            .map_err(|e| worker_err(&s.addr, e.to_string()))?;
        reports.push(WorkerReport {
            addr: s.addr.clone(),
            share: load,
            clock_offset_ms: s.offset_us as f64 / 1000.0,
            rtt_ms: s.rtt_us as f64 / 1000.0,
            measurement: None,
            lost: None,
        });
        writers.push(s.writer);
        let tx = tx.clone();
        let reader = s.reader;
        std::thread::spawn(move || pass_on(i, reader, &tx));
    }
    Ok((reports, writers))
}

/// Passes worker `i`'s messages on until its last one (done or failed), or says why it was
/// lost.
fn pass_on(i: usize, mut reader: LinkReader, tx: &Sender<(usize, Event)>) {
    loop {
        match reader.recv() {
            Ok(Some(m)) => {
                let done = matches!(m, Msg::Done { .. } | Msg::Failed { .. });
                if tx.send((i, Event::Msg(Box::new(m)))).is_err() || done {
                    break;
                }
            }
            Ok(None) => {
                let _ = tx.send((i, Event::Lost("closed the connection".into())));
                break;
            }
            Err(e) => {
                let why = if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) {
                    format!("silent for {} s", WORKER_SILENCE.as_secs())
                } else {
                    e.to_string()
                };
                let _ = tx.send((i, Event::Lost(why)));
                break;
            }
        }
    }
}

/// The workers' seconds merged as they arrive: a second is passed on once every worker still
/// running has sent it or a later one.
struct LiveMerge<'a> {
    window_start_ms: u64,
    seen: Vec<Seen>,
    active: Vec<bool>,
    pending: BTreeMap<u64, Interval>,
    merged_seconds: Vec<Interval>,
    live: &'a [Sender<Interval>],
    progress: &'a dyn Fn(&str),
}

impl<'a> LiveMerge<'a> {
    fn new(
        n: usize,
        window_start_ms: u64,
        live: &'a [Sender<Interval>],
        progress: &'a dyn Fn(&str),
    ) -> Self {
        LiveMerge {
            window_start_ms,
            seen: (0..n).map(|_| Seen::default()).collect(),
            active: vec![true; n],
            pending: BTreeMap::new(),
            merged_seconds: Vec::new(),
            live,
            progress,
        }
    }

    /// Takes in one worker's message or loss.
    fn on_event(&mut self, i: usize, ev: Event, reports: &mut [WorkerReport]) {
        match ev {
            Event::Msg(m) => match *m {
                Msg::Interval(w) => {
                    let Ok(iv) = w.to_interval() else {
                        return;
                    };
                    self.add_second(i, iv);
                    self.emit(false);
                }
                Msg::Done { measurement } => {
                    reports[i].measurement = Some(*measurement);
                    self.active[i] = false;
                    self.emit(false);
                }
                Msg::Failed { reason } => {
                    self.active[i] = false;
                    reports[i].lost = Some((reason, self.seen[i].last_t.map_or(0, |t| t + 1)));
                }
                _ => {}
            },
            Event::Lost(why) => {
                if self.active[i] {
                    self.active[i] = false;
                    let after = self.seen[i].last_t.map_or(0, |t| t + 1);
                    (self.progress)(&format!(
                        "worker {} lost after {after} s of the window ({why}): its {} are \
                         missing from then on",
                        reports[i].addr,
                        reports[i].share_text()
                    ));
                    reports[i].lost = Some((why, after));
                    self.emit(false);
                }
            }
        }
    }

    /// Counts worker `i`'s second and adds it to the merged second of the same time.
    fn add_second(&mut self, i: usize, mut iv: Interval) {
        let s = &mut self.seen[i];
        s.last_t = Some(s.last_t.map_or(iv.t_s, |t| t.max(iv.t_s)));
        s.requests += iv.requests;
        s.ok += iv.ok;
        s.errors += iv.errors;
        s.hist.add(&iv.hist);
        iv.window_start_ms = self.window_start_ms;
        match self.pending.get_mut(&iv.t_s) {
            Some(p) => p.add(&iv),
            None => {
                self.pending.insert(iv.t_s, iv);
            }
        }
    }

    /// Passes on the complete seconds (`all`: every second still pending, at the end).
    fn emit(&mut self, all: bool) {
        // A second is complete when every worker still running has sent it or a later one.
        let horizon = self
            .seen
            .iter()
            .zip(&self.active)
            .filter(|(_, a)| **a)
            .map(|(s, _)| s.last_t.map_or(-1, |t| t as i64))
            .min();
        let ready: Vec<u64> = self
            .pending
            .keys()
            .copied()
            .filter(|t| all || horizon.is_none_or(|h| (*t as i64) <= h))
            .collect();
        for t in ready {
            if let Some(i) = self.pending.remove(&t) {
                let l = i.hist.latency();
                (self.progress)(&format!(
                    "second {t}: {} ok, {} errors, p50 {} p99 {} (merged over {} workers)",
                    i.ok,
                    i.errors,
                    l.as_ref()
                        .and_then(|l| l.p50_ms)
                        .map_or("-".into(), perfpilot_units::duration_ms),
                    l.as_ref()
                        .and_then(|l| l.p99_ms)
                        .map_or("-".into(), perfpilot_units::duration_ms),
                    self.active.iter().filter(|a| **a).count()
                ));
                for s in self.live {
                    let _ = s.send(i.clone());
                }
                self.merged_seconds.push(i);
            }
        }
    }
}

/// Merges every worker's measurement, and what a lost worker sent before it was lost, into
/// the run's; says how many workers and how much load were lost, and the driver's cost per
/// request over all of them.
fn merge_parts(
    cfg: &CoordinatorConfig,
    reports: &mut [WorkerReport],
    merge: &LiveMerge,
) -> Result<Measurement, DriveError> {
    let mut parts = Vec::new();
    for (r, s) in reports.iter_mut().zip(&merge.seen) {
        if r.measurement.is_none() && r.lost.is_some() {
            r.measurement = Some(lost_part(cfg, r, s, merge.window_start_ms));
        }
        if let Some(m) = &r.measurement {
            parts.push(m.clone());
        }
    }
    if parts.is_empty() {
        return Err(worker_err(
            &cfg.workers.join(", "),
            "every worker was lost before it measured anything",
        ));
    }
    let mut merged = Measurement::merge(&parts)?;
    merged.source = "perfpilot-drive (coordinated)".to_string();
    merged.series = merge.merged_seconds.iter().map(Interval::point).collect();
    merged.extra.insert("workers".into(), reports.len() as f64);
    let lost: Vec<&WorkerReport> = reports.iter().filter(|r| r.lost.is_some()).collect();
    merged
        .extra
        .insert("workers_lost".into(), lost.len() as f64);
    for r in &lost {
        match r.share {
            WireLoad::Closed { users, .. } => {
                *merged.extra.entry("lost_users".into()).or_default() += users as f64;
            }
            WireLoad::Open { rate, .. } => {
                *merged.extra.entry("lost_rate_per_s".into()).or_default() += rate;
            }
        }
    }
    // The driver's cost per request over all workers (the parts' figures do not add).
    merged.extra.remove("driver_cpu_per_request_ms");
    if let Some(cpu) = &merged.cpu {
        let cpu_s: f64 = cpu.iter().map(|c| c.cpu_s).sum();
        if merged.requests > 0 {
            merged.extra.insert(
                "driver_cpu_per_request_ms".into(),
                cpu_s * 1000.0 / merged.requests as f64,
            );
        }
    }
    Ok(merged)
}

/// A lost worker's measurement, made of the seconds it sent before it was lost.
fn lost_part(
    cfg: &CoordinatorConfig,
    r: &WorkerReport,
    s: &Seen,
    window_start_ms: u64,
) -> Measurement {
    let mut m = Measurement::empty(
        "perfpilot-drive (lost worker)",
        LoadShape::External {
            description: format!("worker {} ({})", r.addr, r.share_text()),
        },
    );
    m.targets = cfg.spec.targets.clone();
    let after = r.lost.as_ref().map_or(0, |l| l.1);
    let start = UNIX_EPOCH + Duration::from_millis(window_start_ms);
    m.start = humantime::format_rfc3339_millis(start).to_string();
    m.end = humantime::format_rfc3339_millis(start + Duration::from_secs(after)).to_string();
    m.warmup_s = cfg.spec.warmup_ms as f64 / 1000.0;
    m.requests = s.requests;
    m.ok = s.ok;
    m.errors = s.errors;
    m.duration_s = after as f64;
    m.throughput_rps = if after > 0 {
        s.ok as f64 / after as f64
    } else {
        0.0
    };
    m.latency = s.hist.latency();
    if !s.hist.is_empty() {
        m.histogram = Some(s.hist.to_data());
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(load: WireLoad) -> WireSpec {
        WireSpec {
            targets: vec!["http://127.0.0.1:1/".into()],
            method: "GET".into(),
            headers: vec![],
            body: None,
            data: None,
            load,
            timeout_ms: 1000,
            warmup_ms: 0,
            duration_ms: 1000,
            threads: Some(1),
            http: "auto".into(),
            insecure: false,
            ca_pem: None,
            slot_offset: 0,
            schedule_offset_us: 0,
        }
    }

    #[test]
    fn users_split_evenly_with_distinct_slots_and_rates_interleave() {
        let s = split(
            &spec(WireLoad::Closed {
                users: 10,
                think: "0".into(),
            }),
            4,
        )
        .unwrap();
        let users: Vec<usize> = s.iter().map(WireSpec::slots).collect();
        assert_eq!(users, [3, 3, 2, 2]);
        assert_eq!(
            s.iter().map(|w| w.slot_offset).collect::<Vec<_>>(),
            [0, 3, 6, 8]
        );
        let s = split(
            &spec(WireLoad::Open {
                rate: 1000.0,
                connections: 8,
            }),
            2,
        )
        .unwrap();
        assert_eq!(
            s[1].load,
            WireLoad::Open {
                rate: 500.0,
                connections: 4
            }
        );
        assert_eq!(s[1].schedule_offset_us, 1000);
        let e = split(
            &spec(WireLoad::Closed {
                users: 2,
                think: "0".into(),
            }),
            3,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("2 users cannot be split over 3 workers"),
            "{e}"
        );
    }
}
