//! perfpilot's study runner: searches a deployment's configuration space under load, with
//! sound statistics, and reports the best configuration.
//!
//! - [`spec`]: the study file (TOML, `docs/study-file.md`) — deployment template, load,
//!   objective and constraints, factors and levels, timing and racing — validated with errors
//!   naming the file, line and field ([`Study::load`]);
//! - [`layout`]: binding layouts from the machine's topology (non-overlapping CPU sets that keep
//!   SMT siblings, LLC domains and nodes together), with the memory policy to match;
//! - [`plan`](mod@plan): what a study takes on this machine — runnable configurations, trials, time,
//!   budget — and `study validate`'s [`Validation`];
//! - [`deploy`]: one trial's deployment — knobs through `perfpilot_sys::change` with undo
//!   records and a restoring guard, free ports, bound instances, readiness, teardown;
//! - [`batch`]: batch trials (`[load] kind = "batch"`): the command run to completion within a
//!   timeout, elapsed and CPU time, the job logs' per-job figures;
//! - [`trial`] (and `measure`): one trial — knobs, deployment, the load driven and measured
//!   (CPU per instance and the load driver's own), constraints, MSER-5;
//! - [`race`]: the racing rules (configurations far behind the leader leaving from round 3;
//!   F-Race: Friedman with Conover's comparisons against the best, Wilcoxon when two are left;
//!   configurations unlikely to be the best by a bootstrap of the rounds leaving, the race
//!   ending once choosing the leader is expected to cost less than `run.stop_loss`, and
//!   optionally equivalent or tied ones leaving), over the race trials read as scores
//!   (`scores`);
//! - [`runner`]: randomized interleaved rounds, racing, the winner confirmed against the
//!   baseline with a 95 % CI on the gain, `--resume`; [`summary`]: what a run concluded;
//! - [`hosts`]: parallel trials across hosts — study workers, whole rounds per host, a lost
//!   host's round run again on another;
//! - [`scale`]: the scaling mode (saturation point and knee);
//! - [`compare`]: two runs side by side — the same winner, or winners not significantly
//!   different over both runs' rounds together, or one significantly better; [`cross`]: two
//!   runs across machines — the machines, and per configuration the ratio of the results,
//!   per core and per instance, with intervals;
//! - [`replay`]: racing replayed on an exhaustive run's trials, over many round orders: the
//!   trials a race would have spent and how often it picks the exhaustive winner;
//! - [`stats`]: the rank tests, the Hodges–Lehmann interval and the equivalence check, and the
//!   shared statistics of `perfpilot-stats`;
//! - [`report`]: the report of a stored run (JSON, Markdown, HTML with an inline SVG chart)
//!   and the apply script (shell and systemd drop-ins) of the best configuration.

pub mod batch;
pub mod compare;
pub mod cross;
pub mod deploy;
pub mod error;
pub mod hosts;
pub mod iterate;
pub mod layout;
mod measure;
pub mod plan;
mod progress;
pub mod race;
pub mod replay;
pub mod report;
mod rounds;
pub mod runner;
mod sample;
pub mod scale;
mod scores;
pub mod spec;
pub mod stats;
pub mod summary;
pub mod surface;
pub mod trial;

pub use error::{Result, StudyError};
pub use layout::{InstanceLayout, Layout, LayoutError, plan};
pub use perfpilot_store::{RunState, TrialPhase, TrialStatus};
pub use plan::{Plan, Validation, plan_study};
pub use runner::{RunOptions, RunOutcome, run_study, stored_study};
pub use scale::{ScalePoint, Scaling, run_scaling};
pub use spec::{Binding, Budget, Config, Goal, Level, Study};
pub use summary::Summary;
