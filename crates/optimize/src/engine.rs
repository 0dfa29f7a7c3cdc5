//! The engine: one [`Engine::scan`] per interval samples the machine, advances running trials,
//! enforces kept actions, and starts new trials where a strategy proposes one.
//!
//! Every change is journaled before it is made; every trial ends in a stored verdict.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use perfpilot_observe::pmu::PmuSet;
use perfpilot_observe::rates::MemoryBook;
use perfpilot_observe::workload::{self, Workload, WorkloadMemory};
use perfpilot_observe::{Rates, Sample, Sampler, SamplerConfig, Topology};
use perfpilot_store::Store;
use perfpilot_sys::change::{self, Applied, Change, Undo};
use perfpilot_sys::perf::Event;
use perfpilot_sys::process::{MapRange, ProcReader, ShmAttach};
use perfpilot_sys::{CpuSet, Fs, block};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::config::{Config, Identity, RuleAction};
use crate::journal::{self, ActionDoc, JournalError};
use crate::signal::{self, SignalKind, Windowed};
use crate::stats::{self, Decision, Gain, Stats};
use crate::strategy::{
    self, CacheAffinity, Context, DeviceView, LargePages, MemoryAffinity, Proposal, ReadAhead,
    Strategy, StrategyKind, View,
};
use crate::tunables::Tunables;

/// An engine failure that stops the daemon (only the store: without a journal nothing may be
/// changed).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Store(#[from] perfpilot_store::Error),
    #[error("reading the topology: {0}")]
    Topology(String),
}

/// The evidence behind a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub action: i64,
    pub signal: String,
    pub higher_is_better: bool,
    pub interleaved: bool,
    pub before: Stats,
    pub after: Stats,
    /// The gain (> 1 is better) with its interval; `None` when there were too few windows.
    pub gain: Option<Gain>,
    pub decision: Decision,
    pub why: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Phase {
    /// Windows before the change (sequential trials).
    Baseline,
    /// Applying a paced change, one step per scan.
    Applying,
    /// Windows after the change (sequential), or alternating off/on windows (interleaved).
    Measuring,
}

/// A running trial.
struct Trial {
    id: i64,
    signature: String,
    name: String,
    strategy: StrategyKind,
    doc: ActionDoc,
    undo: Vec<Undo>,
    steps: VecDeque<Change>,
    phase: Phase,
    /// The change is in effect now.
    on: bool,
    off_obs: Vec<f64>,
    on_obs: Vec<f64>,
    /// The workload whose signal judges the action (itself, or for a device, its top reader).
    judge: String,
    /// `None`: unverified (allow_unverified): applied, paced, and kept without a verdict.
    signal: Option<SignalKind>,
    failures: u32,
    reason: String,
    /// Whether any step changed anything (a step can fail whole: no free huge pages, …).
    effective: bool,
    /// What the last ineffective step said.
    last_problem: Option<String>,
}

/// A kept action that is enforced (new threads get the mask; a mask changed behind our back
/// makes the workload manual).
struct Held {
    id: i64,
    signature: String,
    strategy: StrategyKind,
    doc: ActionDoc,
}

/// What status shows of a workload.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadStatus {
    pub signature: String,
    pub name: String,
    pub pids: Vec<i32>,
    pub cpu_cores: f64,
    pub threads: usize,
    pub rss: u64,
    pub age_s: f64,
    pub signal: Option<String>,
    /// What perfpilot does with it and why.
    pub state: String,
}

/// What the engine reports after each scan (written to `status.json` by the daemon).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    pub time_ms: i64,
    pub interval_s: f64,
    pub workloads: Vec<WorkloadStatus>,
    pub trials: Vec<TrialStatus>,
    pub notes: Vec<String>,
    /// The daemon's own CPU, % of one CPU, over its life: all of it, and the monitoring part
    /// (without the time spent making changes, which pacing bounds).
    pub own_cpu_pct: f64,
    pub monitoring_cpu_pct: f64,
    pub scans: u64,
}

/// A running trial as status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TrialStatus {
    pub action: i64,
    pub workload: String,
    pub strategy: StrategyKind,
    pub phase: String,
    pub windows_off: usize,
    pub windows_on: usize,
    pub windows_needed: usize,
    pub signal: String,
}

/// The optimizer.
pub struct Engine {
    fs: Fs,
    store: Store,
    topo: Topology,
    config: Config,
    pub tun: Tunables,
    sampler: Sampler,
    reader: ProcReader,
    prev: Option<Sample>,
    book: MemoryBook,
    trials: Vec<Trial>,
    held: Vec<Held>,
    windowed: HashMap<String, Windowed>,
    opted_out: HashMap<(i32, u64), bool>,
    identity: HashMap<(i32, u64), (Option<String>, Option<String>)>,
    manual: HashMap<String, String>,
    collapse_supported: bool,
    /// Cycles and instructions per judged workload, where the machine has PMU counters.
    pmu: Option<PmuSet>,
    /// Last (cycles, instructions) totals per workload signature.
    pmu_last: HashMap<String, (u64, u64)>,
    pub status: Status,
    started: Instant,
    cpu0: Duration,
}

