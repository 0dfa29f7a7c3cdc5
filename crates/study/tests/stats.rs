//! The statistics against known answers: textbook rank tests, CIs on synthetic series, MSER-5
//! on a series with a known warm-up.

use perfpilot_study::stats::{
    Alternative, chance_best, friedman, hodges_lehmann_ci, mser5, paired_ratio_ci, ranks, wilcoxon,
};

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn ranks_share_ties() {
    assert_eq!(ranks(&[10.0, 20.0, 20.0, 5.0]), vec![2.0, 3.5, 3.5, 1.0]);
}

#[test]
fn friedman_matches_the_hand_computed_statistic() {
    // Seven subjects, three treatments (scipy's friedmanchisquare example data). Ranks per row
    // give rank sums 10, 21, 11: Q = 12/(7·3·4)·(100+441+121) − 3·7·4 = 10.571; χ²(2) survival
    // is exp(−Q/2) = 0.005063.
    let before = [72.0, 96.0, 88.0, 92.0, 74.0, 76.0, 82.0];
    let after = [120.0, 120.0, 132.0, 120.0, 101.0, 96.0, 112.0];
    let five = [76.0, 95.0, 104.0, 96.0, 84.0, 72.0, 76.0];
    let blocks: Vec<Vec<f64>> = (0..7).map(|i| vec![before[i], after[i], five[i]]).collect();
    let f = friedman(&blocks).unwrap();
    assert!(close(f.statistic, 10.571_428_6, 1e-6), "{}", f.statistic);
    assert!(
        close(f.p_value, (-f.statistic / 2.0).exp(), 1e-9),
        "{}",
        f.p_value
    );
    assert!(close(f.p_value, 0.005_063, 1e-5));
    assert_eq!(f.mean_ranks, vec![10.0 / 7.0, 3.0, 11.0 / 7.0]);
}

#[test]
fn friedman_with_ties_uses_the_correction() {
    // Two blocks with a tie in one: ranks [1.5, 1.5, 3] and [1, 2, 3]: sums 2.5, 3.5, 6.
    // Q = 12/(2·3·4)·(6.25+12.25+36) − 3·2·4 = 3.25; tie term (2³−2) = 6; C = 1 − 6/(2·3·8) = 0.875;
    // corrected Q = 3.714286.
    let f = friedman(&[vec![1.0, 1.0, 5.0], vec![1.0, 2.0, 3.0]]).unwrap();
    assert!(close(f.statistic, 3.25 / 0.875, 1e-9), "{}", f.statistic);
    // All ties: no test.
    assert!(friedman(&[vec![1.0, 1.0], vec![2.0, 2.0]]).is_none());
    assert!(friedman(&[vec![1.0, 2.0]]).is_none());
}

#[test]
#[allow(clippy::approx_constant)] // 3.14 is a measurement in the data set, not π.
fn wilcoxon_matches_r_documentation_example() {
    // Hollander & Wolfe (1973) p. 29, the example of R's wilcox.test: depression scale factor
    // at the first (x) and second (y) visit. R: V = 40, p = 0.01953 (greater), 0.03906 (two-sided).
    let x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30];
    let y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29];
    let g = wilcoxon(&x, &y, Alternative::Greater).unwrap();
    assert_eq!(g.w_plus, 40.0);
    assert_eq!(g.n, 9);
    assert!(g.exact);
    assert!(close(g.p_value, 0.019_53, 5e-5), "{}", g.p_value);
    let t = wilcoxon(&x, &y, Alternative::TwoSided).unwrap();
    assert!(close(t.p_value, 0.039_06, 5e-5), "{}", t.p_value);
    let l = wilcoxon(&x, &y, Alternative::Less).unwrap();
    assert!(l.p_value > 0.97);
}

