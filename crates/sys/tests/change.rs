//! The system-changing primitives, on this machine: affinity, move_pages, MADV_COLLAPSE and
//! sysfs knobs. Every test acts only on processes it spawned (a re-exec of this test binary,
//! see [`child_process`]) and restores every global setting it touched in a guard that also
//! runs on panic.

#![allow(unsafe_code)] // tests call libc directly to set up and inspect the processes they spawn

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

use perfpilot_sys::change::{self, Applied, Change, Restored, Undo};
use perfpilot_sys::collapse::{CollapseFailure, kernel_supports_collapse};
use perfpilot_sys::knob::{read_knob, write_knob};
use perfpilot_sys::{CpuSet, Fs, affinity, pages, process::ProcReader};

const CHILD_ENV: &str = "PERFPILOT_SYS_TEST_CHILD";
const THP: &str = "sys/kernel/mm/transparent_hugepage";

/// Tests that change one global THP knob hold this, so two of them never race on it.
static THP_LOCK: Mutex<()> = Mutex::new(());

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Not a test: the body of the child process the other tests spawn. With `CHILD_ENV` set to
/// `threads,mib,shm_mib` it starts `threads` sleeping threads, maps and touches `mib` MiB of
/// private anonymous memory (no MADV_HUGEPAGE) and `shm_mib` MiB of shared anonymous memory,
/// prints `CHILD anon=<addr> shm=<addr>` and `ready`, then waits for stdin to close.
#[test]
#[ignore = "helper: the child process of the other tests"]
fn child_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let v: Vec<usize> = spec.split(',').map(|s| s.parse().unwrap()).collect();
    let (threads, mib, shm_mib) = (v[0], v[1], v[2]);
    for _ in 0..threads {
        std::thread::spawn(|| {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        });
    }
    let map = |mib: usize, flags: libc::c_int| -> u64 {
        if mib == 0 {
            return 0;
        }
        let len = mib << 20;
        // SAFETY: a fresh anonymous mapping, touched only within its length.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let p = p.cast::<u8>();
            for off in (0..len).step_by(4096) {
                p.add(off).write_volatile(1);
            }
            p as u64
        }
    };
    let anon = map(mib, libc::MAP_PRIVATE);
    // Shared memory at a 2 MiB-aligned address, so that address and file offset agree modulo
    // the huge page size (the kernel aligns it only when shmem THP is on at mmap time).
    let shm = if shm_mib == 0 {
        0
    } else {
        let huge = 2usize << 20;
        // SAFETY: reserves an address range, then maps the shared memory over its aligned
        // part with MAP_FIXED (replacing only the reservation made here).
        unsafe {
            let r = libc::mmap(
                std::ptr::null_mut(),
                (shm_mib << 20) + huge,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            assert_ne!(r, libc::MAP_FAILED);
            let aligned = (r as usize).div_ceil(huge) * huge;
            let p = libc::mmap(
                aligned as *mut libc::c_void,
                shm_mib << 20,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            assert_eq!(p as usize, aligned);
            let p = p.cast::<u8>();
            for off in (0..shm_mib << 20).step_by(4096) {
                p.add(off).write_volatile(1);
            }
            p as u64
        }
    };
    // Wait until the threads exist, so the parent sees them all.
    while std::fs::read_dir("/proc/self/task").unwrap().count() < threads + 1 {
        std::thread::yield_now();
    }
    println!("\nCHILD anon={anon} shm={shm}\nready");
    std::io::stdout().flush().unwrap();
    let mut s = String::new();
    while std::io::stdin()
        .read_line(&mut s)
        .map(|n| n > 0)
        .unwrap_or(false)
    {}
    std::process::exit(0);
}

/// A spawned child; killed and reaped on drop.
struct Kid {
    child: Child,
    _stdin: ChildStdin,
    pid: i32,
    anon: u64,
    shm: u64,
}

impl Kid {
    fn spawn(threads: usize, mib: usize, shm_mib: usize) -> Kid {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_process",
                "--nocapture",
                "--include-ignored",
            ])
            .env(CHILD_ENV, format!("{threads},{mib},{shm_mib}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let pid = child.id() as i32;
        let mut kid = Kid {
            child,
            _stdin: stdin,
            pid,
            anon: 0,
            shm: 0,
        };
        let out = BufReader::new(kid.child.stdout.take().unwrap());
        for line in out.lines() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("CHILD ") {
                for kv in rest.split_whitespace() {
                    let (k, v) = kv.split_once('=').unwrap();
                    let v: u64 = v.parse().unwrap();
                    match k {
                        "anon" => kid.anon = v,
                        "shm" => kid.shm = v,
                        _ => {}
                    }
                }
            }
            if line == "ready" {
                return kid;
            }
        }
        panic!("child exited before it was ready");
    }

    fn tids(&self) -> Vec<i32> {
        let mut t: Vec<i32> = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
            .collect();
        t.sort();
        t
    }

    fn anon_huge(&self) -> u64 {
        ProcReader::new(&Fs::live())
            .smaps_rollup(self.pid)
            .unwrap()
            .anon_huge
    }

    fn shmem_pmd(&self) -> u64 {
        ProcReader::new(&Fs::live())
            .smaps_rollup(self.pid)
            .unwrap()
            .shmem_pmd_mapped
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pid of a process that has exited and been reaped (a "vanished" id).
fn dead_pid() -> i32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id() as i32;
    c.wait().unwrap();
    pid
}

/// Sets a knob for the duration of a test; restores the previous value on drop (also on panic).
struct KnobGuard {
    rel: String,
    previous: String,
}

impl KnobGuard {
    fn set(rel: &str, value: &str) -> KnobGuard {
        let fs = Fs::live();
        let previous = read_knob(&fs, rel).unwrap();
        let g = KnobGuard {
            rel: rel.to_string(),
            previous,
        };
        write_knob(&fs, rel, value).unwrap();
        g
    }
}

impl Drop for KnobGuard {
    fn drop(&mut self) {
        let fs = Fs::live();
        if let Err(e) = write_knob(&fs, &self.rel, &self.previous) {
            eprintln!("could not restore {} to {}: {e}", self.rel, self.previous);
        }
    }
}

fn cpus_allowed_list(pid: i32, tid: i32) -> CpuSet {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    CpuSet::parse(line).unwrap()
}

#[test]
fn affinity_prepare_apply_undo() {
    let kid = Kid::spawn(4, 1, 0);
    let tids = kid.tids();
    // main thread, the libtest thread running child_process, 4 sleepers
    assert!(tids.len() >= 5, "{tids:?}");
    let nt = tids.len();
    let before: Vec<CpuSet> = tids
        .iter()
        .map(|&t| affinity::get_affinity(t).unwrap())
        .collect();
    for (&t, m) in tids.iter().zip(&before) {
        assert_eq!(&cpus_allowed_list(kid.pid, t), m);
    }
    let one: CpuSet = [before[0].iter().last().unwrap()].into_iter().collect();
    let gone = dead_pid();
    let mut list = tids.clone();
    list.push(gone);
    let c = Change::Affinity {
        pid: kid.pid,
        tids: list,
        cpus: one.clone(),
    };
    let fs = Fs::live();
    let u = change::prepare(&fs, &c).unwrap();
    let Undo::Affinity { pid, masks } = &u else {
        panic!("{u:?}")
    };
    assert_eq!(*pid, kid.pid);
    assert_eq!(
        masks,
        &tids.iter().copied().zip(before.clone()).collect::<Vec<_>>(),
        "the vanished tid is not recorded"
    );

    let a = change::apply(&fs, &c).unwrap();
    let Applied::Affinity(o) = &a else {
        panic!("{a:?}")
    };
    assert_eq!((o.set, o.vanished), (nt, 1));
    for &t in &tids {
        assert_eq!(affinity::get_affinity(t).unwrap(), one);
        assert_eq!(cpus_allowed_list(kid.pid, t), one);
    }

    // A mask with no online CPU is an error naming the call and the thread.
    let err = affinity::set_affinity(tids[1], &CpuSet::parse("4000").unwrap()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("sched_setaffinity") && msg.contains(&format!("tid {}", tids[1])),
        "{msg}"
    );
    assert!(!err.is_vanished());
    assert!(affinity::get_affinity(gone).unwrap_err().is_vanished());

    let r = change::undo(&fs, &u).unwrap();
    let Restored::Affinity(o) = &r else {
        panic!("{r:?}")
    };
    assert_eq!((o.set, o.vanished), (nt, 0));
    for (&t, m) in tids.iter().zip(&before) {
        assert_eq!(&affinity::get_affinity(t).unwrap(), m);
        assert_eq!(&cpus_allowed_list(kid.pid, t), m);
    }
    eprintln!("affinity: {before:?} -> {one} -> restored; {o:?}");
}

#[test]
fn move_pages_query_move_and_undo() {
    let kid = Kid::spawn(0, 4, 0);
    let page = perfpilot_sys::page_size();
    let mut addrs: Vec<u64> = (0..(4u64 << 20) / page)
        .map(|i| kid.anon + i * page)
        .collect();
    let n = addrs.len() as u64;
    // A page that is not mapped (just past the end of the mapping, which is followed by a
    // guard or another mapping only rarely: check it with the kernel's answer).
    let unmapped = 8u64 << 12; // below mmap_min_addr: never mapped
    addrs.push(unmapped);

    let nodes = pages::page_nodes(kid.pid, &addrs).unwrap();
    assert!(nodes[..n as usize].iter().all(|&s| s == 0), "{nodes:?}");
    assert_eq!(nodes[n as usize], -libc::EFAULT);

    let fs = Fs::live();
    let c = Change::MovePages {
        pid: kid.pid,
        pages: addrs.clone(),
        node: 0,
    };
    let u = change::prepare(&fs, &c).unwrap();
    let Undo::Pages { previous, .. } = &u else {
        panic!("{u:?}")
    };
    assert_eq!(previous.len(), addrs.len());
    assert_eq!(previous[n as usize], (unmapped, -libc::EFAULT));

    let a = change::apply(&fs, &c).unwrap();
    let Applied::Pages(o) = &a else {
        panic!("{a:?}")
    };
    assert_eq!(o.moved, n);
    assert_eq!(o.failed, vec![(libc::EFAULT, 1)]);
    let st = pages::move_pages(kid.pid, &addrs[..16], 0).unwrap();
    assert_eq!(st, vec![0; 16]);

    // A node that does not exist: an error naming move_pages and the node.
    let nodes_online = std::fs::read_to_string("/sys/devices/system/node/online").unwrap();
    let bad = CpuSet::parse(&nodes_online).unwrap().iter().last().unwrap() + 1;
    match pages::move_pages(kid.pid, &addrs[..16], bad) {
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("move_pages") && msg.contains(&format!("node {bad}")),
                "{msg}"
            );
            eprintln!("move to node {bad}: {msg}");
        }
        Ok(st) => assert!(st.iter().all(|&s| s == -libc::ENODEV || s == -libc::EINVAL)),
    }

    let r = change::undo(&fs, &u).unwrap();
    let Restored::Pages(o) = &r else {
        panic!("{r:?}")
    };
    assert_eq!(
        (o.moved, o.skipped, o.failed_total(), o.vanished),
        (n, 1, 0, 0)
    );
    let after = pages::page_nodes(kid.pid, &addrs).unwrap();
    assert_eq!(after, nodes);
}

