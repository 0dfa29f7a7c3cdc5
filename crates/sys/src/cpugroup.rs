//! CPU control groups for processes perfpilot starts itself, on cgroup v1 (`cpu` and
//! `cpuacct` hierarchies) and v2 (`cpu.max`, `cpu.stat`): a group per tier with an optional
//! CPU quota, its processes' CPU time, and removal when the guard drops (also on panic).
//! Groups are made where this process may make them ([`cgroup::place`]: the v1 hierarchy
//! roots, a delegated v2 subtree such as a `systemd-run --scope -p Delegate=yes`, or the v2
//! root), with a `perfpilot-` name, so a group a killed run left behind is found by that
//! prefix and removed by [`remove_stale`]. Where no group may be made, the error names the
//! path and the fix.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cgroup::place::{self, Parent, SELF_LEAF};
use crate::cgroup::{Dir, Hierarchies, Membership, Version, read};
use crate::error::{Error, Result};
use crate::fs::Fs;

/// The prefix of every group perfpilot creates.
pub const PREFIX: &str = "perfpilot-";

/// A CPU control group; dropping it removes the group (its processes must have exited).
#[derive(Debug)]
pub struct CpuGroup {
    fs: Fs,
    name: String,
    /// The group in the `cpu` hierarchy.
    cpu: Dir,
    /// The group in the `cpuacct` hierarchy (the same as `cpu` on v2 or when co-mounted).
    acct: Dir,
    quota_cores: Option<f64>,
    /// The parent whose `cpu` controller this group's creation enabled: given back when the
    /// last `perfpilot-` group under it goes.
    enabled_cpu: Option<Dir>,
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The `cfs_period_us` / `cpu.max` period and quota (µs) for `cores`: the shortest period
/// that keeps the quota at least the kernel's 1 ms minimum, and at most 5 ms, so that a capped
/// tier runs as a slower CPU rather than in 100 ms bursts.
fn period_and_quota(cores: f64) -> (u64, u64) {
    let period = (1000.0 / cores).ceil().clamp(1000.0, 5000.0) as u64;
    (period, ((cores * period as f64).round() as u64).max(1000))
}

impl CpuGroup {
    /// Creates group `perfpilot-<name>` with a quota of `quota_cores` cores (none: only
    /// accounting), where this process may create groups ([`place::parent`]).
    pub fn create(fs: &Fs, name: &str, quota_cores: Option<f64>) -> Result<CpuGroup> {
        let full = format!("{PREFIX}{name}");
        crate::cgroup::check_name(&full)?;
        if let Some(q) = quota_cores
            && !(q.is_finite() && q > 0.0)
        {
            return Err(Error::parse(
                name,
                0,
                format!("a CPU quota of {q} cores; it must be finite and > 0"),
            ));
        }
        let me = Membership::of_self(fs)?;
        let parent = place::parent(fs, &me)?;
        if quota_cores.is_some() && !parent.quota {
            return Err(Error::Io {
                path: fs.path(&parent.cpu.rel()),
                source: std::io::Error::other(
                    "the cpu controller is not available to this group's children (cgroup.controllers lacks cpu): no quota can be set; delegate the cpu controller (`systemd-run --scope -p Delegate=yes`) or leave cpu_quota out",
                ),
            });
        }
        let group = CpuGroup::make(fs, &parent, &full, quota_cores)?;
        Ok(group)
    }

    fn make(fs: &Fs, parent: &Parent, full: &str, quota_cores: Option<f64>) -> Result<CpuGroup> {
        let cpu = parent.cpu.child(full);
        let acct = parent.acct.child(full);
        // One directory when `cpu` and `cpuacct` are the same hierarchy (v2, or co-mounted).
        let same = parent.cpu == parent.acct
            || std::fs::canonicalize(fs.path(&parent.cpu.rel())).ok()
                == std::fs::canonicalize(fs.path(&parent.acct.rel())).ok();
        let mut dirs = vec![cpu.clone()];
        if !same {
            dirs.push(acct.clone());
        }
        for d in &dirs {
            let p = fs.path(&d.rel());
            match std::fs::create_dir(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(&p, e)),
            }
        }
        let group = CpuGroup {
            fs: fs.clone(),
            name: full.to_string(),
            acct: if same { cpu.clone() } else { acct },
            cpu,
            quota_cores,
            enabled_cpu: parent.enabled_cpu.then(|| parent.cpu.clone()),
        };
        match group.cpu.version {
            Version::V2 => {
                let value = match quota_cores {
                    Some(q) => {
                        let (period, quota) = period_and_quota(q);
                        format!("{quota} {period}")
                    }
                    None => "max 100000".to_string(),
                };
                if parent.quota {
                    group.write(&group.cpu.file("cpu.max"), &value)?;
                }
            }
            Version::V1 => {
                let (period, quota) = match quota_cores {
                    Some(q) => {
                        let (p, q) = period_and_quota(q);
                        (p, q.to_string())
                    }
                    None => (100_000, "-1".to_string()),
                };
                // Shrink the quota before the period and grow it after, so the pair stays valid.
                group.write(&group.cpu.file("cpu.cfs_quota_us"), "-1")?;
                group.write(&group.cpu.file("cpu.cfs_period_us"), &period.to_string())?;
                group.write(&group.cpu.file("cpu.cfs_quota_us"), &quota)?;
            }
        }
        Ok(group)
    }

