//! perfpilot's embedded store: one SQLite file holding what perfpilot records.
//!
//! Each kind of record has its own module and tables, added to the schema through
//! [`schema`]'s migrations:
//!
//! - [`samples`]: the machine [`Sample`](perfpilot_observe::sample::Sample)s written by
//!   `perfpilot record` and replayed by `perfpilot dump`, with retention;
//! - [`journal`]: the optimizer's actions (each change with its undo record, written before
//!   the change), verdicts, back-offs and persisted tunables;
//! - [`trials`]: the study runner's runs and their trials.
//!
//! The file is opened in WAL mode (`synchronous=NORMAL`): a writer killed at any point leaves
//! every committed sample readable, and a reader (`dump`) can run while a writer (`record`)
//! appends. A [`Store`] is one connection; it is `Send` but not `Sync`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

pub mod dump;
mod error;
pub mod journal;
pub mod record;
pub mod samples;
pub mod schema;
pub mod trials;
mod word;

pub use error::{Error, Result};
pub use journal::ActionRecord;
pub use samples::{CorruptRow, Retention, RetentionOutcome, SampleIter, SampleRange};
pub use trials::{RunState, StudyRecord, TrialPhase, TrialRecord, TrialStatus};
pub use word::UnknownValue;

/// How long a statement waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The WAL file is truncated back to this size after a checkpoint.
const JOURNAL_SIZE_LIMIT: i64 = 64 << 20;

/// The perfpilot store: an open SQLite database.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
    retention: Retention,
    /// Bookkeeping that makes retention cheap to enforce after appends.
    retention_state: samples::RetentionState,
}

