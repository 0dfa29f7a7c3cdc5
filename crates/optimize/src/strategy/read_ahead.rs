//! Read-ahead: adapt a block device's `read_ahead_kb` to the observed sequential share of its
//! reads (the storage form of prefetch tuning). The sequential share is estimated from the
//! kernel's merge count and the average request size between two samples: adjacent reads are
//! merged by the block layer, and read-ahead itself issues large requests.
//!
//! Hardware data prefetch is not exposed by Linux in a portable way; [`hardware_prefetch`] says
//! so rather than pretend.

use perfpilot_sys::block::{DiskStats, QueueSettings};
use perfpilot_sys::change::Change;

use super::{Context, Proposal, StrategyKind, skip};

/// A block device between two samples.
pub struct DeviceView<'a> {
    /// The device's name (`sda`).
    pub name: &'a str,
    /// Its queue settings now.
    pub queue: &'a QueueSettings,
    /// Its counters at the earlier sample.
    pub before: &'a DiskStats,
    /// Its counters at the later sample.
    pub after: &'a DiskStats,
    /// Seconds between the samples.
    pub interval_s: f64,
}

/// The read-ahead strategy.
pub struct ReadAhead;

/// The read_ahead_kb set for random reads.
pub const RANDOM_KB: u64 = 32;
/// The smallest read_ahead_kb set for sequential reads.
pub const SEQUENTIAL_MIN_KB: u64 = 512;

impl ReadAhead {
    /// Which strategy it is.
    pub fn kind(&self) -> StrategyKind {
        StrategyKind::ReadAhead
    }

    /// Proposes a read_ahead_kb for a device.
    pub fn propose(&self, d: &DeviceView, ctx: &Context) -> Proposal {
        let Some(current) = d.queue.read_ahead_kb else {
            return skip(format!("{} has no read_ahead_kb", d.name));
        };
        let reads = d.after.reads.saturating_sub(d.before.reads);
        let merged = d.after.reads_merged.saturating_sub(d.before.reads_merged);
        let bytes = d.after.sectors_read.saturating_sub(d.before.sectors_read) * 512;
        let mb_s = bytes as f64 / 1e6 / d.interval_s.max(1e-9);
        let min = ctx.tun.read_ahead_min_mb_per_s;
        if reads == 0 || mb_s < min {
            return skip(format!(
                "{} reads {mb_s:.1} MB/s, under read_ahead_min_mb_per_s {min}",
                d.name
            ));
        }
        let avg_kb = bytes as f64 / 1024.0 / reads as f64;
        let seq = merged as f64 / (merged + reads) as f64;
        let max_kb = ctx.tun.read_ahead_max_kb as u64;
        let (target, why) = if avg_kb >= 64.0 || seq >= 0.5 {
            (
                (current * 2).max(SEQUENTIAL_MIN_KB).min(max_kb),
                "sequential",
            )
        } else if avg_kb <= 16.0 && seq < 0.1 {
            (RANDOM_KB, "random")
        } else {
            return skip(format!(
                "{}: mixed reads (average {avg_kb:.0} KiB, {:.0} % merged): left as is",
                d.name,
                seq * 100.0
            ));
        };
        if target == current || (why == "sequential" && target < current) {
            return skip(format!(
                "{}: read_ahead_kb {current} already suits its {why} reads",
                d.name
            ));
        }
        Proposal::Act {
            changes: vec![Change::Sysfs {
                rel: format!("sys/block/{}/queue/read_ahead_kb", d.name),
                value: target.to_string(),
            }],
            reason: format!(
                "{}: {why} reads ({mb_s:.1} MB/s, average {avg_kb:.0} KiB, {:.0} % merged): read_ahead_kb {current} -> {target}",
                d.name,
                seq * 100.0
            ),
            interleave: true,
            irreversible: false,
        }
    }
}

/// Whether hardware data prefetch can be controlled here. Linux exposes no portable interface
/// (on POWER the DSCR; on x86 model-specific registers whose layout differs by CPU model), so
/// perfpilot reports it as unsupported.
pub fn hardware_prefetch() -> Result<(), String> {
    Err("hardware prefetch control is not exposed by this platform through a stable kernel interface".into())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::tunables::Tunables;

    fn stats(reads: u64, merged: u64, sectors: u64) -> DiskStats {
        DiskStats {
            name: "sda".into(),
            reads,
            reads_merged: merged,
            sectors_read: sectors,
            ..DiskStats::default()
        }
    }

    fn propose(before: DiskStats, after: DiskStats, ra: u64) -> Proposal {
        let topo = machine(1, 1, 1, 1);
        let busy = busy(&topo, |_| 0.0);
        let (tun, thp) = (Tunables::default(), thp("madvise", "never"));
        let ctx = ctx(&topo, &tun, &busy, &thp);
        let q = QueueSettings {
            read_ahead_kb: Some(ra),
            ..Default::default()
        };
        ReadAhead.propose(
            &DeviceView {
                name: "sda",
                queue: &q,
                before: &before,
                after: &after,
                interval_s: 1.0,
            },
            &ctx,
        )
    }

    #[test]
    fn sequential_reads_raise_and_random_reads_lower_read_ahead() {
        // 1000 reads of 128 KiB in 1 s: sequential.
        let p = propose(stats(0, 0, 0), stats(1000, 3000, 1000 * 256), 128);
        let Proposal::Act {
            changes,
            interleave,
            ..
        } = p
        else {
            panic!("{p:?}")
        };
        assert!(interleave);
        assert_eq!(
            changes,
            vec![Change::Sysfs {
                rel: "sys/block/sda/queue/read_ahead_kb".into(),
                value: "512".into()
            }]
        );
        // 5000 reads of 4 KiB, none merged: random.
        let p = propose(stats(0, 0, 0), stats(5000, 10, 5000 * 8), 128);
        let Proposal::Act { changes, .. } = p else {
            panic!("{p:?}")
        };
        assert_eq!(
            changes,
            vec![Change::Sysfs {
                rel: "sys/block/sda/queue/read_ahead_kb".into(),
                value: "32".into()
            }]
        );
        // Already at the random setting; idle devices; the cap.
        assert!(matches!(
            propose(stats(0, 0, 0), stats(5000, 10, 5000 * 8), 32),
            Proposal::Skip(_)
        ));
        assert!(
            matches!(propose(stats(0, 0, 0), stats(10, 0, 80), 128), Proposal::Skip(s) if s.contains("read_ahead_min_mb_per_s"))
        );
        assert!(
            matches!(propose(stats(0, 0, 0), stats(1000, 3000, 1000 * 256), 4096), Proposal::Skip(s) if s.contains("already"))
        );
    }

    #[test]
    fn hardware_prefetch_is_reported_unsupported() {
        assert!(hardware_prefetch().unwrap_err().contains("not exposed"));
    }
}
