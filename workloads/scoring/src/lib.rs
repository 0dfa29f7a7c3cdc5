//! The reference real-time scoring service, the SPSS study's system under test in small.
//!
//! It scores JSON records with predictive models read from PMML files in a model directory
//! (`NAME.pmml` is model `NAME`), keeps parsed models in an LRU cache whose size is a flag (a
//! model that does not fit is parsed from disk again on its next request — the study's key
//! setting, 2 vs 300), runs on a worker pool whose size is a flag (the study's 50 web container
//! threads), can echo the inputs in its responses (the study's best practice is not to), and
//! exposes Prometheus metrics.
//!
//! HTTP API:
//! - `POST /score/NAME` with `{"field": value, …}` (or `{"inputs": {…}}`) →
//!   `{"model": NAME, "prediction": …, "probabilities": {…}}` (plus `"inputs"` when echoing);
//!   404 for an unknown model, 400 for a bad record, 500 for a malformed model file (the error
//!   names the file and element).
//! - With `--db`, each score is followed by a range aggregate over a PostgreSQL table (the
//!   middle tier of a three-tier deployment); `GET /lookup/KEY` runs that lookup alone.
//! - `GET /models` lists the model names; `GET /health` answers `ok`; `GET /metrics` is the
//!   Prometheus text format.

mod cache;
pub mod generate;
pub mod lookup;
mod metrics;
pub mod pmml;
mod service;

use std::path::PathBuf;

pub use cache::{ModelCache, ModelError};
pub use lookup::Lookup;
pub use metrics::Metrics;
pub use service::{Service, serve};

/// Service settings.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// Directory of `NAME.pmml` files.
    pub model_dir: PathBuf,
    /// Parsed models kept in memory (at least 1).
    pub cache_size: usize,
    /// Echo the request's inputs in each response.
    pub echo_inputs: bool,
}
