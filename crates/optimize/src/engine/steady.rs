//! The gate before a trial: a workload's signal is read on the scans where a strategy would act
//! on it, and the trial starts only once the last few readings show steady, non-idle work. A
//! server still loading its data (Redis reading a dump, a JVM warming up) or not yet under load
//! would otherwise give a baseline of idle windows, and the load arriving later would read as the
//! action's gain (docs/optimizer.md, on a Redis that was still loading).

use std::collections::{HashMap, VecDeque};

use crate::signal::Observation;
use crate::signal::SignalKind;
use crate::signal::proxy::{CPU_SIGNAL_MIN_CORES, IO_SIGNAL_MIN_BYTES_PER_S};
use crate::strategy::StrategyKind;

/// Readings in a row that must be steady before a trial starts.
pub(super) const STEADY_READINGS: usize = 3;

/// The last [`STEADY_READINGS`] of `readings` (all of them when there are fewer): those that open
/// the gate and seed a trial's baseline.
pub(super) fn last_steady(readings: &[f64]) -> &[f64] {
    &readings[readings.len().saturating_sub(STEADY_READINGS)..]
}

/// The most readings kept as a workload's history (a trial judged before and after wants
/// `one_way_history_s` of them).
const HISTORY_MAX: usize = 4096;

/// The largest coefficient of variation of those readings called steady.
pub(super) const STEADY_MAX_CV: f64 = 0.25;

/// Below this much work per CPU-second a preset's server is idle or loading, not serving: the
/// daemon's own reading of its counter is about one per scan.
const PRESET_IDLE_PER_CPU_S: f64 = 20.0;

/// Whether a reading of `kind` says the workload is idle (so it cannot judge an action).
fn idle(kind: &SignalKind, v: f64) -> bool {
    if !v.is_finite() {
        return true;
    }
    match kind {
        SignalKind::Preset { .. } => v < PRESET_IDLE_PER_CPU_S,
        SignalKind::Io => v < IO_SIGNAL_MIN_BYTES_PER_S,
        SignalKind::Cpu => v < CPU_SIGNAL_MIN_CORES,
        SignalKind::Syscalls => v <= 0.0,
        // A rate of completed work at zero is idle; a latency or CPI has no idle value.
        SignalKind::Probe { probe } => probe.higher_is_better() && v <= 0.0,
        SignalKind::Cpi => false,
    }
}

/// One workload's recent readings of one signal.
struct Recent {
    /// The signal they are of (a change of signal starts afresh).
    signal: String,
    /// The scan of the last reading (`next_scan` forgets an entry not read in the last one).
    scan: u64,
    /// The readings since the last idle one (or a change of signal), oldest first, up to
    /// [`HISTORY_MAX`]: the last [`STEADY_READINGS`] open the gate.
    values: VecDeque<f64>,
    /// When each of `values` was read (monotonic seconds).
    times: VecDeque<f64>,
    /// The seconds of readings a trial judged before and after waits for before it starts (0:
    /// none beyond the gate's). Counted in time, not readings: a scan stretched by the CPU
    /// budget reads a window less often.
    history_s: f64,
    /// What the last check said.
    verdict: Result<(), String>,
}

impl Recent {
    /// Forgets the readings: the history starts again.
    fn clear(&mut self) {
        self.values.clear();
        self.times.clear();
    }

    /// The seconds the history spans at `t_s`: from its first reading (0 without one).
    fn watched_s(&self, t_s: f64) -> f64 {
        self.times.front().map_or(0.0, |first| t_s - first)
    }

    /// Whether the history spans `need_s` at `t_s`, or holds all the gate keeps (as long as it
    /// gets).
    fn holds(&self, t_s: f64, need_s: f64) -> bool {
        self.watched_s(t_s) >= need_s || self.values.len() >= HISTORY_MAX
    }
}

/// The recent readings of the workloads a strategy would act on, by judging signature.
#[derive(Default)]
pub(super) struct Steady {
    scan: u64,
    /// This scan's sample time, monotonic seconds (what signal readings are taken at).
    pub(super) t_s: f64,
    recent: HashMap<String, Recent>,
    /// This scan's observations made for running trials, by judged signature: a gate on the
    /// same workload takes these rather than reading a counter twice in one window.
    by_trials: HashMap<String, Observation>,
    /// The strategy each workload waits to try (by its signature) and the scan it last waited
    /// in: until its signal is steady, the next scans read only the signal, not the workload's
    /// memory the strategy would need (a 6 GB server's page tables cost the scan its budget).
    waiting: HashMap<String, (StrategyKind, u64)>,
    /// Scans a trial on a workload (by signature) has waited for a sibling's signal to be
    /// steady, to judge against it.
    sibling_waits: HashMap<String, u64>,
}

