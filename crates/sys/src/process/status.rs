//! The key/value files of a process: `/proc/<pid>/status` and `/proc/<pid>/io`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::fs::{for_each_kv, kv_numbers, parse_kb};
use crate::{CpuSet, Error, Result};

/// The fields of `/proc/<pid>/status` that perfpilot uses. Sizes are in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcStatus {
    /// `Name`: the command name.
    pub name: String,
    /// `Tgid`: the process id (the thread group's id).
    pub tgid: i32,
    /// `PPid`: the parent's process id.
    pub ppid: i32,
    /// Real user id.
    pub uid: u32,
    /// Real group id.
    pub gid: u32,
    /// `Threads`: threads in the process.
    pub threads: u32,
    /// `VmRSS`: resident memory.
    pub vm_rss: u64,
    /// `VmHWM`: the peak of resident memory.
    pub vm_hwm: u64,
    /// `RssAnon`: resident anonymous memory.
    pub rss_anon: u64,
    /// `RssFile`: resident file-backed memory.
    pub rss_file: u64,
    /// `RssShmem`: resident shared memory (System V, POSIX, shared anonymous).
    pub rss_shmem: u64,
    /// `Cpus_allowed_list`: the CPUs it may run on.
    pub cpus_allowed: Option<CpuSet>,
    /// `Mems_allowed_list`: the NUMA nodes it may allocate from.
    pub mems_allowed: Option<CpuSet>,
    /// Context switches where it gave up the CPU (waiting for something).
    pub voluntary_ctxt_switches: u64,
    /// Context switches where it was preempted.
    pub nonvoluntary_ctxt_switches: u64,
    /// True for kernel threads (no memory map: `VmSize` absent).
    pub kernel_thread: bool,
    /// `THP_enabled`: false once the process called `prctl(PR_SET_THP_DISABLE)` (or inherited
    /// it); `None` on kernels before 5.0, which do not say.
    pub thp_enabled: Option<bool>,
    /// `HugetlbPages`: memory it maps from hugetlbfs (the server's own huge pages), bytes.
    pub hugetlb_pages: u64,
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
                "Gid" => {
                    st.gid = v
                        .split_ascii_whitespace()
                        .next()
                        .and_then(|g| g.parse().ok())
                        .ok_or_else(|| {
                            Error::parse(path, line, format!("Gid: {v:?} is not a gid"))
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
                "THP_enabled" => st.thp_enabled = Some(num()? != 0),
                "HugetlbPages" => st.hugetlb_pages = parse_kb(path, line, k, v)?,
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
    /// Bytes read by system calls.
    pub rchar: u64,
    /// Bytes written by system calls.
    pub wchar: u64,
    /// Read system calls.
    pub syscr: u64,
    /// Write system calls.
    pub syscw: u64,
    /// Bytes fetched from storage.
    pub read_bytes: u64,
    /// Bytes sent to storage (counted when they are dirtied).
    pub write_bytes: u64,
    /// Of `write_bytes`, what was truncated before it reached storage.
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

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/proc/1/x";

    #[test]
    fn status_fields() {
        let text = "Name:\tpostgres\nUmask:\t0077\nState:\tS (sleeping)\nTgid:\t77\nPid:\t77\nPPid:\t1\nUid:\t110\t110\t110\t110\nGid:\t117\t117\t117\t117\nVmSize:\t  222 kB\nVmHWM:\t 2048 kB\nVmRSS:\t 1024 kB\nRssAnon:\t 512 kB\nRssFile:\t 256 kB\nRssShmem:\t 256 kB\nThreads:\t3\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t2\n";
        let st = parse_status(text, Path::new(P)).unwrap();
        assert_eq!(st.name, "postgres");
        assert_eq!(st.tgid, 77);
        assert_eq!((st.uid, st.gid), (110, 117));
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
}
