//! [`Measurement`]: the one JSON shape every load run produces.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::DriveError;
use crate::hist::LatencyHistogram;
use crate::kinds::{KindResult, merge_kinds};

/// Version of the [`Measurement`] JSON shape, written into every file as `"schema"`.
/// Bumped when a field changes meaning or is removed; new optional fields keep the version.
pub const MEASUREMENT_SCHEMA: u32 = 1;

/// The result of one load run, from the built-in driver or an adapter.
///
/// ```json
/// {
///   "schema": 1, "source": "perfpilot-drive", "name": null,
///   "load": {"kind": "closed", "users": 50, "think_time": "exp:1s"},
///   "targets": ["http://127.0.0.1:8080/score/iris"],
///   "start": "2026-11-22T02:00:00.000Z", "end": "2026-11-22T02:10:05.000Z",
///   "warmup_s": 5.0, "duration_s": 600.0,
///   "requests": 120345, "ok": 120300, "errors": 45, "throughput_rps": 200.5,
///   "latency": {"count": 120345, "mean_ms": 3.1, "p50_ms": 2.9, "p90_ms": 4.0, "p95_ms": 5.2,
///               "p99_ms": 9.8, "p99_9_ms": 20.1, "max_ms": 51.0, ...},
///   "errors_by_kind": {"timeout": 40, "status": 5}, "status": {"200": 120300, "503": 5},
///   "series": [{"t_s": 0, "requests": 201, "ok": 201, "errors": 0, "mean_ms": 3.0, "max_ms": 9.1}],
///   "histogram": {"unit": "us", "encoding": "hdrhistogram-v2-deflate-base64", "data": "HISF…"},
///   "cpu": null, "extra": {}
/// }
/// ```
///
/// Latencies are in milliseconds. Fields an adapter cannot fill are `null` (e.g. `wrk` prints no
/// p99.9 and no histogram). `cpu` is filled by whoever observed the processes during the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// [`MEASUREMENT_SCHEMA`] of the writer.
    pub schema: u32,
    /// Who produced it: `perfpilot-drive`, `wrk`, `pgbench`, `redis-benchmark`, `command`, `merge`.
    pub source: String,
    /// A test name where the source has several (redis-benchmark's `SET`, `GET`, …).
    #[serde(default)]
    pub name: Option<String>,
    /// The load that was applied.
    pub load: LoadShape,
    /// Target URLs or addresses.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Start of the measured window (after warm-up), RFC 3339 UTC.
    pub start: String,
    /// End of the measured window, RFC 3339 UTC.
    pub end: String,
    /// Warm-up before `start`, seconds (not measured).
    #[serde(default)]
    pub warmup_s: f64,
    /// Length of the measured window, seconds.
    pub duration_s: f64,
    /// Completed attempts in the window: responses of any status plus transport errors.
    pub requests: u64,
    /// Responses with a 2xx or 3xx status (or successful transactions for adapters).
    pub ok: u64,
    /// `requests - ok`: transport errors and non-2xx/3xx responses.
    pub errors: u64,
    /// `ok / duration_s` (summed over processes in a merge).
    pub throughput_rps: f64,
    /// Latency summary, ms; from `histogram` when there is one.
    #[serde(default)]
    pub latency: Option<Latency>,
    /// Error counts by kind: `connect`, `timeout`, `reset`, `io`, `http`, `status` (non-2xx/3xx).
    #[serde(default)]
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Response counts by HTTP status code.
    #[serde(default)]
    pub status: BTreeMap<String, u64>,
    /// One point per second of the measured window.
    #[serde(default)]
    pub series: Vec<SeriesPoint>,
    /// Every latency of the window, so runs merge exactly.
    #[serde(default)]
    pub histogram: Option<HistogramData>,
    /// CPU used per process or tier during the window, when someone observed it.
    #[serde(default)]
    pub cpu: Option<Vec<CpuUsage>>,
    /// Source-specific figures (e.g. `transfer_bytes_per_s` from wrk, `value` from a command).
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
    /// The first failed request of the window in words, with what to check (e.g. `connection
    /// refused by 127.0.0.1:9: is the server up?`); absent when none failed or the source does
    /// not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// With a request profile: the figures of each kind of request, in the profile's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request_kinds: Vec<KindResult>,
}