    fn write(&self, rel: &str, value: &str) -> Result<()> {
        let p = self.fs.path(rel);
        std::fs::write(&p, value).map_err(|e| io(&p, e))
    }

    fn dirs(&self) -> Vec<&Dir> {
        if self.acct == self.cpu {
            vec![&self.cpu]
        } else {
            vec![&self.cpu, &self.acct]
        }
    }

    /// The group's name (`perfpilot-…`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which cgroup version the group is in.
    pub fn version(&self) -> Version {
        self.cpu.version
    }

    /// The group's directory in the `cpu` hierarchy (for messages).
    pub fn path(&self) -> PathBuf {
        self.fs.path(&self.cpu.rel())
    }

    /// The quota in cores, if one was set.
    pub fn quota_cores(&self) -> Option<f64> {
        self.quota_cores
    }

    /// Moves process `pid` (all its threads; its future children follow) into the group.
    pub fn add(&self, pid: u32) -> Result<()> {
        for d in self.dirs() {
            self.write(&d.file("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Makes `cmd`'s process join the group between fork and exec, so that every process it
    /// forks (PostgreSQL's backends, nginx's workers) is in the group from its start. With
    /// `user` (uid, gid), the process then drops to that user: it joins while it still may
    /// (cgroup v2 lets only a writer of the common ancestor's `cgroup.procs` move a process),
    /// so do not also set `Command::uid`, which would switch first.
    pub fn join_on_spawn(
        &self,
        cmd: &mut std::process::Command,
        user: Option<(u32, u32)>,
    ) -> Result<()> {
        use std::os::unix::process::CommandExt;
        let paths: Vec<std::ffi::CString> = self
            .dirs()
            .iter()
            .map(|d| {
                let p = self.fs.path(&d.file("cgroup.procs"));
                std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
                    .map_err(|_| Error::parse(&p, 0, "path holds a NUL byte"))
            })
            .collect::<Result<_>>()?;
        // SAFETY: the closure runs in the child between fork and exec; it only calls
        // async-signal-safe functions (getpid, open, write, close, setgroups, setgid, setuid)
        // on memory prepared before the fork, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let mut buf = [0u8; 20];
                let mut n = libc::getpid() as u64;
                let mut i = buf.len();
                loop {
                    i -= 1;
                    buf[i] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                for p in &paths {
                    let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let w = libc::write(fd, buf[i..].as_ptr().cast(), buf.len() - i);
                    libc::close(fd);
                    if w < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some((uid, gid)) = user
                    && (libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0)
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// CPU time used by the group's processes since it was created.
    pub fn usage(&self) -> Result<Duration> {
        Ok(read::cpu_stat(&self.fs, &self.cpu, &self.acct)?.usage)
    }

    /// How many periods the quota throttled the group (`cpu.stat` `nr_throttled`).
    pub fn throttled_periods(&self) -> Option<u64> {
        read::cpu_stat(&self.fs, &self.cpu, &self.acct)
            .ok()
            .map(|s| s.throttled_periods)
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        for d in self.dirs() {
            let p = self.fs.path(&d.rel());
            // A process that just exited may take a moment to leave the group.
            for _ in 0..50 {
                match std::fs::remove_dir(&p) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    _ => break,
                }
            }
        }
        if let Some(parent) = &self.enabled_cpu {
            let dir = self.fs.path(&parent.rel());
            let others = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != SELF_LEAF);
            if !others {
                let _ = std::fs::write(dir.join("cgroup.subtree_control"), "-cpu");
            }
        }
    }
}

/// The directories a `perfpilot-` group of this process could have been made in, without
/// preparing any (no move, no controller enabled).
fn parents(fs: &Fs) -> Vec<Dir> {
    let h = Hierarchies::detect(fs);
    let mut out = Vec::new();
    for c in ["cpu", "cpuacct"] {
        if let Some(root) = h.v1.get(c) {
            out.push(Dir::new(Version::V1, root, "/"));
        }
    }
    if let Some(root) = &h.v2 {
        out.push(Dir::new(Version::V2, root, "/"));
        if let Some(own) = Membership::of_self(fs).ok().and_then(|m| m.unified) {
            let d = Dir::new(Version::V2, root, &own);
            let d = if d.path.ends_with(&format!("/{SELF_LEAF}")) {
                d.parent().unwrap_or(d)
            } else {
                d
            };
            if !d.is_root() {
                out.push(d);
            }
        }
    }
    out.dedup();
    out
}

/// Removes empty groups named `perfpilot-<tag>…` that a killed run left behind; returns their
/// paths. A group that still holds processes stays (and is not listed).
pub fn remove_stale(fs: &Fs, tag: &str) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for parent in parents(fs) {
        let root = fs.path(&parent.rel());
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&format!("{PREFIX}{tag}")) && std::fs::remove_dir(e.path()).is_ok()
            {
                removed.push(e.path());
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests;
