//! The cgroup of a process for one controller: the directory (relative to the `Fs` root) that
//! holds its files, in the v2 unified hierarchy when it is mounted at `/sys/fs/cgroup`, else in
//! the v1 hierarchy of the controller.

use perfpilot_sys::Fs;

/// Which hierarchy a directory is in: the files have different names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// cgroup v1 (`cpu.cfs_quota_us`, `memory.limit_in_bytes`).
    V1,
    /// cgroup v2 (`cpu.max`, `memory.max`).
    V2,
}

/// The directory of `pid`'s cgroup for `controller` (`cpu`, `memory`), or `None` for the root
/// cgroup (no limits there) or an unreadable `/proc/PID/cgroup`.
pub(crate) fn dir_of(fs: &Fs, pid: i32, controller: &str) -> Option<(String, Version)> {
    let text = fs.read(&format!("proc/{pid}/cgroup")).ok()?;
    let mut v1 = None;
    let mut v2 = None;
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(h), Some(ctrls), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if h == "0" && ctrls.is_empty() {
            v2 = Some(path.to_string());
        } else if ctrls.split(',').any(|c| c == controller) {
            v1 = Some((ctrls.to_string(), path.to_string()));
        }
    }
    if let Some(p) = v2
        && fs.path("sys/fs/cgroup/cgroup.controllers").exists()
    {
        return (p != "/").then(|| (format!("sys/fs/cgroup{p}"), Version::V2));
    }
    let (ctrls, p) = v1?;
    if p == "/" {
        return None;
    }
    for dir in [
        format!("sys/fs/cgroup/{ctrls}"),
        format!("sys/fs/cgroup/{controller}"),
    ] {
        if fs.path(&dir).exists() {
            return Some((format!("{dir}{p}"), Version::V1));
        }
    }
    None
}

/// The memory limit of `pid`'s cgroup in bytes and the file it came from; `None` without one.
/// The nearest limit walking up counts (a parent's limit binds the children too).
pub(crate) fn memory_limit(fs: &Fs, pid: i32) -> Option<(u64, String)> {
    let (mut dir, version) = dir_of(fs, pid, "memory")?;
    let file = match version {
        Version::V2 => "memory.max",
        Version::V1 => "memory.limit_in_bytes",
    };
    loop {
        let rel = format!("{dir}/{file}");
        if let Ok(t) = fs.read(&rel)
            && let Ok(v) = t.trim().parse::<u64>()
            // v1 says "no limit" with a huge page-rounded number.
            && v < 1 << 60
        {
            return Some((v, format!("/{rel}")));
        }
        let (parent, _) = dir.rsplit_once('/')?;
        if parent.matches('/').count() < 3 {
            // At the hierarchy's root (sys/fs/cgroup or sys/fs/cgroup/memory): no limit.
            return None;
        }
        dir = parent.to_string();
    }
}
