//! The systemd unit's (and the DaemonSet's) capability set is enough, and its capabilities are
//! needed: the daemon runs as root with its bounding set cut to the unit's
//! `CapabilityBoundingSet` (`setpriv`, as systemd does) on a load that runs as `nobody`, binds
//! that other user's threads, and fails to once CAP_SYS_NICE is taken out; and the `/proc` files
//! it reads of another user's process open with the set, but not without CAP_SYS_PTRACE or
//! CAP_DAC_READ_SEARCH. Only the spawned load is touched (`only_matched`); read-ahead and large
//! pages are off, so no global setting changes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod support;
use support::{Dir, EXE, Load, finish, status_json, terminate, wait_until};

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

impl Load {
    /// A `perfpilot bench load` as `nobody`, from a copy of the binary that user may execute.
    fn spawn(exe: &Path, tag: &str) -> Load {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--"])
            .arg(exe)
            .args(["bench", "load", "--tag", tag, "--threads", "3"]);
        Load::ready(c)
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

const FAST: &str = "only_matched = true\n[tunables]\ninterval_s = 0.5\nmin_age_s = 0\nmin_cpu_cores = 0\nmin_memory_mib = 0\naffinity_level = \"core\"\nwindows = 4\nmax_windows = 4\nrest_change_max = 0\nheadroom = 2.5\nread_ahead = false\nlarge_pages = false\nmemory_affinity = false\nallow_unverified = true\n";

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

/// What a process with only `caps` (as root, like the unit) can read of process `pid`: for each
/// file the daemon reads, whether it opened.
fn readable_with(caps: &[String], pid: u32) -> Vec<(String, bool)> {
    let set = std::iter::once("-all".to_string())
        .chain(caps.iter().map(|c| format!("+{c}")))
        .collect::<Vec<_>>()
        .join(",");
    // environ: the PERFPILOT=off opt-out; io: the I/O signal; smaps_rollup and numa_maps: huge
    // pages and placement; exe: the workload's signature; fd and its links: listening sockets.
    let script = format!(
        "p=/proc/{pid}; for f in environ io smaps_rollup numa_maps; do \
           head -c1 $p/$f >/dev/null 2>&1 && echo \"$f ok\" || echo \"$f denied\"; done; \
         readlink $p/exe >/dev/null 2>&1 && echo 'exe ok' || echo 'exe denied'; \
         ls $p/fd >/dev/null 2>&1 && echo 'fd ok' || echo 'fd denied'; \
         readlink $p/fd/0 >/dev/null 2>&1 && echo 'fd/0 ok' || echo 'fd/0 denied'"
    );
    let out = Command::new("setpriv")
        .args([
            "--bounding-set",
            &set,
            "--inh-caps",
            "-all",
            "--no-new-privs",
            "--",
        ])
        .args(["sh", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(f, r)| (f.to_string(), r == "ok"))
        .collect()
}

fn denied(r: &[(String, bool)]) -> Vec<&str> {
    r.iter()
        .filter(|(_, ok)| !ok)
        .map(|(f, _)| f.as_str())
        .collect()
}

#[test]
fn another_users_proc_files_open_with_the_units_set_and_not_without_ptrace_or_dac_read_search() {
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .is_some_and(|u| u.split_whitespace().nth(1) == Some("0"))
    });
    if !root {
        eprintln!("skipped: needs root to act as the unit's root with fewer capabilities");
        return;
    }
    let mut other = Command::new("setpriv")
        .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--"])
        .args(["sleep", "60"])
        .stdin(Stdio::null())
        .spawn()
        .expect("setpriv (util-linux)");
    // Until setpriv has become nobody and run sleep.
    let pid = other.id();
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    }));
    let caps = unit_caps();
    let without =
        |cap: &str| -> Vec<String> { caps.iter().filter(|c| *c != cap).cloned().collect() };
    let all = readable_with(&caps, pid);
    let no_ptrace = readable_with(&without("sys_ptrace"), pid);
    let no_dac = readable_with(&without("dac_read_search"), pid);
    let _ = other.kill();
    let _ = other.wait();
    assert_eq!(all.len(), 7, "{all:?}");
    assert!(
        denied(&all).is_empty(),
        "denied with the unit's set: {all:?}"
    );
    // The ptrace read check guards these (CAP_PERFMON in the set passes it for smaps_rollup and
    // numa_maps).
    assert_eq!(denied(&no_ptrace), ["io", "exe", "fd/0"], "{no_ptrace:?}");
    // Mode 0400 and 0500 files of another owner need the read override.
    assert_eq!(
        denied(&no_dac),
        ["environ", "io", "fd", "fd/0"],
        "{no_dac:?}"
    );
}
