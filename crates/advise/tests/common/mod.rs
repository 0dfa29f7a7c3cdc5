//! Fixture trees for the checks, built in a temporary directory: a healthy eight-CPU host by
//! default, changed file by file to plant a condition.

#![allow(dead_code)]

use std::path::Path;

use perfpilot_advise::{Finding, Options, Report, advise};
use perfpilot_sys::Fs;

/// A fixture tree: `root/proc/...` and `root/sys/...`.
pub struct Tree {
    pub dir: tempfile::TempDir,
}

/// One process of a fixture tree.
#[derive(Clone)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub name: &'static str,
    pub cmdline: Vec<&'static str>,
    pub threads: u32,
    /// Threads in state R (the rest sleep).
    pub runnable: u32,
    pub cpus: &'static str,
    pub rss_anon_kb: u64,
    pub rss_shmem_kb: u64,
    pub anon_huge_kb: u64,
    pub shmem_pmd_kb: u64,
    pub maps_lines: usize,
    pub nofile: u64,
    pub fds: usize,
    /// `NAME=value` entries of its environment.
    pub environ: Vec<&'static str>,
    /// Whether its maps show glibc.
    pub libc: bool,
    /// `/proc/PID/cgroup`.
    pub cgroup: &'static str,
    /// `/proc/PID/numa_maps`.
    pub numa_maps: &'static str,
}

impl Proc {
    /// A small, single-threaded, unbound process.
    pub fn small(pid: i32, name: &'static str) -> Proc {
        Proc {
            pid,
            ppid: 1,
            name,
            cmdline: vec![name],
            threads: 1,
            runnable: 0,
            cpus: "0-7",
            rss_anon_kb: 10_240,
            rss_shmem_kb: 0,
            anon_huge_kb: 0,
            shmem_pmd_kb: 0,
            maps_lines: 40,
            nofile: 1024,
            fds: 4,
            environ: vec!["PATH=/usr/bin"],
            libc: true,
            cgroup: "0::/\n",
            numa_maps: "",
        }
    }
}

impl Tree {
    /// A healthy host: CPUs 0-7 online, THP `madvise`, swappiness 60 without swap, one ext4
    /// root file system, no cpufreq (as a VM), one small process.
    pub fn healthy() -> Tree {
        let t = Tree {
            dir: tempfile::tempdir().unwrap(),
        };
        t.file("sys/devices/system/cpu/online", "0-7\n");
        let thp = "sys/kernel/mm/transparent_hugepage";
        t.file(&format!("{thp}/enabled"), "always [madvise] never\n");
        t.file(
            &format!("{thp}/defrag"),
            "always defer defer+madvise [madvise] never\n",
        );
        t.file(
            &format!("{thp}/shmem_enabled"),
            "always within_size advise [never] deny force\n",
        );
        t.file("proc/sys/vm/swappiness", "60\n");
        t.file("proc/sys/vm/max_map_count", "65530\n");
        t.file(
            "proc/meminfo",
            "MemTotal:       16777216 kB\nMemFree:         8000000 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n",
        );
        t.file(
            "proc/self/mounts",
            "/dev/vda1 / ext4 rw,relatime 0 0\nproc /proc proc rw 0 0\n",
        );
        t.process(&Proc::small(100, "sshd"));
        t
    }

    pub fn fs(&self) -> Fs {
        Fs::at(self.dir.path())
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `rel` (creating its directories).
    pub fn file(&self, rel: &str, text: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// Removes `rel` (a file or a directory).
    pub fn remove(&self, rel: &str) {
        let p = self.dir.path().join(rel);
        if p.is_dir() {
            std::fs::remove_dir_all(p).unwrap();
        } else {
            std::fs::remove_file(p).unwrap();
        }
    }

    /// Writes a process's `status`, `cmdline`, `smaps_rollup`, `maps`, `limits`, `fd/` and
    /// `task/*/stat`.
    pub fn process(&self, p: &Proc) {
        let d = format!("proc/{}", p.pid);
        self.file(
            &format!("{d}/status"),
            &format!(
                "Name:\t{}\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{ppid}\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nVmSize:\t{} kB\nVmRSS:\t{} kB\nRssAnon:\t{} kB\nRssFile:\t1000 kB\nRssShmem:\t{} kB\nThreads:\t{}\nCpus_allowed_list:\t{}\nMems_allowed_list:\t0\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t1\n",
                p.name,
                p.rss_anon_kb + p.rss_shmem_kb + 100_000,
                p.rss_anon_kb + p.rss_shmem_kb + 1000,
                p.rss_anon_kb,
                p.rss_shmem_kb,
                p.threads,
                p.cpus,
                pid = p.pid,
                ppid = p.ppid,
            ),
        );
        let mut cmd = p.cmdline.join("\0");
        cmd.push('\0');
        self.file(&format!("{d}/cmdline"), &cmd);
        self.file(
            &format!("{d}/smaps_rollup"),
            &format!(
                "00400000-7fff00000000 ---p 00000000 00:00 0   [rollup]\nRss:  {} kB\nPss:  {} kB\nAnonymous:  {} kB\nAnonHugePages:  {} kB\nShmemPmdMapped:  {} kB\nFilePmdMapped:  0 kB\nShared_Hugetlb:  0 kB\nPrivate_Hugetlb:  0 kB\nSwap:  0 kB\n",
                p.rss_anon_kb + p.rss_shmem_kb,
                p.rss_anon_kb + p.rss_shmem_kb,
                p.rss_anon_kb,
                p.anon_huge_kb,
                p.shmem_pmd_kb
            ),
        );
        let mut maps: String = (0..p.maps_lines)
            .map(|i| {
                let a = 0x1000_0000u64 + i as u64 * 0x2000;
                format!("{a:x}-{:x} rw-p 00000000 00:00 0 \n", a + 0x1000)
            })
            .collect();
        if p.libc {
            maps.push_str("7f0000000000-7f0000028000 r--p 00000000 fd:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6\n");
        }
        self.file(&format!("{d}/maps"), &maps);
        let mut env = p.environ.join("\0");
        env.push('\0');
        self.file(&format!("{d}/environ"), &env);
        self.file(&format!("{d}/cgroup"), p.cgroup);
        self.file(&format!("{d}/numa_maps"), p.numa_maps);
        self.file(
            &format!("{d}/limits"),
            &format!(
                "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            {}                 524288               files     \n",
                p.nofile
            ),
        );
        for fd in 0..p.fds {
            self.file(&format!("{d}/fd/{fd}"), "");
        }
        for i in 0..p.threads {
            let tid = if i == 0 {
                p.pid
            } else {
                p.pid * 1000 + i as i32
            };
            let state = if i < p.runnable { 'R' } else { 'S' };
            self.file(
                &format!("{d}/task/{tid}/stat"),
                &format!(
                    "{tid} ({}) {state} 1 1 1 0 -1 4194304 100 0 0 0 10 5 0 0 20 0 {} 0 1000 100000000 2500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
                    p.name, p.threads
                ),
            );
        }
    }

    /// `advise` over this tree with `opts`.
    pub fn advise(&self, opts: &Options) -> Report {
        advise(&self.fs(), opts)
    }
}

/// The findings of `report` with rule `id`.
pub fn with_id<'a>(report: &'a Report, id: &str) -> Vec<&'a Finding> {
    report.findings.iter().filter(|f| f.id == id).collect()
}

/// The skipped lines of `check`, joined.
pub fn skipped(report: &Report, check: &str) -> String {
    report
        .skipped
        .iter()
        .filter(|s| s.check == check)
        .map(|s| s.reason.clone())
        .collect::<Vec<_>>()
        .join("\n")
}