impl Store {
    /// Opens (creating when needed) the store at `path`: creates the parent directories and the
    /// database, sets WAL mode, creates or migrates the schema, and checks that it can write.
    /// Retention is [`Retention::default`]; change it with [`Store::set_retention`].
    ///
    /// Fails with [`Error::Open`] (naming the path and the reason) when the place is not
    /// writable, the file is not a SQLite database, or the database was written by a newer
    /// perfpilot.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        let fail = |reason: String| Error::Open {
            path: path.clone(),
            reason,
        };
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            // Directories created 0700 and a new store 0600 (SQLite gives its -wal and -shm
            // files the store's mode): what perfpilot records is the machine's business.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| fail(format!("cannot create directory {}: {e}", parent.display())))?;
        }
        if path.is_dir() {
            return Err(fail("it is a directory".into()));
        }
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail(e.to_string())),
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn =
            Connection::open_with_flags(&path, flags).map_err(|e| fail(e.to_string()))?;
        // Another program's database is never written into (not even its journal mode).
        let tables = schema::foreign_tables(&conn).map_err(|e| fail(e.to_string()))?;
        if !tables.is_empty() {
            return Err(Error::Foreign { path, tables });
        }
        configure(&conn).map_err(fail)?;
        schema::migrate(&mut conn).map_err(|e| migrate_error(&path, e))?;
        schema::write_probe(&conn).map_err(|e| fail(format!("cannot write to it: {e}")))?;
        Store::with_connection(conn, path)
    }

    /// A store on an open, migrated connection.
    fn with_connection(conn: Connection, path: PathBuf) -> Result<Store> {
        let mut store = Store {
            conn,
            path,
            retention: Retention::default(),
            retention_state: samples::RetentionState::default(),
        };
        // A damaged sample table must not lock the journal away: retention then starts from
        // nothing, and reading or appending samples reports the damage.
        if let Ok(r) = samples::RetentionState::load(&store) {
            store.retention_state = r;
        }
        Ok(store)
    }

    /// Opens the store at `path` for a command that only reads: creates no file and no
    /// directory. Nothing is written, except that a store an older perfpilot wrote has its
    /// schema upgraded in place, as [`Store::open`] would.
    ///
    /// Fails with [`Error::Missing`] when there is no file at `path`, [`Error::NotAStore`] when
    /// the file holds no perfpilot schema (both [`Error::is_nothing_there`]), and as
    /// [`Store::open`] otherwise.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        let fail = |reason: String| Error::Open {
            path: path.clone(),
            reason,
        };
        let mut conn = connect_existing(&path)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| fail(e.to_string()))?;
        let found = schema::version(&conn).map_err(|e| fail(e.to_string()))?;
        if found == 0 {
            return Err(Error::NotAStore { path });
        }
        if found != schema::SCHEMA_VERSION {
            // Older: upgraded like any open; newer: refused by migrate, naming both versions.
            configure(&conn).map_err(fail)?;
            schema::migrate(&mut conn).map_err(|e| migrate_error(&path, e))?;
        }
        Store::with_connection(conn, path)
    }

    /// The schema version of the store at `path`, read without upgrading or writing anything
    /// (so two stores can be checked against each other before either is opened); 0 for a
    /// file with no perfpilot schema. Fails as [`Store::open_existing`] does when there is no
    /// file or it cannot be read.
    pub fn schema_version_at(path: impl AsRef<Path>) -> Result<i64> {
        let path = path.as_ref();
        let conn = connect_existing(path)?;
        schema::version(&conn).map_err(|e| Error::Open {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }

    /// Where the store lives unless `--store` says otherwise:
    /// `$XDG_STATE_HOME/perfpilot/perfpilot.db` when that is set (to an absolute path), else
    /// `/var/lib/perfpilot/perfpilot.db` for root, else `~/.local/state/perfpilot/perfpilot.db`.
    pub fn default_path() -> Result<PathBuf> {
        let root = perfpilot_sys::user::is_root();
        default_path_from(
            std::env::var_os("XDG_STATE_HOME"),
            std::env::var_os("HOME"),
            root,
        )
        .ok_or(Error::NoDefaultPath)
    }

    /// The path the store was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The retention limits enforced after appends.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// Changes the retention limits; they are enforced from the next append on (or now, with
    /// [`Store::enforce_retention`]).
    pub fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
        self.retention_state.force_check();
    }

    /// Bytes of live data in the database: `(page_count - freelist_count) × page_size`, the
    /// measure [`Retention::max_bytes`] limits. The file on disk can be larger by the WAL file.
    pub fn size_bytes(&self) -> Result<u64> {
        let q = |pragma: &str| -> Result<i64> {
            self.conn
                .pragma_query_value(None, pragma, |r| r.get::<_, i64>(0))
                .map_err(|e| self.sql(format!("reading PRAGMA {pragma}"), e))
        };
        let pages = q("page_count")?;
        let free = q("freelist_count")?;
        let size = q("page_size")?;
        Ok(u64::try_from((pages - free).max(0) * size).unwrap_or(0))
    }

    /// Wraps a SQLite error with the store's path and what was being done.
    fn sql(&self, what: impl Into<String>, source: rusqlite::Error) -> Error {
        Error::Sqlite {
            path: self.path.clone(),
            what: what.into(),
            source,
        }
    }
}

/// A connection to the existing store file at `path` (never created): [`Error::Missing`]
/// when there is none, [`Error::Open`] for a directory or a file SQLite cannot open.
/// Read-write without CREATE: SQLite falls back to reading when the file is write protected,
/// and the last connection to close removes the -wal and -shm files (a read-only connection
/// would leave them behind).
fn connect_existing(path: &Path) -> Result<Connection> {
    let fail = |reason: String| Error::Open {
        path: path.to_path_buf(),
        reason,
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Missing {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(fail(e.to_string())),
        Ok(m) if m.is_dir() => return Err(fail("it is a directory".into())),
        Ok(_) => {}
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| fail(e.to_string()))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| fail(e.to_string()))?;
    Ok(conn)
}

/// A failed migration as the store's error, naming `path`.
fn migrate_error(path: &Path, e: schema::MigrateError) -> Error {
    match e {
        schema::MigrateError::Sqlite(e) => Error::Open {
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
        schema::MigrateError::Newer { found, supported } => Error::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported,
        },
    }
}

/// Connection settings, applied on every open. `auto_vacuum` only takes effect on a new,
/// empty database, which is when it matters.
fn configure(conn: &Connection) -> Result<(), String> {
    configure_sql(conn).map_err(|e| e.to_string())?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| format!("cannot set WAL journal mode: {e}"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!(
            "cannot use WAL journal mode (got {mode}); the file system may not support it"
        ));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(|e| e.to_string())
}

