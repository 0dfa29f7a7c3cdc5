//! The optimizer's journal: every change it makes, with the record that undoes it, written
//! *before* the change is made; the verdicts; back-offs; persisted tunables.
//!
//! The store keeps changes, undo records and verdicts as JSON text: their types belong to the
//! crates that make them (`perfpilot-sys`, `perfpilot-optimize`), not to the store.

use std::collections::BTreeMap;

use rusqlite::{OptionalExtension, params};

use crate::{Result, Store};

/// States of an action that still has something in the system (and may need undoing).
pub const OPEN_STATES: [&str; 3] = ["applying", "trial", "kept"];

/// One journaled action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRecord {
    pub id: i64,
    pub signature: String,
    pub workload: String,
    pub strategy: String,
    pub state: String,
    pub changes: String,
    pub undo: String,
    pub reason: String,
    pub note: String,
    pub verdict: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

const COLUMNS: &str = "id, signature, workload, strategy, state, changes, undo, reason, note, verdict, created_ms, updated_ms";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ActionRecord> {
    Ok(ActionRecord {
        id: r.get(0)?,
        signature: r.get(1)?,
        workload: r.get(2)?,
        strategy: r.get(3)?,
        state: r.get(4)?,
        changes: r.get(5)?,
        undo: r.get(6)?,
        reason: r.get(7)?,
        note: r.get(8)?,
        verdict: r.get(9)?,
        created_ms: r.get(10)?,
        updated_ms: r.get(11)?,
    })
}

impl Store {
    /// Makes every later write durable on power loss too (`synchronous=FULL`), as a journal
    /// written before each system change must be.
    pub fn set_durable(&self) -> Result<()> {
        self.conn
            .pragma_update(None, "synchronous", "FULL")
            .map_err(|e| self.sql("setting synchronous=FULL", e))
    }

    /// Journals an action before it is applied (state `applying`); returns its id.
    pub fn journal_begin(
        &mut self,
        signature: &str,
        workload: &str,
        strategy: &str,
        changes: &str,
        undo: &str,
        reason: &str,
    ) -> Result<i64> {
        let t = perfpilot_sys::clock::now_ms();
        self.conn
            .execute(
                "INSERT INTO actions (signature, workload, strategy, state, changes, undo, reason, created_ms, updated_ms)
                 VALUES (?1, ?2, ?3, 'applying', ?4, ?5, ?6, ?7, ?7)",
                params![signature, workload, strategy, changes, undo, reason, t],
            )
            .map_err(|e| self.sql(format!("journaling a {strategy} action for {workload}"), e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Replaces an action's changes and undo record (a paced action that grew), before the
    /// new part is applied.
    pub fn journal_extend(&mut self, id: i64, changes: &str, undo: &str) -> Result<()> {
        self.conn
            .execute(
                "UPDATE actions SET changes = ?2, undo = ?3, updated_ms = ?4 WHERE id = ?1",
                params![id, changes, undo, perfpilot_sys::clock::now_ms()],
            )
            .map_err(|e| self.sql(format!("extending action {id}"), e))?;
        Ok(())
    }

    /// Moves an action to `state`, saying why.
    pub fn journal_set_state(&mut self, id: i64, state: &str, note: &str) -> Result<()> {
        self.conn
            .execute(
                "UPDATE actions SET state = ?2, note = ?3, updated_ms = ?4 WHERE id = ?1",
                params![id, state, note, perfpilot_sys::clock::now_ms()],
            )
            .map_err(|e| self.sql(format!("setting action {id} to {state}"), e))?;
        Ok(())
    }

    /// Stores an action's verdict (its evidence, as JSON).
    pub fn journal_set_verdict(&mut self, id: i64, verdict: &str) -> Result<()> {
        self.conn
            .execute(
                "UPDATE actions SET verdict = ?2, updated_ms = ?3 WHERE id = ?1",
                params![id, verdict, perfpilot_sys::clock::now_ms()],
            )
            .map_err(|e| self.sql(format!("storing the verdict of action {id}"), e))?;
        Ok(())
    }

    /// One action.
    pub fn action(&self, id: i64) -> Result<Option<ActionRecord>> {
        self.conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM actions WHERE id = ?1"),
                [id],
                row,
            )
            .optional()
            .map_err(|e| self.sql(format!("reading action {id}"), e))
    }

    /// Actions, newest first: all of them, or only those still open (see [`OPEN_STATES`]).
    pub fn actions(&self, open_only: bool, limit: usize) -> Result<Vec<ActionRecord>> {
        let filter = if open_only {
            "WHERE state IN ('applying', 'trial', 'kept')"
        } else {
            ""
        };
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM actions {filter} ORDER BY id DESC LIMIT ?1"
            ))
            .map_err(|e| self.sql("listing actions", e))?;
        let rows = st
            .query_map([limit as i64], row)
            .map_err(|e| self.sql("listing actions", e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql("listing actions", e))
    }

    /// Backs off `strategy` for the workload `signature` until `until_ms`.
    pub fn backoff_set(
        &mut self,
        signature: &str,
        strategy: &str,
        until_ms: i64,
        reason: &str,
    ) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO backoff (signature, strategy, until_ms, reason) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (signature, strategy) DO UPDATE SET until_ms = excluded.until_ms, reason = excluded.reason",
                params![signature, strategy, until_ms, reason],
            )
            .map_err(|e| self.sql(format!("backing off {strategy} for {signature}"), e))?;
        Ok(())
    }

    /// The back-off of `strategy` for `signature`: (until, reason), if any is recorded.
    pub fn backoff_get(&self, signature: &str, strategy: &str) -> Result<Option<(i64, String)>> {
        self.conn
            .query_row(
                "SELECT until_ms, reason FROM backoff WHERE signature = ?1 AND strategy = ?2",
                params![signature, strategy],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| {
                self.sql(
                    format!("reading the back-off of {strategy} for {signature}"),
                    e,
                )
            })
    }

    /// Every persisted tunable value.
    pub fn tunables(&self) -> Result<BTreeMap<String, String>> {
        let mut st = self
            .conn
            .prepare("SELECT name, value FROM tunables")
            .map_err(|e| self.sql("reading tunables", e))?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.sql("reading tunables", e))?;
        rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()
            .map_err(|e| self.sql("reading tunables", e))
    }

    /// Persists a tunable value.
    pub fn tunable_set(&mut self, name: &str, value: &str) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO tunables (name, value) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                params![name, value],
            )
            .map_err(|e| self.sql(format!("setting tunable {name}"), e))?;
        Ok(())
    }
}
