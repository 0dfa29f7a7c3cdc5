//! Headroom: a workload's tier in a capacity model (`[[workload]] model = "file.toml"`, `tier = "app"`):
//! what `status` shows of it — the tier's utilisation, the throughput that CPU use implies, and
//! the headroom before the model's bottleneck saturates. The bridge between "what should I buy"
//! (`perfpilot model`, `perfpilot capacity`) and "what is this host doing".
//!
//! By the utilization law a tier busy `U` of its `m` servers with a demand of `D` CPU-seconds
//! per request serves `X = U·m / D` requests per second; the model's bottleneck, the station
//! with the largest demand per server, saturates at `X_max = m_b / D_b`. Classes are mixed by
//! the model's own populations (closed) or arrival rates (open).

use std::path::{Path, PathBuf};

use crate::{ModelFile, Network, StationKind};
use serde::Serialize;

/// A model that cannot give a workload's tier, and why (saying what to fix).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("model {}: {why}", model.display())]
pub struct TierError {
    /// The model file.
    pub model: PathBuf,
    /// What is wrong and what to do.
    pub why: String,
}

impl TierError {
    fn new(model: &Path, why: impl std::fmt::Display) -> TierError {
        TierError {
            model: model.to_path_buf(),
            why: why.to_string(),
        }
    }
}

/// A tier of a loaded model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierCapacity {
    /// The model file.
    pub model: PathBuf,
    /// The tier's station.
    pub tier: String,
    /// CPU-seconds per request at the tier, classes mixed.
    pub demand_s: f64,
    /// The tier's servers (cores).
    pub servers: f64,
    /// The model's bottleneck station.
    pub bottleneck: String,
    /// The throughput at which the bottleneck saturates, requests per second.
    pub max_throughput: f64,
}

/// What `status` shows of a workload's tier now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityView {
    /// The model file.
    pub model: PathBuf,
    /// The tier's station.
    pub tier: String,
    /// The share of the tier's servers its CPU use fills.
    pub utilisation: f64,
    /// The requests per second that CPU use implies (utilization law).
    pub throughput: f64,
    /// The model's bottleneck station.
    pub bottleneck: String,
    /// The throughput at which it saturates.
    pub max_throughput: f64,
    /// `max_throughput / throughput`: how many times today's load fits; `None` when idle.
    pub headroom: Option<f64>,
}

