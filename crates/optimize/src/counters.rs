//! Running totals of what the daemon did since it started, for its `/metrics` endpoint: bytes
//! collapsed into huge pages and moved between nodes, ranges that did not collapse and probe
//! reads that failed, by kind. Process-wide atomics: the engine adds at the one place each
//! happens, the exporter reads them; nothing else depends on them.

use std::sync::atomic::{AtomicU64, Ordering};

use perfpilot_sys::change::Applied;
use perfpilot_sys::collapse::CollapseFailure;

use crate::design::EndReason;
use crate::signal::ProbeError;

/// Why a signal read failed, as `/metrics` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeFailure {
    /// No answer within `probe_timeout_s`.
    Timeout,
    /// The probe could not be run or answered with an error.
    Failed,
    /// A command probe printed something that is not a number.
    Garbage,
    /// An HTTP probe's page lacks the metric.
    Missing,
    /// A built-in application preset did not answer.
    Preset,
}

impl ProbeFailure {
    /// Every kind, in label order.
    pub const ALL: [ProbeFailure; 5] = [
        ProbeFailure::Timeout,
        ProbeFailure::Failed,
        ProbeFailure::Garbage,
        ProbeFailure::Missing,
        ProbeFailure::Preset,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeFailure::Timeout => "timeout",
            ProbeFailure::Failed => "failed",
            ProbeFailure::Garbage => "garbage",
            ProbeFailure::Missing => "missing",
            ProbeFailure::Preset => "preset",
        }
    }

    /// The kind of a probe error.
    pub fn of(e: &ProbeError) -> ProbeFailure {
        match e {
            ProbeError::Timeout { .. } => ProbeFailure::Timeout,
            ProbeError::Failed { .. } => ProbeFailure::Failed,
            ProbeError::Garbage { .. } => ProbeFailure::Garbage,
            ProbeError::Missing { .. } => ProbeFailure::Missing,
        }
    }
}

/// Every collapse failure kind, in label order.
pub const COLLAPSE_FAILURES: [CollapseFailure; 5] = [
    CollapseFailure::Busy,
    CollapseFailure::Charge,
    CollapseFailure::NoMemory,
    CollapseFailure::Ineligible,
    CollapseFailure::Other,
];

/// The label value of a collapse failure kind.
pub fn collapse_label(f: CollapseFailure) -> &'static str {
    match f {
        CollapseFailure::Busy => "busy",
        CollapseFailure::Charge => "charge",
        CollapseFailure::NoMemory => "no_memory",
        CollapseFailure::Ineligible => "ineligible",
        CollapseFailure::Other => "other",
    }
}

/// The totals (see the module's comment).
pub struct Counters {
    collapsed_bytes: AtomicU64,
    migrated_bytes: AtomicU64,
    collapse_failures: [AtomicU64; 5],
    probe_failures: [AtomicU64; 5],
    trials_ended: [AtomicU64; EndReason::LABELS.len()],
}

/// The process's totals.
pub static COUNTERS: Counters = Counters {
    collapsed_bytes: AtomicU64::new(0),
    migrated_bytes: AtomicU64::new(0),
    collapse_failures: [const { AtomicU64::new(0) }; 5],
    probe_failures: [const { AtomicU64::new(0) }; 5],
    trials_ended: [const { AtomicU64::new(0) }; EndReason::LABELS.len()],
};

