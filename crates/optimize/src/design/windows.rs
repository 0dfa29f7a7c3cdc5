//! What the designs do with a trial's windows: a transient, a step or a climb to drop, how many
//! windows a side needs, whether the rest of the machine moved, and the level of each look.

/// Windows to drop from the start of a run of sequential windows that opens with a transient
/// (a server still loading its data set, a phase of other work ending): MSER over single
/// windows, the series' first half when it never settles, 0 when it is steady or too short to
/// tell (fewer than 4 windows) — and 0 when the windows MSER would drop lie within
/// [`TRANSIENT_SDS`] standard deviations of the rest: on a few noisy windows MSER takes noise
/// for a transient, and a baseline that loses half its windows each time never decides.
pub fn transient(windows: &[f64]) -> usize {
    let d = match perfpilot_stats::mser(windows, 1) {
        Some(m) if !m.steady => windows.len() / 2,
        Some(m) => m.truncate,
        None => 0,
    };
    if d == 0 || d >= windows.len() {
        return d;
    }
    let (gone, kept) = windows.split_at(d);
    let sd = perfpilot_stats::stdev(kept);
    let shift = (perfpilot_stats::mean(gone) - perfpilot_stats::mean(kept)).abs();
    if sd.is_finite() && shift <= TRANSIENT_SDS * sd {
        0
    } else {
        d
    }
}

/// A step inside a run of sequential windows past which they measure another level: a server on
/// a plateau for minutes after a change that then steps up (PostgreSQL after its buffer pool was
/// collapsed, docs/proofs.md), where MSER, which looks at the first half only, sees no warm-up.
/// A step counts when it is significant (Bonferroni over the splits, [`SHIFT_ALPHA`]) and at
/// least `resolution` in size: a smaller one moves the side's mean by less than the interval
/// the trial aims for.
pub fn level_shift(windows: &[f64], resolution: f64) -> Option<perfpilot_stats::Shift> {
    let s = perfpilot_stats::level_shift(windows, SHIFT_MIN_SEGMENT, SHIFT_ALPHA)?;
    (s.significant() && s.ratio.ln().abs() >= resolution.ln_1p()).then_some(s)
}

/// A climb (or fall) across a run of windows after a change that sets in slowly (huge pages
/// collapsing while the caches refill), which neither MSER nor the step test reads: a slope
/// significant at [`SHIFT_ALPHA`] that moves the level by at least `resolution` across them.
pub fn climbing(windows: &[f64], resolution: f64) -> Option<perfpilot_stats::Trend> {
    let t = perfpilot_stats::trend(windows, SHIFT_ALPHA)?;
    (t.significant() && t.ratio.ln().abs() >= resolution.ln_1p()).then_some(t)
}

/// The fewest windows on each side of a step.
const SHIFT_MIN_SEGMENT: usize = 3;

/// The chance that noise alone reads as a step, over all the splits tried.
const SHIFT_ALPHA: f64 = 0.01;

/// How far (in standard deviations of the windows kept) the dropped windows' mean must lie
/// for them to be a transient rather than noise.
const TRANSIENT_SDS: f64 = 2.0;

/// The windows each side of a sequential trial needs for its gain's interval to be about
/// ±`resolution` wide when the windows after the change are as noisy, and as alike from one to
/// the next, as `baseline`: the smallest n in `min..=max` with t · cv · √(2f/n) ≤
/// ln(1 + resolution), f the AR(1) widening of n windows at the baseline's lag-1
/// autocorrelation and t on the effective windows (the interval of the log ratio of two means
/// of n windows each), `max` when none is. A steady signal needs `min`; one whose windows vary
/// by 10 % needs far more than six for a gain of 5 % to clear the noise.
pub fn windows_needed(
    baseline: &[f64],
    resolution: f64,
    confidence: f64,
    min: usize,
    max: usize,
) -> usize {
    let max = max.max(min);
    let cv = perfpilot_stats::cv(baseline);
    if !cv.is_finite() || baseline.len() < 2 || resolution <= 0.0 {
        return min;
    }
    let rho = perfpilot_stats::serial::allowed_lag1(&[baseline]);
    let target = resolution.ln_1p();
    (min.max(2)..=max)
        .find(|&n| {
            let f = perfpilot_stats::serial::ar1_inflation(n, rho);
            let df = (2.0 * (n as f64 / f - 1.0)).max(1.0);
            let t = perfpilot_stats::t_quantile(df, 0.5 + confidence / 2.0);
            t * cv * (2.0 * f / n as f64).sqrt() <= target
        })
        .unwrap_or(max)
        .max(min)
}

