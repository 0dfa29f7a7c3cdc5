//! Reading a workload's signal once a window, whatever its source.

use std::collections::HashMap;
use std::time::Duration;

use perfpilot_observe::Rates;
use perfpilot_observe::workload::Workload;
use perfpilot_sys::Fs;

use super::pmu::Cpi;
use super::preset::PresetConfig;
use super::proxy::{io_bytes_per_s, per_cpu_second, syscalls_per_cpu_s};
use super::servers::Servers;
use super::{Observation, SignalKind, Windowed, read_probe};
use crate::counters::{COUNTERS, ProbeFailure};

/// What reads signals between windows: probe readings turned into observations per workload,
/// the PMU's counters, and the servers with their presets.
pub struct Reader {
    /// Probe readings turned into per-window observations, per judged workload.
    windowed: HashMap<String, Windowed>,
    /// Cycles per instruction, where the machine has PMU counters.
    pub cpi: Option<Cpi>,
    /// The servers among the workloads and their presets.
    pub servers: Servers,
}

impl Reader {
    /// Reads through `fs`, with the built-in presets configured by `presets`.
    pub fn new(fs: &Fs, presets: Vec<PresetConfig>) -> Reader {
        Reader {
            windowed: HashMap::new(),
            cpi: Cpi::available(),
            servers: Servers::new(fs, presets),
        }
    }

    /// Starts `signature`'s windows afresh at its next reading (a probe's or a preset's), so
    /// that two workloads restarted in the same scan are cut over the same spans.
    pub fn restart_windows(&mut self, signature: &str) {
        self.windowed.remove(signature);
        self.servers.restart_windows(signature);
    }

    /// This window's observation of `w` by signal `kind`, taken at `t_s` (monotonic seconds).
    pub fn observe(
        &mut self,
        w: &Workload,
        kind: &SignalKind,
        rates: &Rates,
        t_s: f64,
        timeout: Duration,
    ) -> Observation {
        match kind {
            SignalKind::Probe { probe } => match read_probe(probe, timeout) {
                Ok(v) => {
                    let o = self.windowed.entry(w.signature.clone()).or_default().feed(
                        probe.kind(),
                        t_s,
                        v,
                    );
                    // Work per CPU-second: no observation while it used no CPU.
                    Ok(if probe.per_cpu() {
                        per_cpu_second(o, w)
                    } else {
                        o
                    })
                }
                Err(e) => {
                    COUNTERS.probe_failed(ProbeFailure::of(&e));
                    self.windowed
                        .entry(w.signature.clone())
                        .or_default()
                        .reset();
                    Err(e.to_string())
                }
            },
            SignalKind::Preset { .. } => {
                let o = self.servers.observe(w, t_s, timeout);
                if o.is_err() {
                    COUNTERS.probe_failed(ProbeFailure::Preset);
                }
                o
            }
            SignalKind::Io => Ok(Some(io_bytes_per_s(w, rates))),
            SignalKind::Syscalls => Ok(syscalls_per_cpu_s(w, rates)),
            SignalKind::Cpu => Ok(Some(w.cpu_cores)),
            SignalKind::Cpi => Ok(self.cpi.as_mut().and_then(|c| c.of(w))),
        }
    }
}