#[test]
fn collapse_promotes_anonymous_memory() {
    if !is_root() {
        eprintln!("skipped: needs root (CAP_SYS_NICE, THP sysfs)");
        return;
    }
    assert!(kernel_supports_collapse(), "kernel 6.18 has MADV_COLLAPSE");
    let _lock = THP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let enabled = format!("{THP}/enabled");
    let fs = Fs::live();
    // With `madvise`, the child's memory (not madvised) is faulted in small pages.
    let _guard = (read_knob(&fs, &enabled).unwrap() != "madvise")
        .then(|| KnobGuard::set(&enabled, "madvise"));

    let kid = Kid::spawn(0, 64, 0);
    let before = kid.anon_huge();
    assert!(before < 4 << 20, "AnonHugePages before: {before}");

    let c = Change::Collapse {
        pid: kid.pid,
        ranges: vec![(kid.anon, 64 << 20)],
    };
    let u = change::prepare(&fs, &c).unwrap();
    assert_eq!(
        u,
        Undo::Collapse {
            pid: kid.pid,
            ranges: vec![(kid.anon, 64 << 20)]
        }
    );
    let a = change::apply(&fs, &c).unwrap();
    let after = kid.anon_huge();
    eprintln!(
        "collapse: AnonHugePages {} kB -> {} kB; {a:?}",
        before >> 10,
        after >> 10
    );
    assert!(after >= 32 << 20, "AnonHugePages after: {after}");
    let Applied::Collapse(o) = &a else {
        panic!("{a:?}")
    };
    // The mapping is rarely 2 MiB aligned, so its unaligned head and tail cannot be
    // collapsed: the range may report EINVAL while its aligned body was collapsed.
    assert_eq!(o.vanished_bytes, 0);
    assert!(o.bytes_ok == 64 << 20 || o.failed.len() == 1, "{o:?}");

    // Only the aligned part, in many small ranges, batched into one call.
    let huge = 2u64 << 20;
    let first = kid.anon.div_ceil(huge) * huge;
    let ranges: Vec<(u64, u64)> = (0..30).map(|i| (first + i * huge, huge)).collect();
    let o = perfpilot_sys::collapse::collapse(kid.pid, &ranges).unwrap();
    assert_eq!(
        (o.ranges_ok, o.bytes_ok, o.failed.len()),
        (30, 30 * huge, 0)
    );

    // An unmapped range fails with ENOMEM, counted; the others still succeed.
    let o = perfpilot_sys::collapse::collapse(kid.pid, &[(huge, huge), (first, huge)]).unwrap();
    assert_eq!(o.ranges_ok, 1);
    assert_eq!(o.failed.len(), 1);
    assert_eq!(o.failed[0].reason, CollapseFailure::NoMemory, "{o:?}");

    // Undone: private memory is split back into small pages (through debugfs where the kernel
    // allows it, else by MADV_COLD).
    assert!(perfpilot_sys::split::cold_covers(
        &fs,
        kid.pid,
        &[(kid.anon, 64 << 20)]
    ));
    let r = change::undo(&fs, &u).unwrap();
    assert!(matches!(r, Restored::Split { .. }), "{r:?}");
    assert_eq!(kid.anon_huge(), 0, "{r:?}");
}

