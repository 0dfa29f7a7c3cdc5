//! Trials: an action is journaled, measured in the design chosen for it (`crate::design`), its
//! steps applied (one per scan), switched on and off where its design asks, until the design
//! ends it; the verdict and what follows it are `verdict.rs`'s. A trial is one shared core
//! (what is changed, on whom, by which signal) and one design's state.

use std::collections::{HashMap, VecDeque};

use perfpilot_observe::workload::Workload;
use perfpilot_stats::mean;
use perfpilot_store::Store;
use perfpilot_store::journal::ActionState;
use perfpilot_sys::Fs;
use perfpilot_sys::change::{Change, Undo};
use perfpilot_sys::failpoint::kill_point;
use serde::Serialize;
use tracing::{debug, info, warn};

use super::apply::{journal_and_apply, json, outcome, reapply, refresh_tids};
use super::control::{Control, Pairing};
use super::enforce::{bind_new_threads, changed_mask};
use super::plan::{Planned, Recap};
use super::watch::Window;
use super::{Engine, EngineError};
use crate::design::{
    DesignKind, EndReason, PeriodLimits, PeriodPlan, Sequential, Step, Switchback, WindowPlan,
};
use crate::journal::{self, ActionDoc};
use crate::signal::SignalKind;
use crate::strategy::StrategyKind;

/// Where a trial is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Phase {
    /// Windows before the change.
    Baseline,
    /// Applying a paced change, one step per scan.
    Applying,
    /// The change made: windows after it, or periods on and off.
    Measuring,
}

/// A switchback trial: a baseline that plans its periods, then the periods.
#[derive(Debug, Clone)]
pub(super) struct SwitchbackTrial {
    /// The baseline windows, until the periods are planned.
    pub(super) baseline: Vec<f64>,
    /// What bounds the periods.
    pub(super) limits: PeriodLimits,
    /// The running periods, once planned.
    pub(super) periods: Option<Switchback>,
    /// The seed of the periods' order.
    pub(super) seed: u64,
    /// Whether a larger signal is better.
    pub(super) hib: bool,
    /// Seconds each switch took (the first making of the change counts as one).
    pub(super) switch_times: Vec<f64>,
    /// Seconds the paced steps of the first making took so far.
    pub(super) applying_s: f64,
}

/// A trial's design and its state.
#[derive(Debug, Clone)]
pub(super) enum Design {
    /// Before and after: on the signal, or on its ratio to a control; one-way or not.
    Sequential(Sequential),
    /// Periods on and off.
    Switchback(SwitchbackTrial),
}

/// A running trial.
pub(super) struct Trial {
    pub(super) id: i64,
    pub(super) signature: String,
    pub(super) name: String,
    pub(super) strategy: StrategyKind,
    pub(super) doc: ActionDoc,
    pub(super) undo: Vec<Undo>,
    /// The steps still to apply.
    pub(super) steps: VecDeque<Change>,
    pub(super) phase: Phase,
    /// The change is in effect now.
    pub(super) on: bool,
    /// The shadow proxy's observations without and with the change (windows where both it and
    /// the signal were read).
    pub(super) shadow_off: Vec<f64>,
    /// As `shadow_off`, with the change.
    pub(super) shadow_on: Vec<f64>,
    /// The workload whose signal judges the action (itself, or for a device, its top reader).
    pub(super) judge: String,
    /// `None`: unverified (allow_unverified): applied, paced, and kept without a verdict.
    pub(super) signal: Option<SignalKind>,
    /// Signal failures in a row.
    pub(super) failures: u32,
    pub(super) reason: String,
    /// Whether any step changed anything (a step can fail whole: no free huge pages, …).
    pub(super) effective: bool,
    /// What the last ineffective step said.
    pub(super) last_problem: Option<String>,
    /// The design and its state.
    pub(super) design: Design,
    /// Why this design, for `status` and the journal.
    pub(super) design_why: String,
    /// The sibling left as it is, for a concurrent control.
    pub(super) control: Option<Control>,
    /// When the trial started (monotonic seconds), for the time to its verdict.
    pub(super) started_s: f64,
    /// How many times the change was switched on and off (switchback).
    pub(super) switches: usize,
    /// The kind of server judged (`plan::server_kind`).
    pub(super) kind: String,
    /// How a trial bounded in time counts its cap again until it fixes its windows a side.
    pub(super) recap: Option<Recap>,
    /// The seconds between the scans, as last spaced: a trial bounded in time ends at the last
    /// scan before its bound.
    pub(super) scan_s: f64,
}

