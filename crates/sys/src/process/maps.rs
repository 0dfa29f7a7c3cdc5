//! `/proc/<pid>/maps`: the mapped ranges, what each maps, and the shared-memory segments.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What a memory range maps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingKind {
    /// Private anonymous memory (including the heap and stacks).
    Anon,
    /// A System V shared-memory segment, by its key.
    SysvShm {
        /// The segment's IPC key (the hex digits after `/SYSV`).
        key: u32,
    },
    /// A POSIX shared-memory object or other tmpfs file under `/dev/shm`.
    PosixShm {
        /// The object's path, without a trailing ` (deleted)`.
        path: String,
    },
    /// Shared anonymous memory: an unlinked tmpfs object with no name in any file system. A
    /// `MAP_SHARED | MAP_ANONYMOUS` mapping shows as `/dev/zero (deleted)` and is inherited
    /// across `fork` (PostgreSQL's buffer pool with `shared_memory_type = mmap`, nginx's
    /// shared zones); a memfd shows as `/memfd:NAME (deleted)`.
    SharedAnon {
        /// `/dev/zero` or `/memfd:NAME`, without the trailing ` (deleted)`.
        object: String,
    },
    /// Any other file.
    File {
        /// The file's path as the kernel prints it (octal escapes undone).
        path: String,
    },
}

/// Undoes the octal escapes (`\040`) `seq_file_path` writes into paths.
pub(super) fn unescape_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = (oct[0] - b'0') as u32 * 64
                    + (oct[1] - b'0') as u32 * 8
                    + (oct[2] - b'0') as u32;
                if let Ok(byte) = u8::try_from(v) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Classifies a mapped path (`/SYSV0000abcd (deleted)`, `/dev/shm/x`, `/dev/zero (deleted)`,
/// `/memfd:x (deleted)`, a file). `/dev/zero` without ` (deleted)` is the device itself (a
/// private mapping of it is private memory), so it stays a file.
pub fn classify_path(path: &str) -> MappingKind {
    if let Some(rest) = path.strip_prefix("/SYSV") {
        let hex: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        if let Ok(key) = u32::from_str_radix(&hex, 16) {
            return MappingKind::SysvShm { key };
        }
    }
    if path.starts_with("/dev/shm/") {
        return MappingKind::PosixShm {
            path: path.trim_end_matches(" (deleted)").to_string(),
        };
    }
    if path == "/dev/zero (deleted)" || path.starts_with("/memfd:") {
        return MappingKind::SharedAnon {
            object: path.trim_end_matches(" (deleted)").to_string(),
        };
    }
    MappingKind::File {
        path: path.to_string(),
    }
}

/// One line of `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapRange {
    /// First address of the range.
    pub start: u64,
    /// The address just past the range.
    pub end: u64,
    /// `rwxp` / `rwxs`.
    pub perms: String,
    /// The offset column in bytes: where in the mapped file (or shared-memory object) the
    /// range begins; 0 for private anonymous memory.
    pub offset: u64,
    /// What the range maps; an anonymous range (no path, `[heap]`, `[stack]`) is `Anon`.
    pub kind: MappingKind,
    /// The inode column (the shmid for a System V segment).
    pub inode: u64,
    /// The path column as printed (`[heap]`, `[vdso]`, a file), if any.
    pub path: Option<String>,
}

impl MapRange {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Private writable anonymous memory (heap, stacks, anonymous mmaps): what page migration
    /// and huge-page promotion of private memory apply to.
    pub fn is_private_anon(&self) -> bool {
        self.kind == MappingKind::Anon
            && self.perms.as_bytes().get(1) == Some(&b'w')
            && self.perms.as_bytes().get(3) == Some(&b'p')
            && self
                .path
                .as_deref()
                .is_none_or(|p| p == "[heap]" || p.starts_with("[stack") || p.starts_with("[anon"))
    }

    /// A shared (`s`) mapping of a tmpfs object: a System V segment, a POSIX object, or
    /// shared anonymous memory. Its pages live in the object's page cache, shared by every
    /// process mapping it.
    pub fn is_shared_memory(&self) -> bool {
        matches!(
            self.kind,
            MappingKind::SysvShm { .. }
                | MappingKind::PosixShm { .. }
                | MappingKind::SharedAnon { .. }
        ) && self.perms.as_bytes().get(3) == Some(&b's')
    }

