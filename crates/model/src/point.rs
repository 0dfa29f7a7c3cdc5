//! A measured load point: what a closed system did at one client count (the model file's
//! `[[measurements]]`), and the checks that make it usable for fitting and validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::network::{Station, StationKind};

/// One measured load point of a closed system (plain data; perfpilot's drive results map
/// onto it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadPoint {
    /// A name for tables and errors (defaults to "N clients").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// Concurrent clients (closed population).
    pub clients: u32,
    /// Mean think time between a reply and the next request, seconds.
    #[serde(default)]
    pub think_time: f64,
    /// Completed requests per second.
    pub throughput: f64,
    /// Mean response time, seconds; when absent it is derived by the response-time law.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_time: Option<f64>,
    /// Busy cores per station (tier) during the run, e.g. 3.2 of a 4-core tier.
    #[serde(default)]
    pub utilization: BTreeMap<String, f64>,
    /// Core count per station when it differs from the model's server count.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cores: BTreeMap<String, f64>,
}

impl LoadPoint {
    /// The label, or "N clients".
    pub fn name(&self) -> String {
        if self.label.is_empty() {
            format!("{} clients", self.clients)
        } else {
            self.label.clone()
        }
    }

    /// Checks the point against a network's stations. Errors name the point and the field.
    pub fn check(&self, stations: &[Station]) -> Result<(), ModelError> {
        let bad = |field: &str, message: String| ModelError::BadMeasurement {
            label: self.name(),
            field: field.to_string(),
            message,
        };
        if self.clients == 0 {
            return Err(bad("clients", "must be at least 1".into()));
        }
        if !self.throughput.is_finite() || self.throughput <= 0.0 {
            return Err(bad(
                "throughput",
                format!("is {}; it must be finite and > 0", self.throughput),
            ));
        }
        if !self.think_time.is_finite() || self.think_time < 0.0 {
            return Err(bad(
                "think_time",
                format!("is {}; it must be finite and >= 0", self.think_time),
            ));
        }
        if let Some(r) = self.response_time
            && (!r.is_finite() || r <= 0.0)
        {
            return Err(bad(
                "response_time",
                format!("is {r}; it must be finite and > 0"),
            ));
        }
        for (name, &u) in &self.utilization {
            let field = format!("utilization.{name}");
            let Some(s) = stations.iter().find(|s| &s.name == name) else {
                return Err(bad(&field, "no station of that name in the model".into()));
            };
            if s.kind == StationKind::Delay {
                return Err(bad(&field, "a delay station has no utilization".into()));
            }
            if !u.is_finite() || u < 0.0 {
                return Err(bad(&field, format!("is {u}; it must be finite and >= 0")));
            }
            let cores = self.cores_of(s);
            if u > cores * (1.0 + 1e-9) {
                return Err(ModelError::UtilizationAboveCores {
                    label: self.name(),
                    station: name.clone(),
                    value: u,
                    cores,
                });
            }
        }
        for (name, &c) in &self.cores {
            if !stations.iter().any(|s| &s.name == name) {
                return Err(bad(
                    &format!("cores.{name}"),
                    "no station of that name in the model".into(),
                ));
            }
            if !c.is_finite() || c <= 0.0 {
                return Err(bad(
                    &format!("cores.{name}"),
                    format!("is {c}; it must be > 0"),
                ));
            }
        }
        Ok(())
    }

    /// Cores of station `s` during this measurement.
    pub fn cores_of(&self, s: &Station) -> f64 {
        self.cores
            .get(&s.name)
            .copied()
            .unwrap_or_else(|| s.kind.max_rate())
    }
}
