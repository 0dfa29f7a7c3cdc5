//! What the load tasks saw: each task's [`Recorder`] counts its attempts in the measured
//! window (totals, statuses, error kinds, a latency histogram, per-second buckets), and
//! [`assemble`] merges them into the run's [`Measurement`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::client::{ErrKind, Target};
use crate::hist::LatencyHistogram;
use crate::measurement::{LoadShape, Measurement, SeriesPoint};
use crate::spec::{DriveSpec, Load};

/// Per-second bucket of one task.
#[derive(Clone, Debug, Default)]
struct Bucket {
    requests: u64,
    ok: u64,
    errors: u64,
    lat_sum_us: u64,
    lat_n: u64,
    max_us: u64,
}

/// What one task saw in the measured window.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    /// The task's target, to describe its first failure.
    target: Option<Arc<Target>>,
    /// When the first failed attempt (error or non-2xx/3xx status) ended, and how it failed;
    /// kept as data so that failing fast costs no formatting.
    first_failure: Option<(Instant, Result<u16, ErrKind>)>,
    hist: LatencyHistogram,
    requests: u64,
    ok: u64,
    errors: u64,
    by_kind: BTreeMap<&'static str, u64>,
    status: BTreeMap<u16, u64>,
    series: Vec<Bucket>,
}

/// The timing frame shared by all tasks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    /// When the run (warm-up included) began.
    pub begin: Instant,
    /// When the measured window begins (after warm-up).
    pub measure_start: Instant,
    /// When the measured window ends.
    pub end: Instant,
}

impl Recorder {
    /// An empty recorder of a task that sends to `target`.
    pub(crate) fn for_target(target: Arc<Target>) -> Self {
        Recorder {
            target: Some(target),
            ..Default::default()
        }
    }

    /// The first failure as one line for people, with when it happened.
    fn first_failure(&self, timeout: Duration) -> Option<(Instant, String)> {
        let (at, outcome) = self.first_failure?;
        let target = self.target.as_ref()?;
        let text = match outcome {
            Ok(status) => format!("{} answered HTTP {status}", target.url),
            Err(kind) => kind.describe(target, timeout),
        };
        Some((at, text))
    }

    /// Counts one attempt that ended at `at`; attempts outside the measured window are not
    /// counted.
    pub(crate) fn record(
        &mut self,
        w: &Window,
        at: Instant,
        latency: Option<Duration>,
        outcome: Result<u16, ErrKind>,
    ) {
        if at < w.measure_start || at >= w.end {
            return;
        }
        let sec = (at - w.measure_start).as_secs() as usize;
        if self.series.len() <= sec {
            self.series.resize(sec + 1, Bucket::default());
        }
        let b = &mut self.series[sec];
        self.requests += 1;
        b.requests += 1;
        if let Some(l) = latency {
            let us = l.as_micros().min(u64::MAX as u128) as u64;
            self.hist.record_us(us);
            b.lat_sum_us += us;
            b.lat_n += 1;
            b.max_us = b.max_us.max(us);
        }
        match outcome {
            Ok(status) => {
                *self.status.entry(status).or_default() += 1;
                if (200..400).contains(&status) {
                    self.ok += 1;
                    b.ok += 1;
                } else {
                    self.errors += 1;
                    b.errors += 1;
                    *self.by_kind.entry("status").or_default() += 1;
                    self.first_failure.get_or_insert((at, outcome));
                }
            }
            Err(kind) => {
                self.first_failure.get_or_insert((at, outcome));
                self.errors += 1;
                b.errors += 1;
                *self.by_kind.entry(kind.name()).or_default() += 1;
            }
        }
    }
}

/// Merges the tasks' recorders into the run's measurement; the window ends at `end` (earlier
/// than planned after Ctrl-C).
pub(crate) fn assemble(
    spec: &DriveSpec,
    recs: Vec<Recorder>,
    w: Window,
    end: Instant,
    begin_wall: SystemTime,
    targets: &[Arc<Target>],
) -> Measurement {
    let load = match spec.load {
        Load::Closed { users, think } => LoadShape::Closed {
            users: users as u64,
            think_time: think.describe(),
        },
        Load::Open { rate, connections } => LoadShape::Open {
            rate_per_s: rate,
            connections: connections as u64,
        },
    };
    let mut m = Measurement::empty("perfpilot-drive", load);
    m.targets = targets.iter().map(|t| t.url.clone()).collect();
    let duration = end.saturating_duration_since(w.measure_start);
    let start_wall = begin_wall + (w.measure_start - w.begin);
    m.start = humantime::format_rfc3339_millis(start_wall).to_string();
    m.end = humantime::format_rfc3339_millis(start_wall + duration).to_string();
    m.warmup_s = spec.warmup.as_secs_f64();
    m.duration_s = duration.as_secs_f64();
    let mut hist = LatencyHistogram::new();
    let seconds = duration.as_secs_f64().ceil() as usize;
    let mut series = vec![Bucket::default(); seconds];
    m.first_error = recs
        .iter()
        .filter_map(|r| r.first_failure(spec.timeout))
        .min_by_key(|(at, _)| *at)
        .map(|(_, text)| text);
    for r in recs {
        hist.add(&r.hist);
        m.requests += r.requests;
        m.ok += r.ok;
        m.errors += r.errors;
        for (k, v) in r.by_kind {
            *m.errors_by_kind.entry(k.to_string()).or_default() += v;
        }
        for (k, v) in r.status {
            *m.status.entry(k.to_string()).or_default() += v;
        }
        for (i, b) in r.series.into_iter().enumerate() {
            if i >= series.len() {
                series.resize(i + 1, Bucket::default());
            }
            let s = &mut series[i];
            s.requests += b.requests;
            s.ok += b.ok;
            s.errors += b.errors;
            s.lat_sum_us += b.lat_sum_us;
            s.lat_n += b.lat_n;
            s.max_us = s.max_us.max(b.max_us);
        }
    }
    m.throughput_rps = if m.duration_s > 0.0 {
        m.ok as f64 / m.duration_s
    } else {
        0.0
    };
    m.series = series
        .into_iter()
        .enumerate()
        .map(|(i, b)| SeriesPoint {
            t_s: i as u64,
            requests: b.requests,
            ok: b.ok,
            errors: b.errors,
            mean_ms: (b.lat_n > 0).then(|| b.lat_sum_us as f64 / b.lat_n as f64 / 1000.0),
            max_ms: (b.lat_n > 0).then(|| b.max_us as f64 / 1000.0),
        })
        .collect();
    m.latency = hist.latency();
    if !hist.is_empty() {
        m.histogram = Some(hist.to_data());
    }
    m
}
