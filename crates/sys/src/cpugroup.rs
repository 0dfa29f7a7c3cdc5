//! CPU control groups (cgroup v1 `cpu` and `cpuacct` hierarchies) for processes perfpilot
//! starts itself: a group per tier with an optional CPU quota, its processes' CPU time, and
//! removal when the guard drops (also on panic). Nothing outside the group changes: groups
//! are created under the hierarchy roots with a `perfpilot-` name, so a group a killed run
//! left behind is found by that prefix and removed by [`remove_stale`].
//!
//! cgroup v2 (`cpu.max`) is refused with a clear error: no machine here runs it to test on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fs::Fs;

/// The prefix of every group perfpilot creates.
pub const PREFIX: &str = "perfpilot-";

/// A CPU control group; dropping it removes the group (its processes must have exited).
#[derive(Debug)]
pub struct CpuGroup {
    name: String,
    /// The group's directory in each hierarchy (one when `cpu` and `cpuacct` share a mount).
    dirs: Vec<PathBuf>,
    usage: PathBuf,
    quota_cores: Option<f64>,
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The `cpu` and `cpuacct` hierarchy roots of `fs` (the same path when co-mounted).
fn roots(fs: &Fs) -> Result<(PathBuf, PathBuf)> {
    let cpu = fs.path("sys/fs/cgroup/cpu");
    let acct = fs.path("sys/fs/cgroup/cpuacct");
    if !cpu.join("cpu.cfs_quota_us").exists() {
        let v2 = fs.path("sys/fs/cgroup/cgroup.controllers");
        let why = if v2.exists() {
            "this machine runs cgroup v2, whose cpu.max perfpilot does not set yet; bind the tier with `cpus` (taskset) instead"
        } else {
            "the cgroup v1 cpu controller is not mounted at /sys/fs/cgroup/cpu"
        };
        return Err(Error::parse(cpu.join("cpu.cfs_quota_us"), 0, why));
    }
    if !acct.join("cpuacct.usage").exists() {
        return Err(Error::parse(
            acct.join("cpuacct.usage"),
            0,
            "the cgroup v1 cpuacct controller is not mounted at /sys/fs/cgroup/cpuacct",
        ));
    }
    Ok((cpu, acct))
}

impl CpuGroup {
    /// Creates group `perfpilot-<name>` with a quota of `quota_cores` cores (none: only
    /// accounting). The quota's period is the shortest that keeps the quota at least the
    /// kernel's 1 ms minimum, and at most 5 ms, so that a capped tier runs as a slower CPU
    /// rather than in 100 ms bursts.
    pub fn create(fs: &Fs, name: &str, quota_cores: Option<f64>) -> Result<CpuGroup> {
        let (cpu, acct) = roots(fs)?;
        let full = format!("{PREFIX}{name}");
        let mut dirs = vec![cpu.join(&full)];
        let same = std::fs::canonicalize(&cpu).ok() == std::fs::canonicalize(&acct).ok();
        if !same {
            dirs.push(acct.join(&full));
        }
        for d in &dirs {
            match std::fs::create_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(d, e)),
            }
        }
        let group = CpuGroup {
            name: full,
            usage: dirs[dirs.len() - 1].join("cpuacct.usage"),
            dirs,
            quota_cores,
        };
        let (period, quota) = match quota_cores {
            Some(q) if q.is_finite() && q > 0.0 => {
                let period = (1000.0 / q).ceil().clamp(1000.0, 5000.0) as u64;
                (
                    period,
                    ((q * period as f64).round() as u64).max(1000).to_string(),
                )
            }
            Some(q) => {
                return Err(Error::parse(
                    group.dirs[0].join("cpu.cfs_quota_us"),
                    0,
                    format!("a CPU quota of {q} cores; it must be finite and > 0"),
                ));
            }
            None => (100_000, "-1".to_string()),
        };
        // Shrink the quota before the period and grow it after, so the pair stays valid.
        let dir = &group.dirs[0];
        write(&dir.join("cpu.cfs_quota_us"), "-1")?;
        write(&dir.join("cpu.cfs_period_us"), &period.to_string())?;
        write(&dir.join("cpu.cfs_quota_us"), &quota)?;
        Ok(group)
    }

    /// The group's name (`perfpilot-…`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The quota in cores, if one was set.
    pub fn quota_cores(&self) -> Option<f64> {
        self.quota_cores
    }

    /// Moves process `pid` (all its threads; its future children follow) into the group.
    pub fn add(&self, pid: u32) -> Result<()> {
        for d in &self.dirs {
            write(&d.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Lets processes of user `uid` (group `gid`) move themselves into the group: the
    /// `cgroup.procs` files become theirs. [`CpuGroup::join_on_spawn`] runs after a command's
    /// user switch, so a server started as another user (PostgreSQL) needs this first.
    pub fn delegate(&self, uid: u32, gid: u32) -> Result<()> {
        for d in &self.dirs {
            let p = d.join("cgroup.procs");
            std::os::unix::fs::chown(&p, Some(uid), Some(gid)).map_err(|e| io(&p, e))?;
        }
        Ok(())
    }

    /// Makes `cmd`'s process join the group between fork and exec, so that every process it
    /// forks (PostgreSQL's backends, nginx's workers) is in the group from its start.
    pub fn join_on_spawn(&self, cmd: &mut std::process::Command) -> Result<()> {
        use std::os::unix::process::CommandExt;
        let paths: Vec<std::ffi::CString> = self
            .dirs
            .iter()
            .map(|d| {
                let p = d.join("cgroup.procs");
                std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
                    .map_err(|_| Error::parse(&p, 0, "path holds a NUL byte"))
            })
            .collect::<Result<_>>()?;
        // SAFETY: the closure runs in the child between fork and exec; it only calls
        // async-signal-safe functions (getpid, open, write, close) on memory prepared before
        // the fork, and allocates nothing.
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
                Ok(())
            });
        }
        Ok(())
    }

    /// CPU time used by the group's processes since it was created.
    pub fn usage(&self) -> Result<Duration> {
        let text = std::fs::read_to_string(&self.usage).map_err(|e| io(&self.usage, e))?;
        let ns: u64 = text
            .trim()
            .parse()
            .map_err(|_| Error::parse(&self.usage, 1, format!("not a number: {text:?}")))?;
        Ok(Duration::from_nanos(ns))
    }

    /// How many periods the quota throttled the group (`cpu.stat` `nr_throttled`).
    pub fn throttled_periods(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.dirs[0].join("cpu.stat")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .and_then(|v| v.trim().parse().ok())
    }
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|e| io(path, e))
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        for d in &self.dirs {
            // A process that just exited may take a moment to leave the group.
            for _ in 0..50 {
                match std::fs::remove_dir(d) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    _ => break,
                }
            }
        }
    }
}