fn configure_sql(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

/// [`Store::default_path`] from its inputs.
fn default_path_from(
    xdg_state: Option<OsString>,
    home: Option<OsString>,
    root: bool,
) -> Option<PathBuf> {
    let tail = Path::new("perfpilot").join("perfpilot.db");
    if let Some(x) = xdg_state.map(PathBuf::from).filter(|p| p.is_absolute()) {
        return Some(x.join(tail));
    }
    if root {
        return Some(Path::new("/var/lib").join(tail));
    }
    let home = home.map(PathBuf::from).filter(|p| p.is_absolute())?;
    Some(home.join(".local/state").join(tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the files in `dir`, sorted.
    fn files_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn opening_a_missing_store_to_read_creates_nothing_and_names_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("sub").join("x.db");
        let e = Store::open_existing(&path).unwrap_err();
        assert!(
            matches!(e, Error::Missing { .. }) && e.is_nothing_there(),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("no store at {}: ", path.display())),
            "{e}"
        );
        assert!(
            files_in(tmp.path()).is_empty(),
            "{:?}",
            files_in(tmp.path())
        );
    }

    #[test]
    fn a_store_opened_to_read_sees_what_was_written_and_leaves_only_its_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.db");
        {
            let mut s = Store::open(&path).unwrap();
            s.tunable_set("windows", "4").unwrap();
        }
        assert_eq!(files_in(tmp.path()), ["x.db"]);
        let s = Store::open_existing(&path).unwrap();
        assert_eq!(
            s.tunables().unwrap().get("windows").map(String::as_str),
            Some("4")
        );
        drop(s);
        assert_eq!(files_in(tmp.path()), ["x.db"]);
    }

    #[test]
    fn a_file_without_perfpilot_schema_is_not_a_store_and_is_left_as_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("empty.db");
        std::fs::write(&path, b"").unwrap();
        let e = Store::open_existing(&path).unwrap_err();
        assert!(
            matches!(e, Error::NotAStore { .. }) && e.is_nothing_there(),
            "{e:?}"
        );
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    #[test]
    fn a_store_from_a_newer_perfpilot_is_refused_when_opened_to_read() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.db");
        drop(Store::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", schema::SCHEMA_VERSION + 1)
            .unwrap();
        drop(conn);
        let e = Store::open_existing(&path).unwrap_err();
        assert!(matches!(e, Error::NewerSchema { .. }), "{e:?}");
        assert!(!e.is_nothing_there());
    }

    #[test]
    fn a_store_from_an_older_perfpilot_is_upgraded_when_opened_to_read() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.db");
        let mut conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        let tx = conn.transaction().unwrap();
        tx.execute_batch(schema::MIGRATIONS[0]).unwrap();
        tx.pragma_update(None, "user_version", 1).unwrap();
        tx.commit().unwrap();
        drop(conn);
        let s = Store::open_existing(&path).unwrap();
        assert!(s.studies().unwrap().is_empty());
        assert!(s.tunables().unwrap().is_empty());
    }

    #[test]
    fn default_path_rules() {
        let p = |x: Option<&str>, h: Option<&str>, root| {
            default_path_from(x.map(Into::into), h.map(Into::into), root)
        };
        assert_eq!(
            p(Some("/x/state"), Some("/home/a"), true),
            Some(PathBuf::from("/x/state/perfpilot/perfpilot.db"))
        );
        assert_eq!(
            p(Some("relative"), Some("/home/a"), false),
            Some(PathBuf::from("/home/a/.local/state/perfpilot/perfpilot.db"))
        );
        assert_eq!(
            p(None, Some("/home/a"), true),
            Some(PathBuf::from("/var/lib/perfpilot/perfpilot.db"))
        );
        assert_eq!(
            p(Some(""), Some("/home/a"), false),
            Some(PathBuf::from("/home/a/.local/state/perfpilot/perfpilot.db"))
        );
        assert_eq!(p(None, None, false), None);
    }
}