#[test]
fn wilcoxon_exact_tails_and_zero_differences() {
    // Five positive differences: P(W+ ≥ 15) = 1/32.
    let w = wilcoxon(&[2.0, 3.0, 4.0, 5.0, 6.0], &[1.0; 5], Alternative::Greater).unwrap();
    assert!(close(w.p_value, 1.0 / 32.0, 1e-12));
    // Zero differences are dropped.
    let w = wilcoxon(&[1.0, 2.0, 3.0], &[1.0, 1.0, 1.0], Alternative::Greater).unwrap();
    assert_eq!(w.n, 2);
    assert!(wilcoxon(&[1.0, 2.0], &[1.0, 2.0], Alternative::TwoSided).is_none());
}

#[test]
fn wilcoxon_normal_approximation_for_large_samples() {
    // 40 pairs, all positive: W+ = 820, z far in the tail.
    let x: Vec<f64> = (1..=40).map(|i| i as f64 + 0.5).collect();
    let y: Vec<f64> = (1..=40).map(|i| i as f64 - (i as f64) / 100.0).collect();
    let w = wilcoxon(&x, &y, Alternative::Greater).unwrap();
    assert!(!w.exact);
    assert_eq!(w.w_plus, 820.0);
    assert!(w.p_value < 1e-6);
    // A symmetric sample around zero: p near 1 two-sided.
    let d: Vec<f64> = (1..=40)
        .map(|i| if i % 2 == 0 { i as f64 } else { -(i as f64) })
        .collect();
    let w = wilcoxon(&d, &[0.0; 40], Alternative::TwoSided).unwrap();
    assert!(w.p_value > 0.8, "{}", w.p_value);
}

#[test]
fn ratio_ci_on_synthetic_pairs() {
    // Log ratios ln(1.1) + {−0.02, 0, +0.02}: mean ln 1.1, sd 0.02, se 0.02/√3,
    // t(0.975, 2) = 4.302653: CI = 1.1·exp(±4.302653·0.011547).
    let base = [100.0, 200.0, 50.0];
    let d = [-0.02, 0.0, 0.02];
    let cand: Vec<f64> = base
        .iter()
        .zip(d)
        .map(|(b, e)| b * (1.1f64.ln() + e).exp())
        .collect();
    let ci = paired_ratio_ci(&cand, &base, 0.95).unwrap();
    assert!(close(ci.ratio, 1.1, 1e-12));
    let half = 4.302_653 * 0.02 / 3f64.sqrt();
    assert!(close(ci.low, 1.1 * (-half).exp(), 1e-5), "{}", ci.low);
    assert!(close(ci.high, 1.1 * half.exp(), 1e-5), "{}", ci.high);
    assert_eq!(ci.pairs, 3);
    // No difference: CI straddles 1.
    let same = paired_ratio_ci(&[10.0, 11.0, 9.0, 10.5], &[10.2, 10.8, 9.1, 10.4], 0.95).unwrap();
    assert!(same.low < 1.0 && same.high > 1.0);
    assert!(paired_ratio_ci(&[1.0], &[1.0], 0.95).is_none());
}

#[test]
fn mser5_finds_a_known_warm_up() {
    // 20 s ramping up from 0, then 100 s around 1000 with a deterministic ±10 wobble.
    let mut s: Vec<f64> = (0..20).map(|i| i as f64 * 50.0).collect();
    s.extend(
        (0..100).map(|i| 1000.0 + if i % 2 == 0 { 10.0 } else { -10.0 } * ((i % 7) as f64 / 7.0)),
    );
    let m = mser5(&s).unwrap();
    assert_eq!(m.truncate, 20, "{m:?}");
    assert!(m.steady);
    // A steady series needs no truncation.
    let flat: Vec<f64> = (0..60)
        .map(|i| 500.0 + if i % 2 == 0 { 1.0 } else { -1.0 })
        .collect();
    let m = mser5(&flat).unwrap();
    assert_eq!(m.truncate, 0, "{m:?}");
    assert!(m.steady);
    // A series still climbing at the end has no steady state.
    let climb: Vec<f64> = (0..60).map(|i| 100.0 + 3.0 * i as f64).collect();
    let m = mser5(&climb).unwrap();
    assert!(!m.steady, "{m:?}");
    // Too short.
    assert!(mser5(&[1.0; 19]).is_none());
}

