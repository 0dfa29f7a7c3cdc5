//! `perfpilot fleet status`: the fleet's verdicts per workload signature × strategy (hosts
//! that tried it, kept, reverted, neutral; the median gain and its range), and the daemons
//! that are down or stretched their interval, all read from Prometheus.

use perfpilot_optimize::fleet::{Outcome, PromError, Prometheus, Tally};

/// A daemon that needs a look.
#[derive(Debug, Clone, PartialEq)]
pub struct HostNote {
    /// Its `instance` label.
    pub instance: String,
    /// What is wrong.
    pub what: String,
}

/// What the fleet status shows.
#[derive(Debug, Clone, Default)]
pub struct FleetStatus {
    /// The verdicts by (signature, strategy).
    pub tally: Tally,
    /// Daemons Prometheus scrapes, and how many are up.
    pub daemons: usize,
    /// Those that are up.
    pub up: usize,
    /// Daemons down or with a stretched interval.
    pub notes: Vec<HostNote>,
}

impl FleetStatus {
    /// Reads the fleet status from `prom`; `job` is the scrape job of the daemons.
    pub fn read(prom: &Prometheus, job: &str) -> Result<FleetStatus, PromError> {
        let tally = Tally::read(prom)?;
        let up = prom.query(&format!("up{{job=\"{job}\"}}"))?;
        let stretched = prom.query(&format!(
            "perfpilot_scan_interval_seconds{{job=\"{job}\"}} / perfpilot_scan_interval_configured_seconds{{job=\"{job}\"}} > 1"
        ))?;
        let mut notes: Vec<HostNote> = up
            .iter()
            .filter(|s| s.value < 1.0)
            .map(|s| HostNote {
                instance: s.label("instance").to_string(),
                what: "down (Prometheus cannot scrape it)".into(),
            })
            .collect();
        notes.extend(stretched.iter().map(|s| HostNote {
            instance: s.label("instance").to_string(),
            what: format!("interval stretched x{:.2} to keep its CPU budget", s.value),
        }));
        notes.sort_by(|a, b| a.instance.cmp(&b.instance));
        Ok(FleetStatus {
            tally,
            daemons: up.len(),
            up: up.iter().filter(|s| s.value >= 1.0).count(),
            notes,
        })
    }

    /// The verdict rows, most hosts first.
    pub fn rows(&self) -> Vec<(&(String, String), &Outcome)> {
        let mut v: Vec<_> = self.tally.pairs.iter().collect();
        v.sort_by(|a, b| b.1.tried().cmp(&a.1.tried()).then(a.0.cmp(b.0)));
        v
    }
}
