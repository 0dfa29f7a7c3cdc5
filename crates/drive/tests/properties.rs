//! Property tests of the latency histogram: merging the histograms of any split of the values
//! equals one histogram of all of them, and a histogram survives its stored encoding.

use perfpilot_drive::LatencyHistogram;
use proptest::prelude::*;

fn values() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(
        prop_oneof![
            0u64..1_000,
            1_000u64..1_000_000,
            1_000_000u64..60_000_000_000
        ],
        0..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn merging_the_histograms_of_any_split_equals_one_histogram_of_all_values(
        vals in values(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut one = LatencyHistogram::new();
        for &v in &vals {
            one.record_us(v);
        }
        // Split the values at random points into parts, one histogram each, merged in turn.
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(vals.len() + 1)).collect();
        at.push(0);
        at.push(vals.len());
        at.sort_unstable();
        let mut merged = LatencyHistogram::new();
        for w in at.windows(2) {
            let mut part = LatencyHistogram::new();
            for &v in &vals[w[0]..w[1]] {
                part.record_us(v);
            }
            merged.add(&part);
        }
        prop_assert_eq!(merged.len(), vals.len() as u64);
        for q in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0] {
            prop_assert_eq!(merged.quantile_us(q), one.quantile_us(q), "quantile {}", q);
        }
        prop_assert_eq!(merged.latency(), one.latency());
        prop_assert!(merged == one);
        let back = LatencyHistogram::from_data(&merged.to_data()).unwrap();
        prop_assert_eq!(back.len(), one.len());
        prop_assert_eq!(back.latency(), one.latency());
    }
}
