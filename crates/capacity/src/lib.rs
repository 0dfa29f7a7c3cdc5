//! perfpilot's capacity loop (`perfpilot capacity`), the Trade study's method on a system
//! perfpilot measures itself: a multi-tier deployment started from a capacity file (tiers as
//! instances, each in a CPU group with an optional quota, a second host as a network
//! namespace), swept under closed-loop load with and without think time; a tiered queueing
//! model (`perfpilot_model::tiered`) fitted from the lowest load points only; every other point
//! and the scale-out configurations predicted and compared; and the report.
//!
//! - [`spec`]: the capacity file;
//! - [`deploy`]: starting and stopping a sweep's tiers (PostgreSQL, nginx, commands);
//! - [`sweep`]: measuring one point (throughput, response time, busy cores per tier, the
//!   driver's own, the rest of the machine's, steady state);
//! - [`rounds`]: the sweeps that share a deployment measured in rounds of alternating order,
//!   a point the mean of its rounds;
//! - [`run`](mod@run): the sweeps, the fit, the checks, scale-out and cost;
//! - [`variation`]: how much the system moved by itself (demands at held-out points, one point
//!   measured again and again);
//! - [`report`]: the validation table (Markdown) and the HTML page.

pub mod deploy;
pub mod error;
pub mod report;
pub mod rounds;
pub mod run;
pub mod spec;
pub mod sweep;
pub mod variation;

pub use error::{CapacityError, Result};
pub use run::{CapacityRun, Measured, analyse, analyse_measured, measure, run};
pub use spec::Capacity;
