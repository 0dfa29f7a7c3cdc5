//! What the tests of study hosts share: a study of two nginx configurations, and the hosts and
//! trials a run stored.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use perfpilot_store::{Store, TrialRecord};
use perfpilot_testkit as kit;

/// A study of two nginx configurations in `dir`, nginx on 127.0.0.1:`port`: `fast` keeps
/// connections open, `slow` (the baseline) closes each after one request.
pub fn nginx_study(dir: &Path, port: u16, repetitions: usize, confirm: usize) -> PathBuf {
    let d = dir.display();
    for (name, keepalive) in [("fast", 1_000_000), ("slow", 1)] {
        let conf = format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx-{name}.pid;\n\
             events {{ worker_connections 1024; }}\n\
             http {{ access_log off; keepalive_requests {keepalive};\n\
               client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
               server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"ok\\n\"; }} }} }}\n"
        );
        std::fs::write(dir.join(format!("{name}.conf")), conf).unwrap();
    }
    let nginx = kit::require("nginx");
    let f = dir.join("hosts.toml");
    std::fs::write(
        &f,
        format!(
            r#"name = "nginx-hosts"
[deployment]
command = "{nginx} -p {d}/ -e {d}/error.log -c {d}/{{conf}}.conf"
base_port = {port}
[load]
url = "http://127.0.0.1:{{port}}/"
users_per_instance = 2
threads = 1
[objective]
goal = "maximize throughput"
[factors]
conf = ["slow", "fast"]
[run]
warmup = "1s"
measure = "1s"
repetitions = {repetitions}
min_rounds = 3
confirm_rounds = {confirm}
cooldown = "0s"
"#,
            nginx = nginx.display()
        ),
    )
    .unwrap();
    f
}

/// The host each stored trial ran on, by (phase, round).
pub fn hosts_by_round(trials: &[TrialRecord]) -> BTreeMap<(String, i64), BTreeSet<String>> {
    let mut out: BTreeMap<(String, i64), BTreeSet<String>> = BTreeMap::new();
    for t in trials {
        let d: serde_json::Value = serde_json::from_str(&t.detail).unwrap();
        let host = d["host"].as_str().expect("every trial names its host");
        out.entry((t.phase.to_string(), t.round))
            .or_default()
            .insert(host.to_string());
    }
    out
}

pub fn trials(store: &Path, run: i64) -> Vec<TrialRecord> {
    Store::open_existing(store).unwrap().trials(run).unwrap()
}