/// The load that produced a [`Measurement`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LoadShape {
    /// `users` virtual users, each waiting for its response, then thinking.
    Closed {
        /// Virtual users.
        users: u64,
        /// The think time as given (`0`, `exp:1s`).
        think_time: String,
    },
    /// A constant arrival rate over `connections` connections.
    Open {
        /// Requests per second, in total.
        rate_per_s: f64,
        /// Connections the rate is spread over.
        connections: u64,
    },
    /// An external driver's own load description (its command line).
    External {
        /// The command line that ran it.
        description: String,
    },
    /// Several measurements merged.
    Merged {
        /// The loads of the parts, in merge order.
        parts: Vec<LoadShape>,
    },
}

/// Latency summary in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Responses the summary covers.
    pub count: Option<u64>,
    /// Mean.
    pub mean_ms: Option<f64>,
    /// Standard deviation.
    pub stdev_ms: Option<f64>,
    /// Smallest.
    pub min_ms: Option<f64>,
    /// Median.
    pub p50_ms: Option<f64>,
    /// 75th percentile.
    pub p75_ms: Option<f64>,
    /// 90th percentile.
    pub p90_ms: Option<f64>,
    /// 95th percentile.
    pub p95_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
    /// 99.9th percentile.
    pub p99_9_ms: Option<f64>,
    /// Largest.
    pub max_ms: Option<f64>,
}

impl Latency {
    /// The statistic named as thresholds and study objectives name it (`mean`, `p50`, `p75`,
    /// `p90`, `p95`, `p99`, `p99.9`, `max`), in milliseconds; `None` for another name or a
    /// statistic the run did not report.
    pub fn by_name(&self, name: &str) -> Option<f64> {
        match name {
            "mean" => self.mean_ms,
            "min" => self.min_ms,
            "p50" => self.p50_ms,
            "p75" => self.p75_ms,
            "p90" => self.p90_ms,
            "p95" => self.p95_ms,
            "p99" => self.p99_ms,
            "p99.9" => self.p99_9_ms,
            "max" => self.max_ms,
            _ => None,
        }
    }
}

/// One second of the measured window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// Seconds since `start`.
    pub t_s: u64,
    /// Attempts completed in this second.
    pub requests: u64,
    /// Of those, 2xx/3xx responses.
    pub ok: u64,
    /// Of those, transport errors and other statuses.
    pub errors: u64,
    /// Mean latency of the responses completed in this second, ms.
    pub mean_ms: Option<f64>,
    /// Largest latency completed in this second, ms.
    pub max_ms: Option<f64>,
    /// Median latency of this second, ms (the built-in driver; a merge of files has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    /// 99th percentile latency of this second, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
}

/// A serialized [`LatencyHistogram`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistogramData {
    /// Always `us`.
    pub unit: String,
    /// Always `hdrhistogram-v2-deflate-base64`.
    pub encoding: String,
    /// The histogram, encoded as `encoding` says.
    pub data: String,
}

/// CPU consumed by one process or tier during the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuUsage {
    /// Process or tier name.
    pub name: String,
    /// The process id, for a single process.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The tier (a station of a capacity model) it belongs to, if any.
    #[serde(default)]
    pub tier: Option<String>,
    /// CPU seconds (user + system) in the window.
    pub cpu_s: f64,
    /// Average busy cores, `cpu_s / duration_s`.
    pub cores: f64,
}

impl Measurement {
    /// An empty measurement of `source` with the given load.
    pub fn empty(source: &str, load: LoadShape) -> Self {
        Measurement {
            schema: MEASUREMENT_SCHEMA,
            source: source.to_string(),
            name: None,
            load,
            targets: Vec::new(),
            start: String::new(),
            end: String::new(),
            warmup_s: 0.0,
            duration_s: 0.0,
            requests: 0,
            ok: 0,
            errors: 0,
            throughput_rps: 0.0,
            latency: None,
            errors_by_kind: BTreeMap::new(),
            status: BTreeMap::new(),
            series: Vec::new(),
            histogram: None,
            cpu: None,
            extra: BTreeMap::new(),
            first_error: None,
            request_kinds: Vec::new(),
        }
    }

