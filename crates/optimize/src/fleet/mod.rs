//! The fleet: verdicts of other hosts, read from the Prometheus that scrapes every daemon
//! (`[fleet] prometheus = URL`). There is no perfpilot server: each daemon exports its latest
//! decision per workload signature and strategy (`perfpilot_strategy_outcome`), Prometheus
//! gathers them, and a daemon about to try a strategy asks how it went elsewhere.
//!
//! - `query`: the Prometheus HTTP API (instant queries), with a timeout;
//! - `tally`: per signature × strategy, the hosts that tried, kept, reverted, and their gains;
//! - `watcher`: a background thread keeping the tally fresh, so a slow or down Prometheus
//!   never stalls a scan.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::strategy::StrategyKind;

pub mod query;
pub mod tally;
pub mod watcher;

pub use query::{PromError, Prometheus, Sample};
pub use tally::{Outcome, Tally};
pub use watcher::Watcher;

/// The `[fleet]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// The Prometheus that scrapes the fleet's daemons (`http://host:9090`).
    pub prometheus: String,
    /// A strategy reverted (or neutral) on more than this share of the hosts that tried it is
    /// skipped; one kept on more than this share is tried first.
    #[serde(default = "default_quorum")]
    pub quorum: f64,
    /// Fewer hosts than this having tried a strategy says nothing.
    #[serde(default = "default_min_hosts")]
    pub min_hosts: u32,
    /// The longest a query may take, seconds.
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    /// How often the fleet's verdicts are read again, seconds.
    #[serde(default = "default_refresh")]
    pub refresh_s: f64,
}

fn default_quorum() -> f64 {
    0.5
}
fn default_min_hosts() -> u32 {
    2
}
fn default_timeout() -> f64 {
    2.0
}
fn default_refresh() -> f64 {
    60.0
}

impl FleetConfig {
    /// A config for `url` with the defaults.
    pub fn new(url: &str) -> FleetConfig {
        FleetConfig {
            prometheus: url.to_string(),
            quorum: default_quorum(),
            min_hosts: default_min_hosts(),
            timeout_s: default_timeout(),
            refresh_s: default_refresh(),
        }
    }

    /// Checks the values, naming the field that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if !self.prometheus.starts_with("http://") {
            return Err(format!(
                "fleet.prometheus {:?} must start with http://",
                self.prometheus
            ));
        }
        if !(0.0..1.0).contains(&self.quorum) {
            return Err(format!(
                "fleet.quorum {} must be at least 0 and below 1 (a share of the hosts)",
                self.quorum
            ));
        }
        if self.min_hosts == 0 {
            return Err("fleet.min_hosts must be at least 1".into());
        }
        if !(self.timeout_s > 0.0 && self.timeout_s <= 60.0) {
            return Err(format!(
                "fleet.timeout_s {} must be above 0 and at most 60",
                self.timeout_s
            ));
        }
        if !(1.0..=86_400.0).contains(&self.refresh_s) {
            return Err(format!(
                "fleet.refresh_s {} must be at least 1 and at most 86400 (a day)",
                self.refresh_s
            ));
        }
        Ok(())
    }

    /// The query timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_s)
    }
}

/// What the fleet says of trying a strategy on a workload.
#[derive(Debug, Clone, PartialEq)]
pub enum Advice {
    /// Reverted on most hosts that tried it: skip it (the text is what status says).
    Skip(String),
    /// Kept on most hosts that tried it: try it before the others.
    First(String),
}

/// The fleet's verdicts as the engine consults them: by (signature, strategy).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Priors {
    /// The tally of each pair.
    pub pairs: BTreeMap<(String, String), Outcome>,
    /// A share of the hosts: see [`FleetConfig::quorum`].
    pub quorum: f64,
    /// See [`FleetConfig::min_hosts`].
    pub min_hosts: u32,
}

impl Priors {
    /// What the fleet says of `strategy` on `signature`, if anything.
    pub fn advice(&self, signature: &str, strategy: StrategyKind) -> Option<Advice> {
        let o = self
            .pairs
            .get(&(signature.to_string(), strategy.as_str().to_string()))?;
        let tried = o.tried();
        if tried < self.min_hosts as usize || tried == 0 {
            return None;
        }
        let undone = o.reverted + o.neutral;
        if undone as f64 / tried as f64 > self.quorum {
            let neutral = if o.neutral > 0 {
                format!(" ({} of them neutral)", o.neutral)
            } else {
                String::new()
            };
            return Some(Advice::Skip(format!(
                "fleet: reverted on {undone} of {tried} hosts{neutral}"
            )));
        }
        if o.kept as f64 / tried as f64 > self.quorum {
            return Some(Advice::First(format!(
                "fleet: kept on {} of {tried} hosts",
                o.kept
            )));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn priors(kept: usize, reverted: usize, neutral: usize) -> Priors {
        let mut pairs = BTreeMap::new();
        pairs.insert(
            ("abc".to_string(), "large_pages".to_string()),
            Outcome {
                kept,
                reverted,
                neutral,
                ..Outcome::default()
            },
        );
        Priors {
            pairs,
            quorum: 0.5,
            min_hosts: 2,
        }
    }

    #[test]
    fn a_strategy_reverted_on_most_hosts_is_skipped_and_says_how_many() {
        let a = priors(1, 7, 0).advice("abc", StrategyKind::LargePages);
        assert_eq!(
            a,
            Some(Advice::Skip("fleet: reverted on 7 of 8 hosts".into()))
        );
    }

    #[test]
    fn a_strategy_kept_on_most_hosts_is_tried_first() {
        let a = priors(3, 1, 0).advice("abc", StrategyKind::LargePages);
        assert_eq!(a, Some(Advice::First("fleet: kept on 3 of 4 hosts".into())));
    }

    #[test]
    fn too_few_hosts_or_no_majority_says_nothing() {
        assert_eq!(
            priors(0, 1, 0).advice("abc", StrategyKind::LargePages),
            None
        );
        assert_eq!(
            priors(1, 1, 0).advice("abc", StrategyKind::LargePages),
            None
        );
        assert_eq!(
            priors(0, 5, 0).advice("abc", StrategyKind::CacheAffinity),
            None
        );
    }

    #[test]
    fn the_fleet_table_is_validated_by_field() {
        let mut c = FleetConfig::new("https://prom:9090");
        assert!(c.validate().unwrap_err().contains("fleet.prometheus"));
        c.prometheus = "http://127.0.0.1:9090".into();
        c.quorum = 1.5;
        assert!(c.validate().unwrap_err().contains("fleet.quorum"));
        c.quorum = 0.5;
        c.timeout_s = 0.0;
        assert!(c.validate().unwrap_err().contains("fleet.timeout_s"));
        c.timeout_s = 2.0;
        assert!(c.validate().is_ok());
    }
}