impl TierCapacity {
    /// Loads `path` (fitting it when it asks for a fit) and finds `tier`; without `tier` the
    /// model's only queueing station. The error says what to fix.
    pub fn load(path: &Path, tier: Option<&str>) -> Result<TierCapacity, TierError> {
        // A device or a FIFO would be read forever; a model is a small file.
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() && m.len() <= 16 << 20 => {}
            Ok(_) => {
                return Err(TierError::new(
                    path,
                    "not a model file (a regular file of at most 16 MiB)",
                ));
            }
            Err(e) => return Err(TierError::new(path, e)),
        }
        let file = ModelFile::from_path(path).map_err(|e| TierError::new(path, e))?;
        let (net, _) = file.resolved().map_err(|e| TierError::new(path, e))?;
        Self::of(&net, path, tier)
    }

    /// The tier `tier` of `net`.
    pub fn of(net: &Network, path: &Path, tier: Option<&str>) -> Result<TierCapacity, TierError> {
        let at = |what: String| TierError::new(path, what);
        let weights = class_weights(net);
        let demand = |k: usize| -> f64 {
            net.stations[k]
                .demand
                .iter()
                .zip(&weights)
                .map(|(d, w)| d * w)
                .sum()
        };
        let queues: Vec<usize> = (0..net.stations.len())
            .filter(|&k| net.stations[k].kind != StationKind::Delay)
            .collect();
        let names = || {
            queues
                .iter()
                .map(|&k| net.stations[k].name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let k = match tier {
            Some(t) => {
                let k = net
                    .stations
                    .iter()
                    .position(|s| s.name == t)
                    .ok_or_else(|| at(format!("no station `{t}` (its stations: {})", names())))?;
                if net.stations[k].kind == StationKind::Delay {
                    return Err(at(format!(
                        "station `{t}` is a delay, not a tier with servers; pick one of {}",
                        names()
                    )));
                }
                k
            }
            None => match queues.as_slice() {
                [k] => *k,
                _ => {
                    return Err(at(format!(
                        "it has several tiers ({}): say which one the workload is with `tier`",
                        names()
                    )));
                }
            },
        };
        let d = demand(k);
        if !(d > 0.0 && d.is_finite()) {
            return Err(at(format!(
                "station `{}` has no demand: the workload's tier must serve requests",
                net.stations[k].name
            )));
        }
        let (b, x_max) = queues
            .iter()
            .filter(|&&j| demand(j) > 0.0)
            .map(|&j| (j, net.stations[j].kind.max_rate() / demand(j)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((k, net.stations[k].kind.max_rate() / d));
        Ok(TierCapacity {
            model: path.to_path_buf(),
            tier: net.stations[k].name.clone(),
            demand_s: d,
            servers: net.stations[k].kind.max_rate(),
            bottleneck: net.stations[b].name.clone(),
            max_throughput: x_max,
        })
    }

    /// The tier as it stands with the workload using `cpu_cores`.
    pub fn view(&self, cpu_cores: f64) -> CapacityView {
        let throughput = cpu_cores.max(0.0) / self.demand_s;
        CapacityView {
            model: self.model.clone(),
            tier: self.tier.clone(),
            utilisation: cpu_cores.max(0.0) / self.servers,
            throughput,
            bottleneck: self.bottleneck.clone(),
            max_throughput: self.max_throughput,
            // Below a hundredth of a request a second the ratio says nothing.
            headroom: (throughput > 0.01).then(|| self.max_throughput / throughput),
        }
    }
}

/// Each class's share of the requests: closed classes by population, open ones by arrival
/// rate; equal shares when the model gives neither.
fn class_weights(net: &Network) -> Vec<f64> {
    let raw: Vec<f64> = net
        .classes
        .iter()
        .map(|c| c.arrival_rate.unwrap_or(f64::from(c.population)).max(0.0))
        .collect();
    let total: f64 = raw.iter().sum();
    if total > 0.0 {
        raw.iter().map(|w| w / total).collect()
    } else {
        vec![1.0 / raw.len().max(1) as f64; raw.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Class, Discipline, Station};

    fn station(name: &str, kind: StationKind, demand: Vec<f64>) -> Station {
        Station {
            name: name.into(),
            kind,
            discipline: Discipline::Ps,
            demand,
        }
    }

    fn three_tier() -> Network {
        Network::new(
            vec![
                station("lan", StationKind::Delay, vec![0.002]),
                station("web", StationKind::Queue, vec![0.004]),
                station("app", StationKind::MultiServer(8), vec![0.036]),
                station("db", StationKind::MultiServer(2), vec![0.008]),
            ],
            vec![Class::closed("users", 50, 1.0)],
        )
        .unwrap()
    }

    #[test]
    fn a_tier_shows_its_utilisation_the_throughput_it_implies_and_the_headroom() {
        let t = TierCapacity::of(&three_tier(), Path::new("m.toml"), Some("app")).unwrap();
        // app: 8 servers / 0.036 s = 222 req/s, below web's 250 and db's 250.
        assert_eq!(t.bottleneck, "app");
        assert!((t.max_throughput - 8.0 / 0.036).abs() < 1e-9);
        let v = t.view(2.0);
        assert!((v.utilisation - 0.25).abs() < 1e-12);
        assert!((v.throughput - 2.0 / 0.036).abs() < 1e-9);
        assert!((v.headroom.unwrap() - 4.0).abs() < 1e-9);
        assert_eq!(t.view(0.0).headroom, None);
    }

    #[test]
    fn another_tier_can_be_the_bottleneck() {
        let t = TierCapacity::of(&three_tier(), Path::new("m.toml"), Some("db")).unwrap();
        assert_eq!(t.bottleneck, "app");
        assert!((t.view(1.0).utilisation - 0.5).abs() < 1e-12);
        assert!((t.view(1.0).throughput - 125.0).abs() < 1e-9);
    }

    #[test]
    fn a_missing_or_delay_tier_names_the_stations_to_pick_from() {
        let e = TierCapacity::of(&three_tier(), Path::new("m.toml"), Some("cache"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no station `cache`") && e.contains("web, app, db"),
            "{e}"
        );
        let e = TierCapacity::of(&three_tier(), Path::new("m.toml"), Some("lan"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a delay"), "{e}");
        let e = TierCapacity::of(&three_tier(), Path::new("m.toml"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("say which one"), "{e}");
    }

    #[test]
    fn classes_are_mixed_by_their_populations() {
        let net = Network::new(
            vec![station("app", StationKind::Queue, vec![0.010, 0.030])],
            vec![Class::closed("a", 3, 0.0), Class::closed("b", 1, 0.0)],
        )
        .unwrap();
        let t = TierCapacity::of(&net, Path::new("m.toml"), None).unwrap();
        assert!((t.demand_s - (0.75 * 0.010 + 0.25 * 0.030)).abs() < 1e-12);
    }

    #[test]
    fn a_device_is_not_read_as_a_model() {
        let e = TierCapacity::load(Path::new("/dev/zero"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a model file"), "{e}");
        let e = TierCapacity::load(Path::new("/nonexistent/m.toml"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/m.toml"), "{e}");
    }

    #[test]
    fn the_example_model_loads() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/models/three-tier.toml");
        let t = TierCapacity::load(&path, Some("app")).unwrap();
        assert!((t.demand_s - 0.036).abs() < 1e-9);
        assert_eq!(t.servers, 8.0);
    }
}
