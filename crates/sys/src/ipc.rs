//! System V shared-memory segments (`/proc/sysvipc/shm`).

use serde::{Deserialize, Serialize};

use crate::{Error, Fs, Result};

/// One System V shared-memory segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmSegment {
    /// The IPC key (`IPC_PRIVATE` is 0).
    pub key: i64,
    /// The segment id.
    pub shmid: u64,
    /// Size in bytes.
    pub size: u64,
    /// The process that created it.
    pub cpid: i32,
    /// The last process that attached or detached it.
    pub lpid: i32,
    /// Processes attached now.
    pub nattch: u64,
    /// The owner's user id.
    pub uid: u32,
    /// Resident bytes.
    pub rss: u64,
    /// Swapped-out bytes.
    pub swap: u64,
}

/// Reads `/proc/sysvipc/shm`; empty when the file is absent (kernel without SysV IPC).
pub fn read_shm_segments(fs: &Fs) -> Result<Vec<ShmSegment>> {
    let rel = "proc/sysvipc/shm";
    let path = fs.path(rel);
    let Some(text) = fs.read_opt(rel)? else {
        return Ok(Vec::new());
    };
    parse_shm_segments(&text, &path)
}

/// Parses `/proc/sysvipc/shm`: a header naming the columns, then one row per segment.
pub fn parse_shm_segments(text: &str, path: &std::path::Path) -> Result<Vec<ShmSegment>> {
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        return Ok(Vec::new());
    };
    let cols: Vec<&str> = header.split_ascii_whitespace().collect();
    let col = |name: &str| -> Result<usize> {
        cols.iter()
            .position(|c| *c == name)
            .ok_or_else(|| Error::parse(path, 1, format!("header has no {name:?} column")))
    };
    let (ck, ci, cs, ccp, clp, cn, cu) = (
        col("key")?,
        col("shmid")?,
        col("size")?,
        col("cpid")?,
        col("lpid")?,
        col("nattch")?,
        col("uid")?,
    );
    let (cr, cw) = (
        cols.iter().position(|c| *c == "rss"),
        cols.iter().position(|c| *c == "swap"),
    );
    let mut out = Vec::new();
    for (i, line) in lines {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let get = |c: usize| -> Result<&str> {
            f.get(c)
                .copied()
                .ok_or_else(|| Error::parse(path, i + 1, format!("only {} columns", f.len())))
        };
        macro_rules! num {
            ($c:expr, $name:expr) => {{
                let v = get($c)?;
                v.parse().map_err(|_| {
                    Error::parse(path, i + 1, format!("{}: {v:?} is not a number", $name))
                })?
            }};
        }
        out.push(ShmSegment {
            key: num!(ck, "key"),
            shmid: num!(ci, "shmid"),
            size: num!(cs, "size"),
            cpid: num!(ccp, "cpid"),
            lpid: num!(clp, "lpid"),
            nattch: num!(cn, "nattch"),
            uid: num!(cu, "uid"),
            rss: match cr {
                Some(c) => num!(c, "rss"),
                None => 0,
            },
            swap: match cw {
                Some(c) => num!(c, "swap"),
                None => 0,
            },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rows_by_header() {
        let text = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n   5432001      32769   600             148111360  1200  1300      6   110   118   110   118 1700000000 0 1700000000 8388608 0\n";
        let s = parse_shm_segments(text, std::path::Path::new("/proc/sysvipc/shm")).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].key, 5432001);
        assert_eq!(s[0].shmid, 32769);
        assert_eq!(s[0].size, 148111360);
        assert_eq!(s[0].nattch, 6);
        assert_eq!(s[0].rss, 8388608);
        let bad = "key shmid size cpid lpid nattch uid\n1 2 x 4 5 6 7\n";
        let e = parse_shm_segments(bad, std::path::Path::new("/p")).unwrap_err();
        assert!(e.to_string().contains("/p:2: size"), "{e}");
    }
}
