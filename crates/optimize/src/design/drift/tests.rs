use super::*;
use crate::gain::{self, Decision};

#[test]
fn a_workload_that_steps_by_a_fifth_on_its_own_shows_it_in_its_history_and_the_step_is_not_kept() {
    // Sixteen windows a side, each side inside one spell of its own: 100 before the change,
    // 120 after it, with nothing changed; a little noise within each.
    let wobble = |i: usize| [0.0, 0.6, -0.4, 0.3, -0.5, 0.2][i % 6];
    let off: Vec<f64> = (0..16).map(|i| 100.0 + wobble(i)).collect();
    let on: Vec<f64> = (0..16).map(|i| 120.0 + 1.2 * wobble(i + 3)).collect();
    let g = gain::gain_sequential(&off, &on, true, 0.95).expect("a gain");
    // Its own sides say nothing of the spells: kept.
    let own = Drift {
        floor: 0.03,
        history: Vec::new(),
    };
    assert_eq!(gain::decide(&own.widen(g, &off, &on), 0.02), Decision::Keep);
    // Watched before the trial, the same workload stepped between 100 and 120 every sixteen
    // windows: over a trial's span it moves by as much on its own, so the step is not a gain.
    let history: Vec<f64> = (0..64)
        .map(|i| if (i / 16) % 2 == 0 { 120.0 } else { 100.0 } + wobble(i))
        .collect();
    let watched = Drift {
        history,
        ..own.clone()
    };
    let judged = watched.widen(g, &off, &on);
    assert!(judged.ci_low < 1.0, "{judged:?}");
    assert_eq!(gain::decide(&judged, 0.02), Decision::Neutral);
    // A history as calm as the sides leaves the verdict as it was.
    let calm: Vec<f64> = (0..64).map(|i| 100.0 + wobble(i)).collect();
    let calm = Drift {
        history: calm,
        ..own
    };
    assert_eq!(
        gain::decide(&calm.widen(g, &off, &on), 0.02),
        Decision::Keep
    );
}
