//! Raw readings turned into one observation per evaluation window.

use crate::config::ValueKind;

/// Turns raw probe readings into one observation per window: a counter's rate over the window
/// (a counter that went backwards, i.e. restarted, gives no observation), or a gauge's value.
#[derive(Debug, Clone, Default)]
pub struct Windowed {
    last: Option<(f64, f64)>,
}

impl Windowed {
    /// Feeds the reading taken at `t_s` (seconds, monotonic); returns the window's observation.
    pub fn feed(&mut self, kind: ValueKind, t_s: f64, value: f64) -> Option<f64> {
        let prev = self.last.replace((t_s, value));
        match kind {
            ValueKind::Gauge => Some(value),
            ValueKind::Counter => {
                let (t0, v0) = prev?;
                (t_s > t0 && value >= v0).then(|| (value - v0) / (t_s - t0))
            }
        }
    }

    /// Forgets the last reading (after a gap).
    pub fn reset(&mut self) {
        self.last = None;
    }
}

/// A counter's work per CPU-second over windows of at least `min_s` seconds, for a counter
/// that moves in lumps (PostgreSQL's statistics reach `pg_stat_database` about once a second):
/// a window of one scan holds a varying number of lumps, a longer one the same number give or
/// take one. The CPU-seconds are summed over the same scans as the counter's difference.
#[derive(Debug, Clone)]
pub struct SpanWindow {
    min_s: f64,
    /// The window's first reading (time, value), its last reading's time, and the CPU-seconds
    /// used since the first.
    start: Option<(f64, f64)>,
    last_t: f64,
    cpu_s: f64,
}

impl SpanWindow {
    /// Windows of at least `min_s` seconds.
    pub fn new(min_s: f64) -> SpanWindow {
        SpanWindow {
            min_s,
            start: None,
            last_t: 0.0,
            cpu_s: 0.0,
        }
    }

    /// Feeds the reading taken at `t_s` (monotonic seconds) with the cores the workload used
    /// since the last reading; returns the work per CPU-second of a window that has just
    /// reached `min_s` (to within half a scan), else `None`. A counter that went backwards starts a new window.
    pub fn feed(&mut self, t_s: f64, value: f64, cores: f64) -> Option<f64> {
        let Some((t0, v0)) = self.start else {
            self.restart(t_s, value);
            return None;
        };
        if value < v0 || t_s <= self.last_t {
            self.restart(t_s, value);
            return None;
        }
        let gap = t_s - self.last_t;
        self.cpu_s += cores.max(0.0) * gap;
        self.last_t = t_s;
        // To within half a scan: scans drift by a little, and waiting a whole scan more for a
        // few milliseconds would make most windows one scan longer than asked.
        if t_s - t0 + gap / 2.0 < self.min_s {
            return None;
        }
        // As per_cpu_second: a workload that hardly ran says nothing per CPU-second.
        let out = (self.cpu_s > 0.01 * (t_s - t0)).then(|| (value - v0) / self.cpu_s);
        self.restart(t_s, value);
        out
    }

    /// How long a window of `min_s` lasts when the scans come `scan_s` apart: the scans it
    /// takes by [`SpanWindow::feed`]'s rule (reached to within half a scan), at least one. At
    /// 5-s scans an 8-s window takes two (10 s); at 3.3 s, two (6.6 s); at 9.6 s, one.
    pub fn span_s(min_s: f64, scan_s: f64) -> f64 {
        let scan_s = scan_s.max(1e-3);
        // The same test as `feed`'s, `k·scan + scan/2 ≥ min_s`. Exactly on its edge (8 s at
        // 3.2-s scans) the scans' jitter decides each window: the longer is counted.
        let scans = (min_s / scan_s - 0.5 + 1e-9).ceil().max(1.0);
        scans * scan_s
    }

    /// The least length of its windows, seconds.
    pub fn min_s(&self) -> f64 {
        self.min_s
    }

