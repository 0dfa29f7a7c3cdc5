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

/// Classifies a mapped path (`/SYSV0000abcd (deleted)`, `/dev/shm/x`, a file).
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

    #[test]
    fn octal_escapes() {
        assert_eq!(unescape_path("/a\\040b\\012c"), "/a b\nc");
        assert_eq!(unescape_path("/plain\\"), "/plain\\");
        assert_eq!(unescape_path("/x\\09"), "/x\\09");
    }
}
