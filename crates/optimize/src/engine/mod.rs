//! The engine: one [`Engine::scan`] per interval samples the machine, advances running trials,
//! enforces kept actions, and starts new trials where a strategy proposes one.
//!
//! Every change is journaled before it is made; every trial ends in a stored verdict. The
//! engine's parts, one concern each:
//!
//! - `watch`: sampling, the shared memory and memory placement of workloads, and the windows
//!   of the signals that judge trials (read through `crate::signal`);
//! - `policy`: who may be touched (config, `PERFPILOT=off`, manual tuning) and who is eligible
//!   (old enough, busy enough, not backed off);
//! - `propose`: asking the strategies, for workloads and block devices;
//! - `steady`: a trial starts only once its signal shows steady, non-idle work;
//! - `trial`: a trial's core (what is changed, on whom, by which signal), its steps, switching
//!   it on and off, and its design's state (`crate::design`);
//! - `plan`: the design a proposal's trial gets (`crate::design::choose`), a one-way trial's
//!   prior from the journal;
//! - `control`: a sibling that stands as a trial's control, and pairing its windows;
//! - `apply`: journaling each change's undo record, then making it;
//! - `enforce`: kept actions (new threads, masks changed behind perfpilot's back, recovery);
//! - `status`: what `status.json` shows;
//! - `startup`: `shmem_enabled` raised at start, before the first scan;
//! - `stop`: what becomes of each action when the daemon stops;
//! - `fleet`: what other hosts' verdicts say of a strategy (skip it, or try it first);
//! - `reload`: a new configuration taken in while running (SIGHUP).

use std::time::Instant;

use perfpilot_observe::workload::{self, Workload};
use perfpilot_observe::{Rates, Sample, Topology};
use perfpilot_store::Store;
use perfpilot_sys::{CpuSet, Fs};
use tracing::warn;

use crate::config::DaemonConfig;
use crate::cpu::CpuTime;
use crate::journal::JournalError;
use crate::signal::SignalKind;
use crate::signal::choose::{self, Choice, Sources};
use crate::signal::proxy::proxy_offer;
use crate::strategy::StrategyKind;
use crate::tunables::Tunables;

mod apply;
mod attach;
mod control;
mod dryrun;
mod enforce;
mod fleet;
pub mod manual;
mod plan;
mod policy;
mod propose;
mod reload;
mod startup;
mod status;
mod steady;
mod stop;
mod trial;
mod verdict;
mod watch;

#[cfg(test)]
mod tests;

pub use apply::describe;
pub use status::{Status, TrialStatus, WorkloadClass, WorkloadStatus};
pub use verdict::Verdict;

use enforce::Held;
use policy::Policy;
use trial::Trial;
use watch::Watch;

/// An engine failure that stops the daemon (only the store: without a journal nothing may be
/// changed).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A journal entry could not be written or read.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] perfpilot_store::Error),
    /// The machine's topology could not be read at start.
    #[error("reading the topology: {0}")]
    Topology(String),
}

/// What perfpilot has in the system: running trials and kept actions.
#[derive(Default)]
struct Actions {
    trials: Vec<Trial>,
    held: Vec<Held>,
}

impl Actions {
    /// The CPUs perfpilot bound the workload `signature` to: a kept cache-affinity action's,
    /// else a running trial's while its change is on.
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

    /// Whether the workload `signature` is taken for a control of a trial of `kind`: in a
    /// trial (treated, judging, or another's control), or holding a kept action of `kind` that
    /// could still be undone under the trial. One that cannot (huge pages that stay) leaves it
    /// as it will be throughout: a control as good as an untouched one.
    fn taken(&self, signature: &str, kind: StrategyKind) -> bool {
        self.trials.iter().any(|t| {
            t.signature == signature
                || t.judge == signature
                || t.control.as_ref().is_some_and(|c| c.signature == signature)
        }) || self
            .held
            .iter()
            .any(|h| h.signature == signature && h.strategy == kind && !h.doc.irreversible)
    }
}

/// Where the daemon's own CPU is counted from, for status.
struct OwnCpu {
    started: Instant,
    at_start: CpuTime,
}

/// The optimizer.
pub struct Engine {
    fs: Fs,
    store: Store,
    topo: Topology,
    /// The tunables in force (reloaded from the store at every scan).
    pub tun: Tunables,
    watch: Watch,
    policy: Policy,
    actions: Actions,
    /// What the last scan found (written to `status.json` by the daemon).
    pub status: Status,
    own: OwnCpu,
    /// A dry run (`dryrun.rs`): proposes without acting.
    dry: bool,
    /// The fleet's verdicts, where `[fleet]` is configured and Prometheus answered.
    fleet: Option<crate::fleet::Priors>,
    /// Recent signal readings of workloads a strategy would act on.
    steady: steady::Steady,
}

