//! The study runner's records: study runs and their trials.
//!
//! Like the journal, the store keeps configurations, measurements and conclusions as JSON text:
//! their types belong to `perfpilot-study` and `perfpilot-drive`.

use rusqlite::{OptionalExtension, params};

use crate::{Result, Store};

/// One study run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StudyRecord {
    pub id: i64,
    pub name: String,
    pub file: String,
    pub spec: String,
    pub host: String,
    pub state: String,
    pub summary: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// One trial of a study run.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRecord {
    pub id: i64,
    pub study: i64,
    pub phase: String,
    pub round: i64,
    pub config: String,
    pub factors: String,
    pub status: String,
    pub reason: String,
    pub value: Option<f64>,
    pub measurement: Option<String>,
    pub detail: String,
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
    /// Records a new study run (state `running`); returns its id.
    pub fn study_begin(&mut self, name: &str, file: &str, spec: &str, host: &str) -> Result<i64> {
        let now = perfpilot_sys::clock::now_ms();
        self.conn
            .execute(
                "INSERT INTO studies (name, file, spec, host, state, created_ms, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5)",
                params![name, file, spec, host, now],
            )
            .map_err(|e| self.sql("recording a study run", e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Sets a study run's state, and its summary when given.
    pub fn study_set_state(&mut self, id: i64, state: &str, summary: Option<&str>) -> Result<()> {
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
            phase: "race".into(),
            round: 2,
            config: "instances=1".into(),
            factors: "[]".into(),
            status: "ok".into(),
            reason: String::new(),
            value: Some(12.5),
            measurement: Some("{}".into()),
            detail: "{}".into(),
            created_ms: 0,
        };
        let tid = s.trial_add(&t).unwrap();
        s.study_set_state(id, "done", Some("{\"winner\":1}"))
            .unwrap();
        let got = s.trials(id).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, tid);
        assert_eq!(got[0].round, 2);
        assert_eq!(got[0].value, Some(12.5));
        let st = s.study(id).unwrap().unwrap();
        assert_eq!(st.state, "done");
        assert_eq!(st.summary.as_deref(), Some("{\"winner\":1}"));
        assert_eq!(s.studies().unwrap().len(), 1);
        assert!(s.study(id + 1).unwrap().is_none());
    }
}
