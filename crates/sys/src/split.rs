//! Splitting another process's huge pages back into small ones, so that a collapse can be
//! undone: debugfs's `split_huge_pages` takes `PID,START,END` (hexadecimal addresses, Linux ≥
//! 5.13) and splits every transparent huge page mapped in that range of that process —
//! anonymous memory, shared memory (shmem/tmpfs folios are split in the page cache, for every
//! process mapping them) and file pages alike. It needs debugfs mounted and writable: kernels
//! under lockdown, and some hypervisors' guests, refuse the write (EPERM).
//!
//! Where it does, [`split_cold`] splits what it can without debugfs: `process_madvise(MADV_COLD)`
//! over a huge page less its first small page makes the kernel split a huge page the advice
//! covers only in part, and the pages advised go to the inactive list: reclaimed first under
//! memory pressure, nothing otherwise. The kernel leaves alone a huge page that more than one
//! process maps ("do not interfere with other mappings of this folio"), so a shared segment
//! that several processes map (PostgreSQL's buffer pool) is not split, whichever processes are
//! advised: the undo of a collapse uses it only for private anonymous memory ([`cold_covers`];
//! docs/optimizer.md, "A split without debugfs").

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::Fs;

/// The debugfs file, relative to the [`Fs`] root.
pub const SPLIT_HUGE_PAGES: &str = "sys/kernel/debug/split_huge_pages";

/// Whether this machine lets perfpilot split huge pages back, or why not (in a sentence that
/// says what would allow it). A write that splits nothing (our own first page) tells.
pub fn supported(fs: &Fs) -> Result<(), String> {
    let path = fs.path(SPLIT_HUGE_PAGES);
    if !fs.is_live() {
        return if path.exists() {
            Ok(())
        } else {
            Err(format!("{} does not exist in this tree", path.display()))
        };
    }
    if !path.exists() {
        return Err(format!(
            "{} does not exist: debugfs is not mounted (mount -t debugfs none /sys/kernel/debug) or this kernel has no split_huge_pages",
            path.display()
        ));
    }
    write_range(fs, std::process::id() as i32, 0, crate::page_size()).map_err(|e| {
        format!(
            "the kernel refused a write to {} ({e}): lockdown or a restricted debugfs",
            path.display()
        )
    })
}

/// What a split did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitOutcome {
    /// Ranges written.
    pub ranges: usize,
    /// Bytes they cover.
    pub bytes: u64,
    /// Bytes still in huge pages in those ranges after the last pass (0 where `smaps` could not
    /// be read).
    #[serde(default)]
    pub left: u64,
    /// Passes made.
    #[serde(default)]
    pub passes: usize,
}

impl SplitOutcome {
    /// What the split did to `pid`'s ranges, `how` after the split (e.g. ` by MADV_COLD`).
    pub fn describe(&self, pid: i32, how: &str) -> String {
        let left = if self.left > 0 {
            format!(
                "; {} kB of them still in huge pages after {} passes (in use while split)",
                self.left >> 10,
                self.passes
            )
        } else {
            String::new()
        };
        format!(
            "{} range(s) of pid {pid} ({} MiB) split back into small pages{how}{left}",
            self.ranges,
            self.bytes >> 20
        )
    }
}

/// The most passes over the ranges: the kernel skips a huge page it cannot lock or that holds
/// extra references at that moment (a page being read by another thread), so after each pass
/// the ranges are read back from `smaps` and written again, after a growing pause, while huge
/// pages are left.
const PASSES: usize = 6;

/// Splits the huge pages of `pid` in each `(start, len)` range, until none is left in them or
/// after [`PASSES`] passes.
pub fn split(fs: &Fs, pid: i32, ranges: &[(u64, u64)]) -> std::io::Result<SplitOutcome> {
    in_passes(fs, pid, ranges, false, || {
        for &(start, len) in ranges {
            write_range(fs, pid, start, start + len)?;
        }
        Ok(())
    })
}

/// Splits the huge pages `pid` maps in each `(start, len)` range by `process_madvise(MADV_COLD)`
/// over every huge page but its first small page (see the module comment), again after a
/// growing pause while that still splits more, at most [`PASSES`] times. `left` counts what
/// stays mapped huge (pages in use at each pass).
pub fn split_cold(fs: &Fs, pid: i32, ranges: &[(u64, u64)]) -> crate::Result<SplitOutcome> {
    let pidfd = crate::collapse::pidfd_open(pid)?;
    let iov: Vec<libc::iovec> = cold_pieces(ranges)
        .into_iter()
        .map(|(a, l)| libc::iovec {
            iov_base: a as usize as *mut libc::c_void,
            iov_len: l as usize,
        })
        .collect();
    in_passes(fs, pid, ranges, true, || {
        for batch in iov.chunks(crate::collapse::IOV_MAX) {
            crate::collapse::advise(&pidfd, batch, libc::MADV_COLD).map_err(|source| {
                crate::Error::Syscall {
                    call: "process_madvise(MADV_COLD)",
                    target: format!("pid {pid}"),
                    source,
                }
            })?;
        }
        Ok(())
    })
}

