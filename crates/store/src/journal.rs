//! The optimizer's journal: every change it makes, with the record that undoes it, written
//! *before* the change is made; the verdicts; back-offs; persisted tunables.
//!
//! The store keeps changes, undo records and verdicts as JSON text: their types belong to the
//! crates that make them (`perfpilot-sys`, `perfpilot-optimize`), not to the store. An action's
//! state is the store's own: [`ActionState`].

use std::collections::BTreeMap;

use rusqlite::{OptionalExtension, params};

use crate::word::stored_word;
use crate::{Result, Store};

stored_word! {
    /// Where an action is in its life (`actions.state`).
    ActionState in "actions"."state" {
        /// Journaled; nothing applied yet.
        Applying = "applying",
        /// Applied (or being applied) and measured: its verdict is still open.
        Trial = "trial",
        /// Kept, with or without a verdict, and enforced while its workload runs.
        Kept = "kept",
        /// Undone (or, for huge pages, stopped and remembered).
        Reverted = "reverted",
        /// Its journal entry could not be read: left as it is.
        Failed = "failed",
        /// Over without being undone: its processes exited, or what it did cannot be undone.
        Ended = "ended",
        /// Someone else changed what it set: left to them.
        Manual = "manual",
    }
}

impl ActionState {
    /// The states of an action that still has something in the system (and may need undoing).
    pub const OPEN: [ActionState; 3] =
        [ActionState::Applying, ActionState::Trial, ActionState::Kept];

    /// Whether the action still has something in the system (see [`ActionState::OPEN`]).
    pub fn is_open(self) -> bool {
        ActionState::OPEN.contains(&self)
    }
}

