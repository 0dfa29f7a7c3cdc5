//! `batchmix`: a mixed analytics batch in the manner of the SAS Mixed Analytics workload of
//! the POWER8 study (`001_…`). N concurrent sessions, each a sequence of jobs over a table
//! generated from a seed:
//!
//! - `gen`: the data step that writes the session's table ([`data`]);
//! - `sort-agg`: a sequential scan with a filter, an external sort by group and key (sorted runs
//!   of `sortsize`, then a merge), the sorted table written and the means per group aggregated
//!   ([`job::sort_agg`]);
//! - `fit`: a CPU-heavy logistic-regression fit by Newton's method ([`job::fit`]);
//! - `lookup`: random single-row reads by row number, each checked against the generator
//!   ([`job::lookup`]).
//!
//! Every job is measured on its own thread and logged like `fullstimer` ([`log`]).

pub mod batch;
pub mod data;
pub mod job;
pub mod log;

use std::path::{Path, PathBuf};

pub use batch::{BatchConfig, BatchOutcome, run_batch};
pub use job::JobKind;
pub use log::{JOBS_FILE, JobRecord, JobStatus, read_jobs};

/// What can go wrong in a batch.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file operation failed.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// What was being done (`read`, `create`, …).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Reading this thread's `/proc` counters failed.
    #[error("cannot measure the job: {0}")]
    Proc(perfpilot_sys::Error),
    /// The data did not match what the generator wrote.
    #[error("data check failed: {0}")]
    Check(String),
    /// Anything else, in words.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// An I/O error naming what was done to which file.
    pub fn io(what: &'static str, path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}
