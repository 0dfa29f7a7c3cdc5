//! The fleet's verdicts tallied per workload signature × strategy from Prometheus' series:
//! `perfpilot_strategy_outcome{signature,workload,strategy,decision}` (1 per host, its latest
//! decision) and `perfpilot_strategy_gain_ratio{signature,strategy}` (that decision's gain).

use std::collections::{BTreeMap, BTreeSet};

use super::query::{PromError, Prometheus, Sample};

/// How one strategy went on one workload signature across the fleet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// A readable name of the workload (from any host).
    pub workload: String,
    /// Hosts whose latest decision was to keep it.
    pub kept: usize,
    /// Hosts whose latest decision was to revert it.
    pub reverted: usize,
    /// Hosts where it made no difference (reverted, remembered).
    pub neutral: usize,
    /// The gains the hosts measured (> 1 is better).
    pub gains: Vec<f64>,
    /// The hosts (Prometheus `instance` labels) that tried it.
    pub hosts: BTreeSet<String>,
}

impl Outcome {
    /// Hosts that tried it.
    pub fn tried(&self) -> usize {
        self.kept + self.reverted + self.neutral
    }

    /// The median gain; NaN without gains.
    pub fn median_gain(&self) -> f64 {
        perfpilot_stats::median(&self.gains)
    }

    /// The lowest and highest gain; `None` without gains.
    pub fn gain_range(&self) -> Option<(f64, f64)> {
        let lo = self.gains.iter().copied().reduce(f64::min)?;
        let hi = self.gains.iter().copied().reduce(f64::max)?;
        Some((lo, hi))
    }
}

/// The fleet's verdicts by (signature, strategy).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Each pair's outcome.
    pub pairs: BTreeMap<(String, String), Outcome>,
}

impl Tally {
    /// Tallies the series of the two families (see the module's comment).
    pub fn of(outcomes: &[Sample], gains: &[Sample]) -> Tally {
        let mut pairs: BTreeMap<(String, String), Outcome> = BTreeMap::new();
        for s in outcomes.iter().filter(|s| s.value > 0.0) {
            let key = (
                s.label("signature").to_string(),
                s.label("strategy").to_string(),
            );
            let o = pairs.entry(key).or_default();
            if o.workload.is_empty() {
                o.workload = s.label("workload").to_string();
            }
            // One decision per host: a host seen twice (a stale series) counts once.
            if !o.hosts.insert(s.label("instance").to_string()) {
                continue;
            }
            match s.label("decision") {
                "keep" => o.kept += 1,
                "revert" => o.reverted += 1,
                "neutral" => o.neutral += 1,
                _ => {
                    o.hosts.remove(s.label("instance"));
                }
            }
        }
        for s in gains.iter().filter(|s| s.value.is_finite()) {
            let key = (
                s.label("signature").to_string(),
                s.label("strategy").to_string(),
            );
            if let Some(o) = pairs.get_mut(&key) {
                o.gains.push(s.value);
            }
        }
        Tally { pairs }
    }

    /// Reads both families from `prom`.
    pub fn read(prom: &Prometheus) -> Result<Tally, PromError> {
        let outcomes = prom.query("perfpilot_strategy_outcome")?;
        let gains = prom.query("perfpilot_strategy_gain_ratio")?;
        Ok(Tally::of(&outcomes, &gains))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pairs: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
        }
    }

    #[test]
    fn each_host_counts_once_per_pair_with_its_decision_and_gain() {
        let o = |host: &str, d: &str| {
            sample(
                &[
                    ("instance", host),
                    ("signature", "s1"),
                    ("workload", "redis"),
                    ("strategy", "large_pages"),
                    ("decision", d),
                ],
                1.0,
            )
        };
        let g = |host: &str, v: f64| {
            sample(
                &[
                    ("instance", host),
                    ("signature", "s1"),
                    ("strategy", "large_pages"),
                ],
                v,
            )
        };
        let t = Tally::of(
            &[
                o("a", "revert"),
                o("b", "revert"),
                o("c", "keep"),
                o("c", "keep"),
            ],
            &[g("a", 0.9), g("b", 0.95), g("c", 1.1)],
        );
        let p = &t.pairs[&("s1".to_string(), "large_pages".to_string())];
        assert_eq!((p.kept, p.reverted, p.neutral, p.tried()), (1, 2, 0, 3));
        assert_eq!(p.workload, "redis");
        assert_eq!(p.median_gain(), 0.95);
        assert_eq!(p.gain_range(), Some((0.9, 1.1)));
    }
}
