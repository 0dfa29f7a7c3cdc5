//! System changes as data, in three steps: [`prepare`] reads the current state and returns the
//! [`Undo`] record (nothing is changed), the caller journals it, then [`apply`] makes the
//! change; [`undo`] restores from the record (also after a crash, from the journal).
//!
//! Threads, pages and processes that vanish part way are counted per item in the outcome,
//! never an error. Kernel refusals (EPERM, EINVAL) are errors naming the call and the target;
//! after such an error part of the change may have been made, so the caller undoes.

use serde::{Deserialize, Serialize};

use crate::affinity::{get_affinity, set_affinity};
use crate::collapse::{CollapseOutcome, collapse};
use crate::knob::{read_knob, write_knob};
use crate::pages::{MOVE_CHUNK, move_pages, page_nodes};
use crate::scratchfs::{self, ScratchSpec};
use crate::{CpuSet, Error, Fs, Result};

/// What to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// Set the affinity of threads `tids` of process `pid` to `cpus`.
    Affinity {
        /// The process.
        pid: i32,
        /// The threads to move.
        tids: Vec<i32>,
        /// The CPUs they may run on.
        cpus: CpuSet,
    },
    /// Move the pages at these addresses of process `pid` to `node`.
    MovePages {
        /// The process.
        pid: i32,
        /// Page addresses in the process.
        pages: Vec<u64>,
        /// The target NUMA node.
        node: u32,
    },
    /// Collapse the `(start, len)` ranges of process `pid` into huge pages.
    Collapse {
        /// The process.
        pid: i32,
        /// `(start, len)` address ranges in the process.
        ranges: Vec<(u64, u64)>,
    },
    /// Write `value` to the sysfs/procfs knob `rel` (relative to the [`Fs`] root).
    Sysfs {
        /// The knob's path relative to the root (`sys/kernel/mm/…`).
        rel: String,
        /// The value to write.
        value: String,
    },
    /// Make a scratch file system on a loop device and mount it (a study's storage factor).
    ScratchFs {
        /// What to make.
        spec: ScratchSpec,
    },
}

/// What restores a [`Change`]: written to the journal before the change is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Undo {
    /// The affinity of each thread before the change (threads already gone are not listed).
    Affinity {
        /// The process.
        pid: i32,
        /// `(tid, CPUs it was allowed)` per thread.
        masks: Vec<(i32, CpuSet)>,
    },
    /// The node of each page before the move, or a negative errno (not mapped/populated).
    Pages {
        /// The process.
        pid: i32,
        /// `(address, node or -errno)` per page.
        previous: Vec<(u64, i32)>,
    },
    /// Collapsed ranges: undone by splitting them back where the kernel allows it
    /// ([`crate::split`]: any memory through debugfs, private anonymous memory by `MADV_COLD`),
    /// else left as they are ([`Restored::Irreversible`]).
    Collapse {
        /// The process.
        pid: i32,
        /// The `(start, len)` ranges that were collapsed.
        ranges: Vec<(u64, u64)>,
    },
    /// The previous value of the knob (for selector files, the selected word).
    Sysfs {
        /// The knob's path relative to the root.
        rel: String,
        /// What it read before the change.
        previous: String,
    },
    /// A scratch file system to unmount, detach and delete (idempotent).
    ScratchFs {
        /// The backing file.
        backing: std::path::PathBuf,
        /// The mount point.
        mount: std::path::PathBuf,
    },
}

/// Per-thread outcome of setting or restoring affinity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadsOutcome {
    /// Threads whose mask was set.
    pub set: usize,
    /// Threads that were gone (no longer in `/proc/<pid>/task`, or ESRCH).
    pub vanished: usize,
}

/// Per-page outcome of moving pages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagesOutcome {
    /// Pages now on the target node (including those already there).
    pub moved: u64,
    /// Pages that failed, as `(errno, count)` sorted by errno (positive errno: EFAULT not
    /// mapped, ENOENT not populated, EBUSY, EACCES shared, ENOMEM; 0 for a page the kernel
    /// left on another node without an error).
    pub failed: Vec<(i32, u64)>,
    /// Pages not attempted because the process exited.
    pub vanished: u64,
    /// Pages not attempted because there was nothing to restore (undo only: the page was not
    /// mapped or populated before the move).
    pub skipped: u64,
}

impl PagesOutcome {
    fn count(&mut self, node: i32, status: &[i32]) {
        for &s in status {
            if s == node {
                self.moved += 1;
            } else {
                let errno = if s < 0 { -s } else { 0 };
                match self.failed.binary_search_by_key(&errno, |f| f.0) {
                    Ok(i) => self.failed[i].1 += 1,
                    Err(i) => self.failed.insert(i, (errno, 1)),
                }
            }
        }
    }