/// The least move of the rest of the machine's CPU, in cores, that [`rest_moved`] reports
/// whatever the machine's size.
pub const REST_MIN_CORES: f64 = 0.25;

/// The mean busy cores of the rest of the machine before and after a change, when they moved
/// by more than `share` of its `cpus` (and at least [`REST_MIN_CORES`]): a sequential verdict
/// would then judge that move rather than the change. `None` when they did not, when a side has
/// no reading, or with `share` 0 (the check off).
pub fn rest_moved(before: &[f64], after: &[f64], cpus: usize, share: f64) -> Option<(f64, f64)> {
    if share <= 0.0 || before.is_empty() || after.is_empty() {
        return None;
    }
    let (b, a) = (perfpilot_stats::mean(before), perfpilot_stats::mean(after));
    let limit = (share * cpus as f64).max(REST_MIN_CORES);
    ((a - b).abs() > limit).then_some((b, a))
}

/// The confidence level of each of `looks` interim looks at a trial's windows, so that the
/// chance of any false verdict over all of them stays within `1 − confidence` (Bonferroni: a
/// bound that holds whatever the looks' correlation, at some cost in power).
pub fn look_level(confidence: f64, looks: usize) -> f64 {
    1.0 - (1.0 - confidence) / looks.max(1) as f64
}

