//! Block devices: `/proc/diskstats` counters and `/sys/block/<dev>/queue` settings.

use serde::{Deserialize, Serialize};

use crate::{Error, Fs, Result};

/// The counters of one line of `/proc/diskstats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskStats {
    /// The device's major number.
    pub major: u32,
    /// The device's minor number.
    pub minor: u32,
    /// The device name (`sda`, `nvme0n1p1`, `dm-0`).
    pub name: String,
    /// Reads completed.
    pub reads: u64,
    /// Adjacent reads merged into one.
    pub reads_merged: u64,
    /// 512-byte sectors read.
    pub sectors_read: u64,
    /// Milliseconds spent on reads (summed over reads).
    pub read_ms: u64,
    /// Writes completed.
    pub writes: u64,
    /// Adjacent writes merged into one.
    pub writes_merged: u64,
    /// 512-byte sectors written.
    pub sectors_written: u64,
    /// Milliseconds spent on writes (summed over writes).
    pub write_ms: u64,
    /// I/Os in flight right now (a level, not a counter).
    pub in_flight: u64,
    /// Milliseconds the device had I/O in flight.
    pub io_ms: u64,
    /// Sum of each I/O's time in flight, ms (queue length × time).
    pub weighted_io_ms: u64,
    /// Discards completed (0 on kernels before 4.18).
    pub discards: u64,
    /// Milliseconds spent on discards.
    pub discard_ms: u64,
    /// Flushes completed (0 on kernels before 5.5).
    pub flushes: u64,
    /// Milliseconds spent on flushes.
    pub flush_ms: u64,
}

/// Parses `/proc/diskstats` (14, 18 or 20 columns depending on the kernel).
pub fn parse_diskstats(text: &str, path: &std::path::Path) -> Result<Vec<DiskStats>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        if f.len() < 14 {
            return Err(Error::parse(
                path,
                i + 1,
                format!("{} columns; expected at least 14", f.len()),
            ));
        }
        let n = |c: usize| -> Result<u64> {
            match f.get(c) {
                None => Ok(0),
                Some(v) => v.parse().map_err(|_| {
                    Error::parse(
                        path,
                        i + 1,
                        format!("column {}: {v:?} is not a number", c + 1),
                    )
                }),
            }
        };
        out.push(DiskStats {
            major: n(0)? as u32,
            minor: n(1)? as u32,
            name: f[2].to_string(),
            reads: n(3)?,
            reads_merged: n(4)?,
            sectors_read: n(5)?,
            read_ms: n(6)?,
            writes: n(7)?,
            writes_merged: n(8)?,
            sectors_written: n(9)?,
            write_ms: n(10)?,
            in_flight: n(11)?,
            io_ms: n(12)?,
            weighted_io_ms: n(13)?,
            discards: n(14)?,
            discard_ms: n(17)?,
            flushes: n(18)?,
            flush_ms: n(19)?,
        });
    }
    Ok(out)
}

/// Reads `/proc/diskstats`.
pub fn read_diskstats(fs: &Fs) -> Result<Vec<DiskStats>> {
    let path = fs.path("proc/diskstats");
    let text = crate::fs::read_string(&path)?;
    parse_diskstats(&text, &path)
}

/// The whole-disk devices of `/sys/block` (partitions are not listed there), sorted.
pub fn block_devices(fs: &Fs) -> Result<Vec<String>> {
    let mut v = match fs.list("sys/block") {
        Ok(v) => v,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    v.sort();
    Ok(v)
}

/// The queue settings of a block device (`/sys/block/<dev>/queue/*`); `None` where absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSettings {
    /// `read_ahead_kb`: how far ahead sequential reads are prefetched, in KiB.
    pub read_ahead_kb: Option<u64>,
    /// `nr_requests`: the depth of the request queue.
    pub nr_requests: Option<u64>,
    /// `rotational`: true for a spinning disk.
    pub rotational: Option<bool>,
    /// The selected I/O scheduler.
    pub scheduler: Option<String>,
    /// `logical_block_size`: the smallest addressable unit, in bytes.
    pub logical_block_size: Option<u64>,
    /// Device size in bytes.
    pub size_bytes: Option<u64>,
    /// `optimal_io_size`: the device's preferred I/O size in bytes (0: none given); the
    /// kernel's default read-ahead is twice this where that exceeds 128 KiB.
    pub optimal_io_size: Option<u64>,
}

/// Reads the queue settings of `dev`.
pub fn read_queue(fs: &Fs, dev: &str) -> Result<QueueSettings> {
    let num = |rel: String| -> Result<Option<u64>> {
        match fs.read_opt(&rel)? {
            None => Ok(None),
            Some(t) => t.trim().parse().map(Some).map_err(|_| {
                Error::parse(fs.path(&rel), 1, format!("{:?} is not a number", t.trim()))
            }),
        }
    };
    let q = format!("sys/block/{dev}/queue");
    Ok(QueueSettings {
        read_ahead_kb: num(format!("{q}/read_ahead_kb"))?,
        nr_requests: num(format!("{q}/nr_requests"))?,
        rotational: num(format!("{q}/rotational"))?.map(|v| v != 0),
        scheduler: fs.read_opt(&format!("{q}/scheduler"))?.map(|t| {
            crate::stat::selected_choice(&t)
                .unwrap_or(t.trim())
                .to_string()
        }),
        logical_block_size: num(format!("{q}/logical_block_size"))?,
        size_bytes: num(format!("sys/block/{dev}/size"))?
            .map(|sectors| sectors.saturating_mul(512)),
        optimal_io_size: num(format!("{q}/optimal_io_size"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diskstats_widths() {
        let text = " 253       0 vda 1000 10 80000 500 2000 20 160000 900 0 1200 1400 0 0 0 0 50 7\n   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0\n";
        let d = parse_diskstats(text, std::path::Path::new("/proc/diskstats")).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].name, "vda");
        assert_eq!(d[0].sectors_written, 160000);
        assert_eq!(d[0].weighted_io_ms, 1400);
        assert_eq!(d[0].flushes, 50);
        assert_eq!(d[1].flushes, 0);
        let e = parse_diskstats(" 8 0 sda 1 2\n", std::path::Path::new("/d")).unwrap_err();
        assert!(e.to_string().starts_with("/d:1:"), "{e}");
    }
}
