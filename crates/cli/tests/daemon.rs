//! The optimizer end to end: `perfpilot daemon` on workloads these tests spawn (`perfpilot bench
//! load --tag …`, matched by a config with `only_matched`, so nothing else on the machine is
//! touched). Tests run one at a time: each daemon scans the whole machine.

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod support;
use support::{
    Dir, EXE, Load, daemon, finish, status_if_written, status_json, terminate, wait_until,
};

static SERIAL: Mutex<()> = Mutex::new(());

impl Load {
    fn spawn(tag: &str, args: &[&str], env: &[(&str, &str)]) -> Load {
        let mut c = Command::new(EXE);
        // Tags carry this test process's pid: another run of these tests on the machine (a
        // second checkout, CI) must not match our loads.
        let tag = format!("{}-{tag}", std::process::id());
        c.args(["bench", "load", "--tag", &tag]).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        Load::ready(c)
    }
}

/// Tunables for fast trials on a small machine (core-level domains exist on 2 CPUs).
const FAST: &str = "[tunables]\ninterval_s = 0.5\nmin_age_s = 0\nmin_cpu_cores = 0\nmin_memory_mib = 0\naffinity_level = \"core\"\nwindows = 4\nmax_windows = 4\nrest_change_max = 0\nread_ahead = false\nlarge_pages = false\nmemory_affinity = false\nbackoff_s = 3600\n";

fn masks(pid: u32) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status = std::fs::read_to_string(e.unwrap().path().join("status")).unwrap();
        let m = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        v.push(m);
    }
    v
}

fn all_cpus() -> String {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap()
        .trim()
        .to_string()
}

/// Takes the lock that runs these tests one at a time; `None` (the test is skipped, and says
/// so) on a machine with fewer than two CPUs, which has no core-level domains to compact onto.
fn serial_on_two_cpus() -> Option<std::sync::MutexGuard<'static, ()>> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        < 2
    {
        eprintln!("skipped: needs two CPUs for core-level domains");
        return None;
    }
    Some(g)
}

fn single_cpu(pid: u32) -> String {
    // The application "says" it runs better when bound to one CPU: a gauge of 100 or 50.
    format!(
        "grep -Eq 'Cpus_allowed_list:[[:space:]]*[0-9]+$' /proc/{pid}/status && echo 100 || echo 50"
    )
}