#[test]
fn friedman_f_form_and_conover_comparisons_by_hand() {
    // The scipy data above: T1 = 10.5714 with b = 7, k = 3, no ties, A1 = 7·(1 + 4 + 9) = 98.
    // T2 = (b − 1)·T1 / (b(k − 1) − T1) = 6·10.5714 / 3.4286 = 18.5; F(2, 12) has the closed
    // survival (1 + 2x/12)^(−6).
    let before = [72.0, 96.0, 88.0, 92.0, 74.0, 76.0, 82.0];
    let after = [120.0, 120.0, 132.0, 120.0, 101.0, 96.0, 112.0];
    let five = [76.0, 95.0, 104.0, 96.0, 84.0, 72.0, 76.0];
    let blocks: Vec<Vec<f64>> = (0..7).map(|i| vec![before[i], after[i], five[i]]).collect();
    let f = friedman(&blocks).unwrap();
    assert!(close(f.f_statistic, 18.5, 1e-9), "{}", f.f_statistic);
    assert!(
        close(f.f_p_value, (1.0f64 + 18.5 / 6.0).powi(-6), 1e-9),
        "{}",
        f.f_p_value
    );
    assert_eq!(f.rank_sums, vec![10.0, 21.0, 11.0]);
    assert_eq!(f.sum_sq_ranks, 98.0);
    // Conover: se = √(2·(7·98 − 662)/12) = 2; t(0.975, 12) = 2.178813.
    let lsd = f.least_significant_difference(0.05);
    assert!(close(lsd, 2.0 * 2.178_813, 1e-5), "{lsd}");
    // The pair p-value is below α exactly when the difference exceeds the LSD.
    assert!(f.pair_p_value(1, 0) < 0.05 && f.pair_p_value(1, 2) < 0.05);
    assert!(f.pair_p_value(0, 2) > 0.5, "{}", f.pair_p_value(0, 2));
    assert_eq!(f.pair_p_value(0, 1), f.pair_p_value(1, 0));
    // Every block ranking alike: T2 is infinite, any difference significant.
    let same: Vec<Vec<f64>> = (0..3).map(|i| vec![1.0 + i as f64, 5.0, 9.0]).collect();
    let f = friedman(&same).unwrap();
    assert!(f.f_statistic.is_infinite() && f.f_p_value == 0.0);
    assert_eq!(f.least_significant_difference(0.05), 0.0);
    assert_eq!(f.pair_p_value(0, 1), 0.0);
}

#[test]
fn racing_drops_only_configurations_significantly_worse() {
    use perfpilot_study::race::race_step;
    // Five configurations, three rounds: A and B close (B wins one round), C clearly below
    // them, D and E far below. Rank sums 14, 13, 9, 5, 4; A1 = 3·55 = 165, Σ R² = 487.
    // T1 = 4·(487 − 405)/(165 − 135) = 10.933, T2 = 2·T1/(12 − T1) = 20.5 (F(4, 8): p ≈ 3e-4).
    // Conover: se = √(2·(3·165 − 487)/8) = √2, LSD = t(0.975, 8)·√2 = 2.306004·1.414214 = 3.2612:
    // B (1 behind A) stays; C (5), D (9), E (10) leave.
    let blocks = vec![
        vec![100.0, 101.0, 91.0, 70.0, 60.0],
        vec![101.0, 99.0, 89.0, 61.0, 71.0],
        vec![99.0, 98.0, 90.0, 72.0, 62.0],
    ];
    let step = race_step(&blocks, 0.05).expect("Friedman rejects");
    assert_eq!(step.best, 0);
    assert_eq!(step.test, "Friedman");
    let f = friedman(&blocks).unwrap();
    assert!(close(f.f_statistic, 20.5, 1e-9), "{}", f.f_statistic);
    assert!(close(f.least_significant_difference(0.05), 3.261_18, 1e-4));
    assert!(step.p_value < 0.001, "{}", step.p_value);
    let losers: Vec<usize> = step.losers.iter().map(|(j, _)| *j).collect();
    assert_eq!(losers, vec![2, 3, 4]);
    assert!(step.losers.iter().all(|(_, p)| *p < 0.05));
    // Two rounds of the same: the evidence is not there yet for C (LSD grows as b shrinks).
    let step = race_step(&blocks[..2], 0.05);
    assert!(
        step.as_ref()
            .is_none_or(|s| !s.losers.iter().any(|(j, _)| *j == 2 || *j == 1)),
        "{step:?}"
    );
    // No differences: no step.
    assert!(
        race_step(
            &[
                vec![1.0, 1.0, 1.0],
                vec![2.0, 2.0, 2.0],
                vec![3.0, 3.0, 3.0]
            ],
            0.05
        )
        .is_none()
    );
}

