//! The study runner's errors: each names the study file, and for a bad study file the line and
//! the field.

use std::path::PathBuf;

/// A study error.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    /// The study file could not be read.
    #[error("cannot read the study file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The study file is not valid TOML or has an unknown or mistyped field (the message names
    /// the line and column).
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    /// A field has a value the study cannot use.
    #[error("{path}:{line}: {field}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        field: String,
        message: String,
    },
    /// A layout the machine cannot hold.
    #[error("{0}")]
    Layout(#[from] crate::layout::LayoutError),
    /// The machine's topology could not be read.
    #[error("cannot read the machine's topology: {0}")]
    Topology(String),
    /// A sysfs/procfs knob could not be read, written or restored.
    #[error("knob {rel}: {message}")]
    Knob { rel: String, message: String },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] perfpilot_store::Error),
    /// A study run that the store does not hold.
    #[error("the store {store} has no study run {run}; `perfpilot study list` shows the runs")]
    NoRun { store: PathBuf, run: i64 },
    /// A stored record could not be decoded.
    #[error("study run {run}: stored {what} cannot be decoded: {message}")]
    Decode {
        run: i64,
        what: &'static str,
        message: String,
    },
    /// The run was stopped (Ctrl-C); every knob was restored.
    #[error("interrupted; every knob was restored and every instance stopped")]
    Interrupted,
    /// No configuration of the study could run at all.
    #[error("{0}")]
    Failed(String),
}

impl StudyError {
    pub(crate) fn invalid(
        path: &std::path::Path,
        line: usize,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> StudyError {
        StudyError::Invalid {
            path: path.to_path_buf(),
            line,
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The study crate's result type.
pub type Result<T, E = StudyError> = std::result::Result<T, E>;
