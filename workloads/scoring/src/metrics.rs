//! The service's Prometheus metrics: scores, errors by kind, the latency histogram and the
//! model cache's counters, in the text exposition format.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cache::ModelCache;

/// Upper bounds of the latency histogram, seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Counters for `/metrics`.
#[derive(Default)]
pub struct Metrics {
    scores: AtomicU64,
    errors: Mutex<HashMap<&'static str, u64>>,
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Metrics {
    /// Counts one successfully scored record.
    pub(crate) fn scored(&self) {
        self.scores.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a request's latency to the histogram.
    pub(crate) fn observe(&self, secs: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add((secs * 1e9) as u64, Ordering::Relaxed);
    }

    /// Counts a failed request of `kind`.
    pub(crate) fn error(&self, kind: &'static str) {
        let mut g = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        *g.entry(kind).or_default() += 1;
    }

    /// The metrics, and `cache`'s counters, in the Prometheus text format.
    pub(crate) fn render(&self, cache: &ModelCache) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# HELP scoring_scores_total Records scored successfully."
        );
        let _ = writeln!(s, "# TYPE scoring_scores_total counter");
        let _ = writeln!(
            s,
            "scoring_scores_total {}",
            self.scores.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP scoring_errors_total Failed score requests by kind."
        );
        let _ = writeln!(s, "# TYPE scoring_errors_total counter");
        {
            let g = self.errors.lock().unwrap_or_else(|p| p.into_inner());
            let mut kinds: Vec<_> = g.iter().collect();
            kinds.sort();
            for (k, v) in kinds {
                let _ = writeln!(s, "scoring_errors_total{{kind=\"{k}\"}} {v}");
            }
        }
        let _ = writeln!(
            s,
            "# HELP scoring_request_duration_seconds Score request latency."
        );
        let _ = writeln!(s, "# TYPE scoring_request_duration_seconds histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                s,
                "scoring_request_duration_seconds_bucket{{le=\"{b}\"}} {}",
                self.buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(
            s,
            "scoring_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            s,
            "scoring_request_duration_seconds_sum {}",
            self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9
        );
        let _ = writeln!(s, "scoring_request_duration_seconds_count {count}");
        let (h, m, e) = cache.stats();
        for (name, help, v) in [
            ("scoring_model_cache_hits_total", "Model cache hits.", h),
            (
                "scoring_model_cache_misses_total",
                "Model cache misses (model parsed from disk).",
                m,
            ),
            (
                "scoring_model_cache_evictions_total",
                "Models evicted from the cache.",
                e,
            ),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} counter");
            let _ = writeln!(s, "{name} {v}");
        }
        s
    }
}
