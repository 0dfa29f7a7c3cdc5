//! Choosing a trial's design when a strategy proposes an action (`crate::design::choose`): what
//! the change costs to undo, whether the kernel splits huge pages back, a sibling to stand as
//! the control, the periods the signal allows, and for a one-way change its time bound and the
//! prior from earlier verdicts of the same strategy on the same kind of server.

use perfpilot_observe::Rates;
use perfpilot_observe::workload::Workload;
use perfpilot_sys::change::Change;

use super::Engine;
use super::control::{Control, Sibling};
use super::steady::last_steady;
use super::verdict::Verdict;
use crate::design::Drift;
use crate::design::one_way::{self, OneWayRule, Prior};
use crate::design::{self, DesignKind, Facts, PeriodLimits, PeriodPlan};
use crate::signal::{SignalKind, SpanWindow};
use crate::strategy::StrategyKind;

/// The least spread of a prior from earlier verdicts (on the log scale): however alike they
/// were, the next trial's effect is not known better than to a few per cent.
const PRIOR_FLOOR_SD: f64 = 0.03;

/// Pairs of periods before a switchback trial's first look.
const PAIRS_MIN: usize = 3;

/// What a proposal's trial is designed as.
pub(super) struct Planned {
    pub(super) kind: DesignKind,
    pub(super) why: String,
    pub(super) control: Option<Control>,
    pub(super) limits: PeriodLimits,
    /// The time bound (and, one-way, the prior) of a change that cannot be undone.
    pub(super) one_way: Option<OneWayRule>,
    /// What a before/after comparison on the signal allows for its drift.
    pub(super) drift: Drift,
    /// The change cannot be undone (for large pages: not split back).
    pub(super) irreversible: bool,
    /// A sibling whose signal is not steady yet: the trial waits a scan to judge against it.
    pub(super) wait_for: Option<String>,
    /// The seconds of the signal a trial judged before and after watches unchanged before it
    /// starts (0: none).
    pub(super) history_s: f64,
}

impl Planned {
    /// No design: a change applied without a trial (`allow_unverified`).
    pub(super) fn unverified(irreversible: bool) -> Planned {
        Planned {
            kind: DesignKind::BeforeAfter,
            why: "unverified: applied without a trial".into(),
            control: None,
            limits: PeriodLimits {
                window_s: 1.0,
                settle_s: 0.0,
                period_max_s: 1.0,
                budget_windows: 0,
                pairs_min: 0,
                switch_s: 0.0,
                within_s: 0.0,
                spent_s: 0.0,
            },
            one_way: None,
            drift: Drift::default(),
            irreversible,
            wait_for: None,
            history_s: 0.0,
        }
    }
}

/// Whether a trial of `kind` takes the one-way rule (its time bound and no-harm keep): a change
/// that cannot be undone, judged one-way or against a control (ending it neutral would leave it
/// in place all the same); not one that can be undone.
fn bounded(kind: DesignKind, irreversible: bool) -> bool {
    match kind {
        DesignKind::OneWay => true,
        DesignKind::Control => irreversible,
        _ => false,
    }
}

/// What kind of server a workload is, as priors group verdicts: its preset, else its command.
pub(super) fn server_kind(w: &Workload, signal: Option<&SignalKind>) -> String {
    match signal {
        Some(SignalKind::Preset { preset, .. }) => preset.clone(),
        _ => w.comm.clone(),
    }
}

impl Engine {
    /// The length of `judge`'s signal windows, seconds.
    fn window_s(&self, judge: &str) -> f64 {
        self.watch
            .signals
            .servers
            .window_s(judge)
            .unwrap_or(self.tun.interval_s)
            .max(self.tun.interval_s)
    }