/// The confidence level of look `k` (from 1) of `looks` when half the error the verdicts allow
/// is kept for the last look and the other half shared out over the ones before (Bonferroni:
/// the chance of any false verdict stays within `1 − confidence`). The last look, which sees
/// every window, keeps most of its power; the early ones decide only a clear effect.
pub fn spent_level(confidence: f64, k: usize, looks: usize) -> f64 {
    let alpha = 1.0 - confidence;
    if looks <= 1 {
        return confidence;
    }
    if k >= looks {
        1.0 - alpha / 2.0
    } else {
        1.0 - alpha / (2.0 * (looks - 1) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gain::gain_sequential;

    #[test]
    fn spent_levels_keep_half_the_error_for_the_last_look_and_sum_to_the_whole() {
        let (c, looks) = (0.95, 11);
        let total: f64 = (1..=looks).map(|k| 1.0 - spent_level(c, k, looks)).sum();
        assert!((total - 0.05).abs() < 1e-12, "{total}");
        assert!((spent_level(c, looks, looks) - 0.975).abs() < 1e-12);
        assert!((spent_level(c, 1, looks) - 0.9975).abs() < 1e-12);
        assert_eq!(spent_level(c, 1, 1), 0.95);
    }

    #[test]
    fn a_move_of_the_rest_of_the_machine_is_reported_past_its_share_of_the_cpus() {
        // A build of 0.6 cores starting after the change on a 2-CPU machine.
        assert_eq!(
            rest_moved(&[0.1, 0.2], &[0.7, 0.8], 2, 0.1),
            Some((0.15000000000000002, 0.75))
        );
        assert_eq!(
            rest_moved(&[0.1, 0.2], &[0.3, 0.2], 2, 0.1),
            None,
            "0.1 cores: noise"
        );
        // On 64 CPUs a tenth is 6.4 cores; the quarter-core floor rules on small machines.
        assert_eq!(rest_moved(&[1.0], &[5.0], 64, 0.1), None);
        assert!(rest_moved(&[1.0], &[8.0], 64, 0.1).is_some());
        assert_eq!(rest_moved(&[0.1], &[0.9], 2, 0.0), None, "switched off");
        assert_eq!(rest_moved(&[], &[0.9], 2, 0.1), None, "no reading before");
    }

    #[test]
    fn a_noisy_baseline_needs_more_windows_up_to_the_cap_and_a_steady_one_the_minimum() {
        let steady = [100.0, 101.0, 99.0, 100.0, 100.5, 99.5];
        assert_eq!(windows_needed(&steady, 0.03, 0.95, 6, 30), 6);
        // Windows varying by about 5 %: t · 0.05 · √(2/n) ≤ ln 1.03 needs n ≈ 23.
        let five = [95.0, 105.0, 100.0, 95.0, 105.0, 100.0];
        let cv = perfpilot_stats::cv(&five);
        let n = windows_needed(&five, 0.03, 0.95, 6, 100);
        let half = |n: usize| {
            perfpilot_stats::t_quantile(2.0 * n as f64 - 2.0, 0.975) * cv * (2.0 / n as f64).sqrt()
        };
        assert!(
            half(n) <= 0.03f64.ln_1p() && half(n - 1) > 0.03f64.ln_1p(),
            "n {n}"
        );
        assert!((18..=30).contains(&n), "n {n}");
        assert_eq!(windows_needed(&five, 0.03, 0.95, 6, 12), 12, "capped");
        assert_eq!(
            windows_needed(&five, 0.5, 0.95, 6, 30),
            6,
            "a coarse resolution needs no more"
        );
        assert_eq!(
            windows_needed(&[0.0, 0.0], 0.03, 0.95, 6, 30),
            6,
            "no mean: the minimum"
        );
        assert_eq!(
            windows_needed(&five, 0.03, 0.95, 8, 4),
            8,
            "a cap below the minimum"
        );
    }

    #[test]
    fn a_wandering_baseline_needs_more_windows_and_gets_a_wider_interval_than_the_same_values_jumbled()
     {
        // The same eight values: drifting down then up (neighbours alike), or interleaved.
        let wander = [104.0, 103.0, 101.0, 99.0, 97.0, 96.0, 98.0, 100.0];
        let jumble = [104.0, 97.0, 101.0, 96.0, 103.0, 99.0, 98.0, 100.0];
        let (a, b) = (
            windows_needed(&wander, 0.03, 0.95, 6, 100),
            windows_needed(&jumble, 0.03, 0.95, 6, 100),
        );
        assert!(a > b, "wandering {a}, jumbled {b}");
        let after: Vec<f64> = wander.iter().map(|x| x * 1.05).collect();
        let wide = gain_sequential(&wander, &after, true, 0.95).unwrap();
        let after: Vec<f64> = jumble.iter().map(|x| x * 1.05).collect();
        let narrow = gain_sequential(&jumble, &after, true, 0.95).unwrap();
        assert!(
            wide.serial > 0.3 && narrow.serial == 0.0,
            "{wide:?} {narrow:?}"
        );
        assert!(wide.ci_high - wide.ci_low > 1.5 * (narrow.ci_high - narrow.ci_low));
        assert!((wide.ratio - narrow.ratio).abs() < 1e-12);
    }

    #[test]
    fn a_transient_at_the_start_of_a_run_of_windows_is_found_and_a_steady_run_is_left_whole() {
        assert_eq!(transient(&[0.0, 4.0, 100.0, 98.0, 101.0, 99.0]), 2);
        assert_eq!(transient(&[100.0, 98.0, 101.0, 99.0, 100.0, 102.0]), 0);
        // Still climbing: the first half goes.
        assert_eq!(transient(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]), 3);
        assert_eq!(transient(&[1.0, 50.0, 50.0]), 0);
        // Noise, as PostgreSQL's rate per CPU-second was: nothing dropped.
        assert_eq!(
            transient(&[
                14899.0, 14721.0, 15363.0, 14906.0, 15200.0, 14650.0, 15010.0, 14800.0
            ]),
            0
        );
        // A server still warming its cache: its first three windows go.
        assert_eq!(
            transient(&[
                11912.0, 12359.0, 13100.0, 15010.0, 14899.0, 15100.0, 14950.0, 15050.0
            ]),
            3
        );
    }
}
