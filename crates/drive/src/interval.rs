//! The measured window second by second, live: every driver thread's tasks record into the
//! thread's [`Shard`], and the supervising thread drains completed seconds from all shards into
//! one [`Interval`] per second — the series of the result, and what live outputs (HdrHistogram
//! interval logs, Prometheus remote write, a coordinator) receive while the run goes on.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::hist::LatencyHistogram;
use crate::measurement::SeriesPoint;

/// One second of the measured window, from every thread (or, merged, from every worker).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Interval {
    /// The wall-clock start of the measured window, ms since the Unix epoch.
    pub window_start_ms: u64,
    /// Seconds since the start of the measured window.
    pub t_s: u64,
    /// Attempts completed in this second.
    pub requests: u64,
    /// Of those, 2xx/3xx responses.
    pub ok: u64,
    /// Of those, transport errors and other statuses.
    pub errors: u64,
    /// The latencies of the responses completed in this second, µs.
    pub hist: LatencyHistogram,
}

impl Interval {
    /// An empty second `t_s`.
    pub fn new(t_s: u64) -> Self {
        Interval {
            t_s,
            ..Default::default()
        }
    }

    /// Counts one attempt with its latency (µs) if it got a response.
    pub(crate) fn count(&mut self, latency_us: Option<u64>, ok: bool) {
        self.requests += 1;
        if ok {
            self.ok += 1;
        } else {
            self.errors += 1;
        }
        if let Some(us) = latency_us {
            self.hist.record_us(us);
        }
    }

    /// Adds what `other` counted in the same second.
    pub fn add(&mut self, other: &Interval) {
        self.requests += other.requests;
        self.ok += other.ok;
        self.errors += other.errors;
        self.hist.add(&other.hist);
    }

    /// The wall-clock time this second began.
    pub fn start(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH
            + std::time::Duration::from_millis(self.window_start_ms + self.t_s * 1000)
    }

    /// The point of the result's series.
    pub fn point(&self) -> SeriesPoint {
        let l = self.hist.latency();
        SeriesPoint {
            t_s: self.t_s,
            requests: self.requests,
            ok: self.ok,
            errors: self.errors,
            mean_ms: l.as_ref().and_then(|l| l.mean_ms),
            max_ms: l.as_ref().and_then(|l| l.max_ms),
            p50_ms: l.as_ref().and_then(|l| l.p50_ms),
            p99_ms: l.as_ref().and_then(|l| l.p99_ms),
        }
    }
}

/// The seconds one driver thread has recorded and nobody has drained yet. Only the thread's own
/// tasks and the supervisor touch it, so its lock is uncontended but for a moment a second.
#[derive(Debug, Default)]
pub(crate) struct Shard(Mutex<BTreeMap<u64, Interval>>);

impl Shard {
    /// Counts one attempt that ended in second `t_s`.
    pub fn record(&self, t_s: u64, latency_us: Option<u64>, ok: bool) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(t_s)
            .or_insert_with(|| Interval::new(t_s))
            .count(latency_us, ok);
    }

    /// Adds a second counted elsewhere (an event loop's current second).
    pub fn add(&self, i: Interval) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match map.get_mut(&i.t_s) {
            Some(have) => have.add(&i),
            None => {
                map.insert(i.t_s, i);
            }
        }
    }

    /// Removes and returns the seconds before `before`.
    pub fn drain_before(&self, before: u64) -> Vec<Interval> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let rest = map.split_off(&before);
        std::mem::replace(&mut *map, rest).into_values().collect()
    }
}

/// Merges the intervals of several shards by second, in order.
pub(crate) fn merge_by_second(parts: impl IntoIterator<Item = Interval>) -> Vec<Interval> {
    let mut out: BTreeMap<u64, Interval> = BTreeMap::new();
    for p in parts {
        match out.get_mut(&p.t_s) {
            Some(i) => i.add(&p),
            None => {
                out.insert(p.t_s, p);
            }
        }
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_drain_only_completed_seconds_and_merge_by_second() {
        let a = Shard::default();
        let b = Shard::default();
        a.record(0, Some(100), true);
        a.record(1, Some(300), true);
        b.record(0, None, false);
        b.record(2, Some(50), true);
        let first = merge_by_second(a.drain_before(2).into_iter().chain(b.drain_before(2)));
        assert_eq!(first.len(), 2);
        assert_eq!(
            (first[0].t_s, first[0].requests, first[0].errors),
            (0, 2, 1)
        );
        assert_eq!(first[1].hist.len(), 1);
        // Second 2 is still open; it comes with the next drain.
        let rest = merge_by_second(
            a.drain_before(u64::MAX)
                .into_iter()
                .chain(b.drain_before(u64::MAX)),
        );
        assert_eq!(rest.iter().map(|i| i.t_s).collect::<Vec<_>>(), [2]);
        let p = rest[0].point();
        assert_eq!((p.requests, p.ok), (1, 1));
        assert!((p.p50_ms.unwrap() - 0.05).abs() < 1e-3, "{p:?}");
    }
}
