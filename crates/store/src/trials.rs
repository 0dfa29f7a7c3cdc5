//! The study runner's records: study runs and their trials.
//!
//! Like the journal, the store keeps configurations, measurements and conclusions as JSON text:
//! their types belong to `perfpilot-study` and `perfpilot-drive`. A trial's phase and status
//! and a run's state are typed ([`TrialPhase`], [`TrialStatus`], [`RunState`]); each is stored
//! as the same word it always was, so older stores read back.

use rusqlite::{OptionalExtension, params};

use crate::word::stored_word;
use crate::{Result, Store};

stored_word! {
    /// Which part of a study run a trial belongs to (`trials.phase`).
    TrialPhase in "trials"."phase" {
        /// A round of the race (or of an exhaustive run).
        Race = "race",
        /// A paired round of the winner and the baseline after the race.
        Confirm = "confirm",
        /// A point of the load sweep (`study scale`).
        Scale = "scale",
    }
}

stored_word! {
    /// How a trial ended (`trials.status`).
    TrialStatus in "trials"."status" {
        /// Measured, every constraint met.
        Ok = "ok",
        /// Measured, but a constraint of the objective failed.
        Violated = "violated",
        /// Not measured: deployment, load or measurement failed.
        Failed = "failed",
    }
}

stored_word! {
    /// Where a study run stands (`studies.state`).
    RunState in "studies"."state" {
        /// Started and not ended (or killed: `--resume` continues it).
        Running = "running",
        /// Stopped by Ctrl-C, every knob restored.
        Interrupted = "interrupted",
        /// Finished, with its summary.
        Done = "done",
        /// Ended by an error.
        Failed = "failed",
    }
}

/// One study run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StudyRecord {
    /// The run's id.
    pub id: i64,
    /// The study's name.
    pub name: String,
    /// The path the study file was run from.
    pub file: String,
    /// The study file's text.
    pub spec: String,
    /// JSON: facts about the machine (topology summary).
    pub host: String,
    /// Where the run stands.
    pub state: RunState,
    /// JSON: the runner's conclusions, once done.
    pub summary: Option<String>,
    /// When the run began, ms since the epoch.
    pub created_ms: i64,
    /// When the run's state last changed, ms since the epoch.
    pub updated_ms: i64,
}

/// One trial of a study run.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRecord {
    /// The trial's id (assigned by [`Store::trial_add`]).
    pub id: i64,
    /// The study run it belongs to.
    pub study: i64,
    /// The part of the run it belongs to.
    pub phase: TrialPhase,
    /// Its round within the phase, from 1.
    pub round: i64,
    /// The configuration's key (`factor=level ...`).
    pub config: String,
    /// JSON: the configuration.
    pub factors: String,
    /// How it ended.
    pub status: TrialStatus,
    /// Why it failed or violated a constraint (empty when ok).
    pub reason: String,
    /// The objective's value.
    pub value: Option<f64>,
    /// JSON: the `perfpilot_drive::Measurement`.
    pub measurement: Option<String>,
    /// JSON: layout, ports, command lines, knobs, warm-up analysis.
    pub detail: String,
    /// When it was recorded, ms since the epoch (assigned by [`Store::trial_add`]).
    pub created_ms: i64,
}

const STUDY_COLUMNS: &str = "id, name, file, spec, host, state, summary, created_ms, updated_ms";
const TRIAL_COLUMNS: &str = "id, study, phase, round, config, factors, status, reason, value, measurement, detail, created_ms";

fn study_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StudyRecord> {
    Ok(StudyRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        file: r.get(2)?,
        spec: r.get(3)?,
        host: r.get(4)?,
        state: r.get(5)?,
        summary: r.get(6)?,
        created_ms: r.get(7)?,
        updated_ms: r.get(8)?,
    })
}

fn trial_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TrialRecord> {
    Ok(TrialRecord {
        id: r.get(0)?,
        study: r.get(1)?,
        phase: r.get(2)?,
        round: r.get(3)?,
        config: r.get(4)?,
        factors: r.get(5)?,
        status: r.get(6)?,
        reason: r.get(7)?,
        value: r.get(8)?,
        measurement: r.get(9)?,
        detail: r.get(10)?,
        created_ms: r.get(11)?,
    })
}

