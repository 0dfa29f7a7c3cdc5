//! Large pages: promote the large anonymous and shared-memory ranges of workloads above a CPU
//! and memory threshold to transparent huge pages with `process_madvise(MADV_COLLAPSE)`, paced.
//! Splitting collapsed memory back costs a collapse again, and where neither debugfs nor the
//! cold split (private memory only, `sys::split`) allows it "revert" is to stop and remember.
//!
//! Shared memory (System V, POSIX, and shared anonymous memory such as PostgreSQL's buffer
//! pool) lives in a tmpfs object whose page cache holds huge pages at aligned offsets, so a
//! huge page can be collapsed only where the mapping's address and offset agree modulo the
//! huge-page size. The kernel maps shared memory so only when shmem huge pages were allowed
//! (`shmem_enabled` not `never`) at the time; memory mapped before is not proposed, and the
//! skip reason ([`Misaligned`]) says what would make it possible.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use perfpilot_sys::change::Change;
use perfpilot_sys::process::{MapRange, MappingKind};
use perfpilot_units as units;

use super::{Context, Proposal, Strategy, StrategyKind, View, skip};

/// The huge-page size promoted to.
pub const HUGE: u64 = 2 << 20;

/// The shmem THP knob.
pub const SHMEM_ENABLED: &str = "sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// The shmem THP setting that refuses collapse outright.
const SHMEM_DENY: &str = "deny";

/// The shmem THP setting under which the kernel does not align shared memory it maps.
pub const SHMEM_NEVER: &str = "never";

/// The large-pages strategy.
pub struct LargePages;

/// A workload's shared memory that is mapped where no huge page of it can be collapsed, and
/// what would make it possible: its [`Display`](fmt::Display) is the skip reason `status` and
/// the log show.
#[derive(Debug, Clone, PartialEq)]
pub struct Misaligned {
    /// Bytes of shared memory so mapped (each object once).
    pub bytes: u64,
    /// The largest such object: `/dev/zero`, `/memfd:NAME`, `/dev/shm/NAME` or a System V
    /// segment.
    pub object: String,
    /// A process mapping it.
    pub pid: i32,
    /// That process's command name.
    pub comm: String,
    /// How many bytes past a huge-page boundary (relative to its offset) it is mapped.
    pub off_by: u64,
    /// `shmem_enabled` now.
    pub shmem_enabled: Option<String>,
}

impl Misaligned {
    /// How the server can give the memory its own huge pages (hugetlbfs), by what it is.
    pub fn own_huge_pages(&self) -> &'static str {
        match self.comm.as_str() {
            "postgres" | "postmaster" => {
                "PostgreSQL: huge_pages = on, with vm.nr_hugepages reserved"
            }
            _ => "map it with MAP_HUGETLB or from a hugetlbfs file",
        }
    }
}

impl fmt::Display for Misaligned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "its {} MiB of shared memory ({}, mapped by {} {}) starts {} bytes off a huge-page boundary, so none of it can be collapsed: it was mapped while shmem_enabled was `never` (the kernel aligns shared memory only where huge pages are allowed); ",
            units::count(self.bytes >> 20),
            self.object,
            self.comm,
            self.pid,
            units::count(self.off_by)
        )?;
        match self.shmem_enabled.as_deref() {
            Some(SHMEM_NEVER) | None => write!(
                f,
                "set shmem_enabled to `advise` (the tunable shmem_advise_at_start does so when the daemon starts) and restart the server"
            )?,
            Some(now) => write!(f, "restart the server now that shmem_enabled is `{now}`")?,
        }
        write!(
            f,
            ", or give it its own huge pages ({}); expected gain for databases 4–15 %",
            self.own_huge_pages()
        )
    }
}

/// A shared-memory object as mapped: the same object at the same offset and length is
/// collapsed once, through the first member mapping it where it can be.
type ObjectKey = (String, u64, u64, u64);

fn object_key(r: &MapRange) -> ObjectKey {
    (format!("{:?}", r.kind), r.inode, r.offset, r.len())
}

/// The name of the object a shared range maps, for people.
fn object_name(kind: &MappingKind) -> String {
    match kind {
        MappingKind::SysvShm { key } => format!("System V segment {key:#x}"),
        MappingKind::PosixShm { path } => path.clone(),
        MappingKind::SharedAnon { object } => object.clone(),
        MappingKind::Anon => "anonymous memory".into(),
        MappingKind::File { path } => path.clone(),
    }
}

/// What a workload's ranges hold for promotion.
#[derive(Debug, Default)]
struct Plan {
    /// The collapse steps, each at most one pacing step long.
    changes: Vec<Change>,
    /// Private bytes in them.
    anon_bytes: u64,
    /// Shared bytes in them.
    shm_bytes: u64,
    /// Shared memory that cannot be collapsed where it is mapped.
    misaligned: Option<Misaligned>,
}

