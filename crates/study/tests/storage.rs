//! Storage factors end to end on loop devices: each trial makes its file system from the
//! factor's level (type and mkfs options), sets the read-ahead of its loop device through a
//! knob, runs the batch on it, and removes it all; a file system that cannot be made here is
//! reported as skipped with the reason. Needs root and loop devices (else it says so).

use std::path::Path;

use perfpilot_observe::{Fs, Topology};
use perfpilot_store::{Store, TrialStatus};
use perfpilot_study::{RunOptions, Study, run_study};

#[test]
fn each_trial_runs_on_its_own_file_system_with_its_read_ahead_and_leaves_nothing_behind() {
    if let Some(why) = perfpilot_sys::scratchfs::unavailable("ext4") {
        eprintln!("skipped: no scratch file system on this machine: {why}");
        return;
    }
    let xfs = perfpilot_sys::scratchfs::unavailable("xfs").is_none();
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("mnt");
    let backing = dir.path().join("scratch.img");
    // The batch writes what it saw (file-system type and read-ahead) as its job's name.
    let script = dir.path().join("probe.sh");
    std::fs::write(
        &script,
        r#"mount=$1; dev=$2; log=$3
dd if=/dev/zero of="$mount/data" bs=1M count=8 status=none
t=$(stat -f -c %T "$mount"); ra=$(cat /sys/block/$dev/queue/read_ahead_kb)
printf '{"job":"%s ra=%s","status":"ok","real_s":0.1,"written_bytes":8388608}\n' "$t" "$ra" > "$log"
"#,
    )
    .unwrap();
    let text = format!(
        r#"
[deployment]
command = "sh {script} {{mount}} {{device}} {dir}/jobs.jsonl"
[[deployment.knobs]]
path = "sys/block/{{device}}/queue/read_ahead_kb"
value = "{{read_ahead_kb}}"
[storage]
size = "320M"
mount = "{mount}"
backing = "{backing}"
filesystem = "{{filesystem}}"
[load]
kind = "batch"
timeout = "60s"
jobs = "{dir}/jobs.jsonl"
[factors]
filesystem = ["ext4 -b 1024", "xfs", "nosuchfs"]
read_ahead_kb = [1024]
[run]
repetitions = 1
min_rounds = 1
racing = false
cooldown = "0s"
confirm_rounds = 1
"#,
        script = script.display(),
        dir = dir.path().display(),
        mount = mount.display(),
        backing = backing.display(),
    );
    let study = Study::parse(&text, Path::new("storage.toml")).unwrap();
    let topo = Topology::read(&Fs::live()).unwrap();
    let opts = RunOptions::new(dir.path().join("s.db"));
    let out = run_study(&study, &topo, &opts).unwrap();
    // The file system this machine cannot make is reported, not dropped silently.
    let skipped = out
        .summary
        .infeasible
        .iter()
        .find(|i| i.config.contains("nosuchfs"))
        .expect("nosuchfs is reported");
    assert!(
        skipped.reason.contains("mkfs.nosuchfs is not installed"),
        "{}",
        skipped.reason
    );
    let store = Store::open(&opts.store).unwrap();
    let trials = store.trials(out.run).unwrap();
    let mut seen = Vec::new();
    for t in &trials {
        if !xfs && t.config.contains("xfs") {
            continue;
        }
        assert_eq!(t.status, TrialStatus::Ok, "{}: {}", t.config, t.reason);
        let d: perfpilot_study::trial::TrialDetail = serde_json::from_str(&t.detail).unwrap();
        assert!(d.device.as_deref().is_some_and(|x| x.starts_with("loop")));
        seen.extend(d.jobs.iter().map(|j| j.job.clone()));
    }
    assert!(seen.iter().any(|j| j == "ext2/ext3 ra=1024"), "{seen:?}");
    if xfs {
        assert!(seen.iter().any(|j| j == "xfs ra=1024"), "{seen:?}");
    }
    // Nothing left: not mounted, no backing file, no loop device on it, no journal.
    assert!(!perfpilot_sys::scratchfs::is_mounted(&mount));
    assert!(!backing.exists());
    let loops = std::process::Command::new("losetup")
        .arg("-j")
        .arg(&backing)
        .output()
        .unwrap();
    assert!(loops.stdout.is_empty());
}
