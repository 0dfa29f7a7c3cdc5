//! Benefit signals: what tells whether an action helped a workload, where it comes from and how
//! it is read. In order of preference: an application probe configured for the workload
//! ([`probe`]), a built-in application preset found without configuration ([`preset`],
//! [`servers`]), PMU cycles per instruction where the machine has counters ([`pmu`]), the
//! system-call proxy for request/response servers, the workload's own I/O progress and the CPU
//! it consumes while not saturated ([`proxy`]). [`choose`] picks the best that applies;
//! [`reader`] reads it once a window; [`window`] turns counter readings into per-window
//! observations.

use serde::{Deserialize, Serialize};

use crate::config::ProbeSpec;

pub mod choose;
pub mod pmu;
pub mod preset;
pub mod probe;
pub mod proxy;
pub mod reader;
pub mod servers;
pub mod window;

pub use probe::{ProbeError, read_probe};
pub use window::{SpanWindow, Windowed};

/// One window's observation of a workload by its signal: a value, nothing this window (a
/// counter's first reading, an idle workload), or why it could not be read.
pub type Observation = Result<Option<f64>, String>;

/// Where a workload's signal comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "source")]
pub enum SignalKind {
    /// An application probe (higher or lower is better as configured).
    Probe {
        /// Where and how to read the application's own measure.
        probe: ProbeSpec,
    },
    /// A built-in application preset: a counter of completed work the server itself keeps,
    /// found without configuration, per CPU-second (higher is better).
    Preset {
        /// The preset's name (`postgresql`, `redis`, …).
        preset: String,
        /// Where it is read (a socket path or an address).
        endpoint: String,
        /// What is counted (`xact_commit + xact_rollback`, …).
        counter: String,
    },
    /// Cycles per instruction (lower is better).
    Cpi,
    /// System calls (`syscr + syscw` of `/proc/PID/io`) per CPU-second: a kernel-visible proxy
    /// of the work a request/response server does for the CPU it uses (higher is better).
    Syscalls,
    /// Bytes read and written per second through system calls (higher is better).
    Io,
    /// CPU cores consumed at steady load (lower is better).
    Cpu,
}

impl SignalKind {
    /// Whether a larger value is better.
    pub fn higher_is_better(&self) -> bool {
        match self {
            SignalKind::Probe { probe } => probe.higher_is_better(),
            SignalKind::Preset { .. } | SignalKind::Io | SignalKind::Syscalls => true,
            SignalKind::Cpi | SignalKind::Cpu => false,
        }
    }

    /// Where the signal comes from.
    pub fn source(&self) -> SignalSource {
        match self {
            SignalKind::Probe { .. } => SignalSource::Probe,
            SignalKind::Preset { .. } => SignalSource::Preset,
            SignalKind::Cpi => SignalSource::Pmu,
            SignalKind::Syscalls => SignalSource::Proxy,
            SignalKind::Io => SignalSource::Io,
            SignalKind::Cpu => SignalSource::Cpu,
        }
    }

    /// A short description for logs and status.
    pub fn describe(&self) -> String {
        match self {
            SignalKind::Probe {
                probe:
                    ProbeSpec::Http {
                        url,
                        metric,
                        per_cpu,
                        ..
                    },
            } => format!(
                "{metric} at {url}{}",
                if *per_cpu { " per CPU-second" } else { "" }
            ),
            SignalKind::Probe {
                probe:
                    ProbeSpec::Command {
                        command, per_cpu, ..
                    },
            } => format!(
                "command `{command}`{}",
                if *per_cpu { " per CPU-second" } else { "" }
            ),
            SignalKind::Preset {
                preset,
                endpoint,
                counter,
            } => format!("{preset}: {counter} at {endpoint} per CPU-second"),
            SignalKind::Cpi => "cycles per instruction".into(),
            SignalKind::Syscalls => "system calls per CPU-second (syscr+syscw, a proxy)".into(),
            SignalKind::Io => "I/O bytes per second (rchar+wchar)".into(),
            SignalKind::Cpu => "CPU consumed at steady load".into(),
        }
    }
}

/// Where a workload's signal comes from, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalSource {
    /// A probe configured for the workload.
    Probe,
    /// A built-in application preset found without configuration.
    Preset,
    /// PMU counters.
    Pmu,
    /// The kernel-visible proxy: system calls per CPU-second.
    Proxy,
    /// I/O progress.
    Io,
    /// CPU consumed at steady load.
    Cpu,
}

impl SignalSource {
    /// The word status uses.
    pub fn as_str(self) -> &'static str {
        match self {
            SignalSource::Probe => "probe",
            SignalSource::Preset => "preset",
            SignalSource::Pmu => "pmu",
            SignalSource::Proxy => "proxy",
            SignalSource::Io => "io",
            SignalSource::Cpu => "cpu",
        }
    }
}

impl std::fmt::Display for SignalSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
