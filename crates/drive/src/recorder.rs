//! What the load tasks saw: each task's [`Recorder`] counts its attempts in the measured
//! window (totals, statuses, error kinds, a latency histogram) and passes each on to its
//! thread's per-second [`Shard`]; [`assemble`] merges the recorders and the drained seconds
//! into the run's [`Measurement`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::client::{ErrKind, Target};
use crate::hist::LatencyHistogram;
use crate::interval::Shard;
use crate::kinds::{KindTally, kind_results};
use crate::measurement::{LoadShape, Measurement, SeriesPoint};
use crate::spec::{DriveSpec, Load};

/// `extra` key: the mean think pause the users actually took in the measured window, ms.
pub const THINK_MEAN_MS: &str = "think_mean_ms";

/// `extra` key: how many think pauses that mean is over.
pub const THINK_PAUSES: &str = "think_pauses";

/// What one task saw in the measured window.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    /// The task's target, to describe its first failure.
    target: Option<Arc<Target>>,
    /// When the first failed attempt (error or non-2xx/3xx status) ended, how it failed and
    /// of which kind of the profile it was; kept as data so that failing fast costs no
    /// formatting.
    first_failure: Option<(Instant, Result<u16, ErrKind>, Option<usize>)>,
    hist: LatencyHistogram,
    requests: u64,
    ok: u64,
    errors: u64,
    by_kind: BTreeMap<&'static str, u64>,
    status: BTreeMap<u16, u64>,
    /// The thread's per-second store.
    shard: Arc<Shard>,
    /// Responses that came over HTTP/2.
    h2_responses: u64,
    /// The thread's per-kind counts, with a request profile.
    kinds: Option<Arc<KindTally>>,
    /// Think pauses begun in the measured window, and their actual total length, seconds.
    pauses: u64,
    paused_s: f64,
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
    /// An empty recorder of a task that sends to `target`, counting kinds of a request
    /// profile into `kinds`.
    pub(crate) fn new(
        target: Arc<Target>,
        shard: Arc<Shard>,
        kinds: Option<Arc<KindTally>>,
    ) -> Self {
        Recorder {
            target: Some(target),
            shard,
            kinds,
            ..Default::default()
        }
    }

    /// The first failure as one line for people, with when it happened.
    fn first_failure(&self, spec: &DriveSpec) -> Option<(Instant, String)> {
        let (at, outcome, kind) = self.first_failure?;
        let target = self.target.as_ref()?;
        let mut text = match outcome {
            Ok(status) => format!("{} answered HTTP {status}", target.url),
            Err(e) => e.describe(target, spec.timeout),
        };
        if let Some(k) = kind.and_then(|k| spec.profile.as_ref()?.kinds.get(k)) {
            text.push_str(&format!(
                " (request {:?}: {} {})",
                k.name,
                k.method.as_str(),
                k.url
            ));
        }
        Some((at, text))
    }

    /// Counts one think pause that began at `at` and lasted `actual` (lateness and its debt
    /// included), when it began in the measured window.
    pub(crate) fn record_pause(&mut self, w: &Window, at: Instant, actual: Duration) {
        if at < w.measure_start || at >= w.end {
            return;
        }
        self.pauses += 1;
        self.paused_s += actual.as_secs_f64();
    }

    /// Counts one attempt (of `kind` of the profile, if there is one) that ended at `at`;
    /// attempts outside the measured window are not counted.
    pub(crate) fn record(
        &mut self,
        w: &Window,
        at: Instant,
        latency: Option<Duration>,
        outcome: Result<u16, ErrKind>,
        h2: bool,
        kind: Option<usize>,
    ) {
        if at < w.measure_start || at >= w.end {
            return;
        }
        if h2 && outcome.is_ok() {
            self.h2_responses += 1;
        }
        let sec = (at - w.measure_start).as_secs();
        self.requests += 1;
        let us = latency.map(|l| l.as_micros().min(u64::MAX as u128) as u64);
        if let Some(us) = us {
            self.hist.record_us(us);
        }
        let ok = matches!(outcome, Ok(s) if (200..400).contains(&s));
        self.shard.record(sec, us, ok);
        if let (Some(tally), Some(k)) = (&self.kinds, kind) {
            tally.record(k, us, outcome.ok(), ok);
        }
        match outcome {
            Ok(status) => {
                *self.status.entry(status).or_default() += 1;
                if ok {
                    self.ok += 1;
                } else {
                    self.errors += 1;
                    *self.by_kind.entry("status").or_default() += 1;
                    self.first_failure.get_or_insert((at, outcome, kind));
                }
            }
            Err(e) => {
                self.first_failure.get_or_insert((at, outcome, kind));
                self.errors += 1;
                *self.by_kind.entry(e.name()).or_default() += 1;
            }
        }
    }
}

/// Merges the tasks' recorders and the window's seconds into the run's measurement; the window
/// ends at `end` (earlier than planned after Ctrl-C).
#[allow(clippy::too_many_arguments)]
pub(crate) fn assemble(
    spec: &DriveSpec,
    recs: Vec<Recorder>,
    seconds: Vec<SeriesPoint>,
    w: Window,
    end: Instant,
    begin_wall: SystemTime,
    targets: &[Arc<Target>],
    tallies: &[Arc<KindTally>],
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
    m.first_error = recs
        .iter()
        .filter_map(|r| r.first_failure(spec))
        .min_by_key(|(at, _)| *at)
        .map(|(_, text)| text);
    let mut h2_responses = 0;
    let (mut pauses, mut paused_s) = (0, 0.0);
    for r in recs {
        h2_responses += r.h2_responses;
        pauses += r.pauses;
        paused_s += r.paused_s;
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
    }
    m.throughput_rps = if m.duration_s > 0.0 {
        m.ok as f64 / m.duration_s
    } else {
        0.0
    };
    // Every second of the window has its point, also one in which nothing completed.
    let n = duration.as_secs_f64().ceil() as u64;
    let mut by_second: BTreeMap<u64, SeriesPoint> =
        seconds.into_iter().map(|p| (p.t_s, p)).collect();
    m.series = (0..n.max(by_second.keys().next_back().map_or(0, |k| k + 1)))
        .map(|t_s| {
            by_second.remove(&t_s).unwrap_or(SeriesPoint {
                t_s,
                ..Default::default()
            })
        })
        .collect();
    if h2_responses > 0 {
        m.extra
            .insert("http2_responses".to_string(), h2_responses as f64);
    }
    // The think time the users actually paused: a window's few exponential draws wander from
    // the asked mean (±10 % over 100 of them), and X = N / (R + Z) holds for this Z.
    if pauses > 0 {
        m.extra
            .insert(THINK_MEAN_MS.to_string(), paused_s / pauses as f64 * 1e3);
        m.extra.insert(THINK_PAUSES.to_string(), pauses as f64);
    }
    if let Some(profile) = &spec.profile {
        let tallies: Vec<&KindTally> = tallies.iter().map(|t| t.as_ref()).collect();
        m.request_kinds = kind_results(profile, &tallies);
    }
    m.latency = hist.latency();
    if !hist.is_empty() {
        m.histogram = Some(hist.to_data());
    }
    m
}