#[test]
fn cold_advice_over_all_but_the_first_small_page_splits_collapsed_private_memory_back() {
    if !is_root() {
        eprintln!("skipped: needs root (CAP_SYS_NICE, THP sysfs)");
        return;
    }
    let _lock = THP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let enabled = format!("{THP}/enabled");
    let fs = Fs::live();
    let _guard = (read_knob(&fs, &enabled).unwrap() != "madvise")
        .then(|| KnobGuard::set(&enabled, "madvise"));
    let kid = Kid::spawn(0, 64, 0);
    let ranges = [(kid.anon, 64u64 << 20)];
    perfpilot_sys::collapse::collapse(kid.pid, &ranges).unwrap();
    let collapsed = kid.anon_huge();
    assert!(
        collapsed >= 32 << 20,
        "AnonHugePages after the collapse: {collapsed}"
    );
    let o = perfpilot_sys::split::split_cold(&fs, kid.pid, &ranges).unwrap();
    eprintln!("cold split: {} kB huge -> {o:?}", collapsed >> 10);
    assert_eq!((o.left, kid.anon_huge()), (0, 0), "{o:?}");
    // The split is undone in turn by collapsing again.
    perfpilot_sys::collapse::collapse(kid.pid, &ranges).unwrap();
    assert_eq!(kid.anon_huge(), collapsed);
}