impl Engine {
    /// An engine over `fs` journaling to `store`, with `config` and the persisted tunables.
    pub fn new(
        fs: &Fs,
        store: Store,
        config: Config,
        tun: Tunables,
    ) -> Result<Engine, EngineError> {
        let topo = Topology::read(fs).map_err(|e| EngineError::Topology(e.to_string()))?;
        store.set_durable()?;
        let sampler = Sampler::new(
            fs,
            SamplerConfig {
                threads: true,
                expensive_every: 0,
                per_cpu_ctxt: false,
                ..SamplerConfig::default()
            },
        );
        let mut notes = vec![format!(
            "hardware prefetch: {}",
            strategy::read_ahead::hardware_prefetch()
                .err()
                .unwrap_or_default()
        )];
        if let Err(why) = perfpilot_sys::perf::hardware_support() {
            notes.push(format!("PMU counters: not supported ({why}); signals come from probes, I/O progress or CPU consumed"));
        }
        let pmu = perfpilot_sys::perf::hardware_support()
            .is_ok()
            .then(|| PmuSet::new(&[Event::Cycles, Event::Instructions]));
        let collapse_supported = perfpilot_sys::collapse::kernel_supports_collapse();
        if !collapse_supported {
            notes.push("large pages: this kernel has no process_madvise(MADV_COLLAPSE)".into());
        }
        Ok(Engine {
            fs: fs.clone(),
            store,
            topo,
            config,
            tun,
            sampler,
            reader: ProcReader::new(fs),
            prev: None,
            book: MemoryBook::default(),
            trials: Vec::new(),
            held: Vec::new(),
            windowed: HashMap::new(),
            opted_out: HashMap::new(),
            identity: HashMap::new(),
            manual: HashMap::new(),
            collapse_supported,
            pmu,
            pmu_last: HashMap::new(),
            status: Status {
                notes,
                ..Status::default()
            },
            started: Instant::now(),
            cpu0: perfpilot_sys::self_cpu_time(),
        })
    }

    /// The store (for status and tunables).
    pub fn store(&mut self) -> &mut Store {
        &mut self.store
    }

    /// Restores the actions a previous daemon left open: trials are undone (their outcome was
    /// never decided), kept actions are re-adopted while their processes live.
    pub fn recover(&mut self) -> Result<(), EngineError> {
        for rec in self.store.actions(true, 100_000)? {
            let (doc, undo) = match journal::parse(&rec) {
                Ok(x) => x,
                Err(e) => {
                    warn!("{e}; marking it failed");
                    self.store
                        .journal_set_state(rec.id, "failed", &e.to_string())?;
                    continue;
                }
            };
            if rec.state == "kept" {
                let alive = doc
                    .members
                    .iter()
                    .any(|(pid, st)| journal::starttime(&self.fs, *pid) == Some(*st))
                    || doc.members.is_empty();
                if alive {
                    info!(action = rec.id, workload = %rec.workload, strategy = %rec.strategy, "re-adopting kept action after restart");
                    if let Some(strategy) = StrategyKind::parse(&rec.strategy) {
                        self.held.push(Held {
                            id: rec.id,
                            signature: rec.signature.clone(),
                            strategy,
                            doc,
                        });
                    }
                } else {
                    self.store.journal_set_state(
                        rec.id,
                        "ended",
                        "its processes exited while the daemon was down",
                    )?;
                }
                continue;
            }
            for line in journal::undo_all(&self.fs, &doc.members, &undo) {
                info!(action = rec.id, workload = %rec.workload, strategy = %rec.strategy, "recovery: {line}");
            }
            self.store.journal_set_state(
                rec.id,
                "reverted",
                "recovered after a crash: the trial was abandoned and its changes undone",
            )?;
        }
        Ok(())
    }

    /// One scan. Errors other than the store's are logged and the scan goes on.
    pub fn scan(&mut self) -> Result<(), EngineError> {
        self.reload_tunables()?;
        let cur = match self.sampler.sample() {
            Ok(s) => s,
            Err(e) => {
                warn!("sample failed: {e}; skipping this scan");
                return Ok(());
            }
        };
        let Some(prev) = self.prev.take() else {
            self.prev = Some(cur);
            return Ok(());
        };
        let r = self.scan_pair(&prev, &cur);
        self.prev = Some(cur);
        r
    }

    fn scan_pair(&mut self, prev: &Sample, cur: &Sample) -> Result<(), EngineError> {
        let rates = match Rates::between(prev, cur) {
            Ok(r) => r,
            Err(e) => {
                warn!("cannot compare samples: {e}");
                return Ok(());
            }
        };
        self.book.update(cur);
        let shm = self.shared_memory(cur, &rates);
        let workloads = workload::group(cur, &rates, &shm);
        let busy: BTreeMap<u32, f64> = rates
            .cpus
            .iter()
            .filter_map(|c| Some((c.cpu?, c.busy / 100.0)))
            .collect();
        let observations = self.observe_signals(&workloads, &rates, cur);
        self.advance_trials(&workloads, &observations)?;
        self.enforce_held(&workloads)?;
        let mut states: HashMap<String, String> = HashMap::new();
        self.propose(&workloads, &busy, &rates, prev, cur, &mut states)?;
        self.update_status(&workloads, &rates, states);
        Ok(())
    }

    fn reload_tunables(&mut self) -> Result<(), EngineError> {
        let mut t = Tunables::default();
        for (n, v) in self.store.tunables()? {
            if let Err(e) = t.set(&n, &v) {
                warn!("persisted {e}; ignored");
            }
        }
        self.config.apply_tunables(&mut t);
        self.tun = t;
        Ok(())
    }

    /// Reads the shared-memory attachments of the processes big enough to matter.
    fn shared_memory(&mut self, cur: &Sample, rates: &Rates) -> HashMap<i32, Vec<ShmAttach>> {
        let min_mem = (self.tun.num("min_memory_mib") * 1048576.0) as u64;
        let min_cpu = self.tun.num("min_cpu_cores") / 4.0;
        let cpu: HashMap<i32, f64> = rates
            .processes
            .iter()
            .map(|p| (p.pid, p.cpu / 100.0))
            .collect();
        let mut out = HashMap::new();
        for p in cur.processes.iter().filter(|p| !p.kernel_thread) {
            if p.rss < min_mem && cpu.get(&p.pid).copied().unwrap_or(0.0) < min_cpu {
                continue;
            }
            if let Ok(s) = self.reader.shm_attachments(p.pid)
                && !s.is_empty()
            {
                out.insert(p.pid, s);
            }
        }
        out
    }

