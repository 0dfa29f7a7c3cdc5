//! NUMA, network, pressure and application checks on fixture trees: firing on a planted
//! condition, silent without it.

mod common;

use std::collections::BTreeMap;

use common::{Proc, Tree, skipped, with_id};
use perfpilot_advise::{FsFigures, MountFigures, Options, Severity, Verify};

const GIB_KB: u64 = 1 << 20;

fn opts() -> Options {
    let mut m = BTreeMap::new();
    m.insert(
        "/".to_string(),
        FsFigures {
            inodes: 1_000_000,
            inodes_free: 900_000,
            bytes: 100 << 30,
            bytes_free: 60 << 30,
        },
    );
    Options {
        mounts: MountFigures::Given(m),
        ..Options::default()
    }
}

// --- 6. NUMA ---

#[test]
fn numa_balancing_with_numad_running_is_a_finding_and_without_numad_is_not() {
    let t = Tree::healthy();
    t.file("proc/sys/kernel/numa_balancing", "1\n");
    assert!(with_id(&t.advise(&opts()), "numa.balancing-with-numad").is_empty());
    t.process(&Proc::small(900, "numad"));
    let r = t.advise(&opts());
    let f = with_id(&r, "numa.balancing-with-numad");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert!(f[0].apply.contains("kernel.numa_balancing=0"));
    t.file("proc/sys/kernel/numa_balancing", "0\n");
    assert!(with_id(&t.advise(&opts()), "numa.balancing-with-numad").is_empty());
}

fn two_nodes(t: &Tree) {
    for (n, cpus) in [(0, "0-3"), (1, "4-7")] {
        let d = format!("sys/devices/system/node/node{n}");
        t.file(&format!("{d}/cpulist"), &format!("{cpus}\n"));
        t.file(&format!("{d}/distance"), "10 20\n");
        t.file(
            &format!("{d}/meminfo"),
            &format!("Node {n} MemTotal:       8388608 kB\nNode {n} MemFree:        4194304 kB\n"),
        );
    }
}

fn placed(numa_maps: &'static str) -> Proc {
    Proc {
        rss_anon_kb: 2 * GIB_KB,
        numa_maps,
        ..Proc::small(910, "cache")
    }
}

#[test]
fn a_process_spread_over_two_nodes_that_fits_one_is_a_memory_affinity_finding() {
    let t = Tree::healthy();
    two_nodes(&t);
    t.process(&placed(
        "7f0000000000 default anon=524288 dirty=524288 N0=262144 N1=262144 kernelpagesize_kB=4\n",
    ));
    let r = t.advise(&opts());
    let f = with_id(&r, "numa.spans-nodes");
    assert_eq!(f.len(), 1, "{:#?} {:?}", r.findings, r.skipped);
    assert_eq!(
        f[0].verify,
        Verify::DaemonWillTry {
            strategy: "memory_affinity".into()
        }
    );
}

#[test]
fn a_process_on_one_node_is_placed_well() {
    let t = Tree::healthy();
    two_nodes(&t);
    t.process(&placed(
        "7f0000000000 default anon=524288 dirty=524288 N0=524288 kernelpagesize_kB=4\n",
    ));
    assert!(with_id(&t.advise(&opts()), "numa.spans-nodes").is_empty());
}

// --- 7. network, pressure, throttling ---

const NETSTAT_HEAD: &str = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\n";

#[test]
fn listen_overflows_with_a_small_somaxconn_are_a_warning() {
    let t = Tree::healthy();
    t.file("proc/sys/net/core/somaxconn", "128\n");
    t.file(
        "proc/net/netstat",
        &format!("{NETSTAT_HEAD}TcpExt: 0 0 0\n"),
    );
    assert!(with_id(&t.advise(&opts()), "net.listen-overflows").is_empty());
    t.file(
        "proc/net/netstat",
        &format!("{NETSTAT_HEAD}TcpExt: 0 512 512\n"),
    );
    let r = t.advise(&opts());
    let f = with_id(&r, "net.listen-overflows");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0].apply.contains("net.core.somaxconn=4096"));
}

