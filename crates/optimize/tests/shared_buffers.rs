//! PostgreSQL's shared buffer pool and huge pages, on the real kernel (root only): a cluster
//! started while `shmem_enabled` is `never` maps its pool off a huge-page boundary, and the
//! large-pages strategy says what would make it possible instead of acting; one started while
//! it is `advise` maps it aligned, and a huge page of it collapses.

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::Duration;

use perfpilot_observe::workload::{self, Workload, WorkloadMemory};
use perfpilot_observe::{Rates, Sampler, SamplerConfig, Topology};
use perfpilot_optimize::strategy::{Context, LargePages, Proposal, SHMEM_ENABLED, Strategy, View};
use perfpilot_optimize::tunables::Tunables;
use perfpilot_sys::Fs;
use perfpilot_sys::change::Change;
use perfpilot_sys::collapse::{CollapseFailure, collapse, kernel_supports_collapse};
use perfpilot_sys::knob::{read_knob, write_knob};
use perfpilot_sys::process::{MapRange, MappingKind, ProcReader};
use perfpilot_testkit as kit;

const HUGE: u64 = 2 << 20;

/// Puts `shmem_enabled` back as it was when dropped (also when the test panics).
struct ShmemGuard {
    fs: Fs,
    was: String,
}

impl ShmemGuard {
    fn take(fs: &Fs) -> ShmemGuard {
        let was = read_knob(fs, SHMEM_ENABLED).expect("shmem_enabled readable");
        ShmemGuard {
            fs: fs.clone(),
            was,
        }
    }

    fn set(&self, value: &str) {
        write_knob(&self.fs, SHMEM_ENABLED, value).expect("writing shmem_enabled as root");
        assert_eq!(read_knob(&self.fs, SHMEM_ENABLED).unwrap(), value);
    }
}

impl Drop for ShmemGuard {
    fn drop(&mut self) {
        if let Err(e) = write_knob(&self.fs, SHMEM_ENABLED, &self.was) {
            eprintln!("could not restore shmem_enabled to {}: {e}", self.was);
        }
    }
}

/// A throw-away cluster with a 256 MiB pool (`huge_pages = off`, the default where no huge
/// pages are reserved), its pool mapped under whatever `shmem_enabled` says now.
fn start_cluster() -> Cluster {
    Cluster(kit::start_postgres_with(&[
        ("shared_buffers", "256MB"),
        ("huge_pages", "off"),
    ]))
}

/// The testkit's server, with what these tests ask of it.
struct Cluster(kit::ServerProcess);

impl Cluster {
    fn pid(&self) -> i32 {
        self.0.pid() as i32
    }

