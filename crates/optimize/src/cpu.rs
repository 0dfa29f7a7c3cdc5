//! The daemon's own CPU, in two parts. Monitoring (sampling, reading `/proc`, probing signals,
//! deciding) is what `cpu_budget_pct` governs, by stretching the scan interval. Making changes
//! (huge-page collapse, page migration, affinity, knobs, and undoing them) is work done on
//! behalf of a workload: its cost is bounded by the pacing tunables instead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

/// CPU time this process spent making and undoing changes. Process-wide, because the CPU time
/// it is taken from is: page migration and collapse run in the caller's context.
static CHANGES_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// CPU time this process spent making and undoing changes so far (see [`making_changes`]).
pub fn changes_cpu() -> Duration {
    Duration::from_nanos(CHANGES_CPU_NS.load(Ordering::Relaxed))
}

/// Runs `f`, counting the CPU time it takes as making changes rather than monitoring.
pub fn making_changes<T>(f: impl FnOnce() -> T) -> T {
    let t0 = perfpilot_sys::self_cpu_time();
    let r = f();
    let spent = perfpilot_sys::self_cpu_time().saturating_sub(t0);
    CHANGES_CPU_NS.fetch_add(
        u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    r
}

/// The CPU time this process has used so far, split in its two parts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTime {
    /// Sampling, reading, deciding: everything but making changes.
    pub monitoring: Duration,
    /// Making and undoing changes.
    pub changes: Duration,
}

impl CpuTime {
    /// This process's CPU time now.
    pub fn now() -> CpuTime {
        let changes = changes_cpu();
        CpuTime {
            monitoring: perfpilot_sys::self_cpu_time().saturating_sub(changes),
            changes,
        }
    }
}

/// The daemon's own CPU over a span, in % of one CPU, as status and the exit line show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuShare {
    /// All of it.
    pub own_cpu_pct: f64,
    /// Monitoring: what the budget covers.
    pub monitoring_cpu_pct: f64,
    /// Making changes: outside the budget, paced instead.
    pub changes_cpu_pct: f64,
    /// The monitoring budget in force (`cpu_budget_pct`).
    pub cpu_budget_pct: f64,
}

impl CpuShare {
    /// The share of `elapsed` the CPU time from `start` to `end` took (0 before any time
    /// passed), against the budget `budget_pct`.
    pub fn between(start: CpuTime, end: CpuTime, elapsed: Duration, budget_pct: f64) -> CpuShare {
        let pct = |d: Duration| {
            let s = elapsed.as_secs_f64();
            if s > 0.0 {
                d.as_secs_f64() / s * 100.0
            } else {
                0.0
            }
        };
        let monitoring = pct(end.monitoring.saturating_sub(start.monitoring));
        let changes = pct(end.changes.saturating_sub(start.changes));
        CpuShare {
            own_cpu_pct: monitoring + changes,
            monitoring_cpu_pct: monitoring,
            changes_cpu_pct: changes,
            cpu_budget_pct: budget_pct,
        }
    }

    /// In words, for status and the exit line.
    pub fn describe(&self) -> String {
        format!(
            "own CPU {:.2} % of one CPU: monitoring {:.2} % (budget {} %), making changes {:.2} % (huge-page collapse, page migration: paced, not in the budget)",
            self.own_cpu_pct, self.monitoring_cpu_pct, self.cpu_budget_pct, self.changes_cpu_pct
        )
    }
}

/// Keeps the daemon's monitoring CPU under its budget by stretching the scan interval, judged
/// over spans of at least six intervals and [`MIN_SPAN_S`].
pub struct Governor {
    /// The interval in force, seconds (at least the configured one).
    effective: f64,
    /// Whether the last judgement found it over budget (said once per change).
    slowed: bool,
    /// Where the span being judged started.
    since: (CpuTime, Instant),
}

impl Governor {
    /// A governor starting now at the configured `interval_s`.
    pub fn new(interval_s: f64) -> Governor {
        Governor {
            effective: interval_s,
            slowed: false,
            since: (CpuTime::now(), Instant::now()),
        }
    }

