//! Trials: an action is journaled, its baseline measured, its steps applied (one per scan), its
//! effect measured in windows (sequential, or interleaved off/on where undo is cheap), until it
//! ends; the verdict and what follows it are `verdict.rs`'s.

use std::collections::{HashMap, VecDeque};

use perfpilot_observe::workload::Workload;
use perfpilot_store::Store;
use perfpilot_store::journal::ActionState;
use perfpilot_sys::Fs;
use perfpilot_sys::change::{Change, Undo};
use perfpilot_sys::failpoint::kill_point;
use serde::Serialize;
use tracing::{debug, info, warn};

use super::apply::{journal_and_apply, json, outcome, reapply, refresh_tids};
use super::enforce::{bind_new_threads, changed_mask};
use super::verdict::WindowPlan;
use super::watch::{Observation, Window};
use super::{Engine, EngineError};
use crate::journal::{self, ActionDoc};
use crate::signal::SignalKind;
use crate::stats;
use crate::strategy::StrategyKind;

/// Where a trial is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Phase {
    /// Windows before the change (sequential trials).
    Baseline,
    /// Applying a paced change, one step per scan.
    Applying,
    /// Windows after the change (sequential), or alternating off/on windows (interleaved).
    Measuring,
}

/// How a trial ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ending {
    /// Every window measured (or, unverified, every step applied).
    Complete,
    /// Ended before its windows were complete, and why: neutral, without a gain.
    Early(String),
    /// Its data cannot be judged (its server restarted mid-trial): undone, not judged, not
    /// backed off.
    Abandoned(String),
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
    /// Observations without the change.
    pub(super) off_obs: Vec<f64>,
    /// Observations with the change.
    pub(super) on_obs: Vec<f64>,
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
    /// Sequential windows dropped as a transient (before or after the change).
    pub(super) dropped: usize,
    /// Whether the windows after the change were already cut at a step (once: a signal that
    /// steps back and forth, as PostgreSQL's read-write load does with its checkpoints, is
    /// noise to measure through, not a settling to wait out).
    pub(super) stepped: bool,
    /// The windows each side of a sequential trial measures, fixed from its settled baseline's
    /// noise (`None` until then: the plan's minimum).
    pub(super) needed: Option<usize>,
    /// Busy cores of the rest of the machine in the scans before and after the change
    /// (sequential trials), and its CPUs.
    pub(super) rest_off: Vec<f64>,
    /// As `rest_off`, with the change.
    pub(super) rest_on: Vec<f64>,
    /// The machine's CPUs, as the last reading of the rest of it saw them.
    pub(super) cpus: usize,
    /// Set when an interim look decided the trial before its planned windows.
    pub(super) early: Option<EarlyLook>,
}

/// An interim look that decided a sequential trial before its planned windows after the change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct EarlyLook {
    /// The confidence level of each look: the verdicts' level shared out over the looks
    /// (Bonferroni), so looking early does not make a false verdict more likely.
    pub(super) confidence: f64,
    /// The looks the trial could take, the planned one included.
    pub(super) looks: usize,
    /// The windows after the change it had planned.
    pub(super) planned: usize,
}

/// How many times its windows a side a sequential trial drops as transients before it gives up
/// on a signal that does not settle.
const SETTLE_LIMIT: usize = 4;

/// What a strategy proposed, to start a trial of.
pub(super) struct Proposed<'a> {
    /// The workload (or a device's pseudo-workload).
    pub(super) w: &'a Workload,
    pub(super) kind: StrategyKind,
    pub(super) changes: Vec<Change>,
    pub(super) reason: String,
    pub(super) interleave: bool,
    pub(super) irreversible: bool,
    /// `None`: unverified.
    pub(super) signal: Option<SignalKind>,
    /// The signature of the workload whose signal judges it.
    pub(super) judge: String,
    /// The steady readings the gate took just before (`steady.rs`): the first baseline windows
    /// of a sequential trial.
    pub(super) steady: Vec<f64>,
}

/// What advancing a trial may touch.
pub(super) struct TrialIo<'a> {
    pub(super) store: &'a mut Store,
    pub(super) fs: &'a Fs,
    /// Workloads made manual, with why.
    pub(super) manual: &'a mut HashMap<String, String>,
}

impl Trial {
    /// The windows each side measures: the noise-fixed count once known, else the minimum.
    pub(super) fn windows_each_side(&self, plan: &WindowPlan) -> usize {
        self.needed.unwrap_or(plan.min)
    }

    /// Which side of the change this scan's windows fall on: `Some(true)` with it in effect,
    /// `Some(false)` without, `None` while it is being applied.
    fn side(&self) -> Option<bool> {
        match self.phase {
            Phase::Baseline => Some(false),
            Phase::Applying => None,
            Phase::Measuring => Some(self.on),
        }
    }

