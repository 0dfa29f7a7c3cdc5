//! Proposing: for each eligible workload, the enabled strategies are asked in order (cache
//! affinity, memory affinity, large pages) until one proposes an action, which starts a trial;
//! block devices are asked about read-ahead (those `read_ahead_devices` lists, or all), judged by
//! the workload reading the most among those the config does not leave alone.

use std::collections::{BTreeMap, HashMap};

use perfpilot_observe::workload::{Workload, WorkloadMemory};
use perfpilot_observe::{Rates, Sample, Topology};
use perfpilot_sys::block::{self, DiskStats};
use perfpilot_sys::change::Change;
use perfpilot_sys::process::MapRange;
use perfpilot_sys::stat::ThpSettings;
use tracing::debug;

use super::manual;
use super::plan::Planned;
use super::policy::{backed_off, ineligible, unlisted};
use super::trial::Proposed;
use super::{Engine, EngineError};
use crate::fleet::Advice;
use crate::signal::SignalKind;
use crate::signal::proxy::read_bytes_per_s;
use crate::strategy::{
    CacheAffinity, Context, DeviceView, LargePages, MemoryAffinity, Proposal, ReadAhead, Strategy,
    StrategyKind, View,
};

/// What every strategy sees of the machine this scan.
struct Scan<'a> {
    /// Busy share (0..=1) of each online CPU.
    busy: &'a BTreeMap<u32, f64>,
    thp: ThpSettings,
    page_size: u64,
}

/// A workload being asked about, with what every strategy's turn at it needs.
struct Asked<'a> {
    w: &'a Workload,
    scan: &'a Scan<'a>,
    rates: &'a Rates,
    workloads: &'a [Workload],
    /// Its signal, or why it has none (strategies still run when unverified changes are allowed).
    signal: &'a Result<SignalKind, String>,
    /// The part of the machine its cgroup's cpuset leaves to perfpilot, when not all of it.
    inside: Option<&'a Topology>,
}

/// A workload's memory placement and maps, read once a scan.
type MemoryRead = (Option<WorkloadMemory>, Option<HashMap<i32, Vec<MapRange>>>);

/// What one strategy's turn at a workload gave.
enum Turn {
    /// Ask the next strategy; `Some` is the state to show unless a later one says more.
    Next(Option<String>),
    /// Stop asking: the state to show.
    Stop(String),
}

/// The busy share (0..=1) of each online CPU over the last interval.
fn busy_shares(rates: &Rates) -> BTreeMap<u32, f64> {
    rates
        .cpus
        .iter()
        .filter_map(|c| Some((c.cpu?, c.busy / 100.0)))
        .collect()
}

/// The strategies asked about a workload, in order.
pub(super) const WORKLOAD_STRATEGIES: [StrategyKind; 3] = [
    StrategyKind::CacheAffinity,
    StrategyKind::MemoryAffinity,
    StrategyKind::LargePages,
];

/// A trial to start, as planned (`None`: unverified, no design).
#[allow(clippy::too_many_arguments)]
fn proposed<'a>(
    w: &'a Workload,
    kind: StrategyKind,
    changes: Vec<perfpilot_sys::change::Change>,
    reason: String,
    irreversible: bool,
    signal: Option<crate::signal::SignalKind>,
    judge: String,
    steady: Vec<f64>,
    planned: Option<Planned>,
) -> Proposed<'a> {
    Proposed {
        w,
        kind,
        changes,
        reason,
        server_kind: super::plan::server_kind(w, signal.as_ref()),
        signal,
        judge,
        steady,
        planned: planned.unwrap_or_else(|| Planned::unverified(irreversible)),
    }
}

impl Engine {
    /// Asks the strategies about every listed workload and the block devices; returns what
    /// status shows of each workload by signature.
    pub(super) fn propose(
        &mut self,
        workloads: &[Workload],
        rates: &Rates,
        prev: &Sample,
        cur: &Sample,
    ) -> Result<HashMap<String, String>, EngineError> {
        let states = self.propose_workloads(workloads, rates)?;
        // Devices: read-ahead, judged by the workload reading the most (not in a dry run,
        // which is about workloads).
        if self.tun.read_ahead && !self.dry {
            self.propose_devices(workloads, &busy_shares(rates), rates, prev, cur)?;
        }
        Ok(states)
    }

    /// Asks the strategies about every listed workload; returns what status shows of each by
    /// signature.
    pub(super) fn propose_workloads(
        &mut self,
        workloads: &[Workload],
        rates: &Rates,
    ) -> Result<HashMap<String, String>, EngineError> {
        let busy = busy_shares(rates);
        let scan = Scan {
            busy: &busy,
            thp: perfpilot_sys::stat::read_thp(&self.fs).unwrap_or_default(),
            page_size: perfpilot_sys::page_size(),
        };
        let mut states = HashMap::new();
        for w in workloads {
            if let Some(state) = self.propose_for(w, &scan, rates, workloads)? {
                states.insert(w.signature.clone(), state);
            }
        }
        Ok(states)
    }

