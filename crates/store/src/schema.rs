//! The schema and its migrations.
//!
//! The schema version is SQLite's `PRAGMA user_version`. [`MIGRATIONS`]`[i]` takes the
//! database from version `i` to `i + 1`; each runs in its own transaction together with the
//! version bump, so a crash leaves the database at one version or the next, never between. A
//! new table is a new entry at the end (as the optimizer's journal and the study runner's
//! trials were); entries are never edited once released.

use rusqlite::Connection;

/// Migration `i` takes the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: samples, and a key/value table for facts about the store itself.
    "CREATE TABLE store_meta (
         key   TEXT PRIMARY KEY NOT NULL,
         value TEXT NOT NULL
     ) WITHOUT ROWID;
     CREATE TABLE samples (
         id       INTEGER PRIMARY KEY,
         time_ms  INTEGER NOT NULL,  -- Sample::time_ms, wall clock, ms since the epoch
         btime    INTEGER NOT NULL,  -- Sample::kernel.btime, boot time, s since the epoch
         encoding INTEGER NOT NULL,  -- 1 = zstd-compressed serde_json of Sample
         raw_len  INTEGER NOT NULL,  -- bytes before compression
         data     BLOB NOT NULL
     );
     CREATE INDEX samples_time ON samples (time_ms);",
    // 2: the optimizer's journal (every change with its undo record, written before the
    // change), its verdicts, back-offs per workload and strategy, and persisted tunables.
    "CREATE TABLE actions (
         id         INTEGER PRIMARY KEY,
         signature  TEXT NOT NULL,     -- the workload's stable signature
         workload   TEXT NOT NULL,     -- a readable name (command, pids)
         strategy   TEXT NOT NULL,
         state      TEXT NOT NULL,     -- applying, trial, kept, reverted, failed, ended, manual
         changes    TEXT NOT NULL,     -- JSON: what was (or is being) changed
         undo       TEXT NOT NULL,     -- JSON: what restores it; written before the change
         reason     TEXT NOT NULL,     -- why the action was taken
         note       TEXT NOT NULL DEFAULT '',  -- why it is in its state
         verdict    TEXT,              -- JSON: the evidence, once decided
         created_ms INTEGER NOT NULL,
         updated_ms INTEGER NOT NULL
     );
     CREATE INDEX actions_state ON actions (state);
     CREATE INDEX actions_signature ON actions (signature, strategy);
     CREATE TABLE backoff (
         signature TEXT NOT NULL,
         strategy  TEXT NOT NULL,
         until_ms  INTEGER NOT NULL,
         reason    TEXT NOT NULL,
         PRIMARY KEY (signature, strategy)
     ) WITHOUT ROWID;
     CREATE TABLE tunables (
         name  TEXT PRIMARY KEY NOT NULL,
         value TEXT NOT NULL
     ) WITHOUT ROWID;",
    // 3: the study runner: one row per study run (its file's text, so a run can be resumed
    // and reported without the file), one row per trial with its Measurement.
    "CREATE TABLE studies (
         id         INTEGER PRIMARY KEY,
         name       TEXT NOT NULL,
         file       TEXT NOT NULL,     -- the path it was run from
         spec       TEXT NOT NULL,     -- the study file's text
         host       TEXT NOT NULL,     -- JSON: facts about the machine (topology summary)
         state      TEXT NOT NULL,     -- running, interrupted, done, failed
         summary    TEXT,              -- JSON: the runner's conclusions, once done
         created_ms INTEGER NOT NULL,
         updated_ms INTEGER NOT NULL
     );
     CREATE TABLE trials (
         id          INTEGER PRIMARY KEY,
         study       INTEGER NOT NULL REFERENCES studies (id),
         phase       TEXT NOT NULL,    -- race, confirm, scale
         round       INTEGER NOT NULL,
         config      TEXT NOT NULL,    -- the configuration's key (factor=level ...)
         factors     TEXT NOT NULL,    -- JSON: the configuration
         status      TEXT NOT NULL,    -- ok, failed, violated
         reason      TEXT NOT NULL DEFAULT '',
         value       REAL,             -- the objective's value
         measurement TEXT,             -- JSON: perfpilot_drive::Measurement
         detail      TEXT NOT NULL DEFAULT '{}',  -- JSON: layout, ports, warm-up analysis
         created_ms  INTEGER NOT NULL
     );
     CREATE INDEX trials_study ON trials (study, phase, round);",
];

/// The schema version this build writes: the number of migrations.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Why a migration failed.
#[derive(Debug)]
pub(crate) enum MigrateError {
    Sqlite(rusqlite::Error),
    /// The database has a newer schema than this build knows.
    Newer {
        found: i64,
        supported: i64,
    },
}

impl From<rusqlite::Error> for MigrateError {
    fn from(e: rusqlite::Error) -> Self {
        MigrateError::Sqlite(e)
    }
}

/// The database's schema version.
pub(crate) fn version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

/// The tables of a database with no perfpilot schema (version 0): another program's, when
/// there are any. Empty for a new file and for a perfpilot store.
pub(crate) fn foreign_tables(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    if version(conn)? != 0 {
        return Ok(Vec::new());
    }
    let mut st = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )?;
    let names = st.query_map([], |r| r.get::<_, String>(0))?;
    names.collect()
}

/// Brings the schema to [`SCHEMA_VERSION`].
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), MigrateError> {
    loop {
        // Read the version inside the write transaction: two processes opening a new store at
        // once must not both run a migration.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let found = version(&tx)?;
        if found > SCHEMA_VERSION {
            return Err(MigrateError::Newer {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        let Some(sql) = usize::try_from(found).ok().and_then(|i| MIGRATIONS.get(i)) else {
            return Ok(()); // up to date (the transaction rolls back: nothing was written)
        };
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", found + 1)?;
        tx.commit()?;
    }
}

/// Proves the store is writable: records which perfpilot opened it last.
pub(crate) fn write_probe(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO store_meta (key, value) VALUES ('last_opened_by', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [concat!("perfpilot ", env!("CARGO_PKG_VERSION"))],
    )?;
    Ok(())
}
