//! The status document: what the engine reports after each scan (written to `status.json` by
//! the daemon and shown by `perfpilot status`).

use std::collections::HashMap;

use perfpilot_observe::Rates;
use perfpilot_observe::workload::Workload;
use serde::Serialize;

use perfpilot_sys::CpuSet;
use perfpilot_sys::cgroup::container::Container;

use super::Engine;
use super::manual::ManualSetting;
use super::trial::Trial;
use crate::cpu::{CpuShare, CpuTime};
use crate::signal::SignalSource;
use crate::signal::choose::Choice;
use crate::strategy::StrategyKind;
use perfpilot_model::headroom::CapacityView;

/// What perfpilot does with a listed workload, in one word (`/metrics` counts workloads by it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadClass {
    /// Watched and acted on (or waiting until it is old or busy enough).
    #[default]
    Managed,
    /// Tuned by hand: left alone.
    Manual,
    /// Excluded by the config or by `PERFPILOT=off`.
    Excluded,
    /// It has no signal to judge an action by and `allow_unverified` is off.
    NeedsSignal,
}

impl WorkloadClass {
    /// Every class, in label order.
    pub const ALL: [WorkloadClass; 4] = [
        WorkloadClass::Managed,
        WorkloadClass::Manual,
        WorkloadClass::Excluded,
        WorkloadClass::NeedsSignal,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadClass::Managed => "managed",
            WorkloadClass::Manual => "manual",
            WorkloadClass::Excluded => "excluded",
            WorkloadClass::NeedsSignal => "needs_signal",
        }
    }
}

/// What status shows of a workload.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadStatus {
    /// The workload's stable signature.
    pub signature: String,
    /// A readable name.
    pub name: String,
    /// Its processes.
    pub pids: Vec<i32>,
    /// CPU used over the last interval, in cores.
    pub cpu_cores: f64,
    /// Threads in all its processes.
    pub threads: usize,
    /// Resident memory, bytes.
    pub rss: u64,
    /// How long its oldest process has run, seconds.
    pub age_s: f64,
    /// The signal that would judge an action on it, described; `None` when it has none.
    pub signal: Option<String>,
    /// Where that signal comes from.
    pub signal_source: Option<SignalSource>,
    /// Why each better source was not used, best first (`preset: …`, `pmu: …`).
    pub signal_passed_over: Vec<String>,
    /// What perfpilot does with it and why.
    pub state: String,
    /// The same in one word.
    pub class: WorkloadClass,
    /// Its tier in the capacity model its `[[workload]]` names: utilisation and headroom.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityView>,
    /// Its (first process's) cgroup, from `/proc/PID/cgroup`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The container and Kubernetes pod that cgroup names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    /// The CPUs its cgroups' cpusets allow, where narrower than the machine: strategies place
    /// it inside them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpuset: Option<CpuSet>,
    /// Knobs someone else set, the evidence, and the strategies each leaves alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manual: Vec<ManualSetting>,
}

/// What the engine reports after each scan (written to `status.json` by the daemon).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    /// When the last scan ended (ms since the epoch).
    pub time_ms: i64,
    /// The scan interval in force, seconds.
    pub interval_s: f64,
    /// The listed workloads.
    pub workloads: Vec<WorkloadStatus>,
    /// The running trials.
    pub trials: Vec<TrialStatus>,
    /// What the machine supports, said once at start.
    pub notes: Vec<String>,
    /// The daemon's own CPU over its life: monitoring (what the budget covers) and making
    /// changes.
    #[serde(flatten)]
    pub cpu: CpuShare,
    /// Scans so far.
    pub scans: u64,
    /// Block devices whose read-ahead someone else set, left alone, with the evidence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices_left_alone: Vec<ManualSetting>,
}

/// A running trial as status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TrialStatus {
    /// The action's id.
    pub action: i64,
    /// The workload's name.
    pub workload: String,
    /// The strategy on trial.
    pub strategy: StrategyKind,
    /// `baseline`, `applying` or `measuring`, and whether the change is on: `measuring (on)`.
    pub phase: String,
    /// Windows measured without the change.
    pub windows_off: usize,
    /// Windows measured with the change.
    pub windows_on: usize,
    /// Windows needed on each side.
    pub windows_needed: usize,
    /// The signal judging it, described.
    pub signal: String,
    /// Its design (`switchback`, `control`, `before_after`, `one_way`).
    pub design: crate::design::DesignKind,
    /// Why that design, in a sentence.
    pub design_why: String,
    /// The sibling judged beside it, for a concurrent control.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
    /// Pairs of periods judged so far (switchback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pairs: Option<usize>,
    /// Seconds since the trial started.
    pub running_s: f64,
}