    /// What happens to one workload this scan, as status says it; `None` when it is not listed
    /// (idle and small).
    fn propose_for(
        &mut self,
        w: &Workload,
        scan: &Scan,
        rates: &Rates,
        workloads: &[Workload],
    ) -> Result<Option<String>, EngineError> {
        if let Some(why) = self.occupied(w) {
            return Ok(Some(why));
        }
        if unlisted(w, self.tun.min_cpu_cores, self.tun.min_memory_bytes()) {
            return Ok(None);
        }
        let ours = self.actions.bound_to(&w.signature);
        if let Some(why) = self.policy.left_alone(&self.topo, w, ours) {
            return Ok(Some(why));
        }
        if let Some(why) = ineligible(w, self.tun.min_age_s, self.tun.min_cpu_cores) {
            return Ok(Some(why));
        }
        let signal = self.signal_of(w, rates);
        if let Err(why) = &signal
            && !self.tun.allow_unverified
        {
            return Ok(Some(why.clone()));
        }
        let held_kinds: Vec<StrategyKind> = self
            .actions
            .held
            .iter()
            .filter(|h| h.signature == w.signature)
            .map(|h| h.strategy)
            .collect();
        let mut state = "optimized: nothing more to do".to_string();
        let mut fleet_skips: Vec<String> = Vec::new();
        // Someone else's settings leave their strategies alone; the cgroup's cpuset is where
        // the others may place it.
        let manual = self.policy.manual(&self.topo, w, ours);
        let inside = (!manual.world.is_whole(&self.topo)).then(|| {
            self.topo
                .within(&manual.world.cpus, manual.world.mems.as_ref())
        });
        let asked = Asked {
            w,
            scan,
            rates,
            workloads,
            signal: &signal,
            inside: inside.as_ref(),
        };
        let mut left: Vec<String> = Vec::new();
        let mut read = None;
        for kind in self.fleet_order(&w.signature, &WORKLOAD_STRATEGIES) {
            if !kind.enabled(&self.tun) || held_kinds.contains(&kind) {
                continue;
            }
            if let Some(s) = manual.blocking(kind) {
                left.push(format!(
                    "{kind} left alone: manually tuned {}",
                    s.describe()
                ));
                continue;
            }
            if let Some(Advice::Skip(why)) = self.fleet_advice(&w.signature, kind) {
                fleet_skips.push(format!("{kind} skipped: {why}"));
                continue;
            }
            match self.turn(kind, &asked, &mut read)? {
                Turn::Next(Some(s)) => state = s,
                Turn::Next(None) => {}
                Turn::Stop(s) => {
                    state = s;
                    break;
                }
            }
        }
        if !left.is_empty() {
            state = format!("{state}; {}", left.join("; "));
        }
        if !fleet_skips.is_empty() {
            state = format!("{state}; {}", fleet_skips.join("; "));
        }
        Ok(Some(state))
    }

    /// Why `w` is not asked at all: it is in a trial, or the control of one.
    fn occupied(&self, w: &Workload) -> Option<String> {
        if let Some(t) = self
            .actions
            .trials
            .iter()
            .find(|t| t.signature == w.signature)
        {
            return Some(format!("trial of {} (action {})", t.strategy, t.id));
        }
        // A control is left as it is while its trial runs.
        self.actions
            .trials
            .iter()
            .find(|t| {
                t.control
                    .as_ref()
                    .is_some_and(|c| c.signature == w.signature)
            })
            .map(|t| {
                format!(
                    "the control of action {} ({} on {}): left as it is while that trial runs",
                    t.id, t.strategy, t.name
                )
            })
    }

