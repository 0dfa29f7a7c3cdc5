//! Signals read from the kernel's accounting of a workload, with no help from the application:
//! the system-call proxy for request/response servers (calls per CPU-second), its I/O progress
//! and the CPU it consumes; and when each may judge.

use perfpilot_observe::Rates;
use perfpilot_observe::workload::Workload;

/// Above this many bytes per second of I/O (read + written), a workload's I/O progress is its
/// signal.
pub const IO_SIGNAL_MIN_BYTES_PER_S: f64 = 64.0 * 1024.0;

/// Below this many cores a workload does too little work for the CPU it consumes (or the system
/// calls per CPU-second) to judge an action.
pub const CPU_SIGNAL_MIN_CORES: f64 = 0.05;

/// Above this share of the cores it can use, a workload is saturated: the CPU it consumes no
/// longer shows a gain.
pub const CPU_SIGNAL_SATURATED: f64 = 0.85;

/// Above this busy share of the machine, the CPU a workload consumes says more about the others
/// than about it.
pub const CPU_SIGNAL_MACHINE_BUSY: f64 = 0.9;

/// Below this many system calls per second the proxy counts too few events per window.
const PROXY_MIN_SYSCALLS_PER_S: f64 = 200.0;

/// Whether the proxy may judge a workload: `Err(why not)` otherwise.
pub type ProxyOffer = Result<(), String>;

/// System calls per CPU-second of a workload over the last interval; `None` while it used
/// almost no CPU or its `io` files are unreadable.
pub fn syscalls_per_cpu_s(w: &Workload, rates: &Rates) -> Option<f64> {
    per_cpu_second(syscalls_per_s(w, rates), w)
}

/// A rate turned into work per CPU-second of the workload; `None` while it used almost no CPU.
pub fn per_cpu_second(rate: Option<f64>, w: &Workload) -> Option<f64> {
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
pub fn proxy_offer(w: &Workload, rates: &Rates, serves: Option<&str>) -> ProxyOffer {
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

/// Bytes a workload read and wrote per second through system calls.
pub fn io_bytes_per_s(w: &Workload, rates: &Rates) -> f64 {
    let pids = w.pids();
    rates
        .processes
        .iter()
        .filter(|p| pids.contains(&p.pid))
        .map(|p| p.read_bytes_per_s.unwrap_or(0.0) + p.write_bytes_per_s.unwrap_or(0.0))
        .sum()
}

/// Bytes a workload read per second through system calls.
pub fn read_bytes_per_s(w: &Workload, rates: &Rates) -> f64 {
    let pids = w.pids();
    rates
        .processes
        .iter()
        .filter(|p| pids.contains(&p.pid))
        .map(|p| p.read_bytes_per_s.unwrap_or(0.0))
        .sum()
}
