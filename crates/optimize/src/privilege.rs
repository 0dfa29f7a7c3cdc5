//! Least privilege: which capabilities each command needs, the daemon dropping the rest once
//! it has started, and the commands that change the system refusing a caller who may not.
//!
//! The daemon runs as root (uid 0), so files owned by root (sysfs and procfs knobs, its state
//! directory) stay writable through ownership after the drop; the capabilities it keeps are
//! those that reach other users' processes. It also drops the others from its bounding set, so
//! the probe commands it runs cannot regain them.

use std::path::Path;

use caps::{CapSet, Capability};

/// The capabilities the daemon keeps after start, and what each is for.
pub const DAEMON_KEEPS: &[(Capability, &str)] = &[
    (
        Capability::CAP_SYS_NICE,
        "sched_setaffinity, move_pages and process_madvise(MADV_COLLAPSE) on other users' processes",
    ),
    (
        Capability::CAP_SYS_PTRACE,
        "reading other users' /proc/PID/{maps,smaps_rollup,numa_maps,io,environ} and pidfd_open + process_madvise on them (ptrace read access)",
    ),
    (
        Capability::CAP_DAC_READ_SEARCH,
        "reading other users' /proc/PID/{environ,io} (mode 0400: PERFPILOT=off and the I/O rates) and their /proc/PID/fd links (a server's listening sockets, from which its preset is found)",
    ),
    (
        Capability::CAP_PERFMON,
        "per-process PMU counters of other users' threads (perf_event_open)",
    ),
    (
        Capability::CAP_SETUID,
        "asking a server as its own user (peer authentication of PostgreSQL's socket), one thread at a time",
    ),
    (Capability::CAP_SETGID, "the same, for the server's group"),
];

/// What a command needs, for `docs/reliability.md` and the test that checks it.
pub const COMMANDS: &[(&str, &str)] = &[
    (
        "daemon",
        "root: CAP_SYS_NICE, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_PERFMON, CAP_SETUID, CAP_SETGID after start (everything else dropped, bounding set too); as another user it acts only on that user's processes",
    ),
    (
        "revert, tunables -o",
        "root, or the owner of the state directory (a user's own daemon); others are refused",
    ),
    (
        "status, tunables --list, advise, observe, topology, dump",
        "none: they only read (other users' /proc details are skipped and counted)",
    ),
    (
        "record",
        "none; CAP_PERFMON for PMU counters of other users' threads",
    ),
    (
        "study run",
        "none for the run itself; root for knobs under /sys and /proc/sys",
    ),
];

/// Errors of dropping capabilities.
#[derive(Debug, thiserror::Error)]
#[error("dropping capabilities ({what}): {source}")]
pub struct PrivilegeError {
    what: &'static str,
    #[source]
    source: caps::errors::CapsError,
}

/// What [`drop_unneeded`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dropped {
    /// Capabilities were dropped; these are what stay effective.
    To(Vec<Capability>),
    /// Nothing to drop: the process holds none of the others (not root, or already confined).
    Nothing,
}

/// Drops every capability but [`DAEMON_KEEPS`] from the bounding, inheritable, ambient,
/// permitted and effective sets of this process (all threads: call it before starting any).
pub fn drop_unneeded() -> Result<Dropped, PrivilegeError> {
    let err = |what| move |source| PrivilegeError { what, source };
    let keep: caps::CapsHashSet = DAEMON_KEEPS.iter().map(|k| k.0).collect();
    let permitted = caps::read(None, CapSet::Permitted).map_err(err("reading permitted"))?;
    let extra = permitted.difference(&keep).count();
    if extra == 0 {
        return Ok(Dropped::Nothing);
    }
    // The bounding set first: that needs CAP_SETPCAP, which goes with the permitted set.
    if permitted.contains(&Capability::CAP_SETPCAP) {
        for c in caps::all() {
            if !keep.contains(&c) {
                caps::drop(None, CapSet::Bounding, c).map_err(err("bounding set"))?;
            }
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(err("ambient set"))?;
    caps::clear(None, CapSet::Inheritable).map_err(err("inheritable set"))?;
    let now: caps::CapsHashSet = permitted.intersection(&keep).copied().collect();
    caps::set(None, CapSet::Effective, &now).map_err(err("effective set"))?;
    caps::set(None, CapSet::Permitted, &now).map_err(err("permitted set"))?;
    let mut kept: Vec<Capability> = now.into_iter().collect();
    kept.sort_by_key(|c| c.index());
    Ok(Dropped::To(kept))
}

/// Whether this process may change what the state directory `dir` journals (`revert`,
/// `tunables -o`): root may, and so may the owner of the directory (a daemon a user runs on
/// their own processes). Anyone else gets an error that says what to do.
pub fn may_change(dir: &Path, command: &str) -> Result<(), String> {
    let euid = perfpilot_sys::user::euid();
    if euid == 0 {
        return Ok(());
    }
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(dir) {
        Ok(m) if m.uid() == euid => Ok(()),
        Ok(m) => Err(format!(
            "perfpilot {command} changes what the daemon of {} journals (processes and kernel settings of the system): run it as root (sudo perfpilot {command} …); the directory belongs to uid {}, and you are uid {euid}",
            dir.display(),
            m.uid()
        )),
        // Nothing there yet: a user's own new state directory.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!(
            "perfpilot {command}: cannot read {}: {e}; run it as root (sudo perfpilot {command} …)",
            dir.display()
        )),
    }
}

/// [`drop_unneeded`] at the daemon's start, logged (a failure is a warning: the daemon goes on
/// with what it was started with).
pub fn drop_after_start() {
    match drop_unneeded() {
        Ok(Dropped::To(kept)) => tracing::info!(
            "capabilities dropped; kept {}",
            kept.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Ok(Dropped::Nothing) => {}
        Err(e) => tracing::warn!("{e}; the daemon keeps the capabilities it was started with"),
    }
}