    /// Strategy `kind`'s turn at a workload: backed off, waiting at the gate for a steady
    /// signal, its proposal, or a trial started. `read` keeps the workload's memory once read
    /// this scan.
    fn turn(
        &mut self,
        kind: StrategyKind,
        a: &Asked,
        read: &mut Option<MemoryRead>,
    ) -> Result<Turn, EngineError> {
        let w = a.w;
        let now = perfpilot_sys::clock::now_ms();
        if let Some((left_s, why)) = backed_off(&self.store, &w.signature, kind.as_str(), now)? {
            return Ok(Turn::Next(Some(format!(
                "{kind} backed off for {left_s:.0} s: {why}"
            ))));
        }
        // Waiting at the gate: read the signal first; the strategy proposes afresh (with
        // the memory it reads) only once the signal is steady.
        if !self.dry
            && let Ok(s) = a.signal
            && self.steady.waits(&w.signature, kind)
            && let Err(why) = self.steady_signal(w, s, a.rates)
        {
            self.steady.wait(&w.signature, kind);
            return Ok(Turn::Stop(format!("would try {kind}: {why}")));
        }
        // Read once a scan for the strategies that need it (page-table walks: the
        // dearest reading of a large server with many processes).
        if kind != StrategyKind::CacheAffinity && read.is_none() {
            *read = Some(self.watch.read_memory(w));
        }
        let (memory, maps) = match (&*read, kind) {
            (Some((memory, maps)), k) if k != StrategyKind::CacheAffinity => {
                (memory.as_ref(), maps.as_ref())
            }
            _ => (None, None),
        };
        let bound = self.actions.bound_to(&w.signature).cloned();
        let ctx = Context {
            topo: a.inside.unwrap_or(&self.topo),
            tun: &self.tun,
            cpu_busy: a.scan.busy,
            thp: &a.scan.thp,
            collapse_supported: self.watch.collapse_supported,
            interval_s: self.tun.interval_s,
            page_size: a.scan.page_size,
        };
        let view = View {
            w,
            memory,
            maps,
            bound_to: bound.as_ref(),
        };
        let p = match kind {
            StrategyKind::CacheAffinity => CacheAffinity.propose(&view, &ctx),
            StrategyKind::MemoryAffinity => MemoryAffinity.propose(&view, &ctx),
            StrategyKind::LargePages => LargePages.propose(&view, &ctx),
            StrategyKind::ReadAhead => return Ok(Turn::Next(None)),
        };
        match p {
            Proposal::Skip(why) => {
                debug!(workload = %w.name, strategy = %kind, "no action: {why}");
                Ok(Turn::Next(Some(format!("{kind}: {why}"))))
            }
            Proposal::Act { reason, .. } if self.dry => {
                Ok(Turn::Stop(format!("would try {kind}: {reason}")))
            }
            Proposal::Act {
                changes,
                reason,
                cheap_undo,
                irreversible,
            } => self
                .act(kind, a, changes, reason, cheap_undo, irreversible)
                .map(Turn::Stop),
        }
    }

    /// Starts the trial of `kind`'s proposal on `a.w` once its signal is steady and its
    /// design planned; the state `status` shows either way.
    fn act(
        &mut self,
        kind: StrategyKind,
        a: &Asked,
        changes: Vec<Change>,
        reason: String,
        cheap_undo: bool,
        irreversible: bool,
    ) -> Result<String, EngineError> {
        let w = a.w;
        if let Ok(s) = a.signal
            && let Err(why) = self.steady_signal(w, s, a.rates)
        {
            self.steady.wait(&w.signature, kind);
            return Ok(format!("would try {kind}: {why}"));
        }
        let planned = match a.signal {
            Ok(s) => {
                let readings = self.steady.peek(&w.signature);
                Some(self.plan_design(
                    w,
                    kind,
                    &changes,
                    cheap_undo,
                    irreversible,
                    s,
                    a.workloads,
                    a.rates,
                    &readings,
                ))
            }
            Err(_) => None,
        };
        if let Some(name) = planned.as_ref().and_then(|p| p.wait_for.clone()) {
            self.steady.wait(&w.signature, kind);
            return Ok(format!(
                "would try {kind}: waiting for the signal of {name}, a sibling to judge it against, to be steady"
            ));
        }
        let need_s = planned.as_ref().map_or(0.0, |p| p.history_s);
        // Set every time: a design that needs no history opens a gate an earlier plan shut.
        self.steady.need_history(&w.signature, need_s);
        let watched_s = self.steady.watched_s(&w.signature);
        if !self.steady.holds(&w.signature, need_s) {
            self.steady.wait(&w.signature, kind);
            return Ok(format!(
                "would try {kind}: {}",
                super::steady::watching(watched_s, need_s)
            ));
        }
        let steady = self.steady.take(&w.signature);
        let id = self.start(proposed(
            w,
            kind,
            changes,
            reason.clone(),
            irreversible,
            a.signal.as_ref().ok().cloned(),
            w.signature.clone(),
            steady,
            planned,
        ))?;
        Ok(match self.fleet_advice(&w.signature, kind) {
            Some(Advice::First(why)) => {
                format!("trial of {kind} (action {id}), first: {why}; {reason}")
            }
            _ => format!("trial of {kind} (action {id}): {reason}"),
        })
    }

