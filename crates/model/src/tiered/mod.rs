//! Tiered capacity models fitted from a measured load sweep: what `perfpilot capacity` fits.
//!
//! A deployment is a chain of tiers (proxy, app instances, database, and the load driver
//! itself), each tier a CPU station with a capacity in cores per instance (a CPU quota, a core
//! set, or its thread count), plus one delay station for everything the tiers' CPU does not
//! account for: the client and network path (loopback, kernel, wake-ups), `R − ΣD` at low load.
//!
//! * Demands come from the utilization law over the lowest load points only: for each tier
//!   `U_i = Σ_c X_ic · D_c` (busy cores of all its instances), solved by non-negative least
//!   squares over the points and classes (per-class demands from per-class throughputs).
//! * The delay is the one value that makes the model's throughput at the fitted points equal
//!   the measured one (the response-time law `N/X − Z` holds the whole cycle).
//! * The driver's latency window does not cover the whole cycle (the request is built and
//!   the reply parsed outside it): the difference `N/X − Z − R` at the fitted points is kept
//!   per class and taken off the model's response time, so predicted and measured response
//!   times are the same quantity.
//! * A tier with capacity `c ≤ 1` core per instance is a queue with demand `D/c` (a quota
//!   slows the tier down), whose stretch `D/c − D` hides a request's time elsewhere
//!   (`quota.rs`); `c` whole cores a multi-server station; a fractional `c > 1` a
//!   load-dependent station with rates `1, 2, …, ⌊c⌋, c`. More instances of a tier behind a
//!   balancer are one load-dependent station: `n` requests spread evenly over the instances.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod check;
mod nnls;
mod quota;
mod stations;

use crate::error::ModelError;
use crate::mva::{SolveOptions, solve};
use crate::network::Discipline;
pub use check::{OwnDemand, TierCheck};
use nnls::nnls;
use quota::Overlap;

/// Bisection steps for the share of a quota's overlap that keeps every tier within its cores.
const CAPACITY_BISECTION: usize = 30;

/// A fitted point shows the path delay when a tenth of its cycle added as delay lowers the
/// model's throughput by at least this share.
const PATH_SHOWS: f64 = 0.01;

/// Per class: its name, users and think time, as the solver takes a load.
type ClassLoads = Vec<(String, u32, f64)>;

/// The name of the delay station for the client and network path.
pub const PATH_STATION: &str = "client-path";

/// One tier as deployed: its name and the CPU capacity of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierSpec {
    /// Unique tier name (`proxy`, `app`, `db`, `driver`).
    pub name: String,
    /// Cores one instance can use (its CPU quota, its core set, or its threads).
    pub cores: f64,
    /// How an instance takes requests: PS (default), or FCFS for a pool of workers taking
    /// them in arrival order (a short request then waits behind long ones).
    #[serde(default, skip_serializing_if = "is_ps")]
    pub discipline: Discipline,
}

fn is_ps(d: &Discipline) -> bool {
    *d == Discipline::Ps
}

/// What one class of users did at a load point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassLoad {
    /// The class (request type), e.g. `score`.
    pub class: String,
    /// Closed-loop users of this class.
    pub users: u32,
    /// Mean think time, seconds.
    pub think_time: f64,
    /// Completed requests per second.
    pub throughput: f64,
    /// Mean response time the driver measured, seconds.
    pub response_time: f64,
}

/// One measured load point of a tiered deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierPoint {
    /// A name for tables (`8 users, Z 0, app x1`).
    pub label: String,
    /// Per class, what its users did.
    pub classes: Vec<ClassLoad>,
    /// Busy cores per tier over all its instances (the driver too).
    pub busy: BTreeMap<String, f64>,
    /// Instances per tier when not 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instances: BTreeMap<String, u32>,
}

impl TierPoint {
    /// Total users over the classes.
    pub fn users(&self) -> u32 {
        self.classes.iter().map(|c| c.users).sum()
    }

    /// Total throughput over the classes.
    pub fn throughput(&self) -> f64 {
        self.classes.iter().map(|c| c.throughput).sum()
    }