    /// Pages that failed, all errnos together.
    pub fn failed_total(&self) -> u64 {
        self.failed.iter().map(|f| f.1).sum()
    }
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Applied {
    /// Thread affinity was set.
    Affinity(ThreadsOutcome),
    /// Pages were moved.
    Pages(PagesOutcome),
    /// Ranges were collapsed into huge pages.
    Collapse(CollapseOutcome),
    /// The knob was written; `value` is what it reads back.
    Knob {
        /// The knob's path relative to the root.
        rel: String,
        /// What the knob reads after the write.
        value: String,
    },
    /// The scratch file system was made and mounted.
    ScratchFs {
        /// The loop device's name (`loop3`).
        device: String,
        /// Where it is mounted.
        mount: std::path::PathBuf,
    },
}

/// What [`undo`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Restored {
    /// Thread affinity was set back.
    Affinity(ThreadsOutcome),
    /// Pages were moved back.
    Pages(PagesOutcome),
    /// The knob was written back; `value` is what it reads back.
    Knob {
        /// The knob's path relative to the root.
        rel: String,
        /// What the knob reads after the write.
        value: String,
    },
    /// The scratch file system is gone; `what` says what was removed.
    ScratchFs {
        /// What was unmounted, detached and deleted.
        what: String,
    },
    /// Collapsed ranges were split back into small pages.
    Split {
        /// What was split.
        what: String,
    },
    /// Nothing could be restored (collapsed huge pages stay; the kernel may split them later).
    Irreversible {
        /// What stays changed.
        what: String,
    },
}

fn task_exists(fs: &Fs, pid: i32, tid: i32) -> bool {
    fs.path(&format!("proc/{pid}/task/{tid}")).exists()
}

fn require_live(fs: &Fs, what: &str) -> Result<()> {
    if fs.is_live() {
        return Ok(());
    }
    Err(Error::Syscall {
        call: "syscall on a captured tree",
        target: format!(
            "{what} (the Fs root {} is not the live system)",
            fs.root().display()
        ),
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
    })
}