#[test]
fn racing_two_configurations_uses_wilcoxon() {
    use perfpilot_study::race::race_step;
    // The second is better in every round: four rounds cannot reject at 0.05 (the smallest
    // one-sided p is 1/16); five can (1/32).
    let rows: Vec<Vec<f64>> = (0..5)
        .map(|i| vec![90.0 + i as f64, 100.0 + i as f64])
        .collect();
    assert!(race_step(&rows[..4], 0.05).is_none());
    let step = race_step(&rows, 0.05).expect("Wilcoxon rejects");
    assert_eq!(step.test, "Wilcoxon");
    assert_eq!(step.best, 1);
    assert_eq!(step.losers, vec![(0, 1.0 / 32.0)]);
}

#[test]
fn equivalence_needs_a_narrow_interval_inside_the_zone() {
    use perfpilot_study::stats::equivalent;
    // Ratios 1.01 · exp(±0.005): CI far inside ±5 %.
    let base = [100.0, 120.0, 90.0, 110.0, 105.0];
    let wobble = [0.005, -0.005, 0.0, 0.004, -0.004];
    let near: Vec<f64> = base
        .iter()
        .zip(wobble)
        .map(|(b, w)| b * 1.01 * f64::exp(w))
        .collect();
    let (same, ci) = equivalent(&near, &base, 0.05, 0.90).unwrap();
    assert!(same, "{ci:?}");
    assert!(close(ci.ratio, 1.01, 1e-3));
    // A 10 % difference is not equivalent within 5 %, however tight.
    let far: Vec<f64> = base.iter().map(|b| b * 1.10).collect::<Vec<_>>();
    let far: Vec<f64> = far
        .iter()
        .zip(wobble)
        .map(|(v, w)| v * f64::exp(w))
        .collect();
    assert!(!equivalent(&far, &base, 0.05, 0.90).unwrap().0);
    // Centred on 1 but noisy (±8 %): the interval is too wide to tell.
    let swing = [0.08, -0.08, 0.07, -0.075, 0.06, -0.07];
    let base6 = [100.0, 120.0, 90.0, 110.0, 105.0, 95.0];
    let noisy: Vec<f64> = base6
        .iter()
        .zip(swing)
        .map(|(b, w)| b * f64::exp(w))
        .collect();
    let (same, ci) = equivalent(&noisy, &base6, 0.05, 0.90).unwrap();
    assert!(!same && ci.low < 0.95 && ci.high > 1.05, "{ci:?}");
    // Fewer than five pairs cannot give a 90 % distribution-free interval.
    assert!(equivalent(&near[..4], &base[..4], 0.05, 0.90).is_none());
    assert!(equivalent(&[1.0], &[1.0], 0.05, 0.90).is_none());
}

