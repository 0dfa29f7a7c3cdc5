//! Per-process and per-thread readings from `/proc/<pid>/…`.
//!
//! [`ProcReader`] keeps its buffers between calls, so a sampler reading tens of thousands of
//! `stat` files allocates little. A process that exits mid-read gives [`Error::Vanished`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fs::{for_each_kv, kv_numbers, list_dir, parse_kb, read_pid_file, read_single};
use crate::{CpuSet, Error, Fs, Result};

/// The fields of `/proc/<pid>/stat` (or `/proc/<pid>/task/<tid>/stat`) that perfpilot uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStat {
    pub pid: i32,
    pub comm: String,
    pub state: char,
    pub ppid: i32,
    pub minflt: u64,
    pub majflt: u64,
    /// User and system CPU time in clock ticks (for a process: all its threads, live and dead).
    pub utime: u64,
    pub stime: u64,
    pub nice: i64,
    pub num_threads: u32,
    /// Start time in clock ticks after boot.
    pub starttime: u64,
    pub vsize: u64,
    pub rss_pages: u64,
    /// The CPU it last ran on.
    pub processor: Option<u32>,
    /// Ticks spent waiting for block I/O (delay accounting).
    pub blkio_ticks: u64,
}

/// Parses the text of a `stat` file. The command name may contain spaces and parentheses: it is
/// everything between the first `(` and the last `)`.
pub fn parse_stat(text: &[u8], path: &Path) -> Result<TaskStat> {
    let bad = |msg: String| Error::parse(path, 1, msg);
    let open = text
        .iter()
        .position(|&b| b == b'(')
        .ok_or_else(|| bad("no '(' before the command name".into()))?;
    let close = text
        .iter()
        .rposition(|&b| b == b')')
        .ok_or_else(|| bad("no ')' after the command name".into()))?;
    if close < open {
        return Err(bad("')' before '('".into()));
    }
    let pid: i32 = std::str::from_utf8(&text[..open])
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| bad("the pid is not a number".into()))?;
    let comm = String::from_utf8_lossy(&text[open + 1..close]).into_owned();
    let rest =
        std::str::from_utf8(&text[close + 1..]).map_err(|_| bad("fields are not UTF-8".into()))?;
    let mut st = TaskStat {
        pid,
        comm,
        ..TaskStat::default()
    };
    // Field numbers as in proc(5); the iterator starts at field 3 (state).
    let mut n = 0;
    for (i, tok) in rest.split_ascii_whitespace().enumerate() {
        let field = i + 3;
        n = field;
        let num = || -> Result<u64> {
            tok.parse()
                .map_err(|_| bad(format!("field {field}: {tok:?} is not a number")))
        };
        match field {
            3 => st.state = tok.chars().next().unwrap_or('?'),
            4 => {
                st.ppid = tok
                    .parse()
                    .map_err(|_| bad(format!("field 4: {tok:?} is not a pid")))?
            }
            10 => st.minflt = num()?,
            12 => st.majflt = num()?,
            14 => st.utime = num()?,
            15 => st.stime = num()?,
            19 => {
                st.nice = tok
                    .parse()
                    .map_err(|_| bad(format!("field 19: {tok:?} is not a number")))?
            }
            20 => st.num_threads = num()? as u32,
            22 => st.starttime = num()?,
            23 => st.vsize = num()?,
            24 => st.rss_pages = num()?,
            39 => st.processor = Some(num()? as u32),
            42 => {
                st.blkio_ticks = num()?;
                break;
            }
            _ => {}
        }
    }
    if n < 24 {
        return Err(bad(format!("only {n} fields; expected at least 24")));
    }
    Ok(st)
}

/// The fields of `/proc/<pid>/status` that perfpilot uses. Sizes are in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcStatus {
    pub name: String,
    pub tgid: i32,
    pub ppid: i32,
    /// Real user id.
    pub uid: u32,
    pub threads: u32,
    pub vm_rss: u64,
    pub vm_hwm: u64,
    pub rss_anon: u64,
    pub rss_file: u64,
    pub rss_shmem: u64,
    pub cpus_allowed: Option<CpuSet>,
    pub mems_allowed: Option<CpuSet>,
    pub voluntary_ctxt_switches: u64,
    pub nonvoluntary_ctxt_switches: u64,
    /// True for kernel threads (no memory map: `VmSize` absent).
    pub kernel_thread: bool,
}