    /// Takes in this window's observation; ends the trial when its signal failed more than
    /// `windows` times in a row.
    pub(super) fn record(&mut self, obs: Option<&Observation>, windows: usize) -> Option<Ending> {
        match obs {
            Some(Ok(Some(v))) => {
                self.failures = 0;
                debug!(action = self.id, workload = %self.name, phase = ?self.phase, on = self.on, "window: {v}");
                match self.side() {
                    Some(true) => self.on_obs.push(*v),
                    Some(false) => self.off_obs.push(*v),
                    None => {}
                }
            }
            Some(Err(e)) => {
                self.failures += 1;
                warn!(action = self.id, workload = %self.name, "signal: {e}");
                if self.failures as usize > windows {
                    return Some(Ending::Early(format!(
                        "its signal failed {} times in a row: {e}",
                        self.failures
                    )));
                }
            }
            Some(Ok(None)) | None => {}
        }
        None
    }

    /// Takes in what the rest of the machine used this scan, on its side of a sequential trial.
    fn record_rest(&mut self, obs: Option<&Window>) {
        let Some(rest) = obs.and_then(|o| o.rest) else {
            return;
        };
        if self.doc.interleave {
            return;
        }
        self.cpus = rest.cpus;
        match self.side() {
            Some(true) => self.rest_on.push(rest.cores),
            Some(false) => self.rest_off.push(rest.cores),
            None => {}
        }
    }

    /// Why a complete sequential trial cannot be judged: the rest of the machine moved.
    fn rest_moved(&self, plan: &WindowPlan) -> Option<String> {
        let (before, after) =
            stats::rest_moved(&self.rest_off, &self.rest_on, self.cpus, plan.rest_share)?;
        Some(format!(
            "the rest of the machine changed during the trial: other processes used {before:.2} cores before the change and {after:.2} after (more than rest_change_max allows); abandoned, not judged"
        ))
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
        match self.side() {
            Some(true) => self.shadow_on.push(*v),
            Some(false) => self.shadow_off.push(*v),
            None => {}
        }
    }

    /// One scan of a trial on its workload `w` (`None`: it exited): the restart and mask
    /// checks, the observation, then the next step. Returns how it ended, if it did.
    pub(super) fn advance(
        &mut self,
        w: Option<&Workload>,
        obs: Option<&Window>,
        plan: &WindowPlan,
        io: &mut TrialIo,
    ) -> Result<Option<Ending>, EngineError> {
        let windows = plan.min;
        let Some(w) = w else {
            return Ok(Some(Ending::Early("its workload exited".into())));
        };
        // A server restarted under the same signature: its windows span two processes.
        if !self.doc.members.is_empty()
            && !w
                .members
                .iter()
                .any(|m| self.doc.members.contains(&(m.pid, m.starttime)))
        {
            return Ok(Some(Ending::Abandoned(format!(
                "its processes restarted during the trial (now pid {}); abandoned, not judged",
                w.members.first().map(|m| m.pid).unwrap_or_default()
            ))));
        }
        if self.on
            && let Some(mask) = self.doc.bound_to.clone()
        {
            // Someone changed our mask: the workload becomes manual.
            if let Some((pid, now)) = changed_mask(io.fs, w, &self.doc, &mask) {
                let why = format!(
                    "manually tuned: pid {pid} affinity changed to {now} behind perfpilot's back"
                );
                io.manual.insert(self.signature.clone(), why.clone());
                return Ok(Some(Ending::Early(format!("{why}; left as it is"))));
            }
            // Threads started while bound inherited perfpilot's mask: journal and bind them.
            bind_new_threads(
                io.store,
                io.fs,
                self.id,
                &mut self.doc,
                &mut self.undo,
                w,
                &mask,
            )?;
        }
        self.record_shadow(obs);
        self.record_rest(obs);
        if let Some(end) = self.record(obs.map(|o| &o.main), windows) {
            return Ok(Some(end));
        }
        self.step(w, plan, io)
    }

