//! The model: stations, classes, and the checks that make a network solvable.

use serde::{Deserialize, Serialize};

use crate::error::ModelError;

/// How a station serves its customers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StationKind {
    /// Infinite server: think time, network latency. Residence time = demand.
    Delay,
    /// One server (PS or FCFS).
    Queue,
    /// `m` identical servers sharing one queue (e.g. a tier with `m` cores).
    MultiServer(u32),
    /// Service rate multiplier `rates[j-1]` with `j` customers present; the last rate holds
    /// for every larger `j`. `rates = [1]` is a queue, `[1, 2, .., m]` an m-server station.
    LoadDependent(Vec<f64>),
}

/// Scheduling discipline of a queueing station. Both give the same mean values in a
/// product-form network (FCFS needs class-independent service times there). A single-server
/// FCFS station (or the queue part of a multi-server one under Seidmann's approximation)
/// visited by classes of different demands is solved with the FCFS heuristic: an arriving
/// request waits for the work of those ahead of it, each at its own class's demand, where PS
/// would let a short request pass long ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Discipline {
    /// Processor sharing.
    #[default]
    Ps,
    /// First come, first served.
    Fcfs,
}

/// One service centre.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Station {
    /// Unique name.
    pub name: String,
    /// How it serves.
    pub kind: StationKind,
    /// Scheduling discipline (see [`Discipline`]).
    #[serde(default)]
    pub discipline: Discipline,
    /// Service demand per class in seconds per request (visit ratio × service time per visit),
    /// indexed like [`Network::classes`]. 0 means the class does not visit the station.
    pub demand: Vec<f64>,
}

/// A class of customers: closed (a fixed population cycling through the stations) or open
/// (Poisson arrivals at `arrival_rate` per second; `population` is then 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Class {
    /// Unique name.
    pub name: String,
    /// Customers of a closed class; 0 for an open class.
    #[serde(default)]
    pub population: u32,
    /// Think time per cycle in seconds: an implicit delay station seen only by this class.
    #[serde(default)]
    pub think_time: f64,
    /// Arrivals per second of an open class; `None` for a closed class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_rate: Option<f64>,
}

impl Class {
    /// A closed class.
    pub fn closed(name: &str, population: u32, think_time: f64) -> Class {
        Class {
            name: name.to_string(),
            population,
            think_time,
            arrival_rate: None,
        }
    }

    /// An open class.
    pub fn open(name: &str, arrival_rate: f64) -> Class {
        Class {
            name: name.to_string(),
            population: 0,
            think_time: 0.0,
            arrival_rate: Some(arrival_rate),
        }
    }

    /// Whether the class is open (has an arrival rate).
    pub fn is_open(&self) -> bool {
        self.arrival_rate.is_some()
    }
}

/// A product-form queueing network (closed, or mixed with open classes). Build it with
/// [`Network::new`], which checks it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Network {
    /// The service centres.
    pub stations: Vec<Station>,
    /// The classes; every station's `demand` is indexed like this.
    pub classes: Vec<Class>,
}

impl StationKind {
    /// Service-rate multiplier with `j ≥ 1` customers present.
    pub fn rate(&self, j: u32) -> f64 {
        match self {
            StationKind::Delay => f64::from(j),
            StationKind::Queue => 1.0,
            StationKind::MultiServer(m) => f64::from(j.min(*m)),
            StationKind::LoadDependent(r) => match r.len() {
                0 => 1.0, // rejected by Network::check; no panic on an unchecked kind
                len => r[(j as usize).clamp(1, len) - 1],
            },
        }
    }

    /// Highest service-rate multiplier (the capacity in servers); infinite for a delay.
    pub fn max_rate(&self) -> f64 {
        match self {
            StationKind::Delay => f64::INFINITY,
            StationKind::Queue => 1.0,
            StationKind::MultiServer(m) => f64::from(*m),
            StationKind::LoadDependent(r) => r.iter().copied().fold(0.0, f64::max),
        }
    }

    /// Lowest service-rate multiplier.
    pub fn min_rate(&self) -> f64 {
        match self {
            StationKind::Delay | StationKind::Queue | StationKind::MultiServer(_) => 1.0,
            StationKind::LoadDependent(r) => r.iter().copied().fold(f64::INFINITY, f64::min),
        }
    }

    /// Shortest time one customer's demand of 1 s can take: `min_j j / rate(j)`.
    pub fn fastest_per_customer(&self) -> f64 {
        match self {
            StationKind::Delay | StationKind::Queue | StationKind::MultiServer(_) => 1.0,
            StationKind::LoadDependent(r) => (1..=r.len())
                .map(|j| j as f64 / r[j - 1])
                .fold(f64::INFINITY, f64::min),
        }
    }

    /// Number of servers when the station has a definite count.
    pub fn servers(&self) -> Option<u32> {
        match self {
            StationKind::Delay | StationKind::LoadDependent(_) => None,
            StationKind::Queue => Some(1),
            StationKind::MultiServer(m) => Some(*m),
        }
    }

    /// Short label for tables.
    pub fn label(&self) -> String {
        match self {
            StationKind::Delay => "delay".into(),
            StationKind::Queue => "queue".into(),
            StationKind::MultiServer(m) => format!("{m} servers"),
            StationKind::LoadDependent(_) => "load-dep".into(),
        }
    }
}

