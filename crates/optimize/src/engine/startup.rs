//! What the daemon does once, when it starts, before its first scan: `shmem_enabled` raised
//! from `never` to `advise`.
//!
//! The kernel places a shared-memory mapping on a huge-page boundary only when shmem huge
//! pages are allowed at the time it is mapped; memory mapped under `never` (PostgreSQL's buffer
//! pool, for one) can never be collapsed. `advise` changes nothing for a process that has not
//! asked for huge pages, so raising it early lets servers started later map their shared
//! memory where it can be promoted. The change is an action of its own in the journal (its
//! undo record written before the knob), shown by `perfpilot status`, restored when the daemon
//! stops and by `perfpilot revert`. A daemon that finds the action of an earlier one still open
//! (it crashed, or stayed beside kept huge pages) takes it over when it would raise the knob
//! itself, rather than restoring and raising again: one journal row per raise, not per start.

use perfpilot_store::journal::ActionState;
use perfpilot_sys::change::Change;
use perfpilot_sys::failpoint::kill_point;
use perfpilot_sys::knob::read_knob;
use tracing::{info, warn};

use super::apply::{journal_and_apply, json};
use super::{Engine, EngineError};
use crate::journal::{self, ActionDoc};
use crate::strategy::{SHMEM_ENABLED, SHMEM_NEVER, StrategyKind};

/// The journal's signature of the start-up knob (no workload owns it).
pub(super) const SIGNATURE: &str = "system:shmem_enabled";

/// The value the knob is raised to.
const ADVISE: &str = "advise";

/// Why it is raised, for the log and the journal.
const WHY: &str = "servers started from now on map shared memory aligned so it can be promoted to huge pages; `advise` changes nothing for a process that has not asked for them";

/// What was decided about `shmem_enabled` at start, given the tunables and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum AtStart {
    /// `never`: raise it to `advise`.
    Raise,
    /// Left as it is, and why (logged and noted in status).
    Leave(String),
}

impl AtStart {
    /// Decides from the switches and the value now (`None`: unreadable, with why).
    pub(super) fn decide(
        large_pages: bool,
        advise_at_start: bool,
        now: Result<&str, &str>,
    ) -> AtStart {
        let leave = |s: String| AtStart::Leave(format!("shmem_enabled: {s}"));
        if !large_pages {
            return leave("left as it is (large_pages is off)".into());
        }
        if !advise_at_start {
            return leave("left as it is (shmem_advise_at_start is off)".into());
        }
        match now {
            Err(e) => leave(format!("cannot be read ({e}); left as it is")),
            Ok(SHMEM_NEVER) => AtStart::Raise,
            Ok("deny") => leave(
                "`deny`: left as it is (set by someone else; shared memory cannot be promoted to huge pages)"
                    .into(),
            ),
            Ok("force") => leave(
                "`force`: left as it is (set by someone else; all shared memory gets huge pages already)"
                    .into(),
            ),
            Ok(v) => leave(format!(
                "`{v}` already lets servers map shared memory aligned; left as it is"
            )),
        }
    }
}

impl Engine {
    /// Starts the engine: restores what an earlier daemon raised at start and left open (it
    /// stopped without restoring it, or crashed), recovers the journal's other open actions,
    /// then raises `shmem_enabled` when [`AtStart::decide`] says so. Call once, before the
    /// first scan.
    pub fn begin(&mut self) -> Result<(), EngineError> {
        self.reload_tunables()?;
        let wanted = self.tun.large_pages && self.tun.shmem_advise_at_start;
        let adopted = self.take_over_start_knobs(wanted)?;
        self.recover()?;
        if adopted {
            return Ok(());
        }
        self.raise_at_start()
    }

    /// The start-up actions an earlier daemon left open: taken over (kept, with the same
    /// journal row) when this daemon would raise the knob itself and it still holds the value
    /// written, else restored (or left as manual when changed since). Whether one was taken.
    fn take_over_start_knobs(&mut self, wanted: bool) -> Result<bool, EngineError> {
        if !wanted {
            self.restore_start_knobs("restored when the daemon restarted")?;
            return Ok(false);
        }
        let mut taken = None;
        for rec in self.store.actions(true, usize::MAX >> 1)? {
            if rec.signature != SIGNATURE || taken.is_some() {
                continue;
            }
            let Ok((doc, _)) = journal::parse(&rec) else {
                continue;
            };
            let holds = doc.changes.iter().any(|c| match c {
                Change::Sysfs { rel, value } => read_knob(&self.fs, rel).is_ok_and(|v| v == *value),
                _ => false,
            });
            if holds {
                taken = Some(rec.id);
            }
        }
        let Some(id) = taken else {
            self.restore_start_knobs("restored when the daemon restarted")?;
            return Ok(false);
        };
        let note = "raised by an earlier daemon that did not restore it; taken over by this one and restored when it stops";
        self.store.journal_set_state(id, ActionState::Kept, note)?;
        info!(action = id, "shmem_enabled {note}");
        self.status.notes.push(format!(
            "shmem_enabled: `advise` since an earlier daemon raised it (action {id}); kept, so that servers started from now on map shared memory where it can be promoted"
        ));
        // Any other open start-up action (only a journal damaged by hand has two) is closed.
        self.restore_start_knobs_except(id, "restored when the daemon restarted")?;
        Ok(true)
    }

