//! The systemd unit's (and the DaemonSet's) capability set is enough, and CAP_SYS_NICE in it is
//! needed: the daemon runs as root with its bounding set cut to the unit's
//! `CapabilityBoundingSet` (`setpriv`, as systemd does) on a load that runs as `nobody`, binds
//! that other user's threads, and fails to once CAP_SYS_NICE is taken out. Only the spawned load
//! is touched (`only_matched`); read-ahead and large pages are off, so no global setting changes.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod support;
use support::{Dir, EXE, finish, status_json, terminate, wait_until};

/// The user the load runs as: another user than the daemon's.
const NOBODY: &str = "65534";

fn unit_caps() -> Vec<String> {
    let unit = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/perfpilot.service"),
    )
    .unwrap();
    unit.lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap()
        .split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_lowercase())
        .collect()
}

/// A `perfpilot bench load` as `nobody`, from a copy of the binary that user may execute.
struct Load(Child);

impl Load {
    fn spawn(exe: &Path, tag: &str) -> Load {
        let mut c = Command::new("setpriv")
            .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--"])
            .arg(exe)
            .args(["bench", "load", "--tag", tag, "--threads", "3"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("setpriv (util-linux)");
        let mut line = String::new();
        BufReader::new(c.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        Load(c)
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether every thread of `pid` is bound to a single CPU.
fn bound(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).all(|t| {
        std::fs::read_to_string(t.path().join("status")).is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .is_some_and(|m| m.trim().parse::<u32>().is_ok())
        })
    })
}

/// The daemon as root with only `caps` in its bounding set, and no new privileges.
fn daemon_with(caps: &[String], config: &Path, state: &Path, run_for: &str) -> Child {
    let set = std::iter::once("-all".to_string())
        .chain(caps.iter().map(|c| format!("+{c}")))
        .collect::<Vec<_>>()
        .join(",");
    Command::new("setpriv")
        .args([
            "--bounding-set",
            &set,
            "--inh-caps",
            "-all",
            "--no-new-privs",
            "--",
        ])
        .arg(EXE)
        .args(["daemon", "--config"])
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .args(["--for", run_for])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

const FAST: &str = "only_matched = true\n[tunables]\ninterval_s = 0.5\nmin_age_s = 0\nmin_cpu_cores = 0\nmin_memory_mib = 0\naffinity_level = \"core\"\nwindows = 4\nheadroom = 2.5\nread_ahead = false\nlarge_pages = false\nmemory_affinity = false\nallow_unverified = true\n";

#[test]
fn the_units_capabilities_bind_another_users_threads_and_cap_sys_nice_is_needed() {
    // The effective uid, from /proc: the test needs root to start the daemon as systemd does.
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .is_some_and(|u| u.split_whitespace().nth(1) == Some("0"))
    });
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !root || cpus < 2 {
        eprintln!("skipped: needs root and two CPUs (root {root}, {cpus} CPUs)");
        return;
    }
    let dir = Dir::new("caps");
    // A copy of the binary that `nobody` can reach and execute.
    let bin = dir.0.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = bin.join("perfpilot");
    std::fs::copy(EXE, &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();

    let caps = unit_caps();
    assert!(caps.contains(&"sys_nice".to_string()), "{caps:?}");
    let tag = format!("{}-caps", std::process::id());
    let load = Load::spawn(&exe, &tag);
    let cfg = dir.config(&format!(
        "{FAST}\n[[workload]]\nmatch = {{ cmdline = \"--tag {tag}\" }}\n"
    ));

    // With the unit's set: the other user's threads are bound, and unbound again at stop.
    let state = dir.0.join("with");
    let d = daemon_with(&caps, &cfg, &state, "120s");
    let applied = wait_until(Duration::from_secs(90), || bound(load.pid()));
    terminate(&d);
    let log = finish(d);
    assert!(applied, "the load was never bound:\n{log}");
    assert!(!bound(load.pid()), "not unbound at stop:\n{log}");
    let s = status_json(&state);
    let action = &s["actions"][0];
    assert_eq!(action["strategy"], "cache_affinity", "{s:#}");

    // Without CAP_SYS_NICE: the same action is tried, and the kernel refuses it.
    let fewer: Vec<String> = caps.iter().filter(|c| *c != "sys_nice").cloned().collect();
    let state = dir.0.join("without");
    let d = daemon_with(&fewer, &cfg, &state, "120s");
    let tried = wait_until(Duration::from_secs(90), || {
        std::fs::read_to_string(state.join("status.json")).is_ok_and(|_| {
            support::status_if_written(&state)
                .is_some_and(|s| s["actions"].as_array().is_some_and(|a| !a.is_empty()))
        })
    });
    // Give it the windows it would have needed to bind, then stop it.
    std::thread::sleep(Duration::from_secs(3));
    let never_bound = !bound(load.pid());
    terminate(&d);
    let log = finish(d);
    assert!(tried, "no action tried without CAP_SYS_NICE:\n{log}");
    assert!(never_bound, "bound without CAP_SYS_NICE:\n{log}");
    assert!(
        log.contains("sched_setaffinity failed") && log.contains("Operation not permitted"),
        "no refusal in the log:\n{log}"
    );
}
