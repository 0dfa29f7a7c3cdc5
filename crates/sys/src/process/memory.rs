//! The page-table walks: `/proc/<pid>/smaps_rollup` and `/proc/<pid>/numa_maps`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::maps::{MappingKind, classify_path, smaps_header, unescape_path};
use crate::fs::kv_numbers;
use crate::{Error, Result};

/// Bytes mapped by PMD-sized pages (`AnonHugePages`, `ShmemPmdMapped`, `FilePmdMapped`) in the
/// mappings of `/proc/<pid>/smaps` that overlap any of `ranges` (`(start, length)`). A mapping
/// only partly inside a range counts whole: an upper bound, which is what a check that a split
/// worked needs. Lines it cannot read are skipped (the file changes as it is read).
pub fn huge_in_ranges(smaps: &str, ranges: &[(u64, u64)]) -> u64 {
    let mut total = 0;
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((a, b)) = smaps_header(line) {
            inside = ranges
                .iter()
                .any(|&(start, len)| a < start.saturating_add(len) && start < b);
            continue;
        }
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if inside
            && matches!(
                first,
                "AnonHugePages:" | "ShmemPmdMapped:" | "FilePmdMapped:"
            )
            && let Some(kb) = fields.next().and_then(|v| v.parse::<u64>().ok())
        {
            total += kb << 10;
        }
    }
    total
}

/// `/proc/<pid>/smaps_rollup`, in bytes: resident memory and its huge-page coverage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmapsRollup {
    /// Resident memory.
    pub rss: u64,
    /// Proportional set size: resident memory, each shared page divided by its sharers.
    pub pss: u64,
    /// Anonymous memory.
    pub anonymous: u64,
    /// Anonymous memory mapped by transparent huge pages.
    pub anon_huge: u64,
    /// Shared memory (tmpfs/shm) mapped by PMD-sized pages.
    pub shmem_pmd_mapped: u64,
    /// File memory mapped by PMD-sized pages.
    pub file_pmd_mapped: u64,
    /// Shared hugetlbfs memory.
    pub shared_hugetlb: u64,
    /// Private hugetlbfs memory.
    pub private_hugetlb: u64,
    /// Memory swapped out.
    pub swap: u64,
}

/// Parses the text of `smaps_rollup`.
pub fn parse_smaps_rollup(text: &str, path: &Path) -> Result<SmapsRollup> {
    let [
        rss,
        pss,
        anonymous,
        anon_huge,
        shmem_pmd_mapped,
        file_pmd_mapped,
        shared_hugetlb,
        private_hugetlb,
        swap,
    ] = kv_numbers(
        text,
        path,
        [
            "Rss",
            "Pss",
            "Anonymous",
            "AnonHugePages",
            "ShmemPmdMapped",
            "FilePmdMapped",
            "Shared_Hugetlb",
            "Private_Hugetlb",
            "Swap",
        ],
    )?;
    Ok(SmapsRollup {
        rss,
        pss,
        anonymous,
        anon_huge,
        shmem_pmd_mapped,
        file_pmd_mapped,
        shared_hugetlb,
        private_hugetlb,
        swap,
    })
}

/// One line of `/proc/<pid>/numa_maps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaRange {
    /// First address of the range.
    pub start: u64,
    /// The memory policy (`default`, `bind:0`, `interleave:0-1`, `prefer:1`, …).
    pub policy: String,
    /// What the range maps.
    pub kind: MappingKind,
    /// hugetlbfs mapping.
    pub hugetlb: bool,
    /// Page size of the range in bytes (`kernelpagesize_kB`).
    pub page_size: u64,
    /// Resident pages per node.
    pub pages: BTreeMap<u32, u64>,
    /// Anonymous pages (`anon=`).
    pub anon_pages: u64,
    /// Dirty pages (`dirty=`).
    pub dirty_pages: u64,
}

impl NumaRange {
    /// Resident bytes on each node.
    pub fn bytes_per_node(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        // Saturating: a malformed line cannot make a node's bytes wrap around.
        self.pages
            .iter()
            .map(|(&n, &p)| (n, p.saturating_mul(self.page_size)))
    }
}