/// Parses the text of a `status` file.
pub fn parse_status(text: &str, path: &Path) -> Result<ProcStatus> {
    let mut st = ProcStatus {
        kernel_thread: true,
        ..ProcStatus::default()
    };
    let mut err: Option<Error> = None;
    for_each_kv(text, |line, k, v| {
        let r: Result<()> = (|| {
            let num = || -> Result<u64> {
                v.parse()
                    .map_err(|_| Error::parse(path, line, format!("{k}: {v:?} is not a number")))
            };
            let list = || -> Result<Option<CpuSet>> {
                CpuSet::parse(v)
                    .map(Some)
                    .map_err(|e| Error::parse(path, line, format!("{k}: {e}")))
            };
            match k {
                "Name" => st.name = v.to_string(),
                "Tgid" => st.tgid = num()? as i32,
                "PPid" => st.ppid = num()? as i32,
                "Uid" => {
                    st.uid = v
                        .split_ascii_whitespace()
                        .next()
                        .and_then(|u| u.parse().ok())
                        .ok_or_else(|| {
                            Error::parse(path, line, format!("Uid: {v:?} is not a uid"))
                        })?
                }
                "Threads" => st.threads = num()? as u32,
                "VmSize" => st.kernel_thread = false,
                "VmRSS" => st.vm_rss = parse_kb(path, line, k, v)?,
                "VmHWM" => st.vm_hwm = parse_kb(path, line, k, v)?,
                "RssAnon" => st.rss_anon = parse_kb(path, line, k, v)?,
                "RssFile" => st.rss_file = parse_kb(path, line, k, v)?,
                "RssShmem" => st.rss_shmem = parse_kb(path, line, k, v)?,
                "Cpus_allowed_list" => st.cpus_allowed = list()?,
                "Mems_allowed_list" => st.mems_allowed = list()?,
                "voluntary_ctxt_switches" => st.voluntary_ctxt_switches = num()?,
                "nonvoluntary_ctxt_switches" => st.nonvoluntary_ctxt_switches = num()?,
                _ => {}
            }
            Ok(())
        })();
        if let Err(e) = r {
            err.get_or_insert(e);
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(st),
    }
}

/// `/proc/<pid>/io`: bytes and calls; `rchar`/`wchar` count all reads/writes (also sockets and
/// pipes), `read_bytes`/`write_bytes` only what reached storage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcIo {
    pub rchar: u64,
    pub wchar: u64,
    pub syscr: u64,
    pub syscw: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub cancelled_write_bytes: u64,
}

/// Parses the text of an `io` file.
pub fn parse_io(text: &str, path: &Path) -> Result<ProcIo> {
    let [
        rchar,
        wchar,
        syscr,
        syscw,
        read_bytes,
        write_bytes,
        cancelled_write_bytes,
    ] = kv_numbers(
        text,
        path,
        [
            "rchar",
            "wchar",
            "syscr",
            "syscw",
            "read_bytes",
            "write_bytes",
            "cancelled_write_bytes",
        ],
    )?;
    Ok(ProcIo {
        rchar,
        wchar,
        syscr,
        syscw,
        read_bytes,
        write_bytes,
        cancelled_write_bytes,
    })
}

/// `/proc/<pid>/smaps_rollup`, in bytes: resident memory and its huge-page coverage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmapsRollup {
    pub rss: u64,
    pub pss: u64,
    pub anonymous: u64,
    /// Anonymous memory mapped by transparent huge pages.
    pub anon_huge: u64,
    /// Shared memory (tmpfs/shm) mapped by PMD-sized pages.
    pub shmem_pmd_mapped: u64,
    pub file_pmd_mapped: u64,
    pub shared_hugetlb: u64,
    pub private_hugetlb: u64,
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

/// What a memory range maps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingKind {
    /// Private anonymous memory (including the heap and stacks).
    Anon,
    /// A System V shared-memory segment, by its key.
    SysvShm { key: u32 },
    /// A POSIX shared-memory object or other tmpfs file under `/dev/shm`.
    PosixShm { path: String },
    /// Any other file.
    File { path: String },
}

