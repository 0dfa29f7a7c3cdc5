//! Churn: the daemon, with its strategies on, watches processes that start and end by the
//! thousand per minute, start threads, change their own affinity, exec another program, or
//! exit between being listed and being read. It must never exit, keep its memory bounded and
//! never touch a process it was not given (a recycled pid is another process: start times are
//! checked).
//!
//! CI runs it for `PERFPILOT_CHURN_SECS` (default 20 s); `scripts/churn` runs it for 10 minutes
//! and the figures it prints go to docs/reliability.md. The daemon acts only on processes this
//! test spawns (`only_matched`); no strategy here writes a knob.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{Dir, EXE, status_json, terminate};

/// Every process on the machine but ours, with its start time and its threads' masks.
fn snapshot(exclude: &dyn Fn(u32) -> bool) -> HashMap<u32, (u64, Vec<(u32, String)>)> {
    let mut out = HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if exclude(pid) {
            continue;
        }
        let Some(start) = starttime(pid) else {
            continue;
        };
        let mut masks = Vec::new();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(s) = std::fs::read_to_string(t.path().join("status"))
                && let Some(m) = s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            {
                masks.push((tid, m.trim().to_string()));
            }
        }
        masks.sort();
        out.insert(pid, (start, masks));
    }
    out
}

