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
        /// What the value is (`duration`, `rate`, `target URL`, …).
        what: &'static str,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The body template names a column the data source does not have.
    #[error(
        "body template uses column {column:?} but the data source {source_name} has only: {available}"
    )]
    MissingColumn {
        /// The column the template names.
        column: String,
        /// The data source's name (its path, for a file).
        source_name: String,
        /// The columns it has, comma-separated.
        available: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A request profile (`drive --requests`) is wrong at a line and field; `line` 0 is the
    /// file as a whole.
    #[error("{}", profile_message(path, *line, field, reason))]
    Profile {
        /// The profile's file.
        path: PathBuf,
        /// The line (1 is the header), or 0 for the file as a whole.
        line: u64,
        /// The column (or `file`).
        field: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A CSV file could not be parsed.
    #[error("cannot parse CSV {path}: {source}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// What the CSV reader reported.
        source: csv::Error,
    },
    /// A measurement file or histogram could not be decoded.
    #[error("cannot decode {what}: {reason}")]
    Decode {
        /// What was being decoded (a file, a histogram).
        what: String,
        /// Why it did not decode.
        reason: String,
    },
    /// An external driver's output did not contain what the adapter needs.
    #[error("{tool} output: {reason}")]
    Parse {
        /// The tool (`wrk`, `pgbench`, `redis-benchmark`, `command`).
        tool: &'static str,
        /// What was missing or malformed.
        reason: String,
    },
    /// An external command could not be started or failed.
    #[error("command {command:?} {reason}")]
    Command {
        /// The command line.
        command: String,
        /// What went wrong (could not start, failed, printed nothing usable).
        reason: String,
    },
    /// Two of the measurements to merge are the same run (see [`crate::Measurement::same_run`]).
    #[error(
        "measurements {} and {} are the same run ({run}): merged, it would count twice; give each run once",
        first + 1,
        second + 1
    )]
    SameRun {
        /// The first one's index among the parts, from 0.
        first: usize,
        /// The second one's index among the parts, from 0.
        second: usize,
        /// The run in a few words ([`crate::Measurement::describe_run`]).
        run: String,
    },
    /// A coordinated worker could not be used or failed.
    #[error("worker {addr}: {reason}")]
    Worker {
        /// The worker's address (or the coordinator's, seen from a worker).
        addr: String,
        /// What went wrong and what to do.
        reason: String,
    },
    /// The async runtime could not be built.
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

fn profile_message(path: &std::path::Path, line: u64, field: &str, reason: &str) -> String {
    if line == 0 {
        format!("request profile {}: {reason}", path.display())
    } else {
        format!(
            "request profile {}, line {line}, {field}: {reason}",
            path.display()
        )
    }
}

pub(crate) fn invalid(what: &'static str, value: &str, reason: impl Into<String>) -> DriveError {
    DriveError::Invalid {
        what,
        value: value.to_string(),
        reason: reason.into(),
    }
}
