//! Crash safety: a writer killed with SIGKILL mid-stream leaves every committed sample readable.
//!
//! The test re-executes its own binary with `CRASH_CHILD_ENV` set; in the child,
//! [`crash_child`] appends samples forever and reports each committed one on stdout.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use perfpilot_store::{Retention, Store};

const CRASH_CHILD_ENV: &str = "PERFPILOT_STORE_CRASH_CHILD";
const T0: i64 = 1_763_800_000_000;

fn sample(i: u64) -> perfpilot_observe::sample::Sample {
    // Big enough (a few hundred KB of JSON) that the kill often lands inside a write.
    common::synthetic(i, 100, 10, T0 + i as i64 * 1_000)
}

/// The child's body; a no-op unless run by [`killed_writer_leaves_a_readable_store`].
#[test]
fn crash_child() {
    let Some(path) = std::env::var_os(CRASH_CHILD_ENV) else {
        return;
    };
    let mut store = Store::open(&path).expect("child: open");
    store.set_retention(Retention::unlimited());
    for i in 0.. {
        let id = store.append(&sample(i)).expect("child: append");
        println!("committed {i} {id}");
    }
}

#[test]
fn killed_writer_leaves_a_readable_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash/perfpilot.db");
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CRASH_CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut committed = 0u64;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("committed ") {
            committed = rest.split(' ').next().unwrap().parse::<u64>().unwrap() + 1;
            if committed >= 25 {
                break;
            }
        }
    }
    // Let the child run on for a varying few milliseconds so the kill lands at different points
    // of encoding, inserting and committing.
    let jitter = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() % 7_000_000)
        .unwrap_or(0);
    std::thread::sleep(std::time::Duration::from_nanos(jitter.into()));
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child was killed");
    assert!(
        committed >= 25,
        "the child committed only {committed} samples"
    );

    // WAL recovery on open; every committed sample reads back intact, in order.
    let store = Store::open(&path).unwrap();
    let r = store.samples(None, None).unwrap();
    assert_eq!(r.skipped_corrupt(), 0, "{:?}", r.corrupt);
    assert!(
        r.samples.len() as u64 >= committed,
        "{} < {committed}",
        r.samples.len()
    );
    assert_eq!(store.count().unwrap(), r.samples.len() as u64);
    for (i, s) in r.samples.iter().enumerate() {
        assert_eq!(s, &sample(i as u64), "sample {i}");
    }
    println!(
        "killed after {committed} acknowledged samples; {} read back",
        r.samples.len()
    );
}