/// Cuts the collapsible huge pages of the workload's ranges into steps of `step` bytes.
fn plan(
    v: &View,
    maps: &HashMap<i32, Vec<MapRange>>,
    step: u64,
    shmem_enabled: Option<&str>,
) -> Plan {
    let shmem_ok = shmem_enabled != Some(SHMEM_DENY);
    let mut p = Plan::default();
    let mut collapsed = BTreeSet::new();
    // Misaligned objects, with the oldest process seen mapping them (the server's main one,
    // for a forked server) and how far off.
    let mut off: BTreeMap<ObjectKey, (u64, i32, MappingKind, u64)> = BTreeMap::new();
    for m in &v.w.members {
        let Some(ranges) = maps.get(&m.pid) else {
            continue;
        };
        let mut chunk: Vec<(u64, u64)> = Vec::new();
        let mut chunk_len = 0;
        for r in ranges {
            let private = r.is_private_anon();
            let shared = shmem_ok && r.is_shared_memory();
            if !(private || shared) {
                continue;
            }
            let key = (!private).then(|| object_key(r));
            if key.as_ref().is_some_and(|k| collapsed.contains(k)) {
                continue;
            }
            let Some((start, end)) = r.collapsible(HUGE) else {
                if let Some(k) = key
                    && r.len() >= HUGE
                {
                    let seen = (
                        m.starttime,
                        m.pid,
                        r.kind.clone(),
                        r.huge_misalignment(HUGE),
                    );
                    let e = off.entry(k).or_insert_with(|| seen.clone());
                    if (seen.0, seen.1) < (e.0, e.1) {
                        *e = seen;
                    }
                }
                continue;
            };
            if let Some(k) = key {
                collapsed.insert(k);
            }
            let mut a = start;
            while a < end {
                let len = (end - a).min(step - chunk_len);
                chunk.push((a, len));
                chunk_len += len;
                if private {
                    p.anon_bytes += len
                } else {
                    p.shm_bytes += len
                }
                a += len;
                if chunk_len >= step {
                    p.changes.push(Change::Collapse {
                        pid: m.pid,
                        ranges: std::mem::take(&mut chunk),
                    });
                    chunk_len = 0;
                }
            }
        }
        if !chunk.is_empty() {
            p.changes.push(Change::Collapse {
                pid: m.pid,
                ranges: chunk,
            });
        }
    }
    // An object another member maps aligned is collapsed through that one.
    off.retain(|k, _| !collapsed.contains(k));
    if let Some((_, (_, pid, kind, off_by))) = off.iter().max_by_key(|(k, _)| k.3) {
        p.misaligned = Some(Misaligned {
            bytes: off.keys().map(|k| k.3).sum(),
            object: object_name(kind),
            pid: *pid,
            comm: v.w.comm.clone(),
            off_by: *off_by,
            shmem_enabled: shmem_enabled.map(str::to_string),
        });
    }
    p
}

impl Strategy for LargePages {
    fn kind(&self) -> StrategyKind {
        StrategyKind::LargePages
    }

    fn propose(&self, v: &View, ctx: &Context) -> Proposal {
        if !ctx.collapse_supported {
            return skip("this kernel has no process_madvise(MADV_COLLAPSE) (Linux >= 6.1)");
        }
        let min_cpu = ctx.tun.min_cpu_cores;
        let min_mem = ctx.tun.min_memory_bytes();
        if v.w.cpu_cores < min_cpu {
            return skip(format!(
                "uses {:.2} cores, under min_cpu_cores {min_cpu}",
                v.w.cpu_cores
            ));
        }
        let (Some(mem), Some(maps)) = (v.memory, v.maps) else {
            return skip("memory placement not read yet");
        };
        if mem.total() < min_mem {
            return skip(format!(
                "holds {} MiB, under min_memory_mib {}",
                mem.total() >> 20,
                min_mem >> 20
            ));
        }
        let shmem_enabled = ctx.thp.shmem_enabled.as_deref();
        let shmem_ok = shmem_enabled != Some(SHMEM_DENY);
        let shm_total: u64 = mem.shm_per_node.values().sum();
        let huge = mem.anon_huge + mem.shmem_pmd_mapped;
        let candidates = mem.anonymous + if shmem_ok { shm_total } else { 0 };
        let coverage = if candidates == 0 {
            1.0
        } else {
            huge as f64 / candidates as f64
        };
        let target = ctx.tun.huge_coverage_target;
        if coverage >= target {
            return skip(format!(
                "huge-page coverage {:.0} % is at or above {:.0} %",
                coverage * 100.0,
                target * 100.0
            ));
        }
        // Whole huge pages per step.
        let step =
            (((ctx.tun.collapse_mb_per_s * 1e6 * ctx.interval_s) as u64) / HUGE).max(1) * HUGE;
        let Plan {
            mut changes,
            anon_bytes,
            shm_bytes,
            misaligned,
        } = plan(v, maps, step, shmem_enabled);
        let also = |s: String| match &misaligned {
            Some(m) => format!("{s}; {m}"),
            None => s,
        };
        if changes.is_empty() {
            return match misaligned {
                Some(m) => skip(m.to_string()),
                None => skip("no range of at least one huge page"),
            };
        }
        // A trial on less cannot show a gain worth its pages.
        if anon_bytes + shm_bytes < min_mem {
            return skip(also(format!(
                "only {} MiB of it lies in huge pages that can be collapsed, under min_memory_mib {}",
                (anon_bytes + shm_bytes) >> 20,
                min_mem >> 20
            )));
        }
        // Shared memory is collapsed only where shmem THP is allowed on some kernels: raise
        // `never` to `advise`, which changes nothing for a process that has not asked for huge
        // pages; journaled like every change and restored when the action ends.
        if shm_bytes > 0 && shmem_enabled == Some(SHMEM_NEVER) {
            changes.insert(
                0,
                Change::Sysfs {
                    rel: SHMEM_ENABLED.into(),
                    value: "advise".into(),
                },
            );
        }
        Proposal::Act {
            reason: also(format!(
                "promote {} MiB of private and {} MiB of shared memory to huge pages in {} (coverage {:.0} %, target {:.0} %)",
                anon_bytes >> 20,
                shm_bytes >> 20,
                units::counted(changes.len() as u64, "step", "steps"),
                coverage * 100.0,
                target * 100.0
            )),
            changes,
            cheap_undo: false,
            irreversible: true,
        }
    }
}

#[cfg(test)]
mod tests;