    /// After a scan: judges the monitoring CPU once a span of six intervals (and at least
    /// [`MIN_SPAN_S`]) has passed, and returns the interval to wait (never below `interval_s`).
    pub fn after_scan(&mut self, interval_s: f64, budget_pct: f64) -> f64 {
        let (cpu, t) = (CpuTime::now(), Instant::now());
        let span = t.duration_since(self.since.1).as_secs_f64();
        if span >= (interval_s * 6.0).max(MIN_SPAN_S) {
            let used = cpu.monitoring.saturating_sub(self.since.0.monitoring);
            let share = used.as_secs_f64() / span;
            let budget = budget_pct / 100.0;
            self.effective = next_interval(self.effective, interval_s, share, budget);
            if (share > budget) != self.slowed {
                self.slowed = share > budget;
                if self.slowed {
                    warn!(
                        "the daemon's monitoring used {:.2} % of a CPU, over its budget of {budget_pct:.2} %: scanning every {:.1} s",
                        share * 100.0,
                        self.effective
                    );
                } else {
                    info!(
                        "the daemon's monitoring is back under its CPU budget ({:.2} %): scanning every {:.1} s",
                        share * 100.0,
                        self.effective
                    );
                }
            }
            self.since = (cpu, t);
        }
        self.effective.max(interval_s)
    }
}

/// The shortest span the budget is judged over: one costly scan (a large server's memory read
/// once, when a strategy is first asked) is averaged over it rather than taken for a rate.
pub const MIN_SPAN_S: f64 = 30.0;

/// The share of the budget the interval is set to meet. Spans scatter around what they aim
/// at: aimed at the budget itself, their mean sat on it or a little over.
pub const AIM: f64 = 0.9;

/// The next interval: the one at which `share` (of one CPU) would meet [`AIM`] of `budget` if
/// each scan cost the same — stretched by the excess (at most ten times `interval`), shortened
/// by the room left (at most halved per span, never below `interval`).
fn next_interval(effective: f64, interval: f64, share: f64, budget: f64) -> f64 {
    let aim = budget * AIM;
    if share > aim {
        (effective * share / aim).min(interval * 10.0)
    } else {
        interval.max(effective * (share / aim).max(0.5))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a` and `b` equal to a nanosecond.
    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn over_its_aim_the_interval_stretches_by_the_excess_up_to_ten_times() {
        // Twice the aim (0.9 % of a 1 % budget): twice the interval.
        assert!(close(next_interval(2.0, 2.0, 0.018, 0.01), 4.0));
        assert_eq!(next_interval(4.0, 2.0, 0.5, 0.01), 20.0);
        // At the budget itself, still over the aim: stretched by a ninth.
        assert!(close(next_interval(9.0, 2.0, 0.01, 0.01), 10.0));
    }

    #[test]
    fn under_its_aim_the_interval_shortens_by_the_room_left_at_most_halving_per_span() {
        assert_eq!(next_interval(10.0, 2.0, 0.001, 0.01), 5.0);
        assert!(close(next_interval(10.0, 2.0, 0.0072, 0.01), 8.0));
        assert_eq!(next_interval(2.2, 2.0, 0.001, 0.01), 2.0);
    }

    #[test]
    fn a_cost_per_scan_that_holds_settles_the_interval_where_its_share_meets_the_aim() {
        // 45 ms a scan: at 5 s apart 0.9 % of a CPU, the aim under a 1 % budget.
        let share_at = |interval: f64| 0.045 / interval;
        let mut effective = 2.0;
        for _ in 0..20 {
            effective = next_interval(effective, 2.0, share_at(effective), 0.01);
        }
        assert!(close(effective, 5.0), "{effective}");
        assert!(share_at(effective) < 0.01);
    }

    #[test]
    fn the_share_splits_monitoring_from_making_changes() {
        let at = |m: u64, c: u64| CpuTime {
            monitoring: Duration::from_millis(m),
            changes: Duration::from_millis(c),
        };
        let s = CpuShare::between(at(100, 0), at(400, 3_900), Duration::from_secs(100), 1.0);
        assert!((s.monitoring_cpu_pct - 0.3).abs() < 1e-9, "{s:?}");
        assert!((s.changes_cpu_pct - 3.9).abs() < 1e-9, "{s:?}");
        assert!((s.own_cpu_pct - 4.2).abs() < 1e-9, "{s:?}");
        assert_eq!(
            s.describe(),
            "own CPU 4.20 % of one CPU: monitoring 0.30 % (budget 1 %), making changes 3.90 % (huge-page collapse, page migration: paced, not in the budget)"
        );
        let none = CpuShare::between(at(0, 0), at(5, 5), Duration::ZERO, 1.0);
        assert_eq!(none.own_cpu_pct, 0.0);
    }

    #[test]
    fn time_spent_making_changes_is_counted_apart() {
        let before = changes_cpu();
        making_changes(|| {
            let t0 = perfpilot_sys::self_cpu_time();
            while perfpilot_sys::self_cpu_time() < t0 + Duration::from_millis(5) {
                std::hint::spin_loop();
            }
        });
        assert!(changes_cpu() >= before + Duration::from_millis(5));
    }
}