    /// Asks read-ahead about every block device the config lets it tune that is not already in
    /// a trial, kept or backed off.
    fn propose_devices(
        &mut self,
        workloads: &[Workload],
        busy: &BTreeMap<u32, f64>,
        rates: &Rates,
        prev: &Sample,
        cur: &Sample,
    ) -> Result<(), EngineError> {
        let mut left = Vec::new();
        for d in &cur.disks {
            if !self.policy.config.read_ahead_device(&d.name) {
                continue;
            }
            let sig = format!("device:{}", d.name);
            if self.actions.trials.iter().any(|t| t.signature == sig)
                || self.actions.held.iter().any(|h| h.signature == sig)
            {
                continue;
            }
            // A read-ahead someone set by hand stays, unless the config names the device.
            if !self.policy.config.read_ahead_named(&d.name)
                && let Ok(q) = block::read_queue(&self.fs, &d.name)
                && let Some(m) = manual::read_ahead(&d.name, &q)
            {
                left.push(m);
                continue;
            }
            let now = perfpilot_sys::clock::now_ms();
            if backed_off(&self.store, &sig, StrategyKind::ReadAhead.as_str(), now)?.is_some() {
                continue;
            }
            let Some(before) = prev.disks.iter().find(|x| x.name == d.name) else {
                continue;
            };
            self.propose_device(d, before, workloads, busy, rates)?;
        }
        self.status.devices_left_alone = left;
        Ok(())
    }

    /// Asks read-ahead about device `d` (its counters `before` and now) and starts its trial,
    /// judged by [`Engine::device_judge`], when it proposes one.
    fn propose_device(
        &mut self,
        d: &DiskStats,
        before: &DiskStats,
        workloads: &[Workload],
        busy: &BTreeMap<u32, f64>,
        rates: &Rates,
    ) -> Result<(), EngineError> {
        let Ok(queue) = block::read_queue(&self.fs, &d.name) else {
            return Ok(());
        };
        let thp = ThpSettings::default();
        let ctx = Context {
            topo: &self.topo,
            tun: &self.tun,
            cpu_busy: busy,
            thp: &thp,
            collapse_supported: false,
            interval_s: self.tun.interval_s,
            page_size: 4096,
        };
        let dv = DeviceView {
            name: &d.name,
            queue: &queue,
            before,
            after: d,
            interval_s: rates.interval_s,
        };
        let (changes, reason, cheap_undo, irreversible) = match ReadAhead.propose(&dv, &ctx) {
            Proposal::Act {
                changes,
                reason,
                cheap_undo,
                irreversible,
            } => (changes, reason, cheap_undo, irreversible),
            Proposal::Skip(why) => {
                debug!(device = %d.name, "read_ahead: no action: {why}");
                return Ok(());
            }
        };
        let sig = format!("device:{}", d.name);
        let (judge_sig, signal, planned) = match self.device_judge(workloads, rates) {
            Some((w, Ok(s))) => {
                if let Err(why) = self.steady_signal(w, &s, rates) {
                    debug!(device = %d.name, judge = %w.name, "read_ahead waits: {why}");
                    return Ok(());
                }
                let planned = self.plan_design(
                    w,
                    StrategyKind::ReadAhead,
                    &changes,
                    cheap_undo,
                    irreversible,
                    &s,
                    workloads,
                    rates,
                    &[],
                );
                (w.signature.clone(), Some(s), Some(planned))
            }
            _ if self.tun.allow_unverified => (sig.clone(), None, None),
            _ => {
                debug!(device = %d.name, "read_ahead waits: no workload to judge it reads ({reason})");
                return Ok(());
            }
        };
        // The judge's readings stay with it: its own trial may want them.
        self.start(proposed(
            &device_workload(d, sig),
            StrategyKind::ReadAhead,
            changes,
            reason,
            irreversible,
            signal,
            judge_sig,
            Vec::new(),
            planned,
        ))?;
        Ok(())
    }

    /// The judge of a read-ahead change, with its signal: the workload reading the most bytes,
    /// of those the config does not leave alone (under only_matched, a matched one: not someone
    /// else's reader).
    fn device_judge<'w>(
        &mut self,
        workloads: &'w [Workload],
        rates: &Rates,
    ) -> Option<(&'w Workload, Result<SignalKind, String>)> {
        let w = workloads
            .iter()
            .filter(|w| !self.policy.excluded(w))
            .max_by(|a, b| read_bytes_per_s(a, rates).total_cmp(&read_bytes_per_s(b, rates)))
            .filter(|w| read_bytes_per_s(w, rates) > 0.0)?;
        Some((w, self.signal_of(w, rates)))
    }
}

/// A block device as the workload a read-ahead trial acts on (signature `device:NAME`).
fn device_workload(d: &DiskStats, signature: String) -> Workload {
    Workload {
        signature,
        name: d.name.clone(),
        comm: d.name.clone(),
        cmdline: String::new(),
        uid: 0,
        members: vec![],
        shared: vec![],
        age_s: 0.0,
        cpu_cores: 0.0,
        threads: 0,
        rss: 0,
    }
}