    /// How many bytes past a multiple of `huge` the range's address is, relative to its file
    /// offset: `(start - offset) mod huge`. Memory backed by a file or a shared-memory object
    /// can be mapped by a huge page only where address and offset agree modulo the huge-page
    /// size (the object's page cache holds huge pages at aligned offsets), so a non-zero
    /// value means no huge page of the range can be collapsed. Always 0 for anonymous
    /// private memory, which has no offset.
    pub fn huge_misalignment(&self, huge: u64) -> u64 {
        if self.kind == MappingKind::Anon || huge == 0 {
            return 0;
        }
        self.start.wrapping_sub(self.offset) % huge
    }

    /// The huge pages (of `huge` bytes) inside the range that can be collapsed, as the address
    /// of the first and the address just past the last; `None` when not one fits. Anonymous
    /// memory needs only its address aligned; memory with a file offset also needs the
    /// address and the offset to agree (see [`MapRange::huge_misalignment`]).
    pub fn collapsible(&self, huge: u64) -> Option<(u64, u64)> {
        if huge == 0 || self.huge_misalignment(huge) != 0 {
            return None;
        }
        let first = self.start.div_ceil(huge) * huge;
        let end = self.end / huge * huge;
        (first < end).then_some((first, end))
    }
}

/// The address range of a mapping's header line in `smaps` (`start-end perms offset dev inode
/// [path]`), or `None` for any other line (`Rss:`, `VmFlags:`, …).
pub(super) fn smaps_header(line: &str) -> Option<(u64, u64)> {
    let (a, b) = line.split_ascii_whitespace().next()?.split_once('-')?;
    Some((
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    ))
}

/// Splits a `maps` line into its five leading columns (address, perms, offset, dev, inode) and
/// the rest, the path, which may contain spaces. Missing columns are empty.
fn split_columns(line: &str) -> ([&str; 5], &str) {
    let mut rest = line;
    let mut cols = [""; 5];
    for col in cols.iter_mut() {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        *col = &rest[..end];
        rest = &rest[end..];
    }
    (cols, rest)
}

/// Parses the text of `/proc/<pid>/maps`.
pub fn parse_maps(text: &str, path: &Path) -> Result<Vec<MapRange>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let (cols, rest) = split_columns(line);
        if cols[0].is_empty() {
            continue;
        }
        let bad = |m: String| Error::parse(path, i + 1, m);
        let (a, b) = cols[0]
            .split_once('-')
            .ok_or_else(|| bad(format!("{:?} is not start-end", cols[0])))?;
        let start =
            u64::from_str_radix(a, 16).map_err(|_| bad(format!("{a:?} is not a hex address")))?;
        let end =
            u64::from_str_radix(b, 16).map_err(|_| bad(format!("{b:?} is not a hex address")))?;
        let offset = u64::from_str_radix(cols[2], 16)
            .map_err(|_| bad(format!("offset {:?} is not a hex number", cols[2])))?;
        let inode = cols[4]
            .parse()
            .map_err(|_| bad(format!("inode {:?} is not a number", cols[4])))?;
        let pathname = rest.trim();
        let (kind, p) = if pathname.is_empty() {
            (MappingKind::Anon, None)
        } else if pathname.starts_with('[') {
            (MappingKind::Anon, Some(pathname.to_string()))
        } else {
            (classify_path(pathname), Some(pathname.to_string()))
        };
        out.push(MapRange {
            start,
            end,
            perms: cols[1].to_string(),
            offset,
            kind,
            inode,
            path: p,
        });
    }
    Ok(out)
}

/// A shared-memory segment a process maps (from `/proc/<pid>/maps`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShmAttach {
    /// A System V segment: the inode column of `maps` is its shmid.
    Sysv {
        /// The segment's IPC key.
        key: u32,
        /// The segment's id (`shmid`).
        shmid: u64,
    },
    /// A POSIX shared-memory object.
    Posix {
        /// The object's path under `/dev/shm`.
        path: String,
    },
    /// Shared anonymous memory (`/dev/zero (deleted)`), which only `fork` shares: the parent
    /// of a forking server and its children map the same object, identified by its inode.
    /// Memfds are left out: compositors and sound servers pass them to unrelated processes,
    /// which are not one workload.
    SharedAnon {
        /// The object's inode (the inode column of `maps`; unique on the kernel's internal
        /// shared-memory mount).
        inode: u64,
    },
}

