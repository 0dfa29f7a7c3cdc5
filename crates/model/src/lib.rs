//! Queueing-network capacity models for perfpilot.
//!
//! This crate answers "what will more clients, more nodes or bigger nodes do?" from a few
//! measured load points, without knowing anything about Linux:
//!
//! * [`Network`]: closed product-form queueing networks of delay, queueing (PS/FCFS),
//!   multi-server and load-dependent stations, with one or several closed classes and,
//!   optionally, open classes (mixed networks).
//! * [`solve()`]: exact Mean Value Analysis (the whole curve 1..N for one class, exact multi-class
//!   MVA for a few small classes), exact load-dependent MVA that stays numerically stable for
//!   saturated multi-server stations, Seidmann's approximation as a choice, and Bard–Schweitzer
//!   approximate MVA with capped iterations. Every solution carries the asymptotic bounds.
//! * [`fit()`]: service demands from measured [`LoadPoint`]s by the utilization law (non-negative least
//!   squares across load points), checked against the response-time law, with residuals.
//! * [`predict()`]: predictions over clients and replicated nodes, the bottleneck, validation
//!   tables (measured vs predicted with error %), and throughput-per-cost rankings.
//! * [`mod@file`]: the documented TOML/JSON model file; [`mod@jmva`]: JMT's JMVA XML, read and write.
//! * [`mod@tiered`]: tiered capacity models (CPU tiers with quotas or cores, replicas, the
//!   client path as a delay) fitted from the lowest points of a measured load sweep.
//! * [`mod@report`]: what a model file answers in one call each (solved, fitted, a
//!   prediction [`Sweep`], a [`ValidationReport`]), for front ends that only print.
//!
//! Results are plain serde data so other crates (report, study) can use them as they are.

pub mod error;
pub mod file;
pub mod fit;
pub mod headroom;
pub mod jmva;
pub mod mva;
pub mod network;
pub mod point;
pub mod predict;
pub mod report;
pub mod tiered;

pub use error::ModelError;
pub use file::ModelFile;
pub use fit::{FitReport, fit};
pub use mva::{
    Bounds, ClassResult, CurvePoint, Method, MultiServerMethod, Solution, SolveOptions,
    StationResult, solve,
};
pub use network::{Class, Discipline, Network, Station, StationKind};
pub use point::LoadPoint;
pub use predict::{
    Configuration, CostRow, PredictionRow, Validation, ValidationRow, predict, rank_by_cost,
    validate,
};
pub use report::{PredictReport, Rendered, Sweep, ValidationReport};
pub use tiered::{
    ClassLoad, OwnDemand, TierCheck, TierModel, TierPoint, TierPrediction, TierSpec, fit_tiers,
};