    fn restart(&mut self, t_s: f64, value: f64) {
        self.start = Some((t_s, value));
        self.last_t = t_s;
        self.cpu_s = 0.0;
    }

    /// Forgets the window (after a failed reading).
    pub fn reset(&mut self) {
        self.start = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_span_of_a_window_at_steady_scans_is_what_feeding_it_gives() {
        for (min_s, scan_s) in [
            (8.0, 5.0),
            (8.0, 3.1),
            (8.0, 3.3),
            (8.0, 6.4),
            (8.0, 9.6),
            (8.0, 16.0),
            (2.0, 2.0),
            (2.0, 0.5),
            (2.0, 0.7),
            (8.0, 2.0),
        ] {
            let mut w = SpanWindow::new(min_s);
            let mut ends = Vec::new();
            for k in 0..200 {
                let t = k as f64 * scan_s;
                if w.feed(t, t * 100.0, 1.0).is_some() {
                    ends.push(t);
                }
            }
            let spans: Vec<f64> = ends.windows(2).map(|e| e[1] - e[0]).collect();
            let want = SpanWindow::span_s(min_s, scan_s);
            assert!(
                spans.len() > 5 && spans.iter().all(|s| (s - want).abs() < 1e-6),
                "{min_s} s at {scan_s}-s scans: fed {spans:?}, span_s {want}"
            );
        }
        assert_eq!(SpanWindow::span_s(8.0, 5.0), 10.0);
        assert!((SpanWindow::span_s(8.0, 3.3) - 6.6).abs() < 1e-9);
        assert!((SpanWindow::span_s(8.0, 3.2) - 9.6).abs() < 1e-9);
        assert!((SpanWindow::span_s(8.0, 9.6) - 9.6).abs() < 1e-9);
    }

    #[test]
    fn a_lumpy_counter_is_read_over_windows_long_enough_to_hold_the_same_number_of_lumps() {
        // 1,000 transactions land at once every second; the server uses half a core; scans
        // every 2 s at slightly uneven times. Windows of 8 s see 8 lumps, give or take one.
        let mut w = SpanWindow::new(8.0);
        let lumps = |t: f64| (t.floor()) * 1000.0;
        let times = [0.3, 2.25, 4.35, 6.3, 8.2, 10.4, 12.3, 14.35, 16.3, 18.25];
        let out: Vec<f64> = times
            .iter()
            .filter_map(|&t| w.feed(t, lumps(t), 0.5))
            .collect();
        assert_eq!(out.len(), 2, "{out:?}");
        // 8 lumps over 7.9 s at half a core: about 2,025 per CPU-second, as the true 2,000 is.
        for r in &out {
            assert!((*r - 2000.0).abs() / 2000.0 < 0.15, "{out:?}");
        }
        // A counter that went backwards (a restart) starts a new window; an idle workload
        // gives nothing.
        let mut w = SpanWindow::new(4.0);
        assert_eq!(w.feed(0.0, 500.0, 1.0), None);
        assert_eq!(w.feed(2.0, 100.0, 1.0), None);
        assert_eq!(w.feed(4.0, 300.0, 1.0), None);
        assert_eq!(w.feed(6.0, 500.0, 1.0), Some(100.0));
        assert_eq!(w.feed(10.0, 900.0, 0.0), None);
    }

    #[test]
    fn counters_become_rates() {
        let mut w = Windowed::default();
        assert_eq!(w.feed(ValueKind::Counter, 0.0, 100.0), None);
        assert_eq!(w.feed(ValueKind::Counter, 2.0, 300.0), Some(100.0));
        assert_eq!(
            w.feed(ValueKind::Counter, 3.0, 10.0),
            None,
            "a reset gives no observation"
        );
        assert_eq!(w.feed(ValueKind::Counter, 4.0, 60.0), Some(50.0));
        assert_eq!(w.feed(ValueKind::Gauge, 5.0, 7.0), Some(7.0));
    }
}