    /// Raises `shmem_enabled` to `advise` through the journal, if it should be.
    fn raise_at_start(&mut self) -> Result<(), EngineError> {
        let now = read_knob(&self.fs, SHMEM_ENABLED).map_err(|e| e.to_string());
        let decision = AtStart::decide(
            self.tun.large_pages,
            self.tun.shmem_advise_at_start,
            now.as_deref().map_err(String::as_str),
        );
        if let AtStart::Leave(why) = decision {
            info!("{why}");
            self.status.notes.push(why);
            return Ok(());
        }
        let change = Change::Sysfs {
            rel: SHMEM_ENABLED.into(),
            value: ADVISE.into(),
        };
        let mut doc = ActionDoc {
            members: Vec::new(),
            changes: Vec::new(),
            design: crate::design::DesignKind::BeforeAfter,
            irreversible: false,
            signal: None,
            bound_to: None,
        };
        let reason = format!("raise shmem_enabled from `never` to `advise` at start: {WHY}");
        let id = self.store.journal_begin(
            SIGNATURE,
            "shmem_enabled",
            StrategyKind::LargePages.as_str(),
            &json(&doc),
            "[]",
            &reason,
        )?;
        kill_point("engine.start_knob.begun");
        let mut undo = Vec::new();
        let applied =
            journal_and_apply(&mut self.store, &self.fs, id, &mut doc, &mut undo, change)?;
        if applied.is_none() {
            // Not written (logged): nothing to restore.
            self.store.journal_set_state(
                id,
                ActionState::Ended,
                "not raised: reading or writing the knob failed (see the daemon's log)",
            )?;
            self.status
                .notes
                .push(format!("shmem_enabled: could not be raised (action {id})"));
            return Ok(());
        }
        kill_point("engine.start_knob.applied");
        self.store.journal_set_state(
            id,
            ActionState::Kept,
            "raised at start; restored when the daemon stops",
        )?;
        info!(
            action = id,
            "shmem_enabled raised from `never` to `advise`: {WHY}"
        );
        self.status.notes.push(format!(
            "shmem_enabled: raised from `never` to `advise` at start (action {id}) so that servers started from now on map shared memory where it can be promoted"
        ));
        Ok(())
    }

    /// Restores the knobs raised at start that are still open in the journal, saying `how` in
    /// their note. One changed behind perfpilot's back since is left as it is.
    pub(super) fn restore_start_knobs(&mut self, how: &str) -> Result<(), EngineError> {
        self.restore_start_knobs_except(-1, how)
    }

    /// [`Self::restore_start_knobs`] leaving the action `keep` open.
    fn restore_start_knobs_except(&mut self, keep: i64, how: &str) -> Result<(), EngineError> {
        for rec in self.store.actions(true, usize::MAX >> 1)? {
            if rec.signature != SIGNATURE || rec.id == keep {
                continue;
            }
            let (doc, undo) = match journal::parse(&rec) {
                Ok(x) => x,
                Err(e) => {
                    warn!("{e}; marking it failed");
                    self.store
                        .journal_set_state(rec.id, ActionState::Failed, &e.to_string())?;
                    continue;
                }
            };
            let written = doc.changes.iter().find_map(|c| match c {
                Change::Sysfs { rel, value } => Some((rel.clone(), value.clone())),
                _ => None,
            });
            if let Some((rel, value)) = written
                && let Ok(now) = read_knob(&self.fs, &rel)
                && now != value
            {
                let why =
                    format!("/{rel} was changed to `{now}` behind perfpilot's back; left as it is");
                info!(action = rec.id, "{why}");
                self.store
                    .journal_set_state(rec.id, ActionState::Manual, &why)?;
                continue;
            }
            let lines = journal::undo_all(&self.fs, &doc.members, &undo);
            kill_point("engine.start_knob.restored");
            let note = format!("{how}: {}", lines.join("; "));
            info!(action = rec.id, "shmem_enabled {note}");
            // Status no longer says it is raised.
            let said = format!("(action {})", rec.id);
            self.status
                .notes
                .retain(|n| !(n.starts_with("shmem_enabled: raised") && n.contains(&said)));
            self.status
                .notes
                .push(format!("shmem_enabled: {note} (action {})", rec.id));
            self.store
                .journal_set_state(rec.id, ActionState::Reverted, &note)?;
        }
        Ok(())
    }

    /// At stop: the knob raised at start is restored, unless kept huge-page actions stay in
    /// place by choice (`revert_on_stop` off), in which case it stays with them, as the knobs
    /// those actions raised do.
    pub(super) fn end_start_knobs(&mut self, kept_pages_stay: bool) -> Result<(), EngineError> {
        if !kept_pages_stay {
            return self.restore_start_knobs("restored at exit");
        }
        for rec in self.store.actions(true, usize::MAX >> 1)? {
            if rec.signature == SIGNATURE {
                let note = "kept; left in place at exit with the kept large-pages actions (revert_on_stop is off)";
                info!(action = rec.id, "shmem_enabled {note}");
                self.store
                    .journal_set_state(rec.id, ActionState::Kept, note)?;
            }
        }
        Ok(())
    }
}