    /// The design of a trial of `kind` on `w` judged by `signal`, whose change is `changes`
    /// (paced steps; `cheap_undo`: the strategy undoes it cheaply; `irreversible`: it cannot be
    /// undone unless huge pages can be split); `steady` are the gate's readings of the signal
    /// so far (the workload's history, its last ones steady).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan_design(
        &mut self,
        w: &Workload,
        kind: StrategyKind,
        changes: &[Change],
        cheap_undo: bool,
        irreversible: bool,
        signal: &SignalKind,
        workloads: &[Workload],
        rates: &Rates,
        steady: &[f64],
    ) -> Planned {
        let window_s = self.window_s(&w.signature);
        // A switch of huge pages (a collapse or a split) runs inside the scan, so the one
        // window that spans it is dropped, however long it took; a read-ahead change reaches
        // only the reads issued after it; a thread's new mask takes hold at once.
        let settle_s = match kind {
            StrategyKind::LargePages | StrategyKind::ReadAhead => {
                self.tun.switch_settle_s.max(window_s)
            }
            StrategyKind::CacheAffinity | StrategyKind::MemoryAffinity => self.tun.switch_settle_s,
        };
        let limits = PeriodLimits {
            window_s,
            settle_s,
            period_max_s: self.tun.period_max_s,
            budget_windows: 2 * self.tun.max_windows as usize,
            pairs_min: PAIRS_MIN,
            switch_s: 0.0,
            within_s: self.tun.verdict_within_s,
            spent_s: 0.0,
        };
        let split = if kind == StrategyKind::LargePages {
            // Without debugfs, private anonymous memory alone is split back (`sys::split`).
            self.watch.split_supported.clone().or_else(|why| {
                let private = changes.iter().all(|c| match c {
                    Change::Collapse { pid, ranges } => {
                        perfpilot_sys::split::cold_covers(&self.fs, *pid, ranges)
                    }
                    _ => false,
                });
                if private {
                    Ok(())
                } else {
                    Err(format!(
                        "{why}; private memory alone is split back without it"
                    ))
                }
            })
        } else {
            Err("not huge pages".into())
        };
        let (control, wait_for, passed_over) = match cheap_undo {
            true => (None, None, Vec::new()),
            false => match self.sibling(w, kind, signal, workloads, rates) {
                Sibling::Found(c) => (Some(c), None, Vec::new()),
                Sibling::Wait(name) => (None, Some(name), Vec::new()),
                Sibling::None(why) => (None, None, why),
            },
        };
        let facts = Facts {
            strategy: kind,
            cheap_undo,
            split: split.clone(),
            sibling: control
                .as_ref()
                .map(|c| format!("{}, {},", c.name, c.cpus.describe())),
            periods: PeriodPlan::for_signal(last_steady(steady), &limits),
        };
        let mut choice = design::choose(&facts);
        if choice.kind == DesignKind::OneWay && !passed_over.is_empty() {
            choice.why = format!("{}; not a control: {}", choice.why, passed_over.join("; "));
        }
        let recap = Recap {
            window_s,
            min: self.tun.window_count(),
        };
        let irreversible = irreversible && !(kind == StrategyKind::LargePages && split.is_ok());
        // A change that cannot be undone is judged within the time bound, one-way or against a
        // control; the prior of earlier verdicts is for the one-way rule alone.
        let one_way = bounded(choice.kind, irreversible).then(|| {
            // The cap counts windows as they are read, at scans as the budget spaces them now.
            let scan_s = rates.interval_s.max(self.tun.interval_s);
            OneWayRule {
                no_harm: Some(self.tun.harm_bound),
                windows_cap: recap.cap(self.tun.verdict_within_s, scan_s, changes.len(), 0.0, 0),
                prior: (choice.kind == DesignKind::OneWay)
                    .then(|| self.prior(kind, &server_kind(w, Some(signal))))
                    .flatten(),
                within_s: self.tun.verdict_within_s,
            }
        });
        // A design judged on the signal itself first watches it unchanged; a controlled trial
        // carries the history too, for the case its control exits.
        let judged_on_signal = Drift::of_design(choice.kind, self.tun.drift_floor);
        let history_s = match judged_on_signal {
            Some(_) => self.tun.one_way_history_s.max(0.0),
            None => 0.0,
        };
        let drift = Drift {
            history: steady.to_vec(),
            ..judged_on_signal.unwrap_or_default()
        };
        if history_s > 0.0 && !steady.is_empty() {
            choice.why = format!(
                "{}; its interval allows for how far its signal moved on its own over the {} windows watched before the change",
                choice.why,
                steady.len()
            );
        }
        Planned {
            kind: choice.kind,
            why: choice.why,
            control: control.filter(|_| choice.kind == DesignKind::Control),
            limits,
            one_way,
            drift,
            irreversible,
            wait_for,
            history_s,
        }
    }

    /// Earlier verdicts of `kind` on servers of `server` that ended complete with a gain
    /// (neutral ones too: leaving them out would leave only the lucky ones), as a prior; `None`
    /// with fewer than two.
    pub(super) fn prior(&self, kind: StrategyKind, server: &str) -> Option<Prior> {
        let records = self.store.actions(false, 1000).ok()?;
        let gains: Vec<_> = records
            .iter()
            .filter(|r| r.strategy == kind.as_str())
            .filter_map(|r| serde_json::from_str::<Verdict>(r.verdict.as_deref()?).ok())
            .filter(|v| v.kind == server && v.ended == "complete")
            .filter_map(|v| v.gain)
            .collect();
        Prior::from_gains(&gains, &format!("{kind} on {server}"), PRIOR_FLOOR_SD)
    }
}

