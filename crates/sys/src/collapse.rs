//! Huge-page promotion of another process's memory: `pidfd_open` +
//! `process_madvise(MADV_COLLAPSE)` (Linux ≥ 6.1; needs `CAP_SYS_NICE` and ptrace read access
//! to the target).

use std::fmt;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::{Error, Result, page_size};

/// `MADV_COLLAPSE` (include/uapi/asm-generic/mman-common.h).
pub const MADV_COLLAPSE: libc::c_int = 25;
/// Most iovecs one `process_madvise` call takes (`UIO_MAXIOV`).
pub const IOV_MAX: usize = 1024;
/// Most bytes one call covers: the kernel silently clips an iovec array at `MAX_RW_COUNT`
/// (just under 2 GiB), so ranges are cut at 1 GiB boundaries (which are PMD-aligned) and
/// batches kept at or under this total.
const MAX_BATCH_BYTES: u64 = 1 << 30;

/// Why a range was not (entirely) collapsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollapseFailure {
    /// EAGAIN: a page was busy (locked, being migrated); trying again later may work.
    Busy,
    /// EBUSY: the huge page could not be charged to the memory cgroup, or too few of its
    /// small pages are populated.
    Charge,
    /// ENOMEM: no free huge page could be allocated, or part of the range is not mapped.
    NoMemory,
    /// EINVAL: the range cannot be collapsed: nothing populated in it, a hugetlb/DAX/
    /// `MADV_NOHUGEPAGE` mapping, THP disabled for the process (prctl), shared memory while
    /// `shmem_enabled` forbids huge pages (`deny`; on some kernels also `never`), or a shared
    /// mapping whose address is not huge-page aligned with its file offset.
    Ineligible,
    /// Any other errno.
    Other,
}

impl CollapseFailure {
    fn from_errno(e: i32) -> Self {
        match e {
            libc::EAGAIN => Self::Busy,
            libc::EBUSY => Self::Charge,
            libc::ENOMEM => Self::NoMemory,
            libc::EINVAL => Self::Ineligible,
            _ => Self::Other,
        }
    }
}

impl fmt::Display for CollapseFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Busy => "pages busy (locked or being migrated); may work later",
            Self::Charge => {
                "huge page not chargeable to the memory cgroup, or too few pages populated"
            }
            Self::NoMemory => "no free huge page, or part of the range is not mapped",
            Self::Ineligible => {
                "range cannot be collapsed: nothing populated, hugetlb/DAX/MADV_NOHUGEPAGE \
                 mapping, THP disabled for the process, shared memory while shmem_enabled \
                 is deny (on some kernels also never), or a shared mapping \
                 not huge-page aligned with its file offset"
            }
            Self::Other => "unexpected error",
        })
    }
}

/// One range (or a 1 GiB piece of one) that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeFailure {
    /// First address of the range (or piece).
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// Positive errno.
    pub errno: i32,
    /// The errno, classified.
    pub reason: CollapseFailure,
}

impl fmt::Display for RangeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:#x}+{:#x}: {} ({})",
            self.start,
            self.len,
            self.reason,
            io::Error::from_raw_os_error(self.errno)
        )
    }
}

/// What one [`collapse`] call did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollapseOutcome {
    /// Ranges that collapsed entirely.
    pub ranges_ok: usize,
    /// Bytes in the pieces that collapsed entirely. A failed piece may still have been partly
    /// collapsed: read `AnonHugePages`/`ShmemPmdMapped` for the real coverage.
    pub bytes_ok: u64,
    /// Pieces that failed, with the errno.
    pub failed: Vec<RangeFailure>,
    /// Bytes not attempted because the process exited.
    pub vanished_bytes: u64,
}

fn syscall_error(call: &'static str, target: String) -> Error {
    Error::Syscall {
        call,
        target,
        source: io::Error::last_os_error(),
    }
}

