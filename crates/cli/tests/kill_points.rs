//! The daemon and `perfpilot revert` killed with SIGKILL at each of their kill points
//! (`perfpilot_sys::failpoint`): a restarted daemon or `perfpilot revert --all` puts back every
//! thread's affinity mask and every knob, and closes the journal's trials.
//!
//! The daemon acts only on `bench load` processes this test spawns (`only_matched`), and its
//! knobs (`shmem_enabled`) are read and written in a fixture overlay
//! (`PERFPILOT_SYSFS_OVERLAY`, honoured only by this test build), never the global one. Memory
//! affinity is not exercised here: it needs two NUMA nodes, and this machine has one (its
//! steps go through the same journaled step and its kill points).

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{Dir, EXE, Load, status_json};

const SHMEM: &str = "sys/kernel/mm/transparent_hugepage/shmem_enabled";
const SHMEM_START: &str = "always within_size advise [never] deny force\n";

impl Load {
    fn spawn(tag: &str, args: &[&str]) -> Load {
        let tag = format!("{}-{tag}", std::process::id());
        let mut c = Command::new(EXE);
        c.args(["bench", "load", "--tag", &tag]).args(args);
        Load::ready(c)
    }
}

/// The masks of every thread of `pid`, as `Cpus_allowed_list`.
fn masks(pid: u32) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let Ok(status) = std::fs::read_to_string(e.unwrap().path().join("status")) else {
            continue;
        };
        if let Some(m) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            v.push(m.trim().to_string());
        }
    }
    v
}

fn all_cpus() -> String {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap()
        .trim()
        .to_string()
}

/// What the daemon is set up to try.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scenario {
    /// Cache affinity that helps (kept), with a thread started 15 s in, after it is applied (unless scans are very late).
    AffinityHelps,
    /// Cache affinity that hurts (reverted after its verdict).
    AffinityHurts,
    /// Large pages: the start-up knob, then paced collapse steps.
    LargePages,
}

/// One case: a scenario, the point, which time it is reached (0: the first), how long the
/// daemon may run, and how the test recovers.
struct Case {
    scenario: Scenario,
    point: &'static str,
    nth: usize,
    run_for: &'static str,
}

struct Rig {
    dir: Dir,
    overlay: PathBuf,
    load: Load,
}

impl Rig {
    fn new(s: Scenario, tag: &str) -> Rig {
        let dir = Dir::new(&format!("kill-{tag}"));
        let overlay = dir.0.join("overlay");
        let knob = overlay.join(SHMEM);
        std::fs::create_dir_all(knob.parent().unwrap()).unwrap();
        std::fs::write(&knob, SHMEM_START).unwrap();
        let load = match s {
            Scenario::AffinityHelps => Load::spawn(tag, &["--threads", "3", "--late-thread", "15"]),
            Scenario::AffinityHurts => Load::spawn(tag, &["--threads", "3"]),
            Scenario::LargePages => Load::spawn(tag, &["--threads", "2", "--touch-mib", "24"]),
        };
        let pid = load.pid();
        let p = std::process::id();
        // Bound to one CPU the application "says" it does better (a gauge of 100 or 50), or
        // worse; the large-pages trial is judged by a gauge that never moves (one-way here, with a
        // second of history rather than the default eight minutes).
        let (signal, strategies) = match s {
            Scenario::AffinityHelps => (
                format!(
                    "grep -Eq 'Cpus_allowed_list:[[:space:]]*[0-9]+$' /proc/{pid}/status && echo 100 || echo 50"
                ),
                "large_pages = false\nmax_windows = 6\n",
            ),
            Scenario::AffinityHurts => (
                format!(
                    "grep -Eq 'Cpus_allowed_list:[[:space:]]*[0-9]+$' /proc/{pid}/status && echo 50 || echo 100"
                ),
                "large_pages = false\nmax_windows = 6\n",
            ),
            Scenario::LargePages => (
                "echo 100".to_string(),
                "large_pages = true\ncache_affinity = false\ncollapse_mb_per_s = 10\nmax_windows = 2\none_way_history_s = 1\n",
            ),
        };
        std::fs::write(
            dir.0.join("perfpilot.toml"),
            format!(
                "only_matched = true\n[tunables]\ninterval_s = 0.2\nmin_age_s = 0\nmin_cpu_cores = 0\nmin_memory_mib = 0\naffinity_level = \"core\"\nwindows = 2\nrest_change_max = 0\nread_ahead = false\nmemory_affinity = false\nbackoff_s = 3600\n{strategies}\n[[workload]]\nmatch = {{ cmdline = \"--tag {p}-{tag}\" }}\nsignal = {{ command = \"{signal}\", kind = \"gauge\" }}\n"
            ),
        )
        .unwrap();
        Rig { dir, overlay, load }
    }

