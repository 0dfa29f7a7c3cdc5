//! Linux interfaces for perfpilot, and nothing else.
//!
//! Every reader here is constructed from an [`Fs`], a root directory under which `proc/` and
//! `sys/` are looked up. [`Fs::live`] is the running system; [`Fs::at`] points at a captured
//! tree (see `tests/fixtures/`), so every parser is exercised on boxes this machine is not.
//!
//! Readers return raw typed readings (counters as the kernel gives them); turning two readings
//! into rates, and readings into a topology model, is the job of `perfpilot-observe`.
//!
//! Errors carry the path (and the line, for parse errors). A process or thread that exits while
//! it is being read gives [`Error::Vanished`], which callers treat as a normal event.
//!
//! # Changing the system
//!
//! Everything in perfpilot that changes the system goes through this crate, and is journaled
//! before it happens. [`change`] describes a change as data ([`change::Change`]) and does it in
//! three steps: [`change::prepare`] reads the current state and returns the
//! [`change::Undo`] record without changing anything, the caller journals it,
//! [`change::apply`] makes the change, and [`change::undo`] restores from the record. The
//! primitives underneath are public too: thread affinity ([`affinity`]:
//! `sched_setaffinity`, and the cgroup cpuset a process is confined to), page placement
//! ([`pages`]: `move_pages`), huge-page promotion ([`collapse`]: `pidfd_open` +
//! `process_madvise(MADV_COLLAPSE)`), and sysfs/procfs knobs ([`knob`]). Threads, pages and
//! processes that vanish part way are counted per item; kernel refusals are errors naming the
//! call and the target.
//!
//! Two small wrappers serve the processes perfpilot starts itself: [`signal::terminate`]
//! asks one to stop, and [`mapping::AnonMapping`] is the memory a synthetic load maps,
//! advises and touches. For the deployments a capacity study starts, [`cpugroup::CpuGroup`]
//! is a `perfpilot-` cgroup (CPU quota and accounting), held only by processes perfpilot
//! started and removed by its guard; [`netns`] runs `ip` for the network namespaces that
//! `perfpilot-lab` makes hosts of (capacity's second host among them). The other crates reach
//! the kernel through this one, not `libc`.

#![allow(unsafe_code)] // the one crate that makes raw system calls; each block says why it is sound

pub mod affinity;
pub mod block;
pub mod cgroup;
pub mod change;
pub mod clock;
pub mod collapse;
pub mod cpugroup;
mod cpuset;
mod error;
pub mod failpoint;
mod fs;
pub mod ipc;
pub mod knob;
pub mod mapping;
pub mod net;
pub mod netns;
pub mod node;
pub mod pagecache;
pub mod pages;
pub mod perf;
pub mod process;
pub mod scratchfs;
pub mod signal;
pub mod split;
pub mod stat;
pub mod user;
pub mod zones;

pub use cpuset::{CpuSet, CpuSetError};
pub use error::{Error, Result};
pub use fs::Fs;

/// Clock ticks per second used by `/proc` CPU times (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// The base page size in bytes (`sysconf(_SC_PAGESIZE)`).
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}

/// CPU time of the calling process's children that have exited and been waited for (user +
/// system, `getrusage(RUSAGE_CHILDREN)`): read before and after a batch of children, the
/// difference is what they used.
pub fn children_cpu_time() -> std::time::Duration {
    // SAFETY: rusage is plain data, zero is a valid bit pattern; getrusage only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| {
        std::time::Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time consumed by the calling process so far (user + system), from `getrusage`.
pub fn self_cpu_time() -> std::time::Duration {
    // SAFETY: rusage is plain data, zero is a valid bit pattern; getrusage only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| {
        std::time::Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// This process's open-file limit, soft and hard (`getrlimit(RLIMIT_NOFILE)`).
pub fn open_files_limit() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointer to an rlimit struct, which getrlimit only writes.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return (1024, 1024);
    }
    (r.rlim_cur, r.rlim_max)
}

/// Raises this process's soft open-file limit towards `want` (never past the hard limit, never
/// lowering it) and returns the soft limit now. Only this process is changed: nothing to undo.
pub fn raise_open_files_limit(want: u64) -> u64 {
    let (soft, hard) = open_files_limit();
    let target = want.min(hard);
    if target <= soft {
        return soft;
    }
    let r = libc::rlimit {
        rlim_cur: target,
        rlim_max: hard,
    };
    // SAFETY: valid pointer to an initialised rlimit struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } == 0 {
        target
    } else {
        soft
    }
}