    /// Drops a transient from the start of the sequential windows of one side (`on`: after the
    /// change), or, once, the windows after the change before a step inside them, with the
    /// shadow proxy's windows of that side; ends the trial when more than [`SETTLE_LIMIT`] × the windows a side were
    /// dropped in all.
    fn settle(
        &mut self,
        on: bool,
        plan: &WindowPlan,
        io: &mut TrialIo,
    ) -> Result<Option<Ending>, EngineError> {
        let limit = SETTLE_LIMIT * self.windows_each_side(plan);
        let (obs, shadow) = if on {
            (&mut self.on_obs, &mut self.shadow_on)
        } else {
            (&mut self.off_obs, &mut self.shadow_off)
        };
        // After the change, once, also a step inside the windows: the change settling (a
        // server on a plateau for minutes after its memory was collapsed). Before it, the gate
        // and MSER wait out a warm-up; a step there is the workload's own.
        let (d, step) = match stats::transient(obs) {
            0 if on && !self.stepped => match stats::level_shift(obs, plan.resolution) {
                Some(s) => (s.at, Some(s)),
                None => return Ok(None),
            },
            0 => return Ok(None),
            d => (d, None),
        };
        if step.is_some() {
            self.stepped = true;
        }
        let gone: Vec<f64> = obs.drain(..d).collect();
        shadow.drain(..d.min(shadow.len()));
        self.dropped += d;
        let side = if on { "after the change" } else { "before it" };
        match step {
            Some(s) => {
                info!(action = self.id, workload = %self.name, "{d} windows {side} dropped: the signal stepped ×{:.3} after them (t = {:.1}): {gone:?}", s.ratio, s.t)
            }
            None => {
                info!(action = self.id, workload = %self.name, "{d} windows {side} dropped as a transient: {gone:?}")
            }
        }
        if self.dropped > limit {
            return Ok(Some(Ending::Early(format!(
                "its signal did not settle: {} windows dropped as transients",
                self.dropped
            ))));
        }
        let note = format!(
            "measuring {}: {} windows of a transient dropped so far",
            if on { "the effect" } else { "the baseline" },
            self.dropped
        );
        io.store
            .journal_set_state(self.id, ActionState::Trial, &note)?;
        Ok(None)
    }

    /// The next step: from the baseline to applying, one paced change, the measuring windows,
    /// switching an interleaved trial off or on.
    fn step(
        &mut self,
        w: &Workload,
        plan: &WindowPlan,
        io: &mut TrialIo,
    ) -> Result<Option<Ending>, EngineError> {
        let windows = plan.min;
        // Interleaved trials need one baseline window before alternating; sequential ones all,
        // steady: a run that opens with a transient loses it and waits for more windows.
        let baseline = if self.doc.interleave { 1 } else { windows };
        if self.phase == Phase::Baseline && self.off_obs.len() >= baseline {
            if !self.doc.interleave {
                if let Some(end) = self.settle(false, plan, io)? {
                    return Ok(Some(end));
                }
                if self.off_obs.len() < windows {
                    return Ok(None);
                }
                if self.needed.is_none() {
                    self.plan_windows(plan, io)?;
                }
                if self.off_obs.len() < self.windows_each_side(plan) {
                    return Ok(None);
                }
            }
            self.phase = Phase::Applying;
        }
        match self.phase {
            Phase::Baseline => Ok(None),
            Phase::Applying => self.apply_step(w, io),
            Phase::Measuring if self.doc.interleave => {
                if self.off_obs.len() >= windows && self.on_obs.len() >= windows {
                    return Ok(Some(Ending::Complete));
                }
                // Alternate: after an on-window switch off, after an off-window switch on.
                if self.on {
                    for l in journal::undo_all(io.fs, &self.doc.members, &self.undo) {
                        debug!(action = self.id, "interleave off: {l}");
                    }
                    kill_point("engine.interleave.off");
                    self.on = false;
                } else {
                    reapply(io.fs, self.id, &self.doc.changes);
                    kill_point("engine.interleave.on");
                    if let Some(mask) = self.doc.bound_to.clone() {
                        bind_new_threads(
                            io.store,
                            io.fs,
                            self.id,
                            &mut self.doc,
                            &mut self.undo,
                            w,
                            &mask,
                        )?;
                    }
                    self.on = true;
                }
                Ok(None)
            }
            Phase::Measuring if self.on_obs.len() >= self.windows_each_side(plan) => {
                if let Some(end) = self.settle(true, plan, io)? {
                    return Ok(Some(end));
                }
                if self.on_obs.len() < self.windows_each_side(plan) {
                    return Ok(None);
                }
                Ok(Some(match self.rest_moved(plan) {
                    Some(why) => Ending::Abandoned(why),
                    None => Ending::Complete,
                }))
            }
            Phase::Measuring => Ok(self.look(plan)),
        }
    }

