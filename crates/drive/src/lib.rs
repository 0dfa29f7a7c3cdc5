//! perfpilot's load driver.
//!
//! This crate drives HTTP load against a service and turns the results of other load drivers
//! into one result shape, [`Measurement`], that the study runner and the capacity models consume.
//!
//! - [`run`] drives load described by a [`DriveSpec`]: a *closed loop* (`users` virtual users,
//!   each waiting for its response and then a [`ThinkTime`]) or an *open loop* (a constant
//!   arrival rate whose latency is measured from each request's *intended* send time, so a
//!   stalled server shows in the percentiles instead of being hidden by coordinated omission).
//! - [`Measurement`] carries totals, latency percentiles, errors by kind and HTTP status, a
//!   per-second series and a serialized HdrHistogram, so the results of several driver
//!   processes [`Measurement::merge`] exactly.
//! - A [`RequestProfile`] (a CSV of request kinds with weights) makes each request draw its
//!   method, URL and body, and the result counts each kind apart ([`KindResult`]).
//! - [`Threshold`] checks such as `p99<50ms` or `errors<0.1%` decide a run's exit code.
//! - [`adapters`] parse the output of `wrk`, `pgbench`, `redis-benchmark` and any command that
//!   prints a number into the same [`Measurement`].
//! - Outputs other tools read: [`series_csv`] (the per-second series), [`write_hlog`]
//!   (HdrHistogram interval logs) and [`remote_write`] (Prometheus remote write of the live
//!   series), fed live through [`RunControl::live`].
//!
//! The crate knows nothing of Linux internals (no `sys`/`observe` dependency).

pub mod adapters;
mod client;
pub mod coord;
mod engine;
mod error;
mod h1;
mod hist;
mod hlog;
mod interval;
mod k6;
mod kinds;
mod link;
mod measurement;
mod outcome;
mod profile;
mod recorder;
pub mod remote_write;
mod request;
mod series_csv;
mod spec;
mod summary;
mod template;
mod threshold;
mod tls;

pub use engine::{RunControl, driver_threads, driver_threads_of, run};
pub use error::DriveError;
#[doc(hidden)]
pub use h1::replay as replay_http1;
pub use hist::LatencyHistogram;
pub use hlog::{HLOG_UNIT_COMMENT, write_hlog};
pub use interval::Interval;
pub use k6::k6_summary;
pub use kinds::KindResult;
pub use measurement::{
    CpuUsage, HistogramData, Latency, LoadShape, MEASUREMENT_SCHEMA, Measurement, SeriesPoint,
};
pub use outcome::{Verdict, cut_short, measurements_json, none_succeeded};
pub use profile::{Method, RequestKind, RequestProfile};
pub use recorder::{THINK_MEAN_MS, THINK_PAUSES};
pub use series_csv::{SERIES_CSV_HEADER, series_csv};
pub use spec::{DriveSpec, HttpVersion, Load, ThinkTime, TlsOptions, parse_duration};
pub use summary::render_summary;
pub use template::{BodyTemplate, DataSource};
pub use threshold::{Threshold, ThresholdOutcome, check_all};