/// What a strategy proposed, to start a trial of.
pub(super) struct Proposed<'a> {
    /// The workload (or a device's pseudo-workload).
    pub(super) w: &'a Workload,
    pub(super) kind: StrategyKind,
    pub(super) changes: Vec<Change>,
    pub(super) reason: String,
    /// `None`: unverified.
    pub(super) signal: Option<SignalKind>,
    /// The signature of the workload whose signal judges it.
    pub(super) judge: String,
    /// The steady readings the gate took just before (`steady.rs`): the first baseline windows.
    pub(super) steady: Vec<f64>,
    /// The kind of server judged (`plan::server_kind`).
    pub(super) server_kind: String,
    /// Its trial's design (`Planned::unverified` for a change applied without one).
    pub(super) planned: Planned,
}

/// What advancing a trial may touch.
pub(super) struct TrialIo<'a> {
    pub(super) store: &'a mut Store,
    pub(super) fs: &'a Fs,
    /// Workloads made manual, with why.
    pub(super) manual: &'a mut HashMap<String, String>,
}

impl Trial {
    /// The design's kind.
    pub(super) fn design_kind(&self) -> DesignKind {
        self.doc.design
    }

    /// The windows each side measures (sequential designs; a switchback's periods count as
    /// their windows).
    pub(super) fn windows_each_side(&self) -> usize {
        match &self.design {
            Design::Sequential(s) => s.windows_each_side(),
            Design::Switchback(sb) => sb.periods.as_ref().map_or(0, |p| {
                let plan = p.plan();
                plan.pairs_max * plan.measure
            }),
        }
    }

    /// The judged windows without and with the change so far.
    pub(super) fn windows(&self) -> (Vec<f64>, Vec<f64>) {
        match &self.design {
            Design::Sequential(s) => (s.off.clone(), s.on.clone()),
            Design::Switchback(sb) => match &sb.periods {
                Some(p) => p.windows(),
                None => (sb.baseline.clone(), Vec::new()),
            },
        }
    }

    /// Whether the design wants the change on during the next window.
    fn want_on(&self) -> bool {
        match &self.design {
            Design::Sequential(s) => s.want_on(),
            Design::Switchback(sb) => sb.periods.as_ref().is_some_and(|p| p.want_on()),
        }
    }

    /// One scan of a trial on its workload `w` (`None`: it exited), with this scan's windows
    /// of the judged workload (`obs`) and of the control (`ctl`): the restart and mask checks,
    /// the observation, then the next step. Returns why it ended, if it did.
    pub(super) fn advance(
        &mut self,
        w: Option<&Workload>,
        obs: Option<&Window>,
        ctl: Pairing,
        plan: &WindowPlan,
        io: &mut TrialIo,
    ) -> Result<Option<EndReason>, EngineError> {
        let Some(w) = w else {
            return Ok(Some(EndReason::WorkloadExited));
        };
        // A server restarted under the same signature: its windows span two processes.
        if !self.doc.members.is_empty()
            && !w
                .members
                .iter()
                .any(|m| self.doc.members.contains(&(m.pid, m.starttime)))
        {
            return Ok(Some(EndReason::Restarted {
                pid: w.members.first().map(|m| m.pid).unwrap_or_default(),
            }));
        }
        if self.on
            && let Some(mask) = self.doc.bound_to.clone()
        {
            // Someone changed our mask: the workload becomes manual.
            if let Some((pid, now)) = changed_mask(io.fs, w, &self.doc, &mask) {
                let end = EndReason::ManualMask {
                    pid,
                    mask: now.to_string(),
                };
                io.manual.insert(
                    self.signature.clone(),
                    format!("manually tuned: pid {pid} affinity changed to {now} behind perfpilot's back"),
                );
                return Ok(Some(end));
            }
            // Threads started while bound inherited perfpilot's mask: journal and bind them.
            self.bind_new(w, &mask, io)?;
        }
        if let Pairing::Lost(why) = &ctl {
            self.lose_control(why, io)?;
        }
        self.record_shadow(obs);
        if let Some(end) = self.observe(obs, &ctl, plan, io)? {
            return Ok(Some(end));
        }
        if let Some(end) = self.past_time_bound() {
            return Ok(Some(end));
        }
        self.step(w, io)
    }

