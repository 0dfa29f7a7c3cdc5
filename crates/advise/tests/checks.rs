//! Each check on a fixture tree: firing on a planted condition, silent on a healthy host.

mod common;

use std::collections::BTreeMap;

use common::{Proc, Tree, skipped, with_id};
use perfpilot_advise::{FsFigures, MountFigures, Options, Severity, Verify};

const GIB_KB: u64 = 1 << 20;

fn opts_with_root(inodes: u64, free: u64) -> Options {
    let mut m = BTreeMap::new();
    m.insert(
        "/".to_string(),
        FsFigures {
            inodes,
            inodes_free: free,
            bytes: 100 << 30,
            bytes_free: 60 << 30,
        },
    );
    Options {
        mounts: MountFigures::Given(m),
        ..Options::default()
    }
}

fn healthy_opts() -> Options {
    opts_with_root(1_000_000, 900_000)
}

#[test]
fn a_healthy_host_has_no_warnings() {
    let t = Tree::healthy();
    let r = t.advise(&healthy_opts());
    assert!(
        r.findings.iter().all(|f| f.severity == Severity::Info),
        "{:#?}",
        r.findings
    );
    assert_eq!(r.check_status(), 0);
    assert_eq!(r.processes, 1);
}

// --- 1. transparent huge pages ---

fn big_heap(anon_huge_kb: u64) -> Proc {
    Proc {
        rss_anon_kb: 4 * GIB_KB,
        anon_huge_kb,
        cmdline: vec!["java", "-Xmx4g", "-jar", "app.jar"],
        ..Proc::small(200, "java")
    }
}

#[test]
fn large_anonymous_memory_in_small_pages_is_a_large_pages_finding() {
    let t = Tree::healthy();
    t.process(&big_heap(0));
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "thp.low-anon-coverage");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert_eq!(f[0].subject, "pid 200 (java)");
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].evidence
            .iter()
            .any(|e| e.what == "AnonHugePages" && e.source == "/proc/200/smaps_rollup"),
        "{:?}",
        f[0].evidence
    );
    assert_eq!(
        f[0].verify,
        Verify::DaemonWillTry {
            strategy: "large_pages".into()
        }
    );
}

#[test]
fn large_anonymous_memory_mostly_in_huge_pages_is_fine() {
    let t = Tree::healthy();
    t.process(&big_heap(3 * GIB_KB));
    let r = t.advise(&healthy_opts());
    assert!(with_id(&r, "thp.low-anon-coverage").is_empty());
}

#[test]
fn thp_never_makes_the_apply_line_enable_madvise() {
    let t = Tree::healthy();
    t.file(
        "sys/kernel/mm/transparent_hugepage/enabled",
        "always madvise [never]\n",
    );
    t.process(&big_heap(0));
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "thp.low-anon-coverage");
    assert!(f[0].apply.starts_with("echo madvise"), "{}", f[0].apply);
}

#[test]
fn large_shared_memory_with_shmem_never_is_a_finding_and_with_advise_is_not() {
    let t = Tree::healthy();
    t.process(&Proc {
        rss_shmem_kb: 2 * GIB_KB,
        cmdline: vec!["postgres", "-D", "/var/lib/postgresql/data"],
        ..Proc::small(300, "postgres")
    });
    // A backend attached to the same segment is part of the instance: one finding.
    t.process(&Proc {
        rss_shmem_kb: 2 * GIB_KB,
        ppid: 300,
        cmdline: vec!["postgres: app app [local] idle"],
        ..Proc::small(301, "postgres")
    });
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "thp.shmem-disabled-large-shm");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert_eq!(f[0].subject, "pid 300 (postgres)");

    t.file(
        "sys/kernel/mm/transparent_hugepage/shmem_enabled",
        "always within_size [advise] never deny force\n",
    );
    let r = t.advise(&healthy_opts());
    assert!(with_id(&r, "thp.shmem-disabled-large-shm").is_empty());
}

#[test]
fn defrag_always_with_thp_always_is_an_info_finding_with_a_study() {
    let t = Tree::healthy();
    let thp = "sys/kernel/mm/transparent_hugepage";
    t.file(&format!("{thp}/enabled"), "[always] madvise never\n");
    t.file(
        &format!("{thp}/defrag"),
        "[always] defer defer+madvise madvise never\n",
    );
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "thp.defrag-always");
    assert_eq!(f.len(), 1);
    let Verify::Study { file } = &f[0].verify else {
        panic!("{:?}", f[0].verify)
    };
    assert!(file.contains("path = \"sys/kernel/mm/transparent_hugepage/defrag\""));

    t.file(
        &format!("{thp}/defrag"),
        "always defer defer+madvise [madvise] never\n",
    );
    assert!(with_id(&t.advise(&healthy_opts()), "thp.defrag-always").is_empty());
}