#[test]
fn collapse_of_shmem_follows_shmem_enabled() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let _lock = THP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let rel = format!("{THP}/shmem_enabled");
    let huge = 2u64 << 20;
    let kid = Kid::spawn(0, 0, 16);
    let first = kid.shm.div_ceil(huge) * huge;
    let ranges = [(first, 4 * huge)];
    // `deny` refuses shared memory: EINVAL per range, with a reason that says so.
    {
        let _g = KnobGuard::set(&rel, "deny");
        let o = perfpilot_sys::collapse::collapse(kid.pid, &ranges).unwrap();
        eprintln!("shmem collapse with shmem_enabled=deny: {o:?}");
        assert_eq!(o.ranges_ok, 0, "{o:?}");
        assert_eq!(o.failed[0].errno, libc::EINVAL);
        assert_eq!(o.failed[0].reason, CollapseFailure::Ineligible);
        eprintln!("  reported as: {}", o.failed[0]);
        assert!(o.failed[0].to_string().contains("shmem_enabled"));
        assert_eq!(kid.shmem_pmd(), 0);
    }
    // `never` refuses it on older kernels; 6.18 lets MADV_COLLAPSE through (it is a forced
    // collapse). Either way the outcome is per range, never an error.
    {
        let _g = KnobGuard::set(&rel, "never");
        let o = perfpilot_sys::collapse::collapse(kid.pid, &ranges).unwrap();
        eprintln!(
            "shmem collapse with shmem_enabled=never: {o:?}, ShmemPmdMapped {} kB",
            kid.shmem_pmd() >> 10
        );
        assert!(
            o.ranges_ok == 1 || o.failed[0].reason == CollapseFailure::Ineligible,
            "{o:?}"
        );
    }
    // `advise` lets MADV_COLLAPSE promote it.
    let _g = KnobGuard::set(&rel, "advise");
    let o = perfpilot_sys::collapse::collapse(kid.pid, &ranges).unwrap();
    let pmd = kid.shmem_pmd();
    eprintln!(
        "shmem collapse with shmem_enabled=advise: {o:?}, ShmemPmdMapped {} kB",
        pmd >> 10
    );
    assert_eq!((o.ranges_ok, o.bytes_ok), (1, 4 * huge), "{o:?}");
    assert!(pmd >= 4 * huge, "ShmemPmdMapped {pmd}");
}