    /// The observation of the current window for every workload some trial is judged by.
    fn observe_signals(
        &mut self,
        workloads: &[Workload],
        rates: &Rates,
        cur: &Sample,
    ) -> HashMap<String, Result<Option<f64>, String>> {
        let mut out = HashMap::new();
        let judges: Vec<(String, SignalKind)> = self
            .trials
            .iter()
            .filter_map(|t| Some((t.judge.clone(), t.signal.clone()?)))
            .collect();
        let t_s = cur.mono_ns as f64 / 1e9;
        let timeout = Duration::from_secs_f64(self.tun.num("probe_timeout_s"));
        for (sig, kind) in judges {
            if out.contains_key(&sig) {
                continue;
            }
            let Some(w) = workloads.iter().find(|w| w.signature == sig) else {
                continue;
            };
            let obs = match &kind {
                SignalKind::Probe { probe } => {
                    match signal::read_probe(probe, timeout) {
                        Ok(v) => {
                            let o = self.windowed.entry(sig.clone()).or_default().feed(
                                probe.kind(),
                                t_s,
                                v,
                            );
                            // Work per CPU-second: no observation while it used no CPU.
                            Ok(if probe.per_cpu() {
                                o.filter(|_| w.cpu_cores > 0.01).map(|x| x / w.cpu_cores)
                            } else {
                                o
                            })
                        }
                        Err(e) => {
                            self.windowed.entry(sig.clone()).or_default().reset();
                            Err(e.to_string())
                        }
                    }
                }
                SignalKind::Io => Ok(Some(
                    rates
                        .processes
                        .iter()
                        .filter(|p| w.pids().contains(&p.pid))
                        .map(|p| {
                            p.read_bytes_per_s.unwrap_or(0.0) + p.write_bytes_per_s.unwrap_or(0.0)
                        })
                        .sum(),
                )),
                SignalKind::Cpu => Ok(Some(w.cpu_cores)),
                SignalKind::Cpi => Ok(self.cpi(w)),
            };
            out.insert(sig, obs);
        }
        out
    }

    /// Cycles per instruction of a workload since its previous window (every thread counted;
    /// new threads are caught, exited ones keep their counts). `None` on the first window.
    fn cpi(&mut self, w: &Workload) -> Option<f64> {
        let set = self.pmu.as_mut()?;
        let (mut cycles, mut instructions) = (0u64, 0u64);
        for m in &w.members {
            set.track(m.pid, m.starttime, &m.tids);
            let totals = set.read(m.pid)?;
            cycles += totals.get(&Event::Cycles).copied().unwrap_or(0);
            instructions += totals.get(&Event::Instructions).copied().unwrap_or(0);
        }
        let prev = self
            .pmu_last
            .insert(w.signature.clone(), (cycles, instructions))?;
        let di = instructions.saturating_sub(prev.1);
        (di > 0).then(|| cycles.saturating_sub(prev.0) as f64 / di as f64)
    }

    /// Chooses a workload's signal: its probe, else PMU CPI, else its I/O progress, else the
    /// CPU it consumes when not saturated; `Err(why)` when none is usable.
    fn choose_signal(&self, w: &Workload, rates: &Rates) -> Result<SignalKind, String> {
        if let Some(rule) = self.rule_for(w)
            && let Some(p) = &rule.signal
        {
            return Ok(SignalKind::Probe { probe: p.clone() });
        }
        if self.pmu.is_some() {
            return Ok(SignalKind::Cpi);
        }
        let io: f64 = rates
            .processes
            .iter()
            .filter(|p| w.pids().contains(&p.pid))
            .map(|p| p.read_bytes_per_s.unwrap_or(0.0) + p.write_bytes_per_s.unwrap_or(0.0))
            .sum();
        if io > 64.0 * 1024.0 {
            return Ok(SignalKind::Io);
        }
        let capacity = (w.threads as f64).min(self.topo.online.len() as f64);
        let machine_busy = rates.total.busy / 100.0;
        // CPU consumed judges an action only for a workload that does measurable work and is
        // not saturated (then the same work for less CPU is a gain).
        if w.cpu_cores >= 0.05 && w.cpu_cores < 0.85 * capacity && machine_busy < 0.9 {
            return Ok(SignalKind::Cpu);
        }
        Err(format!(
            "needs a signal: it is CPU-saturated ({:.2} of {capacity:.0} cores), this machine has no PMU counters, and no probe is configured; give it one with [[workload]] signal = {{ url = …, metric = … }} or set allow_unverified",
            w.cpu_cores
        ))
    }