#[test]
fn a_kernel_without_thp_skips_the_check_and_says_which_file() {
    let t = Tree::healthy();
    t.remove("sys/kernel/mm/transparent_hugepage");
    t.process(&big_heap(0));
    let r = t.advise(&healthy_opts());
    assert!(with_id(&r, "thp.low-anon-coverage").is_empty());
    assert!(
        skipped(&r, "thp").contains("/sys/kernel/mm/transparent_hugepage/enabled"),
        "{:?}",
        r.skipped
    );
}

// --- 2. CPU frequency governor ---

fn governors(t: &Tree, gov: &str, driver: &str) {
    for cpu in 0..8 {
        let d = format!("sys/devices/system/cpu/cpu{cpu}/cpufreq");
        t.file(&format!("{d}/scaling_governor"), &format!("{gov}\n"));
        t.file(&format!("{d}/scaling_driver"), &format!("{driver}\n"));
    }
}

#[test]
fn the_powersave_governor_is_a_warning() {
    let t = Tree::healthy();
    governors(&t, "powersave", "acpi-cpufreq");
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "cpu.governor");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0].title.contains("0,1,2,3,4,5,6,7"), "{}", f[0].title);
}

#[test]
fn the_performance_governor_is_fine() {
    let t = Tree::healthy();
    governors(&t, "performance", "acpi-cpufreq");
    let r = t.advise(&healthy_opts());
    assert!(with_id(&r, "cpu.governor").is_empty());
    assert!(skipped(&r, "governor").is_empty(), "{:?}", r.skipped);
}

#[test]
fn a_host_without_cpufreq_skips_the_governor_check_honestly() {
    let r = Tree::healthy().advise(&healthy_opts());
    assert!(with_id(&r, "cpu.governor").is_empty());
    assert!(
        skipped(&r, "governor").contains("scaling_governor"),
        "{:?}",
        r.skipped
    );
}

// --- 3. swappiness and max_map_count ---

#[test]
fn swappiness_with_swap_and_a_large_heap_is_a_finding_and_without_swap_is_not() {
    let t = Tree::healthy();
    t.process(&Proc {
        rss_anon_kb: 8 * GIB_KB,
        anon_huge_kb: 8 * GIB_KB,
        ..Proc::small(400, "redis-server")
    });
    let r = t.advise(&healthy_opts());
    assert!(with_id(&r, "vm.swappiness-large-anon").is_empty());

    t.file(
        "proc/meminfo",
        "MemTotal:       16777216 kB\nSwapTotal:       8388608 kB\n",
    );
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "vm.swappiness-large-anon");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert!(f[0].apply.contains("vm.swappiness=10"));
}

#[test]
fn a_process_near_max_map_count_is_critical_and_one_far_below_is_not() {
    let t = Tree::healthy();
    t.file("proc/sys/vm/max_map_count", "1000\n");
    t.process(&Proc {
        maps_lines: 960,
        ..Proc::small(500, "elasticsearch")
    });
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "vm.max-map-count");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(f[0].subject, "pid 500 (elasticsearch)");

    t.file("proc/sys/vm/max_map_count", "65530\n");
    assert!(with_id(&t.advise(&healthy_opts()), "vm.max-map-count").is_empty());
}

// --- 4. threads against their CPUs ---

#[test]
fn a_bound_process_with_many_runnable_threads_is_oversubscribed() {
    let t = Tree::healthy();
    t.process(&Proc {
        threads: 64,
        runnable: 12,
        cpus: "0",
        ..Proc::small(600, "worker")
    });
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "cpu.oversubscribed");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].title.contains("64 threads on 1 allowed CPU"),
        "{}",
        f[0].title
    );
}

#[test]
fn an_unbound_process_with_many_threads_is_not_oversubscribed() {
    let t = Tree::healthy();
    t.process(&Proc {
        threads: 64,
        runnable: 12,
        ..Proc::small(600, "worker")
    });
    assert!(with_id(&t.advise(&healthy_opts()), "cpu.oversubscribed").is_empty());
}

#[test]
fn instances_bound_to_overlapping_cpus_are_a_finding_and_disjoint_ones_are_not() {
    let t = Tree::healthy();
    t.process(&Proc {
        cpus: "0-3",
        ..Proc::small(700, "scoring")
    });
    t.process(&Proc {
        cpus: "2-5",
        ..Proc::small(701, "scoring")
    });
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "cpu.overlapping-bindings");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert!(f[0].title.contains("(2-3)"), "{}", f[0].title);
    assert!(
        f[0].apply.contains("taskset -a -cp 4-5 701"),
        "{}",
        f[0].apply
    );

    t.process(&Proc {
        cpus: "4-7",
        ..Proc::small(701, "scoring")
    });
    assert!(with_id(&t.advise(&healthy_opts()), "cpu.overlapping-bindings").is_empty());
}