    /// The scans are `scan_s` apart now: kept for the time bound, and, before a trial bounded
    /// in time (a change that cannot be undone) fixes its windows a side, its cap counted again
    /// from what is left of its time bound at that spacing ([`Recap`]).
    pub(super) fn recap(&mut self, scan_s: f64) {
        self.scan_s = scan_s;
        let (Some(rc), Design::Sequential(s)) = (&self.recap, &mut self.design) else {
            return;
        };
        if s.needed.is_some() || self.phase != Phase::Baseline {
            return;
        }
        let Some(rule) = s.one_way.as_mut() else {
            return;
        };
        let spent_s = perfpilot_sys::clock::mono_s() - self.started_s;
        rule.windows_cap = rc.cap(
            rule.within_s,
            scan_s,
            self.steps.len(),
            spent_s,
            s.off.len(),
        );
    }

    /// A trial whose next scan would come past its time bound (windows dropped as transients
    /// cost it time) ends at this one, once it has the least windows after the change to
    /// judge; it keeps measuring until then.
    fn past_time_bound(&self) -> Option<EndReason> {
        let Design::Sequential(s) = &self.design else {
            return None;
        };
        let bound = s.one_way.as_ref()?.within_s;
        let after_s = perfpilot_sys::clock::mono_s() - self.started_s;
        (after_s + self.scan_s > bound && s.on.len() >= s.plan().min)
            .then_some(EndReason::TimeBound { after_s })
    }

    /// The control sibling is gone: the trial goes on, on the treated workload's own windows.
    fn lose_control(&mut self, why: &str, io: &mut TrialIo) -> Result<(), EngineError> {
        let Some(c) = self.control.take() else {
            return Ok(());
        };
        if let Design::Sequential(s) = &mut self.design {
            s.drop_control();
        }
        let note = format!(
            "its control {} {why}: judged on its own windows from here (before and after, the drift no longer cancels)",
            c.name
        );
        warn!(action = self.id, workload = %self.name, "{note}");
        io.store
            .journal_set_state(self.id, ActionState::Trial, &note)?;
        Ok(())
    }

    /// Takes in the shadow proxy's observation of a window whose signal observation was
    /// recorded, on the same side.
    fn record_shadow(&mut self, obs: Option<&Window>) {
        let Some(Window {
            main: Ok(Some(_)),
            shadow: Some(v),
            ..
        }) = obs
        else {
            return;
        };
        match self.phase {
            Phase::Applying => {}
            _ if self.on => self.shadow_on.push(*v),
            _ => self.shadow_off.push(*v),
        }
    }

    /// Takes in this scan's window, if one completed, into the design; journals what it notes.
    fn observe(
        &mut self,
        obs: Option<&Window>,
        ctl: &Pairing,
        plan: &WindowPlan,
        io: &mut TrialIo,
    ) -> Result<Option<EndReason>, EngineError> {
        let Some(o) = obs else {
            return Ok(None);
        };
        let v = match &o.main {
            Ok(Some(v)) => {
                self.failures = 0;
                *v
            }
            Err(e) => {
                self.failures += 1;
                warn!(action = self.id, workload = %self.name, "signal: {e}");
                if self.failures as usize > plan.min {
                    return Ok(Some(EndReason::SignalFailed {
                        times: self.failures,
                        error: e.clone(),
                    }));
                }
                return Ok(None);
            }
            Ok(None) => return Ok(None),
        };
        // A window in which the change was being applied holds both states: not judged.
        if self.phase == Phase::Applying {
            return Ok(None);
        }
        let (value, raw) = match (&self.control, ctl) {
            (Some(_), Pairing::Paired(c)) if *c > 0.0 => (v / c, Some(v)),
            // The control's window did not complete with this one: not judged.
            (Some(_), _) => return Ok(None),
            (None, _) => (v, None),
        };
        debug!(action = self.id, workload = %self.name, phase = ?self.phase, on = self.on, "window: {value}");
        let step = match &mut self.design {
            Design::Sequential(s) => {
                let dropped = s.dropped;
                let step = s.record(self.on, value, raw, o.rest);
                // Windows dropped as a transient (of the side just recorded) take the shadow
                // proxy's of that side with them.
                let d = s.dropped - dropped;
                let shadow = if self.on {
                    &mut self.shadow_on
                } else {
                    &mut self.shadow_off
                };
                shadow.drain(..d.min(shadow.len()));
                step
            }
            Design::Switchback(sb) => match sb.record(self.on, value, o.rest, plan) {
                Ok(step) => step,
                Err((why, baseline)) => {
                    let mut s = Sequential::new(*plan, sb.hib, baseline);
                    // Its own windows only: a switchback keeps no readings from before it.
                    s.drift = Some(crate::design::Drift::default());
                    self.design = Design::Sequential(s);
                    self.doc.design = DesignKind::BeforeAfter;
                    self.design_why = format!("before and after: no switchback, {why}");
                    Step::Note(self.design_why.clone())
                }
            },
        };
        match step {
            Step::Continue => Ok(None),
            Step::Note(note) => {
                self.note(&note, io)?;
                Ok(None)
            }
            Step::End(end) => Ok(Some(end)),
        }
    }