    fn identity_of(&mut self, pid: i32, starttime: u64) -> (Option<String>, Option<String>) {
        if let Some(v) = self.identity.get(&(pid, starttime)) {
            return v.clone();
        }
        let exe = self
            .reader
            .exe(pid)
            .ok()
            .flatten()
            .map(|p| p.to_string_lossy().into_owned());
        let cgroup = self
            .fs
            .read_opt(&format!("proc/{pid}/cgroup"))
            .ok()
            .flatten()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("0::").map(str::to_string))
            });
        self.identity
            .insert((pid, starttime), (exe.clone(), cgroup.clone()));
        (exe, cgroup)
    }

    fn rule_for(&self, w: &Workload) -> Option<&crate::config::Rule> {
        let m = w.members.first()?;
        let (exe, cgroup) = self
            .identity
            .get(&(m.pid, m.starttime))
            .cloned()
            .unwrap_or((None, None));
        self.config.rule_for(&Identity {
            comm: &w.comm,
            exe: exe.as_deref(),
            cmdline: &w.cmdline,
            cgroup: cgroup.as_deref(),
        })
    }

    /// Why a workload is left alone, if it is (config, `PERFPILOT=off`, manual tuning).
    fn left_alone(&mut self, w: &Workload) -> Option<String> {
        for m in &w.members {
            self.identity_of(m.pid, m.starttime);
        }
        match self.rule_for(w).map(|r| r.action) {
            Some(RuleAction::Exclude) => return Some("excluded by the config".into()),
            None if self.config.only_matched => {
                return Some("not matched by the config (only_matched)".into());
            }
            _ => {}
        }
        for m in &w.members {
            let key = (m.pid, m.starttime);
            let off = match self.opted_out.get(&key) {
                Some(v) => *v,
                None => {
                    let v = matches!(self.reader.environ_var(m.pid, "PERFPILOT"), Ok(Some(ref x)) if x == "off");
                    self.opted_out.insert(key, v);
                    v
                }
            };
            if off {
                return Some(format!(
                    "opted out (PERFPILOT=off in the environment of pid {})",
                    m.pid
                ));
            }
        }
        if let Some(why) = self.manual.get(&w.signature) {
            return Some(why.clone());
        }
        let ours: Option<&CpuSet> = self.bound_to(&w.signature);
        for m in &w.members {
            if let Some(mask) = &Self::mask_of(&self.fs, m)
                && !self.topo.online.is_subset(mask)
                && ours != Some(mask)
            {
                return Some(format!(
                    "manually tuned: pid {} has affinity {mask} (not set by perfpilot)",
                    m.pid
                ));
            }
            if let Ok(Some(cs)) = perfpilot_sys::affinity::cpuset_of(&self.fs, m.pid)
                && !self.topo.online.is_subset(&cs)
            {
                return Some(format!(
                    "manually tuned: pid {} is in a cpuset of {cs}",
                    m.pid
                ));
            }
        }
        None
    }

    /// The affinity of a member's main thread now: asked of the kernel on the live system (a
    /// sample may carry over an idle process's older reading), else the sample's.
    fn mask_of(fs: &Fs, m: &workload::Member) -> Option<CpuSet> {
        if fs.is_live() {
            perfpilot_sys::affinity::get_affinity(m.pid).ok()
        } else {
            m.cpus_allowed.clone()
        }
    }

    fn bound_to(&self, signature: &str) -> Option<&CpuSet> {
        self.held
            .iter()
            .filter(|h| h.signature == signature)
            .find_map(|h| h.doc.bound_to.as_ref())
            .or_else(|| {
                self.trials
                    .iter()
                    .find(|t| t.signature == signature && t.on)
                    .and_then(|t| t.doc.bound_to.as_ref())
            })
    }

    /// Applies `c` after journaling its undo record (extending action `id`).
    fn journal_and_apply(
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

    fn advance_trials(
        &mut self,
        workloads: &[Workload],
        obs: &HashMap<String, Result<Option<f64>, String>>,
    ) -> Result<(), EngineError> {
        let windows = self.tun.num("windows") as usize;
        let mut finished = Vec::new();
        for i in 0..self.trials.len() {
            let t = &mut self.trials[i];
            let Some(w) = workloads
                .iter()
                .find(|w| w.signature == t.signature)
                .or_else(|| {
                    t.signature
                        .starts_with("device:")
                        .then(|| workloads.first())
                        .flatten()
                })
            else {
                finished.push((i, None, "its workload exited".to_string()));
                continue;
            };
            // Someone changed our mask: the workload becomes manual.
            if t.on
                && let Some(mask) = &t.doc.bound_to
                && let Some((pid, now)) = changed_mask(&self.fs, w, &t.doc, mask)
            {
                let why = format!(
                    "manually tuned: pid {pid} affinity changed to {now} behind perfpilot's back"
                );
                self.manual.insert(t.signature.clone(), why.clone());
                finished.push((i, Some(Decision::Neutral), format!("{why}; left as it is")));
                continue;
            }
            // Threads started while bound inherited perfpilot's mask: journal and bind them.
            if t.on
                && let Some(mask) = t.doc.bound_to.clone()
            {
                bind_new_threads(
                    &mut self.store,
                    &self.fs,
                    t.id,
                    &mut t.doc,
                    &mut t.undo,
                    w,
                    &mask,
                )?;
            }
            match obs.get(&t.judge) {
                Some(Ok(Some(v))) => {
                    t.failures = 0;
                    match t.phase {
                        Phase::Baseline => t.off_obs.push(*v),
                        Phase::Applying => {}
                        Phase::Measuring => {
                            if t.on {
                                t.on_obs.push(*v)
                            } else {
                                t.off_obs.push(*v)
                            }
                        }
                    }
                }
                Some(Ok(None)) => {}
                Some(Err(e)) => {
                    t.failures += 1;
                    warn!(action = t.id, workload = %t.name, "signal: {e}");
                    if t.failures as usize > windows {
                        finished.push((
                            i,
                            None,
                            format!("its signal failed {} times in a row: {e}", t.failures),
                        ));
                        continue;
                    }
                }
                None => {}
            }
            // Next step.
            let members: Vec<(i32, Vec<i32>)> =
                w.members.iter().map(|m| (m.pid, m.tids.clone())).collect();
            // Interleaved trials need one baseline window before alternating; sequential ones all.
            let baseline = if t.doc.interleave { 1 } else { windows };
            if t.phase == Phase::Baseline && t.off_obs.len() >= baseline {
                t.phase = Phase::Applying;
            }
            if t.phase == Phase::Applying {
                if let Some(c) = t.steps.pop_front() {
                    let c = refresh_tids(c, &members);
                    let applied = Self::journal_and_apply(
                        &mut self.store,
                        &self.fs,
                        t.id,
                        &mut t.doc,
                        &mut t.undo,
                        c,
                    )?;
                    match applied.as_ref().map(outcome) {
                        Some((true, what)) => {
                            t.effective = true;
                            info!(action = t.id, workload = %t.name, "step applied: {what}");
                        }
                        Some((false, what)) => {
                            warn!(action = t.id, workload = %t.name, "step changed nothing: {what}");
                            t.last_problem = Some(what);
                        }
                        None => t.last_problem = Some("the step failed (see the log)".into()),
                    }
                    t.on = true;
                }
                if t.steps.is_empty() {
                    t.phase = Phase::Measuring;
                    // Nothing took effect: there is nothing to measure.
                    if !t.effective {
                        let why = format!(
                            "nothing could be applied: {}",
                            t.last_problem.clone().unwrap_or_default()
                        );
                        finished.push((i, Some(Decision::Neutral), why));
                        continue;
                    }
                }
                // Unverified: nothing to measure; kept once every step is applied.
                if t.signal.is_none() && t.phase == Phase::Measuring {
                    finished.push((i, None, String::new()));
                    continue;
                }
            } else if t.phase == Phase::Measuring && t.doc.interleave {
                if t.off_obs.len() >= windows && t.on_obs.len() >= windows {
                    finished.push((i, Some(Decision::Keep), String::new()));
                    continue;
                }
                // Alternate: after an on-window switch off, after an off-window switch on.
                if t.on {
                    for l in journal::undo_all(&self.fs, &t.doc.members, &t.undo) {
                        tracing::debug!(action = t.id, "interleave off: {l}");
                    }
                    t.on = false;
                } else {
                    for c in t.doc.changes.clone() {
                        if let Err(e) = journal::timed(|| change::apply(&self.fs, &c)) {
                            warn!(action = t.id, "re-applying {}: {e}", describe(&c));
                        }
                    }
                    if let Some(mask) = t.doc.bound_to.clone() {
                        bind_new_threads(
                            &mut self.store,
                            &self.fs,
                            t.id,
                            &mut t.doc,
                            &mut t.undo,
                            w,
                            &mask,
                        )?;
                    }
                    t.on = true;
                }
            } else if t.phase == Phase::Measuring && t.on_obs.len() >= windows {
                finished.push((i, Some(Decision::Keep), String::new()));
            }
        }
        // Decide, newest index first so removals keep indices valid.
        finished.sort_by_key(|f| std::cmp::Reverse(f.0));
        for (i, hint, why) in finished {
            let t = self.trials.remove(i);
            self.finish(t, hint, why)?;
        }
        Ok(())
    }

    /// Ends a trial: decides from its windows (or from `why` when it ended early), keeps or
    /// reverts, stores the verdict and the back-off.
    fn finish(
        &mut self,
        mut t: Trial,
        hint: Option<Decision>,
        why: String,
    ) -> Result<(), EngineError> {
        if t.signal.is_none() && why.is_empty() {
            let v = serde_json::json!({ "action": t.id, "decision": "unverified", "why": "no usable signal; applied because allow_unverified is on" });
            self.store.journal_set_verdict(t.id, &v.to_string())?;
            self.store.journal_set_state(t.id, "kept", "unverified")?;
            info!(action = t.id, workload = %t.name, strategy = %t.strategy, "kept without verification: {}", t.reason);
            self.held.push(Held {
                id: t.id,
                signature: t.signature.clone(),
                strategy: t.strategy,
                doc: t.doc,
            });
            return Ok(());
        }
        let conf = self.tun.num("confidence");
        let min_effect = self.tun.num("min_effect");
        let hib = t.signal.as_ref().is_none_or(|s| s.higher_is_better());
        let early = !why.is_empty();
        let gain = if early {
            None
        } else if t.doc.interleave {
            let n = t.off_obs.len().min(t.on_obs.len());
            stats::gain_paired(&t.off_obs[..n], &t.on_obs[..n], hib, conf)
        } else {
            stats::gain_independent(&t.off_obs, &t.on_obs, hib, conf)
        };
        let (decision, why) = match (&gain, hint) {
            (_, Some(Decision::Neutral)) if early => (Decision::Neutral, why),
            (Some(g), _) => {
                let d = stats::decide(g, min_effect);
                let what = match d {
                    Decision::Keep => format!(
                        "gain {:.3} ({:.3}..{:.3}) clears the minimum effect {min_effect}",
                        g.ratio, g.ci_low, g.ci_high
                    ),
                    Decision::Revert => format!(
                        "it made things worse: gain {:.3} ({:.3}..{:.3})",
                        g.ratio, g.ci_low, g.ci_high
                    ),
                    Decision::Neutral => format!(
                        "no clear effect: gain {:.3} ({:.3}..{:.3}) does not clear {min_effect}",
                        g.ratio, g.ci_low, g.ci_high
                    ),
                };
                (d, what)
            }
            (None, _) => (
                Decision::Neutral,
                if early {
                    why
                } else {
                    "too few usable windows to judge".into()
                },
            ),
        };
        let verdict = Verdict {
            action: t.id,
            signal: t.signal.as_ref().map(|s| s.describe()).unwrap_or_default(),
            higher_is_better: hib,
            interleaved: t.doc.interleave,
            before: Stats::of(&t.off_obs),
            after: Stats::of(&t.on_obs),
            gain,
            decision,
            why: why.clone(),
        };
        self.store.journal_set_verdict(t.id, &json(&verdict))?;
        let manual = self.manual.contains_key(&t.signature);
        match decision {
            Decision::Keep => {
                if !t.on {
                    for c in t.doc.changes.clone() {
                        if let Err(e) = journal::timed(|| change::apply(&self.fs, &c)) {
                            warn!(action = t.id, "re-applying {}: {e}", describe(&c));
                        }
                    }
                }
                info!(action = t.id, workload = %t.name, strategy = %t.strategy, "kept: {why} [{}]", t.reason);
                self.store.journal_set_state(t.id, "kept", &why)?;
                self.held.push(Held {
                    id: t.id,
                    signature: t.signature.clone(),
                    strategy: t.strategy,
                    doc: t.doc,
                });
            }
            _ if manual => {
                info!(action = t.id, workload = %t.name, strategy = %t.strategy, "{why}");
                self.store.journal_set_state(t.id, "manual", &why)?;
            }
            _ => {
                let lines = if t.on || !t.doc.interleave {
                    journal::undo_all(&self.fs, &t.doc.members, &t.undo)
                } else {
                    Vec::new()
                };
                t.on = false;
                let what = if t.doc.irreversible {
                    "stopped (huge pages stay; they cannot be split back cheaply)"
                } else {
                    "reverted"
                };
                info!(action = t.id, workload = %t.name, strategy = %t.strategy, "{what}: {why}; {}", lines.join("; "));
                self.store
                    .journal_set_state(t.id, "reverted", &format!("{what}: {why}"))?;
                let backoff = self.tun.num("backoff_s");
                self.store.backoff_set(
                    &t.signature,
                    t.strategy.as_str(),
                    perfpilot_sys::clock::now_ms() + (backoff * 1000.0) as i64,
                    &why,
                )?;
            }
        }
        Ok(())
    }

    /// Kept actions: new threads get the mask, a changed mask makes the workload manual, an
    /// exited workload ends the action.
    fn enforce_held(&mut self, workloads: &[Workload]) -> Result<(), EngineError> {
        let mut drop = Vec::new();
        for (i, h) in self.held.iter_mut().enumerate() {
            if h.signature.starts_with("device:") {
                continue;
            }
            let Some(w) = workloads.iter().find(|w| w.signature == h.signature) else {
                info!(action = h.id, strategy = %h.strategy, "its workload exited; the action ends");
                self.store
                    .journal_set_state(h.id, "ended", "its workload exited")?;
                drop.push(i);
                continue;
            };
            let Some(mask) = h.doc.bound_to.clone() else {
                continue;
            };
            if let Some((pid, now)) = changed_mask(&self.fs, w, &h.doc, &mask) {
                let why = format!(
                    "manually tuned: pid {pid} affinity changed to {now} behind perfpilot's back; left as it is"
                );
                info!(action = h.id, workload = %w.name, "{why}");
                self.manual.insert(h.signature.clone(), why.clone());
                self.store.journal_set_state(h.id, "manual", &why)?;
                drop.push(i);
                continue;
            }
            // Threads not yet bound (new ones, or new member processes). The undo list lives
            // in the journal; extend it there.
            let rec = self.store.action(h.id)?;
            let mut undo: Vec<Undo> = rec
                .and_then(|r| serde_json::from_str(&r.undo).ok())
                .unwrap_or_default();
            let n = bind_new_threads(
                &mut self.store,
                &self.fs,
                h.id,
                &mut h.doc,
                &mut undo,
                w,
                &mask,
            )?;
            if n > 0 {
                info!(action = h.id, workload = %w.name, "bound {n} new threads to {mask}");
            }
        }
        for i in drop.into_iter().rev() {
            self.held.remove(i);
        }
        Ok(())
    }

    fn propose(
        &mut self,
        workloads: &[Workload],
        busy: &BTreeMap<u32, f64>,
        rates: &Rates,
        prev: &Sample,
        cur: &Sample,
        states: &mut HashMap<String, String>,
    ) -> Result<(), EngineError> {
        let interval = self.tun.num("interval_s");
        let page = perfpilot_sys::page_size();
        let thp = perfpilot_sys::stat::read_thp(&self.fs).unwrap_or_default();
        let min_age = self.tun.num("min_age_s");
        let min_cpu = self.tun.num("min_cpu_cores");
        let order = [
            StrategyKind::CacheAffinity,
            StrategyKind::MemoryAffinity,
            StrategyKind::LargePages,
        ];
        for w in workloads {
            if let Some(t) = self.trials.iter().find(|t| t.signature == w.signature) {
                states.insert(
                    w.signature.clone(),
                    format!("trial of {} (action {})", t.strategy, t.id),
                );
                continue;
            }
            if w.cpu_cores < min_cpu.clamp(0.01, 0.05)
                && w.rss < (self.tun.num("min_memory_mib") * 1048576.0) as u64
            {
                continue; // idle and small: not even listed
            }
            if let Some(why) = self.left_alone(w) {
                states.insert(w.signature.clone(), why);
                continue;
            }
            if w.age_s < min_age {
                states.insert(
                    w.signature.clone(),
                    format!("too young ({:.0} s < min_age_s {min_age})", w.age_s),
                );
                continue;
            }
            if w.cpu_cores < min_cpu {
                states.insert(
                    w.signature.clone(),
                    format!("uses {:.2} cores < min_cpu_cores {min_cpu}", w.cpu_cores),
                );
                continue;
            }
            let signal = self.choose_signal(w, rates);
            let unverified = self.tun.on("allow_unverified");
            if let Err(why) = &signal
                && !unverified
            {
                states.insert(w.signature.clone(), why.clone());
                continue;
            }
            let held_kinds: Vec<StrategyKind> = self
                .held
                .iter()
                .filter(|h| h.signature == w.signature)
                .map(|h| h.strategy)
                .collect();
            let mut state = "optimized: nothing more to do".to_string();
            for kind in order {
                if !self.tun.on(kind.as_str()) || held_kinds.contains(&kind) {
                    continue;
                }
                if let Some((until, why)) = self.store.backoff_get(&w.signature, kind.as_str())?
                    && until > perfpilot_sys::clock::now_ms()
                {
                    state = format!(
                        "{kind} backed off for {:.0} s: {why}",
                        (until - perfpilot_sys::clock::now_ms()) as f64 / 1000.0
                    );
                    continue;
                }
                let needs_memory = kind != StrategyKind::CacheAffinity;
                let (memory, maps) = if needs_memory {
                    self.read_memory(w)
                } else {
                    (None, None)
                };
                let bound = self.bound_to(&w.signature).cloned();
                let ctx = Context {
                    topo: &self.topo,
                    tun: &self.tun,
                    cpu_busy: busy,
                    thp: &thp,
                    collapse_supported: self.collapse_supported,
                    interval_s: interval,
                    page_size: page,
                };
                let view = View {
                    w,
                    memory: memory.as_ref(),
                    maps: maps.as_ref(),
                    bound_to: bound.as_ref(),
                };
                let p = match kind {
                    StrategyKind::CacheAffinity => CacheAffinity.propose(&view, &ctx),
                    StrategyKind::MemoryAffinity => MemoryAffinity.propose(&view, &ctx),
                    StrategyKind::LargePages => LargePages.propose(&view, &ctx),
                    StrategyKind::ReadAhead => continue,
                };
                match p {
                    Proposal::Skip(why) => {
                        tracing::debug!(workload = %w.name, strategy = %kind, "no action: {why}");
                        state = format!("{kind}: {why}");
                    }
                    Proposal::Act {
                        changes,
                        reason,
                        interleave,
                        irreversible,
                    } => {
                        let sig = signal.as_ref().ok().cloned();
                        let id = self.start(
                            w,
                            kind,
                            changes,
                            reason.clone(),
                            interleave,
                            irreversible,
                            sig,
                            w.signature.clone(),
                        )?;
                        state = format!("trial of {kind} (action {id}): {reason}");
                        break;
                    }
                }
            }
            states.insert(w.signature.clone(), state);
        }
        // Devices: read-ahead, judged by the workload reading the most.
        if self.tun.on("read_ahead") {
            self.propose_devices(workloads, busy, rates, prev, cur)?;
        }
        Ok(())
    }

    fn propose_devices(
        &mut self,
        workloads: &[Workload],
        busy: &BTreeMap<u32, f64>,
        rates: &Rates,
        prev: &Sample,
        cur: &Sample,
    ) -> Result<(), EngineError> {
        let interval = self.tun.num("interval_s");
        let thp = perfpilot_sys::stat::ThpSettings::default();
        for d in &cur.disks {
            let sig = format!("device:{}", d.name);
            if self.trials.iter().any(|t| t.signature == sig)
                || self.held.iter().any(|h| h.signature == sig)
            {
                continue;
            }
            if let Some((until, _)) = self.store.backoff_get(&sig, "read_ahead")?
                && until > perfpilot_sys::clock::now_ms()
            {
                continue;
            }
            let Some(before) = prev.disks.iter().find(|x| x.name == d.name) else {
                continue;
            };
            let Ok(queue) = block::read_queue(&self.fs, &d.name) else {
                continue;
            };
            let ctx = Context {
                topo: &self.topo,
                tun: &self.tun,
                cpu_busy: busy,
                thp: &thp,
                collapse_supported: false,
                interval_s: interval,
                page_size: 4096,
            };
            let dv = DeviceView {
                name: &d.name,
                queue: &queue,
                before,
                after: d,
                interval_s: rates.interval_s,
            };
            let Proposal::Act {
                changes,
                reason,
                interleave,
                irreversible,
            } = ReadAhead.propose(&dv, &ctx)
            else {
                continue;
            };
            // The judge: the workload reading the most bytes from storage.
            let judge = workloads
                .iter()
                .max_by(|a, b| read_rate(a, rates).total_cmp(&read_rate(b, rates)))
                .filter(|w| read_rate(w, rates) > 0.0);
            let (judge_sig, signal) = match judge.map(|w| (w, self.choose_signal(w, rates))) {
                Some((w, Ok(s))) => (w.signature.clone(), Some(s)),
                _ if self.tun.on("allow_unverified") => (sig.clone(), None),
                _ => continue,
            };
            let pseudo = Workload {
                signature: sig.clone(),
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
            };
            self.start(
                &pseudo,
                StrategyKind::ReadAhead,
                changes,
                reason,
                interleave,
                irreversible,
                signal,
                judge_sig,
            )?;
        }
        Ok(())
    }

    /// Starts a trial: journals the action (nothing applied yet), then measures the baseline
    /// (or, for an unverified action, applies it at once and keeps it).
    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        w: &Workload,
        kind: StrategyKind,
        changes: Vec<Change>,
        reason: String,
        interleave: bool,
        irreversible: bool,
        signal: Option<SignalKind>,
        judge: String,
    ) -> Result<i64, EngineError> {
        let bound_to = changes.iter().find_map(|c| match c {
            Change::Affinity { cpus, .. } => Some(cpus.clone()),
            _ => None,
        });
        let doc = ActionDoc {
            members: w.members.iter().map(|m| (m.pid, m.starttime)).collect(),
            changes: Vec::new(),
            interleave,
            irreversible,
            signal: signal.clone(),
            bound_to,
        };
        let undo: Vec<Undo> = Vec::new();
        let id = self.store.journal_begin(
            &w.signature,
            &w.name,
            kind.as_str(),
            &json(&doc),
            &json(&undo),
            &reason,
        )?;
        // Unverified actions have nothing to measure: they are applied (paced) and kept.
        let (phase, note) = match &signal {
            Some(sig) => {
                info!(action = id, workload = %w.name, strategy = %kind, signal = %sig.describe(), "trial starts: {reason}");
                (Phase::Baseline, "measuring the baseline")
            }
            None => {
                info!(action = id, workload = %w.name, strategy = %kind, "applying without verification (allow_unverified): {reason}");
                (Phase::Applying, "applying (unverified)")
            }
        };
        self.store.journal_set_state(id, "trial", note)?;
        self.trials.push(Trial {
            id,
            signature: w.signature.clone(),
            name: w.name.clone(),
            strategy: kind,
            doc,
            undo,
            steps: changes.into(),
            phase,
            on: false,
            off_obs: Vec::new(),
            on_obs: Vec::new(),
            judge,
            signal,
            failures: 0,
            reason,
            effective: false,
            last_problem: None,
        });
        Ok(id)
    }

    /// Reads a workload's memory placement and maps (expensive: only when a strategy needs it).
    fn read_memory(
        &mut self,
        w: &Workload,
    ) -> (Option<WorkloadMemory>, Option<HashMap<i32, Vec<MapRange>>>) {
        let mut readings = Vec::new();
        let mut maps = HashMap::new();
        for m in &w.members {
            if let Ok(r) = self.sampler.memory_of(m.pid, m.starttime) {
                readings.push(r);
            }
            if let Ok(r) = self.reader.maps(m.pid) {
                maps.insert(m.pid, r);
            }
        }
        if readings.is_empty() {
            return (None, None);
        }
        (Some(WorkloadMemory::of(readings.iter())), Some(maps))
    }

    fn update_status(
        &mut self,
        workloads: &[Workload],
        rates: &Rates,
        states: HashMap<String, String>,
    ) {
        let windows = self.tun.num("windows") as usize;
        self.status.time_ms = perfpilot_sys::clock::now_ms();
        self.status.interval_s = self.tun.num("interval_s");
        self.status.scans += 1;
        let elapsed = self.started.elapsed().as_secs_f64();
        let spent = perfpilot_sys::self_cpu_time()
            .saturating_sub(self.cpu0)
            .as_secs_f64();
        let pct = |x: f64| {
            if elapsed > 0.0 {
                x / elapsed * 100.0
            } else {
                0.0
            }
        };
        self.status.own_cpu_pct = pct(spent);
        self.status.monitoring_cpu_pct =
            pct((spent - journal::action_cpu().as_secs_f64()).max(0.0));
        self.status.workloads = workloads
            .iter()
            .filter_map(|w| {
                let state = states.get(&w.signature)?.clone();
                let held: Vec<String> = self
                    .held
                    .iter()
                    .filter(|h| h.signature == w.signature)
                    .map(|h| format!("{} kept (action {})", h.strategy, h.id))
                    .collect();
                Some(WorkloadStatus {
                    signature: w.signature.clone(),
                    name: w.name.clone(),
                    pids: w.pids(),
                    cpu_cores: w.cpu_cores,
                    threads: w.threads,
                    rss: w.rss,
                    age_s: w.age_s,
                    signal: self.choose_signal(w, rates).ok().map(|s| s.describe()),
                    state: if held.is_empty() {
                        state
                    } else {
                        format!("{}; {state}", held.join(", "))
                    },
                })
            })
            .collect();
        self.status.trials = self
            .trials
            .iter()
            .map(|t| TrialStatus {
                action: t.id,
                workload: t.name.clone(),
                strategy: t.strategy,
                phase: format!("{:?}{}", t.phase, if t.on { " (on)" } else { " (off)" })
                    .to_lowercase(),
                windows_off: t.off_obs.len(),
                windows_on: t.on_obs.len(),
                windows_needed: windows,
                signal: t
                    .signal
                    .as_ref()
                    .map(|s| s.describe())
                    .unwrap_or_else(|| "none (unverified)".into()),
            })
            .collect();
    }

    /// Stops: running trials are undone; kept actions are undone too when `revert_on_stop`.
    pub fn shutdown(&mut self) -> Result<(), EngineError> {
        for t in std::mem::take(&mut self.trials) {
            let lines = journal::undo_all(&self.fs, &t.doc.members, &t.undo);
            info!(action = t.id, workload = %t.name, strategy = %t.strategy, "daemon stopping: trial undone; {}", lines.join("; "));
            self.store.journal_set_state(
                t.id,
                "reverted",
                "the daemon stopped during the trial",
            )?;
        }
        if self.tun.on("revert_on_stop") {
            let ids: Vec<i64> = self.held.drain(..).map(|h| h.id).collect();
            journal::revert_open(
                &mut self.store,
                &self.fs,
                Some(&ids),
                "the daemon stopped (revert_on_stop)",
            )?;
        } else {
            info!(
                "daemon stopping: {} kept actions stay in place (revert_on_stop is off)",
                self.held.len()
            );
        }
        Ok(())
    }
}