#[test]
fn retransmits_above_five_percent_are_a_warning_and_under_one_are_not() {
    let t = Tree::healthy();
    let snmp =
        |retrans: u64| format!("Tcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 100000 {retrans}\n");
    t.file("proc/net/snmp", &snmp(500));
    assert!(with_id(&t.advise(&opts()), "net.tcp-retransmits").is_empty());
    t.file("proc/net/snmp", &snmp(6000));
    let r = t.advise(&opts());
    assert_eq!(
        with_id(&r, "net.tcp-retransmits")[0].severity,
        Severity::Warning
    );
}

#[test]
fn softnet_drops_are_a_warning() {
    let t = Tree::healthy();
    t.file(
        "proc/net/softnet_stat",
        "0000ff00 00000000 00000000 00000000\n0000ff00 00000000 00000000 00000000\n",
    );
    assert!(with_id(&t.advise(&opts()), "net.softnet-drops").is_empty());
    t.file(
        "proc/net/softnet_stat",
        "0000ff00 00000010 00000000 00000000\n0000ff00 00000000 00000000 00000000\n",
    );
    let r = t.advise(&opts());
    let f = with_id(&r, "net.softnet-drops");
    assert_eq!(f.len(), 1);
    assert!(
        f[0].title.starts_with("16 packets dropped"),
        "{}",
        f[0].title
    );
}

#[test]
fn softnet_squeezes_from_one_in_a_thousand_rounds_are_noted_and_rarer_ones_are_not() {
    let t = Tree::healthy();
    // 2 × 0x10000 packets processed; 0x40 squeezes = 64, under 0.1 % of 131,072.
    t.file(
        "proc/net/softnet_stat",
        "00010000 00000000 00000040 00000000\n00010000 00000000 00000000 00000000\n",
    );
    assert!(with_id(&t.advise(&opts()), "net.softnet-squeezed").is_empty());
    // 0x90 = 144 squeezes: over 0.1 % of the packets.
    t.file(
        "proc/net/softnet_stat",
        "00010000 00000000 00000090 00000000\n00010000 00000000 00000000 00000000\n",
    );
    let r = t.advise(&opts());
    let f = with_id(&r, "net.softnet-squeezed");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Info);
    assert!(f[0].title.contains("144 times"), "{}", f[0].title);
    assert!(f[0].apply.contains("netdev_budget"), "{}", f[0].apply);
}

#[test]
fn memory_pressure_with_full_stalls_is_critical_and_calm_pressure_is_not() {
    let t = Tree::healthy();
    let psi = |some: f64, full: f64| {
        format!(
            "some avg10=0.00 avg60={some:.2} avg300=1.00 total=1\nfull avg10=0.00 avg60={full:.2} avg300=0.00 total=1\n"
        )
    };
    t.file("proc/pressure/memory", &psi(1.0, 0.0));
    assert!(with_id(&t.advise(&opts()), "psi.memory").is_empty());
    t.file("proc/pressure/memory", &psi(30.0, 12.0));
    let r = t.advise(&opts());
    assert_eq!(with_id(&r, "psi.memory")[0].severity, Severity::Critical);
}

#[test]
fn a_kernel_without_psi_skips_the_check_and_says_so() {
    let r = Tree::healthy().advise(&opts());
    assert!(
        skipped(&r, "psi").contains("/proc/pressure/cpu (absent"),
        "{:?}",
        r.skipped
    );
}