    /// Reads a measurement from JSON, rejecting a newer schema.
    pub fn from_json(text: &str) -> Result<Self, DriveError> {
        let m: Measurement = serde_json::from_str(text).map_err(|e| DriveError::Decode {
            what: "measurement JSON".to_string(),
            reason: e.to_string(),
        })?;
        if m.schema > MEASUREMENT_SCHEMA {
            return Err(DriveError::Decode {
                what: "measurement JSON".to_string(),
                reason: format!(
                    "schema {} is newer than this perfpilot understands ({MEASUREMENT_SCHEMA})",
                    m.schema
                ),
            });
        }
        Ok(m)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        // A Measurement holds only strings, numbers and maps with string keys: it always serializes.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The decoded histogram, if there is one.
    pub fn histogram(&self) -> Result<Option<LatencyHistogram>, DriveError> {
        self.histogram
            .as_ref()
            .map(LatencyHistogram::from_data)
            .transpose()
    }

    /// Error share of all requests, 0..=1.
    pub fn error_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.errors as f64 / self.requests as f64
        }
    }

    /// Whether `self` and `other` are the same run, say one file given twice: the same start
    /// and end of the window and the same source (producer, test name, load or command line,
    /// targets), with the same counts and histogram, which two processes started in the same
    /// millisecond do not share.
    pub fn same_run(&self, other: &Measurement) -> bool {
        self.start == other.start
            && self.end == other.end
            && self.source == other.source
            && self.name == other.name
            && self.load == other.load
            && self.targets == other.targets
            && (self.requests, self.ok, self.errors) == (other.requests, other.ok, other.errors)
            && self.histogram == other.histogram
    }

    /// The run in a few words: its source or command line and its start.
    pub fn describe_run(&self) -> String {
        let what = match &self.load {
            LoadShape::External { description } if !description.is_empty() => description.clone(),
            _ if self.targets.is_empty() => self.source.clone(),
            _ => format!("{} against {}", self.source, self.targets.join(", ")),
        };
        let name = self
            .name
            .as_deref()
            .map(|n| format!(" {n}"))
            .unwrap_or_default();
        format!("{what}{name}, started {}", self.start)
    }

    /// Merges measurements of runs that ran *at the same time* from several driver processes
    /// against the same system: counts, statuses, errors and histograms add up exactly,
    /// throughputs add, the window spans the earliest start to the latest end, series points
    /// with the same second add, and the latency summary is recomputed from the merged
    /// histogram. When a part has no histogram, the merged one has none and only the
    /// count-weighted mean latency is kept. The same run given twice ([`Measurement::same_run`])
    /// is refused, as it would be counted twice.
    pub fn merge(parts: &[Measurement]) -> Result<Measurement, DriveError> {
        let Some(first) = parts.first() else {
            return Err(DriveError::Decode {
                what: "merge".to_string(),
                reason: "nothing to merge".to_string(),
            });
        };
        for (i, a) in parts.iter().enumerate() {
            if let Some(j) = parts[i + 1..].iter().position(|b| a.same_run(b)) {
                return Err(DriveError::SameRun {
                    first: i,
                    second: i + 1 + j,
                    run: a.describe_run(),
                });
            }
        }
        let mut out = Measurement::empty(
            "merge",
            LoadShape::Merged {
                parts: parts.iter().map(|p| p.load.clone()).collect(),
            },
        );
        out.name = first.name.clone();
        out.start = parts
            .iter()
            .map(|p| p.start.clone())
            .min()
            .unwrap_or_default();
        out.end = parts
            .iter()
            .map(|p| p.end.clone())
            .max()
            .unwrap_or_default();
        for p in parts {
            out.add_totals(p);
        }
        (out.latency, out.histogram) = merged_latency(parts)?;
        let kinds: Vec<&[KindResult]> = parts.iter().map(|p| p.request_kinds.as_slice()).collect();
        out.request_kinds = merge_kinds(&kinds)?;
        out.series = merged_series(parts);
        Ok(out)
    }

    /// Adds a part's totals, targets, counts by kind and status, extra figures and CPU use to
    /// this merge.
    fn add_totals(&mut self, p: &Measurement) {
        for t in &p.targets {
            if !self.targets.contains(t) {
                self.targets.push(t.clone());
            }
        }
        self.warmup_s = self.warmup_s.max(p.warmup_s);
        self.duration_s = self.duration_s.max(p.duration_s);
        self.requests += p.requests;
        self.ok += p.ok;
        self.errors += p.errors;
        self.throughput_rps += p.throughput_rps;
        if self.first_error.is_none() {
            self.first_error.clone_from(&p.first_error);
        }
        for (k, v) in &p.errors_by_kind {
            *self.errors_by_kind.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &p.status {
            *self.status.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &p.extra {
            *self.extra.entry(k.clone()).or_default() += v;
        }
        if let Some(cpu) = &p.cpu {
            self.cpu
                .get_or_insert_with(Vec::new)
                .extend(cpu.iter().cloned());
        }
    }
}

/// The parts' latency merged: exact from their histograms when every part has one, else only
/// the mean (weighted by count) where the parts give it.
fn merged_latency(
    parts: &[Measurement],
) -> Result<(Option<Latency>, Option<HistogramData>), DriveError> {
    let mut hist = Some(LatencyHistogram::new());
    let mut mean_weighted = 0.0;
    let mut mean_count = 0u64;
    for p in parts {
        match (&mut hist, p.histogram()?) {
            (Some(h), Some(ph)) => h.add(&ph),
            _ => hist = None,
        }
        if let Some(l) = &p.latency
            && let (Some(m), Some(c)) = (l.mean_ms, l.count)
        {
            mean_weighted += m * c as f64;
            mean_count += c;
        }
    }
    Ok(match hist {
        Some(h) if !h.is_empty() => (h.latency(), Some(h.to_data())),
        _ if mean_count > 0 => (
            Some(Latency {
                count: Some(mean_count),
                mean_ms: Some(mean_weighted / mean_count as f64),
                ..Default::default()
            }),
            None,
        ),
        _ => (None, None),
    })
}

/// The parts' per-second series added second by second (the mean weighted by requests).
fn merged_series(parts: &[Measurement]) -> Vec<SeriesPoint> {
    let mut series: BTreeMap<u64, (SeriesPoint, f64, u64)> = BTreeMap::new();
    for s in parts.iter().flat_map(|p| &p.series) {
        let e = series.entry(s.t_s).or_insert_with(|| {
            (
                SeriesPoint {
                    t_s: s.t_s,
                    ..Default::default()
                },
                0.0,
                0,
            )
        });
        e.0.requests += s.requests;
        e.0.ok += s.ok;
        e.0.errors += s.errors;
        e.0.max_ms = match (e.0.max_ms, s.max_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if let Some(m) = s.mean_ms {
            let n = s.requests.max(1);
            e.1 += m * n as f64;
            e.2 += n;
        }
    }
    series
        .into_values()
        .map(|(mut p, sum, n)| {
            p.mean_ms = (n > 0).then(|| sum / n as f64);
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(start: &str, requests: u64) -> Measurement {
        let mut m = Measurement::empty(
            "perfpilot-drive",
            LoadShape::Closed {
                users: 2,
                think_time: "0s".into(),
            },
        );
        m.targets = vec!["http://127.0.0.1:8080/".into()];
        m.start = start.into();
        m.end = "2026-01-01T00:00:10.000Z".into();
        m.duration_s = 10.0;
        m.requests = requests;
        m.ok = requests;
        m.throughput_rps = requests as f64 / 10.0;
        m
    }

    #[test]
    fn merging_the_same_run_twice_is_refused_and_names_both_parts() {
        let a = run("2026-01-01T00:00:00.000Z", 100);
        let b = run("2026-01-01T00:00:00.002Z", 100);
        let e = Measurement::merge(&[a.clone(), b.clone(), a.clone()]).unwrap_err();
        match &e {
            DriveError::SameRun { first, second, run } => {
                assert_eq!((*first, *second), (0, 2));
                assert!(run.contains("http://127.0.0.1:8080/"), "{run}");
                assert!(run.contains("2026-01-01T00:00:00.000Z"), "{run}");
            }
            other => panic!("{other}"),
        }
        assert!(
            e.to_string()
                .contains("measurements 1 and 3 are the same run"),
            "{e}"
        );
        // Different starts are different runs; so are two processes that started in the same
        // millisecond but counted differently.
        assert_eq!(Measurement::merge(&[a.clone(), b]).unwrap().requests, 200);
        let twin = run("2026-01-01T00:00:00.000Z", 101);
        assert_eq!(Measurement::merge(&[a, twin]).unwrap().requests, 201);
    }

    #[test]
    fn the_first_error_survives_json_and_merge_and_is_absent_when_none() {
        let mut a = run("2026-01-01T00:00:00.000Z", 1);
        assert!(!a.to_json().contains("first_error"));
        a.first_error = Some("connection refused by 127.0.0.1:9: is the server up?".into());
        let back = Measurement::from_json(&a.to_json()).unwrap();
        assert_eq!(back, a);
        let b = run("2026-01-01T00:00:01.000Z", 1);
        assert_eq!(
            Measurement::merge(&[b, a.clone()]).unwrap().first_error,
            a.first_error
        );
    }
}
