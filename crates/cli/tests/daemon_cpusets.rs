//! The daemon on workloads confined by someone else, with no signal and no strategy setting
//! configured: `workloads/sharedcache` (a 512 MiB random-lookup table, private anonymous
//! memory) inside a cpuset cgroup holding CPU 1 (as the Kubernetes static CPU manager, `docker
//! run --cpuset-cpus` and systemd's `AllowedCPUs=` confine a process), and a PostgreSQL started
//! under `taskset -c 1`. Both keep large pages (judged on their own counters: the Prometheus
//! page of sharedcache, PostgreSQL's transaction count), and both keep their affinity: the
//! cpuset is sharedcache's world (its mask equals it: not manual tuning), PostgreSQL's mask is
//! someone's setting, which leaves only cache and memory affinity alone. `status` shows the
//! cgroup and the knobs left alone with their evidence.
//!
//! The config matches only these two servers (`only_matched`), so nothing else on this shared
//! machine is touched, and shortens the windows; every strategy keeps its default (on). The
//! cpuset group is made in the cgroup v1 `cpuset` hierarchy, or in the v2 root where the
//! machine runs v2, and removed at the end (also on panic); `shmem_enabled`, which the daemon
//! raises at start, is restored by a guard too.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use perfpilot_sys::cgroup::{Hierarchies, Layout};
use perfpilot_sys::{CpuSet, affinity};
use perfpilot_testkit as kit;

mod support;
use support::{
    Dir, ShmemGuard, daemon, finish, pgbench_select_load, status_if_written, terminate, wait_until,
};

static SERIAL: Mutex<()> = Mutex::new(());

/// A cpuset cgroup made for the test, removed on drop once its processes are gone.
struct Cpuset {
    dir: PathBuf,
    /// The cgroup path as `/proc/PID/cgroup` shows it.
    path: String,
}

impl Cpuset {
    /// A group holding `cpus` (and node 0's memory), in the v1 cpuset hierarchy or the v2 root.
    fn create(name: &str, cpus: &str) -> Cpuset {
        let h = Hierarchies::detect(&perfpilot_sys::Fs::live());
        let (root, v2) = match h.layout() {
            Layout::V2 => (PathBuf::from("/sys/fs/cgroup"), true),
            _ => (PathBuf::from("/sys/fs/cgroup/cpuset"), false),
        };
        if v2 {
            std::fs::write(root.join("cgroup.subtree_control"), "+cpuset").unwrap();
        }
        let dir = root.join(name);
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("cpuset.cpus"), cpus).unwrap();
        std::fs::write(dir.join("cpuset.mems"), "0").unwrap();
        Cpuset {
            dir,
            path: format!("/{name}"),
        }
    }

    /// `sh -c 'echo $$ > cgroup.procs; exec PROGRAM ARGS'`: the program starts in the group.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"",
                self.dir.display()
            ))
            .arg(program)
            .args(args);
        c
    }
}

impl Drop for Cpuset {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A child killed and reaped on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The mask of every thread of `pid`.
fn masks(pid: u32) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        if let Some(m) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            v.push(m.trim().to_string());
        }
    }
    v
}

fn workloads(s: &serde_json::Value) -> Vec<serde_json::Value> {
    s["daemon"]["workloads"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The large-pages action decided on the workload named `name`, if one was.
fn decided<'a>(s: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    s["actions"].as_array()?.iter().find(|a| {
        a["strategy"] == "large_pages"
            && a["workload"].as_str().is_some_and(|w| w.contains(name))
            && matches!(a["state"].as_str(), Some("kept" | "ended" | "reverted"))
    })
}

