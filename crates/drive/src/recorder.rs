//! What the load saw: each task's (or event-loop thread's) [`Recorder`] counts its attempts in
//! the measured window (totals, statuses, error kinds) and passes each on to its thread's
//! per-second [`Shard`], where the latencies go; [`assemble`] merges the recorders, the drained
//! seconds and their histogram into the run's [`Measurement`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::client::{ErrKind, Target};
use crate::hist::LatencyHistogram;
use crate::interval::{Interval, Shard};
use crate::kinds::{KindTally, kind_results};
use crate::measurement::{LoadShape, Measurement, SeriesPoint};
use crate::spec::{DriveSpec, Load};

/// `extra` key: the mean think pause the users actually took in the measured window, ms.
pub const THINK_MEAN_MS: &str = "think_mean_ms";

/// `extra` key: how many think pauses that mean is over.
pub const THINK_PAUSES: &str = "think_pauses";

/// When the first failed attempt ended, its outcome, its kind of the profile and its target.
type FirstFailure = (Instant, Result<u16, ErrKind>, Option<usize>, Arc<Target>);

/// What one task (or one event-loop thread) saw in the measured window. Latencies go to the
/// thread's per-second [`Shard`] only: the run's histogram is the sum of its seconds.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    /// When the first failed attempt (error or non-2xx/3xx status) ended, how it failed, of
    /// which kind of the profile it was and to which target; kept as data so that failing fast
    /// costs no formatting.
    first_failure: Option<FirstFailure>,
    requests: u64,
    ok: u64,
    errors: u64,
    by_kind: BTreeMap<&'static str, u64>,
    status: BTreeMap<u16, u64>,
    /// The thread's per-second store.
    shard: Arc<Shard>,
    /// The second being counted, passed to the shard when a later one begins or on
    /// [`flush`](Self::flush) (an event loop's one recorder); `None` when each attempt goes
    /// to the shard at once (a task's recorder, which may sleep for seconds).
    second: Option<Interval>,
    batched: bool,
    /// Responses that came over HTTP/2.
    h2_responses: u64,
    /// The thread's per-kind counts, with a request profile.
    kinds: Option<Arc<KindTally>>,
    /// Think pauses begun in the measured window, and their actual total length, seconds.
    pauses: u64,
    paused_s: f64,
}

/// One attempt as it ended.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt {
    /// When it ended.
    pub at: Instant,
    /// Its latency, when it got a response.
    pub latency: Option<Duration>,
    pub outcome: Result<u16, ErrKind>,
    /// Whether it went over HTTP/2.
    pub h2: bool,
    /// The profile's kind, with a profile.
    pub kind: Option<usize>,
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
    /// An empty recorder passing each second to `shard` (`batched`: once the second is over;
    /// else each attempt at once), counting kinds of a request profile into `kinds`.
    pub(crate) fn new(shard: Arc<Shard>, kinds: Option<Arc<KindTally>>, batched: bool) -> Self {
        Recorder {
            shard,
            kinds,
            batched,
            ..Default::default()
        }
    }

    /// The first failure as one line for people, with when it happened.
    fn first_failure(&self, spec: &DriveSpec) -> Option<(Instant, String)> {
        let (at, outcome, kind, target) = self.first_failure.as_ref()?;
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
        Some((*at, text))
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

    /// Counts one attempt to `target`; attempts that ended outside the measured window are
    /// not counted.
    pub(crate) fn record(&mut self, w: &Window, target: &Arc<Target>, a: Attempt) {
        if a.at < w.measure_start || a.at >= w.end {
            return;
        }
        if a.h2 && a.outcome.is_ok() {
            self.h2_responses += 1;
        }
        let sec = (a.at - w.measure_start).as_secs();
        self.requests += 1;
        let us = a
            .latency
            .map(|l| l.as_micros().min(u64::MAX as u128) as u64);
        let ok = matches!(a.outcome, Ok(s) if (200..400).contains(&s));
        if self.batched {
            if self.second.as_ref().is_some_and(|i| i.t_s != sec) {
                self.flush();
            }
            self.second
                .get_or_insert_with(|| Interval::new(sec))
                .count(us, ok);
        } else {
            self.shard.record(sec, us, ok);
        }
        if let (Some(tally), Some(k)) = (&self.kinds, a.kind) {
            tally.record(k, us, a.outcome.ok(), ok);
        }
        match a.outcome {
            Ok(status) => {
                *self.status.entry(status).or_default() += 1;
                if ok {
                    self.ok += 1;
                } else {
                    self.errors += 1;
                    *self.by_kind.entry("status").or_default() += 1;
                }
            }
            Err(e) => {
                self.errors += 1;
                *self.by_kind.entry(e.name()).or_default() += 1;
            }
        }
        if !ok && self.first_failure.is_none() {
            self.first_failure = Some((a.at, a.outcome, a.kind, target.clone()));
        }
    }

    /// Passes the second being counted to the shard.
    pub(crate) fn flush(&mut self) {
        if let Some(i) = self.second.take() {
            self.shard.add(i);
        }
    }

    /// Passes the second being counted on once `now` is past it.
    pub(crate) fn flush_before(&mut self, w: &Window, now: Instant) {
        if let Some(i) = &self.second
            && now.saturating_duration_since(w.measure_start).as_secs() > i.t_s
        {
            self.flush();
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
    hist: LatencyHistogram,
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