impl Steady {
    /// A new scan at `t_s`: readings not taken in the last one are forgotten.
    pub(super) fn next_scan(&mut self, t_s: f64) {
        self.scan += 1;
        self.t_s = t_s;
        let scan = self.scan;
        self.recent.retain(|_, r| r.scan + 1 >= scan);
        self.waiting.retain(|_, (_, at)| *at + 1 >= scan);
        self.by_trials.clear();
    }

    /// Notes that `kind` would act on `signature` but waits for a steady signal.
    pub(super) fn wait(&mut self, signature: &str, kind: StrategyKind) {
        self.waiting
            .insert(signature.to_string(), (kind, self.scan));
    }

    /// Whether `kind` waited on `signature` in the last scan (or this one).
    pub(super) fn waits(&self, signature: &str, kind: StrategyKind) -> bool {
        self.waiting
            .get(signature)
            .is_some_and(|(k, at)| *k == kind && *at + 1 >= self.scan)
    }

    /// Notes a trial's observation of `signature` this scan.
    pub(super) fn observed_by_trial(&mut self, signature: &str, obs: &Observation) {
        self.by_trials.insert(signature.to_string(), obs.clone());
    }

    /// A trial's observation of `signature` this scan, if one was made.
    pub(super) fn trial_observation(&self, signature: &str) -> Option<Observation> {
        self.by_trials.get(signature).cloned()
    }

    /// Whether `signature` was already read this scan (a second strategy or a device judged by
    /// the same workload): then [`Steady::check`] must not be given a second reading.
    pub(super) fn read_this_scan(&self, signature: &str) -> Option<Result<(), String>> {
        let r = self.recent.get(signature)?;
        (r.scan == self.scan).then(|| r.verdict.clone())
    }

    /// Takes this scan's observation of `signature` by `kind` and says whether a trial judged
    /// by it may start: `Err` says why not, for status.
    pub(super) fn check(
        &mut self,
        signature: &str,
        kind: &SignalKind,
        obs: Observation,
    ) -> Result<(), String> {
        let desc = kind.describe();
        let (scan, t_s) = (self.scan, self.t_s);
        let r = self
            .recent
            .entry(signature.to_string())
            .or_insert_with(|| Recent {
                signal: desc.clone(),
                scan,
                values: VecDeque::new(),
                times: VecDeque::new(),
                history_s: 0.0,
                verdict: Ok(()),
            });
        // (A gap in the readings needs no check here: `next_scan` forgot those entries.)
        if r.signal != desc {
            r.signal = desc;
            r.clear();
        }
        r.scan = scan;
        r.verdict = match obs {
            Err(e) => {
                r.clear();
                Err(format!("its signal failed: {e}"))
            }
            // No new reading this scan: a counter's first reading, no CPU used, or a window
            // that spans several scans still filling (PostgreSQL's 8 s windows at a 5 s
            // interval give a reading every other scan). The readings so far stay; the gate
            // opens only on a fresh one.
            Ok(None) => Err(format!(
                "waiting for a steady signal: no reading this window ({} of {STEADY_READINGS} so far)",
                r.values.len()
            )),
            // A history runs from after the last idle reading, without it: a server's loading
            // is not its drift.
            Ok(Some(v)) if idle(kind, v) => {
                r.clear();
                judge(kind, &[v])
            }
            Ok(Some(v)) => {
                r.values.push_back(v);
                r.times.push_back(t_s);
                while r.values.len() > HISTORY_MAX {
                    r.values.pop_front();
                    r.times.pop_front();
                }
                let (held, need) = (r.holds(t_s, r.history_s), r.history_s);
                let watched = r.watched_s(t_s);
                judge(kind, last_steady(r.values.make_contiguous())).and_then(|()| match held {
                    true => Ok(()),
                    false => Err(watching(watched, need)),
                })
            }
        };
        r.verdict.clone()
    }

    /// Keeps the gate of `signature` shut until its history spans `seconds` (a trial judged
    /// before and after), or opens it to the steady readings alone with 0.
    pub(super) fn need_history(&mut self, signature: &str, seconds: f64) {
        if let Some(r) = self.recent.get_mut(signature) {
            r.history_s = seconds;
        }
    }

    /// The seconds `signature`'s history spans: from its first reading to this scan's.
    pub(super) fn watched_s(&self, signature: &str) -> f64 {
        self.recent
            .get(signature)
            .map_or(0.0, |r| r.watched_s(self.t_s))
    }

    /// Whether `signature`'s history spans `need_s` (or all the gate keeps).
    pub(super) fn holds(&self, signature: &str, need_s: f64) -> bool {
        need_s <= 0.0
            || self
                .recent
                .get(signature)
                .is_some_and(|r| r.holds(self.t_s, need_s))
    }

