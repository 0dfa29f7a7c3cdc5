//! The model file (TOML or JSON; see `docs/model-file.md`).
//!
//! ```toml
//! name = "three tiers"
//! [[classes]]
//! name = "users"
//! population = 20
//! think_time = 1.0
//! [[stations]]
//! name = "app"
//! kind = "queue"        # delay | queue | multiserver | load-dependent
//! servers = 4           # > 1 makes a multi-server station
//! demand = 0.004        # s per request; or service_time (+ visits); or leave out and fit
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::fit::FitReport;
use crate::mva::SolveOptions;
use crate::network::{Class, Discipline, Network, Station, StationKind};
use crate::point::LoadPoint;
use crate::predict::Configuration;

/// A number for the single class, or a table by class name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PerClass {
    /// The same value for the single class.
    One(f64),
    /// A value per class name; a class left out gets 0 (does not visit).
    ByClass(BTreeMap<String, f64>),
}

/// Station kinds as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KindSpec {
    /// Infinite server (think time, latency).
    Delay,
    /// One server; with `servers > 1`, a multi-server station.
    #[default]
    Queue,
    /// `servers` identical servers sharing one queue.
    Multiserver,
    /// Service rate multiplied by `rates[j-1]` with `j` customers present.
    LoadDependent,
}

/// A class as written in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    /// Unique class name.
    pub name: String,
    /// Closed class: its population.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub population: u32,
    /// Closed class: seconds between a reply and the next request (default 0).
    #[serde(default, skip_serializing_if = "is_zero_f")]
    pub think_time: f64,
    /// Open class: arrivals per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_rate: Option<f64>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn is_zero_f(v: &f64) -> bool {
    *v == 0.0
}

/// A station as written in the file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StationSpec {
    /// Unique station name.
    pub name: String,
    /// How the station serves (default: queue).
    #[serde(default)]
    pub kind: KindSpec,
    /// PS (default) or FCFS; they differ only where classes of different demands visit (see
    /// [`Discipline`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discipline: Option<Discipline>,
    /// Servers of a queue or multi-server station (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<u32>,
    /// Rate multipliers of a load-dependent station.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rates: Option<Vec<f64>>,
    /// Seconds of service per request, visits included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demand: Option<PerClass>,
    /// Seconds per visit (then `visits`, default 1); instead of `demand`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_time: Option<PerClass>,
    /// Visits per request; goes with `service_time`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visits: Option<PerClass>,
    /// Price of one node of this station, for cost rankings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
}

/// `[fit]`: which measured points the demands are fitted from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitSpec {
    /// Labels of the points to fit from; empty = all points.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<String>,
}

/// `[predict]`: what `perfpilot model predict` sweeps.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictSpec {
    /// Client counts to predict at.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<u32>,
    /// Station to replicate behind a balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicate: Option<String>,
    /// Replica counts of that station.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<u32>,
    /// Clients at which configurations are priced (default: the class population).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_clients: Option<u32>,
}

/// A whole model file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// Free-text name, printed above the tables.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Free-text description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `[solver]`: method, multi-server treatment, tolerance, iteration cap.
    #[serde(default)]
    pub solver: SolveOptions,
    /// `[[classes]]`: at least one.
    #[serde(default, alias = "class")]
    pub classes: Vec<ClassSpec>,
    /// `[[stations]]`: at least one.
    #[serde(default, alias = "station")]
    pub stations: Vec<StationSpec>,
    /// `[[measurements]]`: measured load points for fitting and validation.
    #[serde(default, alias = "measurement", skip_serializing_if = "Vec::is_empty")]
    pub measurements: Vec<LoadPoint>,
    /// `[fit]`: fit the demands from the measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<FitSpec>,
    /// `[predict]`: what `predict` sweeps by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predict: Option<PredictSpec>,
    /// `[[configurations]]`: deployments ranked by throughput per cost.
    #[serde(
        default,
        alias = "configuration",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub configurations: Vec<Configuration>,
}