/// `pidfd_open(pid)`: ESRCH (the process exited) gives an error with
/// [`Error::is_vanished`] true.
pub fn pidfd_open(pid: i32) -> Result<OwnedFd> {
    // SAFETY: pidfd_open takes plain integers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
    if fd < 0 {
        return Err(syscall_error("pidfd_open", format!("pid {pid}")));
    }
    // SAFETY: fd is a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

fn process_madvise(pidfd: &OwnedFd, iov: &[libc::iovec]) -> io::Result<u64> {
    advise(pidfd, iov, MADV_COLLAPSE)
}

/// `process_madvise(pidfd, iov, advice)`: the bytes advised.
pub(crate) fn advise(pidfd: &OwnedFd, iov: &[libc::iovec], advice: libc::c_int) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: iov points at `iov.len()` valid iovec structs, which the kernel only reads; the
    // addresses they hold belong to the target process and are never dereferenced here.
    let r = unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            pidfd.as_raw_fd(),
            iov.as_ptr(),
            iov.len(),
            advice,
            0 as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u64)
    }
}

/// True when this kernel has `process_madvise` with `MADV_COLLAPSE` (Linux ≥ 6.1). Probed once
/// without side effects: `process_madvise(-1, …, MADV_COLLAPSE)` fails with EBADF when the
/// advice is known, EINVAL when it is not (checked first on kernels without it), ENOSYS when
/// `process_madvise` itself is missing.
pub fn kernel_supports_collapse() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let mut byte = 0u8;
        let iov = libc::iovec {
            iov_base: (&raw mut byte).cast(),
            iov_len: 1,
        };
        // SAFETY: one valid iovec; the pidfd -1 is invalid, so nothing is advised.
        let r = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                -1 as libc::c_int,
                &iov as *const libc::iovec,
                1usize,
                MADV_COLLAPSE,
                0 as libc::c_uint,
            )
        };
        r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
    })
}

/// Cuts `(start, len)` ranges into page-aligned pieces that do not cross a 1 GiB boundary;
/// each piece remembers the index of its range.
fn pieces(ranges: &[(u64, u64)]) -> Vec<(usize, u64, u64)> {
    let page = page_size();
    let mut out = Vec::new();
    for (i, &(start, len)) in ranges.iter().enumerate() {
        if len == 0 {
            continue;
        }
        let mut a = start & !(page - 1);
        let end = start.saturating_add(len).saturating_add(page - 1) & !(page - 1);
        while a < end {
            let b = ((a / MAX_BATCH_BYTES) + 1)
                .saturating_mul(MAX_BATCH_BYTES)
                .min(end);
            out.push((i, a, b - a));
            a = b;
        }
    }
    out
}

/// The huge-page size advised one at a time after a failure.
pub(crate) const HUGE_PAGE: u64 = 2 << 20;

/// Advises `[start, start + len)` one huge page (or the partial page at either end) at a time,
/// adding what took to `out.bytes_ok` and each failure to `out.failed`. `Ok(true)` when all
/// took; `Err(())` when the process exited part way (the rest counted in `vanished_bytes`).
fn advise_each_huge_page(
    pidfd: &OwnedFd,
    start: u64,
    len: u64,
    out: &mut CollapseOutcome,
) -> std::result::Result<bool, ()> {
    let end = start + len;
    let mut a = start;
    let mut all = true;
    while a < end {
        let b = ((a / HUGE_PAGE) + 1).saturating_mul(HUGE_PAGE).min(end);
        let one = [libc::iovec {
            iov_base: a as usize as *mut libc::c_void,
            iov_len: (b - a) as usize,
        }];
        match process_madvise(pidfd, &one) {
            Ok(_) => out.bytes_ok += b - a,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                out.vanished_bytes += end - a;
                return Err(());
            }
            Err(e) => {
                all = false;
                let errno = e.raw_os_error().unwrap_or(0);
                // Neighbouring huge pages failing alike read as one range.
                match out.failed.last_mut() {
                    Some(f) if f.errno == errno && f.start + f.len == a => f.len += b - a,
                    _ => out.failed.push(RangeFailure {
                        start: a,
                        len: b - a,
                        errno,
                        reason: CollapseFailure::from_errno(errno),
                    }),
                }
            }
        }
        a = b;
    }
    Ok(all)
}