#[test]
fn processes_of_one_instance_sharing_its_binding_do_not_overlap() {
    let t = Tree::healthy();
    t.process(&Proc {
        cpus: "0-3",
        ..Proc::small(700, "postgres")
    });
    t.process(&Proc {
        cpus: "0-3",
        ppid: 700,
        ..Proc::small(701, "postgres")
    });
    let r = t.advise(&healthy_opts());
    assert!(
        with_id(&r, "cpu.overlapping-bindings").is_empty(),
        "{:#?}",
        r.findings
    );

    // A second instance (its own parent) on the same CPUs does overlap.
    t.process(&Proc {
        cpus: "2-3",
        ..Proc::small(800, "postgres")
    });
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "cpu.overlapping-bindings");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert_eq!(f[0].subject, "pids 700 and 800 (postgres)");
}

// --- 5. inodes and open files ---

#[test]
fn a_file_system_almost_out_of_inodes_is_critical() {
    let t = Tree::healthy();
    let r = t.advise(&opts_with_root(1000, 10));
    let f = with_id(&r, "fs.inodes-low");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(f[0].subject, "mount /");
    assert_eq!(r.check_status(), 2);
}

#[test]
fn a_file_system_with_inodes_to_spare_is_fine() {
    let r = Tree::healthy().advise(&healthy_opts());
    assert!(with_id(&r, "fs.inodes-low").is_empty());
    assert!(skipped(&r, "inodes").is_empty(), "{:?}", r.skipped);
}

#[test]
fn a_fixture_without_mount_figures_skips_the_inode_check() {
    let r = Tree::healthy().advise(&Options {
        mounts: MountFigures::Given(BTreeMap::new()),
        ..Options::default()
    });
    assert!(skipped(&r, "inodes").contains("no figures given for /"));
}

#[test]
fn a_process_near_its_open_file_limit_is_a_finding_and_one_far_below_is_not() {
    let t = Tree::healthy();
    t.process(&Proc {
        nofile: 100,
        fds: 90,
        ..Proc::small(800, "nginx")
    });
    let r = t.advise(&healthy_opts());
    let f = with_id(&r, "proc.open-files-near-limit");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(r.check_status(), 1);

    t.process(&Proc {
        nofile: 1000,
        fds: 90,
        ..Proc::small(800, "nginx")
    });
    assert!(with_id(&t.advise(&healthy_opts()), "proc.open-files-near-limit").is_empty());
}

// --- the report ---

#[test]
fn ignored_ids_are_left_out_and_counted() {
    let t = Tree::healthy();
    let opts = Options {
        ignore: vec!["fs.inodes-low".into()],
        ..opts_with_root(1000, 10)
    };
    let r = t.advise(&opts);
    assert!(with_id(&r, "fs.inodes-low").is_empty());
    assert_eq!(r.ignored, 1);
    assert_eq!(r.check_status(), 0);
}

#[test]
fn an_empty_tree_skips_every_check_without_panicking() {
    let t = Tree {
        dir: tempfile::tempdir().unwrap(),
    };
    let r = t.advise(&Options::default());
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    for check in [
        "processes",
        "thp",
        "governor",
        "swappiness",
        "max_map_count",
        "inodes",
    ] {
        assert!(
            !skipped(&r, check).is_empty(),
            "{check} not skipped: {:?}",
            r.skipped
        );
    }
}

#[test]
fn critical_findings_rank_first() {
    let t = Tree::healthy();
    t.process(&big_heap(0));
    let r = t.advise(&opts_with_root(1000, 10));
    assert_eq!(r.findings[0].id, "fs.inodes-low");
    assert!(r.findings.len() >= 2);
}

#[test]
fn a_fixture_tree_with_live_mount_figures_skips_the_inode_check_rather_than_stat_this_machine() {
    let r = Tree::healthy().advise(&Options::default());
    assert!(
        skipped(&r, "inodes").contains("statvfs is a live call"),
        "{:?}",
        r.skipped
    );
}

#[test]
fn a_process_that_exits_between_the_listing_and_the_read_is_passed_over_quietly() {
    let t = Tree::healthy();
    // Listed in /proc, but its files are gone: it exited.
    std::fs::create_dir_all(t.root().join("proc/4242")).unwrap();
    let r = t.advise(&healthy_opts());
    assert_eq!(r.processes, 1);
    assert!(skipped(&r, "processes").is_empty(), "{:?}", r.skipped);
}

#[test]
fn one_pid_limits_the_process_checks_to_it() {
    let t = Tree::healthy();
    t.process(&big_heap(0));
    let r = t.advise(&Options {
        pid: Some(100),
        ..healthy_opts()
    });
    assert_eq!(r.processes, 1);
    assert!(with_id(&r, "thp.low-anon-coverage").is_empty());
    let r = t.advise(&Options {
        pid: Some(200),
        ..healthy_opts()
    });
    assert_eq!(with_id(&r, "thp.low-anon-coverage").len(), 1);
}

#[test]
fn a_pid_that_does_not_exist_is_said_in_skipped() {
    let r = Tree::healthy().advise(&Options {
        pid: Some(99999),
        ..healthy_opts()
    });
    assert_eq!(r.processes, 0);
    assert!(
        skipped(&r, "processes").contains("/proc/99999/status"),
        "{:?}",
        r.skipped
    );
}
