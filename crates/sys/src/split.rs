//! Splitting another process's huge pages back into small ones, so that a collapse can be
//! undone: debugfs's `split_huge_pages` takes `PID,START,END` (hexadecimal addresses, Linux ≥
//! 5.13) and splits every transparent huge page mapped in that range of that process —
//! anonymous memory, shared memory (shmem/tmpfs folios are split in the page cache, for every
//! process mapping them) and file pages alike. It needs debugfs mounted and writable: kernels
//! under lockdown, and some hypervisors' guests, refuse the write (EPERM), and then a
//! collapse stays a one-way change.

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

/// The most passes over the ranges: the kernel skips a huge page it cannot lock or that holds
/// extra references at that moment (a page being read by another thread), so after each pass
/// the ranges are read back from `smaps` and written again, after a growing pause, while huge
/// pages are left.
const PASSES: usize = 6;

/// Splits the huge pages of `pid` in each `(start, len)` range, until none is left in them or
/// after [`PASSES`] passes.
pub fn split(fs: &Fs, pid: i32, ranges: &[(u64, u64)]) -> std::io::Result<SplitOutcome> {
    let mut out = SplitOutcome {
        ranges: ranges.len(),
        bytes: ranges.iter().map(|&(_, len)| len).sum(),
        ..SplitOutcome::default()
    };
    for pass in 0..PASSES {
        for &(start, len) in ranges {
            write_range(fs, pid, start, start + len)?;
        }
        out.passes = pass + 1;
        // Unreadable (the process gone, a fixture tree): nothing to check, one pass it is.
        let Ok(smaps) = std::fs::read_to_string(fs.path(&format!("proc/{pid}/smaps"))) else {
            out.left = 0;
            break;
        };
        out.left = crate::process::huge_in_ranges(&smaps, ranges);
        if out.left == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20 << pass));
    }
    Ok(out)
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
