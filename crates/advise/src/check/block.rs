//! Block devices, from their counters since boot (`/proc/diskstats`) and queue settings
//! (`/sys/block/<dev>/queue`): read-ahead against the share of reads that were sequential
//! (reads the block layer merged into a neighbour: only adjacent requests merge), the queue's
//! depth against its average occupancy while busy, and the BFQ scheduler on a fast device.
//! Counters since boot describe the device's life, not this minute: the daemon's read_ahead
//! strategy measures the change under the load of now.

use perfpilot_sys::block::{DiskStats, QueueSettings, read_diskstats, read_queue};
use perfpilot_units::bytes;

use super::{Ctx, Found, base, pct};
use crate::finding::{Evidence, Finding, Severity, Verify};

const CHECK: &str = "block";
const WHY_READ_AHEAD: &str = "Documentation/ABI/stable/sysfs-block (queue/read_ahead_kb); seed 001_ (GPFS prefetchPct, AIX j2_maxPageReadAhead): sequential readers are paced by read-ahead, while random readers waste device bandwidth and page cache on it";
const WHY_QUEUE: &str = "Documentation/ABI/stable/sysfs-block (queue/nr_requests): once the queue is full, submitters sleep in the block layer and the device sees no more parallelism than the queue allows";
const WHY_BFQ: &str = "Documentation/block/bfq-iosched.rst: BFQ trades throughput for fairness and costs CPU per request; on fast non-rotational devices `none` or `mq-deadline` give more throughput";
/// Reads below this since boot say too little about a device's pattern.
const MIN_READ_BYTES: u64 = 1 << 30;
/// Read-ahead at or below this (KiB) is small for sequential readers.
const LOW_READ_AHEAD_KB: u64 = 128;
/// Read-ahead at or above this (KiB) is large for random readers.
const HIGH_READ_AHEAD_KB: u64 = 2048;
/// A merged share from which reads are mostly sequential.
const SEQUENTIAL: f64 = 0.5;
/// A merged share under which reads are random.
const RANDOM: f64 = 0.05;
/// Average occupancy while busy, as a share of nr_requests, at which the queue is full.
const QUEUE_FULL: f64 = 0.75;
/// I/O time since boot below which the queue figures mean little (ms).
const MIN_IO_MS: u64 = 60_000;

/// Devices whose pattern says nothing of a workload's (memory, loop files, optical drives).
fn ignored(dev: &str) -> bool {
    ["loop", "ram", "zram", "sr", "fd"]
        .iter()
        .any(|p| dev.starts_with(p))
}

/// The share of reads that were merged into a neighbour: sequential ones.
fn merged_share(s: &DiskStats) -> f64 {
    let all = s.reads + s.reads_merged;
    if all == 0 {
        0.0
    } else {
        s.reads_merged as f64 / all as f64
    }
}

/// Runs the check.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    let devices = match perfpilot_sys::block::block_devices(ctx.fs) {
        Ok(d) => d,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    if devices.iter().all(|d| ignored(d)) {
        return;
    }
    let stats = match read_diskstats(ctx.fs) {
        Ok(s) => s,
        Err(e) => return found.skip_err(CHECK, &e),
    };
    for dev in devices.iter().filter(|d| !ignored(d)) {
        let Some(s) = stats.iter().find(|s| &s.name == dev) else {
            continue;
        };
        let q = match read_queue(ctx.fs, dev) {
            Ok(q) => q,
            Err(e) => {
                found.skip_err(CHECK, &e);
                continue;
            }
        };
        read_ahead(dev, s, &q, found);
        queue_depth(dev, s, &q, found);
        scheduler(dev, s, &q, found);
    }
}