#[test]
fn vanished_process_is_counted_not_an_error() {
    let fs = Fs::live();
    let pid = dead_pid();
    let a = change::apply(
        &fs,
        &Change::Affinity {
            pid,
            tids: vec![pid],
            cpus: CpuSet::parse("0").unwrap(),
        },
    )
    .unwrap();
    assert_eq!(
        a,
        Applied::Affinity(change::ThreadsOutcome {
            set: 0,
            vanished: 1
        })
    );
    let a = change::apply(
        &fs,
        &Change::MovePages {
            pid,
            pages: vec![0x10000, 0x20000],
            node: 0,
        },
    )
    .unwrap();
    let Applied::Pages(o) = a else { panic!() };
    assert_eq!((o.moved, o.vanished), (0, 2));
    let a = change::apply(
        &fs,
        &Change::Collapse {
            pid,
            ranges: vec![(0x200000, 0x200000)],
        },
    )
    .unwrap();
    let Applied::Collapse(o) = a else { panic!() };
    assert_eq!((o.ranges_ok, o.vanished_bytes), (0, 0x200000));
    let e = change::prepare(
        &fs,
        &Change::MovePages {
            pid,
            pages: vec![0x10000],
            node: 0,
        },
    )
    .unwrap_err();
    assert!(e.is_vanished(), "{e}");
}