/// One line of `/proc/<pid>/numa_maps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaRange {
    pub start: u64,
    /// The memory policy (`default`, `bind:0`, `interleave:0-1`, `prefer:1`, …).
    pub policy: String,
    pub kind: MappingKind,
    /// hugetlbfs mapping.
    pub hugetlb: bool,
    /// Page size of the range in bytes (`kernelpagesize_kB`).
    pub page_size: u64,
    /// Resident pages per node.
    pub pages: BTreeMap<u32, u64>,
    pub anon_pages: u64,
    pub dirty_pages: u64,
}

impl NumaRange {
    /// Resident bytes on each node.
    pub fn bytes_per_node(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.pages.iter().map(|(&n, &p)| (n, p * self.page_size))
    }
}

/// Undoes the octal escapes (`\040`) `seq_file_path` writes into paths.
fn unescape_path(s: &str) -> String {
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
                "kernelpagesize_kB" => r.page_size = num()? * 1024,
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

/// One line of `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapRange {
    pub start: u64,
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

/// Parses the text of `/proc/<pid>/maps`.
pub fn parse_maps(text: &str, path: &Path) -> Result<Vec<MapRange>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut rest = line;
        let mut cols = [""; 5];
        for col in cols.iter_mut() {
            rest = rest.trim_start();
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            *col = &rest[..end];
            rest = &rest[end..];
        }
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
    Sysv { key: u32, shmid: u64 },
    /// A POSIX shared-memory object.
    Posix { path: String },
}

