//! Read-ahead: adapt a block device's `read_ahead_kb` to the observed sequential share of its
//! reads (the storage form of prefetch tuning). The sequential share is estimated from the
//! kernel's merge count and the average request size between two samples: adjacent reads are
//! merged by the block layer, and read-ahead itself issues large requests. A small read-ahead
//! hides a sequential stream: the kernel then reads it in requests of `read_ahead_kb` each,
//! none merged (measured on a loop device: 8 KiB requests at `read_ahead_kb` 8), so requests
//! that fill the read-ahead window count as sequential too. Random reads are requests of the
//! application's size (a page), whatever the read-ahead (docs/optimizer.md, *Read-ahead*).
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
/// Requests averaging at least this share of `read_ahead_kb` fill the read-ahead window: only
/// a stream the kernel found sequential is read ahead that far.
pub const WINDOW_FULL: f64 = 0.75;
/// A read-ahead of one page (4 KiB) or less cannot tell a stream from single-page reads.
const WINDOW_MIN_KB: u64 = 8;

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
        // Requests that fill a small read-ahead window: a stream held back by the read-ahead.
        let window_full = (WINDOW_MIN_KB..SEQUENTIAL_MIN_KB).contains(&current)
            && avg_kb >= WINDOW_FULL * current as f64;
        let (target, why) = if avg_kb >= 64.0 || seq >= 0.5 || window_full {
            (
                (current * 2).max(SEQUENTIAL_MIN_KB).min(max_kb),
                "sequential",
            )
        } else if avg_kb <= 16.0 && seq < 0.1 {
            // Random reads only ever lower read-ahead: a smaller one already reads no further.
            if current <= RANDOM_KB {
                return skip(format!(
                    "{}: read_ahead_kb {current} already suits its random reads (average {avg_kb:.0} KiB, {:.0} % merged)",
                    d.name,
                    seq * 100.0
                ));
            }
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
            cheap_undo: true,
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
            cheap_undo,
            ..
        } = p
        else {
            panic!("{p:?}")
        };
        assert!(cheap_undo);
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
    fn requests_that_fill_a_small_read_ahead_are_a_sequential_stream() {
        // Measured on a loop device at read_ahead_kb 8 under a sequential 4 KiB reader: 8 KiB
        // requests, none merged (docs/optimizer.md). Without the window rule it read as random.
        let p = propose(stats(0, 0, 0), stats(25_000, 0, 25_000 * 16), 8);
        let Proposal::Act {
            changes, reason, ..
        } = p
        else {
            panic!("{p:?}")
        };
        assert!(reason.contains("sequential"), "{reason}");
        assert_eq!(
            changes,
            vec![Change::Sysfs {
                rel: "sys/block/sda/queue/read_ahead_kb".into(),
                value: "512".into()
            }]
        );
        // 15 KiB at 16 (a file's first request is shorter) fills it too; at 32, 31 KiB does.
        assert!(matches!(
            propose(stats(0, 0, 0), stats(16_000, 0, 16_000 * 30), 16),
            Proposal::Act { .. }
        ));
        assert!(matches!(
            propose(stats(0, 0, 0), stats(6_000, 0, 6_000 * 62), 32),
            Proposal::Act { .. }
        ));
    }

    #[test]
    fn random_reads_never_raise_a_small_read_ahead() {
        // Single pages at read_ahead_kb 8: the page fills half the window, not three quarters.
        for ra in [8, 16, 32] {
            let p = propose(stats(0, 0, 0), stats(5000, 0, 5000 * 8), ra);
            assert!(
                matches!(&p, Proposal::Skip(s) if s.contains("already suits its random reads")),
                "read_ahead_kb {ra}: {p:?}"
            );
        }
        // A one-page read-ahead cannot tell a stream from single pages: left as it is.
        assert!(matches!(
            propose(stats(0, 0, 0), stats(5000, 0, 5000 * 8), 4),
            Proposal::Skip(_)
        ));
    }

    #[test]
    fn hardware_prefetch_is_reported_unsupported() {
        assert!(hardware_prefetch().unwrap_err().contains("not exposed"));
    }
}