/// Sets `mask` on each thread still in `/proc/<pid>/task` (a thread id is checked to belong
/// to `pid`, so a reused id of another process is never touched).
fn set_masks<'a>(
    fs: &Fs,
    pid: i32,
    masks: impl Iterator<Item = (i32, &'a CpuSet)>,
) -> Result<ThreadsOutcome> {
    let mut out = ThreadsOutcome::default();
    for (tid, mask) in masks {
        if !task_exists(fs, pid, tid) {
            out.vanished += 1;
            continue;
        }
        match set_affinity(tid, mask) {
            Ok(()) => out.set += 1,
            Err(e) if e.is_vanished() => out.vanished += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Moves `pages` to `node` chunk by chunk, counting per page.
fn move_counted(pid: i32, pages: &[u64], node: u32, out: &mut PagesOutcome) -> Result<()> {
    for (i, chunk) in pages.chunks(MOVE_CHUNK).enumerate() {
        match move_pages(pid, chunk, node) {
            Ok(status) => out.count(node as i32, &status),
            Err(e) if e.is_vanished() => {
                out.vanished += (pages.len() - i * MOVE_CHUNK) as u64;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads the state `c` would change and returns the record that restores it. Changes nothing.
///
/// Affinity: the mask of each listed thread (threads already gone are left out). MovePages:
/// the node of each page (an error if the process is gone). Collapse: the ranges. Sysfs: the
/// current value (the selected word of a selector file).
pub fn prepare(fs: &Fs, c: &Change) -> Result<Undo> {
    Ok(match c {
        Change::Affinity { pid, tids, .. } => {
            require_live(fs, "sched_getaffinity")?;
            let mut masks = Vec::with_capacity(tids.len());
            for &tid in tids {
                if !task_exists(fs, *pid, tid) {
                    continue;
                }
                match get_affinity(tid) {
                    Ok(m) => masks.push((tid, m)),
                    Err(e) if e.is_vanished() => {}
                    Err(e) => return Err(e),
                }
            }
            Undo::Affinity { pid: *pid, masks }
        }
        Change::MovePages { pid, pages, .. } => {
            require_live(fs, "move_pages")?;
            let nodes = page_nodes(*pid, pages)?;
            Undo::Pages {
                pid: *pid,
                previous: pages.iter().copied().zip(nodes).collect(),
            }
        }
        Change::Collapse { pid, ranges } => Undo::Collapse {
            pid: *pid,
            ranges: ranges.clone(),
        },
        Change::Sysfs { rel, .. } => Undo::Sysfs {
            rel: rel.clone(),
            previous: read_knob(fs, rel)?,
        },
        Change::ScratchFs { spec } => {
            require_live(fs, "losetup")?;
            scratchfs::check(spec)?;
            Undo::ScratchFs {
                backing: spec.backing.clone(),
                mount: spec.mount.clone(),
            }
        }
    })
}

/// Makes change `c` (after its [`Undo`] record from [`prepare`] has been journaled). Cheap to
/// call repeatedly with chunks of pages or ranges: pacing is the caller's job.
pub fn apply(fs: &Fs, c: &Change) -> Result<Applied> {
    Ok(match c {
        Change::Affinity { pid, tids, cpus } => {
            require_live(fs, "sched_setaffinity")?;
            Applied::Affinity(set_masks(fs, *pid, tids.iter().map(|&t| (t, cpus)))?)
        }
        Change::MovePages { pid, pages, node } => {
            require_live(fs, "move_pages")?;
            let mut out = PagesOutcome::default();
            move_counted(*pid, pages, *node, &mut out)?;
            Applied::Pages(out)
        }
        Change::Collapse { pid, ranges } => {
            require_live(fs, "process_madvise")?;
            match collapse(*pid, ranges) {
                Ok(o) => Applied::Collapse(o),
                Err(e) if e.is_vanished() => Applied::Collapse(CollapseOutcome {
                    vanished_bytes: ranges.iter().map(|r| r.1).sum(),
                    ..Default::default()
                }),
                Err(e) => return Err(e),
            }
        }
        Change::Sysfs { rel, value } => {
            write_knob(fs, rel, value)?;
            Applied::Knob {
                rel: rel.clone(),
                value: read_knob(fs, rel)?,
            }
        }
        Change::ScratchFs { spec } => {
            require_live(fs, "losetup")?;
            Applied::ScratchFs {
                device: scratchfs::create(spec)?,
                mount: spec.mount.clone(),
            }
        }
    })
}

/// Restores the state recorded in `u`. Threads and pages of a process that is gone are
/// skipped and counted; pages that were not mapped or populated before are skipped; a
/// collapse is split back where [`crate::split`] can (any memory through debugfs, private
/// anonymous memory by `MADV_COLD`), else [`Restored::Irreversible`].
pub fn undo(fs: &Fs, u: &Undo) -> Result<Restored> {
    Ok(match u {
        Undo::Affinity { pid, masks } => {
            require_live(fs, "sched_setaffinity")?;
            Restored::Affinity(set_masks(fs, *pid, masks.iter().map(|(t, m)| (*t, m)))?)
        }
        Undo::Pages { pid, previous } => {
            require_live(fs, "move_pages")?;
            let mut out = PagesOutcome::default();
            let mut by_node: Vec<(i32, Vec<u64>)> = Vec::new();
            for &(addr, node) in previous {
                if node < 0 {
                    out.skipped += 1;
                    continue;
                }
                match by_node.iter_mut().find(|(n, _)| *n == node) {
                    Some((_, v)) => v.push(addr),
                    None => by_node.push((node, vec![addr])),
                }
            }
            for (node, pages) in &by_node {
                move_counted(*pid, pages, *node as u32, &mut out)?;
            }
            Restored::Pages(out)
        }
        Undo::Collapse { pid, ranges } => match crate::split::supported(fs) {
            Ok(()) => {
                let o = crate::split::split(fs, *pid, ranges).map_err(|source| Error::Syscall {
                    call: "write",
                    target: format!("{} for pid {pid}", crate::split::SPLIT_HUGE_PAGES),
                    source,
                })?;
                let left = if o.left > 0 {
                    format!(
                        "; {} kB of them still in huge pages after {} passes (in use while split)",
                        o.left >> 10,
                        o.passes
                    )
                } else {
                    String::new()
                };
                Restored::Split {
                    what: format!(
                        "{} range(s) of pid {pid} ({} MiB) split back into small pages{left}",
                        o.ranges,
                        o.bytes >> 20
                    ),
                }
            }
            Err(why) if crate::split::cold_covers(fs, *pid, ranges) => {
                let o = match crate::split::split_cold(fs, *pid, ranges) {
                    Ok(o) => o,
                    Err(e) if e.is_vanished() => {
                        return Ok(Restored::Irreversible {
                            what: format!("pid {pid} has exited: its huge pages went with it"),
                        });
                    }
                    Err(e) => return Err(e),
                };
                let left = if o.left > 0 {
                    format!(
                        "; {} kB of them still in huge pages after {} passes (in use while split)",
                        o.left >> 10,
                        o.passes
                    )
                } else {
                    String::new()
                };
                Restored::Split {
                    what: format!(
                        "{} range(s) of private memory of pid {pid} ({} MiB) split back into small pages by MADV_COLD (debugfs: {why}){left}",
                        o.ranges,
                        o.bytes >> 20
                    ),
                }
            }
            Err(why) => Restored::Irreversible {
                what: format!(
                    "{} collapsed range(s) of pid {pid}: huge pages are not split back ({why})",
                    ranges.len()
                ),
            },
        },
        Undo::Sysfs { rel, previous } => {
            write_knob(fs, rel, previous)?;
            Restored::Knob {
                rel: rel.clone(),
                value: read_knob(fs, rel)?,
            }
        }
        Undo::ScratchFs { backing, mount } => {
            require_live(fs, "umount")?;
            Restored::ScratchFs {
                what: scratchfs::remove(backing, mount)?,
            }
        }
    })
}