    fn state(&self) -> PathBuf {
        self.dir.state()
    }

    fn command(&self, args: &[&str], armed: Option<(&str, usize)>) -> Command {
        let mut c = Command::new(EXE);
        c.args(args)
            .env("PERFPILOT_SYSFS_OVERLAY", &self.overlay)
            .env_remove("FAILPOINTS")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some((point, nth)) = armed {
            c.env("FAILPOINTS", format!("{point}={nth}*off->return"));
        }
        c
    }

    fn daemon(&self, run_for: &str, armed: Option<(&str, usize)>) -> Child {
        let cfg = self.dir.0.join("perfpilot.toml");
        let state = self.state();
        self.command(
            &[
                "daemon",
                "--config",
                cfg.to_str().unwrap(),
                "--state-dir",
                state.to_str().unwrap(),
                "--for",
                run_for,
            ],
            armed,
        )
        .spawn()
        .unwrap()
    }

    fn revert(&self, armed: Option<(&str, usize)>) -> std::process::Output {
        let state = self.state();
        self.command(
            &["revert", "--all", "--state-dir", state.to_str().unwrap()],
            armed,
        )
        .output()
        .unwrap()
    }

    fn knob(&self) -> String {
        let text = std::fs::read_to_string(self.overlay.join(SHMEM)).unwrap();
        perfpilot_sys::knob::knob_value(&text)
    }

    /// Every thread's mask, the knob, and no trial left open in the journal.
    fn check_restored(&self, what: &str) {
        let all = all_cpus();
        let m = masks(self.load.pid());
        assert!(
            m.iter().all(|x| *x == all),
            "{what}: masks {m:?}, not {all}"
        );
        assert_eq!(
            self.knob(),
            "never",
            "{what}: shmem_enabled was not restored"
        );
        let s = status_json(&self.state());
        for a in s["actions"].as_array().into_iter().flatten() {
            let state = a["state"].as_str().unwrap_or_default();
            assert!(
                state != "trial" && state != "applying",
                "{what}: action left {state}: {a:#}"
            );
        }
    }
}