/// What the totals were at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Bytes collapsed into huge pages.
    pub collapsed_bytes: u64,
    /// Bytes moved to another NUMA node.
    pub migrated_bytes: u64,
    /// Ranges that did not collapse, by kind (label, count).
    pub collapse_failures: Vec<(&'static str, u64)>,
    /// Failed signal reads, by kind (label, count).
    pub probe_failures: Vec<(&'static str, u64)>,
    /// Trials ended, by why (`design::EndReason` labels, count).
    pub trials_ended: Vec<(&'static str, u64)>,
}

impl Counters {
    /// Counts what an applied step did (`page_size` converts moved pages to bytes).
    pub fn applied(&self, a: &Applied, page_size: u64) {
        match a {
            Applied::Pages(o) => {
                self.migrated_bytes
                    .fetch_add(o.moved.saturating_mul(page_size), Ordering::Relaxed);
            }
            Applied::Collapse(o) => {
                self.collapsed_bytes
                    .fetch_add(o.bytes_ok, Ordering::Relaxed);
                for f in &o.failed {
                    let i = COLLAPSE_FAILURES
                        .iter()
                        .position(|k| *k == f.reason)
                        .unwrap_or(COLLAPSE_FAILURES.len() - 1);
                    self.collapse_failures[i].fetch_add(1, Ordering::Relaxed);
                }
            }
            Applied::Affinity(_) | Applied::Knob { .. } | Applied::ScratchFs { .. } => {}
        }
    }

    /// Counts a failed signal read.
    pub fn probe_failed(&self, kind: ProbeFailure) {
        let i = ProbeFailure::ALL
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(0);
        self.probe_failures[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a trial that ended, by the label of why.
    pub fn trial_ended(&self, label: &str) {
        if let Some(i) = EndReason::LABELS.iter().position(|l| *l == label) {
            self.trials_ended[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The totals now.
    pub fn totals(&self) -> Totals {
        Totals {
            collapsed_bytes: self.collapsed_bytes.load(Ordering::Relaxed),
            migrated_bytes: self.migrated_bytes.load(Ordering::Relaxed),
            collapse_failures: COLLAPSE_FAILURES
                .iter()
                .zip(&self.collapse_failures)
                .map(|(k, n)| (collapse_label(*k), n.load(Ordering::Relaxed)))
                .collect(),
            probe_failures: ProbeFailure::ALL
                .iter()
                .zip(&self.probe_failures)
                .map(|(k, n)| (k.as_str(), n.load(Ordering::Relaxed)))
                .collect(),
            trials_ended: EndReason::LABELS
                .iter()
                .zip(&self.trials_ended)
                .map(|(k, n)| (*k, n.load(Ordering::Relaxed)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfpilot_sys::change::PagesOutcome;
    use perfpilot_sys::collapse::{CollapseOutcome, RangeFailure};

    #[test]
    fn applied_steps_add_their_bytes_and_failures_by_kind() {
        let c = Counters {
            collapsed_bytes: AtomicU64::new(0),
            migrated_bytes: AtomicU64::new(0),
            collapse_failures: [const { AtomicU64::new(0) }; 5],
            probe_failures: [const { AtomicU64::new(0) }; 5],
            trials_ended: [const { AtomicU64::new(0) }; EndReason::LABELS.len()],
        };
        c.applied(
            &Applied::Pages(PagesOutcome {
                moved: 3,
                ..Default::default()
            }),
            4096,
        );
        c.applied(
            &Applied::Collapse(CollapseOutcome {
                ranges_ok: 1,
                bytes_ok: 2 << 20,
                failed: vec![RangeFailure {
                    start: 0,
                    len: 2 << 20,
                    reason: CollapseFailure::Busy,
                    errno: 11,
                }],
                vanished_bytes: 0,
            }),
            4096,
        );
        c.probe_failed(ProbeFailure::Timeout);
        c.probe_failed(ProbeFailure::Timeout);
        c.trial_ended("control_lost");
        let t = c.totals();
        assert_eq!(t.migrated_bytes, 3 * 4096);
        assert_eq!(t.collapsed_bytes, 2 << 20);
        assert_eq!(t.collapse_failures[0], ("busy", 1));
        assert_eq!(t.collapse_failures[1], ("charge", 0));
        assert_eq!(t.probe_failures[0], ("timeout", 2));
        assert!(t.trials_ended.contains(&("control_lost", 1)), "{t:?}");
    }
}