/// One journaled action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRecord {
    /// The action's id (its row id).
    pub id: i64,
    /// The workload's stable signature (`device:<name>` for a block device).
    pub signature: String,
    /// A readable name of the workload.
    pub workload: String,
    /// The strategy that proposed it, by name.
    pub strategy: String,
    /// Where it is in its life.
    pub state: ActionState,
    /// JSON: what was (or is being) changed.
    pub changes: String,
    /// JSON: what restores it; written before the change.
    pub undo: String,
    /// Why the action was taken.
    pub reason: String,
    /// Why it is in its state.
    pub note: String,
    /// JSON: the evidence, once decided.
    pub verdict: Option<String>,
    /// When it was journaled (ms since the epoch).
    pub created_ms: i64,
    /// When it last changed (ms since the epoch).
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

    /// Journals an action before it is applied (state [`ActionState::Applying`]); returns its
    /// id.
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
                 VALUES (?1, ?2, ?3, ?8, ?4, ?5, ?6, ?7, ?7)",
                params![
                    signature,
                    workload,
                    strategy,
                    changes,
                    undo,
                    reason,
                    t,
                    ActionState::Applying
                ],
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
    pub fn journal_set_state(&mut self, id: i64, state: ActionState, note: &str) -> Result<()> {
        self.conn
            .execute(
                "UPDATE actions SET state = ?2, note = ?3, updated_ms = ?4 WHERE id = ?1",
                params![id, state, note, perfpilot_sys::clock::now_ms()],
            )
            .map_err(|e| self.sql(format!("setting action {id} to {state}"), e))?;
        Ok(())
    }

    /// Closes a trial: its verdict (the evidence, as JSON) and the state it ends in, in one
    /// write, so that no reader sees a decided verdict on an action still in trial. Called once
    /// the changes a revert undoes are undone: an action closed is never left applied.
    pub fn journal_close(
        &mut self,
        id: i64,
        verdict: &str,
        state: ActionState,
        note: &str,
    ) -> Result<()> {
        self.conn
            .execute(
                "UPDATE actions SET verdict = ?2, state = ?3, note = ?4, updated_ms = ?5 WHERE id = ?1",
                params![id, verdict, state, note, perfpilot_sys::clock::now_ms()],
            )
            .map_err(|e| self.sql(format!("storing the verdict of action {id} ({state})"), e))?;
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

    /// Actions, newest first: all of them, or only those still open (see
    /// [`ActionState::OPEN`]).
    pub fn actions(&self, open_only: bool, limit: usize) -> Result<Vec<ActionRecord>> {
        let filter = if open_only {
            let open: Vec<String> = ActionState::OPEN
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect();
            format!("WHERE state IN ({})", open.join(", "))
        } else {
            String::new()
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

    /// Actions that changed at or after `updated_ms` (ms since the epoch), oldest change first:
    /// what a reader that keeps its own copy needs to stay current.
    pub fn actions_since(&self, updated_ms: i64) -> Result<Vec<ActionRecord>> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM actions WHERE updated_ms >= ?1 ORDER BY updated_ms, id"
            ))
            .map_err(|e| self.sql("listing changed actions", e))?;
        let rows = st
            .query_map([updated_ms], row)
            .map_err(|e| self.sql("listing changed actions", e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql("listing changed actions", e))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("perfpilot.db")).unwrap();
        (dir, store)
    }

    #[test]
    fn every_state_is_stored_as_its_text_and_read_back() {
        let (_dir, mut store) = store();
        let id = store
            .journal_begin("sig", "app", "cache_affinity", "{}", "[]", "why")
            .unwrap();
        let rec = store.action(id).unwrap().unwrap();
        assert_eq!(rec.state, ActionState::Applying);
        for &state in ActionState::ALL {
            store.journal_set_state(id, state, "note").unwrap();
            let text: String = store
                .conn
                .query_row("SELECT state FROM actions WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .unwrap();
            assert_eq!(text, state.as_str());
            assert_eq!(store.action(id).unwrap().unwrap().state, state);
            assert_eq!(
                serde_json::to_string(&state).unwrap(),
                format!("\"{}\"", state.as_str())
            );
        }
    }

    #[test]
    fn a_closed_trial_shows_its_verdict_and_its_state_together_or_neither() {
        let (_dir, mut store) = store();
        let id = store
            .journal_begin("sig", "app", "large_pages", "{}", "[]", "why")
            .unwrap();
        store
            .journal_set_state(id, ActionState::Trial, "measuring")
            .unwrap();
        let open = store.action(id).unwrap().unwrap();
        assert_eq!((open.state, open.verdict), (ActionState::Trial, None));
        store
            .journal_close(
                id,
                r#"{"decision":"keep"}"#,
                ActionState::Kept,
                "kept: x1.2",
            )
            .unwrap();
        let closed = store.action(id).unwrap().unwrap();
        assert_eq!(closed.state, ActionState::Kept);
        assert_eq!(closed.verdict.as_deref(), Some(r#"{"decision":"keep"}"#));
        assert_eq!(closed.note, "kept: x1.2");
    }

    #[test]
    fn only_open_states_are_listed_as_open() {
        let (_dir, mut store) = store();
        for &state in ActionState::ALL {
            let id = store
                .journal_begin("sig", "app", "large_pages", "{}", "[]", "why")
                .unwrap();
            store.journal_set_state(id, state, "").unwrap();
        }
        let open: Vec<ActionState> = store
            .actions(true, 100)
            .unwrap()
            .iter()
            .map(|r| r.state)
            .collect();
        assert_eq!(
            open,
            vec![ActionState::Kept, ActionState::Trial, ActionState::Applying]
        );
        assert!(open.iter().all(|s| s.is_open()));
        assert_eq!(
            store.actions(false, 100).unwrap().len(),
            ActionState::ALL.len()
        );
    }

    #[test]
    fn an_unknown_stored_state_is_an_error_naming_table_column_and_value() {
        let (_dir, mut store) = store();
        let id = store
            .journal_begin("sig", "app", "read_ahead", "{}", "[]", "why")
            .unwrap();
        store
            .conn
            .execute("UPDATE actions SET state = 'paused' WHERE id = ?1", [id])
            .unwrap();
        let e = store.action(id).unwrap_err().to_string();
        assert!(
            e.contains("actions.state") && e.contains("\"paused\""),
            "{e}"
        );
        assert!(e.contains("upgrade perfpilot"), "{e}");
        assert!(store.actions(false, 10).is_err());
    }

    #[test]
    fn states_print_padded_as_their_text() {
        assert_eq!(format!("{:<9}|", ActionState::Kept), "kept     |");
        assert_eq!("manual".parse::<ActionState>(), Ok(ActionState::Manual));
        assert!("open".parse::<ActionState>().is_err());
    }
}
