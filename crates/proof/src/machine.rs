//! The machine a proof ran on, as the table's heading states it.

use perfpilot_sys::Fs;
use serde::{Deserialize, Serialize};

use crate::settings::ThpState;

/// What the proof's figures depend on.
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
    /// Reads the machine under `fs`.
    pub fn read(fs: &Fs) -> Machine {
        let cpuinfo = fs.read("proc/cpuinfo").unwrap_or_default();
        let cpus = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|r| r.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let numa_nodes = fs
            .list("sys/devices/system/node")
            .unwrap_or_default()
            .iter()
            .filter(|n| n.starts_with("node") && n[4..].bytes().all(|b| b.is_ascii_digit()))
            .count()
            .max(1);
        let memory_bytes = fs
            .read("proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or(0);
        let kernel = fs
            .read("proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Machine {
            cpus,
            cpu_model,
            numa_nodes,
            memory_bytes,
            kernel,
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
