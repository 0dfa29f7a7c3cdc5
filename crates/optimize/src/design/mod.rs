//! Trial designs: how an action's effect is measured so that what moves the machine while it is
//! measured cancels out of the verdict. Each design is a state machine over windows of the
//! signal with no access to the system, so that the daemon's trials (`engine::trial`) and the
//! replays of recorded traces (`trace`, `perfpilot bench verdicts`) run the same code.
//!
//! - [`switchback`]: the change switched on and off in seeded periods, judged on the
//!   differences within pairs of periods — for changes that can be undone cheaply;
//! - [`sequential`]: windows before the change, then after it; judged on the signal itself, or
//!   on the ratio of the treated workload to a sibling left as it is (a concurrent control);
//! - [`drift`]: what a before/after comparison on the signal itself allows for the signal's
//!   own wander between its sides, from its windows and its history;
//! - [`one_way`]: the rule for a change that can be neither undone nor compared with a
//!   control: a bounded trial that says exactly what it showed (a gain, or only that there was
//!   no loss worse than a bound), and a watch after the verdict.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::strategy::StrategyKind;

pub mod drift;
pub mod one_way;
pub mod replay;
pub mod sequential;
pub mod switchback;
pub mod windows;

pub use drift::Drift;
pub use one_way::{OneWayRule, Prior, Shown, Watch};
pub use sequential::{Sequential, WindowPlan};
pub use switchback::{PeriodLimits, PeriodPlan, PeriodRefused, Switchback};

/// The CPU the rest of the machine (everything but the judged workload) used in a scan: a
/// build or a batch job starting between the windows compared would be judged as the change's
/// effect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rest {
    /// Busy cores outside the workload.
    pub cores: f64,
    /// The machine's CPUs.
    pub cpus: usize,
}

/// How a design's looks decide.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Looks {
    /// The verdicts' confidence level, shared out over a trial's looks.
    pub confidence: f64,
    /// `min_effect`: the gain a kept action's interval must clear.
    pub min_effect: f64,
    /// `rest_change_max`: how far the rest of the machine may move (0: not checked).
    pub rest_share: f64,
}

/// What a design says after a window.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Go on measuring.
    Continue,
    /// Go on; this is worth journaling and logging.
    Note(String),
    /// The trial is over, and why: its verdict can be taken.
    End(EndReason),
}

/// The design of a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DesignKind {
    /// Seeded on/off periods, judged on the differences within pairs of periods.
    Switchback,
    /// The change on one workload and not on a sibling of the same kind: windows before and
    /// after, judged on the ratio of the two.
    Control,
    /// Windows before the change, then after it (a change that can be undone).
    #[default]
    BeforeAfter,
    /// Windows before and after a change that cannot be undone: bounded in time, with a harm
    /// bound, watched after its verdict.
    OneWay,
}

impl DesignKind {
    /// Its name in `status`, the journal, the metrics and `bench verdicts --design`.
    pub fn as_str(self) -> &'static str {
        match self {
            DesignKind::Switchback => "switchback",
            DesignKind::Control => "control",
            DesignKind::BeforeAfter => "before_after",
            DesignKind::OneWay => "one_way",
        }
    }
}

impl fmt::Display for DesignKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the choice of a design depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// The strategy.
    pub strategy: StrategyKind,
    /// Its change can be undone and made again cheaply (affinity, read-ahead).
    pub cheap_undo: bool,
    /// For large pages: the kernel lets perfpilot split the ranges back (`sys::split`), or
    /// why not.
    pub split: Result<(), String>,
    /// A sibling workload of the same kind that can stand as the control, with its name.
    pub sibling: Option<String>,
    /// A switchback plan for this signal, or why there is none.
    pub periods: Result<PeriodPlan, PeriodRefused>,
}

/// The design chosen for a trial and why, in a sentence for `status` and the journal.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The design.
    pub kind: DesignKind,
    /// Why this one.
    pub why: String,
}

/// Chooses a trial's design: switchback for a change that can be undone cheaply; for one that
/// cannot, a concurrent control where a sibling exists (nothing to undo, and whatever moves
/// the machine moves both), else switchback where the kernel splits huge pages back, else the
/// one-way rule. A change that can be undone but whose signal cannot be switched (periods
/// refused) is measured before and after.
pub fn choose(f: &Facts) -> Choice {
    let switchback = |why: String| Choice {
        kind: DesignKind::Switchback,
        why,
    };
    if f.cheap_undo {
        return match &f.periods {
            Ok(p) => switchback(format!(
                "switchback: {} is undone cheaply; periods of {} windows ({} settling)",
                f.strategy,
                p.period(),
                p.settle
            )),
            Err(r) => Choice {
                kind: DesignKind::BeforeAfter,
                why: format!("before and after: no switchback, {}", r.why),
            },
        };
    }
    if let Some(s) = &f.sibling {
        return Choice {
            kind: DesignKind::Control,
            why: format!("a concurrent control: {s} is left as it is and judged beside it"),
        };
    }
    match (&f.split, &f.periods) {
        (Ok(()), Ok(p)) => switchback(format!(
            "switchback: huge pages are split back between periods; periods of {} windows ({} settling)",
            p.period(),
            p.settle
        )),
        (Err(split), _) => Choice {
            kind: DesignKind::OneWay,
            why: format!(
                "one-way: no sibling to compare with and huge pages cannot be split back here ({split})"
            ),
        },
        (Ok(()), Err(r)) => Choice {
            kind: DesignKind::OneWay,
            why: format!(
                "one-way: no sibling to compare with, and no switchback: {}",
                r.why
            ),
        },
    }
}