/// Removes empty groups named `perfpilot-<tag>…` that a killed run left behind; returns their
/// paths. A group that still holds processes stays (and is not listed).
pub fn remove_stale(fs: &Fs, tag: &str) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok((cpu, acct)) = roots(fs) else {
        return removed;
    };
    for root in [cpu, acct] {
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
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, Fs) {
        let dir = tempfile::tempdir().unwrap();
        for (f, v) in [
            ("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n"),
            ("sys/fs/cgroup/cpuacct/cpuacct.usage", "0\n"),
        ] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        }
        let fs = Fs::at(dir.path());
        (dir, fs)
    }

    #[test]
    fn a_quota_of_four_tenths_of_a_core_gets_a_short_period() {
        let (dir, fs) = tree();
        let g = CpuGroup::create(&fs, "t-app", Some(0.4)).unwrap();
        let d = dir.path().join("sys/fs/cgroup/cpu/perfpilot-t-app");
        assert_eq!(
            std::fs::read_to_string(d.join("cpu.cfs_period_us")).unwrap(),
            "2500"
        );
        assert_eq!(
            std::fs::read_to_string(d.join("cpu.cfs_quota_us")).unwrap(),
            "1000"
        );
        std::fs::write(
            dir.path()
                .join("sys/fs/cgroup/cpuacct/perfpilot-t-app/cpuacct.usage"),
            "1500000000\n",
        )
        .unwrap();
        assert_eq!(g.usage().unwrap(), Duration::from_millis(1500));
    }

    #[test]
    fn a_machine_without_the_v1_cpu_controller_is_told_what_to_use() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/fs/cgroup")).unwrap();
        std::fs::write(dir.path().join("sys/fs/cgroup/cgroup.controllers"), "cpu\n").unwrap();
        let e = CpuGroup::create(&Fs::at(dir.path()), "x", Some(1.0)).unwrap_err();
        assert!(e.to_string().contains("cgroup v2"), "{e}");
    }
}