/// Waits for `c` to end (at most `limit`) and returns its stderr; `killed` says whether it
/// ended by SIGKILL (the kill point) rather than on its own.
fn wait(mut c: Child, limit: Duration) -> (bool, String) {
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            let out = c.wait_with_output().unwrap();
            let log = String::from_utf8_lossy(&out.stderr).into_owned();
            return (st.signal() == Some(9), log);
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            let out = c.wait_with_output().unwrap();
            return (false, String::from_utf8_lossy(&out.stderr).into_owned());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs the daemon armed at `case`'s point until it is killed there.
fn kill_daemon_at(rig: &Rig, case: &Case) -> String {
    let d = rig.daemon(case.run_for, Some((case.point, case.nth)));
    // A loaded machine stretches scans: the limit only bounds a daemon that never gets there.
    let (killed, log) = wait(d, Duration::from_secs(360));
    assert!(
        killed,
        "{:?}: {} #{} was never reached:\n{log}",
        case.scenario, case.point, case.nth
    );
    assert!(log.contains(&format!("kill point {} reached", case.point)));
    log
}

/// A restarted daemon (for a moment; it reverts what it tries when it stops).
fn restart(rig: &Rig, armed: Option<(&str, usize)>) -> (bool, String) {
    wait(rig.daemon("1s", armed), Duration::from_secs(60))
}

fn revert_ok(rig: &Rig, what: &str) {
    let out = rig.revert(None);
    assert!(
        out.status.success(),
        "{what}: revert --all failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const CASES: &[Case] = &[
    Case {
        scenario: Scenario::AffinityHelps,
        point: "engine.trial.begun",
        nth: 0,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::AffinityHelps,
        point: "engine.step.journaled",
        nth: 0,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::AffinityHelps,
        point: "engine.step.applied",
        nth: 0,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::AffinityHelps,
        point: "engine.switch.off",
        nth: 0,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::AffinityHelps,
        point: "engine.switch.on",
        nth: 0,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::AffinityHelps,
        point: "engine.verdict.kept",
        nth: 0,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::AffinityHelps,
        point: "engine.enforce.journaled",
        nth: 0,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::AffinityHelps,
        point: "engine.stop.undone",
        nth: 0,
        run_for: "25s",
    },
    Case {
        scenario: Scenario::AffinityHelps,
        point: "journal.undo.next",
        nth: 0,
        run_for: "25s",
    },
    Case {
        scenario: Scenario::AffinityHurts,
        point: "engine.verdict.undone",
        nth: 0,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::LargePages,
        point: "engine.start_knob.begun",
        nth: 0,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::LargePages,
        point: "engine.start_knob.applied",
        nth: 0,
        run_for: "300s",
    },
    // The start-up knob is the first journaled step; the collapse steps follow, paced.
    Case {
        scenario: Scenario::LargePages,
        point: "engine.step.journaled",
        nth: 1,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::LargePages,
        point: "engine.step.applied",
        nth: 1,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::LargePages,
        point: "engine.step.applied",
        nth: 3,
        run_for: "300s",
    },
    Case {
        scenario: Scenario::LargePages,
        point: "engine.start_knob.restored",
        nth: 0,
        run_for: "2s",
    },
];

#[test]
fn the_daemon_and_revert_killed_at_every_kill_point_leave_nothing_behind() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipped: needs two CPUs for core-level domains");
        return;
    }
    let mut points = std::collections::BTreeSet::new();
    let mut kills = 0;
    for (i, case) in CASES.iter().enumerate() {
        let what = format!("{:?} {} #{}", case.scenario, case.point, case.nth);
        let rig = Rig::new(case.scenario, &format!("c{i}"));
        kill_daemon_at(&rig, case);
        kills += 1;
        points.insert(case.point);
        // Alternate the two ways back: a restarted daemon, and `revert --all`.
        if i % 2 == 0 {
            let (killed, log) = restart(&rig, None);
            assert!(!killed, "{what}: the restarted daemon died:\n{log}");
        } else {
            revert_ok(&rig, &what);
        }
        rig.check_restored(&what);
    }
    // The ways back killed part way themselves, then finished by a clean run.
    let recovery: [(&str, &str); 4] = [
        ("engine.recover.undone", "restart"),
        ("journal.undo.next", "restart"),
        ("revert.undone", "revert"),
        ("journal.undo.next", "revert"),
    ];
    for (j, (point, how)) in recovery.iter().enumerate() {
        let what = format!("{how} killed at {point}");
        let rig = Rig::new(Scenario::AffinityHelps, &format!("r{j}"));
        // Leave an open action of two undo records (the mask, then the late thread's).
        kill_daemon_at(
            &rig,
            &Case {
                scenario: Scenario::AffinityHelps,
                // Recovery undoes only trials (a kept action is re-adopted): an open trial.
                point: if *point == "engine.recover.undone" {
                    "engine.step.applied"
                } else {
                    "engine.enforce.journaled"
                },
                nth: 0,
                run_for: "300s",
            },
        );
        let (killed, log) = if *how == "restart" {
            restart(&rig, Some((point, 0)))
        } else {
            let out = rig.revert(Some((point, 0)));
            (
                out.status.signal() == Some(9),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        assert!(killed, "{what}: the point was never reached:\n{log}");
        kills += 2;
        points.insert(point);
        if j % 2 == 0 {
            revert_ok(&rig, &what);
        } else {
            let (killed, log) = restart(&rig, None);
            assert!(!killed, "{what}: the restarted daemon died:\n{log}");
        }
        rig.check_restored(&what);
    }
    let engine_points: Vec<&str> = perfpilot_sys::failpoint::POINTS
        .iter()
        .map(|p| p.name)
        .filter(|n| !n.starts_with("study."))
        .collect();
    let missed: Vec<&&str> = engine_points
        .iter()
        .filter(|n| !points.contains(**n))
        .collect();
    println!(
        "daemon and revert: {} of {} kill points covered by {kills} kills; every mask and knob restored",
        points.len(),
        engine_points.len()
    );
    assert!(missed.is_empty(), "kill points not covered: {missed:?}");
}
