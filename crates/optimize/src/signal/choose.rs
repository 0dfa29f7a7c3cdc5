//! Choosing a workload's signal: the best source that applies — a configured probe, a built-in
//! application preset, PMU cycles per instruction, the system-call proxy for request/response
//! servers, I/O progress, then the CPU it consumes while not saturated — and, for status, why
//! each better one was passed over.

use perfpilot_observe::Rates;
use perfpilot_observe::workload::Workload;

use super::proxy::{
    CPU_SIGNAL_MACHINE_BUSY, CPU_SIGNAL_MIN_CORES, CPU_SIGNAL_SATURATED, IO_SIGNAL_MIN_BYTES_PER_S,
    ProxyOffer, io_bytes_per_s,
};
use super::{SignalKind, SignalSource};
use crate::config::ProbeSpec;

/// What a built-in preset offers a workload this scan.
#[derive(Debug, Clone, PartialEq)]
pub enum PresetOffer {
    /// A preset answered: its signal.
    Ready(SignalKind),
    /// Presets matched but none answered; why, for status.
    Failed(String),
    /// No preset matches the workload (not a known server, no metrics page).
    Absent,
}

/// The sources a workload's signal can come from this scan, best first.
pub struct Sources<'a> {
    /// The probe the config gives it.
    pub probe: Option<&'a ProbeSpec>,
    /// A built-in application preset.
    pub preset: PresetOffer,
    /// Whether the machine has PMU counters.
    pub pmu: bool,
    /// Whether the system-call proxy may be used for it.
    pub proxy: ProxyOffer,
}

/// The signal chosen for a workload, and why each better source was passed over.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The signal, or why there is none (saying what to do).
    pub signal: Result<SignalKind, String>,
    /// Why the better sources were not used, best first.
    pub passed_over: Vec<String>,
}

impl Choice {
    /// Where the chosen signal comes from.
    pub fn source(&self) -> Option<SignalSource> {
        self.signal.as_ref().ok().map(SignalKind::source)
    }
}

/// Chooses a workload's signal from `sources`, the workload's rates and the machine's size.
pub fn choose_signal(w: &Workload, sources: &Sources, rates: &Rates, online_cpus: usize) -> Choice {
    let mut passed_over = Vec::new();
    let chosen = |signal, passed_over| Choice {
        signal: Ok(signal),
        passed_over,
    };
    match sources.probe {
        Some(p) => return chosen(SignalKind::Probe { probe: p.clone() }, passed_over),
        None => passed_over.push("probe: none configured".to_string()),
    }
    match &sources.preset {
        PresetOffer::Ready(s) => return chosen(s.clone(), passed_over),
        PresetOffer::Failed(why) => passed_over.push(format!("preset: {why}")),
        PresetOffer::Absent => passed_over.push("preset: no built-in preset matches it".into()),
    }
    if sources.pmu {
        return chosen(SignalKind::Cpi, passed_over);
    }
    passed_over.push("pmu: this machine has no PMU counters".into());
    match &sources.proxy {
        Ok(()) => return chosen(SignalKind::Syscalls, passed_over),
        Err(why) => passed_over.push(format!("proxy: {why}")),
    }
    if io_bytes_per_s(w, rates) > IO_SIGNAL_MIN_BYTES_PER_S {
        return chosen(SignalKind::Io, passed_over);
    }
    let capacity = (w.threads as f64).min(online_cpus as f64);
    let machine_busy = rates.total.busy / 100.0;
    // CPU consumed judges an action only for a workload that does measurable work and is
    // not saturated (then the same work for less CPU is a gain).
    if w.cpu_cores >= CPU_SIGNAL_MIN_CORES
        && w.cpu_cores < CPU_SIGNAL_SATURATED * capacity
        && machine_busy < CPU_SIGNAL_MACHINE_BUSY
    {
        return chosen(SignalKind::Cpu, passed_over);
    }
    Choice {
        signal: Err(format!(
            "needs a signal: it is CPU-saturated ({:.2} of {capacity:.0} cores), this machine has no PMU counters, no built-in preset answered and no probe is configured; give it one with [[workload]] signal = {{ url = …, metric = … }} or set allow_unverified",
            w.cpu_cores
        )),
        passed_over,
    }
}