/// Parses the text of `/proc/<pid>/maps`, returning the shared-memory segments it maps (each
/// once).
pub fn parse_maps_shm(text: &str, path: &Path) -> Result<Vec<ShmAttach>> {
    let mut out = std::collections::BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        // address perms offset dev inode pathname (the path may contain spaces)
        let mut rest = line;
        let mut cols = [""; 5];
        for col in cols.iter_mut() {
            rest = rest.trim_start();
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            *col = &rest[..end];
            rest = &rest[end..];
        }
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

/// Reads `/proc` files with reused buffers.
#[derive(Debug)]
pub struct ProcReader {
    fs: Fs,
    proc_root: String,
    path: String,
    buf: Vec<u8>,
}

impl ProcReader {
    /// A reader of `fs`'s `/proc`.
    pub fn new(fs: &Fs) -> Self {
        ProcReader {
            proc_root: fs.path("proc").to_string_lossy().into_owned(),
            fs: fs.clone(),
            path: String::with_capacity(64),
            buf: Vec::with_capacity(4096),
        }
    }

    /// The filesystem this reader reads.
    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    fn set_path(&mut self, pid: i32, tid: Option<i32>, file: &str) {
        self.path.clear();
        let _ = match tid {
            Some(t) => write!(self.path, "{}/{pid}/task/{t}/{file}", self.proc_root),
            None => write!(self.path, "{}/{pid}/{file}", self.proc_root),
        };
    }

    fn load(&mut self, pid: i32, tid: Option<i32>, file: &str) -> Result<&Path> {
        self.set_path(pid, tid, file);
        read_pid_file(Path::new(&self.path), &mut self.buf)?;
        Ok(Path::new(&self.path))
    }

    fn load_str(&mut self, pid: i32, tid: Option<i32>, file: &str) -> Result<(&str, &Path)> {
        self.load(pid, tid, file)?;
        self.text()
    }

    /// Loads a small single-record file (`stat`, `status`, `io`) with one `read`.
    fn load_single(&mut self, pid: i32, tid: Option<i32>, file: &str) -> Result<&Path> {
        self.set_path(pid, tid, file);
        read_single(None, Path::new(&self.path), "", &mut self.buf)?;
        Ok(Path::new(&self.path))
    }

    fn text(&self) -> Result<(&str, &Path)> {
        let path = Path::new(&self.path);
        let text = std::str::from_utf8(&self.buf)
            .map_err(|_| Error::parse(path, 1, "file is not UTF-8"))?;
        Ok((text, path))
    }

    /// Reads the `stat` of every thread of `pid`, handing each result to `each` (a thread that
    /// exits meanwhile gives a [`Error::Vanished`] there). Fails only when the process is gone
    /// or its task directory cannot be listed. Files are opened relative to the task
    /// directory, which saves the path walk per thread.
    pub fn task_stats(&mut self, pid: i32, mut each: impl FnMut(Result<TaskStat>)) -> Result<()> {
        self.set_path(pid, None, "task");
        let dir_path = PathBuf::from(&self.path);
        let dir = std::fs::File::open(&dir_path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                Error::Vanished {
                    path: dir_path.clone(),
                }
            } else {
                Error::Io {
                    path: dir_path.clone(),
                    source,
                }
            }
        })?;
        let mut tids = self.tids(pid)?;
        tids.sort_unstable();
        let mut rel = String::with_capacity(24);
        for tid in tids {
            rel.clear();
            let _ = write!(rel, "{tid}/stat");
            let r = read_single(Some(&dir), &dir_path, &rel, &mut self.buf)
                .and_then(|()| parse_stat(&self.buf, &dir_path.join(&rel)));
            each(r);
        }
        Ok(())
    }

    /// The process ids in `/proc`, sorted.
    pub fn pids(&self) -> Result<Vec<i32>> {
        let mut v: Vec<i32> = list_dir(Path::new(&self.proc_root))?
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    /// The thread ids of a process, sorted.
    pub fn tids(&mut self, pid: i32) -> Result<Vec<i32>> {
        self.set_path(pid, None, "task");
        let path = PathBuf::from(&self.path);
        let names = list_dir(&path).map_err(|e| match e {
            Error::Io { source, path } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::Vanished { path }
            }
            e => e,
        })?;
        let mut v: Vec<i32> = names.iter().filter_map(|n| n.parse().ok()).collect();
        v.sort_unstable();
        Ok(v)
    }

    /// `/proc/<pid>/stat`.
    pub fn stat(&mut self, pid: i32) -> Result<TaskStat> {
        self.load_single(pid, None, "stat")?;
        parse_stat(&self.buf, Path::new(&self.path))
    }

    /// `/proc/<pid>/task/<tid>/stat`.
    pub fn task_stat(&mut self, pid: i32, tid: i32) -> Result<TaskStat> {
        self.load_single(pid, Some(tid), "stat")?;
        parse_stat(&self.buf, Path::new(&self.path))
    }

    /// `/proc/<pid>/status`.
    pub fn status(&mut self, pid: i32) -> Result<ProcStatus> {
        self.load_single(pid, None, "status")?;
        let (text, path) = self.text()?;
        parse_status(text, path)
    }

    /// `/proc/<pid>/task/<tid>/status`.
    pub fn task_status(&mut self, pid: i32, tid: i32) -> Result<ProcStatus> {
        let (text, path) = self.load_str(pid, Some(tid), "status")?;
        parse_status(text, path)
    }

    /// `/proc/<pid>/cmdline` split at NULs (empty for kernel threads).
    pub fn cmdline(&mut self, pid: i32) -> Result<Vec<String>> {
        self.load(pid, None, "cmdline")?;
        Ok(self
            .buf
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect())
    }

    /// The value of one variable of `/proc/<pid>/environ`.
    pub fn environ_var(&mut self, pid: i32, name: &str) -> Result<Option<String>> {
        self.load(pid, None, "environ")?;
        let prefix = format!("{name}=");
        Ok(self
            .buf
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned()))
    }

    /// The executable (`/proc/<pid>/exe`); `None` for kernel threads.
    pub fn exe(&mut self, pid: i32) -> Result<Option<PathBuf>> {
        self.set_path(pid, None, "exe");
        match std::fs::read_link(&self.path) {
            Ok(p) => Ok(Some(p)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A kernel thread has an exe link that cannot be read; a dead process has none.
                let dir = Path::new(&self.path).parent().map(Path::to_path_buf);
                match dir {
                    Some(d) if d.exists() => Ok(None),
                    _ => Err(Error::Vanished {
                        path: PathBuf::from(&self.path),
                    }),
                }
            }
            // A captured tree stores `exe` as a plain file holding the target.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let (text, _) = self.load_str(pid, None, "exe")?;
                Ok(Some(PathBuf::from(text.trim())))
            }
            Err(source) => Err(Error::Io {
                path: PathBuf::from(&self.path),
                source,
            }),
        }
    }

    /// `/proc/<pid>/io` (root, or the process's owner, only).
    pub fn io(&mut self, pid: i32) -> Result<ProcIo> {
        self.load_single(pid, None, "io")?;
        let (text, path) = self.text()?;
        parse_io(text, path)
    }

    /// `/proc/<pid>/smaps_rollup` (walks the page tables: an expensive reading).
    pub fn smaps_rollup(&mut self, pid: i32) -> Result<SmapsRollup> {
        let (text, path) = self.load_str(pid, None, "smaps_rollup")?;
        parse_smaps_rollup(text, path)
    }

    /// `/proc/<pid>/numa_maps` (walks the page tables: an expensive reading).
    pub fn numa_maps(&mut self, pid: i32) -> Result<Vec<NumaRange>> {
        let (text, path) = self.load_str(pid, None, "numa_maps")?;
        parse_numa_maps(text, path)
    }

    /// `/proc/<pid>/maps`.
    pub fn maps(&mut self, pid: i32) -> Result<Vec<MapRange>> {
        let (text, path) = self.load_str(pid, None, "maps")?;
        parse_maps(text, path)
    }

    /// The shared-memory segments `/proc/<pid>/maps` shows.
    pub fn shm_attachments(&mut self, pid: i32) -> Result<Vec<ShmAttach>> {
        let (text, path) = self.load_str(pid, None, "maps")?;
        parse_maps_shm(text, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/proc/1/x";

    #[test]
    fn stat_with_spaces_and_parens_in_comm() {
        let line = b"4626 (my (odd) cmd) R 4622 4622 1409 0 -1 4194304 99 0 7 0 150 25 0 0 20 -5 4 0 43929 3133440 359 18446744073709551615 1 2 3 0 0 0 0 0 0 0 0 0 17 1 0 0 12 0 0 9 9 9";
        let st = parse_stat(line, Path::new(P)).unwrap();
        assert_eq!(st.pid, 4626);
        assert_eq!(st.comm, "my (odd) cmd");
        assert_eq!(st.state, 'R');
        assert_eq!(st.ppid, 4622);
        assert_eq!(st.minflt, 99);
        assert_eq!(st.majflt, 7);
        assert_eq!(st.utime, 150);
        assert_eq!(st.stime, 25);
        assert_eq!(st.nice, -5);
        assert_eq!(st.num_threads, 4);
        assert_eq!(st.starttime, 43929);
        assert_eq!(st.rss_pages, 359);
        assert_eq!(st.processor, Some(1));
        assert_eq!(st.blkio_ticks, 12);
    }

    #[test]
    fn truncated_stat_is_a_parse_error_with_path() {
        let e = parse_stat(b"12 (x) S 1 2 3", Path::new(P)).unwrap_err();
        assert!(matches!(e, Error::Parse { .. }));
        assert!(e.to_string().starts_with("/proc/1/x:1:"), "{e}");
        let e = parse_stat(
            b"12 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 zz",
            Path::new(P),
        )
        .unwrap_err();
        assert!(e.to_string().contains("field 24"), "{e}");
    }

    #[test]
    fn status_fields() {
        let text = "Name:\tpostgres\nUmask:\t0077\nState:\tS (sleeping)\nTgid:\t77\nPid:\t77\nPPid:\t1\nUid:\t110\t110\t110\t110\nVmSize:\t  222 kB\nVmHWM:\t 2048 kB\nVmRSS:\t 1024 kB\nRssAnon:\t 512 kB\nRssFile:\t 256 kB\nRssShmem:\t 256 kB\nThreads:\t3\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t2\n";
        let st = parse_status(text, Path::new(P)).unwrap();
        assert_eq!(st.name, "postgres");
        assert_eq!(st.tgid, 77);
        assert_eq!(st.uid, 110);
        assert_eq!(st.threads, 3);
        assert_eq!(st.vm_rss, 1024 * 1024);
        assert_eq!(st.rss_shmem, 256 * 1024);
        assert_eq!(
            st.cpus_allowed.as_ref().map(|c| c.to_string()),
            Some("0-1".into())
        );
        assert_eq!(st.voluntary_ctxt_switches, 10);
        assert!(!st.kernel_thread);
        let k = parse_status("Name:\tkthreadd\nThreads:\t1\n", Path::new(P)).unwrap();
        assert!(k.kernel_thread);
        let e = parse_status("Name:\tx\nThreads:\tmany\n", Path::new(P)).unwrap_err();
        assert!(e.to_string().starts_with("/proc/1/x:2:"), "{e}");
    }

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

    #[test]
    fn octal_escapes() {
        assert_eq!(unescape_path("/a\\040b\\012c"), "/a b\nc");
        assert_eq!(unescape_path("/plain\\"), "/plain\\");
        assert_eq!(unescape_path("/x\\09"), "/x\\09");
    }
}
