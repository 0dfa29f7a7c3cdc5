//! Parallel study trials across network-namespace hosts on this machine: a study worker in
//! each host namespace, the coordinator (`study run --hosts`) in the hub, nginx deployed by
//! each worker inside its own namespace (both on the same 127.0.0.1 port at once, which only
//! separate hosts allow). Whole rounds per host; a worker killed mid-run; a worker of another
//! version refused; a run whose every host was lost resumed. Needs root, iproute2 and nginx
//! (the lab is removed on drop, also on panic).

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use perfpilot_lab::netns::{NetLab, NsProcess, wait_in};
use perfpilot_testkit as kit;
use support::hosts::{hosts_by_round, nginx_study, trials};
use support::{EXE, lab_or_skip, text};

/// The port each worker's nginx listens on, on its own host's loopback.
const PORT: u16 = 18480;

fn study(dir: &Path, repetitions: usize, confirm: usize) -> PathBuf {
    nginx_study(dir, PORT, repetitions, confirm)
}

/// A study worker on host `i`, port 7071 (`extra`: more arguments).
fn worker(lab: &NetLab, i: usize, extra: &[&str]) -> NsProcess {
    let listen = format!("{}:7071", lab.addr(i));
    let child = lab
        .command(lab.host(i), EXE)
        .args(["study", "worker", "--listen", &listen, "--insecure-listen"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = NsProcess(child);
    wait_in(lab, lab.hub(), &lab.addr(i), 7071).unwrap();
    p
}

/// `perfpilot study run FILE --hosts …` (or `--resume`) in the hub, from `dir`.
fn coordinator(lab: &NetLab, dir: &Path, hosts: &[usize], args: &[&str]) -> Command {
    let hosts: Vec<String> = hosts
        .iter()
        .map(|i| format!("{}:7071", lab.addr(*i)))
        .collect();
    let mut c = lab.command(lab.hub(), EXE);
    c.current_dir(dir)
        .args(["study", "run"])
        .args(args)
        .args(["--hosts", &hosts.join(",")]);
    c
}

#[test]
fn two_namespace_hosts_run_whole_rounds_at_the_same_time_and_the_run_finds_the_winner() {
    let Some(lab) = lab_or_skip(2) else { return };
    let dir = kit::TempDir::new("study-hosts");
    let f = study(&dir.0, 4, 2);
    let store = dir.0.join("s.db");
    let _w: Vec<NsProcess> = (0..2).map(|i| worker(&lab, i, &[])).collect();
    let out = coordinator(
        &lab,
        &dir.0,
        &[0, 1],
        &[
            &f.display().to_string(),
            "--store",
            &store.display().to_string(),
        ],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("best: conf=fast"), "{}", text(&out));
    assert!(
        stdout.contains("note: trials ran on 2 host(s), each round on one host"),
        "{}",
        text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for i in 0..2 {
        assert!(
            stderr.contains(&format!("of at most 4 on {}:7071 done", lab.addr(i))),
            "{}",
            text(&out)
        );
    }
    let stored = trials(&store, 1);
    assert!(stored.iter().any(|t| t.phase.to_string() == "confirm"));
    let by_round = hosts_by_round(&stored);
    for ((phase, round), hosts) in &by_round {
        assert_eq!(hosts.len(), 1, "{phase} round {round} ran on {hosts:?}");
    }
    let used: BTreeSet<&String> = by_round.values().flatten().collect();
    assert_eq!(used.len(), 2, "both hosts ran rounds: {by_round:?}");
    // Every trial measured its own host's nginx.
    assert!(
        stored.iter().all(|t| t.status.to_string() == "ok"),
        "{stored:?}"
    );
}

#[test]
fn a_worker_of_another_version_is_refused_and_a_worker_killed_mid_run_loses_only_its_round() {
    let Some(lab) = lab_or_skip(2) else { return };
    let dir = kit::TempDir::new("study-hosts-lost");
    let f = study(&dir.0, 3, 1);
    let store = dir.0.join("s.db");
    let run_args = [
        f.display().to_string(),
        "--store".into(),
        store.display().to_string(),
    ];
    let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();

    // Another version: refused with both versions named, before anything is stored.
    let w0 = worker(&lab, 0, &[]);
    let old = worker(&lab, 1, &["--pretend-version", "0.0.1-old"]);
    let out = coordinator(&lab, &dir.0, &[0, 1], &run_args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("host {}:7071", lab.addr(1)))
            && stderr.contains("perfpilot 0.0.1-old")
            && stderr.contains(&format!("perfpilot {}", env!("CARGO_PKG_VERSION"))),
        "{stderr}"
    );
    assert!(!store.exists(), "nothing was begun in the store");
    drop(old);

    // Host 1 killed while it runs its first round: that round runs again on host 0.
    let mut w1 = worker(&lab, 1, &[]);
    let run = coordinator(&lab, &dir.0, &[0, 1], &run_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A trial takes a little over 2 s: host 1 is in the middle of round 2.
    std::thread::sleep(Duration::from_secs(3));
    w1.0.kill().unwrap();
    let _ = w1.0.wait();
    lab.kill_all_in(lab.host(1));
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("host {}:7071 lost in race round", lab.addr(1)))
            && stderr.contains(&format!("the round is run again on {}:7071", lab.addr(0))),
        "{}",
        text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("best: conf=fast"), "{}", text(&out));
    assert!(
        stdout.contains(&format!("warning: host {}:7071 was lost", lab.addr(1))),
        "{}",
        text(&out)
    );
    // No round is split between hosts: host 1's partial round was dropped.
    let by_round = hosts_by_round(&trials(&store, 1));
    for ((phase, round), hosts) in &by_round {
        assert_eq!(hosts.len(), 1, "{phase} round {round} ran on {hosts:?}");
    }
    let rounds = |phase: &str| by_round.keys().filter(|(p, _)| p == phase).count();
    assert!(
        rounds("race") >= 3 && rounds("confirm") == 1,
        "{by_round:?}"
    );
    drop(w0);
}

#[test]
fn a_run_whose_every_host_is_lost_stops_and_resume_finishes_it_without_rerunning_rounds() {
    let Some(lab) = lab_or_skip(1) else { return };
    let dir = kit::TempDir::new("study-hosts-resume");
    let f = study(&dir.0, 3, 1);
    let store = dir.0.join("s.db");
    let store_arg = store.display().to_string();
    let mut w = worker(&lab, 0, &[]);
    let run = coordinator(
        &lab,
        &dir.0,
        &[0],
        &[&f.display().to_string(), "--store", &store_arg],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Round 1 (two trials, a little over 2 s each) is done; round 2 is running.
    std::thread::sleep(Duration::from_secs(6));
    w.0.kill().unwrap();
    let _ = w.0.wait();
    lab.kill_all_in(lab.host(0));
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("every host was lost") && stderr.contains("perfpilot study run --resume 1"),
        "{stderr}"
    );
    let before = trials(&store, 1);
    assert!(!before.is_empty(), "round 1 is stored: {}", text(&out));
    let done: BTreeSet<(String, i64)> = hosts_by_round(&before).into_keys().collect();

    let _w = worker(&lab, 0, &[]);
    let out = coordinator(
        &lab,
        &dir.0,
        &[0],
        &["--resume", "1", "--store", &store_arg],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let after = trials(&store, 1);
    // The rounds stored before were not run again: each trial once.
    let mut seen = BTreeSet::new();
    for t in &after {
        assert!(
            seen.insert((t.phase.to_string(), t.round, t.config.clone())),
            "{} round {} {} twice",
            t.phase,
            t.round,
            t.config
        );
    }
    assert!(
        done.iter().all(|k| hosts_by_round(&after).contains_key(k)) && after.len() > before.len(),
        "{}",
        text(&out)
    );
}
