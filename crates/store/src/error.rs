//! The store's errors.

use std::path::PathBuf;

/// A store error. Every variant but [`Error::NoDefaultPath`] names the store's path.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store could not be opened or created, or is not writable.
    #[error(
        "cannot open the store {path}: {reason}; choose another --store path or make this one \
         writable"
    )]
    Open {
        /// The store's path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The database was written by a newer perfpilot.
    #[error(
        "cannot open the store {path}: its schema version is {found}, newer than this perfpilot \
         supports ({supported}); upgrade perfpilot or choose another --store path"
    )]
    NewerSchema {
        /// The store's path.
        path: PathBuf,
        /// The schema version in the file.
        found: i64,
        /// The newest schema version this build knows.
        supported: i64,
    },
    /// A command that only reads found no file at the store's path ([`Store::open_existing`]).
    ///
    /// [`Store::open_existing`]: crate::Store::open_existing
    #[error(
        "no store at {path}: nothing has been recorded there yet (`perfpilot record`, \
         `perfpilot daemon` and `perfpilot study run` create one); give the store's path with \
         --store (or the daemon's with --state-dir)"
    )]
    Missing {
        /// The store's path.
        path: PathBuf,
    },
    /// A command that only reads found a file at the store's path that holds no perfpilot
    /// schema (empty, or another program's SQLite database).
    #[error(
        "no store at {path}: the file there holds no perfpilot data; give the path of a store \
         that `perfpilot record`, `perfpilot daemon` or `perfpilot study run` wrote"
    )]
    NotAStore {
        /// The store's path.
        path: PathBuf,
    },
    /// [`Store::open`] found another program's SQLite database at the store's path.
    ///
    /// [`Store::open`]: crate::Store::open
    #[error(
        "{path} is another program's SQLite database (tables: {}); perfpilot does not write \
         into it: choose another --store path (or --state-dir)",
        tables.join(", ")
    )]
    Foreign {
        /// The store's path.
        path: PathBuf,
        /// Its tables.
        tables: Vec<String>,
    },
    /// No default store path: not root, and neither `XDG_STATE_HOME` nor `HOME` is set.
    #[error("no default store path: set XDG_STATE_HOME or HOME, or pass --store PATH")]
    NoDefaultPath,
    /// A SQLite statement failed.
    #[error("store {path}: {what}: {source}")]
    Sqlite {
        /// The store's path.
        path: PathBuf,
        /// What was being done.
        what: String,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// A sample could not be encoded (serialized or compressed).
    #[error("store {path}: cannot encode the sample taken at {time_ms} ms: {reason}")]
    Encode {
        /// The store's path.
        path: PathBuf,
        /// When the sample was taken, ms since the Unix epoch.
        time_ms: i64,
        /// Why it could not be encoded.
        reason: String,
    },
}

impl Error {
    /// Whether the error says there is no store at all (the path holds nothing perfpilot
    /// wrote), as opposed to a store that could not be read: [`Error::Missing`] and
    /// [`Error::NotAStore`], [`Error::Foreign`].
    pub fn is_nothing_there(&self) -> bool {
        matches!(
            self,
            Error::Missing { .. } | Error::NotAStore { .. } | Error::Foreign { .. }
        )
    }
}

/// The store's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