    /// `signature`'s readings so far (its history), oldest first, left in place.
    pub(super) fn peek(&self, signature: &str) -> Vec<f64> {
        self.recent
            .get(signature)
            .map(|r| r.values.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Counts a scan in which a trial on `signature` waited for a sibling's signal to be steady
    /// (to judge against it); returns the scans waited so far.
    pub(super) fn waited_for_sibling(&mut self, signature: &str) -> u64 {
        let n = self.sibling_waits.entry(signature.to_string()).or_insert(0);
        *n += 1;
        *n
    }

    /// Takes `signature`'s last [`STEADY_READINGS`] readings, oldest first (its trial starts:
    /// they are windows without the change, so a sequential trial's baseline starts with them,
    /// and the next trial needs fresh ones).
    pub(super) fn take(&mut self, signature: &str) -> Vec<f64> {
        self.waiting.remove(signature);
        self.sibling_waits.remove(signature);
        self.recent
            .remove(signature)
            .filter(|r| r.verdict.is_ok())
            .map(|mut r| last_steady(r.values.make_contiguous()).to_vec())
            .unwrap_or_default()
    }
}

/// Why a trial judged before and after waits: its history spans `have_s` of the `need_s`
/// seconds it wants.
pub(super) fn watching(have_s: f64, need_s: f64) -> String {
    format!(
        "watching its signal unchanged before the trial: {have_s:.0} of {need_s:.0} s (how far it moves on its own widens the verdict)"
    )
}

/// Whether the last readings show steady, non-idle work.
fn judge(kind: &SignalKind, values: &[f64]) -> Result<(), String> {
    if let Some(v) = values.iter().rev().find(|v| idle(kind, **v)) {
        return Err(format!(
            "waiting for a steady signal: it reads {v:.3}, which says the workload is idle or still loading, not serving"
        ));
    }
    if values.len() < STEADY_READINGS {
        return Err(format!(
            "waiting for a steady signal: {} of {STEADY_READINGS} readings so far",
            values.len()
        ));
    }
    let cv = perfpilot_stats::cv(values);
    if cv.is_nan() || cv > STEADY_MAX_CV {
        return Err(format!(
            "waiting for a steady signal: its last {STEADY_READINGS} readings vary by {:.0} % (at most {:.0} %)",
            cv * 100.0,
            STEADY_MAX_CV * 100.0
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preset() -> SignalKind {
        SignalKind::Preset {
            preset: "redis".into(),
            endpoint: "127.0.0.1:6379".into(),
            counter: "total_commands_processed".into(),
        }
    }

    /// Feeds `values` one per scan; returns the scan (0-based) at which the gate first opened.
    fn opens_at(kind: &SignalKind, values: &[Option<f64>]) -> Option<usize> {
        let mut s = Steady::default();
        for (i, v) in values.iter().enumerate() {
            s.next_scan(i as f64);
            if s.check("w", kind, Ok(*v)).is_ok() {
                return Some(i);
            }
        }
        None
    }

    #[test]
    fn a_server_loading_its_data_then_serving_opens_the_gate_only_after_three_steady_readings() {
        // Loading: the daemon's own INFO reads, about 0.5 per CPU-second; then the load comes,
        // ramps, and settles.
        let mut v: Vec<Option<f64>> = vec![None];
        v.extend(std::iter::repeat_n(Some(0.5), 10));
        v.extend([Some(20_000.0), Some(90_000.0), Some(101_000.0)]);
        v.extend([Some(99_000.0), Some(100_500.0), Some(100_000.0)]);
        // Not while the ramp is in the last three (20 k, 90 k, 101 k vary by 63 %); then 90 k,
        // 101 k and 99 k vary by 6 %: open. The trial's own baseline drops what transient is left.
        assert_eq!(opens_at(&preset(), &v), Some(14));
        // Idle all along: never.
        assert_eq!(opens_at(&preset(), &[Some(0.5); 30]), None);
    }

    #[test]
    fn a_window_spanning_several_scans_opens_the_gate_on_its_third_reading() {
        // A reading every other scan, as PostgreSQL's 8 s windows give at a 5 s interval: the
        // scans between keep the count (they reset it once, and the gate never opened).
        let v: Vec<Option<f64>> = [None, Some(5_000.0)].into_iter().cycle().take(8).collect();
        assert_eq!(opens_at(&preset(), &v), Some(5));
        let mut s = Steady::default();
        s.next_scan(0.0);
        let why = s.check("w", &preset(), Ok(None)).unwrap_err();
        assert_eq!(
            why,
            "waiting for a steady signal: no reading this window (0 of 3 so far)"
        );
    }

    #[test]
    fn a_varying_signal_waits_and_says_by_how_much() {
        let mut s = Steady::default();
        let mut last = Ok(());
        for v in [100.0, 300.0, 50.0, 200.0] {
            s.next_scan(0.0);
            last = s.check("w", &SignalKind::Io, Ok(Some(v * 1e6)));
        }
        let why = last.unwrap_err();
        assert!(
            why.contains("vary by") && why.contains("at most 25 %"),
            "{why}"
        );
    }

    #[test]
    fn a_gap_a_failure_or_a_new_signal_starts_the_readings_afresh() {
        let mut s = Steady::default();
        let ok = |s: &mut Steady, k: &SignalKind| s.check("w", k, Ok(Some(100.0 * 1e6)));
        for _ in 0..2 {
            s.next_scan(0.0);
            assert!(ok(&mut s, &SignalKind::Io).is_err());
        }
        // A scan without a reading (the workload was not proposed): forgotten.
        s.next_scan(0.0);
        s.next_scan(0.0);
        assert!(ok(&mut s, &SignalKind::Io).unwrap_err().contains("1 of 3"));
        s.next_scan(0.0);
        let failed = s.check("w", &SignalKind::Io, Err("timed out".into()));
        assert_eq!(failed, Err("its signal failed: timed out".into()));
        s.next_scan(0.0);
        assert!(ok(&mut s, &SignalKind::Io).unwrap_err().contains("1 of 3"));
        // Another signal for the same workload.
        s.next_scan(0.0);
        assert!(
            ok(&mut s, &SignalKind::Syscalls)
                .unwrap_err()
                .contains("1 of 3")
        );
        s.next_scan(0.0);
        ok(&mut s, &SignalKind::Syscalls).unwrap_err();
        s.next_scan(0.0);
        assert_eq!(ok(&mut s, &SignalKind::Syscalls), Ok(()));
        assert_eq!(s.read_this_scan("w"), Some(Ok(())));
        assert_eq!(s.take("w"), vec![100.0 * 1e6; 3]);
        assert_eq!(s.take("w"), Vec::<f64>::new());
        s.next_scan(0.0);
        assert_eq!(s.read_this_scan("w"), None);
    }

    #[test]
    fn a_lower_is_better_signal_has_no_idle_value_and_a_rate_at_zero_is_idle() {
        assert!(!idle(&SignalKind::Cpi, 0.0));
        assert!(idle(&SignalKind::Syscalls, 0.0));
        assert!(idle(&SignalKind::Cpu, 0.01));
        assert!(!idle(&SignalKind::Cpu, 0.5));
        assert!(idle(&preset(), 0.5));
        assert!(idle(&SignalKind::Io, f64::NAN));
    }

    #[test]
    fn a_gate_asked_for_a_history_stays_shut_until_it_spans_that_time_and_an_idle_reading_restarts_it()
     {
        let mut s = Steady::default();
        let mut t = 0.0;
        let mut read = |s: &mut Steady, v: f64, every_s: f64| {
            t += every_s;
            s.next_scan(t);
            s.check("w", &preset(), Ok(Some(v)))
        };
        for _ in 0..3 {
            read(&mut s, 5_000.0, 5.0).ok();
        }
        assert!(read(&mut s, 5_000.0, 5.0).is_ok(), "steady: open");
        // A trial wants 60 s of history; its first reading was 15 s ago. Shut until
        // then, and it says how far it is.
        assert_eq!(s.watched_s("w"), 15.0);
        s.need_history("w", 60.0);
        let why = read(&mut s, 5_000.0, 5.0).unwrap_err();
        assert_eq!(
            why,
            "watching its signal unchanged before the trial: 20 of 60 s (how far it moves on its own widens the verdict)"
        );
        // The scan stretches (the daemon's CPU budget): fewer readings, the same time.
        for _ in 0..3 {
            assert!(read(&mut s, 5_000.0, 10.0).is_err());
        }
        assert!(read(&mut s, 5_100.0, 10.0).is_ok());
        assert_eq!(s.peek("w").len(), 9);
        // The server idles (a reload): its history starts again after it, without the idle
        // reading (its ratio to the next would be taken for drift).
        assert!(read(&mut s, 0.5, 5.0).unwrap_err().contains("idle"));
        assert!(s.peek("w").is_empty());
        assert_eq!(s.watched_s("w"), 0.0);
        // The trial's baseline takes only the last steady readings.
        for _ in 0..12 {
            read(&mut s, 5_000.0, 5.0).ok();
        }
        assert!(read(&mut s, 5_000.0, 5.0).is_ok());
        assert_eq!(s.take("w"), vec![5_000.0; 3]);
    }
}
