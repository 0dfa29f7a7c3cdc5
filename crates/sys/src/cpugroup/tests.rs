//! The writers on copies of the fixture trees of both layouts: where the group goes, what is
//! written, and what a process that may not create groups is told.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;

/// A writable copy of fixture `name` (symbolic links kept), readable by every user.
fn copy(name: &str) -> (tempfile::TempDir, Fs) {
    let src = format!("{}/../../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let ok = std::process::Command::new("cp")
        .args(["-a", &format!("{src}/."), dir.path().to_str().unwrap()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let fs = Fs::at(dir.path());
    (dir, fs)
}

fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn v1_a_quota_of_four_tenths_of_a_core_gets_a_short_period_in_the_comounted_hierarchy() {
    let (dir, fs) = copy("cgroup-v1-kubelet");
    let g = CpuGroup::create(&fs, "t-app", Some(0.4)).unwrap();
    assert_eq!(g.version(), Version::V1);
    let d = dir.path().join("sys/fs/cgroup/cpu/perfpilot-t-app");
    assert_eq!(read(d.join("cpu.cfs_period_us")), "2500");
    assert_eq!(read(d.join("cpu.cfs_quota_us")), "1000");
    std::fs::write(d.join("cpuacct.usage"), "1500000000\n").unwrap();
    std::fs::write(
        d.join("cpu.stat"),
        "nr_periods 9\nnr_throttled 3\nthrottled_time 5\n",
    )
    .unwrap();
    assert_eq!(g.usage().unwrap(), Duration::from_millis(1500));
    assert_eq!(g.throttled_periods(), Some(3));
    // Co-mounted `cpu,cpuacct`: one directory, not two.
    assert!(
        !dir.path()
            .join("sys/fs/cgroup/cpu,cpuacct/perfpilot-t-app")
            .join("x")
            .exists()
    );
    drop(g);
    // The fixture's files keep a real rmdir from working; the guard tried and did not panic.
}

#[test]
fn v2_as_root_the_group_goes_under_the_root_with_cpu_max() {
    let (dir, fs) = copy("cgroup-v2-kubelet");
    let g = CpuGroup::create(&fs, "t-db", Some(0.5)).unwrap();
    assert_eq!(g.version(), Version::V2);
    let d = dir.path().join("sys/fs/cgroup/perfpilot-t-db");
    assert_eq!(g.path(), d);
    assert_eq!(read(d.join("cpu.max")), "1000 2000");
    std::fs::write(
        d.join("cpu.stat"),
        "usage_usec 2500000\nnr_periods 4\nnr_throttled 1\nthrottled_usec 7\n",
    )
    .unwrap();
    assert_eq!(g.usage().unwrap(), Duration::from_millis(2500));
    assert_eq!(g.throttled_periods(), Some(1));
    // Without a quota: accounting only.
    let none = CpuGroup::create(&fs, "t-front", None).unwrap();
    assert_eq!(
        read(dir.path().join("sys/fs/cgroup/perfpilot-t-front/cpu.max")),
        "max 100000"
    );
    drop(none);
    let e = CpuGroup::create(&fs, "x", Some(f64::NAN))
        .unwrap_err()
        .to_string();
    assert!(e.contains("finite and > 0"), "{e}");
}

/// Makes `rel` and everything under it belong to `uid`.
fn chown_tree(root: &Path, rel: &str, uid: u32) {
    let ok = std::process::Command::new("chown")
        .args([
            "-R",
            &format!("{uid}:{uid}"),
            root.join(rel).to_str().unwrap(),
        ])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn v2_a_user_with_a_delegated_subtree_gets_groups_there_after_moving_itself_into_a_leaf() {
    if !crate::user::is_root() {
        eprintln!("skipped: acting as another user needs root");
        return;
    }
    let (dir, fs) = copy("cgroup-v2-kubelet");
    let own = "sys/fs/cgroup/system.slice/perfpilot.service";
    std::fs::write(
        dir.path().join(own).join("cgroup.controllers"),
        "cpu memory pids\n",
    )
    .unwrap();
    std::fs::write(dir.path().join(own).join("cgroup.subtree_control"), "").unwrap();
    chown_tree(dir.path(), own, 65534);
    let fs2 = fs.clone();
    let g = crate::user::as_user(65534, 65534, move || {
        CpuGroup::create(&fs2, "t-app", Some(2.0)).map(|g| {
            let p = g.path();
            std::mem::forget(g);
            p
        })
    })
    .unwrap()
    .unwrap();
    let base = dir.path().join(own);
    assert_eq!(g, base.join("perfpilot-t-app"));
    assert_eq!(read(base.join("perfpilot-t-app/cpu.max")), "2000 1000");
    assert_eq!(read(base.join("cgroup.subtree_control")), "+cpu");
    assert_eq!(
        read(base.join(format!("{}/cgroup.procs", place::SELF_LEAF))),
        std::process::id().to_string(),
        "the process moved itself out of the group it hands controllers from"
    );
    // A group a killed run left there is found and removed.
    std::fs::remove_file(base.join("perfpilot-t-app/cpu.max")).unwrap();
    assert_eq!(remove_stale(&fs, "t-"), vec![base.join("perfpilot-t-app")]);
}

#[test]
fn v2_a_user_without_a_delegated_subtree_is_told_the_path_and_the_fix() {
    if !crate::user::is_root() {
        eprintln!("skipped: acting as another user needs root");
        return;
    }
    let (dir, fs) = copy("cgroup-v2-kubelet");
    let e = crate::user::as_user(65534, 65534, move || {
        CpuGroup::create(&fs, "t-app", Some(1.0))
            .map(|_| ())
            .unwrap_err()
            .to_string()
    })
    .unwrap();
    assert!(
        e.contains(
            &dir.path()
                .join("sys/fs/cgroup/system.slice/perfpilot.service")
                .display()
                .to_string()
        ),
        "{e}"
    );
    assert!(e.contains("systemd-run --scope -p Delegate=yes"), "{e}");
}

#[test]
fn v1_a_user_who_may_not_write_the_hierarchy_is_told_the_path_and_the_fix() {
    if !crate::user::is_root() {
        eprintln!("skipped: acting as another user needs root");
        return;
    }
    let (dir, fs) = copy("cgroup-v1-kubelet");
    let e = crate::user::as_user(65534, 65534, move || {
        CpuGroup::create(&fs, "t-app", None)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    })
    .unwrap();
    assert!(
        e.contains(&dir.path().join("sys/fs/cgroup/cpu").display().to_string()),
        "{e}"
    );
    assert!(e.contains("run it as root"), "{e}");
}

#[test]
fn a_quota_where_the_cpu_controller_is_not_offered_is_refused_but_accounting_works() {
    let (dir, fs) = copy("cgroup-v2-kubelet");
    std::fs::write(
        dir.path().join("sys/fs/cgroup/cgroup.controllers"),
        "memory pids\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("sys/fs/cgroup/cgroup.subtree_control"),
        "memory\n",
    )
    .unwrap();
    let e = CpuGroup::create(&fs, "q", Some(1.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cpu controller is not available"), "{e}");
    let g = CpuGroup::create(&fs, "acct", None).unwrap();
    assert!(
        !dir.path()
            .join("sys/fs/cgroup/perfpilot-acct/cpu.max")
            .exists()
    );
    drop(g);
}

#[test]
fn no_cgroup_file_system_is_said_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("proc/self")).unwrap();
    std::fs::write(dir.path().join("proc/self/cgroup"), "0::/\n").unwrap();
    std::fs::create_dir_all(dir.path().join("sys/fs/cgroup")).unwrap();
    let e = CpuGroup::create(&Fs::at(dir.path()), "x", Some(1.0))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("sys/fs/cgroup") && e.contains("no cgroup file system"),
        "{e}"
    );
}