/// How a trial bounded in time (one-way, or a controlled one of a change that cannot be undone)
/// counts its cap on its windows a side: from what is left of its time
/// bound, at the scans as they are spaced when it is counted. The trial counts it again at every
/// scan until it fixes its windows a side: a scan stretched by the CPU budget while a server
/// started, and short again by the time the trial ran, would leave half the bound unused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Recap {
    /// The judged signal's window, seconds.
    pub(super) window_s: f64,
    /// The fewest windows a side (`windows`).
    pub(super) min: usize,
}

impl Recap {
    /// The windows a side that fit in `within_s`, `spent_s` into the trial with `have` windows
    /// before the change already measured and `steps` changes still to apply (one a scan), at
    /// scans `scan_s` apart; at least `min`.
    pub(super) fn cap(
        &self,
        within_s: f64,
        scan_s: f64,
        steps: usize,
        spent_s: f64,
        have: usize,
    ) -> usize {
        let every = SpanWindow::span_s(self.window_s, scan_s);
        // The windows already measured need not be measured again: their time is not left.
        let left_s = within_s - spent_s + have as f64 * every;
        one_way::windows_cap(left_s, steps as f64 * scan_s, every, self.min)
    }
}

#[cfg(test)]
mod tests {
    use super::{Recap, bounded};
    use crate::design::DesignKind;

    #[test]
    fn a_change_that_cannot_be_undone_may_be_kept_as_no_harm_one_way_or_against_a_control() {
        assert!(bounded(DesignKind::OneWay, true));
        assert!(bounded(DesignKind::Control, true));
        // Huge pages split back, memory affinity moved back: a neutral one is undone.
        assert!(!bounded(DesignKind::Control, false));
        assert!(!bounded(DesignKind::Switchback, false));
        assert!(!bounded(DesignKind::BeforeAfter, false));
    }

    #[test]
    fn a_one_way_cap_counted_again_at_shorter_scans_fits_more_windows_in_what_is_left() {
        let r = Recap {
            window_s: 8.0,
            min: 6,
        };
        // Planned at scans stretched to 9.6 s: an 8-s window read every 9.6 s, two changes.
        assert_eq!(r.cap(300.0, 9.6, 2, 0.0, 0), 14);
        // Counted again at 3.3-s scans (a window every 6.6 s) with three windows measured in
        // the 19.8 s spent: what is left holds 22 a side.
        assert_eq!(r.cap(300.0, 3.3, 2, 19.8, 3), 22);
        // Time lost to dropped windows is not given back, and the fewest windows are kept.
        assert_eq!(r.cap(300.0, 3.3, 2, 200.0, 3), 8);
        assert_eq!(r.cap(300.0, 3.3, 2, 260.0, 3), 6);
    }
}