/// Parses the text of `numa_maps`.
pub fn parse_numa_maps(text: &str, path: &Path) -> Result<Vec<NumaRange>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        let mut it = line.split_ascii_whitespace();
        let Some(addr) = it.next() else { continue };
        let start = u64::from_str_radix(addr, 16)
            .map_err(|_| Error::parse(path, lineno, format!("{addr:?} is not a hex address")))?;
        let policy = it
            .next()
            .ok_or_else(|| Error::parse(path, lineno, "no memory policy"))?
            .to_string();
        let mut r = NumaRange {
            start,
            policy,
            kind: MappingKind::Anon,
            hugetlb: false,
            page_size: 4096,
            pages: BTreeMap::new(),
            anon_pages: 0,
            dirty_pages: 0,
        };
        for tok in it {
            let Some((k, v)) = tok.split_once('=') else {
                if tok == "huge" {
                    r.hugetlb = true;
                }
                continue; // heap, stack and flags
            };
            let num = || -> Result<u64> {
                v.parse()
                    .map_err(|_| Error::parse(path, lineno, format!("{k}: {v:?} is not a number")))
            };
            match k {
                "file" => r.kind = classify_path(&unescape_path(v)),
                "anon" => r.anon_pages = num()?,
                "dirty" => r.dirty_pages = num()?,
                "kernelpagesize_kB" => {
                    r.page_size = num()?.checked_mul(1024).ok_or_else(|| {
                        Error::parse(path, lineno, format!("{k}: {v} is not a page size"))
                    })?
                }
                _ if k.len() > 1
                    && k.starts_with('N')
                    && k[1..].bytes().all(|b| b.is_ascii_digit()) =>
                {
                    let node = k[1..]
                        .parse()
                        .map_err(|_| Error::parse(path, lineno, format!("{k:?} is not a node")))?;
                    r.pages.insert(node, num()?);
                }
                _ => {}
            }
        }
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {

    #[test]
    fn huge_pages_are_counted_only_in_the_mappings_that_overlap_the_ranges() {
        let smaps = "\
7f0000000000-7f0000800000 rw-p 00000000 00:00 0
Size:               8192 kB
AnonHugePages:      4096 kB
ShmemPmdMapped:        0 kB
7f0001000000-7f0001400000 rw-s 00000000 00:01 42                         /SYSV00000000 (deleted)
AnonHugePages:         0 kB
ShmemPmdMapped:     2048 kB
7f0002000000-7f0002200000 rw-p 00000000 00:00 0
AnonHugePages:      2048 kB
";
        assert_eq!(
            huge_in_ranges(smaps, &[(0x7f0000200000, 0x200000)]),
            4 << 20
        );
        assert_eq!(
            huge_in_ranges(
                smaps,
                &[(0x7f0000000000, 0x800000), (0x7f0001000000, 0x400000)]
            ),
            6 << 20
        );
        assert_eq!(huge_in_ranges(smaps, &[(0x7f0003000000, 0x200000)]), 0);
        assert_eq!(
            huge_in_ranges("not smaps at all\nAnonHugePages: x kB\n", &[(0, u64::MAX)]),
            0
        );
    }
    use super::*;
    use crate::process::parse_io;

    const P: &str = "/proc/1/x";

    #[test]
    fn numa_maps_ranges() {
        let text = "\
7f0000000000 default anon=16384 dirty=16384 active=0 N0=8192 N1=8192 kernelpagesize_kB=4
7f1000000000 interleave:0-1 file=/SYSV0000abcd\\040(deleted) dirty=100 mapmax=2 N0=60 N1=40 kernelpagesize_kB=4
7f2000000000 default file=/usr/lib/my\\040lib.so mapped=3 N1=3 kernelpagesize_kB=4
7f3000000000 bind:1 file=/dev/hugepages/x huge dirty=2 N1=2 kernelpagesize_kB=2048
7ffc00000000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4
";
        let r = parse_numa_maps(text, Path::new(P)).unwrap();
        assert_eq!(r.len(), 5);
        assert_eq!(r[0].kind, MappingKind::Anon);
        assert_eq!(r[0].pages[&1], 8192);
        assert_eq!(r[1].kind, MappingKind::SysvShm { key: 0xabcd });
        assert_eq!(r[1].policy, "interleave:0-1");
        assert_eq!(
            r[2].kind,
            MappingKind::File {
                path: "/usr/lib/my lib.so".into()
            }
        );
        assert!(r[3].hugetlb);
        assert_eq!(
            r[3].bytes_per_node().collect::<Vec<_>>(),
            vec![(1, 2 * 2048 * 1024)]
        );
        let e = parse_numa_maps("zz default\n", Path::new(P)).unwrap_err();
        assert!(e.to_string().contains("hex address"), "{e}");
    }

    #[test]
    fn smaps_rollup_and_io() {
        let s = parse_smaps_rollup("55d3-7ffc ---p 00000000 00:00 0 [rollup]\nRss: 1692 kB\nAnonymous: 116 kB\nAnonHugePages: 2048 kB\nShmemPmdMapped: 4096 kB\n", Path::new(P)).unwrap();
        assert_eq!(s.rss, 1692 * 1024);
        assert_eq!(s.anon_huge, 2048 * 1024);
        assert_eq!(s.shmem_pmd_mapped, 4096 * 1024);
        let io = parse_io("rchar: 6976\nwchar: 5\nsyscr: 10\nsyscw: 0\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n", Path::new(P)).unwrap();
        assert_eq!(io.rchar, 6976);
        assert_eq!(io.read_bytes, 4096);
        assert!(parse_io("rchar: x\n", Path::new(P)).is_err());
    }
}