impl ModelFile {
    /// Reads a model by extension: `.toml`, `.json`, or `.xml`/`.jmva` (JMT JMVA).
    pub fn from_path(path: &Path) -> Result<ModelFile, ModelError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ModelError::File(format!("{}: {e}", path.display())))?;
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let res = match ext.as_str() {
            "toml" => ModelFile::parse_toml(&text),
            "json" => ModelFile::parse_json(&text),
            "xml" | "jmva" => crate::jmva::read(&text).map(|n| ModelFile::from_network(&n)),
            _ => Err(ModelError::File(
                "unknown extension; use .toml, .json, or .xml/.jmva for JMVA".into(),
            )),
        };
        res.map_err(|e| match e {
            ModelError::File(m) => ModelError::File(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Parses TOML text.
    pub fn parse_toml(text: &str) -> Result<ModelFile, ModelError> {
        toml::from_str(text).map_err(|e| ModelError::File(e.to_string()))
    }

    /// Parses JSON text.
    pub fn parse_json(text: &str) -> Result<ModelFile, ModelError> {
        serde_json::from_str(text).map_err(|e| ModelError::File(e.to_string()))
    }

    /// The file as TOML.
    pub fn to_toml(&self) -> Result<String, ModelError> {
        toml::to_string(self).map_err(|e| ModelError::File(e.to_string()))
    }

    /// The file as pretty-printed JSON.
    pub fn to_json(&self) -> Result<String, ModelError> {
        serde_json::to_string_pretty(self).map_err(|e| ModelError::File(e.to_string()))
    }

    /// A file describing `net` by demands.
    pub fn from_network(net: &Network) -> ModelFile {
        let per_class = |v: &[f64]| {
            if net.classes.len() == 1 {
                PerClass::One(v[0])
            } else {
                PerClass::ByClass(
                    net.classes
                        .iter()
                        .zip(v)
                        .map(|(c, &d)| (c.name.clone(), d))
                        .collect(),
                )
            }
        };
        ModelFile {
            classes: net
                .classes
                .iter()
                .map(|c| ClassSpec {
                    name: c.name.clone(),
                    population: c.population,
                    think_time: c.think_time,
                    arrival_rate: c.arrival_rate,
                })
                .collect(),
            stations: net
                .stations
                .iter()
                .map(|s| {
                    let (kind, servers, rates) = match &s.kind {
                        StationKind::Delay => (KindSpec::Delay, None, None),
                        StationKind::Queue => (KindSpec::Queue, None, None),
                        StationKind::MultiServer(m) => (KindSpec::Multiserver, Some(*m), None),
                        StationKind::LoadDependent(r) => {
                            (KindSpec::LoadDependent, None, Some(r.clone()))
                        }
                    };
                    StationSpec {
                        name: s.name.clone(),
                        kind,
                        discipline: (s.kind != StationKind::Delay).then_some(s.discipline),
                        servers,
                        rates,
                        demand: Some(per_class(&s.demand)),
                        ..StationSpec::default()
                    }
                })
                .collect(),
            ..ModelFile::default()
        }
    }

    /// Classes, checked.
    pub fn classes(&self) -> Result<Vec<Class>, ModelError> {
        if self.classes.is_empty() {
            return Err(ModelError::NoClasses);
        }
        Ok(self
            .classes
            .iter()
            .map(|c| Class {
                name: c.name.clone(),
                population: c.population,
                think_time: c.think_time,
                arrival_rate: c.arrival_rate,
            })
            .collect())
    }

    /// Stations; a station whose demand is not given has an empty `demand` (to be fitted).
    pub fn skeleton(&self) -> Result<Vec<Station>, ModelError> {
        let classes = self.classes()?;
        if self.stations.is_empty() {
            return Err(ModelError::NoStations);
        }
        self.stations.iter().map(|s| station(s, &classes)).collect()
    }

    /// The network with every demand stated in the file.
    pub fn network(&self) -> Result<Network, ModelError> {
        let classes = self.classes()?;
        let stations = self.skeleton()?;
        if let Some(s) = stations.iter().find(|s| s.demand.is_empty()) {
            return Err(ModelError::StationField {
                station: s.name.clone(),
                field: "demand",
                message: "not given; give `demand`, or `service_time` (and `visits`), or fit it from measurements with a [fit] section".into(),
            });
        }
        Network::new(stations, classes)
    }

    /// Whether the file asks for fitting: a `[fit]` section, or a station without demand
    /// when there are measurements to fit it from (without any, [`ModelFile::network`] says
    /// which station lacks its demand).
    pub fn wants_fit(&self) -> bool {
        self.fit.is_some()
            || (!self.measurements.is_empty()
                && self
                    .stations
                    .iter()
                    .any(|s| s.demand.is_none() && s.service_time.is_none()))
    }

    /// The measured points selected by `[fit] from` (all when empty).
    pub fn fit_points(&self) -> Result<Vec<LoadPoint>, ModelError> {
        let from = self
            .fit
            .as_ref()
            .map(|f| f.from.clone())
            .unwrap_or_default();
        if from.is_empty() {
            return Ok(self.measurements.clone());
        }
        from.iter()
            .map(|l| {
                self.measurements
                    .iter()
                    .find(|m| &m.name() == l)
                    .cloned()
                    .ok_or_else(|| {
                        ModelError::File(format!("[fit] from: no measurement labelled `{l}`"))
                    })
            })
            .collect()
    }

    /// The network to use: fitted from the measurements when the file asks for it, else as
    /// stated. The fit report comes along when a fit was done.
    pub fn resolved(&self) -> Result<(Network, Option<FitReport>), ModelError> {
        if !self.wants_fit() {
            return Ok((self.network()?, None));
        }
        let report = self.fit_demands()?;
        Ok((report.network.clone(), Some(report)))
    }

    /// Price per node by station name.
    pub fn prices(&self) -> Result<BTreeMap<String, f64>, ModelError> {
        let mut out = BTreeMap::new();
        for s in &self.stations {
            if let Some(p) = s.price {
                if !p.is_finite() || p < 0.0 {
                    return Err(ModelError::StationField {
                        station: s.name.clone(),
                        field: "price",
                        message: format!("is {p}; it must be finite and >= 0"),
                    });
                }
                out.insert(s.name.clone(), p);
            }
        }
        Ok(out)
    }
}

fn per_class(
    spec: &StationSpec,
    field: &'static str,
    v: &PerClass,
    classes: &[Class],
) -> Result<Vec<f64>, ModelError> {
    let out = match v {
        PerClass::One(x) => {
            if classes.len() != 1 {
                return Err(ModelError::StationField {
                    station: spec.name.clone(),
                    field,
                    message: format!(
                        "a single number needs exactly one class; the model has {}, so give a table by class name",
                        classes.len()
                    ),
                });
            }
            vec![*x]
        }
        PerClass::ByClass(map) => {
            if let Some(unknown) = map.keys().find(|k| !classes.iter().any(|c| &c.name == *k)) {
                return Err(ModelError::StationField {
                    station: spec.name.clone(),
                    field,
                    message: format!("unknown class `{unknown}`"),
                });
            }
            classes
                .iter()
                .map(|c| map.get(&c.name).copied().unwrap_or(0.0))
                .collect()
        }
    };
    for (c, &x) in out.iter().enumerate() {
        if !x.is_finite() || x < 0.0 {
            return Err(ModelError::BadDemand {
                station: spec.name.clone(),
                class: classes[c].name.clone(),
                field,
                value: x,
            });
        }
    }
    Ok(out)
}

fn station(spec: &StationSpec, classes: &[Class]) -> Result<Station, ModelError> {
    let field_err = |field: &'static str, message: &str| ModelError::StationField {
        station: spec.name.clone(),
        field,
        message: message.to_string(),
    };
    if spec.name.is_empty() {
        return Err(ModelError::File("a station has an empty name".into()));
    }
    let kind = match spec.kind {
        KindSpec::Delay => {
            if spec.servers.is_some() || spec.rates.is_some() {
                return Err(field_err(
                    "kind",
                    "a delay station takes neither `servers` nor `rates`",
                ));
            }
            StationKind::Delay
        }
        KindSpec::Queue | KindSpec::Multiserver => {
            if spec.rates.is_some() {
                return Err(field_err(
                    "rates",
                    "only a load-dependent station takes `rates`",
                ));
            }
            match (spec.kind, spec.servers) {
                (_, Some(0)) => {
                    return Err(ModelError::ZeroServers {
                        station: spec.name.clone(),
                    });
                }
                (KindSpec::Multiserver, None) => {
                    return Err(field_err(
                        "servers",
                        "a multiserver station needs `servers` (at least 1)",
                    ));
                }
                (_, None) | (_, Some(1)) => StationKind::Queue,
                (_, Some(m)) => StationKind::MultiServer(m),
            }
        }
        KindSpec::LoadDependent => match &spec.rates {
            Some(r) => StationKind::LoadDependent(r.clone()),
            None => {
                return Err(ModelError::NoRates {
                    station: spec.name.clone(),
                });
            }
        },
    };
    let demand = match (&spec.demand, &spec.service_time, &spec.visits) {
        (Some(_), Some(_), _) => {
            return Err(field_err(
                "demand",
                "give either `demand` or `service_time`, not both",
            ));
        }
        (Some(_), None, Some(_)) => {
            return Err(field_err(
                "visits",
                "`visits` goes with `service_time`; `demand` already includes the visits",
            ));
        }
        (Some(d), None, None) => per_class(spec, "demand", d, classes)?,
        (None, Some(s), v) => {
            let s = per_class(spec, "service_time", s, classes)?;
            let v = match v {
                Some(v) => per_class(spec, "visits", v, classes)?,
                None => vec![1.0; classes.len()],
            };
            s.iter().zip(&v).map(|(s, v)| s * v).collect()
        }
        (None, None, Some(_)) => {
            return Err(field_err("visits", "`visits` needs `service_time`"));
        }
        (None, None, None) => Vec::new(),
    };
    if !demand.is_empty() && demand.iter().all(|&d| d == 0.0) {
        return Err(ModelError::NotVisited {
            station: spec.name.clone(),
        });
    }
    Ok(Station {
        name: spec.name.clone(),
        kind,
        discipline: spec.discipline.unwrap_or_default(),
        demand,
    })
}
