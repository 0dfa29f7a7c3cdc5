//! perfpilot's autonomous optimizer.
//!
//! A loop at a fixed interval samples the machine, groups what runs into workloads, lets the
//! [strategies](strategy) propose actions for the eligible ones, applies at most one new action
//! per workload at a time through `perfpilot-sys` (the undo record journaled in the store
//! *before* the change), measures the workload's [signal] in the trial [design] chosen for the
//! change (switchback periods, a concurrent control, or before and after), and
//! [decides](gain::decide) to keep or revert; verdicts and back-offs are remembered.
//!
//! Manual tuning is never overridden: a process whose affinity or cpuset is narrower than the
//! machine and was not set by perfpilot, or whose environment has `PERFPILOT=off`, is left
//! alone, and a workload whose mask someone else changed becomes manual.

pub mod admin;
pub mod config;
pub mod counters;
pub mod cpu;
pub mod daemon;
pub mod design;
pub mod dropins;
pub mod engine;
pub mod fleet;
pub mod gain;
pub mod journal;
pub mod privilege;
pub mod signal;
pub mod strategy;
pub mod trace;
pub mod tunables;

pub use config::{DaemonConfig, DaemonConfigError};