/// Parses the text of `/proc/<pid>/maps`, returning the shared-memory segments it maps (each
/// once).
pub fn parse_maps_shm(text: &str, path: &Path) -> Result<Vec<ShmAttach>> {
    let mut out = std::collections::BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let (cols, rest) = split_columns(line);
        let pathname = rest.trim();
        if cols[0].is_empty() {
            continue;
        }
        if cols[4].is_empty() {
            return Err(Error::parse(
                path,
                i + 1,
                "expected 5 columns before the path",
            ));
        }
        if pathname.is_empty() {
            continue;
        }
        match classify_path(pathname) {
            MappingKind::SysvShm { key } => {
                let shmid = cols[4].parse().map_err(|_| {
                    Error::parse(path, i + 1, format!("inode {:?} is not a number", cols[4]))
                })?;
                out.insert(ShmAttach::Sysv { key, shmid });
            }
            MappingKind::PosixShm { path } => {
                out.insert(ShmAttach::Posix { path });
            }
            // Shared only: a private mapping of it is copied on write, not shared.
            MappingKind::SharedAnon { object }
                if object == "/dev/zero" && cols[1].as_bytes().get(3) == Some(&b's') =>
            {
                let inode = cols[4].parse().map_err(|_| {
                    Error::parse(path, i + 1, format!("inode {:?} is not a number", cols[4]))
                })?;
                out.insert(ShmAttach::SharedAnon { inode });
            }
            _ => {}
        }
    }
    Ok(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/proc/1/x";

    #[test]
    fn maps_finds_shared_memory() {
        let text = "\
55d302c5b000-55d302c5d000 r--p 00000000 fd:00 1234 /usr/bin/cat
7f0000000000-7f0040000000 rw-s 00000000 00:01 32769 /SYSV0052e2c1 (deleted)
7f1000000000-7f1000100000 rw-s 00000000 00:1a 77 /dev/shm/PostgreSQL.123
7f2000000000-7f2000001000 rw-p 00000000 00:00 0 
7ffc762df000-7ffc76300000 rw-p 00000000 00:00 0                          [stack]
";
        let shm = parse_maps_shm(text, Path::new(P)).unwrap();
        assert_eq!(
            shm,
            vec![
                ShmAttach::Sysv {
                    key: 0x0052e2c1,
                    shmid: 32769
                },
                ShmAttach::Posix {
                    path: "/dev/shm/PostgreSQL.123".into()
                }
            ]
        );
    }

    #[test]
    fn maps_ranges() {
        let text = "\
55d302c5b000-55d302c5d000 r--p 00000000 fd:00 1234 /usr/bin/cat
55d303000000-55d303400000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0040000000 rw-s 00000000 00:01 32769 /SYSV0052e2c1 (deleted)
7f2000000000-7f2004000000 rw-p 00000000 00:00 0 
7ffc762df000-7ffc76300000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";
        let m = parse_maps(text, Path::new(P)).unwrap();
        assert_eq!(m.len(), 6);
        let anon: Vec<u64> = m
            .iter()
            .filter(|r| r.is_private_anon())
            .map(|r| r.len())
            .collect();
        assert_eq!(anon, vec![0x400000, 0x4000000, 0x21000]);
        assert_eq!(m[2].kind, MappingKind::SysvShm { key: 0x0052e2c1 });
        assert_eq!(m[2].inode, 32769);
        assert!(parse_maps("zz-1 r--p 0 0 0\n", Path::new(P)).is_err());
    }

    /// PostgreSQL 15's postmaster with `shared_buffers = 2GB` started while `shmem_enabled` was
    /// `never`: the buffer pool 110,592 bytes past a 2 MiB boundary, a tiny System V segment,
    /// its dynamic shared memory, and a memfd of another program.
    const POSTGRES_MAPS: &str = "\
55f1c0a00000-55f1c0b2f000 r--p 00000000 fd:01 1835297 /usr/lib/postgresql/15/bin/postgres
55f1c1e3f000-55f1c1e83000 rw-p 00000000 00:00 0 [heap]
7f5a1e41b000-7f5aa2b1b000 rw-s 00000000 00:01 2054 /dev/zero (deleted)
7f5aa2b1b000-7f5aa2b1d000 rw-p 00000000 00:00 0 
7f5aa3c00000-7f5aa3e00000 rw-s 00200000 00:01 2061 /memfd:wayland-shm (deleted)
7f5aa3e00000-7f5aa3e01000 r--p 00000000 00:01 2062 /dev/zero
7f5aa4f00000-7f5aa4f01000 rw-s 00000000 00:01 6 /SYSV0052e2c1 (deleted)
7f5aa4f01000-7f5aa4f02000 rw-s 00000000 00:1a 77 /dev/shm/PostgreSQL.3417189362
";

    #[test]
    fn the_offset_column_and_shared_anonymous_memory_are_read() {
        let m = parse_maps(POSTGRES_MAPS, Path::new(P)).unwrap();
        let pool = &m[2];
        assert_eq!(
            pool.kind,
            MappingKind::SharedAnon {
                object: "/dev/zero".into()
            }
        );
        assert_eq!((pool.offset, pool.inode, pool.len()), (0, 2054, 2119 << 20));
        assert!(pool.is_shared_memory() && !pool.is_private_anon());
        assert_eq!(
            m[4].kind,
            MappingKind::SharedAnon {
                object: "/memfd:wayland-shm".into()
            }
        );
        assert_eq!(m[4].offset, 0x200000);
        // The device itself, mapped privately, is neither.
        assert_eq!(
            m[5].kind,
            MappingKind::File {
                path: "/dev/zero".into()
            }
        );
        assert!(!m[5].is_shared_memory());
        assert!(m[6].is_shared_memory() && m[7].is_shared_memory());
        let e = parse_maps("7f00-7f01 rw-s zz 00:01 6 /x\n", Path::new(P)).unwrap_err();
        assert!(e.to_string().contains("offset \"zz\""), "{e}");
    }

    #[test]
    fn shared_memory_whose_address_and_offset_disagree_has_no_collapsible_huge_page() {
        const HUGE: u64 = 2 << 20;
        let m = parse_maps(POSTGRES_MAPS, Path::new(P)).unwrap();
        let pool = &m[2];
        assert_eq!(pool.huge_misalignment(HUGE), 110_592);
        assert_eq!(pool.collapsible(HUGE), None);
        // The same pool mapped on a boundary (shmem_enabled `advise`): every whole huge page.
        let aligned = MapRange {
            start: 0x7f5a_1e40_0000,
            end: 0x7f5a_1e40_0000 + (2119 << 20),
            ..pool.clone()
        };
        assert_eq!(aligned.huge_misalignment(HUGE), 0);
        assert_eq!(
            aligned.collapsible(HUGE),
            Some((0x7f5a_1e40_0000, 0x7f5a_1e40_0000 + (2118 << 20)))
        );
        // An offset that makes up for the address: 1 MiB into the object at 1 MiB past a
        // boundary.
        let shifted = MapRange {
            start: 0x7f00_0010_0000,
            end: 0x7f00_0090_0000,
            offset: 0x10_0000,
            ..pool.clone()
        };
        assert_eq!(
            shifted.collapsible(HUGE),
            Some((0x7f00_0020_0000, 0x7f00_0080_0000))
        );
        // Private anonymous memory: the address alone decides (the heap here holds none).
        let anon = MapRange {
            start: 0x7f00_0010_0000,
            end: 0x7f00_0090_0000,
            ..m[3].clone()
        };
        assert_eq!(anon.huge_misalignment(HUGE), 0);
        assert_eq!(
            anon.collapsible(HUGE),
            Some((0x7f00_0020_0000, 0x7f00_0080_0000))
        );
        assert_eq!(m[1].collapsible(HUGE), None);
    }

    #[test]
    fn processes_forked_from_one_server_share_its_dev_zero_object_but_not_memfds() {
        let shm = parse_maps_shm(POSTGRES_MAPS, Path::new(P)).unwrap();
        assert_eq!(
            shm,
            vec![
                ShmAttach::Sysv {
                    key: 0x0052e2c1,
                    shmid: 6
                },
                ShmAttach::Posix {
                    path: "/dev/shm/PostgreSQL.3417189362".into()
                },
                ShmAttach::SharedAnon { inode: 2054 },
            ]
        );
        // A private copy-on-write mapping of the object shares nothing.
        let private = "7f00-7f01 rw-p 00000000 00:01 9 /dev/zero (deleted)\n";
        assert!(parse_maps_shm(private, Path::new(P)).unwrap().is_empty());
    }

    #[test]
    fn octal_escapes() {
        assert_eq!(unescape_path("/a\\040b\\012c"), "/a b\nc");
        assert_eq!(unescape_path("/plain\\"), "/plain\\");
        assert_eq!(unescape_path("/x\\09"), "/x\\09");
    }
}
