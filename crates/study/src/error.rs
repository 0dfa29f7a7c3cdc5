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
    /// The knobs a killed study left changed could not be restored from their journal.
    #[error(transparent)]
    Recover(#[from] KnobError),
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

/// A knob of a trial (or the journal of their undo records) that could not be read, set or
/// restored; whatever was set before stays restorable.
#[derive(Debug, thiserror::Error)]
pub enum KnobError {
    /// The undo records could not be encoded for the journal.
    #[error("cannot encode the knob undo records for {path}: {source}")]
    Encode {
        /// The journal.
        path: PathBuf,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The journal of undo records could not be written.
    #[error("cannot journal knob undo records in {path}: {source}", path = .path.display())]
    Journal {
        /// The journal.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The knob's present value (its undo record) could not be read.
    #[error("knob /{rel} cannot be read: {source}")]
    Read {
        /// The knob's path relative to `/`.
        rel: String,
        /// Why.
        #[source]
        source: perfpilot_sys::Error,
    },
    /// The knob could not be written.
    #[error("knob /{rel} cannot be set to {value:?}: {source}")]
    Set {
        /// The knob's path relative to `/`.
        rel: String,
        /// The value asked for.
        value: String,
        /// Why.
        #[source]
        source: perfpilot_sys::Error,
    },
    /// A change other than a knob (the scratch file system) could not be prepared or made.
    #[error(transparent)]
    Change(perfpilot_sys::Error),
    /// The journal a killed study left could not be read.
    #[error("cannot read {path}: {source}", path = .path.display())]
    ReadJournal {
        /// The journal.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The journal is not a list of undo records.
    #[error("{path} is not a knob journal: {source}; restore its knobs by hand, then remove it", path = .path.display())]
    NotJournal {
        /// The journal.
        path: PathBuf,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A knob of the journal could not be restored.
    #[error("restoring a knob from {path}: {source}", path = .path.display())]
    Restore {
        /// The journal.
        path: PathBuf,
        /// Why.
        #[source]
        source: perfpilot_sys::Error,
    },
    /// The journal could not be removed after its knobs were restored.
    #[error("cannot remove {path}: {source}", path = .path.display())]
    RemoveJournal {
        /// The journal.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A setup or teardown command (`sh -c`) that could not run or failed.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    /// `sh` itself could not be started.
    #[error("cannot run sh: {0}")]
    Spawn(#[source] std::io::Error),
    /// The command exited unsuccessfully.
    #[error("{status} ({stderr})")]
    Failed {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its standard error, trimmed.
        stderr: String,
    },
}

/// Why a readiness probe of an instance failed (without the URL or port, which the caller's
/// message gives).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The TCP port refused or did not answer.
    #[error("{0}")]
    Tcp(#[source] std::io::Error),
    /// The GET failed or answered a status other than 2xx.
    #[error("{0}")]
    Http(#[source] perfpilot_fetch::FetchFailure),
}

/// A job log of a batch trial (`load.jobs`) that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum JobLogError {
    /// The file could not be read.
    #[error("cannot read the job log {path}: {source}", path = .path.display())]
    Read {
        /// The job log.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a job record.
    #[error(
        "{path}:{line}: not a job record ({source}); each line must be a JSON object with job, real_s, user_s, sys_s, read_bytes, written_bytes and status",
        path = .path.display()
    )]
    Record {
        /// The job log.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
}

/// Why a trial failed: the command, instance, file or program at fault and what happened. Its
/// text is the trial's stored reason.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// A setup command failed.
    #[error("setup {cmd:?} failed: {source}")]
    Setup {
        /// The command as run.
        cmd: String,
        /// Why.
        #[source]
        source: ShellError,
    },
    /// The deployment's command line cannot be split into words.
    #[error("command {line:?}: {source}")]
    Command {
        /// The command line, templates filled in.
        line: String,
        /// Why.
        #[source]
        source: perfpilot_lab::server::command::WordsError,
    },
    /// No free ports for the instances.
    #[error("{0}")]
    Ports(#[source] perfpilot_lab::port::PortError),
    /// An instance's output file could not be made.
    #[error(transparent)]
    Log(#[from] perfpilot_lab::server::command::LogError),
    /// An instance's program could not be started.
    #[error("instance {instance}: cannot start {program:?}: {source}")]
    Start {
        /// The instance, from 0.
        instance: usize,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A knob (or the scratch file system) could not be set.
    #[error(transparent)]
    Knob(Box<KnobError>),
    /// The configuration's scratch file system names no usable type.
    #[error(transparent)]
    Scratch(#[from] crate::spec::ScratchError),
    /// The scratch file system could not be made (`unrestored`: what could not be removed
    /// again).
    #[error("storage: {source}{}", also(.unrestored, "removing it"))]
    Storage {
        /// Why.
        #[source]
        source: Box<TrialError>,
        /// The undo steps that failed.
        unrestored: Vec<String>,
    },
    /// Making the scratch file system gave something else than a file system.
    #[error("storage: unexpected outcome {0}")]
    StorageOutcome(String),
    /// A knob could not be set (`unrestored`: the knobs set before it that could not be
    /// restored).
    #[error("{source}{}", also(.unrestored, "restoring"))]
    Knobs {
        /// Why.
        #[source]
        source: Box<KnobError>,
        /// The undo steps that failed.
        unrestored: Vec<String>,
    },
    /// The run was stopped (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
    /// An instance exited (`exit` says which and how) before it was ready or while measured.
    #[error("{exit} {when}")]
    Exited {
        /// The instance, its pid, exit status and the end of its stderr.
        exit: String,
        /// `before it was ready` or `during the measurement`.
        when: &'static str,
    },
    /// An instance did not pass its readiness check in time.
    #[error(
        "instance {instance} (pid {pid}) did not become ready within {within:?} ({probe}: {last})"
    )]
    NotReady {
        /// The instance, from 0.
        instance: usize,
        /// Its process id.
        pid: u32,
        /// `deployment.ready_timeout`.
        within: std::time::Duration,
        /// `GET URL` or `tcp port N`.
        probe: String,
        /// The last probe's failure.
        last: ProbeError,
    },
    /// The built-in driver's settings (think time, data file, body template) are unusable.
    #[error("{0}")]
    LoadSpec(#[source] perfpilot_drive::DriveError),
    /// The built-in load driver failed.
    #[error("load driver: {0}")]
    Driver(#[source] perfpilot_drive::DriveError),
    /// The study's load command failed.
    #[error("load command: {0}")]
    LoadCommand(#[source] perfpilot_drive::DriveError),
    /// A batch study's load was asked to be driven.
    #[error("a batch is run to completion by its trial (batch::run), not driven")]
    NotDriven,
    /// The batch ran past `load.timeout` and was killed.
    #[error(
        "the batch did not finish within its timeout of {} (load.timeout) and was killed: {late}",
        perfpilot_units::duration(*.timeout)
    )]
    BatchTimeout {
        /// `load.timeout`.
        timeout: std::time::Duration,
        /// Each instance still running, with the end of its output.
        late: String,
    },
    /// A batch instance exited unsuccessfully.
    #[error("instance {instance} exited with {status}{tail}{}", failed_suffix(.failed))]
    BatchExited {
        /// The instance, from 0.
        instance: usize,
        /// Its exit status.
        status: String,
        /// The end of its output.
        tail: String,
        /// The failed jobs its job log names.
        failed: Vec<String>,
    },
    /// Job logs could not be read.
    #[error("{}", join(.0))]
    JobLogs(Vec<JobLogError>),
    /// The batch exited 0 but its job log names failed jobs.
    #[error("the batch exited 0 but its job log says: {}", .0.join("; "))]
    JobsFailed(Vec<String>),
}

impl From<KnobError> for TrialError {
    fn from(e: KnobError) -> TrialError {
        TrialError::Knob(Box::new(e))
    }
}

/// `; WHAT failed too: …` when some undo steps failed.
fn also(unrestored: &[String], what: &str) -> String {
    if unrestored.is_empty() {
        String::new()
    } else {
        format!("; {what} failed too: {}", unrestored.join("; "))
    }
}

fn failed_suffix(failed: &[String]) -> String {
    if failed.is_empty() {
        String::new()
    } else {
        format!("; failed: {}", failed.join("; "))
    }
}

fn join(errors: &[JobLogError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The study crate's result type.
pub type Result<T, E = StudyError> = std::result::Result<T, E>;
