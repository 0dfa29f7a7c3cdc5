//! The results file: JSON lines, one `run` header per start (or resume) and one `cell` line as
//! each cell ends, so a run cut short still leaves everything it measured.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use perfpilot_lab::MachineFacts;
use perfpilot_sys::Fs;
use serde::{Deserialize, Serialize};

use crate::settings::ThpState;

/// One line of the results file.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    /// A run started (or was resumed).
    Run(RunHeader),
    /// A cell ended.
    Cell(Box<CellRecord>),
}

/// What a run was: its command line, seed and machine.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct RunHeader {
    /// The command line, as typed.
    pub command: String,
    /// The seed of the round orders.
    pub seed: u64,
    /// When it started, RFC 3339.
    pub started: String,
    /// The machine it ran on.
    pub machine: Machine,
}

/// The machine a proof ran on, as the results file records it (the shape of every earlier
/// file, so that old runs still read).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Machine {
    /// Online CPUs.
    pub cpus: usize,
    /// The CPU model (`model name` in /proc/cpuinfo).
    pub cpu_model: String,
    /// NUMA nodes.
    pub numa_nodes: usize,
    /// Memory, bytes.
    pub memory_bytes: u64,
    /// Kernel release.
    pub kernel: String,
    /// THP as found before the run.
    pub thp: ThpState,
}

impl Machine {
    /// The machine under `fs`: its facts ([`MachineFacts`]) in the results file's shape, and
    /// THP as found now.
    pub fn read(fs: &Fs) -> Machine {
        let f = MachineFacts::read(fs);
        Machine {
            cpus: f.cpus().unwrap_or(0),
            cpu_model: f.cpu_model.unwrap_or_default(),
            numa_nodes: f.nodes.unwrap_or(1).max(1),
            memory_bytes: f.memory_bytes.unwrap_or(0),
            kernel: f.kernel.unwrap_or_default(),
            thp: ThpState::read(fs),
        }
    }

    /// One line: `2 CPUs (AMD EPYC …), 1 NUMA node, 23.4 GiB, Linux 6.1.0, THP enabled=…`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}), {}, {} of memory, Linux {}, THP {}",
            perfpilot_units::counted(self.cpus as u64, "CPU", "CPUs"),
            if self.cpu_model.is_empty() {
                "model unknown"
            } else {
                &self.cpu_model
            },
            perfpilot_units::counted(self.numa_nodes as u64, "NUMA node", "NUMA nodes"),
            perfpilot_units::bytes(self.memory_bytes),
            self.kernel,
            self.thp.describe()
        )
    }
}

/// How a cell ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Measured.
    Ok,
    /// A server or tool it needs is not installed (run with --install).
    NotInstalled,
    /// Something failed; `error` says what.
    Failed,
}

/// The result of one cell.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct CellRecord {
    /// Round, from 1.
    pub round: u32,
    /// Server name (`postgres`, `redis`, …).
    pub server: String,
    /// Cell name (`untuned`, `perfpilot`, …).
    pub cell: String,
    /// How it ended.
    pub outcome: Outcome,
    /// What went wrong, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the server started, RFC 3339.
    pub started: String,
    /// Throughput of the measured window, in `unit`.
    #[serde(default)]
    pub throughput: Option<f64>,
    /// What the throughput counts (`tps`, `req/s`, `ops/s`).
    #[serde(default)]
    pub unit: String,
    /// 99th percentile latency of the measured window, ms.
    #[serde(default)]
    pub p99_ms: Option<f64>,
    /// Failed requests in the measured window.
    #[serde(default)]
    pub errors: u64,
    /// THP as the server found it at its start.
    pub thp: ThpState,
    /// What the perfpilot daemon did, in the perfpilot cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perfpilot: Option<DaemonReport>,
    /// Settings the guard had to put back after the cell.
    #[serde(default)]
    pub restored: Vec<String>,
}

/// What the daemon did during a perfpilot cell.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct DaemonReport {
    /// Seconds from the server's start to the first action seen kept.
    #[serde(default)]
    pub first_kept_s: Option<f64>,
    /// The daemon's CPU over its life, % of one CPU (from /proc/PID/stat).
    #[serde(default)]
    pub cpu_pct: Option<f64>,
    /// `own_cpu_pct` from its status.
    #[serde(default)]
    pub own_cpu_pct: Option<f64>,
    /// Its actions.
    #[serde(default)]
    pub actions: Vec<ActionSummary>,
    /// The status notes of its last scan (machine-wide: no PMU, no prefetch control).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The workloads of its last scan: each one's signal and state (why nothing happened).
    #[serde(default)]
    pub workloads: Vec<WorkloadState>,
    /// The state directory (with the log and the store).
    #[serde(default)]
    pub state_dir: String,
}

/// A workload as the daemon's last scan saw it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct WorkloadState {
    /// Its name (the process name).
    pub name: String,
    /// The signal it is judged by, when it has one.
    #[serde(default)]
    pub signal: Option<String>,
    /// What the daemon is doing with it, or why nothing.
    #[serde(default)]
    pub state: String,
}

/// One daemon action, as `perfpilot status --json` gave it.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct ActionSummary {
    /// Action id.
    pub id: i64,
    /// Strategy (`large_pages`, …).
    pub strategy: String,
    /// Workload it acted on.
    pub workload: String,
    /// State (`kept`, `reverted`, …).
    pub state: String,
    /// The verdict's decision (`keep`, `neutral`, `revert`).
    #[serde(default)]
    pub decision: Option<String>,
    /// The signal that judged it.
    #[serde(default)]
    pub signal: Option<String>,
    /// Its gain.
    #[serde(default)]
    pub gain: Option<GainCi>,
    /// Proxies measured on the same windows (the verdict's `shadow`).
    #[serde(default)]
    pub shadow: Vec<ShadowGain>,
}

/// A gain with its interval.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct GainCi {
    /// The estimate (> 1 is better).
    pub ratio: f64,
    /// Low end.
    pub ci_low: f64,
    /// High end.
    pub ci_high: f64,
}

/// A proxy signal's gain on a verdict's windows.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ShadowGain {
    /// The proxy.
    pub signal: String,
    /// Its gain.
    pub gain: GainCi,
}

/// Appends `line` to `path` (one JSON object per line), flushed at once.
pub fn append(path: &Path, line: &Line) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening the results file {}", path.display()))?;
    let text = serde_json::to_string(line)?;
    writeln!(f, "{text}").with_context(|| format!("writing {}", path.display()))?;
    f.flush()?;
    Ok(())
}

/// Every line of a results file; a line that does not parse (a cut-off write) is skipped with a
/// warning naming it.
pub fn read(path: &Path) -> Result<Vec<Line>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the results file {}", path.display()))?;
    Ok(parse(&text, &path.display().to_string()))
}

/// The lines of a results file's text (`what` names it in warnings).
pub fn parse(text: &str, what: &str) -> Vec<Line> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(l) {
            Ok(line) => out.push(line),
            Err(e) => eprintln!("proof: {what}:{}: skipped, not a result line: {e}", i + 1),
        }
    }
    out
}
