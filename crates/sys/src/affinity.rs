//! CPU affinity of single threads (`sched_getaffinity`/`sched_setaffinity`), and the cgroup
//! cpuset a process is confined to.

use std::io;

use crate::{CpuSet, Error, Fs, Result};

/// Largest affinity buffer tried, in bytes (enough for 1 M CPUs; the kernel's limit is lower).
const MAX_MASK_BYTES: usize = 1 << 17;

fn syscall_error(call: &'static str, target: String) -> Error {
    Error::Syscall {
        call,
        target,
        source: io::Error::last_os_error(),
    }
}

/// The CPUs thread `tid` may run on (`sched_getaffinity`). A thread that exited gives an
/// error for which [`Error::is_vanished`] is true.
pub fn get_affinity(tid: i32) -> Result<CpuSet> {
    // Start at 1024 CPUs (what glibc's cpu_set_t holds) and grow while the kernel's mask is
    // larger than the buffer (EINVAL).
    let mut len = 128usize;
    loop {
        let mut buf = vec![0u64; len / 8];
        // SAFETY: buf is a writable buffer of exactly `len` bytes; the kernel writes at most
        // `len` bytes into it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sched_getaffinity,
                tid as libc::pid_t,
                len,
                buf.as_mut_ptr(),
            )
        };
        if r >= 0 {
            let bytes = (r as usize).min(len);
            let mut set = CpuSet::new();
            for (w, word) in buf.iter().enumerate().take(bytes.div_ceil(8)) {
                let mut bits = *word;
                while bits != 0 {
                    let b = bits.trailing_zeros();
                    set.insert(w as u32 * 64 + b);
                    bits &= bits - 1;
                }
            }
            return Ok(set);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINVAL) && len < MAX_MASK_BYTES {
            len *= 2;
            continue;
        }
        return Err(Error::Syscall {
            call: "sched_getaffinity",
            target: format!("tid {tid}"),
            source: err,
        });
    }
}

/// Restricts thread `tid` to `cpus` (`sched_setaffinity`). EINVAL (no CPU of the mask is
/// online or allowed by the thread's cpuset) and EPERM are errors naming the thread and mask;
/// a thread that exited gives an error for which [`Error::is_vanished`] is true.
pub fn set_affinity(tid: i32, cpus: &CpuSet) -> Result<()> {
    let max = cpus.iter().last().unwrap_or(0) as usize;
    let words = max / 64 + 1;
    let mut buf = vec![0u64; words];
    for c in cpus.iter() {
        buf[c as usize / 64] |= 1u64 << (c % 64);
    }
    // SAFETY: buf holds `words * 8` readable bytes; the kernel only reads from it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            tid as libc::pid_t,
            words * 8,
            buf.as_ptr(),
        )
    };
    if r < 0 {
        return Err(syscall_error(
            "sched_setaffinity",
            format!("tid {tid} to CPUs {cpus}"),
        ));
    }
    Ok(())
}

/// The effective CPUs of the cgroup cpuset process `pid` is confined to, from
/// `/proc/<pid>/cgroup` and the nearest cgroup (walking up) that has a cpuset file:
/// `cpuset.cpus.effective` in the cgroup v2 hierarchy, else `cpuset.effective_cpus` in the v1
/// cpuset hierarchy ([`crate::cgroup::read::cpuset`]).
///
/// `None` when cpuset is not in use for the process: no cgroup below the hierarchy root has
/// the file, or only the root does (the root's cpuset is always every online CPU). A `Some`
/// set may still be every CPU; compare with the online CPUs to tell a cpuset-narrowed process.
/// Paths are those of the caller's cgroup namespace.
pub fn cpuset_of(fs: &Fs, pid: i32) -> Result<Option<CpuSet>> {
    Ok(crate::cgroup::read::cpuset_of_pid(fs, pid)?
        .filter(|c| !c.dir.is_root())
        .map(|c| c.effective_cpus))
}
