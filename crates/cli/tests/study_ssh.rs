//! A study run over SSH against a network-namespace host of this machine: sshd started in the
//! host's namespace by the test (support/sshd.rs: its own config, throw-away keys), the
//! coordinator in the hub starting `perfpilot study worker --stdio` there through `ssh`; the
//! same study over TCP (a worker listening with --insecure-listen) finds the same winner from
//! the same trials. A host that is down and one that asks for a password are refused in
//! words, at once, with nothing stored. Needs root, iproute2, nginx and OpenSSH.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use perfpilot_lab::netns::{NetLab, NsProcess, wait_in};
use perfpilot_testkit as kit;
use support::hosts::{hosts_by_round, nginx_study, trials};
use support::{EXE, lab_or_skip, sshd, text};

/// Where each trial's nginx listens, on the worker host's loopback.
const NGINX_PORT: u16 = 18495;

/// `study run` in the hub against `host`, with `extra` arguments.
fn run(lab: &NetLab, dir: &Path, study: &Path, store: &Path, host: &str, extra: &[&str]) -> Output {
    lab.command(lab.hub(), EXE)
        .current_dir(dir)
        .args(["study", "run"])
        .arg(study)
        .arg("--store")
        .arg(store)
        .args(["--hosts", host])
        .args(extra)
        .output()
        .unwrap()
}

/// What a run found and stored: the winner line, and every trial's (phase, configuration,
/// status).
fn found(out: &Output, store: &Path) -> (String, BTreeSet<(String, String, String)>) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let best = stdout
        .lines()
        .find(|l| l.starts_with("best:"))
        .unwrap_or_else(|| panic!("no winner: {}", text(out)))
        .to_string();
    let stored = trials(store, 1)
        .iter()
        .map(|t| (t.phase.to_string(), t.config.clone(), t.status.to_string()))
        .collect();
    (best, stored)
}

#[test]
fn a_study_over_ssh_finds_what_the_tcp_path_finds_and_bad_hosts_are_refused_in_words() {
    let Some(lab) = lab_or_skip(1) else { return };
    let dir = kit::TempDir::new("study-ssh");
    let d = &dir.0;
    let sshd = sshd::start(&lab, 0, d, EXE);
    let study = nginx_study(d, NGINX_PORT, 2, 1);
    let host = format!("ssh://root@{}:{}", lab.addr(0), sshd::SSH_PORT);
    let remote = sshd.remote_study.display().to_string();
    let over_ssh = ["--ssh", &sshd.ssh, "--remote-perfpilot", &remote];

    let ssh_store = d.join("ssh.db");
    let out = run(&lab, d, &study, &ssh_store, &host, &over_ssh);
    assert!(out.status.success(), "{}", text(&out));
    let (ssh_best, ssh_trials) = found(&out, &ssh_store);
    // Every round ran on the SSH host, and it measured its own nginx.
    let by_round = hosts_by_round(&trials(&ssh_store, 1));
    assert!(
        by_round.values().all(|h| h.len() == 1 && h.contains(&host)),
        "{by_round:?}"
    );

    // The same study over TCP to a worker listening in the same namespace.
    let listen = format!("{}:7071", lab.addr(0));
    let worker = lab
        .command(lab.host(0), EXE)
        .args([
            "study",
            "worker",
            "--listen",
            &listen,
            "--insecure-listen",
            "--store",
        ])
        .arg(d.join("tcp-worker.db"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let worker = NsProcess(worker);
    wait_in(&lab, lab.hub(), &lab.addr(0), 7071).unwrap();
    let tcp_store = d.join("tcp.db");
    let out = run(&lab, d, &study, &tcp_store, &listen, &[]);
    assert!(out.status.success(), "{}", text(&out));
    drop(worker);
    let (tcp_best, tcp_trials) = found(&out, &tcp_store);
    assert_eq!(ssh_best, tcp_best);
    assert_eq!(ssh_best, "best: conf=fast");
    let ok = |t: &BTreeSet<(String, String, String)>| t.iter().all(|(_, _, s)| s == "ok");
    assert!(
        ok(&ssh_trials) && ok(&tcp_trials),
        "{ssh_trials:?} {tcp_trials:?}"
    );
    let configs = |t: &BTreeSet<(String, String, String)>| -> BTreeSet<(String, String)> {
        t.iter().map(|(p, c, _)| (p.clone(), c.clone())).collect()
    };
    assert_eq!(configs(&ssh_trials), configs(&tcp_trials));

    // A host that asks for a password: BatchMode turns the prompt into a refusal at once.
    let store = d.join("refused.db");
    let t = Instant::now();
    let stranger = ["--ssh", &sshd.ssh_stranger, "--remote-perfpilot", &remote];
    let out = run(&lab, d, &study, &store, &host, &stranger);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("host {host}")) && stderr.contains("Permission denied"),
        "{stderr}"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    // A host that is down (no one at that address).
    let down = format!("ssh://root@{}:{}", lab.addr(5), sshd::SSH_PORT);
    let out = run(&lab, d, &study, &store, &down, &over_ssh);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("host {down}")) && stderr.contains("ssh: connect to host"),
        "{stderr}"
    );
    assert!(!store.exists(), "a refused run began in the store");
}
