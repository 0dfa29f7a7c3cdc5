//! Mean Value Analysis: the solver's options, its results, and [`solve`], which picks the
//! algorithm for the network and the options.
//!
//! One file per solver:
//! - `exact`: exact MVA over every population vector, single- and multi-class, with the
//!   numerically stable recursion for load-dependent and multi-server stations;
//! - `schweitzer`: Bard–Schweitzer approximate MVA at the final population;
//! - `mixed`: networks with open classes (the closed part is solved by one of the above);
//! - `lower`: how declared stations become the solver's internal stations (Seidmann's
//!   multi-server approximation splits one into a queue and a delay);
//! - `asymptotic`: the asymptotic bounds every solution carries;
//! - `results`: per-station and per-class results assembled from any solver's throughputs.

mod asymptotic;
mod exact;
mod lower;
mod mixed;
mod results;
mod schweitzer;

use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::network::Network;

pub use asymptotic::bounds;

/// Which algorithm to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Exact MVA over every population vector (whole curve 1..N for one class).
    #[default]
    Exact,
    /// Bard–Schweitzer approximate MVA at the final population only.
    Schweitzer,
}

/// How multi-server stations are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MultiServerMethod {
    /// Exact load-dependent MVA (stable formulation).
    #[default]
    Exact,
    /// Seidmann et al.: an m-server station with demand D becomes a queue with D/m followed
    /// by a delay of D(m-1)/m.
    Seidmann,
}

/// Solver options.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SolveOptions {
    /// Exact or Bard–Schweitzer.
    pub method: Method,
    /// Multi-server stations exact (load-dependent) or by Seidmann's approximation.
    pub multiserver: MultiServerMethod,
    /// Bard–Schweitzer stops when no queue length moves by more than `tolerance × N_c`.
    pub tolerance: f64,
    /// Bard–Schweitzer iteration cap; reaching it is reported as `converged = false`.
    pub max_iterations: u32,
    /// Single-class exact solves: build the whole curve 1..N (default). The recursion visits
    /// every population either way; `false` only skips the per-point output.
    pub curve: bool,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            method: Method::Exact,
            multiserver: MultiServerMethod::Exact,
            tolerance: 1e-10,
            max_iterations: 10_000,
            curve: true,
        }
    }
}

/// Asymptotic bounds for one class (Lazowska et al., QSP ch. 5), computed from the network.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bounds {
    /// Σ of the shortest time one customer can spend at each station (ΣD for plain queues).
    pub demand_total: f64,
    /// Largest demand per unit of capacity, D_k / servers_k (the bottleneck's).
    pub demand_max: f64,
    /// The class's think time, seconds.
    pub think_time: f64,
    /// N* = (D + Z) / Dmax: population where the two asymptotes cross.
    pub n_star: f64,
    /// X ≤ min(N / (D + Z), 1 / Dmax).
    pub throughput_upper: f64,
    /// X ≥ N / (R_upper + Z) (single-class networks only).
    pub throughput_lower: Option<f64>,
    /// R ≥ max(D, N·Dmax − Z).
    pub response_lower: f64,
    /// R ≤ N·D (pessimistic; single-class networks only).
    pub response_upper: Option<f64>,
}

/// Results for one class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassResult {
    /// The class.
    pub name: String,
    /// Customers of a closed class (0 for an open class).
    pub population: u32,
    /// Think time, seconds.
    pub think_time: f64,
    /// Requests per second.
    pub throughput: f64,
    /// Seconds per request spent at the stations (delay stations included, think time not).
    pub response_time: f64,
    /// Asymptotic bounds at this population.
    pub bounds: Bounds,
}

/// Results for one station (as declared in the network; Seidmann parts are merged back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StationResult {
    /// The station.
    pub name: String,
    /// Its kind, as [`StationKind::label`](crate::StationKind::label) prints it.
    pub kind: String,
    /// Servers of a queue or multi-server station (none for delay and load-dependent).
    pub servers: Option<u32>,
    /// Demand per class, seconds per request.
    pub demand: Vec<f64>,
    /// Mean number of busy servers, Σ_c X_c D_kc (busy cores for a multi-core tier).
    pub busy: f64,
    /// Fraction of capacity in use (busy / servers; 1 − P(idle) for a load-dependent station;
    /// none for a delay station).
    pub utilization: Option<f64>,
    /// Mean number of customers present.
    pub queue: f64,
    /// Residence time per class (seconds per request).
    pub residence: Vec<f64>,
    /// Mean number of customers of each class present.
    pub queue_per_class: Vec<f64>,
}

/// One point of the single-class curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Customers in the network.
    pub population: u32,
    /// Requests per second.
    pub throughput: f64,
    /// Seconds per request at the stations (think time not included).
    pub response_time: f64,
    /// Per station, like [`StationResult::utilization`].
    pub utilization: Vec<Option<f64>>,
    /// Per station mean queue length.
    pub queue: Vec<f64>,
    /// Asymptotic bounds at this population.
    pub bounds: Bounds,
}

/// A solved network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Solution {
    /// The algorithm that produced the solution, in words.
    pub method: String,
    /// Whether the exact recursion produced it (Seidmann's multi-server approximation may be
    /// part of it); false for Bard–Schweitzer.
    pub exact: bool,
    /// Whether an iterative method converged (always true for exact methods).
    pub converged: bool,
    /// Iterations of an iterative method (0 for exact methods).
    pub iterations: u32,
    /// Per class results.
    pub classes: Vec<ClassResult>,
    /// Per station results, in declaration order.
    pub stations: Vec<StationResult>,
    /// Station with the highest busy / capacity.
    pub bottleneck: String,
    /// Single-class networks: the whole curve 1..N (exact) or the final point (approximate).
    pub curve: Vec<CurvePoint>,
}

/// Solves a network. Single-class exact solves return the whole curve 1..N.
pub fn solve(net: &Network, opts: &SolveOptions) -> Result<Solution, ModelError> {
    net.check()?;
    if net.classes.iter().any(|c| c.is_open()) {
        return mixed::mixed(net, opts);
    }
    let it = lower::internal(net, opts)?;
    match opts.method {
        Method::Exact => exact::exact(net, &it, opts),
        Method::Schweitzer => schweitzer::schweitzer(net, &it, opts),
    }
}
