//! The crate's one error type; every variant names the file, tier or point at fault.

use std::path::PathBuf;

/// What can go wrong in a capacity run.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// The capacity file is unreadable or invalid.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to write instead.
        message: String,
    },
    /// A tier could not be deployed.
    #[error("tier `{tier}`: {message}")]
    Tier {
        /// The tier.
        tier: String,
        /// What went wrong.
        message: String,
    },
    /// The load driver failed.
    #[error("point `{point}`: {message}")]
    Drive {
        /// The point.
        point: String,
        /// What went wrong.
        message: String,
    },
    /// Fitting or solving the model failed.
    #[error("model: {0}")]
    Model(#[from] perfpilot_model::ModelError),
    /// A result or report file could not be written or read.
    #[error("{}: {message}", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The run was interrupted (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
}

/// The crate's result.
pub type Result<T> = std::result::Result<T, CapacityError>;