#[test]
fn an_action_that_helps_is_kept_and_one_that_hurts_is_reverted() {
    let Some(_g) = serial_on_two_cpus() else {
        return;
    };
    let dir = Dir::new("keep");
    let p = std::process::id();
    let helps = Load::spawn("keep-helps", &["--threads", "3"], &[]);
    // Two spinning threads (plus the waiting main one): one core gives them half the CPU.
    let hurts = Load::spawn("keep-hurts", &["--threads", "3", "--busy"], &[]);
    // Up to 8 pairs a trial: the AR(1) widening of 4 pair differences, with its lag-1 estimated
    // from those 4, can leave a halving undecided.
    let fast = FAST.replace("max_windows = 4", "max_windows = 8");
    let cfg = dir.config(&format!(
        "only_matched = true\n{fast}headroom = 2.5\n\n[[workload]]\nmatch = {{ cmdline = \"--tag {p}-keep-helps\" }}\nsignal = {{ command = \"{}\", kind = \"gauge\" }}\n\n[[workload]]\nmatch = {{ cmdline = \"--tag {p}-keep-hurts\" }}\nsignal = {{ command = \"awk '{{print $14+$15}}' /proc/{}/stat\", kind = \"counter\" }}\n",
        single_cpu(helps.pid()),
        hurts.pid()
    ));
    // Run until both trials have a verdict (a loaded CI machine makes windows late), then stop
    // the daemon as systemd would; the limit only bounds a daemon that never decides.
    let d = daemon(&cfg, &dir.state(), "240s");
    let decided = wait_until(Duration::from_secs(200), || {
        let Some(s) = status_if_written(&dir.state()) else {
            return false;
        };
        let Some(actions) = s["actions"].as_array() else {
            return false;
        };
        [helps.pid(), hurts.pid()].iter().all(|&pid| {
            actions.iter().any(|a| {
                a["changes"]["members"][0][0].as_u64() == Some(u64::from(pid))
                    && a["verdict"]["decision"].is_string()
            })
        })
    });
    terminate(&d);
    let log = finish(d);
    assert!(decided, "no verdict for both trials within 200 s:\n{log}");
    let s = status_json(&dir.state());
    let actions = s["actions"].as_array().unwrap();
    let find = |sig_pid: u32| {
        actions
            .iter()
            .find(|a| a["changes"]["members"][0][0].as_u64() == Some(u64::from(sig_pid)))
            .unwrap_or_else(|| panic!("no action for {sig_pid}: {s:#}\n{log}"))
    };
    let kept = find(helps.pid());
    assert_eq!(kept["strategy"], "cache_affinity");
    // revert_on_stop is on by default: at the daemon's stop, the kept action was undone too.
    assert_eq!(kept["state"], "reverted", "{kept:#}\n{log}");
    // The action table's note and the workload table say the same of it.
    assert_eq!(
        kept["note"], "reverted at exit (revert_on_stop)",
        "{kept:#}"
    );
    let listed = s["daemon"]["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["signature"] == kept["signature"])
        .unwrap_or_else(|| panic!("{s:#}"));
    assert_eq!(
        listed["state"],
        format!(
            "cache_affinity (action {}): reverted at exit (revert_on_stop)",
            kept["id"]
        ),
        "{listed:#}"
    );
    // The daemon's own CPU is given in its two parts, at exit and in status.
    assert!(
        log.contains("own CPU") && log.contains("monitoring") && log.contains("making changes"),
        "{log}"
    );
    assert!(s["daemon"]["changes_cpu_pct"].is_number(), "{s:#}");
    assert_eq!(kept["verdict"]["decision"], "keep", "{kept:#}\n{log}");
    assert!(kept["verdict"]["gain"]["ci_low"].as_f64().unwrap() > 1.5);
    assert!(log.contains("kept: gain"), "{log}");
    let hurt = find(hurts.pid());
    assert_eq!(hurt["state"], "reverted", "{hurt:#}");
    // The signal is CPU ticks per second (100 per busy CPU). Binding two spinning threads to one
    // core halves what they get only when the machine has a second core to give: on a machine
    // busy with other work the loss cannot show, and "neutral" (also reverted) is the verdict.
    let unbound = hurt["verdict"]["before"]["mean"].as_f64().unwrap();
    if unbound > 140.0 {
        assert_eq!(hurt["verdict"]["decision"], "revert", "{hurt:#}\n{log}");
        assert!(
            hurt["verdict"]["gain"]["ratio"].as_f64().unwrap() < 0.9,
            "{hurt:#}"
        );
    } else {
        eprintln!(
            "the machine gave the unbound load only {unbound:.0} ticks/s: harm not measurable now"
        );
        assert!(hurt["verdict"]["decision"] != "keep", "{hurt:#}");
    }
    // Everything is back as it was.
    assert!(
        masks(helps.pid()).iter().all(|m| *m == all_cpus()),
        "{:?}",
        masks(helps.pid())
    );
    assert!(
        masks(hurts.pid()).iter().all(|m| *m == all_cpus()),
        "{:?}",
        masks(hurts.pid())
    );
    // And the reverted one is remembered: a second run does not try it again.
    let log2 = finish(daemon(&cfg, &dir.state(), "2s"));
    let s2 = status_json(&dir.state());
    let hurts_trials = s2["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["changes"]["members"][0][0].as_u64() == Some(u64::from(hurts.pid())))
        .count();
    assert_eq!(hurts_trials, 1, "backed off: {log2}");
}

#[test]
fn a_server_still_loading_gets_no_trial_until_its_signal_is_steady_and_busy() {
    let Some(_g) = serial_on_two_cpus() else {
        return;
    };
    let dir = Dir::new("loading");
    let p = std::process::id();
    let load = Load::spawn("loading", &["--threads", "3"], &[]);
    // While `loading` exists the server serves nothing (its counter says 0, as Redis reading
    // its dump); then bound to one CPU it does 100, unbound 50. A trial started while it loaded
    // would take the idle windows as its baseline and keep the action for the load's arrival.
    let loading = dir.0.join("loading");
    std::fs::write(&loading, "").unwrap();
    let cfg = dir.config(&format!(
        "only_matched = true\n{FAST}\n[[workload]]\nmatch = {{ cmdline = \"--tag {p}-loading\" }}\nsignal = {{ command = \"[ -e {} ] && echo 0 || {{ {}; }}\", kind = \"gauge\" }}\n",
        loading.display(),
        single_cpu(load.pid())
    ));
    let d = daemon(&cfg, &dir.state(), "240s");
    // Ten scans or more while loading: status says why it waits, and nothing is journaled.
    let waited = wait_until(Duration::from_secs(60), || {
        status_if_written(&dir.state()).is_some_and(|s| {
            s["daemon"]["scans"].as_u64().unwrap_or(0) >= 10
                && s["daemon"]["workloads"].as_array().is_some_and(|ws| {
                    ws.iter().any(|w| {
                        w["pids"][0].as_u64() == Some(u64::from(load.pid()))
                            && w["state"].as_str().is_some_and(|st| {
                                st.starts_with("would try cache_affinity: waiting for a steady signal: it reads 0.000")
                            })
                    })
                })
        })
    });
    let s = status_json(&dir.state());
    let before_load = s["actions"].as_array().map_or(0, Vec::len);
    // The daemon is not among its own workloads.
    let own = u64::from(d.id());
    assert!(
        s["daemon"]["workloads"]
            .as_array()
            .is_some_and(|ws| ws.iter().all(|w| w["pids"]
                .as_array()
                .is_none_or(|p| !p.iter().any(|p| p.as_u64() == Some(own))))),
        "{s:#}"
    );
    std::fs::remove_file(&loading).unwrap();
    let decided = wait_until(Duration::from_secs(200), || {
        status_if_written(&dir.state()).is_some_and(|s| {
            s["actions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["verdict"]["decision"].is_string()))
        })
    });
    terminate(&d);
    let log = finish(d);
    assert!(
        waited,
        "no 'waiting for a steady signal' while loading:\n{s:#}\n{log}"
    );
    assert_eq!(
        before_load, 0,
        "a trial started while loading: {s:#}\n{log}"
    );
    assert!(
        decided,
        "no verdict within 200 s after the load came:\n{log}"
    );
    let s = status_json(&dir.state());
    let a = &s["actions"][0];
    // The baseline is the serving server unbound (50), not the idle one (0).
    let before = a["verdict"]["before"]["mean"].as_f64().unwrap();
    assert!((before - 50.0).abs() < 1e-9, "{a:#}\n{log}");
    assert_eq!(a["verdict"]["decision"], "keep", "{a:#}\n{log}");
}

#[test]
fn manual_tuning_and_opt_out_are_left_alone_and_a_changed_mask_makes_it_manual() {
    let Some(_g) = serial_on_two_cpus() else {
        return;
    };
    let dir = Dir::new("manual");
    let p = std::process::id();
    let pinned = Load::spawn("man-pinned", &["--threads", "3"], &[]);
    let off = Load::spawn("man-off", &["--threads", "3"], &[("PERFPILOT", "off")]);
    let victim = Load::spawn("man-victim", &["--threads", "3"], &[]);
    // Someone hand-tuned `pinned` to CPU 0 before the daemon started.
    assert!(
        Command::new("taskset")
            .args(["-a", "-p", "-c", "0", &pinned.pid().to_string()])
            .output()
            .unwrap()
            .status
            .success()
    );
    let cfg = dir.config(&format!(
        "only_matched = true\n{FAST}allow_unverified = true\n\n[[workload]]\nmatch = {{ cmdline = \"--tag {p}-man-\" }}\n"
    ));
    let d = daemon(&cfg, &dir.state(), "240s");
    // Wait for the victim's (unverified, so immediate) binding, then change it behind the
    // daemon's back.
    let victim_pid = victim.pid();
    let bound = wait_until(Duration::from_secs(60), || {
        masks(victim_pid).iter().all(|m| *m != all_cpus())
    });
    if !bound {
        terminate(&d);
        panic!(
            "the victim was not bound: {:?}\n{}",
            masks(victim_pid),
            finish(d)
        );
    }
    assert!(
        Command::new("taskset")
            .args(["-a", "-p", "-c", &all_cpus(), &victim_pid.to_string()])
            .output()
            .unwrap()
            .status
            .success()
    );
    // Run until the daemon has seen the change (a loaded machine makes scans late).
    let noticed = wait_until(Duration::from_secs(60), || {
        status_if_written(&dir.state()).is_some_and(|s| {
            s["actions"].as_array().is_some_and(|acts| {
                acts.iter().any(|a| {
                    a["changes"]["members"][0][0].as_u64() == Some(u64::from(victim_pid))
                        && a["state"] == "manual"
                })
            })
        })
    });
    terminate(&d);
    let log = finish(d);
    assert!(
        noticed,
        "the changed mask was not noticed within 60 s:\n{log}"
    );
    let s = status_json(&dir.state());
    let actions = s["actions"].as_array().unwrap();
    let for_pid = |pid: u32| {
        actions
            .iter()
            .filter(|a| a["changes"]["members"][0][0].as_u64() == Some(u64::from(pid)))
            .collect::<Vec<_>>()
    };
    assert!(
        for_pid(pinned.pid()).is_empty(),
        "the hand-tuned process was touched: {s:#}"
    );
    assert!(
        for_pid(off.pid()).is_empty(),
        "the opted-out process was touched: {s:#}"
    );
    assert_eq!(
        masks(pinned.pid()),
        vec!["0".to_string(); 3],
        "the manual mask stays"
    );
    let v = for_pid(victim_pid);
    assert_eq!(v.len(), 1, "{s:#}");
    assert_eq!(v[0]["state"], "manual", "{:#}\n{log}", v[0]);
    // The daemon did not put its mask back over the manual one.
    assert!(masks(victim_pid).iter().all(|m| *m == all_cpus()));
    let states: Vec<String> = s["daemon"]["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["state"].as_str().unwrap().to_string())
        .collect();
    assert!(
        states
            .iter()
            .any(|st| st.contains("manually tuned: pid") && st.contains("affinity 0")),
        "{states:?}"
    );
    assert!(
        states.iter().any(|st| st.contains("PERFPILOT=off")),
        "{states:?}"
    );
}

#[test]
fn a_killed_daemon_is_recovered_from_its_journal() {
    let Some(_g) = serial_on_two_cpus() else {
        return;
    };
    let dir = Dir::new("crash");
    let p = std::process::id();
    let load = Load::spawn("crash-load", &["--threads", "3"], &[]);
    let pid = load.pid();
    let cfg = dir.config(&format!(
        "only_matched = true\n{}\n[[workload]]\nmatch = {{ cmdline = \"--tag {p}-crash-load\" }}\nsignal = {{ command = \"{}\", kind = \"gauge\" }}\n",
        FAST.replace("windows = 4", "windows = 50"),
        single_cpu(pid)
    ));
    // Run 1: killed with SIGKILL while the trial has the mask applied.
    let mut d = daemon(&cfg, &dir.state(), "60s");
    assert!(
        wait_until(Duration::from_secs(60), || masks(pid)
            .iter()
            .all(|m| *m != all_cpus())),
        "the trial never applied its mask"
    );
    d.kill().unwrap();
    d.wait().unwrap();
    assert!(
        masks(pid).iter().all(|m| *m != all_cpus()),
        "the mask is still applied after the crash"
    );
    // A second daemon on the same directory while none runs: fine. While one runs: refused.
    let mut a = daemon(&cfg, &dir.state(), "240s");
    // Seconds on a quiet machine; once (a CI rehearsal, 2026-11-25) more than 60. Its log says
    // what it was doing if it happens again.
    if !wait_until(Duration::from_secs(120), || {
        status_if_written(&dir.state()).is_some_and(|s| s["running"] == true)
    }) {
        a.kill().unwrap();
        let out = a.wait_with_output().unwrap();
        let status = Command::new(EXE)
            .args(["status", "--json", "--state-dir"])
            .arg(dir.state())
            .output()
            .unwrap();
        panic!(
            "the second daemon never took the lock; its log:\n{}\n`status --json` said: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&status.stdout),
            String::from_utf8_lossy(&status.stderr)
        );
    }
    let b = daemon(&cfg, &dir.state(), "1s").wait_with_output().unwrap();
    assert!(!b.status.success());
    assert!(
        String::from_utf8_lossy(&b.stderr).contains("another perfpilot daemon"),
        "{}",
        String::from_utf8_lossy(&b.stderr)
    );
    a.kill().unwrap();
    a.wait().unwrap();
    // `perfpilot revert --all` restores whatever the journal holds open.
    let out = Command::new(EXE)
        .args([
            "revert",
            "--all",
            "--state-dir",
            dir.state().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        masks(pid).iter().all(|m| *m == all_cpus()),
        "revert --all restored the masks: {:?}",
        masks(pid)
    );
    let s = status_json(&dir.state());
    assert!(
        s["actions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["state"] != "trial" && a["state"] != "applying" && a["state"] != "kept"),
        "{s:#}"
    );
    // Run 3: a restarted daemon recovers on its own too: crash again, then restart.
    let mut d = daemon(&cfg, &dir.state(), "60s");
    assert!(wait_until(Duration::from_secs(60), || masks(pid)
        .iter()
        .all(|m| *m != all_cpus())));
    d.kill().unwrap();
    d.wait().unwrap();
    let log = finish(daemon(&cfg, &dir.state(), "1s"));
    assert!(log.contains("recovery: restored the affinity"), "{log}");
    // (It may start a new trial in its one second; its stop undoes that too.)
    assert!(
        masks(pid).iter().all(|m| *m == all_cpus()),
        "{:?}\n{log}",
        masks(pid)
    );
}

#[test]
fn bad_configs_and_tunables_are_named() {
    let dir = Dir::new("badcfg");
    let cfg = dir.config("[tunables]\nheadroom = 99\n");
    let out = daemon(&cfg, &dir.state(), "1s").wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:2: tunable headroom", cfg.display())),
        "{err}"
    );
    let state = dir.state();
    let t = |args: &[&str]| {
        Command::new(EXE)
            .arg("tunables")
            .args(args)
            .arg("--state-dir")
            .arg(&state)
            .output()
            .unwrap()
    };
    let out = t(&["-o", "windows=4"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = String::from_utf8_lossy(&t(&["--list"]).stdout).into_owned();
    let line = list.lines().find(|l| l.starts_with("windows ")).unwrap();
    assert!(line.split_whitespace().nth(1) == Some("4"), "{line}");
    assert!(list.contains("affinity_level") && list.contains("node|llc|core"));
    let out = t(&["-o", "affinity_level=socket"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected one of node, llc, core"));
}

#[test]
fn threads_started_later_are_bound_and_restored_with_the_others() {
    let Some(_g) = serial_on_two_cpus() else {
        return;
    };
    let dir = Dir::new("late");
    let p = std::process::id();
    // 3 threads and a helper now; at 3 s the helper starts one more thread and ends.
    let load = Load::spawn(
        "late-thread",
        &["--threads", "3", "--late-thread", "3"],
        &[],
    );
    let pid = load.pid();
    let tids = |pid: u32| -> Vec<String> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let early = tids(pid);
    let cfg = dir.config(&format!("only_matched = true\n{FAST}allow_unverified = true\n\n[[workload]]\nmatch = {{ cmdline = \"--tag {p}-late-thread\" }}\n"));
    let mut d = daemon(&cfg, &dir.state(), "240s");
    // The daemon's log as it is written: run until it has taken the late thread in.
    let log = Arc::new(Mutex::new(String::new()));
    let reader = {
        let err = d.stderr.take().unwrap();
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut l = log.lock().unwrap_or_else(|e| e.into_inner());
                l.push_str(&line);
                l.push('\n');
            }
        })
    };
    let seen = wait_until(Duration::from_secs(60), || {
        log.lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains("new threads")
    });
    let all_bound =
        tids(pid).iter().any(|t| !early.contains(t)) && masks(pid).iter().all(|x| *x != all_cpus());
    terminate(&d);
    let status = d.wait().unwrap();
    reader.join().unwrap();
    let log = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(status.success(), "daemon failed: {log}");
    assert!(seen, "the daemon never took the late thread in:\n{log}");
    assert!(
        all_bound,
        "the late threads were not bound: {:?}\n{log}",
        masks(pid)
    );
    // The daemon stopped (revert_on_stop): every thread, the late ones too, is back.
    assert!(
        masks(pid).iter().all(|m| *m == all_cpus()),
        "{:?}\n{log}",
        masks(pid)
    );
}

#[test]
fn a_daemons_log_to_a_pipe_has_no_colour_codes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Dir::new("nocolour");
    // Matches nothing: the daemon starts, scans and stops without touching the machine.
    let cfg = dir.config(&format!(
        "only_matched = true\n{FAST}\n[[workload]]\nmatch = {{ cmdline = \"--tag {}-matches-nothing\" }}\n",
        std::process::id()
    ));
    let log = finish(daemon(&cfg, &dir.state(), "1s"));
    assert!(log.contains("perfpilot daemon started"), "{log}");
    assert!(
        !log.contains('\x1b'),
        "escape codes in a piped log: {log:?}"
    );
}

/// A `[[workload]]` with a capacity model: `status` shows its tier's utilisation, the throughput
/// its CPU use implies by the model's demand, and the headroom before the bottleneck saturates;
/// a tier the model does not have is named at start.
#[test]
fn a_workload_with_a_capacity_model_shows_its_tiers_utilisation_and_headroom() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Dir::new("capacity");
    let p = std::process::id();
    // One spinning thread: about one core.
    let _busy = Load::spawn("cap-app", &["--threads", "2", "--busy"], &[]);
    std::fs::write(
        dir.0.join("tiers.toml"),
        "name = \"two tiers\"\n\n[[classes]]\nname = \"users\"\npopulation = 10\n\n\
         [[stations]]\nname = \"app\"\nkind = \"multiserver\"\nservers = 2\ndemand = 0.010\n\n\
         [[stations]]\nname = \"db\"\nkind = \"queue\"\ndemand = 0.002\n",
    )
    .unwrap();
    let textfile = dir.0.join("textfile");
    std::fs::create_dir_all(&textfile).unwrap();
    let rules = format!(
        "only_matched = true\ntextfile = \"{}\"\n{FAST}cache_affinity = false\n\n[[workload]]\nmatch = {{ cmdline = \"--tag {p}-cap-app\" }}\nmodel = \"tiers.toml\"\ntier = \"app\"\n",
        textfile.display()
    );
    let cfg = dir.config(&rules);
    let d = daemon(&cfg, &dir.state(), "60s");
    let mut seen = None;
    wait_until(Duration::from_secs(40), || {
        seen = status_if_written(&dir.state()).and_then(|s| {
            s["daemon"]["workloads"]
                .as_array()?
                .iter()
                .find(|w| w["capacity"].is_object() && w["cpu_cores"].as_f64().unwrap_or(0.0) > 0.3)
                .cloned()
        });
        seen.is_some()
    });
    let text = Command::new(EXE)
        .args(["status", "--state-dir", dir.state().to_str().unwrap()])
        .output()
        .unwrap();
    terminate(&d);
    let log = finish(d);
    let w = seen.unwrap_or_else(|| panic!("no workload with a capacity view:\n{log}"));
    let c = &w["capacity"];
    let cores = w["cpu_cores"].as_f64().unwrap();
    let f = |k: &str| c[k].as_f64().unwrap();
    // app: 2 servers at 10 ms a request saturate at 200 req/s; db's 1 server at 2 ms at 500.
    assert_eq!(c["tier"], "app");
    assert_eq!(c["bottleneck"], "app");
    assert!((f("max_throughput") - 200.0).abs() < 1e-6, "{c}");
    // The view is of the CPU the same scan measured (a status is one scan's).
    assert!(
        (f("utilisation") - cores / 2.0).abs() < 1e-9,
        "{c} at {cores} cores"
    );
    assert!((f("throughput") - cores / 0.010).abs() < 1e-6, "{c}");
    assert!(
        (f("headroom") - 200.0 / f("throughput")).abs() < 1e-9,
        "{c}"
    );
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("tiers.toml: tier app")
            && text.contains("bottleneck app saturates at 200 req/s"),
        "{text}"
    );

    // The same figures for Prometheus (node_exporter's textfile collector here).
    let metrics = std::fs::read_dir(&textfile)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .collect::<String>();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("perfpilot_tier_max_throughput{"))
        .unwrap_or_else(|| panic!("no tier metric:\n{metrics}"));
    assert!(
        line.contains("tier=\"app\"") && line.ends_with(" 200.0"),
        "{line}"
    );
    assert!(
        metrics.contains("perfpilot_tier_utilisation_ratio{"),
        "{metrics}"
    );

    let cfg = dir.config(&rules.replace("tier = \"app\"", "tier = \"cache\""));
    let out = daemon(&cfg, &dir.state(), "1s").wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:", cfg.display()))
            && err.contains("no station `cache` (its stations: app, db)"),
        "{err}"
    );
}
