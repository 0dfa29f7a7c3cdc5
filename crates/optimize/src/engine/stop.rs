//! Stopping: running trials are undone; kept actions are undone when `revert_on_stop`, except
//! huge pages, which cannot be and stay kept; `shmem_enabled` raised at start is restored
//! (see `startup`). What became of each action is said in the same
//! words in the log, the journal's note (the action table of `perfpilot status`) and the
//! workload table of the last `status.json`.

use perfpilot_store::journal::ActionState;
use perfpilot_sys::change::Undo;
use perfpilot_sys::failpoint::kill_point;
use tracing::{info, warn};

use super::apply::json;
use super::{Engine, EngineError};
use crate::journal;
use crate::strategy::StrategyKind;

/// What became of an action when the daemon stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AtExit {
    /// A running trial, undone before its verdict.
    TrialUndone,
    /// A running trial of huge pages, ended before its verdict: its huge pages stay.
    TrialEnded,
    /// A kept action, undone (`revert_on_stop`).
    Reverted,
    /// A kept action of huge pages: it cannot be undone, so it stays kept and in place.
    KeptIrreversible,
    /// A kept action left in place because `revert_on_stop` is off.
    KeptByChoice,
}

impl AtExit {
    /// What becomes of a kept action: undone when `revert_on_stop`, unless it cannot be.
    pub(super) fn of_kept(revert_on_stop: bool, irreversible: bool) -> AtExit {
        match (revert_on_stop, irreversible) {
            (true, false) => AtExit::Reverted,
            (true, true) => AtExit::KeptIrreversible,
            (false, _) => AtExit::KeptByChoice,
        }
    }

    /// What becomes of a running trial: undone, or ended where it cannot be.
    pub(super) fn of_trial(irreversible: bool) -> AtExit {
        if irreversible {
            AtExit::TrialEnded
        } else {
            AtExit::TrialUndone
        }
    }

    /// The journal's state for it.
    pub(super) fn state(self) -> ActionState {
        match self {
            AtExit::TrialUndone | AtExit::Reverted => ActionState::Reverted,
            AtExit::TrialEnded => ActionState::Ended,
            AtExit::KeptIrreversible | AtExit::KeptByChoice => ActionState::Kept,
        }
    }

    /// In words that begin with its state's: the journal's note and the log's line.
    pub(super) fn words(self) -> &'static str {
        match self {
            AtExit::TrialUndone => "reverted at exit, before its verdict",
            AtExit::TrialEnded => {
                "ended at exit, before its verdict; its huge pages stay (they are not split back)"
            }
            AtExit::Reverted => "reverted at exit (revert_on_stop)",
            AtExit::KeptIrreversible => {
                "kept; left in place at exit (huge pages are not split back)"
            }
            AtExit::KeptByChoice => "kept; left in place at exit (revert_on_stop is off)",
        }
    }

    /// As the workload table says it of action `id` of `strategy`.
    pub(super) fn workload_words(self, strategy: StrategyKind, id: i64) -> String {
        format!("{strategy} (action {id}): {}", self.words())
    }

    /// Whether the undo record `u` is undone: every one, only those that can be (a knob
    /// raised for huge pages is restored; the pages stay), or none.
    fn undoes(self, u: &Undo) -> bool {
        match self {
            AtExit::TrialUndone | AtExit::Reverted => true,
            AtExit::TrialEnded | AtExit::KeptIrreversible => journal::is_reversible(u),
            AtExit::KeptByChoice => false,
        }
    }
}

/// An action as it ends at exit.
struct Ending<'a> {
    id: i64,
    name: &'a str,
    strategy: StrategyKind,
    members: &'a [(i32, u64)],
    /// Its journaled record, as JSON (rewritten when part of a kept action is undone).
    doc: String,
}

impl Engine {
    /// Stops: each running trial and kept action ends as [`AtExit`] says, logged, noted in
    /// the journal, and shown in status's workload table in the same words.
    pub fn shutdown(&mut self) -> Result<(), EngineError> {
        // The knob raised at start stays only beside huge pages left in place by choice.
        let kept_pages_stay = !self.tun.revert_on_stop
            && self
                .actions
                .held
                .iter()
                .any(|h| h.strategy == StrategyKind::LargePages);
        let mut said: Vec<(String, String)> = Vec::new();
        for t in std::mem::take(&mut self.actions.trials) {
            let fate = AtExit::of_trial(t.doc.irreversible);
            let ending = Ending {
                id: t.id,
                name: &t.name,
                strategy: t.strategy,
                members: &t.doc.members,
                doc: json(&t.doc),
            };
            self.end_at_exit(&ending, fate, t.undo.clone())?;
            said.push((t.signature.clone(), fate.workload_words(t.strategy, t.id)));
        }
        for h in std::mem::take(&mut self.actions.held) {
            let fate = AtExit::of_kept(self.tun.revert_on_stop, h.doc.irreversible);
            // A kept action's undo records live in the journal (enforcing extends them there).
            let undo = match self.store.action(h.id)?.as_ref().map(journal::parse) {
                Some(Ok((_, undo))) => undo,
                Some(Err(e)) => {
                    warn!(action = h.id, "{e}; marking it failed");
                    self.store
                        .journal_set_state(h.id, ActionState::Failed, &e.to_string())?;
                    continue;
                }
                None => Vec::new(),
            };
            let name = self.workload_name(&h.signature);
            let ending = Ending {
                id: h.id,
                name: &name,
                strategy: h.strategy,
                members: &h.doc.members,
                doc: json(&h.doc),
            };
            self.end_at_exit(&ending, fate, undo)?;
            said.push((h.signature.clone(), fate.workload_words(h.strategy, h.id)));
        }
        for w in &mut self.status.workloads {
            let words: Vec<&str> = said
                .iter()
                .filter(|s| s.0 == w.signature)
                .map(|s| s.1.as_str())
                .collect();
            if !words.is_empty() {
                w.state = words.join("; ");
            }
        }
        self.end_start_knobs(kept_pages_stay)?;
        self.status.trials.clear();
        self.status.cpu = self.own_cpu();
        Ok(())
    }

    /// The name status last gave the workload `signature` (else the signature).
    fn workload_name(&self, signature: &str) -> String {
        self.status
            .workloads
            .iter()
            .find(|w| w.signature == signature)
            .map_or_else(|| signature.to_string(), |w| w.name.clone())
    }

    /// Ends one action at exit: undoes what `fate` undoes of `undo`, keeps in the journal what
    /// stays in place, records the state and logs it.
    fn end_at_exit(
        &mut self,
        a: &Ending,
        fate: AtExit,
        undo: Vec<Undo>,
    ) -> Result<(), EngineError> {
        let (undone, stay): (Vec<Undo>, Vec<Undo>) = undo.into_iter().partition(|u| fate.undoes(u));
        let lines = journal::undo_all(&self.fs, a.members, &undone);
        kill_point("engine.stop.undone");
        if fate.state().is_open() && !undone.is_empty() {
            // Still open: `perfpilot revert` and recovery must not undo the knob again.
            self.store.journal_extend(a.id, &a.doc, &json(&stay))?;
        }
        self.store
            .journal_set_state(a.id, fate.state(), fate.words())?;
        let mut line = format!("daemon stopping: {}", fate.words());
        for l in &lines {
            line.push_str("; ");
            line.push_str(l);
        }
        info!(action = a.id, workload = %a.name, strategy = %a.strategy, "{line}");
        Ok(())
    }
}