#[test]
fn a_cgroup_throttled_in_many_periods_is_a_finding() {
    let t = Tree::healthy();
    t.file("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
    let cg = "sys/fs/cgroup/system.slice/app.service";
    t.file(&format!("{cg}/cpu.max"), "50000 100000\n");
    t.file(
        &format!("{cg}/cpu.stat"),
        "usage_usec 1000\nnr_periods 1000\nnr_throttled 10\nthrottled_usec 5\n",
    );
    t.process(&Proc {
        cgroup: "0::/system.slice/app.service\n",
        ..Proc::small(920, "app")
    });
    assert!(with_id(&t.advise(&opts()), "cgroup.cpu-throttled").is_empty());
    t.file(
        &format!("{cg}/cpu.stat"),
        "usage_usec 1000\nnr_periods 1000\nnr_throttled 400\nthrottled_usec 5\n",
    );
    let r = t.advise(&opts());
    let f = with_id(&r, "cgroup.cpu-throttled");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert_eq!(f[0].subject, "cgroup /system.slice/app.service");
    assert!(f[0].title.contains("quota 50000 100000"), "{}", f[0].title);
}

// --- 8. applications ---

fn jvm(cmdline: Vec<&'static str>, cpus: &'static str, cgroup: &'static str) -> Proc {
    Proc {
        cmdline,
        cpus,
        cgroup,
        threads: 40,
        rss_anon_kb: 2 * GIB_KB,
        anon_huge_kb: 2 * GIB_KB,
        ..Proc::small(1000, "java")
    }
}

#[test]
fn a_jvm_heap_near_its_cgroup_memory_limit_is_critical() {
    let t = Tree::healthy();
    t.file("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
    t.file("sys/fs/cgroup/app/memory.max", &format!("{}\n", 4u64 << 30));
    t.process(&jvm(
        vec!["java", "-Xmx2g", "-jar", "a.jar"],
        "0-7",
        "0::/app\n",
    ));
    assert!(with_id(&t.advise(&opts()), "jvm.heap-near-cgroup-limit").is_empty());
    t.process(&jvm(
        vec!["java", "-Xmx4g", "-jar", "a.jar"],
        "0-7",
        "0::/app\n",
    ));
    let r = t.advise(&opts());
    let f = with_id(&r, "jvm.heap-near-cgroup-limit");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].evidence
            .iter()
            .any(|e| e.source == "/sys/fs/cgroup/app/memory.max")
    );
}

#[test]
fn more_gc_threads_than_bound_cpus_is_a_finding_with_a_study_of_the_flag() {
    let t = Tree::healthy();
    t.process(&jvm(
        vec!["java", "-XX:ParallelGCThreads=8", "-jar", "a.jar"],
        "0-1",
        "0::/\n",
    ));
    let r = t.advise(&opts());
    let f = with_id(&r, "jvm.gc-threads-over-cpus");
    assert_eq!(f.len(), 1);
    let Verify::Study { file } = &f[0].verify else {
        panic!("{:?}", f[0].verify)
    };
    assert!(file.contains("-XX:ParallelGCThreads={gc}"), "{file}");
    assert!(file.contains("gc = [\"8\", \"2\"]"), "{file}");

    t.process(&jvm(
        vec!["java", "-XX:ParallelGCThreads=2", "-jar", "a.jar"],
        "0-1",
        "0::/\n",
    ));
    assert!(with_id(&t.advise(&opts()), "jvm.gc-threads-over-cpus").is_empty());
}

#[test]
fn a_large_heap_without_the_thp_flag_under_madvise_is_an_info_finding() {
    let t = Tree::healthy();
    t.process(&jvm(
        vec!["java", "-Xmx8g", "-jar", "a.jar"],
        "0-7",
        "0::/\n",
    ));
    let r = t.advise(&opts());
    assert_eq!(with_id(&r, "jvm.no-thp-flag").len(), 1);
    t.process(&jvm(
        vec![
            "java",
            "-XX:+UseTransparentHugePages",
            "-Xmx8g",
            "-jar",
            "a.jar",
        ],
        "0-7",
        "0::/\n",
    ));
    assert!(with_id(&t.advise(&opts()), "jvm.no-thp-flag").is_empty());
}