    fn check(&self, tiers: &[TierSpec]) -> Result<(), ModelError> {
        let bad = |field: &str, message: String| ModelError::BadMeasurement {
            label: self.label.clone(),
            field: field.to_string(),
            message,
        };
        if self.classes.is_empty() {
            return Err(bad("classes", "the point has no class of users".into()));
        }
        for c in &self.classes {
            if c.users == 0 {
                continue;
            }
            if !c.throughput.is_finite() || c.throughput <= 0.0 {
                return Err(bad(
                    &format!("{}.throughput", c.class),
                    format!("is {}; it must be finite and > 0", c.throughput),
                ));
            }
            if !c.response_time.is_finite() || c.response_time <= 0.0 {
                return Err(bad(
                    &format!("{}.response_time", c.class),
                    format!("is {}; it must be finite and > 0", c.response_time),
                ));
            }
        }
        for t in tiers {
            let Some(&u) = self.busy.get(&t.name) else {
                return Err(bad(
                    &format!("busy.{}", t.name),
                    "no CPU measured for this tier".into(),
                ));
            };
            let cap = t.cores * f64::from(self.instances_of(&t.name));
            if !u.is_finite() || u < 0.0 {
                return Err(bad(
                    &format!("busy.{}", t.name),
                    format!("is {u}; it must be finite and >= 0"),
                ));
            }
            // Quotas are enforced per period; allow a little over for sampling edges.
            if u > cap * 1.05 {
                return Err(ModelError::UtilizationAboveCores {
                    label: self.label.clone(),
                    station: t.name.clone(),
                    value: u,
                    cores: cap,
                });
            }
        }
        Ok(())
    }

    /// Instances of `tier` at this point (1 unless stated).
    pub fn instances_of(&self, tier: &str) -> u32 {
        self.instances.get(tier).copied().unwrap_or(1).max(1)
    }
}

/// One tier's fitted demand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FittedTier {
    /// The tier.
    pub name: String,
    /// Cores per instance.
    pub cores: f64,
    /// CPU seconds per request of each class over all instances (indexed like the classes).
    pub demand: Vec<f64>,
    /// How an instance takes requests (see [`TierSpec::discipline`]).
    #[serde(default, skip_serializing_if = "is_ps")]
    pub discipline: Discipline,
}

/// Utilization-law residual of one tier at one fitted point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierResidual {
    /// The point.
    pub label: String,
    /// The tier.
    pub tier: String,
    /// Busy cores measured.
    pub measured: f64,
    /// Σ_c X_c D_c with the fitted demands.
    pub fitted: f64,
}

/// A fitted tiered model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierModel {
    /// The classes (request types), in the order of every demand vector.
    pub classes: Vec<String>,
    /// The tiers with their demands.
    pub tiers: Vec<FittedTier>,
    /// The client and network path, seconds per request (a delay station).
    pub path_delay: f64,
    /// Per class, the part of the cycle outside the driver's latency window, seconds.
    pub outside_latency: Vec<f64>,
    /// Labels of the points the model was fitted from.
    pub fitted_from: Vec<String>,
    /// Utilization-law residuals at the fitted points.
    pub residuals: Vec<TierResidual>,
    /// What the fit had to decide (a demand held at 0, a negative delay); never silent.
    pub notes: Vec<String>,
}

/// The model's answer for one load and deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierPrediction {
    /// Per class: (class, requests per second, response time in seconds as the driver
    /// measures it).
    pub classes: Vec<(String, f64, f64)>,
    /// Busy cores per tier over all its instances.
    pub busy: BTreeMap<String, f64>,
    /// Busy share of capacity per tier (busy / (cores × instances)).
    pub utilization: BTreeMap<String, f64>,
    /// The tier with the highest utilization.
    pub bottleneck: String,
}

impl TierPrediction {
    /// Total throughput.
    pub fn throughput(&self) -> f64 {
        self.classes.iter().map(|c| c.1).sum()
    }

    /// Throughput-weighted mean response time.
    pub fn response_time(&self) -> f64 {
        let x = self.throughput();
        if x > 0.0 {
            self.classes.iter().map(|c| c.1 * c.2).sum::<f64>() / x
        } else {
            0.0
        }
    }
}

