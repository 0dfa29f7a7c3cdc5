//! The topology and sampler on captured sysfs/procfs trees (`tests/fixtures/*`), checked against
//! each fixture's `expected.json`, which was worked out independently of this code.

use std::path::PathBuf;

use perfpilot_observe::sample::{Sampler, SamplerConfig};
use perfpilot_observe::{CpuSet, Fs, Topology};
use perfpilot_sys::{block, ipc, net, stat};
use serde_json::Value;

const FIXTURES: [&str; 3] = ["vm-1node", "epyc-2node-8llc", "power-2socket-smt8"];

fn root(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn expected(name: &str) -> Value {
    let p = root(name).join("expected.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

fn set(v: &Value) -> CpuSet {
    CpuSet::parse(v.as_str().unwrap()).unwrap()
}

#[test]
fn topology_matches_each_fixture() {
    for name in FIXTURES {
        let exp = expected(name);
        let topo = Topology::read(&Fs::at(root(name))).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(topo.online, set(&exp["online"]), "{name}: online");
        assert_eq!(topo.offline, set(&exp["offline"]), "{name}: offline");
        assert_eq!(topo.isolated, set(&exp["isolated"]), "{name}: isolated");
        assert_eq!(
            topo.smt_width() as u64,
            exp["smt_threads_per_core"].as_u64().unwrap(),
            "{name}: smt"
        );
        assert_eq!(
            topo.cores().count() as u64,
            exp["cores_online"].as_u64().unwrap(),
            "{name}: cores"
        );
        if topo.memory_gap.is_some() {
            let sum: u64 = topo.nodes.iter().map(|n| n.mem_total).sum();
            let meminfo = exp["mem_total_kb"].as_u64().unwrap() * 1024;
            assert!(
                sum.abs_diff(meminfo) * 100 <= meminfo,
                "{name}: nodes {sum} vs /proc/meminfo {meminfo}"
            );
        }
        let enodes = exp["nodes"].as_array().unwrap();
        assert_eq!(topo.nodes.len(), enodes.len(), "{name}: node count");
        for (n, en) in topo.nodes.iter().zip(enodes) {
            assert_eq!(u64::from(n.id), en["id"].as_u64().unwrap());
            assert_eq!(n.cpus, set(&en["cpus"]), "{name}: node {} cpus", n.id);
            // The node file's figure, or with its share of what the node files leave out
            // where they disagree with /proc/meminfo (vm-1node: 5.09 GiB of 23.5 GiB).
            let file = en["mem_total_kb"].as_u64().unwrap() * 1024;
            match &topo.memory_gap {
                None => assert_eq!(n.mem_total, file, "{name}: node {} mem", n.id),
                Some(gap) => {
                    assert!(n.mem_total >= file, "{name}: node {} mem", n.id);
                    assert_eq!(
                        gap.meminfo_total,
                        exp["mem_total_kb"].as_u64().unwrap() * 1024
                    );
                }
            }
            let dist: Vec<u32> = en["distances"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(n.distances, dist, "{name}: node {} distances", n.id);
            let ellcs = en["llcs"].as_array().unwrap();
            assert_eq!(n.llcs.len(), ellcs.len(), "{name}: node {} llc count", n.id);
            for (l, el) in n.llcs.iter().zip(ellcs) {
                assert_eq!(l.cpus, set(&el["cpus"]), "{name}: llc {} cpus", l.id);
                assert_eq!(
                    u64::from(l.id),
                    el["id"].as_u64().unwrap(),
                    "{name}: llc id"
                );
                let cores: Vec<CpuSet> = el["cores"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        c.as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_u64().unwrap() as u32)
                            .collect()
                    })
                    .collect();
                let got: Vec<CpuSet> = l.cores.iter().map(|c| c.cpus.clone()).collect();
                assert_eq!(got, cores, "{name}: llc {} cores", l.id);
            }
        }
        // Every online CPU is in exactly one core.
        let total: usize = topo.cores().map(|c| c.cpus.len()).sum();
        assert_eq!(total, topo.online.len(), "{name}: CPUs in cores");
        for cpu in topo.online.iter() {
            let loc = topo.locate(cpu).unwrap();
            assert_eq!(topo.node_of(cpu).unwrap().id, loc.node);
        }
    }
}

#[test]
fn sampler_reads_each_fixture() {
    for name in FIXTURES {
        let exp = expected(name);
        let fs = Fs::at(root(name));
        let mut sampler = Sampler::new(
            &fs,
            SamplerConfig {
                expensive_every: 1,
                expensive_top: 100,
                ..SamplerConfig::default()
            },
        );
        let s = sampler.sample().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(s.skips.is_clean(), "{name}: skipped {:?}", s.skips);
        assert_eq!(
            s.kernel.cpus.len() as u64,
            exp["cpus_online"].as_u64().unwrap(),
            "{name}: /proc/stat cpus"
        );
        for ep in exp["processes"].as_array().unwrap() {
            let pid = ep["pid"].as_i64().unwrap() as i32;
            let p = s
                .processes
                .iter()
                .find(|p| p.pid == pid)
                .unwrap_or_else(|| panic!("{name}: pid {pid} missing"));
            assert_eq!(p.comm, ep["comm"].as_str().unwrap(), "{name}: {pid} comm");
            assert_eq!(
                u64::from(p.num_threads),
                ep["threads"].as_u64().unwrap(),
                "{name}: {pid} threads"
            );
            assert_eq!(
                p.utime,
                ep["utime"].as_u64().unwrap(),
                "{name}: {pid} utime"
            );
            assert_eq!(
                p.stime,
                ep["stime"].as_u64().unwrap(),
                "{name}: {pid} stime"
            );
            let tids: Vec<i64> = p.threads.iter().map(|t| i64::from(t.tid)).collect();
            let etids: Vec<i64> = ep["tids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_i64().unwrap())
                .collect();
            assert_eq!(tids, etids, "{name}: {pid} tids");
            if let Some(comms) = ep.get("thread_comms") {
                let got: Vec<&str> = p.threads.iter().map(|t| t.comm.as_str()).collect();
                let want: Vec<&str> = comms
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap())
                    .collect();
                assert_eq!(got, want, "{name}: {pid} thread names");
            }
            if let Some(cpus) = ep.get("thread_cpus") {
                let got: Vec<u64> = p
                    .threads
                    .iter()
                    .map(|t| u64::from(t.processor.unwrap()))
                    .collect();
                let want: Vec<u64> = cpus
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_u64().unwrap())
                    .collect();
                assert_eq!(got, want, "{name}: {pid} thread cpus");
            }
            let m = s
                .proc_memory
                .iter()
                .find(|m| m.pid == pid)
                .unwrap_or_else(|| panic!("{name}: no memory reading for {pid}"));
            for (node, kb) in ep["numa_kb"].as_object().unwrap() {
                let node: u32 = node.parse().unwrap();
                assert_eq!(
                    m.per_node.get(&node).copied().unwrap_or(0),
                    kb.as_u64().unwrap() * 1024,
                    "{name}: {pid} node {node}"
                );
            }
            assert_eq!(
                m.rollup.anon_huge,
                ep["anon_huge_kb"].as_u64().unwrap() * 1024,
                "{name}: {pid} AnonHugePages"
            );
            assert_eq!(
                m.rollup.rss,
                ep["rss_kb"].as_u64().unwrap() * 1024,
                "{name}: {pid} Rss"
            );
        }
        // Shared-memory segments and who attaches them.
        let segs = ipc::read_shm_segments(&fs).unwrap();
        for es in exp["shm_segments"].as_array().unwrap() {
            let shmid = es["shmid"].as_u64().unwrap();
            let seg = segs
                .iter()
                .find(|x| x.shmid == shmid)
                .unwrap_or_else(|| panic!("{name}: shmid {shmid}"));
            assert_eq!(seg.size, es["size"].as_u64().unwrap());
            assert_eq!(seg.nattch, es["nattch"].as_u64().unwrap());
            assert_eq!(seg.key, es["key"].as_i64().unwrap());
            if seg.nattch > 0 {
                let attached = s
                    .proc_memory
                    .iter()
                    .filter(|m| m.shm.iter().any(|a| matches!(a, perfpilot_sys::process::ShmAttach::Sysv { shmid: id, .. } if *id == shmid)))
                    .count();
                assert_eq!(
                    attached as u64, seg.nattch,
                    "{name}: processes mapping shmid {shmid}"
                );
            }
        }
        // Disks: queue settings and counters.
        for ed in exp["disks"].as_array().unwrap() {
            let dev = ed["name"].as_str().unwrap();
            let q = block::read_queue(&fs, dev).unwrap();
            assert_eq!(
                q.read_ahead_kb,
                ed["read_ahead_kb"].as_u64(),
                "{name}: {dev} read_ahead_kb"
            );
            assert_eq!(
                q.nr_requests,
                ed["nr_requests"].as_u64(),
                "{name}: {dev} nr_requests"
            );
            assert_eq!(
                q.rotational,
                ed["rotational"].as_bool(),
                "{name}: {dev} rotational"
            );
            assert_eq!(
                q.scheduler.as_deref(),
                ed["scheduler"].as_str(),
                "{name}: {dev} scheduler"
            );
            assert_eq!(
                q.size_bytes,
                ed["size_bytes"].as_u64(),
                "{name}: {dev} size"
            );
            let d = s
                .disks
                .iter()
                .find(|d| d.name == dev)
                .unwrap_or_else(|| panic!("{name}: disk {dev}"));
            assert_eq!(d.reads, ed["reads_completed"].as_u64().unwrap());
            assert_eq!(d.sectors_written, ed["sectors_written"].as_u64().unwrap());
        }
        let nets = net::read_net_dev(&fs).unwrap();
        for en in exp["nics"].as_array().unwrap() {
            let n = nets
                .iter()
                .find(|n| n.name == en["name"].as_str().unwrap())
                .unwrap();
            assert_eq!(n.rx_bytes, en["rx_bytes"].as_u64().unwrap());
            assert_eq!(n.tx_packets, en["tx_packets"].as_u64().unwrap());
        }
        let thp = stat::read_thp(&fs).unwrap();
        assert_eq!(
            thp.enabled.as_deref(),
            exp["thp_enabled"].as_str(),
            "{name}: THP"
        );
    }
}

/// A malformed line in a copied fixture is skipped with a count naming the file; the sample
/// goes on.
#[test]
fn malformed_process_file_is_counted_not_fatal() {
    let tmp = tempdir("malformed");
    copy_tree(&root("epyc-2node-8llc"), &tmp);
    std::fs::write(
        tmp.join("proc/2841/stat"),
        "2841 (java) S 1 2 3 notanumber\n",
    )
    .unwrap();
    // A process whose directory is gone between listing and reading looks like this to a reader.
    std::fs::remove_file(tmp.join("proc/3105/status")).unwrap();
    let mut sampler = Sampler::new(&Fs::at(&tmp), SamplerConfig::default());
    let s = sampler.sample().unwrap();
    assert_eq!(s.skips.malformed, 1, "{:?}", s.skips);
    assert_eq!(s.skips.vanished, 1, "{:?}", s.skips);
    assert!(
        s.skips.messages[0].contains("proc/2841/stat:1"),
        "{:?}",
        s.skips.messages
    );
    assert!(s.processes.iter().all(|p| p.pid != 2841 && p.pid != 3105));
    assert!(s.processes.iter().any(|p| p.pid == 3102));
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// A fresh directory of this test process; `name` keeps tests running side by side apart.
fn tempdir(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("perfpilot-fixture-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        let ft = entry.file_type().unwrap();
        if ft.is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&entry.path(), &dest);
        } else if ft.is_symlink() {
            let target = std::fs::read_link(entry.path()).unwrap();
            std::os::unix::fs::symlink(target, dest).unwrap();
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

/// An idle process due for its refresh keeps its threads' readings while its task list is the
/// same, and is read thread by thread again once a thread is replaced by another.
#[test]
fn an_idle_process_keeps_its_thread_readings_until_its_threads_change() {
    let tmp = tempdir("idle-threads");
    copy_tree(&root("epyc-2node-8llc"), &tmp);
    let cfg = SamplerConfig {
        // Every sample is a refresh: the only reason to skip reading threads is the check.
        idle_refresh_every: 1,
        per_cpu_ctxt: false,
        expensive_every: 0,
        ..SamplerConfig::default()
    };
    let mut sampler = Sampler::new(&Fs::at(&tmp), cfg);
    let threads = |s: &perfpilot_observe::Sample| -> Vec<(i32, u64)> {
        let p = s.processes.iter().find(|p| p.pid == 2841).unwrap();
        p.threads.iter().map(|t| (t.tid, t.utime)).collect()
    };
    let first = threads(&sampler.sample().unwrap());
    assert_eq!(first.len(), 5);
    // A thread's file changes while the process's CPU total does not (as between two ticks):
    // the carried-over reading stands.
    let gc0 = tmp.join("proc/2841/task/2855/stat");
    let text = std::fs::read_to_string(&gc0).unwrap();
    std::fs::write(&gc0, text.replace(" 10233 1203 ", " 10300 1203 ")).unwrap();
    assert_eq!(threads(&sampler.sample().unwrap()), first);
    // Thread 2858 exits and 2859 starts: the same count, another task list.
    let task = tmp.join("proc/2841/task");
    let old = std::fs::read_to_string(task.join("2858/stat")).unwrap();
    std::fs::remove_dir_all(task.join("2858")).unwrap();
    std::fs::create_dir_all(task.join("2859")).unwrap();
    std::fs::write(task.join("2859/stat"), old.replacen("2858 (", "2859 (", 1)).unwrap();
    let third = threads(&sampler.sample().unwrap());
    std::fs::remove_dir_all(&tmp).unwrap();
    assert!(third.iter().any(|t| t.0 == 2859), "{third:?}");
    assert!(third.iter().all(|t| t.0 != 2858), "{third:?}");
    assert!(third.contains(&(2855, 10300)), "read again: {third:?}");
}

/// An idle process carried over hands the next sample the very thread readings of the
/// previous one (shared: no copy of each thread's reading and name); once it used CPU, its
/// threads are read afresh.
#[test]
fn an_idle_process_carried_over_shares_its_thread_readings_with_the_previous_sample() {
    let tmp = tempdir("idle-shared");
    copy_tree(&root("epyc-2node-8llc"), &tmp);
    let cfg = SamplerConfig {
        // No refresh in these samples (pid 2841's phase is 841).
        idle_refresh_every: 1000,
        per_cpu_ctxt: false,
        expensive_every: 0,
        ..SamplerConfig::default()
    };
    let mut sampler = Sampler::new(&Fs::at(&tmp), cfg);
    let java =
        |s: &perfpilot_observe::Sample| s.processes.iter().find(|p| p.pid == 2841).unwrap().clone();
    let first = java(&sampler.sample().unwrap());
    let second = java(&sampler.sample().unwrap());
    assert_eq!(first.threads.len(), 5);
    assert!(
        std::ptr::eq(first.threads.as_ptr(), second.threads.as_ptr()),
        "carried over, not copied"
    );
    // The process used CPU (a tick more of user time), and so did its thread 2855.
    let stat = tmp.join("proc/2841/stat");
    let text = std::fs::read_to_string(&stat).unwrap();
    std::fs::write(&stat, text.replace(" 171479 5269 ", " 171480 5269 ")).unwrap();
    let gc0 = tmp.join("proc/2841/task/2855/stat");
    let text = std::fs::read_to_string(&gc0).unwrap();
    std::fs::write(&gc0, text.replace(" 10233 1203 ", " 10234 1203 ")).unwrap();
    let third = java(&sampler.sample().unwrap());
    std::fs::remove_dir_all(&tmp).unwrap();
    assert!(!std::ptr::eq(
        second.threads.as_ptr(),
        third.threads.as_ptr()
    ));
    assert_eq!(third.utime, 171480);
    let gc = third.threads.iter().find(|t| t.tid == 2855).unwrap();
    assert_eq!((gc.utime, gc.comm.as_str()), (10234, "GC Thread#0"));
}