fn postgres(t: &Tree, conf: &str) {
    t.file("var/lib/pg/data/postgresql.conf", conf);
    t.process(&Proc {
        cmdline: vec![
            "/usr/lib/postgresql/16/bin/postgres",
            "-D",
            "/var/lib/pg/data",
        ],
        ..Proc::small(1100, "postgres")
    });
}

#[test]
fn postgres_with_huge_pages_off_and_large_shared_buffers_is_a_warning() {
    let t = Tree::healthy();
    postgres(&t, "shared_buffers = 4GB\nhuge_pages = off\n");
    let r = t.advise(&opts());
    let f = with_id(&r, "postgres.huge-pages-off");
    assert_eq!(f.len(), 1, "{:#?} {:?}", r.findings, r.skipped);
    assert!(f[0].apply.contains("vm.nr_hugepages="), "{}", f[0].apply);
    assert!(
        f[0].evidence
            .iter()
            .any(|e| e.what == "huge_pages" && e.source == "/var/lib/pg/data/postgresql.conf")
    );
}

#[test]
fn postgres_auto_conf_overrides_the_main_file() {
    let t = Tree::healthy();
    postgres(&t, "shared_buffers = 4GB\nhuge_pages = off\n");
    t.file(
        "var/lib/pg/data/postgresql.auto.conf",
        "huge_pages = 'on'\n",
    );
    let r = t.advise(&opts());
    assert!(with_id(&r, "postgres.huge-pages-off").is_empty());
    assert!(with_id(&r, "postgres.huge-pages-unreserved").is_empty());
}

#[test]
fn postgres_settings_on_its_command_line_override_its_files() {
    // As the proof harness starts it: the files say nothing, the command line says 2 GB and off.
    let t = Tree::healthy();
    t.file("var/lib/pg/data/postgresql.conf", "max_connections = 100\n");
    t.process(&Proc {
        cmdline: vec![
            "/usr/lib/postgresql/15/bin/postgres",
            "-D",
            "/var/lib/pg/data",
            "-c",
            "shared_buffers=2GB",
            "-c",
            "huge_pages=off",
        ],
        ..Proc::small(1100, "postgres")
    });
    let r = t.advise(&opts());
    assert!(
        with_id(&r, "postgres.shared-buffers-small").is_empty(),
        "the 128 MiB default of the file is not what runs: {:#?}",
        r.findings
    );
    let f = with_id(&r, "postgres.huge-pages-off");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert!(f[0].evidence.iter().any(|e| e.what == "shared_buffers"
        && e.value.starts_with("2GB")
        && e.source == "the postmaster's command line"));
}

#[test]
fn postgres_with_the_default_shared_buffers_on_a_roomy_machine_is_an_info_finding() {
    let t = Tree::healthy();
    postgres(&t, "max_connections = 100\n");
    let r = t.advise(&opts());
    let f = with_id(&r, "postgres.shared-buffers-small");
    assert_eq!(f.len(), 1);
    assert!(
        f[0].apply.contains("shared_buffers = '4096MB'"),
        "{}",
        f[0].apply
    );

    postgres(&t, "shared_buffers = 4GB\nhuge_pages = on\n");
    assert!(with_id(&t.advise(&opts()), "postgres.shared-buffers-small").is_empty());
}

#[test]
fn an_unreadable_postgres_config_is_skipped_and_named() {
    let t = Tree::healthy();
    t.process(&Proc {
        cmdline: vec!["postgres", "-D", "/nowhere"],
        ..Proc::small(1100, "postgres")
    });
    let r = t.advise(&opts());
    assert!(
        skipped(&r, "postgres").contains("/nowhere/postgresql.conf"),
        "{:?}",
        r.skipped
    );
}

fn threaded(environ: Vec<&'static str>, libc: bool) -> Proc {
    Proc {
        threads: 64,
        rss_anon_kb: 4 * GIB_KB,
        anon_huge_kb: 4 * GIB_KB,
        environ,
        libc,
        ..Proc::small(1200, "server")
    }
}

