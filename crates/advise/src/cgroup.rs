//! The cgroup of a process for one controller, through `perfpilot_sys::cgroup` (v2, hybrid
//! or v1): the directory (relative to the `Fs` root) that holds its files, and its memory
//! limit.

use perfpilot_sys::Fs;
use perfpilot_sys::cgroup::{Hierarchies, Membership, read};

/// The directory of `pid`'s cgroup for `controller` (`cpu`, `memory`), or `None` for the root
/// cgroup (no limits there) or an unreadable `/proc/PID/cgroup`.
pub(crate) fn dir_of(fs: &Fs, pid: i32, controller: &str) -> Option<String> {
    let h = Hierarchies::detect(fs);
    let d = Membership::of_pid(fs, pid).ok()?.dir(&h, controller)?;
    (!d.is_root()).then(|| d.rel())
}

/// The memory limit of `pid`'s cgroup in bytes and the file it came from; `None` without one.
/// The nearest limit walking up counts (a parent's limit binds the children too).
pub(crate) fn memory_limit(fs: &Fs, pid: i32) -> Option<(u64, String)> {
    let h = Hierarchies::detect(fs);
    let d = Membership::of_pid(fs, pid).ok()?.dir(&h, "memory")?;
    let (limit, at) = read::effective_memory_limit(fs, &d).ok()??;
    if at.is_root() {
        return None;
    }
    let file = match at.version {
        perfpilot_sys::cgroup::Version::V2 => "memory.max",
        perfpilot_sys::cgroup::Version::V1 => "memory.limit_in_bytes",
    };
    Some((limit, format!("/{}", at.file(file))))
}
