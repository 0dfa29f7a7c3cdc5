//! `perfpilot advise --check` and `--ignore` on a fixture tree (`--root`): the exit status
//! follows the worst finding left.

use std::path::Path;
use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_perfpilot");

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A host with two instances of `scoring` bound to overlapping CPUs (a warning).
fn tree(root: &Path) {
    write(root, "sys/devices/system/cpu/online", "0-7\n");
    write(root, "proc/self/mounts", "");
    for (pid, cpus) in [(700, "0-3"), (701, "2-5")] {
        write(
            root,
            &format!("proc/{pid}/status"),
            &format!(
                "Name:\tscoring\nTgid:\t{pid}\nUid:\t1000\t1000\t1000\t1000\nVmSize:\t1000 kB\nThreads:\t2\nCpus_allowed_list:\t{cpus}\n"
            ),
        );
        write(root, &format!("proc/{pid}/cmdline"), "scoring\0");
    }
}

fn advise(root: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let state = root.join("state");
    let out = Command::new(EXE)
        .args(["advise", "--check", "--root"])
        .arg(root)
        .arg("--state-dir")
        .arg(&state)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn check_exits_1_on_a_warning_and_0_when_it_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let (code, text) = advise(dir.path(), &[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("WARNING cpu.overlapping-bindings  pids 700 and 701 (scoring)"),
        "{text}"
    );
    assert!(
        text.contains("apply:    sudo taskset -a -cp 4-5 701"),
        "{text}"
    );

    let (code, text) = advise(dir.path(), &["--ignore", "cpu.overlapping-bindings"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("1 ignored"), "{text}");
}

#[test]
fn json_output_is_the_documented_report() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let state = dir.path().join("state");
    let out = Command::new(EXE)
        .args(["advise", "--json", "--root"])
        .arg(dir.path())
        .arg("--state-dir")
        .arg(&state)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["version"], 1);
    assert_eq!(v["processes"], 2);
    let f = &v["findings"][0];
    assert_eq!(f["id"], "cpu.overlapping-bindings");
    assert_eq!(f["severity"], "warning");
    assert_eq!(f["verify"]["kind"], "observe");
    assert_eq!(f["evidence"][0]["source"], "/proc/700/status");
    // No daemon runs, and this tree has no CPUs for the engine's dry run: it says why, then
    // that no daemon has run there either.
    let note = v["daemon"]["note"].as_str().unwrap();
    assert!(
        note.starts_with("the dry run failed (reading the topology")
            && note.contains("no daemon has run on"),
        "{note}"
    );
    assert_eq!(v["daemon"]["source"], "none");
    assert!(
        v["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["check"] == "thp")
    );
}