fn starttime(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

fn vm_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds (user + system) of `pid`.
fn cpu_s(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(rest) = s.rfind(')').map(|i| &s[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split(' ').collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / perfpilot_sys::clock_ticks_per_sec() as f64
}

/// A small xorshift for the churn's choices (no statistics here, only variety).
struct Pick(u64);

impl Pick {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

#[test]
fn the_daemon_survives_thousands_of_short_lived_processes_and_touches_no_other() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipped: needs two CPUs for core-level domains");
        return;
    }
    let secs: u64 = std::env::var("PERFPILOT_CHURN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    // The worst case by default: scans every 0.5 s that may act on processes from birth.
    // PERFPILOT_CHURN_TUNABLES="INTERVAL_S MIN_AGE_S" measures another (e.g. "5 30").
    let tunables = std::env::var("PERFPILOT_CHURN_TUNABLES").unwrap_or_default();
    let mut t = tunables.split_whitespace();
    let interval = t.next().unwrap_or("0.5").to_string();
    let min_age = t.next().unwrap_or("0").to_string();
    let me = std::process::id();
    let tag = format!("{me}-churn");
    let dir = Dir::new("churn");
    let cfg = dir.config(&format!(
        "only_matched = true\n[tunables]\ninterval_s = {interval}\nmin_age_s = {min_age}\nmin_cpu_cores = 0\nmin_memory_mib = 0\naffinity_level = \"core\"\nwindows = 2\nmax_windows = 2\nrest_change_max = 0\nread_ahead = false\nlarge_pages = false\nshmem_advise_at_start = false\nbackoff_s = 5\n\n[[workload]]\nmatch = {{ cmdline = \"{tag}\" }}\nsignal = {{ command = \"echo 100\", kind = \"gauge\" }}\n"
    ));
    let state = dir.state();
    // Processes present before the churn (ours excluded): none of them may be touched.
    let ours = |pid: u32| -> bool {
        let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return true;
        };
        // Our children and their children (the load's shells) and ourselves.
        let ppid = s.rfind(')').and_then(|i| {
            s[i + 2..]
                .split(' ')
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
        });
        pid == me || ppid == Some(me)
    };
    let before = snapshot(&ours);
    let mut d = Command::new(EXE)
        .args(["daemon", "--config"])
        .arg(&cfg)
        .arg("--state-dir")
        .arg(&state)
        .args(["--for", &format!("{}s", secs + 120)])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let dpid = d.id();
    // Read the daemon's log as it comes: a pipe nobody reads fills up (64 KiB) and blocks the
    // daemon's next log line, which a long churn writes plenty of.
    let mut stderr = d.stderr.take().unwrap();
    let drain = std::thread::spawn(move || {
        let mut log = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut log);
        log
    });
    let mut pick = Pick(0x9e37_79b9_7f4a_7c15 ^ u64::from(me));
    let mut alive: Vec<(Child, Instant)> = Vec::new();
    let (mut spawned, mut execs, mut threads_started, mut rss_start) = (0u64, 0u64, 0u64, 0u64);
    let t0 = Instant::now();
    let cpu0 = cpu_s(dpid);
    while t0.elapsed() < Duration::from_secs(secs) {
        assert!(
            d.try_wait().unwrap().is_none(),
            "the daemon exited during the churn"
        );
        if rss_start == 0 && t0.elapsed() > Duration::from_secs(3) {
            rss_start = vm_rss_kib(dpid);
        }
        // A load with threads (some started late), or a shell that pins itself and execs.
        let child = if pick.below(2) == 0 {
            execs += 1;
            Command::new("sh")
                .args([
                    "-c",
                    "taskset -pc 0 $$ >/dev/null 2>&1; exec sleep 0.$((RANDOM % 9 + 1))",
                    &tag,
                ])
                .stdin(Stdio::null())
                .spawn()
        } else {
            let n = 1 + pick.below(6);
            threads_started += n + 2;
            let threads = n.to_string();
            let late = format!("0.{}", pick.below(9));
            Command::new(EXE)
                .args(["bench", "load", "--tag", &tag, "--threads", &threads])
                .args(["--late-thread", &late])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
        };
        let child = child.unwrap();
        spawned += 1;
        let life = Duration::from_millis(50 + pick.below(1500));
        alive.push((child, Instant::now() + life));
        // Reap what is due (a load ends when its stdin closes; SIGKILL for variety).
        let now = Instant::now();
        let mut i = 0;
        while i < alive.len() {
            if alive[i].1 <= now || alive[i].0.try_wait().ok().flatten().is_some() {
                let (mut c, _) = alive.swap_remove(i);
                if pick.below(2) == 0 {
                    if let Some(mut stdin) = c.stdin.take() {
                        let _ = stdin.flush();
                    }
                } else {
                    let _ = c.kill();
                }
                let _ = c.wait();
            } else {
                i += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(4));
    }
    for (mut c, _) in alive.drain(..) {
        let _ = c.kill();
        let _ = c.wait();
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = cpu_s(dpid) - cpu0;
    let rss_end = vm_rss_kib(dpid);
    assert!(d.try_wait().unwrap().is_none(), "the daemon exited");
    let s = status_json(&state);
    // The daemon's own account of its CPU, from its last status.json.
    let own: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("status.json")).unwrap()).unwrap();
    let status_age_s =
        (perfpilot_sys::clock::now_ms() - own["time_ms"].as_i64().unwrap_or(0)) as f64 / 1000.0;
    terminate(&d);
    let out = d.wait_with_output().unwrap();
    let log = drain.join().unwrap();
    let log = String::from_utf8_lossy(&log);
    assert!(out.status.success(), "the daemon failed at stop:\n{log}");
    if std::env::var_os("PERFPILOT_CHURN_LOG").is_some() {
        eprintln!("{log}");
    }
    // Nothing it was not given was touched: every process that lived through the churn has
    // the masks it had (a pid seen again with another start time is another process).
    let after = snapshot(&|pid| pid == me);
    let mut checked = 0;
    for (pid, (start, masks)) in &before {
        if let Some((start2, masks2)) = after.get(pid)
            && start2 == start
        {
            let same: Vec<_> = masks2.iter().filter(|m| masks.contains(m)).collect();
            // Threads that came or went are fine; a thread that stayed keeps its mask.
            for (tid, m) in masks2 {
                if let Some((_, was)) = masks.iter().find(|x| x.0 == *tid) {
                    assert_eq!(m, was, "pid {pid} thread {tid}: its mask changed");
                }
            }
            checked += usize::from(!same.is_empty());
        }
    }
    let actions = s["actions"].as_array().map_or(0, Vec::len);
    let rate = spawned as f64 / elapsed * 60.0;
    println!(
        "churn: {spawned} processes and {threads_started} threads in {elapsed:.0} s ({rate:.0} processes/min, {execs} pinning themselves and exec'ing); daemon RSS {rss_start} KiB after 3 s, {rss_end} KiB at the end; daemon CPU {:.1} % of one CPU (its own count: monitoring {:.2} %, budget {} %); {} scans, the last {:.1} s before the end at an interval of {} s; {actions} actions journaled; {checked} other processes unchanged",
        cpu / elapsed * 100.0,
        own["monitoring_cpu_pct"].as_f64().unwrap_or(f64::NAN),
        own["cpu_budget_pct"].as_f64().unwrap_or(f64::NAN),
        own["scans"],
        status_age_s,
        own["interval_s"],
    );
    assert!(checked > 0, "no process outlived the churn to compare");
    // It kept scanning to the end (the interval stretches to at most ten times its own).
    let longest = interval.parse::<f64>().unwrap_or(0.5) * 10.0 + 25.0;
    assert!(
        status_age_s < longest,
        "the daemon's last scan was {status_age_s:.0} s before the end:\n{log}"
    );
    assert!(
        rss_end < 2 * rss_start.max(1) + 32 * 1024,
        "the daemon's memory grew from {rss_start} KiB to {rss_end} KiB"
    );
    let st = status_json(&state);
    for a in st["actions"].as_array().into_iter().flatten() {
        let state = a["state"].as_str().unwrap_or_default();
        assert!(
            state != "trial" && state != "applying",
            "an action was left {state} at stop: {a:#}"
        );
    }
}
