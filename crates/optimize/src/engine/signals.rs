//! Choosing a workload's signal: the best source that applies — a configured probe, a built-in
//! application preset, PMU cycles per instruction, the system-call proxy for request/response
//! servers, I/O progress, then the CPU it consumes while not saturated — and, for status, why
//! each better one was passed over.

use perfpilot_observe::Rates;
use perfpilot_observe::workload::Workload;

use super::watch::io_bytes_per_s;
use crate::config::ProbeSpec;
use crate::signal::{SignalKind, SignalSource};

/// Above this many bytes per second of I/O (read + written), a workload's I/O progress is its
/// signal.
pub(super) const IO_SIGNAL_MIN_BYTES_PER_S: f64 = 64.0 * 1024.0;

/// Below this many cores a workload does too little work for the CPU it consumes (or the system
/// calls per CPU-second) to judge an action.
pub(super) const CPU_SIGNAL_MIN_CORES: f64 = 0.05;

/// Above this share of the cores it can use, a workload is saturated: the CPU it consumes no
/// longer shows a gain.
const CPU_SIGNAL_SATURATED: f64 = 0.85;

/// Above this busy share of the machine, the CPU a workload consumes says more about the others
/// than about it.
const CPU_SIGNAL_MACHINE_BUSY: f64 = 0.9;

/// Below this many system calls per second the proxy counts too few events per window.
const PROXY_MIN_SYSCALLS_PER_S: f64 = 200.0;

/// What a built-in preset offers a workload this scan.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum PresetOffer {
    /// A preset answered: its signal.
    Ready(SignalKind),
    /// Presets matched but none answered; why, for status.
    Failed(String),
    /// No preset matches the workload (not a known server, no metrics page).
    Absent,
}

/// Whether the proxy may judge a workload: `Err(why not)` otherwise.
pub(super) type ProxyOffer = Result<(), String>;

/// The sources a workload's signal can come from this scan, best first.
pub(super) struct Sources<'a> {
    /// The probe the config gives it.
    pub(super) probe: Option<&'a ProbeSpec>,
    /// A built-in application preset.
    pub(super) preset: PresetOffer,
    /// Whether the machine has PMU counters.
    pub(super) pmu: bool,
    /// Whether the system-call proxy may be used for it.
    pub(super) proxy: ProxyOffer,
}

/// The signal chosen for a workload, and why each better source was passed over.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Choice {
    /// The signal, or why there is none (saying what to do).
    pub(super) signal: Result<SignalKind, String>,
    /// Why the better sources were not used, best first.
    pub(super) passed_over: Vec<String>,
}

impl Choice {
    /// Where the chosen signal comes from.
    pub(super) fn source(&self) -> Option<SignalSource> {
        self.signal.as_ref().ok().map(SignalKind::source)
    }
}

/// Chooses a workload's signal from `sources`, the workload's rates and the machine's size.
pub(super) fn choose_signal(
    w: &Workload,
    sources: &Sources,
    rates: &Rates,
    online_cpus: usize,
) -> Choice {
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

/// System calls per CPU-second of a workload over the last interval; `None` while it used
/// almost no CPU or its `io` files are unreadable.
pub(super) fn syscalls_per_cpu_s(w: &Workload, rates: &Rates) -> Option<f64> {
    per_cpu_second(syscalls_per_s(w, rates), w)
}

/// A rate turned into work per CPU-second of the workload; `None` while it used almost no CPU.
pub(super) fn per_cpu_second(rate: Option<f64>, w: &Workload) -> Option<f64> {
    rate.filter(|_| w.cpu_cores > 0.01).map(|r| r / w.cpu_cores)
}

/// System calls per second of a workload's processes; `None` where no `io` file was readable.
fn syscalls_per_s(w: &Workload, rates: &Rates) -> Option<f64> {
    let pids = w.pids();
    rates
        .processes
        .iter()
        .filter(|p| pids.contains(&p.pid))
        .filter_map(|p| p.syscalls_per_s)
        .reduce(|a, b| a + b)
}

/// Whether the proxy may judge `w`: it serves requests on a listening socket (`serves`, the kind
/// of server when known), is busy enough, makes enough system calls, and its kind is not one the
/// agreement table rules out.
pub(super) fn proxy_offer(w: &Workload, rates: &Rates, serves: Option<&str>) -> ProxyOffer {
    let Some(kind) = serves else {
        return Err("it listens on no socket (the proxy is for request/response servers)".into());
    };
    if let Some(why) = proxy_disagrees(kind) {
        return Err(format!("it is {kind}, where {why}"));
    }
    if w.cpu_cores < CPU_SIGNAL_MIN_CORES {
        return Err(format!(
            "it uses {:.2} cores, too little to judge",
            w.cpu_cores
        ));
    }
    let calls = syscalls_per_s(w, rates).unwrap_or(0.0);
    if calls < PROXY_MIN_SYSCALLS_PER_S {
        return Err(format!(
            "it makes {calls:.0} system calls per second, under {PROXY_MIN_SYSCALLS_PER_S:.0}"
        ));
    }
    Ok(())
}

/// The kinds of server where the proxy's gain for an action was measured against the
/// application's own and did not follow it (docs/proofs.md, the agreement table), with why.
fn proxy_disagrees(kind: &str) -> Option<&'static str> {
    PROXY_DISAGREES
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, why)| *why)
}

/// From the agreement table of docs/proofs.md: where the proxy cannot follow the work.
const PROXY_DISAGREES: &[(&str, &str)] = &[(
    "postgresql",
    "the proxy does not follow the work: its backends talk to clients with recv/send, which \
     /proc/PID/io does not count (4 read/write calls against about 140,000 transactions in 5 s, \
     docs/proofs.md)",
)];