#[test]
fn sysfs_knob_on_a_copy_tree() {
    let dir = tempfile::tempdir().unwrap();
    let rel = format!("{THP}/shmem_enabled");
    let path = dir.path().join(&rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "always within_size advise [never] deny force\n").unwrap();
    let fs = Fs::at(dir.path());
    let c = Change::Sysfs {
        rel: rel.clone(),
        value: "advise".into(),
    };
    let u = change::prepare(&fs, &c).unwrap();
    assert_eq!(
        u,
        Undo::Sysfs {
            rel: rel.clone(),
            previous: "never".into()
        }
    );
    let a = change::apply(&fs, &c).unwrap();
    assert_eq!(
        a,
        Applied::Knob {
            rel: rel.clone(),
            value: "advise".into()
        }
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "advise");
    let r = change::undo(&fs, &u).unwrap();
    assert_eq!(
        r,
        Restored::Knob {
            rel: rel.clone(),
            value: "never".into()
        }
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "never");
    // Syscall changes on a captured tree are refused, naming the root.
    let e = change::apply(
        &fs,
        &Change::Affinity {
            pid: 1,
            tids: vec![1],
            cpus: CpuSet::parse("0").unwrap(),
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("not the live system"), "{e}");
    // A knob that does not exist is an error naming it (it is never created).
    let e = write_knob(&fs, "sys/kernel/mm/nope", "1").unwrap_err();
    assert!(e.to_string().contains("sys/kernel/mm/nope"), "{e}");
    assert!(!dir.path().join("sys/kernel/mm/nope").exists());
}

#[test]
fn sysfs_knob_live_round_trip() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let _lock = THP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let fs = Fs::live();
    let rel = format!("{THP}/shmem_enabled");
    let prev = read_knob(&fs, &rel).unwrap();
    // Restores `prev` even if an assertion below fails.
    let _guard = KnobGuard {
        rel: rel.clone(),
        previous: prev.clone(),
    };
    let value = if prev == "advise" { "never" } else { "advise" };
    let c = Change::Sysfs {
        rel: rel.clone(),
        value: value.into(),
    };
    let u = change::prepare(&fs, &c).unwrap();
    assert_eq!(
        u,
        Undo::Sysfs {
            rel: rel.clone(),
            previous: prev.clone()
        }
    );
    change::apply(&fs, &c).unwrap();
    assert_eq!(read_knob(&fs, &rel).unwrap(), value);
    let text = std::fs::read_to_string(format!("/{rel}")).unwrap();
    assert!(text.contains(&format!("[{value}]")), "{text}");
    let r = change::undo(&fs, &u).unwrap();
    assert_eq!(
        r,
        Restored::Knob {
            rel: rel.clone(),
            value: prev.clone()
        }
    );
    assert_eq!(read_knob(&fs, &rel).unwrap(), prev);

    let e = write_knob(&fs, &rel, "bogus").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("/sys/kernel/mm/transparent_hugepage/shmem_enabled"),
        "{msg}"
    );
    assert!(msg.contains("Invalid argument"), "{msg}");
    assert_eq!(read_knob(&fs, &rel).unwrap(), prev);
    eprintln!("shmem_enabled: {prev} -> {value} -> {prev}; invalid value: {msg}");
}

