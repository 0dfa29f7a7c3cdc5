//! Making changes: each change's undo record is journaled before the change is made, and what
//! a change did is said in a line for the log.

use perfpilot_store::Store;
use perfpilot_sys::Fs;
use perfpilot_sys::change::{self, Applied, Change, Undo};
use perfpilot_sys::collapse::{CollapseFailure, CollapseOutcome};
use perfpilot_sys::failpoint::kill_point;
use serde::Serialize;
use tracing::warn;

use super::EngineError;
use crate::cpu::making_changes;
use crate::journal::ActionDoc;

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
    // Preparing reads what the change will overwrite (for pages, the node of each): its cost
    // is part of making the change.
    let u = match making_changes(|| change::prepare(fs, &c)) {
        Ok(u) => u,
        Err(e) => {
            warn!(action = id, "cannot prepare {}: {e}", describe(&c));
            return Ok(None);
        }
    };
    doc.changes.push(c.clone());
    undo.push(u);
    store.journal_extend(id, &json(doc), &json(undo))?;
    kill_point("engine.step.journaled");
    let applied = making_changes(|| change::apply(fs, &c));
    kill_point("engine.step.applied");
    match applied {
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
        if let Err(e) = making_changes(|| change::apply(fs, c)) {
            warn!(action = id, "re-applying {}: {e}", describe(c));
        }
    }
}

/// What an applied step did, for the log.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct StepOutcome {
    /// It changed something.
    pub(super) effective: bool,
    /// What it did, in a line (logged at INFO, or WARN when it changed nothing).
    pub(super) summary: String,
    /// The detail behind the summary, a line each (logged at DEBUG): each range that failed.
    pub(super) details: Vec<String>,
}

/// What the step `c` did, as `a` reports it.
pub(super) fn outcome(c: &Change, a: &Applied) -> StepOutcome {
    let (effective, summary) = match a {
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
            let tried = match c {
                Change::Collapse { ranges, .. } => ranges.iter().map(|r| r.1).sum(),
                _ => o.bytes_ok,
            };
            let details = o
                .failed
                .iter()
                .map(|f| format!("not collapsed: {f}"))
                .collect();
            return StepOutcome {
                effective: o.bytes_ok > 0,
                summary: collapse_summary(tried, o),
                details,
            };
        }
        Applied::Knob { rel, value } => (true, format!("/{rel} = {value}")),
        Applied::ScratchFs { device, mount } => (
            true,
            format!("/dev/{device} mounted on {}", mount.display()),
        ),
    };
    StepOutcome {
        effective,
        summary,
        details: Vec::new(),
    }
}

/// A collapse step in a line: MiB collapsed of MiB tried, then the ranges that were not,
/// grouped by reason with their count and size (partial steps are normal: ranges with nothing
/// populated in them cannot be collapsed), then what the process exiting left untried.
fn collapse_summary(tried: u64, o: &CollapseOutcome) -> String {
    let mut s = format!("{} of {} MiB collapsed", mib(o.bytes_ok), mib(tried));
    let mut groups: Vec<(CollapseFailure, usize, u64)> = Vec::new();
    for f in &o.failed {
        match groups.iter_mut().find(|g| g.0 == f.reason) {
            Some(g) => (g.1, g.2) = (g.1 + 1, g.2 + f.len),
            None => groups.push((f.reason, 1, f.len)),
        }
    }
    let ranges = |n: usize| if n == 1 { "range" } else { "ranges" };
    match groups.as_slice() {
        [] => {}
        [(reason, n, bytes)] => s.push_str(&format!(
            "; {n} {} ({} MiB) skipped: {}",
            ranges(*n),
            mib(*bytes),
            failure_words(*reason)
        )),
        _ => {
            let (n, bytes) = groups.iter().fold((0, 0), |a, g| (a.0 + g.1, a.1 + g.2));
            let each: Vec<String> = groups
                .iter()
                .map(|(reason, n, bytes)| {
                    format!("{n} ({} MiB) {}", mib(*bytes), failure_words(*reason))
                })
                .collect();
            s.push_str(&format!(
                "; {n} {} ({} MiB) skipped: {}",
                ranges(n),
                mib(bytes),
                each.join(", ")
            ));
        }
    }
    if o.vanished_bytes > 0 {
        s.push_str(&format!(
            "; {} MiB not tried: the process exited",
            mib(o.vanished_bytes)
        ));
    }
    s
}

/// Why a range was not collapsed, in a few words (the full reason is logged at DEBUG).
fn failure_words(f: CollapseFailure) -> &'static str {
    match f {
        CollapseFailure::Busy => "pages busy (may work later)",
        CollapseFailure::Charge => "not chargeable to the memory cgroup, or too sparsely populated",
        CollapseFailure::NoMemory => "no free huge page (or not mapped)",
        CollapseFailure::Ineligible => "not populated (or not eligible for huge pages)",
        CollapseFailure::Other => "unexpected error",
    }
}

/// Bytes in MiB, rounded.
fn mib(bytes: u64) -> u64 {
    (bytes + (1 << 19)) >> 20
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
        Change::ScratchFs { spec } => format!(
            "{} on a loop device at {}",
            spec.fstype,
            spec.mount.display()
        ),
    }
}