/// Fits a tiered model from `points` (use the lowest loads only; the caller picks them).
pub fn fit_tiers(tiers: &[TierSpec], points: &[TierPoint]) -> Result<TierModel, ModelError> {
    check_fit_input(tiers, points)?;
    let mut model = fit_demands(tiers, points);
    model.fit_path_delay(points)?;
    model.fit_outside_latency(points);
    Ok(model)
}

/// There are points, every tier has cores, and every point measured every tier.
fn check_fit_input(tiers: &[TierSpec], points: &[TierPoint]) -> Result<(), ModelError> {
    if points.is_empty() {
        return Err(ModelError::BadMeasurement {
            label: "(none)".into(),
            field: "points".into(),
            message: "fitting needs at least one measured point".into(),
        });
    }
    for t in tiers {
        if !t.cores.is_finite() || t.cores <= 0.0 {
            return Err(ModelError::StationField {
                station: t.name.clone(),
                field: "cores",
                message: format!("is {}; it must be finite and > 0", t.cores),
            });
        }
    }
    for p in points {
        p.check(tiers)?;
    }
    Ok(())
}

/// The tiers' demands per class by non-negative least squares of each tier's busy cores on
/// the classes' throughputs, with the residuals; no path delay and no outside latency yet.
fn fit_demands(tiers: &[TierSpec], points: &[TierPoint]) -> TierModel {
    let mut classes: Vec<String> = Vec::new();
    for p in points {
        for c in &p.classes {
            if c.users > 0 && !classes.contains(&c.class) {
                classes.push(c.class.clone());
            }
        }
    }
    let x_of = |p: &TierPoint, class: &str| {
        p.classes
            .iter()
            .filter(|c| c.class == class && c.users > 0)
            .map(|c| c.throughput)
            .sum::<f64>()
    };
    let rows: Vec<Vec<f64>> = points
        .iter()
        .map(|p| classes.iter().map(|c| x_of(p, c)).collect())
        .collect();
    let mut notes = Vec::new();
    let mut fitted = Vec::with_capacity(tiers.len());
    let mut residuals = Vec::new();
    for t in tiers {
        let b: Vec<f64> = points.iter().map(|p| p.busy[&t.name]).collect();
        let d = nnls(&rows, &b);
        for (c, v) in classes.iter().zip(&d) {
            if *v == 0.0 {
                notes.push(format!(
                    "tier {}: the demand of class {c} fits best at 0 (non-negative least squares); its residuals are listed",
                    t.name
                ));
            }
        }
        for (p, (row, u)) in points.iter().zip(rows.iter().zip(&b)) {
            residuals.push(TierResidual {
                label: p.label.clone(),
                tier: t.name.clone(),
                measured: *u,
                fitted: row.iter().zip(&d).map(|(x, d)| x * d).sum(),
            });
        }
        fitted.push(FittedTier {
            name: t.name.clone(),
            cores: t.cores,
            demand: d,
            discipline: t.discipline,
        });
    }
    TierModel {
        classes,
        tiers: fitted,
        path_delay: 0.0,
        outside_latency: Vec::new(),
        fitted_from: points.iter().map(|p| p.label.clone()).collect(),
        residuals,
        notes,
    }
}

