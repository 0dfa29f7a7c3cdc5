//! NUMA placement of single pages of another process (`move_pages(2)`).

use std::io;

use crate::{Error, Result, page_size};

/// Pages per `move_pages` call: bounds the time one call holds the target's mmap lock.
pub const MOVE_CHUNK: usize = 16 * 1024;

/// `MPOL_MF_MOVE`: move only pages mapped by this process alone.
const MPOL_MF_MOVE: libc::c_int = 1 << 1;

fn page_align(addr: u64) -> u64 {
    addr & !(page_size() - 1)
}

fn call(pid: i32, pages: &[u64], node: Option<u32>, status: &mut [i32]) -> Result<()> {
    let ptrs: Vec<*mut libc::c_void> = pages
        .iter()
        .map(|&a| page_align(a) as usize as *mut libc::c_void)
        .collect();
    let nodes: Option<Vec<libc::c_int>> = node.map(|n| vec![n as libc::c_int; pages.len()]);
    status.fill(0);
    // SAFETY: `ptrs`, `nodes` (when present) and `status` each hold `pages.len()` elements;
    // the kernel reads the first two and writes only `status`. The page addresses are values
    // in the target's address space and are never dereferenced here.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid as libc::c_int,
            pages.len() as libc::c_ulong,
            ptrs.as_ptr(),
            nodes
                .as_ref()
                .map_or(std::ptr::null(), |n| n.as_ptr() as *const libc::c_int),
            status.as_mut_ptr(),
            MPOL_MF_MOVE,
        )
    };
    if r < 0 {
        let source = io::Error::last_os_error();
        let target = match (node, source.raw_os_error()) {
            (Some(n), Some(libc::ENODEV | libc::EINVAL)) => {
                format!("pid {pid} to node {n} (no such node, or it has no memory)")
            }
            (Some(n), Some(libc::EACCES)) => {
                format!("pid {pid} to node {n} (node not allowed by the process's cpuset)")
            }
            (Some(n), _) => format!("pid {pid} to node {n}"),
            (None, _) => format!("pid {pid} (query)"),
        };
        return Err(Error::Syscall {
            call: "move_pages",
            target,
            source,
        });
    }
    Ok(())
}

/// The node each page of process `pid` is on (`move_pages` with no target nodes), or a
/// negative errno per page: `-EFAULT` not mapped, `-ENOENT` not populated (never touched,
/// or the shared zero page). Addresses are rounded down to the page. Calls are made
/// [`MOVE_CHUNK`] pages at a time. A process that exited gives an error for which
/// [`Error::is_vanished`] is true.
pub fn page_nodes(pid: i32, pages: &[u64]) -> Result<Vec<i32>> {
    let mut out = vec![0i32; pages.len()];
    for (chunk, st) in pages.chunks(MOVE_CHUNK).zip(out.chunks_mut(MOVE_CHUNK)) {
        call(pid, chunk, None, st)?;
    }
    Ok(out)
}

/// Moves the pages of process `pid` to `node` (`move_pages` with `MPOL_MF_MOVE`): the status
/// per page is the node it is on afterwards, or a negative errno (`-EFAULT` not mapped,
/// `-ENOENT` not populated, `-EBUSY`, `-EACCES` shared with other processes, `-ENOMEM`).
/// A node that does not exist or has no memory is an error naming the node (ENODEV/EINVAL);
/// a process that exited gives an error for which [`Error::is_vanished`] is true. Calls are
/// made [`MOVE_CHUNK`] pages at a time; pacing is the caller's job.
pub fn move_pages(pid: i32, pages: &[u64], node: u32) -> Result<Vec<i32>> {
    let mut out = vec![0i32; pages.len()];
    for (chunk, st) in pages.chunks(MOVE_CHUNK).zip(out.chunks_mut(MOVE_CHUNK)) {
        call(pid, chunk, Some(node), st)?;
    }
    Ok(out)
}