    /// The next step: from the baseline to applying, one paced change, and switching the
    /// change on or off where the design asks.
    fn step(&mut self, w: &Workload, io: &mut TrialIo) -> Result<Option<EndReason>, EngineError> {
        if self.signal.is_none() {
            // Unverified: nothing to measure; applied, then kept.
            return self.apply_step(w, io);
        }
        match self.phase {
            Phase::Baseline if self.want_on() => {
                self.phase = Phase::Applying;
                self.apply_step(w, io)
            }
            Phase::Baseline => Ok(None),
            Phase::Applying => self.apply_step(w, io),
            Phase::Measuring => {
                let want = self.want_on();
                if want != self.on {
                    self.switch(want, w, io)?;
                }
                Ok(None)
            }
        }
    }

    /// Binds `w`'s threads that have no undo record yet to `mask` (journaled first).
    fn bind_new(
        &mut self,
        w: &Workload,
        mask: &perfpilot_sys::CpuSet,
        io: &mut TrialIo,
    ) -> Result<(), EngineError> {
        bind_new_threads(
            io.store,
            io.fs,
            self.id,
            &mut self.doc,
            &mut self.undo,
            w,
            mask,
        )?;
        Ok(())
    }

    /// Switches the change off (its undo records) or on again (its journaled changes).
    fn switch(&mut self, on: bool, w: &Workload, io: &mut TrialIo) -> Result<(), EngineError> {
        let t0 = perfpilot_sys::clock::mono_s();
        if on {
            reapply(io.fs, self.id, &self.doc.changes);
            kill_point("engine.switch.on");
            if let Some(mask) = self.doc.bound_to.clone() {
                self.bind_new(w, &mask, io)?;
            }
        } else {
            for l in journal::undo_all(io.fs, &self.doc.members, &self.undo) {
                debug!(action = self.id, "switch off: {l}");
            }
            kill_point("engine.switch.off");
        }
        self.on = on;
        self.switches += 1;
        let took = perfpilot_sys::clock::mono_s() - t0;
        let spent = perfpilot_sys::clock::mono_s() - self.started_s;
        if let Design::Switchback(sb) = &mut self.design
            && let Some(note) = sb.switched(took, spent)
        {
            self.note(&note, io)?;
        }
        Ok(())
    }

    /// Logs `note` and journals it as the trial's latest word.
    fn note(&self, note: &str, io: &mut TrialIo) -> Result<(), EngineError> {
        info!(action = self.id, workload = %self.name, "{note}");
        io.store
            .journal_set_state(self.id, ActionState::Trial, note)?;
        Ok(())
    }

    /// Applies the next paced step (journaled first); once none is left, measuring starts, or
    /// an unverified trial is complete, or a trial none of whose steps changed anything ends.
    fn apply_step(
        &mut self,
        w: &Workload,
        io: &mut TrialIo,
    ) -> Result<Option<EndReason>, EngineError> {
        if let Some(c) = self.steps.pop_front() {
            let members: Vec<(i32, Vec<i32>)> =
                w.members.iter().map(|m| (m.pid, m.tids.clone())).collect();
            let c = refresh_tids(c, &members);
            let t0 = perfpilot_sys::clock::mono_s();
            let applied = journal_and_apply(
                io.store,
                io.fs,
                self.id,
                &mut self.doc,
                &mut self.undo,
                c.clone(),
            )?;
            if let Design::Switchback(sb) = &mut self.design {
                sb.applying_s += perfpilot_sys::clock::mono_s() - t0;
            }
            if let Some(a) = &applied {
                crate::counters::COUNTERS.applied(a, perfpilot_sys::page_size());
            }
            match applied.as_ref().map(|a| outcome(&c, a)) {
                Some(o) => {
                    for d in &o.details {
                        debug!(action = self.id, workload = %self.name, "{d}");
                    }
                    if o.effective {
                        self.effective = true;
                        info!(action = self.id, workload = %self.name, "step applied: {}", o.summary);
                    } else {
                        warn!(action = self.id, workload = %self.name, "step changed nothing: {}", o.summary);
                        self.last_problem = Some(o.summary);
                    }
                }
                None => self.last_problem = Some("the step failed (see the log)".into()),
            }
            self.on = true;
        }
        if self.steps.is_empty() {
            self.phase = Phase::Measuring;
            // The first making of the change times a switch on.
            let spent = perfpilot_sys::clock::mono_s() - self.started_s;
            if let Design::Switchback(sb) = &mut self.design
                && let Some(note) = sb.switched(sb.applying_s, spent)
            {
                self.note(&note, io)?;
            }
            // Nothing took effect: there is nothing to measure.
            if !self.effective {
                return Ok(Some(EndReason::NothingApplied {
                    problem: self.last_problem.clone().unwrap_or_default(),
                }));
            }
            // Unverified: nothing to measure; kept once every step is applied.
            if self.signal.is_none() {
                return Ok(Some(EndReason::Complete));
            }
        }
        Ok(None)
    }
}