    /// Runs SQL through psql over loopback TCP (trusted by the testkit's cluster).
    fn sql(&self, sql: &str) -> String {
        let out = Command::new(kit::require("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.0.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres"])
            .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

/// The postmaster's `/dev/zero` buffer pool (the largest shared anonymous range).
fn pool(fs: &Fs, pid: i32) -> MapRange {
    ProcReader::new(fs)
        .maps(pid)
        .unwrap()
        .into_iter()
        .filter(|r| {
            r.is_shared_memory()
                && r.kind
                    == MappingKind::SharedAnon {
                        object: "/dev/zero".into(),
                    }
        })
        .max_by_key(|r| r.len())
        .expect("postgres maps its buffer pool as /dev/zero")
}

/// The cluster as the daemon sees it: grouped from two samples by the shared memory its
/// processes map, with its memory placement and maps read.
fn as_workload(fs: &Fs, c: &Cluster) -> (Workload, WorkloadMemory, HashMap<i32, Vec<MapRange>>) {
    let mut sampler = Sampler::new(fs, SamplerConfig::default());
    let prev = sampler.sample().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let cur = sampler.sample().unwrap();
    let rates = Rates::between(&prev, &cur).unwrap();
    let mut reader = ProcReader::new(fs);
    // Only the cluster's processes (the test acts on nothing else).
    let shm: HashMap<i32, _> = cur
        .processes
        .iter()
        .filter(|p| p.pid == c.pid() || p.ppid == c.pid())
        .filter_map(|p| Some((p.pid, reader.shm_attachments(p.pid).ok()?)))
        .collect();
    let w = workload::group(&cur, &rates, &shm)
        .into_iter()
        .find(|w| w.pids().contains(&c.pid()))
        .expect("the cluster is a workload");
    let mut readings = Vec::new();
    let mut maps = HashMap::new();
    for m in &w.members {
        if let Ok(r) = sampler.memory_of(m.pid, m.starttime) {
            readings.push(r);
        }
        if let Ok(r) = reader.maps(m.pid) {
            maps.insert(m.pid, r);
        }
    }
    (w, WorkloadMemory::of(readings.iter()), maps)
}

/// What the large-pages strategy proposes for the cluster, thresholds at zero.
fn propose(
    fs: &Fs,
    w: &Workload,
    mem: &WorkloadMemory,
    maps: &HashMap<i32, Vec<MapRange>>,
) -> Proposal {
    let topo = Topology::read(fs).unwrap();
    let mut tun = Tunables::default();
    tun.set("min_cpu_cores", "0").unwrap();
    tun.set("min_memory_mib", "0").unwrap();
    let thp = perfpilot_sys::stat::read_thp(fs).unwrap();
    let busy = BTreeMap::new();
    let ctx = Context {
        topo: &topo,
        tun: &tun,
        cpu_busy: &busy,
        thp: &thp,
        collapse_supported: true,
        interval_s: 1.0,
        page_size: 4096,
    };
    let v = View {
        w,
        memory: Some(mem),
        maps: Some(maps),
        bound_to: None,
    };
    LargePages.propose(&v, &ctx)
}

/// Whether a proposal collapses anything inside `r`.
fn touches(p: &Proposal, r: &MapRange) -> bool {
    let Proposal::Act { changes, .. } = p else {
        return false;
    };
    changes.iter().any(|c| match c {
        Change::Collapse { ranges, .. } => ranges.iter().any(|&(s, _)| s >= r.start && s < r.end),
        Change::Sysfs { .. } => true,
        _ => false,
    })
}

/// Fills the buffer pool with a table's pages.
fn touch_buffers(c: &Cluster) {
    c.sql("CREATE EXTENSION IF NOT EXISTS pg_prewarm");
    c.sql("CREATE TABLE t AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 200000) g");
    let pages: u64 = c.sql("SELECT pg_prewarm('t')").parse().unwrap();
    assert!(pages > 1000, "prewarmed {pages} pages");
}

/// Why the test cannot run here, if it cannot.
fn cannot_run(fs: &Fs) -> Option<String> {
    if !perfpilot_sys::user::is_root() {
        return Some("needs root (it writes shmem_enabled and starts postgres as its user)".into());
    }
    if kit::find("initdb").is_none() {
        return Some("PostgreSQL is not installed (scripts/install-deps)".into());
    }
    if !kernel_supports_collapse() {
        return Some("this kernel has no MADV_COLLAPSE".into());
    }
    if read_knob(fs, SHMEM_ENABLED).is_err() {
        return Some("no /sys/kernel/mm/transparent_hugepage/shmem_enabled".into());
    }
    None
}

#[test]
fn a_buffer_pool_mapped_under_never_is_explained_and_one_mapped_under_advise_collapses() {
    let fs = Fs::live();
    if let Some(why) = cannot_run(&fs) {
        eprintln!("skipped: {why}");
        return;
    }
    let guard = ShmemGuard::take(&fs);

    // Started while shmem_enabled is `never`: the pool is mapped wherever mmap put it.
    guard.set("never");
    let before = start_cluster();
    let p = pool(&fs, before.pid());
    assert!(p.len() >= 256 << 20, "{p:?}");
    let off = p.huge_misalignment(HUGE);
    // The daemon raised the knob since: the server needs a restart.
    guard.set("advise");
    if off == 0 {
        // One chance in 512: nothing to explain for this one.
        eprintln!("the pool happened to be mapped on a huge-page boundary under `never`");
    } else {
        assert_eq!(p.collapsible(HUGE), None);
        let (w, mem, maps) = as_workload(&fs, &before);
        assert!(w.members.len() >= 3, "postgres and its children: {w:?}");
        assert!(
            w.signature.ends_with("-shm"),
            "grouped by its shared memory"
        );
        let shm_total: u64 = mem.shm_per_node.values().sum();
        assert!(
            shm_total > 0,
            "the pool's resident pages count as shared memory"
        );
        let proposal = propose(&fs, &w, &mem, &maps);
        let why = match &proposal {
            Proposal::Skip(s) => s.clone(),
            Proposal::Act { reason, .. } => reason.clone(),
        };
        eprintln!("never: {why}");
        assert!(!touches(&proposal, &p), "{proposal:?}");
        for fact in [
            format!(
                "of shared memory (/dev/zero, mapped by postgres {})",
                before.pid()
            ),
            format!(
                "starts {} bytes off a huge-page boundary",
                perfpilot_units::count(off)
            ),
            "restart the server now that shmem_enabled is `advise`".into(),
            "PostgreSQL: huge_pages = on".into(),
        ] {
            assert!(why.contains(&fact), "{fact:?} not in {why:?}");
        }
    }
    drop(before);

    // Started while it is `advise`: aligned, and a huge page of it collapses.
    let after = start_cluster();
    let p = pool(&fs, after.pid());
    assert_eq!(p.huge_misalignment(HUGE), 0, "{p:?}");
    let (first, end) = p.collapsible(HUGE).expect("whole huge pages in the pool");
    assert!(end - first >= 254 << 20);
    touch_buffers(&after);
    let (w, mem, maps) = as_workload(&fs, &after);
    let proposal = propose(&fs, &w, &mem, &maps);
    let Proposal::Act {
        reason, changes, ..
    } = &proposal
    else {
        panic!("the aligned pool is proposed: {proposal:?}")
    };
    eprintln!("advise: {reason}");
    assert!(!reason.contains("off a huge-page boundary"), "{reason}");
    assert!(touches(&proposal, &p), "{changes:?}");
    let o = collapse(after.pid(), &[(first, HUGE)]).expect("process_madvise");
    if let Some(f) = o.failed.first() {
        if f.reason == CollapseFailure::NoMemory {
            eprintln!("skipped the collapse: no free huge page on this machine now ({f})");
            return;
        }
        panic!("collapsing the first huge page of the pool failed: {f}");
    }
    assert_eq!(o.bytes_ok, HUGE);
    let rollup = ProcReader::new(&fs).smaps_rollup(after.pid()).unwrap();
    assert!(
        rollup.shmem_pmd_mapped >= HUGE,
        "the postmaster maps it by a huge page: {rollup:?}"
    );
}
