//! Making changes: each change's undo record is journaled before the change is made, and what
//! a change did is said in a line for the log.

use perfpilot_store::Store;
use perfpilot_sys::Fs;
use perfpilot_sys::change::{self, Applied, Change, Undo};
use serde::Serialize;
use tracing::warn;

use super::EngineError;
use crate::journal::{self, ActionDoc};

/// Applies `c` after journaling its undo record (extending action `id`). `None` when it could
/// not be prepared or applied (logged): the trial goes on without it.
pub(super) fn journal_and_apply(
    store: &mut Store,
    fs: &Fs,
    id: i64,
    doc: &mut ActionDoc,
    undo: &mut Vec<Undo>,
    c: Change,
) -> Result<Option<Applied>, EngineError> {
    let u = match change::prepare(fs, &c) {
        Ok(u) => u,
        Err(e) => {
            warn!(action = id, "cannot prepare {}: {e}", describe(&c));
            return Ok(None);
        }
    };
    doc.changes.push(c.clone());
    undo.push(u);
    store.journal_extend(id, &json(doc), &json(undo))?;
    match journal::timed(|| change::apply(fs, &c)) {
        Ok(a) => Ok(Some(a)),
        Err(e) => {
            warn!(action = id, "applying {} failed: {e}", describe(&c));
            Ok(None)
        }
    }
}

/// Makes again the changes of action `id`, already journaled (an interleaved trial switched
/// back on, a trial kept while off); a failure is logged.
pub(super) fn reapply(fs: &Fs, id: i64, changes: &[Change]) {
    for c in changes {
        if let Err(e) = journal::timed(|| change::apply(fs, c)) {
            warn!(action = id, "re-applying {}: {e}", describe(c));
        }
    }
}

/// Whether an applied step changed anything, and a line saying what it did.
pub(super) fn outcome(a: &Applied) -> (bool, String) {
    match a {
        Applied::Affinity(o) => (
            o.set > 0,
            format!("{} threads bound ({} gone)", o.set, o.vanished),
        ),
        Applied::Pages(o) => (
            o.moved > 0,
            format!(
                "{} pages on the target node, {} failed {:?}, {} gone",
                o.moved,
                o.failed_total(),
                o.failed,
                o.vanished
            ),
        ),
        Applied::Collapse(o) => {
            let failures: Vec<String> = o.failed.iter().take(3).map(|f| f.to_string()).collect();
            (
                o.bytes_ok > 0,
                format!(
                    "{} MiB collapsed in {} ranges, {} ranges failed{}",
                    o.bytes_ok >> 20,
                    o.ranges_ok,
                    o.failed.len(),
                    if failures.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", failures.join("; "))
                    }
                ),
            )
        }
        Applied::Knob { rel, value } => (true, format!("/{rel} = {value}")),
    }
}

/// Replaces an affinity change's thread list with the member's current threads.
pub(super) fn refresh_tids(c: Change, members: &[(i32, Vec<i32>)]) -> Change {
    match c {
        Change::Affinity { pid, cpus, tids } => {
            let now = members
                .iter()
                .find(|m| m.0 == pid)
                .map(|m| m.1.clone())
                .unwrap_or(tids);
            Change::Affinity {
                pid,
                tids: now,
                cpus,
            }
        }
        other => other,
    }
}

/// JSON text for the journal (an error object in the impossible case it does not serialize).
pub(super) fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// A one-line description of a change for logs.
pub fn describe(c: &Change) -> String {
    match c {
        Change::Affinity { pid, tids, cpus } => {
            format!("affinity of {} threads of pid {pid} -> {cpus}", tids.len())
        }
        Change::MovePages { pid, pages, node } => {
            format!("move {} pages of pid {pid} -> node {node}", pages.len())
        }
        Change::Collapse { pid, ranges } => format!(
            "collapse {} MiB of pid {pid}",
            ranges.iter().map(|r| r.1).sum::<u64>() >> 20
        ),
        Change::Sysfs { rel, value } => format!("/{rel} -> {value}"),
    }
}
