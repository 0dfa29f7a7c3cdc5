//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong before or around a run (errors *during* a run — refused
/// connections, resets, timeouts, non-2xx statuses — are counted in the [`crate::Measurement`],
/// not returned).
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// A command-line style value (duration, rate, think time, threshold, URL) did not parse.
    #[error("invalid {what} {value:?}: {reason}")]
    Invalid {
        what: &'static str,
        value: String,
        reason: String,
    },
    /// The body template names a column the data source does not have.
    #[error(
        "body template uses column {column:?} but the data source {source_name} has only: {available}"
    )]
    MissingColumn {
        column: String,
        source_name: String,
        available: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A CSV file could not be parsed.
    #[error("cannot parse CSV {path}: {source}")]
    Csv { path: PathBuf, source: csv::Error },
    /// A measurement file or histogram could not be decoded.
    #[error("cannot decode {what}: {reason}")]
    Decode { what: String, reason: String },
    /// An external driver's output did not contain what the adapter needs.
    #[error("{tool} output: {reason}")]
    Parse { tool: &'static str, reason: String },
    /// An external command could not be started or failed.
    #[error("command {command:?} {reason}")]
    Command { command: String, reason: String },
    /// The async runtime could not be built.
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

pub(crate) fn invalid(what: &'static str, value: &str, reason: impl Into<String>) -> DriveError {
    DriveError::Invalid {
        what,
        value: value.to_string(),
        reason: reason.into(),
    }
}