impl TrialStatus {
    /// A trial as status shows it.
    pub(super) fn of(t: &Trial) -> TrialStatus {
        let (off, on) = t.windows();
        TrialStatus {
            action: t.id,
            workload: t.name.clone(),
            strategy: t.strategy,
            phase: format!("{:?}{}", t.phase, if t.on { " (on)" } else { " (off)" }).to_lowercase(),
            windows_off: off.len(),
            windows_on: on.len(),
            windows_needed: t.windows_each_side(),
            signal: t
                .signal
                .as_ref()
                .map(|s| s.describe())
                .unwrap_or_else(|| "none (unverified)".into()),
            design: t.design_kind(),
            design_why: t.design_why.clone(),
            control: t.control.as_ref().map(|c| c.name.clone()),
            pairs: match &t.design {
                super::trial::Design::Switchback(sb) => sb.periods.as_ref().map(|p| p.pairs()),
                super::trial::Design::Sequential(_) => None,
            },
            running_s: perfpilot_sys::clock::mono_s() - t.started_s,
        }
    }
}

/// A workload as status shows it: `state` says what happens to it this scan, after the kept
/// actions `held` (each `"<strategy> kept (action <id>)"`).
pub(super) fn workload_status(
    w: &Workload,
    state: String,
    held: &[String],
    signal: Option<&Choice>,
) -> WorkloadStatus {
    WorkloadStatus {
        signature: w.signature.clone(),
        name: w.name.clone(),
        pids: w.pids(),
        cpu_cores: w.cpu_cores,
        threads: w.threads,
        rss: w.rss,
        age_s: w.age_s,
        signal: signal.and_then(|c| c.signal.as_ref().ok().map(|s| s.describe())),
        signal_source: signal.and_then(Choice::source),
        signal_passed_over: signal.map(|c| c.passed_over.clone()).unwrap_or_default(),
        state: if held.is_empty() {
            state
        } else {
            format!("{}; {state}", held.join(", "))
        },
        class: WorkloadClass::Managed,
        capacity: None,
        cgroup: None,
        container: None,
        cpuset: None,
        manual: Vec::new(),
    }
}

impl Engine {
    /// The class of a listed workload: one in a trial or with kept actions is managed; one left
    /// alone is excluded or manual; one without a signal where one is needed needs a signal.
    pub(super) fn class_of(
        &mut self,
        w: &Workload,
        none_held: bool,
        choice: &Choice,
    ) -> WorkloadClass {
        if !none_held
            || self
                .actions
                .trials
                .iter()
                .any(|t| t.signature == w.signature)
        {
            return WorkloadClass::Managed;
        }
        let ours = self.actions.bound_to(&w.signature).cloned();
        if self
            .policy
            .left_alone(&self.topo, w, ours.as_ref())
            .is_some()
        {
            return if self.policy.excluded(w) {
                WorkloadClass::Excluded
            } else {
                WorkloadClass::Manual
            };
        }
        if choice.signal.is_err() && !self.tun.allow_unverified {
            return WorkloadClass::NeedsSignal;
        }
        WorkloadClass::Managed
    }

    /// The daemon's own CPU since the engine started, against its budget.
    pub fn own_cpu(&self) -> CpuShare {
        CpuShare::between(
            self.own.at_start,
            CpuTime::now(),
            self.own.started.elapsed(),
            self.tun.cpu_budget_pct,
        )
    }

    /// Updates [`Engine::status`] after a scan; `states` says what happens to each listed
    /// workload, by signature.
    pub(super) fn update_status(
        &mut self,
        workloads: &[Workload],
        rates: &Rates,
        states: HashMap<String, String>,
    ) {
        self.status.time_ms = perfpilot_sys::clock::now_ms();
        self.status.interval_s = self.tun.interval_s;
        self.status.scans += 1;
        self.status.cpu = self.own_cpu();
        let mut listed = Vec::new();
        for w in workloads {
            let Some(state) = states.get(&w.signature) else {
                continue;
            };
            let held: Vec<String> = self
                .actions
                .held
                .iter()
                .filter(|h| h.signature == w.signature)
                .map(|h| format!("{} kept (action {})", h.strategy, h.id))
                .collect();
            let choice = self.signal_choice(w, rates);
            let class = self.class_of(w, held.is_empty(), &choice);
            let mut s = workload_status(w, state.clone(), &held, Some(&choice));
            s.class = class;
            s.capacity = self
                .policy
                .rule_for(w)
                .and_then(|r| r.capacity.as_ref())
                .map(|t| t.view(w.cpu_cores));
            let placement = self.policy.placement(w);
            s.cgroup = placement.cgroup;
            s.container = placement.container;
            // What the config leaves alone is not read further (numa_maps and smaps walk
            // page tables).
            if class != WorkloadClass::Excluded {
                let ours = self.actions.bound_to(&w.signature).cloned();
                let manual = self.policy.manual(&self.topo, w, ours.as_ref());
                s.cpuset = (!manual.world.is_whole(&self.topo)).then_some(manual.world.cpus);
                s.manual = manual.settings;
            }
            listed.push(s);
        }
        self.status.workloads = listed;
        self.status.trials = self.actions.trials.iter().map(TrialStatus::of).collect();
    }
}
