//! Block devices on fixture trees: read-ahead against the sequential share of reads, the
//! queue's occupancy against its depth, BFQ on a fast device; each firing on a planted
//! condition and silent without it.

mod common;

use common::{Tree, with_id};
use perfpilot_advise::{Options, Severity, Verify};

/// `vda` with `read_ahead_kb`, `nr_requests`, `scheduler` and `rotational`, and counters since
/// boot: reads, reads merged, sectors read, I/O ms and weighted I/O ms.
fn disk(t: &Tree, ra_kb: u64, depth: u64, sched: &str, rotational: u8, c: [u64; 5]) {
    let [reads, merged, sectors, io_ms, weighted] = c;
    let q = "sys/block/vda/queue";
    t.file(&format!("{q}/read_ahead_kb"), &format!("{ra_kb}\n"));
    t.file(&format!("{q}/nr_requests"), &format!("{depth}\n"));
    t.file(&format!("{q}/scheduler"), &format!("{sched}\n"));
    t.file(&format!("{q}/rotational"), &format!("{rotational}\n"));
    t.file("sys/block/vda/size", "209715200\n");
    t.file("sys/block/loop0/size", "0\n");
    t.file(
        "proc/diskstats",
        &format!(
            " 253 0 vda {reads} {merged} {sectors} 1000 200000 10 1600000 900 0 {io_ms} {weighted} 0 0 0 0 0 0\n   7 0 loop0 0 0 0 0 0 0 0 0 0 0 0\n"
        ),
    );
}

const GIB_SECTORS: u64 = 2 * 1024 * 1024;

#[test]
fn small_read_ahead_on_a_sequentially_read_device_is_a_warning_the_daemon_will_try() {
    let t = Tree::healthy();
    // 60 % of reads merged, 8 GiB read.
    disk(
        &t,
        128,
        256,
        "[none] mq-deadline",
        0,
        [400_000, 600_000, 8 * GIB_SECTORS, 1000, 2000],
    );
    let r = t.advise(&Options::default());
    let f = with_id(&r, "block.read-ahead-low");
    assert_eq!(f.len(), 1, "{:#?} {:?}", r.findings, r.skipped);
    assert_eq!(f[0].subject, "vda");
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].verify,
        Verify::DaemonWillTry {
            strategy: "read_ahead".into()
        }
    );
    assert!(
        f[0].apply
            .starts_with("sudo blockdev --setra 2048 /dev/vda")
    );
    // Random reads under the same read-ahead: nothing to say; nor with little read at all.
    disk(
        &t,
        128,
        256,
        "[none] mq-deadline",
        0,
        [1_000_000, 1_000, 8 * GIB_SECTORS, 1000, 2000],
    );
    assert!(with_id(&t.advise(&Options::default()), "block.read-ahead-low").is_empty());
    disk(
        &t,
        128,
        256,
        "[none] mq-deadline",
        0,
        [400, 600, 1000, 1000, 2000],
    );
    assert!(with_id(&t.advise(&Options::default()), "block.read-ahead-low").is_empty());
}

#[test]
fn large_read_ahead_on_a_randomly_read_device_is_an_info_finding() {
    let t = Tree::healthy();
    disk(
        &t,
        4096,
        256,
        "[none] mq-deadline",
        0,
        [1_000_000, 1_000, 8 * GIB_SECTORS, 1000, 2000],
    );
    let r = t.advise(&Options::default());
    let f = with_id(&r, "block.read-ahead-high");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Info);
    disk(
        &t,
        4096,
        256,
        "[none] mq-deadline",
        0,
        [400_000, 600_000, 8 * GIB_SECTORS, 1000, 2000],
    );
    assert!(with_id(&t.advise(&Options::default()), "block.read-ahead-high").is_empty());
}

#[test]
fn a_queue_full_on_average_while_busy_is_a_warning_and_a_roomy_one_is_not() {
    let t = Tree::healthy();
    // 100,000 ms busy with 6,000,000 ms of weighted time: 60 in flight against a depth of 64.
    disk(
        &t,
        128,
        64,
        "[none] mq-deadline",
        0,
        [1_000, 0, 1000, 100_000, 6_000_000],
    );
    let r = t.advise(&Options::default());
    let f = with_id(&r, "block.queue-full");
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert!(
        f[0].apply
            .starts_with("echo 128 | sudo tee /sys/block/vda/queue/nr_requests")
    );
    disk(
        &t,
        128,
        256,
        "[none] mq-deadline",
        0,
        [1_000, 0, 1000, 100_000, 6_000_000],
    );
    assert!(with_id(&t.advise(&Options::default()), "block.queue-full").is_empty());
    // Too little I/O time to judge.
    disk(
        &t,
        128,
        64,
        "[none] mq-deadline",
        0,
        [1_000, 0, 1000, 1_000, 60_000],
    );
    assert!(with_id(&t.advise(&Options::default()), "block.queue-full").is_empty());
}

#[test]
fn bfq_on_a_busy_non_rotational_device_is_an_info_finding_but_not_on_a_spinning_disk() {
    let t = Tree::healthy();
    disk(
        &t,
        128,
        256,
        "mq-deadline [bfq] none",
        0,
        [1_000_000, 0, 1000, 1000, 2000],
    );
    assert_eq!(
        with_id(&t.advise(&Options::default()), "block.bfq-on-fast-device").len(),
        1
    );
    disk(
        &t,
        128,
        256,
        "mq-deadline [bfq] none",
        1,
        [1_000_000, 0, 1000, 1000, 2000],
    );
    assert!(with_id(&t.advise(&Options::default()), "block.bfq-on-fast-device").is_empty());
}

#[test]
fn a_tree_without_diskstats_skips_the_block_check_and_says_so() {
    let t = Tree::healthy();
    t.file("sys/block/vda/queue/read_ahead_kb", "128\n");
    let r = t.advise(&Options::default());
    assert!(
        r.skipped.iter().any(|s| s.check == "block"),
        "{:?}",
        r.skipped
    );
    assert!(r.findings.iter().all(|f| !f.id.starts_with("block.")));
}