fn read_ahead(dev: &str, s: &DiskStats, q: &QueueSettings, found: &mut Found) {
    let Some(ra) = q.read_ahead_kb else { return };
    let read = s.sectors_read * 512;
    if read < MIN_READ_BYTES {
        return;
    }
    let share = merged_share(s);
    let evidence = vec![
        Evidence::new(
            "read_ahead_kb",
            format!("{ra} KiB"),
            format!("/sys/block/{dev}/queue/read_ahead_kb"),
        ),
        Evidence::new(
            "reads merged into a neighbour (sequential) since boot",
            format!(
                "{:.0} % of {} reads, {} read",
                share * 100.0,
                s.reads + s.reads_merged,
                bytes(read)
            ),
            "/proc/diskstats",
        ),
    ];
    let verify = Verify::DaemonWillTry {
        strategy: "read_ahead".into(),
    };
    if ra <= LOW_READ_AHEAD_KB && share >= SEQUENTIAL {
        found.add(Finding {
            evidence,
            why: WHY_READ_AHEAD.into(),
            effect: "sequential readers get larger requests ahead of need: fewer, larger reads and less waiting on each".into(),
            apply: format!("sudo blockdev --setra 2048 /dev/{dev}   # 1 MiB (512-byte sectors); a udev rule keeps it across boots"),
            verify,
            ..base(
                "block.read-ahead-low",
                dev,
                Severity::Warning,
                format!("{ra} KiB of read-ahead on a device whose reads are mostly sequential ({:.0} % merged)", share * 100.0),
            )
        });
    } else if ra >= HIGH_READ_AHEAD_KB && share < RANDOM {
        found.add(Finding {
            evidence,
            why: WHY_READ_AHEAD.into(),
            effect: "random readers stop pulling in data nobody reads: more device bandwidth and page cache for what is read".into(),
            apply: format!("sudo blockdev --setra 256 /dev/{dev}   # 128 KiB (512-byte sectors)"),
            verify,
            ..base(
                "block.read-ahead-high",
                dev,
                Severity::Info,
                format!("{ra} KiB of read-ahead on a device whose reads are random ({:.1} % merged)", share * 100.0),
            )
        });
    }
}

fn queue_depth(dev: &str, s: &DiskStats, q: &QueueSettings, found: &mut Found) {
    let Some(depth) = q.nr_requests.filter(|d| *d > 0) else {
        return;
    };
    if s.io_ms < MIN_IO_MS {
        return;
    }
    // Little's law over the device's busy time: the average number in flight while busy.
    let occupancy = s.weighted_io_ms as f64 / s.io_ms as f64;
    if occupancy < QUEUE_FULL * depth as f64 {
        return;
    }
    found.add(Finding {
        evidence: vec![
            Evidence::new(
                "nr_requests",
                depth.to_string(),
                format!("/sys/block/{dev}/queue/nr_requests"),
            ),
            Evidence::new(
                "I/Os in flight on average while busy (weighted I/O time / I/O time, since boot)",
                format!("{occupancy:.1}"),
                "/proc/diskstats",
            ),
        ],
        why: WHY_QUEUE.into(),
        effect: "submitters stop sleeping for a free request; a device with internal parallelism (SSD, NVMe, a RAID or cloud volume) gets more requests at once".into(),
        apply: format!("echo {} | sudo tee /sys/block/{dev}/queue/nr_requests", depth * 2),
        verify: Verify::Observe {
            command: format!("iostat -x 1 /dev/{dev}   # aqu-sz and r_await/w_await under the same load"),
            expect: "aqu-sz below nr_requests, and the same or lower waits".into(),
        },
        ..base(
            "block.queue-full",
            dev,
            Severity::Warning,
            format!("its queue of {depth} requests is {} full on average while busy", pct(occupancy.round() as u64, depth)),
        )
    });
}

fn scheduler(dev: &str, s: &DiskStats, q: &QueueSettings, found: &mut Found) {
    if q.rotational != Some(false) || q.scheduler.as_deref() != Some("bfq") {
        return;
    }
    // Only where the device is used: an idle one costs nothing.
    if s.reads + s.writes < 100_000 {
        return;
    }
    found.add(Finding {
        evidence: vec![
            Evidence::new(
                "scheduler",
                "bfq".to_string(),
                format!("/sys/block/{dev}/queue/scheduler"),
            ),
            Evidence::new(
                "rotational",
                "0 (SSD, NVMe or a virtual disk)".to_string(),
                format!("/sys/block/{dev}/queue/rotational"),
            ),
        ],
        why: WHY_BFQ.into(),
        effect: "less CPU per request and more requests per second from the device".into(),
        apply: format!("echo none | sudo tee /sys/block/{dev}/queue/scheduler   # mq-deadline for a SATA SSD shared by readers and writers"),
        verify: Verify::Observe {
            command: format!("iostat -x 1 /dev/{dev}   # under the same load"),
            expect: "more r/s and w/s at the same or lower await".into(),
        },
        ..base(
            "block.bfq-on-fast-device",
            dev,
            Severity::Info,
            "the BFQ scheduler on a non-rotational device".to_string(),
        )
    });
}