impl SwitchbackTrial {
    /// Takes in one window: a baseline window until the periods are planned, then a period's.
    /// `Err` with the baseline when the periods cannot be planned for this signal: the trial
    /// goes on before and after on the same windows.
    fn record(
        &mut self,
        on: bool,
        value: f64,
        rest: Option<crate::design::Rest>,
        plan: &WindowPlan,
    ) -> Result<Step, (String, Vec<f64>)> {
        if let Some(p) = self.periods.as_mut() {
            return Ok(p.record(on, value, rest));
        }
        if on {
            return Ok(Step::Continue);
        }
        self.baseline.push(value);
        if self.baseline.len() < plan.min {
            return Ok(Step::Continue);
        }
        match PeriodPlan::for_signal(&self.baseline, &self.limits) {
            Ok(p) => {
                self.periods = Some(Switchback::new(p, self.seed, self.hib, plan.looks));
                Ok(Step::Note(format!(
                    "periods planned: {}, in a seeded order",
                    p.describe()
                )))
            }
            Err(r) => Err((r.why, std::mem::take(&mut self.baseline))),
        }
    }

    /// Takes in how long a switch took (`took_s`, seconds; `spent_s` of the trial gone) and,
    /// while no pair is complete, plans the periods again for switches of the mean time so
    /// far: a collapse of gigabytes takes seconds a period's windows must pay for. A note when
    /// the plan changed.
    pub(super) fn switched(&mut self, took_s: f64, spent_s: f64) -> Option<String> {
        self.switch_times.push(took_s);
        let periods = self.periods.as_mut()?;
        let mut limits = self.limits;
        limits.switch_s = mean(&self.switch_times);
        limits.spent_s = spent_s;
        if (limits.switch_s - self.limits.switch_s).abs() < 0.1 * limits.window_s {
            return None;
        }
        let took = perfpilot_units::duration_secs(limits.switch_s);
        match PeriodPlan::for_signal(&self.baseline, &limits) {
            Ok(p) if p == periods.plan() => {
                self.limits = limits;
                None
            }
            Ok(p) => periods.replan(p).then(|| {
                self.limits = limits;
                format!(
                    "a switch takes {took}: periods planned again, {}",
                    p.describe()
                )
            }),
            Err(r) => Some(format!(
                "a switch takes {took}, and {}: the periods stay as planned",
                r.why
            )),
        }
    }
}

