//! The optimizer's side of the journal: what an action records before it changes anything, and
//! how recorded actions are undone (by `perfpilot revert`, and by a daemon restarted after a
//! crash).

use perfpilot_store::journal::ActionState;
use perfpilot_store::{ActionRecord, Store};
use perfpilot_sys::change::{self, Change, Restored, Undo};
use perfpilot_sys::failpoint::kill_point;
use perfpilot_sys::{CpuSet, Fs};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::cpu::making_changes;
use crate::signal::SignalKind;

/// What an action changes: journaled (as the `changes` column) before the change is made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionDoc {
    /// The workload's processes as (pid, start time): an undo acts on a pid only while it is
    /// still the same process.
    pub members: Vec<(i32, u64)>,
    /// Every change applied so far, in order.
    pub changes: Vec<Change>,
    /// How its trial is designed (entries journaled before designs were named read as
    /// before/after).
    #[serde(default)]
    pub design: crate::design::DesignKind,
    /// Cannot be undone (huge pages stay): reverting it ends it instead.
    pub irreversible: bool,
    /// The signal the action is judged by (`None`: unverified).
    pub signal: Option<SignalKind>,
    /// For cache affinity: the CPUs the workload is bound to.
    pub bound_to: Option<CpuSet>,
}

/// Errors of journal operations.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] perfpilot_store::Error),
    /// A journal entry's JSON does not parse.
    #[error("action {id}: its journal entry does not parse ({what}): {source}")]
    Corrupt {
        /// The action.
        id: i64,
        /// The column: `changes` or `undo`.
        what: &'static str,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
}

/// The pid an undo record acts on.
pub fn undo_pid(u: &Undo) -> Option<i32> {
    match u {
        Undo::Affinity { pid, .. } | Undo::Pages { pid, .. } | Undo::Collapse { pid, .. } => {
            Some(*pid)
        }
        Undo::Sysfs { .. } | Undo::ScratchFs { .. } => None,
    }
}

/// Whether an undo record can be undone: a collapse cannot (huge pages are not split back).
pub fn is_reversible(u: &Undo) -> bool {
    !matches!(u, Undo::Collapse { .. })
}

/// The start time of a live process (ticks after boot), if it exists.
pub fn starttime(fs: &Fs, pid: i32) -> Option<u64> {
    perfpilot_sys::process::ProcReader::new(fs)
        .stat(pid)
        .ok()
        .map(|s| s.starttime)
}

/// Undoes a list of records, newest first, skipping records of processes that are gone or
/// whose pid now belongs to another process. Returns a line per record for the log, records
/// that say the same once (`… (×2)`: a change of two steps on one process).
pub fn undo_all(fs: &Fs, members: &[(i32, u64)], undos: &[Undo]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, u) in undos.iter().rev().enumerate() {
        if i > 0 {
            kill_point("journal.undo.next");
        }
        if let Some(pid) = undo_pid(u) {
            let expected = members.iter().find(|m| m.0 == pid).map(|m| m.1);
            match (starttime(fs, pid), expected) {
                (None, _) => {
                    out.push(format!("pid {pid} has exited: nothing to restore"));
                    continue;
                }
                (Some(now), Some(then)) if now != then => {
                    out.push(format!("pid {pid} is now another process: left alone"));
                    continue;
                }
                _ => {}
            }
        }
        match making_changes(|| change::undo(fs, u)) {
            Ok(Restored::Affinity(o)) => out.push(format!(
                "restored the affinity of {} threads ({} gone)",
                o.set, o.vanished
            )),
            Ok(Restored::Pages(o)) => out.push(format!(
                "moved {} pages back ({} failed, {} gone)",
                o.moved,
                o.failed_total(),
                o.vanished
            )),
            Ok(Restored::Knob { rel, value }) => out.push(format!("restored /{rel} to {value}")),
            Ok(Restored::ScratchFs { what }) => out.push(what),
            Ok(Restored::Irreversible { what }) => out.push(format!("left in place: {what}")),
            Ok(Restored::Split { what }) => out.push(what),
            Err(e) if e.is_vanished() => out.push(format!("process gone: {e}")),
            Err(e) => out.push(format!("could not restore: {e}")),
        }
    }
    alike_once(out)
}

/// `lines` with each line once, in the order first seen, counted where it came more than once.
fn alike_once(lines: Vec<String>) -> Vec<String> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for l in lines {
        match seen.iter_mut().find(|(s, _)| *s == l) {
            Some((_, n)) => *n += 1,
            None => seen.push((l, 1)),
        }
    }
    seen.into_iter()
        .map(|(l, n)| if n > 1 { format!("{l} (×{n})") } else { l })
        .collect()
}

/// Parses an action's journal entry.
pub fn parse(rec: &ActionRecord) -> Result<(ActionDoc, Vec<Undo>), JournalError> {
    let doc = serde_json::from_str(&rec.changes).map_err(|source| JournalError::Corrupt {
        id: rec.id,
        what: "changes",
        source,
    })?;
    let undo = serde_json::from_str(&rec.undo).map_err(|source| JournalError::Corrupt {
        id: rec.id,
        what: "undo",
        source,
    })?;
    Ok((doc, undo))
}

/// Reverts journaled actions still open (all of them, or those in `ids`), restoring every
/// recorded original state, and marks them `reverted` with `note`. Returns (id, log lines).
pub fn revert_open(
    store: &mut Store,
    fs: &Fs,
    ids: Option<&[i64]>,
    note: &str,
) -> Result<Vec<(i64, Vec<String>)>, JournalError> {
    let mut done = Vec::new();
    for rec in store.actions(true, usize::MAX >> 1)? {
        if ids.is_some_and(|ids| !ids.contains(&rec.id)) {
            continue;
        }
        let (lines, irreversible) = match parse(&rec) {
            Ok((doc, undo)) => (undo_all(fs, &doc.members, &undo), doc.irreversible),
            Err(e) => {
                warn!("{e}");
                (vec![format!("journal entry unreadable: {e}")], false)
            }
        };
        for l in &lines {
            info!(action = rec.id, strategy = %rec.strategy, workload = %rec.workload, "revert: {l}");
        }
        kill_point("revert.undone");
        if irreversible {
            // Huge pages stay: the action ends rather than being undone.
            store.journal_set_state(
                rec.id,
                ActionState::Ended,
                &format!("{note}; its huge pages stay (they cannot be split back cheaply)"),
            )?;
        } else {
            store.journal_set_state(rec.id, ActionState::Reverted, note)?;
        }
        done.push((rec.id, lines));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::alike_once;

    #[test]
    fn lines_that_say_the_same_are_said_once_with_how_many_and_the_rest_keep_their_order() {
        let left = "left in place: 1 collapsed range(s) of pid 7: huge pages are not split back";
        let lines = vec![
            left.to_string(),
            "restored /sys/kernel/mm/x to 1".to_string(),
            left.to_string(),
        ];
        assert_eq!(
            alike_once(lines),
            vec![
                format!("{left} (×2)"),
                "restored /sys/kernel/mm/x to 1".to_string()
            ]
        );
        assert!(alike_once(Vec::new()).is_empty());
    }
}