/// Why a trial ended: `status`, the journal's verdict and the metrics all use it.
#[derive(Debug, Clone, PartialEq)]
pub enum EndReason {
    /// Its design ended it (every planned window measured, or a look decided).
    Complete,
    /// Its workload exited.
    WorkloadExited,
    /// Its signal failed more times in a row than a side has windows.
    SignalFailed {
        /// Failures in a row.
        times: u32,
        /// The last error.
        error: String,
    },
    /// Someone changed the mask perfpilot set: the workload is now manually tuned.
    ManualMask {
        /// The process.
        pid: i32,
        /// Its mask now.
        mask: String,
    },
    /// None of its steps changed anything.
    NothingApplied {
        /// What the last step said.
        problem: String,
    },
    /// Its signal did not settle.
    NotSettled {
        /// Windows dropped as transients.
        dropped: usize,
    },
    /// Its processes restarted: the windows span two servers.
    Restarted {
        /// The new pid.
        pid: i32,
    },
    /// The rest of the machine moved between the windows compared.
    RestMoved {
        /// Busy cores before the change.
        before: f64,
        /// Busy cores after it.
        after: f64,
    },
    /// The control sibling exited or restarted, and the trial could not go on without it.
    ControlLost {
        /// The control's name.
        control: String,
    },
    /// Splitting huge pages back was refused mid-trial.
    SplitRefused {
        /// What the kernel said.
        error: String,
    },
    /// A one-way trial reached its time bound (`verdict_within_s`, windows dropped as
    /// transients having cost it time): judged on the windows it has.
    TimeBound {
        /// Seconds since it started.
        after_s: f64,
    },
}

impl EndReason {
    /// A trial so ended is judged on its windows (`Complete`, or a one-way trial at its time
    /// bound).
    pub fn judged(&self) -> bool {
        matches!(self, EndReason::Complete | EndReason::TimeBound { .. })
    }

    /// A trial so ended has no verdict on the strategy: undone, not judged, not backed off.
    pub fn abandoned(&self) -> bool {
        matches!(
            self,
            EndReason::Restarted { .. } | EndReason::RestMoved { .. }
        )
    }

    /// Its name in the metrics (`perfpilot_trials_ended_total{reason=…}`).
    pub fn label(&self) -> &'static str {
        match self {
            EndReason::Complete => "complete",
            EndReason::WorkloadExited => "workload_exited",
            EndReason::SignalFailed { .. } => "signal_failed",
            EndReason::ManualMask { .. } => "manual",
            EndReason::NothingApplied { .. } => "nothing_applied",
            EndReason::NotSettled { .. } => "not_settled",
            EndReason::Restarted { .. } => "restarted",
            EndReason::RestMoved { .. } => "rest_moved",
            EndReason::ControlLost { .. } => "control_lost",
            EndReason::SplitRefused { .. } => "split_refused",
            EndReason::TimeBound { .. } => "time_bound",
        }
    }

    /// Every label, for metrics that show each at zero.
    pub const LABELS: [&'static str; 11] = [
        "complete",
        "workload_exited",
        "signal_failed",
        "manual",
        "nothing_applied",
        "not_settled",
        "restarted",
        "rest_moved",
        "control_lost",
        "split_refused",
        "time_bound",
    ];
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::Complete => f.write_str("its windows are complete"),
            EndReason::WorkloadExited => f.write_str("its workload exited"),
            EndReason::SignalFailed { times, error } => {
                write!(f, "its signal failed {times} times in a row: {error}")
            }
            EndReason::ManualMask { pid, mask } => write!(
                f,
                "manually tuned: pid {pid} affinity changed to {mask} behind perfpilot's back; left as it is"
            ),
            EndReason::NothingApplied { problem } => {
                write!(f, "nothing could be applied: {problem}")
            }
            EndReason::NotSettled { dropped } => write!(
                f,
                "its signal did not settle: {dropped} windows dropped as transients"
            ),
            EndReason::Restarted { pid } => write!(
                f,
                "its processes restarted during the trial (now pid {pid}); abandoned, not judged"
            ),
            EndReason::RestMoved { before, after } => write!(
                f,
                "the rest of the machine changed during the trial: other processes used {before:.2} cores before the change and {after:.2} after (more than rest_change_max allows); abandoned, not judged"
            ),
            EndReason::ControlLost { control } => write!(
                f,
                "its control {control} exited or restarted, and too few windows were left to judge without it"
            ),
            EndReason::SplitRefused { error } => write!(
                f,
                "splitting its huge pages back was refused ({error}); ended, its pages stay"
            ),
            EndReason::TimeBound { after_s } => write!(
                f,
                "it reached its time bound ({after_s:.0} s) before its windows were complete"
            ),
        }
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