#[test]
fn large_pages_are_kept_in_a_cpuset_and_under_taskset_and_both_affinities_are_left_as_they_are() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kit::is_root() {
        println!("skipped: cpuset groups, shmem_enabled and peer authentication need root");
        return;
    }
    let online = CpuSet::parse(
        std::fs::read_to_string("/sys/devices/system/cpu/online")
            .unwrap()
            .trim(),
    )
    .unwrap();
    if !online.contains(1) {
        println!("skipped: needs CPU 1");
        return;
    }
    let _shmem = ShmemGuard::take();
    let dir = Dir::new("cpusets");
    let cfg = dir.config(
        "# Only the two servers of this test: this machine is shared.\nonly_matched = true\nread_ahead_devices = []\n[[workload]]\nmatch = { comm = \"sharedcache\" }\n[[workload]]\nmatch = { comm = \"postgres\" }\n[tunables]\ninterval_s = 3\nmin_age_s = 30\nmin_cpu_cores = 0.02\nwindows = 8\nmax_windows = 8\nrest_change_max = 0\nmin_effect = 0.005\ncpu_budget_pct = 20\none_way_history_s = 40\n",
    );
    let d = daemon(&cfg, &dir.state(), "900s");

    // sharedcache in a cpuset cgroup holding CPU 1.
    let group = Cpuset::create(&format!("perfpilot-test-{}", std::process::id()), "1");
    let sc_bin = kit::workspace_bin("sharedcache", "perfpilot-sharedcache");
    let mut sc = Killed(
        group
            .command(
                &sc_bin,
                &[
                    "--table-mib",
                    "512",
                    "--threads",
                    "2",
                    "--listen",
                    "127.0.0.1:0",
                ],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(sc.0.stdout.take().unwrap());
    let mut line = String::new();
    while line.trim() != "ready" {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "sharedcache did not start"
        );
    }
    let sc_pid = sc.0.id();

    // PostgreSQL started under `taskset -c 1`: this thread's mask, which its fork inherits.
    let before = affinity::get_affinity(0).unwrap();
    affinity::set_affinity(0, &CpuSet::parse("1").unwrap()).unwrap();
    let pg = kit::start_postgres_with(&[("shared_buffers", "256MB"), ("huge_pages", "off")]);
    affinity::set_affinity(0, &before).unwrap();
    let _bench = pgbench_select_load(pg.port, 15, 880);
    let pg_pid = pg.pid();

    let mut last = serde_json::Value::Null;
    let both = wait_until(Duration::from_secs(780), || {
        let Some(s) = status_if_written(&dir.state()) else {
            return false;
        };
        last = s;
        decided(&last, "sharedcache").is_some() && decided(&last, "postgres").is_some()
    });
    let now = last.clone();
    let sc_masks = masks(sc_pid);
    let pg_masks = masks(pg_pid);
    terminate(&d);
    let log = finish(d);
    assert!(
        both,
        "no large-pages verdict on both in time: {now:#}\n{log}"
    );
    for name in ["sharedcache", "postgres"] {
        let a = decided(&now, name).unwrap();
        // Kept, or not kept: ended where its huge pages cannot be split back (PostgreSQL's
        // shared memory here), reverted where they can (sharedcache's private table).
        assert!(
            matches!(a["state"].as_str(), Some("kept" | "ended" | "reverted")),
            "{name}: {a:#}\n{log}"
        );
        assert!(a["verdict"]["gain"]["ci_low"].is_number(), "{name}: {a:#}");
    }
    // Neither affinity was touched: no affinity action, and the masks are as they were.
    let touched: Vec<&serde_json::Value> = now["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["strategy"] == "cache_affinity" || a["strategy"] == "memory_affinity")
        .collect();
    assert!(touched.is_empty(), "{touched:#?}");
    assert!(sc_masks.iter().all(|m| m == "1"), "{sc_masks:?}");
    assert!(pg_masks.iter().all(|m| m == "1"), "{pg_masks:?}");

    let ws = workloads(&now);
    let sc_w = ws
        .iter()
        .find(|w| {
            w["name"]
                .as_str()
                .is_some_and(|n| n.contains("sharedcache"))
        })
        .unwrap_or_else(|| panic!("{now:#}"));
    assert_eq!(sc_w["cgroup"], group.path.as_str(), "{sc_w:#}");
    assert_eq!(sc_w["cpuset"], "1", "{sc_w:#}");
    assert!(
        sc_w["manual"].as_array().is_none_or(|m| m.is_empty()),
        "its cpuset is its world, not manual tuning: {sc_w:#}"
    );
    let pg_w = ws
        .iter()
        .find(|w| w["name"].as_str().is_some_and(|n| n.contains("postgres")))
        .unwrap_or_else(|| panic!("{now:#}"));
    let knob = &pg_w["manual"][0];
    assert_eq!(knob["knob"], "affinity", "{pg_w:#}");
    assert!(
        knob["evidence"]
            .as_str()
            .is_some_and(|e| e.contains("has affinity 1") && e.contains("not set by perfpilot")),
        "{pg_w:#}"
    );
    assert_eq!(
        knob["blocks"],
        serde_json::json!(["cache_affinity", "memory_affinity"]),
        "{pg_w:#}"
    );
    // The human status says the same.
    let text = Command::new(support::EXE)
        .args(["status", "--state-dir", dir.state().to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&format!("cgroup {}", group.path)) && text.contains("cpuset 1"),
        "{text}"
    );
    assert!(
        text.contains("cache_affinity, memory_affinity left alone: manually tuned affinity (pid"),
        "{text}"
    );
    println!("{text}");
    drop(sc);
    drop(pg);
}