/// Collapses the `(start, len)` ranges of process `pid` into huge pages with
/// `process_madvise(MADV_COLLAPSE)`, batching up to [`IOV_MAX`] ranges (≤ 1 GiB) per call.
/// Starts are rounded down and ends up to the page.
///
/// Per-range failures (EAGAIN, EBUSY, ENOMEM, EINVAL) are counted in the outcome with their
/// errno; the process exiting part way is counted in `vanished_bytes`. Errors: a kernel
/// without `MADV_COLLAPSE` (EINVAL/ENOSYS, the message says so), EPERM (needs CAP_SYS_NICE and
/// ptrace access), and a process already gone at the start ([`Error::is_vanished`]).
pub fn collapse(pid: i32, ranges: &[(u64, u64)]) -> Result<CollapseOutcome> {
    if !kernel_supports_collapse() {
        return Err(Error::Syscall {
            call: "process_madvise(MADV_COLLAPSE)",
            target: format!("pid {pid}: this kernel has no MADV_COLLAPSE (Linux >= 6.1 needed)"),
            source: io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    let pidfd = pidfd_open(pid)?;
    let pieces = pieces(ranges);
    let mut out = CollapseOutcome::default();
    let mut piece_ok = vec![false; pieces.len()];
    let mut i = 0;
    while i < pieces.len() {
        // The next batch: pieces[i..j].
        let mut j = i;
        let mut total = 0u64;
        while j < pieces.len() && j - i < IOV_MAX && total + pieces[j].2 <= MAX_BATCH_BYTES {
            total += pieces[j].2;
            j += 1;
        }
        let iov: Vec<libc::iovec> = pieces[i..j]
            .iter()
            .map(|&(_, a, l)| libc::iovec {
                iov_base: a as usize as *mut libc::c_void,
                iov_len: l as usize,
            })
            .collect();
        let done = match process_madvise(&pidfd, &iov) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                out.vanished_bytes += pieces[i..].iter().map(|p| p.2).sum::<u64>();
                break;
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                return Err(Error::Syscall {
                    call: "process_madvise(MADV_COLLAPSE)",
                    target: format!("pid {pid} (needs CAP_SYS_NICE and ptrace access)"),
                    source: e,
                });
            }
            Err(_) => 0,
        };
        // The kernel advises whole iovecs in order and stops at the first failure, returning
        // the bytes of the pieces before it (or the error when that is the first one).
        let mut k = i;
        let mut acc = 0u64;
        while k < j && acc + pieces[k].2 <= done {
            acc += pieces[k].2;
            out.bytes_ok += pieces[k].2;
            piece_ok[k] = true;
            k += 1;
        }
        if k < j {
            // Piece k failed. The kernel collapses what it can in a range and reports the last
            // failure, so a hole anywhere hides the huge pages made around it: advise the piece
            // again one huge page at a time, for what took and each failure's errno.
            let (_, a, l) = pieces[k];
            match advise_each_huge_page(&pidfd, a, l, &mut out) {
                Ok(all) => piece_ok[k] = all,
                Err(()) => {
                    out.vanished_bytes += pieces[k + 1..].iter().map(|p| p.2).sum::<u64>();
                    break;
                }
            }
            k += 1;
        }
        i = k;
    }
    let mut range_ok: Vec<bool> = ranges.iter().map(|&(_, len)| len > 0).collect();
    for (p, ok) in pieces.iter().zip(&piece_ok) {
        range_ok[p.0] &= ok;
    }
    out.ranges_ok = range_ok.iter().filter(|&&ok| ok).count();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_at_gib_and_align() {
        let page = page_size();
        let g = 1u64 << 30;
        let p = pieces(&[(g - 2 * page + 1, 3 * page), (5 * g, 0), (7 * g, 2 * g + 5)]);
        assert_eq!(
            p,
            vec![
                (0, g - 2 * page, 2 * page),
                (0, g, 2 * page),
                (2, 7 * g, g),
                (2, 8 * g, g),
                (2, 9 * g, page),
            ]
        );
    }
}