#[test]
fn expected_loss_by_hand() {
    use perfpilot_study::stats::expected_loss;
    // d = [−1, 0, 1]: m = 0, s = 1/√3, ν = 2, z = 0; the t(2) density at 0 is 2^(−3/2):
    // s · (2/1) · 2^(−3/2) = 1/√6 = 0.408248.
    let l = expected_loss(&[-1.0, 0.0, 1.0]).unwrap();
    assert!(close(l, 0.408_248, 1e-6), "{l}");
    // d = [0, 1, 2]: m = 1, z = √3; t(2): F(z) = 1/2 + z/(2√(2 + z²)) = 0.887298,
    // f(z) = (2 + z²)^(−3/2) = 0.089443: s·(z·F + 5·f) = 1.145497.
    let l = expected_loss(&[0.0, 1.0, 2.0]).unwrap();
    assert!(close(l, 1.145_497, 1e-6), "{l}");
    // E[max(0, μ)] − E[max(0, −μ)] = E[μ] = m, for any spread.
    let d = [0.03, -0.12, 0.07, 0.01, -0.02, 0.05];
    let neg: Vec<f64> = d.iter().map(|x| -x).collect();
    let (a, b) = (expected_loss(&d).unwrap(), expected_loss(&neg).unwrap());
    let m = d.iter().sum::<f64>() / d.len() as f64;
    assert!(close(a - b, m, 1e-9), "{a} − {b} vs {m}");
    // A rival far and steadily behind costs next to nothing; one with no spread costs its
    // mean when ahead, nothing when behind.
    // (t(3)'s heavy tails keep it above 0: about 1e-7 here.)
    let far = expected_loss(&[-0.5, -0.51, -0.49, -0.5]).unwrap();
    assert!((0.0..1e-5).contains(&far), "{far}");
    assert_eq!(expected_loss(&[0.02, 0.02, 0.02]), Some(0.02));
    assert_eq!(expected_loss(&[-0.02, -0.02, -0.02]), Some(0.0));
    // Two differences leave ν = 1, where the mean of a t does not exist.
    assert!(expected_loss(&[0.1, 0.2]).is_none());
    assert!(expected_loss(&[0.1, f64::NAN, 0.2]).is_none());
}

#[test]
fn conditional_power_by_hand() {
    use perfpilot_study::stats::conditional_power;
    // d = [1, 3]: m = 2, s = √2; N = 8: m·√8/s = 4; z(0.95) = 1.644854; √(6/8) = 0.866025:
    // Φ((4 − 1.644854)/0.866025) = Φ(2.719491) = 0.996730.
    let cp = conditional_power(&[1.0, 3.0], 8, 0.05).unwrap();
    assert!(close(cp, 0.996_730, 1e-5), "{cp}");
    // No edge so far: Φ(−1.644854/0.866025) = Φ(−1.899313) = 0.028763.
    let cp = conditional_power(&[1.0, -1.0], 8, 0.05).unwrap();
    assert!(close(cp, 0.028_763, 1e-5), "{cp}");
    // Nothing left to come, or too little to go on.
    assert!(conditional_power(&[1.0, 2.0], 2, 0.05).is_none());
    assert!(conditional_power(&[1.0], 8, 0.05).is_none());
    // No spread: certain either way.
    assert_eq!(conditional_power(&[0.5, 0.5], 8, 0.05), Some(1.0));
    assert_eq!(conditional_power(&[0.0, 0.0], 8, 0.05), Some(0.0));
}

#[test]
fn chance_best_is_certain_for_a_clear_winner_and_split_for_a_tie() {
    // Column 1 beats the others in every round: it is best in every resample.
    let clear: Vec<Vec<f64>> = (0..8)
        .map(|r| vec![10.0 + r as f64, 12.0 + r as f64, 9.0 + r as f64])
        .collect();
    assert_eq!(chance_best(&clear, 500, 7).unwrap(), vec![0.0, 1.0, 0.0]);
    // Two columns that trade places round by round, with equal totals: a resample favours the
    // first when it draws at most 4 of the 8 even rounds (an exact tie goes to the first).
    let tie: Vec<Vec<f64>> = (0..8)
        .map(|r| {
            if r % 2 == 0 {
                vec![10.0, 11.0]
            } else {
                vec![11.0, 10.0]
            }
        })
        .collect();
    let c = chance_best(&tie, 4000, 7).unwrap();
    assert!((c[0] + c[1] - 1.0).abs() < 1e-12);
    // P(Bin(8, 1/2) ≤ 4) = 163/256 = 0.637; the share's sd over 4000 resamples is 0.008.
    assert!((c[0] - 0.637).abs() < 0.04, "{c:?}");
    // One round is not enough to resample; ragged rows are refused.
    assert!(chance_best(&clear[..1], 100, 1).is_none());
    assert!(chance_best(&[vec![1.0, 2.0], vec![1.0]], 100, 1).is_none());
    // The same seed reproduces the figure.
    assert_eq!(chance_best(&tie, 300, 3), chance_best(&tie, 300, 3));
}

