//! The study runner's errors: each names the study file, and for a bad study file the line and
//! the field.

use std::path::PathBuf;

/// A study error.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    /// The study file could not be read.
    #[error("cannot read the study file {path}: {source}")]
    Read {
        /// The study file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The study file is not valid TOML or has an unknown or mistyped field (the message names
    /// the line and column).
    #[error("{path}: {message}")]
    Syntax {
        /// The study file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A field has a value the study cannot use.
    #[error("{path}:{line}: {field}: {message}")]
    Invalid {
        /// The study file.
        path: PathBuf,
        /// The field's line (1-based).
        line: usize,
        /// The field, e.g. `run.alpha`.
        field: String,
        /// What is wrong with it and what to do.
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
    Knob {
        /// The knob's path (relative to `/`).
        rel: String,
        /// What failed.
        message: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] perfpilot_store::Error),
    /// A study run that the store does not hold.
    #[error("the store {store} has no study run {run}; `perfpilot study list` shows the runs")]
    NoRun {
        /// The store's path.
        store: PathBuf,
        /// The run asked for.
        run: i64,
    },
    /// A stored record could not be decoded.
    #[error("study run {run}: stored {what} cannot be decoded: {message}")]
    Decode {
        /// The study run.
        run: i64,
        /// The record, e.g. `summary`.
        what: &'static str,
        /// The decoder's message.
        message: String,
    },
    /// A file the report writes (the apply script, a systemd drop-in, their directory) could
    /// not be written.
    #[error("cannot write {path}: {error}; choose another directory")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A host of `--hosts` cannot be used: not reachable, another version, or the study
    /// cannot run there.
    #[error("host {addr}: {reason}")]
    Host {
        /// The host as `--hosts` named it.
        addr: String,
        /// Why, and what to do.
        reason: String,
    },
    /// A study worker's session with a coordinator failed.
    #[error("coordinator {peer}: {reason}")]
    Coordinator {
        /// The coordinator's address.
        peer: String,
        /// Why.
        reason: String,
    },
    /// Every host of `--hosts` was lost during the run; the rounds completed are stored.
    #[error(
        "every host was lost ({lost}); the rounds completed so far are stored: start the workers again, then `perfpilot study run --resume {run} --store {store} --hosts …` continues the run",
        store = .store.display()
    )]
    HostsLost {
        /// The study run.
        run: i64,
        /// The store holding it.
        store: PathBuf,
        /// Each host and why it was lost.
        lost: String,
    },
    /// Two stores compared have different schema versions (written by different perfpilot
    /// versions).
    #[error(
        "cannot compare the stores {a} (schema version {version_a}) and {b} (schema version {version_b}): they were written by different perfpilot versions and this one reads schema version {supported}; {advice}",
        a = .a.display(),
        b = .b.display()
    )]
    SchemaMismatch {
        /// The first store.
        a: PathBuf,
        /// Its schema version.
        version_a: i64,
        /// The second store.
        b: PathBuf,
        /// Its schema version.
        version_b: i64,
        /// The version this build reads and writes.
        supported: i64,
        /// What to do.
        advice: String,
    },
    /// The run was stopped (Ctrl-C); every knob was restored.
    #[error("interrupted; every knob was restored and every instance stopped")]
    Interrupted,
    /// No configuration of the study could run at all.
    #[error("{0}")]
    Failed(String),
    /// A run ended without a winner: none of its trials completed. The store marks it failed.
    #[error(
        "study run {run} failed: {why}\nFix that, then run the study again (`perfpilot study validate FILE` checks the programs and files a study names); `perfpilot study report {run} --store {store}` lists every trial",
        store = .store.display()
    )]
    NoTrialCompleted {
        /// The study run.
        run: i64,
        /// The store holding it.
        store: PathBuf,
        /// How many trials failed or broke a constraint, and the end of the first one's
        /// reason.
        why: String,
    },
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
