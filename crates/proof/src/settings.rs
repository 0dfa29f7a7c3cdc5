//! Global kernel settings the cells change (or their tools change behind their back), with a
//! guard that restores every one of them after a cell, also on an error, Ctrl-C or a panic.
//!
//! The guard does not trust the tools to clean up: numad leaves khugepaged's scan interval at
//! its own value when it exits, and tuned rolls back only what it remembers. So a guard
//! snapshots a fixed list of knobs (and every block device's read-ahead and every CPU's
//! governor) before the cell and writes back each one that differs afterwards. Paths are
//! relative to an [`Fs`] root, so tests run on a fixture tree.

use perfpilot_sys::Fs;
use perfpilot_sys::knob::{read_knob, write_knob};
use serde::{Deserialize, Serialize};

/// THP's mode for anonymous memory.
pub const THP_ENABLED: &str = "sys/kernel/mm/transparent_hugepage/enabled";
/// THP's defrag mode.
pub const THP_DEFRAG: &str = "sys/kernel/mm/transparent_hugepage/defrag";
/// THP's mode for shared memory and tmpfs.
pub const THP_SHMEM: &str = "sys/kernel/mm/transparent_hugepage/shmem_enabled";
/// Reserved huge pages of the default size.
pub const NR_HUGEPAGES: &str = "proc/sys/vm/nr_hugepages";

/// Knobs every guard watches (absent ones are skipped).
const WATCHED: &[&str] = &[
    THP_ENABLED,
    THP_DEFRAG,
    THP_SHMEM,
    "sys/kernel/mm/transparent_hugepage/khugepaged/defrag",
    "sys/kernel/mm/transparent_hugepage/khugepaged/scan_sleep_millisecs",
    "sys/kernel/mm/transparent_hugepage/khugepaged/alloc_sleep_millisecs",
    "sys/kernel/mm/transparent_hugepage/khugepaged/pages_to_scan",
    "sys/kernel/mm/transparent_hugepage/khugepaged/max_ptes_none",
    NR_HUGEPAGES,
    "proc/sys/vm/dirty_ratio",
    "proc/sys/vm/dirty_background_ratio",
    "proc/sys/vm/swappiness",
    "proc/sys/vm/zone_reclaim_mode",
    "proc/sys/kernel/numa_balancing",
    "proc/sys/kernel/sched_autogroup_enabled",
    "proc/sys/net/core/somaxconn",
];

/// The THP state a result records.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ThpState {
    /// `enabled` (`always`, `madvise`, `never`).
    pub enabled: String,
    /// `defrag`.
    pub defrag: String,
    /// `shmem_enabled`.
    pub shmem_enabled: String,
}

impl ThpState {
    /// The current THP state under `fs` (`?` for an unreadable file).
    pub fn read(fs: &Fs) -> ThpState {
        let r = |rel| read_knob(fs, rel).unwrap_or_else(|_| "?".to_string());
        ThpState {
            enabled: r(THP_ENABLED),
            defrag: r(THP_DEFRAG),
            shmem_enabled: r(THP_SHMEM),
        }
    }

    /// `enabled=madvise defrag=madvise shmem=never`.
    pub fn describe(&self) -> String {
        format!(
            "enabled={} defrag={} shmem_enabled={}",
            self.enabled, self.defrag, self.shmem_enabled
        )
    }
}

/// Every watched knob present under `fs`: the fixed list, block devices' read-ahead and CPU
/// frequency governors.
fn watched(fs: &Fs) -> Vec<String> {
    let mut out: Vec<String> = WATCHED.iter().map(|s| s.to_string()).collect();
    for dev in fs.list("sys/block").unwrap_or_default() {
        out.push(format!("sys/block/{dev}/queue/read_ahead_kb"));
    }
    for cpu in fs.list("sys/devices/system/cpu").unwrap_or_default() {
        if cpu.starts_with("cpu") && cpu[3..].bytes().all(|b| b.is_ascii_digit()) {
            out.push(format!(
                "sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor"
            ));
        }
    }
    out.retain(|rel| fs.path(rel).is_file());
    out
}

/// The values of the watched knobs at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    fs: Fs,
    values: Vec<(String, String)>,
}

impl Snapshot {
    /// Reads every watched knob under `fs`.
    pub fn take(fs: &Fs) -> Snapshot {
        let values = watched(fs)
            .into_iter()
            .filter_map(|rel| read_knob(fs, &rel).ok().map(|v| (rel, v)))
            .collect();
        Snapshot {
            fs: fs.clone(),
            values,
        }
    }

    /// Writes back every knob whose value differs from the snapshot; one line per knob
    /// restored (or that could not be), naming the file and both values.
    pub fn restore(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (rel, was) in &self.values {
            let now = match read_knob(&self.fs, rel) {
                Ok(v) => v,
                Err(e) => {
                    lines.push(format!("could not read {rel} to restore it to {was}: {e}"));
                    continue;
                }
            };
            if &now == was {
                continue;
            }
            match write_knob(&self.fs, rel, was) {
                Ok(()) => lines.push(format!("restored /{rel}: {now} → {was}")),
                Err(e) => lines.push(format!(
                    "FAILED to restore /{rel} from {now} to {was}: {e}; set it by hand"
                )),
            }
        }
        lines
    }
}

/// Restores a [`Snapshot`] when dropped (also while unwinding from a panic), printing what it
/// restored; [`SettingsGuard::finish`] does it early and returns the lines for the results.
pub struct SettingsGuard {
    snapshot: Option<Snapshot>,
}

impl SettingsGuard {
    /// Snapshots the watched knobs under `fs`.
    pub fn take(fs: &Fs) -> SettingsGuard {
        SettingsGuard {
            snapshot: Some(Snapshot::take(fs)),
        }
    }

    /// Sets knob `rel` to `value` (restored with the rest).
    pub fn set(&self, rel: &str, value: &str) -> anyhow::Result<()> {
        let fs = self
            .snapshot
            .as_ref()
            .map(|s| s.fs.clone())
            .unwrap_or_default();
        write_knob(&fs, rel, value).map_err(|e| {
            anyhow::anyhow!("cannot set /{rel} to {value}: {e} (the harness must run as root)")
        })
    }

    /// Restores now; the lines say what was restored (also printed).
    pub fn finish(mut self) -> Vec<String> {
        self.restore_now()
    }

    fn restore_now(&mut self) -> Vec<String> {
        let Some(snapshot) = self.snapshot.take() else {
            return Vec::new();
        };
        let lines = snapshot.restore();
        for l in &lines {
            eprintln!("proof: {l}");
        }
        lines
    }
}

impl Drop for SettingsGuard {
    fn drop(&mut self) {
        self.restore_now();
    }
}
