//! What the engine watches: samples of the machine, the shared memory and memory placement of
//! workloads, and the signal observations that judge trials.

use std::collections::HashMap;
use std::time::Duration;

use perfpilot_observe::workload::{Workload, WorkloadMemory};
use perfpilot_observe::{Rates, Sample, Sampler, SamplerConfig};
use perfpilot_sys::Fs;
use perfpilot_sys::process::{MapRange, ProcReader, ShmAttach};

use super::Engine;
use super::attach::Attachments;
use crate::signal::preset::PresetConfig;
use crate::signal::proxy::syscalls_per_cpu_s;
use crate::signal::reader::Reader;
use crate::signal::{Observation, SignalKind};
use crate::tunables::Tunables;

/// A window's observations of a judged workload: by its signal, and by the system-call proxy
/// beside it (a shadow, so that each verdict also says whether the proxy agreed).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Window {
    /// By the trial's signal.
    pub(super) main: Observation,
    /// System calls per CPU-second, when the signal is something else and it could be read.
    pub(super) shadow: Option<f64>,
    /// What the rest of the machine used this scan, when it could be read.
    pub(super) rest: Option<Rest>,
}

pub(super) use crate::design::Rest;

/// What the machine used outside `w` over the rates' interval; `None` without per-CPU rows.
pub(super) fn rest_of_machine(w: &Workload, rates: &Rates) -> Option<Rest> {
    if rates.cpus.is_empty() {
        return None;
    }
    let busy: f64 = rates.cpus.iter().map(|c| c.busy / 100.0).sum();
    Some(Rest {
        cores: (busy - w.cpu_cores).max(0.0),
        cpus: rates.cpus.len(),
    })
}

/// The engine's view of the machine between scans.
pub(super) struct Watch {
    pub(super) sampler: Sampler,
    reader: ProcReader,
    /// The previous sample (rates are between two).
    pub(super) prev: Option<Sample>,
    /// `process_madvise(MADV_COLLAPSE)` works on this kernel.
    pub(super) collapse_supported: bool,
    /// Huge pages of any memory can be split back here (debugfs, `sys::split::supported`), or
    /// why not; private memory may be all the same (`engine/plan.rs`, `split::cold_covers`).
    pub(super) split_supported: Result<(), String>,
    /// The workloads' signals: probes, PMU counters, servers and their presets.
    pub(super) signals: Reader,
    /// Who attaches which shared memory, remembered across scans.
    attachments: Attachments,
}

impl Watch {
    /// Watches `fs`: threads sampled, expensive readings only on demand.
    pub(super) fn new(fs: &Fs, presets: Vec<PresetConfig>) -> Watch {
        let sampler = Sampler::new(
            fs,
            SamplerConfig {
                threads: true,
                expensive_every: 0,
                per_cpu_ctxt: false,
                ..SamplerConfig::default()
            },
        );
        Watch {
            sampler,
            reader: ProcReader::new(fs),
            prev: None,
            collapse_supported: perfpilot_sys::collapse::kernel_supports_collapse(),
            split_supported: perfpilot_sys::split::supported(fs),
            signals: Reader::new(fs, presets),
            attachments: Attachments::default(),
        }
    }

    /// The shared-memory attachments of the processes: those big or busy enough to matter
    /// read afresh, the quiet ones of the same program as an attacher once (`attach.rs`).
    pub(super) fn shared_memory(
        &mut self,
        cur: &Sample,
        rates: &Rates,
        tun: &Tunables,
    ) -> HashMap<i32, Vec<ShmAttach>> {
        let min_mem = tun.min_memory_bytes();
        let min_cpu = tun.min_cpu_cores / 4.0;
        let cpu: HashMap<i32, f64> = rates
            .processes
            .iter()
            .map(|p| (p.pid, p.cpu / 100.0))
            .collect();
        let procs: Vec<_> = cur.processes.iter().filter(|p| !p.kernel_thread).collect();
        let reader = &mut self.reader;
        self.attachments.scan(
            &procs,
            |p| p.rss >= min_mem || cpu.get(&p.pid).copied().unwrap_or(0.0) >= min_cpu,
            |pid| reader.shm_attachments(pid),
        )
    }

    /// Reads a workload's memory placement and maps (expensive: only when a strategy needs it).
    pub(super) fn read_memory(
        &mut self,
        w: &Workload,
    ) -> (Option<WorkloadMemory>, Option<HashMap<i32, Vec<MapRange>>>) {
        let mut readings = Vec::new();
        let mut maps = HashMap::new();
        for m in &w.members {
            if let Ok((r, ranges)) = self.sampler.memory_and_maps_of(m.pid, m.starttime) {
                readings.push(r);
                maps.insert(m.pid, ranges);
            }
        }
        if readings.is_empty() {
            return (None, None);
        }
        (Some(WorkloadMemory::of(readings.iter())), Some(maps))
    }
}

impl Engine {
    /// The observation of the current window for every workload some trial is judged by.
    pub(super) fn observe_signals(
        &mut self,
        workloads: &[Workload],
        rates: &Rates,
        cur: &Sample,
    ) -> HashMap<String, Window> {
        let mut out = HashMap::new();
        // The judges of trials, their controls, and the judges of kept actions still watched.
        let mut judges: Vec<(String, SignalKind)> = self
            .actions
            .trials
            .iter()
            .filter_map(|t| Some((t.judge.clone(), t.signal.clone()?)))
            .collect();
        judges.extend(self.actions.trials.iter().filter_map(|t| {
            let c = t.control.as_ref()?;
            Some((c.signature.clone(), c.signal.clone()))
        }));
        judges.extend(self.actions.held.iter().filter_map(|h| {
            let w = h.watch.as_ref()?;
            Some((w.judge.clone(), h.doc.signal.clone()?))
        }));
        let t_s = cur.mono_ns as f64 / 1e9;
        let timeout = Duration::from_secs_f64(self.tun.probe_timeout_s);
        for (sig, kind) in judges {
            if out.contains_key(&sig) {
                continue;
            }
            let Some(w) = workloads.iter().find(|w| w.signature == sig) else {
                continue;
            };
            let main = self.watch.signals.observe(w, &kind, rates, t_s, timeout);
            self.steady.observed_by_trial(&sig, &main);
            let shadow = (kind != SignalKind::Syscalls)
                .then(|| syscalls_per_cpu_s(w, rates))
                .flatten();
            let rest = rest_of_machine(w, rates);
            out.insert(sig, Window { main, shadow, rest });
        }
        out
    }

    /// Whether a trial judged by `w`'s signal `kind` may start: its last readings show steady,
    /// non-idle work (`steady.rs`); `Err` says why not. Reads the signal unless a trial or an
    /// earlier strategy already did this scan.
    pub(super) fn steady_signal(
        &mut self,
        w: &Workload,
        kind: &SignalKind,
        rates: &Rates,
    ) -> Result<(), String> {
        if let Some(v) = self.steady.read_this_scan(&w.signature) {
            return v;
        }
        let obs = match self.steady.trial_observation(&w.signature) {
            Some(o) => o,
            None => {
                let timeout = Duration::from_secs_f64(self.tun.probe_timeout_s);
                self.watch
                    .signals
                    .observe(w, kind, rates, self.steady.t_s, timeout)
            }
        };
        self.steady.check(&w.signature, kind, obs)
    }
}
