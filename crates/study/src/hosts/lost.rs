//! Why a host of `--hosts` was lost: the trial it ran did not complete and it takes no more.

use std::time::Duration;

/// Why a host was lost, for people (the run's warnings and its final error name the host).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostLost {
    /// A request could not be sent.
    #[error("cannot send: {0}")]
    Send(String),
    /// The worker closed the connection (`how`: with what its transport said last).
    #[error("the worker {how}")]
    Closed {
        /// `closed the connection`, with the transport's last words when it said any.
        how: String,
    },
    /// The connection could not be read.
    #[error("{0}")]
    Read(String),
    /// No reply came within the time allowed; `late` says what was awaited and what to check.
    #[error("no answer within {} {late}", perfpilot_units::clock(*.within))]
    NoAnswer {
        /// The time allowed.
        within: Duration,
        /// What was awaited and what to check.
        late: String,
    },
    /// The worker said no `alive` for this long during a trial.
    #[error("silent for {} during a trial", perfpilot_units::clock(*.0))]
    Silent(Duration),
    /// The worker refused (its reason).
    #[error("{0}")]
    Refused(String),
    /// A reply out of place.
    #[error("unexpected {0}")]
    Unexpected(String),
}