impl Store {
    /// Records a new study run (state [`RunState::Running`]); returns its id.
    pub fn study_begin(&mut self, name: &str, file: &str, spec: &str, host: &str) -> Result<i64> {
        let now = perfpilot_sys::clock::now_ms();
        self.conn
            .execute(
                "INSERT INTO studies (name, file, spec, host, state, created_ms, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                params![name, file, spec, host, RunState::Running, now],
            )
            .map_err(|e| self.sql("recording a study run", e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Sets a study run's state, and its summary when given.
    pub fn study_set_state(
        &mut self,
        id: i64,
        state: RunState,
        summary: Option<&str>,
    ) -> Result<()> {
        self.conn
            .execute(
                "UPDATE studies SET state = ?2, summary = COALESCE(?3, summary), updated_ms = ?4
                 WHERE id = ?1",
                params![id, state, summary, perfpilot_sys::clock::now_ms()],
            )
            .map_err(|e| self.sql(format!("updating study run {id}"), e))?;
        Ok(())
    }

    /// One study run.
    pub fn study(&self, id: i64) -> Result<Option<StudyRecord>> {
        self.conn
            .query_row(
                &format!("SELECT {STUDY_COLUMNS} FROM studies WHERE id = ?1"),
                [id],
                study_row,
            )
            .optional()
            .map_err(|e| self.sql(format!("reading study run {id}"), e))
    }

    /// Every study run, newest first.
    pub fn studies(&self) -> Result<Vec<StudyRecord>> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT {STUDY_COLUMNS} FROM studies ORDER BY id DESC"
            ))
            .map_err(|e| self.sql("listing study runs", e))?;
        let rows = st
            .query_map([], study_row)
            .and_then(|r| r.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(|e| self.sql("listing study runs", e))
    }

    /// Records one trial (its `id` and `created_ms` are assigned); returns its id.
    pub fn trial_add(&mut self, t: &TrialRecord) -> Result<i64> {
        self.conn
            .execute(
                "INSERT INTO trials (study, phase, round, config, factors, status, reason, value,
                                     measurement, detail, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    t.study,
                    t.phase,
                    t.round,
                    t.config,
                    t.factors,
                    t.status,
                    t.reason,
                    t.value,
                    t.measurement,
                    t.detail,
                    perfpilot_sys::clock::now_ms()
                ],
            )
            .map_err(|e| self.sql(format!("recording a trial of study run {}", t.study), e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The trials of study run `study`, in the order they ran.
    pub fn trials(&self, study: i64) -> Result<Vec<TrialRecord>> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT {TRIAL_COLUMNS} FROM trials WHERE study = ?1 ORDER BY id"
            ))
            .map_err(|e| self.sql(format!("reading the trials of study run {study}"), e))?;
        let rows = st
            .query_map([study], trial_row)
            .and_then(|r| r.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(|e| self.sql(format!("reading the trials of study run {study}"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn studies_and_trials_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path().join("s.db")).unwrap();
        let id = s
            .study_begin("demo", "demo.toml", "name = 'x'", "{}")
            .unwrap();
        let t = TrialRecord {
            id: 0,
            study: id,
            phase: TrialPhase::Race,
            round: 2,
            config: "instances=1".into(),
            factors: "[]".into(),
            status: TrialStatus::Ok,
            reason: String::new(),
            value: Some(12.5),
            measurement: Some("{}".into()),
            detail: "{}".into(),
            created_ms: 0,
        };
        let tid = s.trial_add(&t).unwrap();
        s.study_set_state(id, RunState::Done, Some("{\"winner\":1}"))
            .unwrap();
        let got = s.trials(id).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, tid);
        assert_eq!(got[0].round, 2);
        assert_eq!(got[0].value, Some(12.5));
        let st = s.study(id).unwrap().unwrap();
        assert_eq!(st.state, RunState::Done);
        assert_eq!(st.summary.as_deref(), Some("{\"winner\":1}"));
        assert_eq!(s.studies().unwrap().len(), 1);
        assert!(s.study(id + 1).unwrap().is_none());
    }

    #[test]
    fn phases_statuses_and_states_are_stored_as_the_same_words_as_before() {
        let words = |all: &[&str]| all.join(" ");
        let phases: Vec<&str> = TrialPhase::ALL.iter().map(|p| p.as_str()).collect();
        let statuses: Vec<&str> = TrialStatus::ALL.iter().map(|p| p.as_str()).collect();
        let states: Vec<&str> = RunState::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(words(&phases), "race confirm scale");
        assert_eq!(words(&statuses), "ok violated failed");
        assert_eq!(words(&states), "running interrupted done failed");
        for p in TrialPhase::ALL {
            assert_eq!(serde_json::to_string(p).unwrap(), format!("\"{p}\""));
            assert_eq!(p.as_str().parse::<TrialPhase>().unwrap(), *p);
        }
        for st in TrialStatus::ALL {
            let back: TrialStatus = serde_json::from_str(&format!("\"{st}\"")).unwrap();
            assert_eq!(back, *st);
        }
        // `study list` pads the state to a column.
        assert_eq!(format!("[{:<12}]", RunState::Done), "[done        ]");

        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path().join("s.db")).unwrap();
        let id = s.study_begin("demo", "demo.toml", "", "{}").unwrap();
        let raw =
            |s: &Store, sql: &str| -> String { s.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(raw(&s, "SELECT state FROM studies"), "running");
        s.study_set_state(id, RunState::Interrupted, None).unwrap();
        assert_eq!(raw(&s, "SELECT state FROM studies"), "interrupted");
        let t = TrialRecord {
            id: 0,
            study: id,
            phase: TrialPhase::Confirm,
            round: 1,
            config: "x".into(),
            factors: "{}".into(),
            status: TrialStatus::Violated,
            reason: "p99".into(),
            value: None,
            measurement: None,
            detail: "{}".into(),
            created_ms: 0,
        };
        s.trial_add(&t).unwrap();
        assert_eq!(
            raw(&s, "SELECT phase || ' ' || status FROM trials"),
            "confirm violated"
        );
        let back = &s.trials(id).unwrap()[0];
        assert_eq!(
            (back.phase, back.status),
            (TrialPhase::Confirm, TrialStatus::Violated)
        );
    }

    #[test]
    fn an_unknown_stored_word_is_an_error_naming_table_column_and_value() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path().join("s.db")).unwrap();
        let id = s.study_begin("demo", "demo.toml", "", "{}").unwrap();
        s.conn
            .execute(
                "INSERT INTO trials (study, phase, round, config, factors, status, created_ms)
                 VALUES (?1, 'warmup', 1, 'x', '{}', 'ok', 0)",
                [id],
            )
            .unwrap();
        let e = s.trials(id).unwrap_err().to_string();
        assert!(e.contains("s.db"), "{e}");
        assert!(e.contains("trials.phase: unknown value \"warmup\""), "{e}");
        assert!(e.contains("known: race, confirm, scale"), "{e}");

        s.conn
            .execute("UPDATE studies SET state = 'paused'", [])
            .unwrap();
        let e = s.study(id).unwrap_err().to_string();
        assert!(e.contains("studies.state: unknown value \"paused\""), "{e}");
        assert!(s.studies().is_err());
    }
}