#[test]
fn cpuset_of_this_process_and_fixture_trees() {
    // This machine: the test runs in the root cpuset, so cpuset is not in use for it.
    let me = std::process::id() as i32;
    let live = affinity::cpuset_of(&Fs::live(), me).unwrap();
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    eprintln!("cpuset_of(self) = {live:?}; /proc/self/cgroup:\n{text}");
    if text.lines().all(|l| l.ends_with(":/")) {
        assert_eq!(live, None);
    }
    assert!(
        affinity::cpuset_of(&Fs::live(), dead_pid())
            .unwrap_err()
            .is_vanished()
    );

    // cgroup v2: the nearest cgroup with cpuset.cpus.effective, walking up.
    let dir = tempfile::tempdir().unwrap();
    let w = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("proc/42/cgroup", "0::/db.slice/pg.service/inner\n");
    w("sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory\n");
    w("sys/fs/cgroup/cpuset.cpus.effective", "0-63\n");
    w("sys/fs/cgroup/db.slice/cpuset.cpus.effective", "0-31\n");
    w(
        "sys/fs/cgroup/db.slice/pg.service/cpuset.cpus.effective",
        "4-7\n",
    );
    std::fs::create_dir_all(dir.path().join("sys/fs/cgroup/db.slice/pg.service/inner")).unwrap();
    w("proc/43/cgroup", "0::/other.slice/x.service\n");
    std::fs::create_dir_all(dir.path().join("sys/fs/cgroup/other.slice/x.service")).unwrap();
    let fs = Fs::at(dir.path());
    assert_eq!(
        affinity::cpuset_of(&fs, 42).unwrap(),
        Some(CpuSet::parse("4-7").unwrap())
    );
    assert_eq!(
        affinity::cpuset_of(&fs, 43).unwrap(),
        None,
        "only the root has it"
    );

    // cgroup v1 (hybrid): the cpuset hierarchy.
    let dir = tempfile::tempdir().unwrap();
    let w = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("proc/7/cgroup", "4:memory:/x\n3:cpuset:/box\n0::/\n");
    w("sys/fs/cgroup/unified/cgroup.controllers", "");
    w("sys/fs/cgroup/cpuset/cpuset.effective_cpus", "0-1\n");
    w("sys/fs/cgroup/cpuset/box/cpuset.effective_cpus", "1\n");
    assert_eq!(
        affinity::cpuset_of(&Fs::at(dir.path()), 7).unwrap(),
        Some(CpuSet::parse("1").unwrap())
    );
}

#[test]
fn change_and_undo_serde_round_trip() {
    let changes = vec![
        Change::Affinity {
            pid: 10,
            tids: vec![10, 11],
            cpus: CpuSet::parse("0-3,8").unwrap(),
        },
        Change::MovePages {
            pid: 10,
            pages: vec![0x7f00_0000_0000, 0x7f00_0000_1000],
            node: 1,
        },
        Change::Collapse {
            pid: 10,
            ranges: vec![(0x7f00_0020_0000, 4 << 20)],
        },
        Change::Sysfs {
            rel: "sys/kernel/mm/transparent_hugepage/shmem_enabled".into(),
            value: "advise".into(),
        },
    ];
    let undos = vec![
        Undo::Affinity {
            pid: 10,
            masks: vec![(10, CpuSet::parse("0-63").unwrap()), (11, CpuSet::new())],
        },
        Undo::Pages {
            pid: 10,
            previous: vec![(0x7f00_0000_0000, 0), (0x7f00_0000_1000, -libc::EFAULT)],
        },
        Undo::Collapse {
            pid: 10,
            ranges: vec![(0x7f00_0020_0000, 4 << 20)],
        },
        Undo::Sysfs {
            rel: "sys/kernel/mm/transparent_hugepage/shmem_enabled".into(),
            previous: "never".into(),
        },
    ];
    for c in &changes {
        let j = serde_json::to_string(c).unwrap();
        assert_eq!(&serde_json::from_str::<Change>(&j).unwrap(), c, "{j}");
    }
    for u in &undos {
        let j = serde_json::to_string(u).unwrap();
        assert_eq!(&serde_json::from_str::<Undo>(&j).unwrap(), u, "{j}");
    }
    let j = serde_json::to_string(&undos[0]).unwrap();
    assert_eq!(
        j,
        r#"{"kind":"affinity","pid":10,"masks":[[10,"0-63"],[11,""]]}"#
    );
    let a = Applied::Pages(change::PagesOutcome {
        moved: 3,
        failed: vec![(libc::EFAULT, 1)],
        ..Default::default()
    });
    let j = serde_json::to_string(&a).unwrap();
    assert_eq!(serde_json::from_str::<Applied>(&j).unwrap(), a);
}