impl Engine {
    /// An engine over `fs` journaling to `store`, with `config` and the persisted tunables.
    pub fn new(
        fs: &Fs,
        store: Store,
        config: DaemonConfig,
        tun: Tunables,
    ) -> Result<Engine, EngineError> {
        let topo = Topology::read(fs).map_err(|e| EngineError::Topology(e.to_string()))?;
        store.set_durable()?;
        let mut notes = vec![format!(
            "hardware prefetch: {}",
            crate::strategy::read_ahead::hardware_prefetch()
                .err()
                .unwrap_or_default()
        )];
        if let Err(why) = perfpilot_sys::perf::hardware_support() {
            notes.push(format!("PMU counters: not supported ({why}); signals come from probes, I/O progress or CPU consumed"));
        }
        let watch = Watch::new(fs, config.preset.clone());
        if !watch.collapse_supported {
            notes.push("large pages: this kernel has no process_madvise(MADV_COLLAPSE)".into());
        }
        if let Err(why) = &watch.split_supported {
            notes.push(format!("large pages: shared memory is not split back here, so trials that collapse it are one-way or against a control (private memory is split back by MADV_COLD): {why}"));
        }
        Ok(Engine {
            fs: fs.clone(),
            store,
            topo,
            tun,
            watch,
            policy: Policy::new(fs, config),
            actions: Actions::default(),
            status: Status {
                notes,
                ..Status::default()
            },
            own: OwnCpu {
                started: Instant::now(),
                at_start: CpuTime::now(),
            },
            dry: false,
            fleet: None,
            steady: steady::Steady::default(),
        })
    }

    /// The store (for status and tunables).
    pub fn store(&mut self) -> &mut Store {
        &mut self.store
    }

    /// The journal, read-only (for the metrics of actions and verdicts).
    pub fn store_ref(&self) -> &Store {
        &self.store
    }

    /// One scan. Errors other than the store's are logged and the scan goes on.
    pub fn scan(&mut self) -> Result<(), EngineError> {
        self.reload_tunables()?;
        let cur = match self.watch.sampler.sample() {
            Ok(s) => s,
            Err(e) => {
                warn!("sample failed: {e}; skipping this scan");
                return Ok(());
            }
        };
        let Some(prev) = self.watch.prev.take() else {
            self.watch.prev = Some(cur);
            return Ok(());
        };
        let r = self.scan_pair(&prev, &cur);
        self.watch.prev = Some(cur);
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
        self.steady.next_scan(cur.mono_ns as f64 / 1e9);
        self.policy.new_scan();
        // Free memory per node now (memory affinity's "fits one node"), with what the node
        // files leave out.
        self.topo.set_node_memory(&cur.memory.nodes);
        let shm = self.watch.shared_memory(cur, &rates, &self.tun);
        let mut workloads = workload::group(cur, &rates, &shm);
        // Not itself: its own CPU would be a workload to bind, its /metrics a preset to read.
        let me = std::process::id() as i32;
        workloads.retain(|w| !w.members.iter().any(|m| m.pid == me));
        self.look_at_servers(&workloads);
        if !self.dry {
            let observations = self.observe_signals(&workloads, &rates, cur);
            self.recap_trials(rates.interval_s.max(self.tun.interval_s));
            self.advance_trials(&workloads, &observations)?;
            self.enforce_held(&workloads, &observations)?;
        }
        let states = self.propose(&workloads, &rates, prev, cur)?;
        self.update_status(&workloads, &rates, states);
        Ok(())
    }

    /// Looks for the presets of the workloads that strategies may act on (listed, not left
    /// alone, eligible): an excluded or manual server is never connected to.
    fn look_at_servers(&mut self, workloads: &[Workload]) {
        let tun = &self.tun;
        let watched: Vec<&Workload> = workloads
            .iter()
            .filter(|w| {
                !policy::unlisted(w, tun.min_cpu_cores, tun.min_memory_bytes())
                    && policy::ineligible(w, tun.min_age_s, tun.min_cpu_cores).is_none()
                    && self
                        .policy
                        .left_alone(&self.topo, w, self.actions.bound_to(&w.signature))
                        .is_none()
            })
            .collect();
        let timeout = std::time::Duration::from_secs_f64(tun.probe_timeout_s);
        self.watch
            .signals
            .servers
            .refresh(workloads, &watched, timeout);
    }

    /// The defaults, the persisted values over them, and the config's `[tunables]` over those.
    fn reload_tunables(&mut self) -> Result<(), EngineError> {
        let (mut t, ignored) = Tunables::with_persisted(&self.store.tunables()?);
        for e in ignored {
            warn!("persisted {e}; ignored");
        }
        self.policy.config.apply_tunables(&mut t);
        self.policy.enabled = propose::WORKLOAD_STRATEGIES
            .into_iter()
            .filter(|k| k.enabled(&t))
            .collect();
        self.policy.slow_evidence_after_s = t.min_age_s;
        self.tun = t;
        Ok(())
    }

    /// Chooses the signal of a workload and says why better sources were passed over (see
    /// [`choose::choose_signal`]).
    fn signal_choice(&self, w: &Workload, rates: &Rates) -> Choice {
        let sources = Sources {
            probe: self.policy.rule_for(w).and_then(|r| r.signal.as_ref()),
            preset: self.watch.signals.servers.preset_offer(&w.signature),
            pmu: self.watch.signals.cpi.is_some(),
            proxy: proxy_offer(w, rates, self.watch.signals.servers.serves(&w.signature)),
        };
        choose::choose_signal(w, &sources, rates, self.topo.online.len())
    }

    /// The signal of a workload, or why it has none.
    fn signal_of(&self, w: &Workload, rates: &Rates) -> Result<SignalKind, String> {
        self.signal_choice(w, rates).signal
    }
}