impl Network {
    /// Builds and checks a network. Errors name the station or class at fault.
    pub fn new(stations: Vec<Station>, classes: Vec<Class>) -> Result<Network, ModelError> {
        let net = Network { stations, classes };
        net.check()?;
        Ok(net)
    }

    /// Checks every rule [`Network::new`] enforces (useful after editing fields in place).
    pub fn check(&self) -> Result<(), ModelError> {
        if self.classes.is_empty() {
            return Err(ModelError::NoClasses);
        }
        if self.stations.is_empty() {
            return Err(ModelError::NoStations);
        }
        for (i, c) in self.classes.iter().enumerate() {
            if self.classes[..i].iter().any(|o| o.name == c.name) {
                return Err(ModelError::DuplicateClass(c.name.clone()));
            }
            if let Some(l) = c.arrival_rate {
                if !l.is_finite() || l <= 0.0 {
                    return Err(ModelError::BadArrivalRate {
                        class: c.name.clone(),
                        value: l,
                    });
                }
                if c.population != 0 || c.think_time != 0.0 {
                    return Err(ModelError::OpenAndClosed {
                        class: c.name.clone(),
                    });
                }
            } else if c.population == 0 {
                return Err(ModelError::ZeroPopulation {
                    class: c.name.clone(),
                });
            }
            if !c.think_time.is_finite() || c.think_time < 0.0 {
                return Err(ModelError::BadThinkTime {
                    class: c.name.clone(),
                    value: c.think_time,
                });
            }
        }
        for (i, s) in self.stations.iter().enumerate() {
            if self.stations[..i].iter().any(|o| o.name == s.name) {
                return Err(ModelError::DuplicateStation(s.name.clone()));
            }
            if s.demand.len() != self.classes.len() {
                return Err(ModelError::StationField {
                    station: s.name.clone(),
                    field: "demand",
                    message: format!(
                        "has {} values but the network has {} classes",
                        s.demand.len(),
                        self.classes.len()
                    ),
                });
            }
            for (c, &d) in s.demand.iter().enumerate() {
                if !d.is_finite() || d < 0.0 {
                    return Err(ModelError::BadDemand {
                        station: s.name.clone(),
                        class: self.classes[c].name.clone(),
                        field: "demand",
                        value: d,
                    });
                }
            }
            if s.demand.iter().all(|&d| d == 0.0) {
                return Err(ModelError::NotVisited {
                    station: s.name.clone(),
                });
            }
            match &s.kind {
                StationKind::MultiServer(0) => {
                    return Err(ModelError::ZeroServers {
                        station: s.name.clone(),
                    });
                }
                StationKind::LoadDependent(r) => {
                    if r.is_empty() {
                        return Err(ModelError::NoRates {
                            station: s.name.clone(),
                        });
                    }
                    for (j, &a) in r.iter().enumerate() {
                        if !a.is_finite() || a <= 0.0 {
                            return Err(ModelError::BadRate {
                                station: s.name.clone(),
                                index: j + 1,
                                value: a,
                            });
                        }
                    }
                }
                _ => {}
            }
        }
        for (c, class) in self.classes.iter().enumerate() {
            if class.think_time == 0.0 && self.stations.iter().all(|s| s.demand[c] == 0.0) {
                return Err(ModelError::ClassWithoutDemand {
                    class: class.name.clone(),
                });
            }
        }
        Ok(())
    }

    /// Index of the station called `name`.
    pub fn station_index(&self, name: &str) -> Result<usize, ModelError> {
        self.stations
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| ModelError::UnknownStation(name.to_string()))
    }

    /// Total population of all classes.
    pub fn total_population(&self) -> u32 {
        self.classes.iter().map(|c| c.population).sum()
    }

    /// The same network with station `name` replaced by `m` replicas behind a balancer: separate
    /// stations `name#1..name#m`, each with visit ratio 1/m (demand / m). `m = 1` keeps it.
    pub fn with_replicas(&self, name: &str, m: u32) -> Result<Network, ModelError> {
        let k = self.station_index(name)?;
        if m == 0 {
            return Err(ModelError::StationField {
                station: name.to_string(),
                field: "replicas",
                message: "must be at least 1".into(),
            });
        }
        if m == 1 {
            return Ok(self.clone());
        }
        let base = &self.stations[k];
        let mut stations = Vec::with_capacity(self.stations.len() + m as usize - 1);
        for (i, s) in self.stations.iter().enumerate() {
            if i == k {
                for r in 1..=m {
                    stations.push(Station {
                        name: format!("{}#{r}", base.name),
                        kind: base.kind.clone(),
                        discipline: base.discipline,
                        demand: base.demand.iter().map(|d| d / f64::from(m)).collect(),
                    });
                }
            } else {
                stations.push(s.clone());
            }
        }
        Network::new(stations, self.classes.clone())
    }

    /// The same network with other populations (one per class).
    pub fn with_populations(&self, populations: &[u32]) -> Result<Network, ModelError> {
        if populations.len() != self.classes.len() {
            return Err(ModelError::File(format!(
                "{} populations given for {} classes",
                populations.len(),
                self.classes.len()
            )));
        }
        let mut net = self.clone();
        for (c, &n) in net.classes.iter_mut().zip(populations) {
            c.population = n;
        }
        net.check()?;
        Ok(net)
    }
}