#[test]
fn a_many_threaded_glibc_process_without_malloc_arena_max_is_an_info_finding() {
    let t = Tree::healthy();
    t.process(&threaded(vec!["PATH=/bin"], true));
    let r = t.advise(&opts());
    let f = with_id(&r, "malloc.arena-max-unset");
    assert_eq!(f.len(), 1);
    let Verify::Study { file } = &f[0].verify else {
        panic!("{:?}", f[0].verify)
    };
    assert!(file.contains("MALLOC_ARENA_MAX = \"{level}\""), "{file}");
    assert!(file.contains("level = [\"64\", \"4\", \"2\"]"), "{file}");
}

#[test]
fn malloc_arena_max_set_or_no_glibc_means_no_arena_finding() {
    let t = Tree::healthy();
    t.process(&threaded(vec!["MALLOC_ARENA_MAX=2"], true));
    assert!(with_id(&t.advise(&opts()), "malloc.arena-max-unset").is_empty());
    t.process(&threaded(vec!["PATH=/bin"], false));
    assert!(with_id(&t.advise(&opts()), "malloc.arena-max-unset").is_empty());
}

// --- ephemeral ports and dirty memory ---

fn tcp_lines(n: u32, state: &str) -> String {
    let mut s = String::from("  sl  local_address rem_address   st tx_queue rx_queue\n");
    for i in 0..n {
        s.push_str(&format!(
            "{i:4}: 0100007F:{:04X} 0100007F:1F90 {state} 00000000:00000000\n",
            40000 + i
        ));
    }
    s
}

#[test]
fn most_ephemeral_ports_held_in_time_wait_is_critical_and_a_few_are_not() {
    let t = Tree::healthy();
    t.file("proc/sys/net/ipv4/ip_local_port_range", "40000\t40099\n");
    t.file("proc/net/tcp", &tcp_lines(10, "06"));
    assert!(with_id(&t.advise(&opts()), "net.ephemeral-ports").is_empty());
    t.file("proc/net/tcp", &tcp_lines(90, "06"));
    let r = t.advise(&opts());
    let f = with_id(&r, "net.ephemeral-ports");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].title.contains("90 of them in TIME_WAIT"),
        "{}",
        f[0].title
    );
}

fn dirty(t: &Tree, dirty_kb: u64, background_ratio: u32) {
    t.file(
        "proc/meminfo",
        &format!("MemTotal: 67108864 kB\nMemAvailable: 62914560 kB\nDirty: {dirty_kb} kB\nWriteback: 0 kB\nSwapTotal: 0 kB\n"),
    );
    t.file("proc/sys/vm/dirty_bytes", "0\n");
    t.file("proc/sys/vm/dirty_background_bytes", "0\n");
    t.file("proc/sys/vm/dirty_ratio", "20\n");
    t.file(
        "proc/sys/vm/dirty_background_ratio",
        &format!("{background_ratio}\n"),
    );
}

#[test]
fn dirty_memory_near_the_hard_threshold_is_a_warning() {
    let t = Tree::healthy();
    // 20 % of 60 GiB available is 12 GiB; 8 GiB dirty is past half of it.
    dirty(&t, 8 * GIB_KB, 10);
    let r = t.advise(&opts());
    assert_eq!(
        with_id(&r, "vm.dirty-near-limit").len(),
        1,
        "{:#?}",
        r.findings
    );
    assert!(with_id(&r, "vm.dirty-background-large").is_empty());
}

#[test]
fn a_large_background_threshold_is_an_info_finding_and_a_small_one_is_not() {
    let t = Tree::healthy();
    dirty(&t, 1024, 10);
    assert_eq!(
        with_id(&t.advise(&opts()), "vm.dirty-background-large").len(),
        1
    );
    dirty(&t, 1024, 1);
    let r = t.advise(&opts());
    assert!(with_id(&r, "vm.dirty-background-large").is_empty());
    assert!(with_id(&r, "vm.dirty-near-limit").is_empty());
}
