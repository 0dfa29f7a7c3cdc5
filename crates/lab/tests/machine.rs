//! The machine's facts read from fixture trees: the topology's from a captured two-socket
//! POWER8 tree, the rest from a tree written here.

use std::path::PathBuf;

use perfpilot_lab::MachineFacts;
use perfpilot_sys::Fs;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

#[test]
fn the_topology_gives_the_cpus_nodes_and_threads_per_core() {
    let f = MachineFacts::read(&Fs::at(fixture("power-2socket-smt8")));
    assert_eq!(f.smt, Some(8));
    assert_eq!(f.nodes, Some(2));
    assert_eq!(f.cpus(), f.cores.map(|c| c * 8));
    assert!(f.memory_bytes.is_some_and(|b| b > 0), "{f:?}");
}

#[test]
fn the_model_kernel_and_host_come_from_proc_and_a_tree_without_cpus_leaves_them_unknown() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kernel = dir.path().join("proc/sys/kernel");
    std::fs::create_dir_all(&kernel).expect("dirs");
    std::fs::write(
        dir.path().join("proc/cpuinfo"),
        "processor\t: 0\ncpu family\t: 25\nmodel name\t: AMD EPYC 7B13\n",
    )
    .expect("cpuinfo");
    std::fs::write(kernel.join("osrelease"), "6.18.0\n").expect("osrelease");
    std::fs::write(kernel.join("hostname"), "lab\n").expect("hostname");
    std::fs::write(dir.path().join("proc/meminfo"), "MemTotal:       2048 kB\n").expect("meminfo");
    let f = MachineFacts::read(&Fs::at(dir.path()));
    assert_eq!(f.cpu_model.as_deref(), Some("AMD EPYC 7B13"));
    assert_eq!(f.kernel.as_deref(), Some("6.18.0"));
    assert_eq!(f.hostname.as_deref(), Some("lab"));
    assert_eq!(f.memory_bytes, Some(2048 * 1024));
    assert_eq!((f.cpus(), f.online, f.nodes), (None, None, None));
}

#[test]
fn the_machine_is_read_from_the_stored_host_facts() {
    let host = r#"{"online":"0-7","nodes":1,"llcs":1,"cores":4,"smt":2,"cpu_model":"POWER8E (raw), altivec supported","kernel":"6.1.0","hostname":"p8","memory_bytes":17179869184,"trial_hosts":"local"}"#;
    let m = MachineFacts::from_json(host);
    assert_eq!(m.cpus(), Some(8));
    assert_eq!(m.cores, Some(4));
    assert_eq!(
        m.cpu_model.as_deref(),
        Some("POWER8E (raw), altivec supported")
    );
    assert_eq!(m.memory_bytes, Some(17_179_869_184));
    // An old run's facts without the machine, or none at all, leave it unknown.
    let old = MachineFacts::from_json(r#"{"online":"0-1","cores":2}"#);
    assert_eq!((old.cpus(), old.cpu_model), (Some(2), None));
    assert_eq!(MachineFacts::from_json("not json"), MachineFacts::default());
}