impl Engine {
    /// Starts a trial: journals the action (nothing applied yet), then measures the baseline
    /// (or, for an unverified action, applies it at once and keeps it).
    pub(super) fn start(&mut self, p: Proposed) -> Result<i64, EngineError> {
        let bound_to = p.changes.iter().find_map(|c| match c {
            Change::Affinity { cpus, .. } => Some(cpus.clone()),
            _ => None,
        });
        let doc = ActionDoc {
            members: p.w.members.iter().map(|m| (m.pid, m.starttime)).collect(),
            changes: Vec::new(),
            design: p.planned.kind,
            irreversible: p.planned.irreversible,
            signal: p.signal.clone(),
            bound_to,
        };
        let undo: Vec<Undo> = Vec::new();
        let id = self.store.journal_begin(
            &p.w.signature,
            &p.w.name,
            p.kind.as_str(),
            &json(&doc),
            &json(&undo),
            &p.reason,
        )?;
        kill_point("engine.trial.begun");
        // Unverified actions have nothing to measure: they are applied (paced) and kept.
        let (phase, note) = match &p.signal {
            Some(sig) => {
                info!(action = id, workload = %p.w.name, strategy = %p.kind, signal = %sig.describe(), design = %p.planned.kind, "trial starts: {}; {}", p.reason, p.planned.why);
                (
                    Phase::Baseline,
                    format!("measuring the baseline; {}", p.planned.why),
                )
            }
            None => {
                info!(action = id, workload = %p.w.name, strategy = %p.kind, "applying without verification (allow_unverified): {}", p.reason);
                (Phase::Applying, "applying (unverified)".to_string())
            }
        };
        self.store
            .journal_set_state(id, ActionState::Trial, &note)?;
        let plan = WindowPlan::of(&self.tun);
        let hib = p.signal.as_ref().is_none_or(|s| s.higher_is_better());
        // A trial bounded in time counts its cap again as the scans are spaced (`recap`).
        let planned = p.planned;
        let recap = planned.one_way.is_some().then_some(Recap {
            window_s: planned.limits.window_s,
            min: self.tun.window_count(),
        });
        let (design, control) = match (planned.kind, planned.control) {
            (DesignKind::Switchback, _) => (
                Design::Switchback(SwitchbackTrial {
                    baseline: Vec::new(),
                    limits: planned.limits,
                    periods: None,
                    seed: perfpilot_stats::rng::mix64(id as u64 ^ 0x5eed),
                    hib,
                    switch_times: Vec::new(),
                    applying_s: 0.0,
                }),
                None,
            ),
            // Both windows start afresh with the trial (`control.rs`): no seed.
            (DesignKind::Control, Some(c)) => {
                let mut s = Sequential::controlled(plan, hib, Vec::new(), Vec::new());
                // Applied only if the control exits and the trial falls back to the signal.
                s.drift = Some(planned.drift);
                s.one_way = planned.one_way;
                (Design::Sequential(s), Some(c))
            }
            (_, _) => {
                let mut s = Sequential::new(plan, hib, p.steady);
                s.one_way = planned.one_way;
                s.drift = Some(planned.drift);
                (Design::Sequential(s), None)
            }
        };
        self.actions.trials.push(Trial {
            id,
            signature: p.w.signature.clone(),
            name: p.w.name.clone(),
            strategy: p.kind,
            doc,
            undo,
            steps: p.changes.into(),
            phase,
            on: false,
            shadow_off: Vec::new(),
            shadow_on: Vec::new(),
            judge: p.judge,
            signal: p.signal,
            failures: 0,
            reason: p.reason,
            effective: false,
            last_problem: None,
            design,
            design_why: planned.why,
            control,
            started_s: perfpilot_sys::clock::mono_s(),
            switches: 0,
            kind: p.server_kind,
            recap,
            scan_s: self.tun.interval_s,
        });
        Ok(id)
    }

    /// Tells every trial the scans are `scan_s` apart, and counts the caps of trials bounded in
    /// time not yet past their baseline plan again at that spacing.
    pub(super) fn recap_trials(&mut self, scan_s: f64) {
        for t in &mut self.actions.trials {
            t.recap(scan_s);
        }
    }

    /// Advances every running trial by one scan, then ends those that are over.
    pub(super) fn advance_trials(
        &mut self,
        workloads: &[Workload],
        obs: &HashMap<String, Window>,
    ) -> Result<(), EngineError> {
        let plan = WindowPlan::of(&self.tun);
        let mut finished = Vec::new();
        for (i, t) in self.actions.trials.iter_mut().enumerate() {
            // A device's trial is judged by a workload; any workload stands for "still running".
            let w = workloads
                .iter()
                .find(|w| w.signature == t.signature)
                .or_else(|| {
                    t.signature
                        .starts_with("device:")
                        .then(|| workloads.first())
                        .flatten()
                });
            let ctl = super::control::pairing(t.control.as_ref(), workloads, obs);
            let mut io = TrialIo {
                store: &mut self.store,
                fs: &self.fs,
                manual: &mut self.policy.manual,
            };
            if let Some(end) = t.advance(w, obs.get(&t.judge), ctl, &plan, &mut io)? {
                finished.push((i, end));
            }
        }
        // Decide, newest index first so removals keep indices valid.
        for (i, end) in finished.into_iter().rev() {
            let t = self.actions.trials.remove(i);
            self.finish(t, end)?;
        }
        Ok(())
    }
}