impl TierModel {
    /// Fits the path delay from `points` (see the comment inside).
    fn fit_path_delay(&mut self, points: &[TierPoint]) -> Result<(), ModelError> {
        // The path delay: the value that makes the model's total throughput at each fitted point
        // the measured one (bisection; throughput falls as the delay grows), averaged over the
        // points that show it. A saturated point, or one whose quota stretch hides the path, barely
        // moves when a tenth of its cycle is added as delay: it cannot say what the delay is.
        let mut delays = Vec::with_capacity(points.len());
        let mut silent = Vec::new();
        for p in points {
            let target = p.throughput();
            let at = |d: f64, m: &mut TierModel| -> Result<f64, ModelError> {
                m.path_delay = d;
                Ok(m.raw(p)?.0.iter().sum())
            };
            let cycle = p
                .classes
                .iter()
                .filter(|c| c.users > 0)
                .map(|c| f64::from(c.users) / c.throughput)
                .fold(0.0, f64::max);
            let x0 = at(0.0, self)?;
            if (x0 - at(0.1 * cycle, self)?) / target < PATH_SHOWS {
                silent.push(p.label.clone());
                continue;
            }
            if x0 < target {
                self.notes.push(format!(
                    "{}: the measured throughput is {:.1} % above the model's with no path delay; the tier demands overstate the cycle (residuals below), the path delay is 0 there",
                    p.label,
                    (target / x0 - 1.0) * 100.0
                ));
                delays.push(0.0);
                continue;
            }
            let (mut lo, mut hi) = (0.0, cycle.max(1e-6));
            for _ in 0..60 {
                let mid = 0.5 * (lo + hi);
                if at(mid, self)? > target {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            delays.push(0.5 * (lo + hi));
        }
        if !silent.is_empty() {
            self.notes.push(format!(
                "{}: the throughput barely moves with the path delay (saturated, or the path hidden by a quota's stretch); {}",
                silent.join(", "),
                if delays.is_empty() {
                    "no fitted point shows the path delay, it is taken as 0"
                } else {
                    "the path delay is fitted from the other points"
                }
            ));
        }
        self.path_delay = if delays.is_empty() {
            0.0
        } else {
            delays.iter().sum::<f64>() / delays.len() as f64
        };
        Ok(())
    }

    /// Per class, the mean cycle time at `points` outside the driver's latency window.
    fn fit_outside_latency(&mut self, points: &[TierPoint]) {
        // Per class, the cycle time outside the driver's latency window.
        let mut outside = vec![Vec::new(); self.classes.len()];
        for p in points {
            for c in p.classes.iter().filter(|c| c.users > 0) {
                if let Some(k) = self.classes.iter().position(|n| n == &c.class) {
                    let law = f64::from(c.users) / c.throughput - c.think_time;
                    outside[k].push(law - c.response_time);
                }
            }
        }
        self.outside_latency = outside
            .iter()
            .map(|v| {
                if v.is_empty() {
                    0.0
                } else {
                    v.iter().sum::<f64>() / v.len() as f64
                }
            })
            .collect();
    }
}

impl TierModel {
    /// A point's load (class, users, think time) and instances per tier, as the solver takes
    /// them.
    fn load_of(&self, p: &TierPoint) -> (ClassLoads, BTreeMap<String, u32>) {
        let load = p
            .classes
            .iter()
            .map(|c| (c.class.clone(), c.users, c.think_time))
            .collect();
        let instances = self
            .tiers
            .iter()
            .map(|t| (t.name.clone(), p.instances_of(&t.name)))
            .collect();
        (load, instances)
    }

    /// Per class throughput and the model's cycle response time `N/X − Z`, for the point's
    /// load and instances (internal: before the latency-window correction).
    fn raw(&self, p: &TierPoint) -> Result<(Vec<f64>, Vec<f64>), ModelError> {
        let (load, instances) = self.load_of(p);
        let pred = self.solve_raw(&load, &instances)?;
        Ok((
            pred.iter().map(|c| c.1).collect(),
            pred.iter().map(|c| c.2).collect(),
        ))
    }

    fn solve_raw(
        &self,
        load: &[(String, u32, f64)],
        instances: &BTreeMap<String, u32>,
    ) -> Result<Vec<(String, f64, f64)>, ModelError> {
        let opts = SolveOptions {
            curve: false,
            ..SolveOptions::default()
        };
        let mut overlap = Overlap::of(self);
        let mut round = 0;
        let solved = loop {
            let lowered = self.network(load, instances, &overlap)?;
            let sol = solve(&lowered.network, &opts)?;
            let moved = if overlap.any() {
                overlap.step(&sol, &lowered.present, &lowered.tiers)
            } else {
                0.0
            };
            if Overlap::settled(moved, round) {
                break self.per_class(&lowered.present, &sol);
            }
            round += 1;
        };
        // Hiding time elsewhere must not carry a tier past its capacity (the scaled demands
        // would let it): then the largest share of the overlap that keeps every tier within
        // its cores, by bisection (none of it is the plain network, which always does).
        if !overlap.any() || self.within_capacity(&solved, instances) {
            return Ok(solved);
        }
        let (mut lo, mut hi) = (0.0, 1.0);
        let mut best = None;
        for _ in 0..CAPACITY_BISECTION {
            let mid = 0.5 * (lo + hi);
            let lowered = self.network(load, instances, &overlap.share(mid))?;
            let sol = solve(&lowered.network, &opts)?;
            let classes = self.per_class(&lowered.present, &sol);
            if self.within_capacity(&classes, instances) {
                lo = mid;
                best = Some(classes);
            } else {
                hi = mid;
            }
        }
        match best {
            Some(classes) => Ok(classes),
            None => {
                let lowered = self.network(load, instances, &overlap.share(0.0))?;
                let sol = solve(&lowered.network, &opts)?;
                Ok(self.per_class(&lowered.present, &sol))
            }
        }
    }

    /// Per present class: (name, throughput, cycle response time) of a solution.
    fn per_class(&self, present: &[usize], sol: &crate::mva::Solution) -> Vec<(String, f64, f64)> {
        present
            .iter()
            .zip(&sol.classes)
            .map(|(&i, c)| (self.classes[i].clone(), c.throughput, c.response_time))
            .collect()
    }

    /// Whether `classes`' throughputs keep every tier within its cores at the fitted demands.
    fn within_capacity(
        &self,
        classes: &[(String, f64, f64)],
        instances: &BTreeMap<String, u32>,
    ) -> bool {
        self.tiers.iter().all(|t| {
            let busy: f64 = classes
                .iter()
                .filter_map(|(name, x, _)| {
                    let k = self.classes.iter().position(|c| c == name)?;
                    Some(x * t.demand[k])
                })
                .sum();
            let m = instances.get(&t.name).copied().unwrap_or(1).max(1);
            busy <= t.cores * f64::from(m) * (1.0 + 1e-9)
        })
    }

    /// Predicts `load` (per class: users, think time) on `instances` per tier.
    pub fn predict(
        &self,
        load: &[(String, u32, f64)],
        instances: &BTreeMap<String, u32>,
    ) -> Result<TierPrediction, ModelError> {
        let raw = self.solve_raw(load, instances)?;
        let classes: Vec<(String, f64, f64)> = raw
            .into_iter()
            .map(|(name, x, r)| {
                let k = self.classes.iter().position(|c| c == &name).unwrap_or(0);
                let outside = self.outside_latency.get(k).copied().unwrap_or(0.0);
                (name, x, (r - outside).max(0.0))
            })
            .collect();
        let mut busy = BTreeMap::new();
        let mut utilization = BTreeMap::new();
        for t in &self.tiers {
            let b: f64 = classes
                .iter()
                .map(|(name, x, _)| {
                    let k = self.classes.iter().position(|c| c == name).unwrap_or(0);
                    x * t.demand[k]
                })
                .sum();
            let m = instances.get(&t.name).copied().unwrap_or(1).max(1);
            busy.insert(t.name.clone(), b);
            utilization.insert(t.name.clone(), b / (t.cores * f64::from(m)));
        }
        let bottleneck = utilization
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(n, _)| n.clone())
            .unwrap_or_default();
        Ok(TierPrediction {
            classes,
            busy,
            utilization,
            bottleneck,
        })
    }

    /// Predicted throughput and response time (seconds) for 1..=`max_users` users of class
    /// `class` with think time `think`, for charts.
    pub fn curve(
        &self,
        class: &str,
        max_users: u32,
        think: f64,
        instances: &BTreeMap<String, u32>,
    ) -> Result<Vec<(u32, f64, f64)>, ModelError> {
        if !self.classes.iter().any(|c| c == class) {
            return Err(ModelError::UnknownClass(class.to_string()));
        }
        (1..=max_users.max(1))
            .map(|n| {
                let p = self.predict(&[(class.to_string(), n, think)], instances)?;
                Ok((n, p.throughput(), p.response_time()))
            })
            .collect()
    }
}