/// Binds the threads of `w` that action `id` has no undo record for (threads started since,
/// new member processes) to `mask`, journaling first an undo that restores each to its
/// process's original mask: a thread started while bound inherited perfpilot's mask, which is
/// not its own. Returns how many threads were bound.
fn bind_new_threads(
    store: &mut Store,
    fs: &Fs,
    id: i64,
    doc: &mut ActionDoc,
    undo: &mut Vec<Undo>,
    w: &Workload,
    mask: &CpuSet,
) -> Result<usize, EngineError> {
    let recorded = |undo: &[Undo], pid: i32| -> Vec<(i32, CpuSet)> {
        undo.iter()
            .filter_map(|u| match u {
                Undo::Affinity { pid: p, masks } if *p == pid => Some(masks.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    };
    let mut bound = 0;
    let mut reader = ProcReader::new(fs);
    for m in &w.members {
        let known = recorded(undo, m.pid);
        // The thread list now (a sample may carry an idle process's list over).
        let tids = if fs.is_live() {
            reader.tids(m.pid).unwrap_or_else(|_| m.tids.clone())
        } else {
            m.tids.clone()
        };
        let new: Vec<i32> = tids
            .into_iter()
            .filter(|t| !known.iter().any(|k| k.0 == *t))
            .collect();
        if new.is_empty() {
            continue;
        }
        let c = Change::Affinity {
            pid: m.pid,
            tids: new.clone(),
            cpus: mask.clone(),
        };
        // The original mask: the process's main thread's record, else any of its threads', else
        // another member's (a process forked by a bound member inherited the mask too).
        let original = known
            .iter()
            .find(|k| k.0 == m.pid)
            .or(known.first())
            .map(|k| k.1.clone())
            .or_else(|| {
                undo.iter().find_map(|u| match u {
                    Undo::Affinity { masks, .. } => masks.first().map(|k| k.1.clone()),
                    _ => None,
                })
            });
        let u = match original {
            Some(orig) => Undo::Affinity {
                pid: m.pid,
                masks: new.iter().map(|t| (*t, orig.clone())).collect(),
            },
            None => match change::prepare(fs, &c) {
                Ok(u) => u,
                Err(e) => {
                    warn!(action = id, "cannot prepare {}: {e}", describe(&c));
                    continue;
                }
            },
        };
        if !doc.members.iter().any(|x| x.0 == m.pid) {
            doc.members.push((m.pid, m.starttime));
        }
        doc.changes.push(c.clone());
        undo.push(u);
        store.journal_extend(id, &json(doc), &json(undo))?;
        match journal::timed(|| change::apply(fs, &c)) {
            Ok(_) => bound += new.len(),
            Err(e) => warn!(action = id, "binding new threads: {}: {e}", describe(&c)),
        }
    }
    Ok(bound)
}

/// A member perfpilot bound whose mask is no longer `mask`: (pid, its mask now).
fn changed_mask(fs: &Fs, w: &Workload, doc: &ActionDoc, mask: &CpuSet) -> Option<(i32, CpuSet)> {
    w.members
        .iter()
        .filter(|m| doc.members.iter().any(|d| d.0 == m.pid))
        .find_map(|m| {
            Engine::mask_of(fs, m)
                .filter(|c| c != mask)
                .map(|c| (m.pid, c))
        })
}

/// Whether an applied step changed anything, and a line saying what it did.
fn outcome(a: &Applied) -> (bool, String) {
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
fn refresh_tids(c: Change, members: &[(i32, Vec<i32>)]) -> Change {
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

fn read_rate(w: &Workload, rates: &Rates) -> f64 {
    rates
        .processes
        .iter()
        .filter(|p| w.pids().contains(&p.pid))
        .map(|p| p.read_bytes_per_s.unwrap_or(0.0))
        .sum()
}

fn json<T: Serialize>(v: &T) -> String {
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