    /// An interim look at a sequential trial's windows after the change, each scan from the
    /// plan's minimum until the planned count: a gain clear at the looks' shared-out level keeps
    /// the action now. A clear ×1.09 on PostgreSQL was judged after 26–30 windows a side, 7½
    /// minutes, where a dozen after the change show it. A loss is not decided early: a change
    /// may pay its cost first (PostgreSQL ran slower for a minute or two after its buffer pool
    /// was collapsed, then stepped up — or was in one of the spells it has with nothing
    /// changed), and a look on that plateau read ×0.949, "worse", 2026-11-25.
    /// Windows still settling (a transient or a step inside them) wait for the planned count,
    /// which drops them.
    fn look(&mut self, plan: &WindowPlan) -> Option<Ending> {
        let planned = self.windows_each_side(plan);
        let n = self.on_obs.len();
        if self.doc.interleave || n < plan.min || n >= planned {
            return None;
        }
        if stats::transient(&self.on_obs) > 0
            || stats::level_shift(&self.on_obs, plan.resolution).is_some()
            || self.rest_moved(plan).is_some()
        {
            return None;
        }
        let looks = planned - plan.min + 1;
        let confidence = stats::look_level(plan.confidence, looks);
        let hib = self.signal.as_ref().is_none_or(|s| s.higher_is_better());
        let g = stats::gain_sequential(&self.off_obs, &self.on_obs, hib, confidence)?;
        if stats::decide(&g, plan.min_effect) != stats::Decision::Keep {
            return None;
        }
        self.early = Some(EarlyLook {
            confidence,
            looks,
            planned,
        });
        info!(action = self.id, workload = %self.name, "kept at an early look: gain {:.3} ({:.3}..{:.3}) after {n} of {planned} windows", g.ratio, g.ci_low, g.ci_high);
        Some(Ending::Complete)
    }

    /// Fixes how many windows each side measures from the settled baseline's noise, once; a
    /// count above the minimum is logged and journaled, since the trial takes longer.
    fn plan_windows(&mut self, plan: &WindowPlan, io: &mut TrialIo) -> Result<(), EngineError> {
        let n = stats::windows_needed(
            &self.off_obs,
            plan.resolution,
            plan.confidence,
            plan.min,
            plan.max,
        );
        self.needed = Some(n);
        if n > plan.min {
            let cv = perfpilot_stats::cv(&self.off_obs) * 100.0;
            let note = format!(
                "measuring the baseline: its windows vary by {cv:.1} %, so {n} windows a side (for an interval of ±{:.0} %{})",
                plan.resolution * 100.0,
                if n == plan.max {
                    ", at most max_windows"
                } else {
                    ""
                }
            );
            info!(action = self.id, workload = %self.name, "{note}");
            io.store
                .journal_set_state(self.id, ActionState::Trial, &note)?;
        }
        Ok(())
    }

    /// Applies the next paced step (journaled first); once none is left, measuring starts, or
    /// an unverified trial is complete, or a trial none of whose steps changed anything ends.
    fn apply_step(
        &mut self,
        w: &Workload,
        io: &mut TrialIo,
    ) -> Result<Option<Ending>, EngineError> {
        if let Some(c) = self.steps.pop_front() {
            let members: Vec<(i32, Vec<i32>)> =
                w.members.iter().map(|m| (m.pid, m.tids.clone())).collect();
            let c = refresh_tids(c, &members);
            let applied = journal_and_apply(
                io.store,
                io.fs,
                self.id,
                &mut self.doc,
                &mut self.undo,
                c.clone(),
            )?;
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
            // Nothing took effect: there is nothing to measure.
            if !self.effective {
                return Ok(Some(Ending::Early(format!(
                    "nothing could be applied: {}",
                    self.last_problem.clone().unwrap_or_default()
                ))));
            }
            // Unverified: nothing to measure; kept once every step is applied.
            if self.signal.is_none() {
                return Ok(Some(Ending::Complete));
            }
        }
        Ok(None)
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
            interleave: p.interleave,
            irreversible: p.irreversible,
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
                info!(action = id, workload = %p.w.name, strategy = %p.kind, signal = %sig.describe(), "trial starts: {}", p.reason);
                (Phase::Baseline, "measuring the baseline")
            }
            None => {
                info!(action = id, workload = %p.w.name, strategy = %p.kind, "applying without verification (allow_unverified): {}", p.reason);
                (Phase::Applying, "applying (unverified)")
            }
        };
        self.store.journal_set_state(id, ActionState::Trial, note)?;
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
            // Interleaved trials pair each off window with the next on one: no seed for them.
            off_obs: if p.interleave || p.signal.is_none() {
                Vec::new()
            } else {
                p.steady
            },
            on_obs: Vec::new(),
            shadow_off: Vec::new(),
            shadow_on: Vec::new(),
            judge: p.judge,
            signal: p.signal,
            failures: 0,
            reason: p.reason,
            effective: false,
            last_problem: None,
            dropped: 0,
            stepped: false,
            needed: None,
            rest_off: Vec::new(),
            rest_on: Vec::new(),
            cpus: 0,
            early: None,
        });
        Ok(id)
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
            let mut io = TrialIo {
                store: &mut self.store,
                fs: &self.fs,
                manual: &mut self.policy.manual,
            };
            if let Some(end) = t.advance(w, obs.get(&t.judge), &plan, &mut io)? {
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