/// Runs `pass` over `pid`'s ranges until `smaps` shows no huge page left in them, or after
/// [`PASSES`] passes, pausing longer after each; `stop_when_stuck`: also once a pass split
/// nothing more.
fn in_passes<E>(
    fs: &Fs,
    pid: i32,
    ranges: &[(u64, u64)],
    stop_when_stuck: bool,
    mut pass: impl FnMut() -> Result<(), E>,
) -> Result<SplitOutcome, E> {
    let mut out = SplitOutcome {
        ranges: ranges.len(),
        bytes: ranges.iter().map(|&(_, len)| len).sum(),
        ..SplitOutcome::default()
    };
    let mut before = u64::MAX;
    for n in 0..PASSES {
        pass()?;
        out.passes = n + 1;
        // Unreadable (the process gone, a fixture tree): nothing to check, one pass it is.
        let Ok(smaps) = std::fs::read_to_string(fs.path(&format!("proc/{pid}/smaps"))) else {
            out.left = 0;
            break;
        };
        out.left = crate::process::huge_in_ranges(&smaps, ranges);
        if out.left == 0 || (stop_when_stuck && out.left >= before) {
            break;
        }
        before = out.left;
        std::thread::sleep(std::time::Duration::from_millis(20 << n));
    }
    Ok(out)
}

/// Whether [`split_cold`] splits every huge page of `pid` in `ranges` back: each range lies in
/// private anonymous mappings of it. The kernel does not split a shared huge page another
/// process also maps, so shared memory does not count. False on a fixture tree or where the maps cannot be
/// read (the process gone).
pub fn cold_covers(fs: &Fs, pid: i32, ranges: &[(u64, u64)]) -> bool {
    if !fs.is_live() || ranges.is_empty() {
        return false;
    }
    let Ok(maps) = crate::process::ProcReader::new(fs).maps(pid) else {
        return false;
    };
    ranges.iter().all(|&(start, len)| {
        let end = start.saturating_add(len);
        let mut a = start;
        // A range may run over neighbouring mappings; each must be private and anonymous.
        while a < end {
            match maps
                .iter()
                .find(|m| m.start <= a && a < m.end && m.is_private_anon())
            {
                Some(m) => a = m.end,
                None => return false,
            }
        }
        true
    })
}

/// The pieces [`split_cold`] advises: each huge page inside the ranges less its first small
/// page, `(start, len)`.
fn cold_pieces(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let huge = crate::collapse::HUGE_PAGE;
    let small = crate::page_size();
    let mut out = Vec::new();
    for &(start, len) in ranges {
        let end = start.saturating_add(len);
        let mut a = start.div_ceil(huge) * huge;
        while a.saturating_add(huge) <= end {
            out.push((a + small, huge - small));
            a += huge;
        }
    }
    out
}

/// One write of `PID,START,END` (each write is one command to the kernel).
fn write_range(fs: &Fs, pid: i32, start: u64, end: u64) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(fs.path(SPLIT_HUGE_PAGES))?;
    f.write_all(format!("{pid},{start:#x},{end:#x}").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cold_split_advises_each_whole_huge_page_inside_a_range_but_its_first_small_page() {
        let (huge, small) = (crate::collapse::HUGE_PAGE, crate::page_size());
        // A range from half a huge page in to three and a half: huge pages 1 and 2 are whole.
        let p = cold_pieces(&[(huge / 2, 3 * huge)]);
        assert_eq!(
            p,
            vec![
                (huge + small, huge - small),
                (2 * huge + small, huge - small)
            ]
        );
        assert!(cold_pieces(&[(huge + small, huge)]).is_empty());
    }

    #[test]
    fn a_tree_without_the_debugfs_file_says_splitting_is_not_supported_and_one_with_it_takes_the_ranges()
     {
        let tmp = tempfile::tempdir().unwrap();
        let fs = Fs::at(tmp.path());
        let e = supported(&fs).unwrap_err();
        assert!(e.contains("split_huge_pages does not exist"), "{e}");
        std::fs::create_dir_all(tmp.path().join("sys/kernel/debug")).unwrap();
        std::fs::write(tmp.path().join(SPLIT_HUGE_PAGES), "").unwrap();
        assert_eq!(supported(&fs), Ok(()));
        let o = split(&fs, 42, &[(0x200000, 0x400000)]).unwrap();
        assert_eq!(
            o,
            SplitOutcome {
                ranges: 1,
                bytes: 0x400000,
                left: 0,
                passes: 1
            }
        );
        // Each write is one command (the fixture's file keeps the last).
        let written = std::fs::read_to_string(tmp.path().join(SPLIT_HUGE_PAGES)).unwrap();
        assert_eq!(written, "42,0x200000,0x600000");
    }
}
