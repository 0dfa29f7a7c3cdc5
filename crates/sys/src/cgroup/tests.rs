//! The readers on the fixture trees of both layouts (`tests/fixtures/cgroup-v2-kubelet`: v2,
//! the kubelet's systemd driver, containerd; `tests/fixtures/cgroup-v1-kubelet`: hybrid v1,
//! the cgroupfs driver).

use std::time::Duration;

use super::container::{self, Container};
use super::read;
use super::*;
use crate::CpuSet;

const G_UID: &str = "6c1b3f0e-9d2a-4c1e-8f7a-2b5d9e0c1a34";
const G_ID: &str = "3f7c2a9e1b4d6f8a0c2e4b6d8f0a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f5a";
const G1_UID: &str = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";

pub(crate) fn fixture(name: &str) -> Fs {
    Fs::at(format!(
        "{}/../../tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

fn dir_of(fs: &Fs, pid: i32, controller: &str) -> Dir {
    let h = Hierarchies::detect(fs);
    Membership::of_pid(fs, pid)
        .unwrap()
        .dir(&h, controller)
        .unwrap()
}

#[test]
fn the_layouts_are_told_apart() {
    let v2 = Hierarchies::detect(&fixture("cgroup-v2-kubelet"));
    assert_eq!(v2.layout(), Layout::V2);
    assert_eq!(v2.home("cpu"), Some((Version::V2, "sys/fs/cgroup")));
    let v1 = Hierarchies::detect(&fixture("cgroup-v1-kubelet"));
    assert_eq!(v1.layout(), Layout::Hybrid);
    assert_eq!(v1.home("cpu").map(|h| h.0), Some(Version::V1));
    assert_eq!(
        v1.home("cpuset"),
        Some((Version::V1, "sys/fs/cgroup/cpuset"))
    );
    assert_eq!(v1.v2.as_deref(), Some("sys/fs/cgroup/unified"));
    // This machine's own layout, whatever it is, is one of the four.
    let live = Hierarchies::detect(&Fs::live());
    eprintln!("this machine: {}", live.layout());
}

#[test]
fn a_processs_groups_are_read_from_proc_pid_cgroup() {
    let fs = fixture("cgroup-v1-kubelet");
    let h = Hierarchies::detect(&fs);
    let m = Membership::of_pid(&fs, 2201).unwrap();
    let want = format!(
        "/kubepods/pod{G1_UID}/c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
    );
    assert_eq!(m.v1["cpuset"], want);
    assert_eq!(m.v1["cpuacct"], want);
    assert_eq!(m.unified.as_deref(), Some("/"));
    assert_eq!(m.path(&h), want, "the v1 path names it on a hybrid machine");
    assert!(
        Membership::of_pid(&fs, 999_999).unwrap_err().is_vanished(),
        "a process that is gone"
    );
    let fs2 = fixture("cgroup-v2-kubelet");
    let h2 = Hierarchies::detect(&fs2);
    let m2 = Membership::of_pid(&fs2, 1500).unwrap();
    assert_eq!(m2.path(&h2), "/user.slice/user-1000.slice/session-2.scope");
}

#[test]
fn v2_cpu_quota_use_cpuset_memory_and_pressure_of_a_guaranteed_pods_container() {
    let fs = fixture("cgroup-v2-kubelet");
    let d = dir_of(&fs, 1201, "cpu");
    let q = read::cpu_max(&fs, &d).unwrap().unwrap();
    assert_eq!((q.quota_us, q.period_us), (200_000, 100_000));
    assert!((q.cores() - 2.0).abs() < 1e-12);
    let s = read::cpu_stat(&fs, &d, &d).unwrap();
    assert_eq!(s.usage, Duration::from_micros(123_456_789));
    assert_eq!((s.periods, s.throttled_periods), (5000, 200));
    assert_eq!(s.throttled, Duration::from_secs(4));
    let cs = read::cpuset(&fs, &dir_of(&fs, 1201, "cpuset"))
        .unwrap()
        .unwrap();
    assert_eq!(cs.cpus, set("2-3"));
    assert_eq!(cs.effective_cpus, set("2-3"));
    assert_eq!(cs.effective_mems, set("0"));
    assert_eq!(cs.dir, d, "its own files");
    let m = read::memory(&fs, &dir_of(&fs, 1201, "memory")).unwrap();
    assert_eq!(m.current, 512 << 20);
    assert_eq!(m.limit, Some(2 << 30));
    assert_eq!(m.stat["anon"], 503_316_480);
    assert_eq!(m.stat["anon_thp"], 256 << 20);
    let p = read::pressure(&fs, &d).unwrap();
    assert_eq!(p.cpu.unwrap().some.avg60, 2.25);
    assert_eq!(p.cpu.unwrap().full.unwrap().total_us, 1_500_000);
    assert_eq!(p.memory.unwrap().some.avg60, 0.10);
    assert!(p.io.is_some());
}

#[test]
fn v2_limits_and_cpusets_come_from_the_nearest_group_that_sets_them() {
    let fs = fixture("cgroup-v2-kubelet");
    let d = dir_of(&fs, 1305, "cpu");
    assert_eq!(
        read::cpu_max(&fs, &d).unwrap(),
        None,
        "`max`: no quota of its own"
    );
    let (q, by) = read::effective_quota(&fs, &d).unwrap().unwrap();
    assert!((q.cores() - 0.5).abs() < 1e-12);
    assert!(
        by.path.ends_with(".slice") && by.path.contains("burstable-pod"),
        "{by:?}"
    );
    // Its pod does not enable cpuset for it: the burstable slice's pool holds it (the static
    // CPU manager took 2-3 for the Guaranteed pod).
    let cs = read::cpuset(&fs, &d).unwrap().unwrap();
    assert_eq!(cs.effective_cpus, set("0-1,4-7"));
    assert_eq!(cs.dir.path, "/kubepods.slice/kubepods-burstable.slice");
    let m = read::memory(&fs, &d).unwrap();
    assert_eq!(m.limit, None, "`max` is no limit");
    let (lim, at) = read::effective_memory_limit(&fs, &d).unwrap().unwrap();
    assert_eq!((lim, at.path.as_str()), (30_064_771_072, "/kubepods.slice"));
    assert!(read::cpuset_of_pid(&fs, 1201).unwrap().is_some());
}

#[test]
fn v1_cpu_quota_use_cpuset_and_memory_of_a_pods_container() {
    let fs = fixture("cgroup-v1-kubelet");
    let cpu = dir_of(&fs, 2201, "cpu");
    let acct = dir_of(&fs, 2201, "cpuacct");
    assert_eq!(cpu.version, Version::V1);
    let q = read::cpu_max(&fs, &cpu).unwrap().unwrap();
    assert!((q.cores() - 2.0).abs() < 1e-12);
    let s = read::cpu_stat(&fs, &cpu, &acct).unwrap();
    assert_eq!(s.usage, Duration::from_nanos(98_765_432_100));
    assert_eq!((s.periods, s.throttled_periods), (4000, 100));
    assert_eq!(s.throttled, Duration::from_millis(2500));
    let cs = read::cpuset(&fs, &dir_of(&fs, 2201, "cpuset"))
        .unwrap()
        .unwrap();
    assert_eq!(cs.effective_cpus, set("1"));
    assert_eq!(cs.effective_mems, set("0"));
    let md = dir_of(&fs, 2201, "memory");
    let m = read::memory(&fs, &md).unwrap();
    assert_eq!(m.current, 384 << 20);
    assert_eq!(m.limit, None, "v1's page-rounded 2^63 is no limit");
    assert_eq!(m.stat["rss"], 352 << 20);
    assert_eq!(
        read::effective_memory_limit(&fs, &md).unwrap().unwrap().0,
        1 << 30
    );
    assert_eq!(
        read::pressure(&fs, &cpu).unwrap(),
        read::GroupPressure::default(),
        "v1 groups have no pressure files"
    );
    // The burstable container's quota is its pod's.
    let b = dir_of(&fs, 2305, "cpu");
    assert_eq!(read::cpu_max(&fs, &b).unwrap(), None);
    assert!((read::effective_quota(&fs, &b).unwrap().unwrap().0.cores() - 0.5).abs() < 1e-12);
}

#[test]
fn a_malformed_group_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sys/fs/cgroup/x");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("cpu.max"), "lots 100000\n").unwrap();
    std::fs::write(p.join("memory.current"), "12 kB\n").unwrap();
    let fs = Fs::at(dir.path());
    let d = Dir::new(Version::V2, "sys/fs/cgroup", "/x");
    let e = read::cpu_max(&fs, &d).unwrap_err().to_string();
    assert!(e.contains("x/cpu.max") && e.contains("QUOTA PERIOD"), "{e}");
    let e = read::memory(&fs, &d).unwrap_err().to_string();
    assert!(
        e.contains("x/memory.current") && e.contains("not a number"),
        "{e}"
    );
}

#[test]
fn the_kubelets_layouts_name_the_pod_and_container() {
    let fs = fixture("cgroup-v2-kubelet");
    let path = |pid| Membership::of_pid(&fs, pid).unwrap().unified.unwrap();
    let g = container::identify(&fs, &path(1201)).unwrap();
    assert_eq!((g.runtime.as_str(), g.id.as_str()), ("containerd", G_ID));
    let pod = g.pod.clone().unwrap();
    assert_eq!(
        pod.uid, G_UID,
        "the path's underscores are the UID's dashes"
    );
    assert_eq!(pod.qos, "guaranteed");
    assert_eq!(
        pod.namespace.as_deref(),
        Some("databases"),
        "the token volume"
    );
    assert_eq!(pod.name.as_deref(), Some("pg-0"), "the kubelet's etc-hosts");
    assert_eq!(
        g.describe(),
        "pod databases/pg-0 (container 3f7c2a9e1b4d, guaranteed QoS)"
    );
    let b = container::identify(&fs, &path(1305)).unwrap();
    let bp = b.pod.clone().unwrap();
    assert_eq!(bp.qos, "burstable");
    assert_eq!(
        bp.namespace.as_deref(),
        Some("web"),
        "containerd's annotations"
    );
    assert_eq!(bp.name.as_deref(), Some("frontend-7d9c5b6f4-x2kq8"));
    assert_eq!(b.name.as_deref(), Some("nginx"));
    let d = container::identify(&fs, &path(1400)).unwrap();
    assert_eq!((d.runtime.as_str(), d.pod.is_none()), ("docker", true));
    assert_eq!(
        container::identify(&fs, &path(1500)),
        None,
        "a login session"
    );

    let fs1 = fixture("cgroup-v1-kubelet");
    let h1 = Hierarchies::detect(&fs1);
    let p1 = Membership::of_pid(&fs1, 2201).unwrap().path(&h1);
    let c1 = container::identify(&fs1, &p1).unwrap();
    let pod1 = c1.pod.unwrap();
    assert_eq!(
        (c1.runtime.as_str(), pod1.qos.as_str()),
        ("containerd", "guaranteed")
    );
    assert_eq!(pod1.uid, G1_UID);
    assert_eq!(pod1.namespace.as_deref(), Some("shop"));
    assert_eq!(pod1.name.as_deref(), Some("cache-1"));
    let p2 = Membership::of_pid(&fs1, 2305).unwrap().path(&h1);
    let c2 = container::identify(&fs1, &p2).unwrap();
    assert_eq!(c2.pod.as_ref().unwrap().qos, "burstable");
    assert_eq!(
        c2.pod.as_ref().unwrap().name,
        None,
        "no pod directory: the UID alone"
    );
    assert!(
        c2.describe()
            .starts_with("pod uid 11112222-3333-4444-5555-666677778888"),
        "{}",
        c2.describe()
    );
}

#[test]
fn other_runtimes_layouts_are_recognised_and_services_are_not_containers() {
    let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let cases: [(String, Option<(&str, &str)>); 9] = [
        (format!("/docker/{id}"), Some(("docker", id))),
        (
            format!("/system.slice/docker-{id}.scope"),
            Some(("docker", id)),
        ),
        (
            format!("/machine.slice/libpod-{id}.scope/container"),
            Some(("podman", id)),
        ),
        (
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{id}.scope"),
            Some(("podman", id)),
        ),
        (
            format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234abcd_0000_1111_2222_333344445555.slice/crio-{id}.scope"
            ),
            Some(("cri-o", id)),
        ),
        ("/lxc.payload.web1".into(), Some(("lxc", "web1"))),
        (
            "/machine.slice/machine-build.scope".into(),
            Some(("systemd-nspawn", "build")),
        ),
        ("/system.slice/postgresql@15-main.service".into(), None),
        ("/".into(), None),
    ];
    for (path, want) in cases {
        let got: Option<Container> = container::parse_path(&path);
        assert_eq!(
            got.as_ref().map(|c| (c.runtime.as_str(), c.id.as_str())),
            want,
            "{path}"
        );
    }
    let besteffort = container::parse_path(&format!(
        "/kubepods/besteffort/pod1234abcd-0000-1111-2222-333344445555/{id}"
    ))
    .unwrap();
    assert_eq!(besteffort.pod.unwrap().qos, "besteffort");
}

#[test]
fn cpusets_read_together_read_each_group_once_and_a_new_pass_reads_it_again() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let p = tmp.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu\n");
    write("sys/fs/cgroup/cpuset.cpus.effective", "0-3\n");
    write("sys/fs/cgroup/db.slice/cpuset.cpus.effective", "2-3\n");
    for pid in [100, 101, 102] {
        write(&format!("proc/{pid}/cgroup"), "0::/db.slice\n");
    }
    let fs = Fs::at(tmp.path());
    let mut sets = read::Cpusets::new(&fs);
    let of = |sets: &mut read::Cpusets, pid| sets.of_pid(pid).unwrap().unwrap().effective_cpus;
    assert_eq!(of(&mut sets, 100), set("2-3"));
    // The group's files change: the same pass answers from what it read, for every member.
    write("sys/fs/cgroup/db.slice/cpuset.cpus.effective", "1\n");
    assert_eq!(of(&mut sets, 101), set("2-3"));
    assert_eq!(of(&mut sets, 102), set("2-3"));
    assert_eq!(of(&mut read::Cpusets::new(&fs), 102), set("1"));
    assert_eq!(
        read::cpuset_of_pid(&fs, 100)
            .unwrap()
            .unwrap()
            .effective_cpus,
        set("1")
    );
    // A process that is gone is an error, not remembered as without a cpuset.
    assert!(sets.of_pid(999).is_err());
}
