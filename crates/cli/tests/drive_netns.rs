//! Coordinated drivers across network-namespace hosts on this machine: nginx on one host,
//! `perfpilot drive --worker` on others, the coordinator in the hub; a worker killed mid-run;
//! a worker started over SSH for the run (sshd in its namespace, support/sshd.rs).
//! Needs root and iproute2 (the lab is removed on drop, also on panic).

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use perfpilot_drive::Measurement;
use perfpilot_lab::netns::{NetLab, NsProcess, wait_in};
use perfpilot_testkit as kit;
use support::{EXE, lab_or_skip, sshd, text};

/// nginx on host 0 of the lab, port 8080.
fn nginx(lab: &NetLab, dir: &kit::TempDir) -> NsProcess {
    let d = dir.0.display();
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{ access_log off; keepalive_requests 1000000;\n\
           client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
           server {{ listen {}:8080; location / {{ return 200 \"ok\\n\"; }} }} }}\n",
        lab.addr(0)
    );
    let path = dir.0.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let nginx = kit::require("nginx");
    let child = lab
        .command(lab.host(0), &nginx.display().to_string())
        .arg("-c")
        .arg(&path)
        .arg("-p")
        .arg(&dir.0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = NsProcess(child);
    wait_in(lab, lab.hub(), &lab.addr(0), 8080).unwrap();
    p
}

/// A worker on host `i`. Not `--once`: the readiness probe's connection would be its one.
fn worker(lab: &NetLab, i: usize) -> NsProcess {
    let listen = format!("{}:7070", lab.addr(i));
    let child = lab
        .command(lab.host(i), EXE)
        .args([
            "drive",
            "--worker",
            "--listen",
            &listen,
            "--insecure-listen",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = NsProcess(child);
    wait_in(lab, lab.hub(), &lab.addr(i), 7070).unwrap();
    p
}

fn coordinator(lab: &NetLab, workers: &[usize], extra: &[&str]) -> Command {
    let addrs: Vec<String> = workers
        .iter()
        .map(|i| format!("{}:7070", lab.addr(*i)))
        .collect();
    let mut c = lab.command(lab.hub(), EXE);
    c.args([
        "drive",
        "--coordinator",
        "--no-progress",
        "--workers",
        &addrs.join(","),
    ]);
    c.args(extra);
    c.arg(format!("http://{}:8080/", lab.addr(0)));
    c
}

#[test]
fn three_namespace_hosts_drive_one_target_together_and_thresholds_hold_on_the_merged_result() {
    let Some(lab) = lab_or_skip(4) else { return };
    let dir = kit::TempDir::new("netns-nginx");
    let _nginx = nginx(&lab, &dir);
    let _w: Vec<NsProcess> = (1..=3).map(|i| worker(&lab, i)).collect();
    let out = coordinator(
        &lab,
        &[1, 2, 3],
        &["-u", "6", "--think-time", "20ms", "-d", "2s", "--json", "-"],
    )
    .args(["--fail-if", "errors<1%", "--fail-if", "p99<1s"])
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let m = Measurement::from_json(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(m.extra.get("workers"), Some(&3.0), "{}", text(&out));
    assert_eq!(m.errors, 0);
    assert!(m.ok > 100, "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for i in 1..=3 {
        assert!(
            stderr.contains(&format!("worker {}:7070: 2 users", lab.addr(i))),
            "{stderr}"
        );
    }
    assert!(stderr.contains("pass: p99<1s"), "{stderr}");
    // The same merged result fails a threshold it cannot meet: exit code 3.
    let _w: Vec<NsProcess> = (1..=3).map(|i| worker(&lab, i)).collect();
    let out = coordinator(
        &lab,
        &[1, 2, 3],
        &["-u", "3", "--think-time", "20ms", "-d", "1s"],
    )
    .args(["--quiet", "--fail-if", "throughput>=1000000"])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
}

#[test]
fn a_worker_killed_mid_run_is_reported_with_the_users_it_carried_and_the_rest_is_kept() {
    let Some(lab) = lab_or_skip(3) else { return };
    let dir = kit::TempDir::new("netns-nginx");
    let _nginx = nginx(&lab, &dir);
    let _w1 = worker(&lab, 1);
    let mut w2 = worker(&lab, 2);
    let run = coordinator(
        &lab,
        &[1, 2],
        &["-u", "4", "--think-time", "20ms", "-d", "4s", "--json", "-"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The start is a second after the clock checks; kill worker 2 two seconds into the window.
    std::thread::sleep(Duration::from_secs(3));
    w2.0.kill().unwrap();
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("worker {}:7070 lost", lab.addr(2)))
            && stderr.contains("its 2 users"),
        "{stderr}"
    );
    let m = Measurement::from_json(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(m.extra.get("lost_users"), Some(&2.0));
    assert!(m.ok > 0);
}

#[test]
fn a_worker_started_over_ssh_drives_its_share_and_an_unreachable_one_is_named() {
    let Some(lab) = lab_or_skip(2) else { return };
    let dir = kit::TempDir::new("netns-ssh");
    let _nginx = nginx(&lab, &dir);
    let sshd = sshd::start(&lab, 1, &dir.0, EXE);
    let worker = format!("ssh://root@{}:{}", lab.addr(1), sshd::SSH_PORT);
    let drive = |workers: &str| {
        lab.command(lab.hub(), EXE)
            .args([
                "drive",
                "--coordinator",
                "--no-progress",
                "--workers",
                workers,
            ])
            .args(["--ssh", &sshd.ssh, "--remote-perfpilot", EXE])
            .args(["-u", "2", "--think-time", "20ms", "-d", "2s", "--json", "-"])
            .arg(format!("http://{}:8080/", lab.addr(0)))
            .output()
            .unwrap()
    };
    let out = drive(&worker);
    assert!(out.status.success(), "{}", text(&out));
    let m = Measurement::from_json(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(m.extra.get("workers"), Some(&1.0), "{}", text(&out));
    assert!(m.ok > 20 && m.errors == 0, "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("worker {worker}: 2 users")),
        "{}",
        text(&out)
    );
    // No one at that address: the coordinator says which worker, and what ssh said.
    let down = format!("ssh://root@{}:{}", lab.addr(7), sshd::SSH_PORT);
    let out = drive(&down);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&down) && stderr.contains("ssh: connect to host"),
        "{stderr}"
    );
}