#[test]
#[allow(clippy::approx_constant)] // 3.14 is a measurement in the data, not π
fn hodges_lehmann_interval_matches_the_textbook() {
    // Hollander & Wolfe's depression data (R's wilcox.test example): d = y − x, n = 9.
    // Worked out by enumerating the 2⁹ sign assignments: 95 %: c = 5, P(W⁺ ≤ 5) = 10/512,
    // interval (−0.786, −0.010) as R prints, estimate −0.46; 90 %: c = 8, (−0.726, −0.175).
    let x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30];
    let y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29];
    let d: Vec<f64> = x.iter().zip(&y).map(|(a, b)| b - a).collect();
    let ci = hodges_lehmann_ci(&d, 0.95).unwrap();
    assert!(close(ci.estimate, -0.46, 1e-9), "{ci:?}");
    assert!(
        close(ci.low, -0.786, 1e-9) && close(ci.high, -0.010, 1e-9),
        "{ci:?}"
    );
    assert!(close(ci.level, 1.0 - 20.0 / 512.0, 1e-12), "{ci:?}");
    let ci = hodges_lehmann_ci(&d, 0.90).unwrap();
    assert!(
        close(ci.low, -0.726, 1e-9) && close(ci.high, -0.175, 1e-9),
        "{ci:?}"
    );
    assert!(close(ci.level, 1.0 - 50.0 / 512.0, 1e-12), "{ci:?}");
    // Five pairs reach 90 % only with the whole range (2/32 outside); four cannot.
    let five = hodges_lehmann_ci(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.90).unwrap();
    assert_eq!((five.estimate, five.low, five.high), (3.0, 1.0, 5.0));
    assert!(hodges_lehmann_ci(&[1.0, 2.0, 3.0, 4.0], 0.90).is_none());
    assert!(hodges_lehmann_ci(&[1.0, f64::NAN, 3.0, 4.0, 5.0], 0.90).is_none());
}

#[test]
fn one_disturbed_round_widens_a_t_interval_not_the_hodges_lehmann_one() {
    // Ten rounds of a 1 % difference with small noise, one of them hit by a 25 % slump.
    let clean: Vec<f64> = (0..10)
        .map(|i| 0.01 + 0.004 * ((i as f64 * 2.3).sin()))
        .collect();
    let mut hit = clean.clone();
    hit[3] = -0.25;
    let t = |d: &[f64]| {
        let x: Vec<f64> = d.iter().map(|v| v.exp()).collect();
        let ci = paired_ratio_ci(&x, &vec![1.0; d.len()], 0.90).unwrap();
        ci.high.ln() - ci.low.ln()
    };
    let hl = |d: &[f64]| {
        let ci = hodges_lehmann_ci(d, 0.90).unwrap();
        ci.high - ci.low
    };
    assert!(t(&hit) > 8.0 * t(&clean), "t: {} vs {}", t(&hit), t(&clean));
    assert!(
        hl(&hit) < 2.0 * hl(&clean),
        "HL: {} vs {}",
        hl(&hit),
        hl(&clean)
    );
    // Large samples use the normal approximation; the interval still holds the centre.
    let many: Vec<f64> = (0..40)
        .map(|i| 0.02 + 0.01 * ((i as f64) * 1.7).sin())
        .collect();
    let ci = hodges_lehmann_ci(&many, 0.95).unwrap();
    assert!(
        ci.low < 0.02 && 0.02 < ci.high && ci.high - ci.low < 0.01,
        "{ci:?}"
    );
}
