//! The daemon's live metrics: `/metrics` in both text formats, `/status`, the textfile, a port
//! already taken, a non-loopback address, and a configuration reloaded by SIGHUP (a broken
//! drop-in refused by file and line, a good one taken in). The daemons here act on nothing:
//! every strategy is off and only a load these tests spawn is matched. As root, each daemon
//! and its load run in a PID namespace of their own (`unshare`), so the daemon does not even
//! read the machine's other processes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod support;
use support::{Dir, EXE, wait_until};

/// Every strategy off: these daemons watch and report, and change nothing.
const WATCH_ONLY: &str = "only_matched = true\n[tunables]\ninterval_s = 0.5\nmin_age_s = 0\nmin_cpu_cores = 0\nmin_memory_mib = 0\ncache_affinity = false\nmemory_affinity = false\nlarge_pages = false\nread_ahead = false\n";

/// A daemon whose log is collected as it runs, with a sleeping load it watches (tagged for
/// this test process only).
struct Daemon {
    child: Child,
    log: Arc<Mutex<String>>,
    /// The load, when it runs outside a namespace.
    load: Option<Child>,
}

/// Whether daemons run in PID namespaces of their own (root, with `unshare`).
fn in_namespace() -> bool {
    perfpilot_sys::user::is_root()
        && Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "true"])
            .status()
            .is_ok_and(|s| s.success())
}

impl Daemon {
    fn start(config: &Path, state: &Path, tag: &str, extra: &[&str]) -> Daemon {
        let mut daemon_args: Vec<String> = vec![
            "daemon".into(),
            "--config".into(),
            config.to_str().unwrap().into(),
            "--state-dir".into(),
            state.to_str().unwrap().into(),
            "--for".into(),
            "60s".into(),
        ];
        daemon_args.extend(extra.iter().map(|s| s.to_string()));
        let (mut child, load) = if in_namespace() {
            // The shell is PID 1: it starts the load (held open by a sleep), then becomes the
            // daemon.
            let child = Command::new("unshare")
                .args(["--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c"])
                .arg("sleep 2147483647 | \"$0\" bench load --tag \"$1\" >/dev/null & shift; exec \"$0\" \"$@\"")
                .arg(EXE)
                .arg(tag)
                .args(&daemon_args)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (child, None)
        } else {
            let mut load = Command::new(EXE)
                .args(["bench", "load", "--tag", tag])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut line = String::new();
            BufReader::new(load.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert_eq!(line.trim(), "ready");
            let child = Command::new(EXE)
                .args(&daemon_args)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (child, Some(load))
        };
        let log = Arc::new(Mutex::new(String::new()));
        let (l2, err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut l = l2.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Daemon { child, log, load }
    }

    /// The daemon's pid as this test sees it: unshare's child in a namespace.
    fn pid(&self) -> u32 {
        if self.load.is_some() {
            return self.child.id();
        }
        let id = self.child.id();
        let mut pid = 0;
        let found = wait_until(Duration::from_secs(10), || {
            pid = std::fs::read_to_string(format!("/proc/{id}/task/{id}/children"))
                .unwrap_or_default()
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            pid > 0
        });
        assert!(found, "unshare {id} has no child");
        pid
    }

    /// Sends a signal to the daemon.
    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The address the endpoint says it serves.
    fn addr(&self) -> SocketAddr {
        let mut addr = None;
        let found = wait_until(Duration::from_secs(20), || {
            addr = self.log().lines().find_map(|l| {
                let rest = l.split("serving http://").nth(1)?;
                rest.split('/').next()?.parse().ok()
            });
            addr.is_some()
        });
        assert!(found, "no endpoint in the log:\n{}", self.log());
        addr.unwrap()
    }

    fn stop(mut self) -> String {
        self.signal("-TERM");
        let st = self.child.wait().unwrap();
        let log = self.log();
        assert!(st.success(), "daemon failed:\n{log}");
        log
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(l) = &mut self.load {
            let _ = l.kill();
            let _ = l.wait();
        }
    }
}

/// A tag for this test process only.
fn tag(name: &str) -> String {
    format!("{}-{name}", std::process::id())
}

/// A GET with an `Accept` header: (content type, body).
fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (ctype, body.to_string())
}

fn scrape_when(addr: SocketAddr, what: &str) -> String {
    let mut body = String::new();
    let ok = wait_until(Duration::from_secs(20), || {
        body = get(addr, "/metrics", None).1;
        body.contains(what)
    });
    assert!(ok, "{what} never appeared:\n{body}");
    body
}

#[test]
fn metrics_come_in_both_text_formats_by_accept_header_and_status_as_json() {
    let dir = Dir::new("metrics-formats");
    let tag = tag("metrics-formats");
    let cfg = dir.config(&format!(
        "{WATCH_ONLY}\n[[workload]]\nmatch = {{ cmdline = \"--tag {tag}\" }}\n"
    ));
    let d = Daemon::start(&cfg, &dir.state(), &tag, &["--listen", "127.0.0.1:0"]);
    let addr = d.addr();
    // The load has no signal and unverified actions are off: it needs a signal.
    let prom = scrape_when(addr, "perfpilot_workloads{state=\"needs_signal\"} 1");
    let (ctype, _) = get(addr, "/metrics", Some("text/plain;version=0.0.4"));
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    assert!(
        prom.contains("# TYPE perfpilot_scans_total counter"),
        "{prom}"
    );
    assert!(prom.contains("# TYPE perfpilot_build_info gauge"), "{prom}");
    assert!(
        prom.contains("perfpilot_scan_duration_seconds_bucket{le="),
        "{prom}"
    );
    assert!(
        prom.contains("perfpilot_scan_interval_configured_seconds 0.5"),
        "{prom}"
    );
    assert!(
        prom.contains("perfpilot_probe_failures_total{kind=\"timeout\"}"),
        "{prom}"
    );
    assert!(!prom.contains("# EOF"), "{prom}");

    let (ctype, om) = get(
        addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4"),
    );
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(om.contains("# TYPE perfpilot_scans counter"), "{om}");
    assert!(
        om.contains("# UNIT perfpilot_collapsed_bytes bytes"),
        "{om}"
    );

    let (ctype, status) = get(addr, "/status", None);
    assert_eq!(ctype, "application/json");
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(v["scans"].as_u64().unwrap() >= 1, "{v}");
    let load = v["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["class"] == "needs_signal")
        .unwrap_or_else(|| panic!("no workload needs a signal: {v}"));
    assert_eq!(load["name"], "perfpilot", "{v}");
    assert_eq!(
        get(addr, "/nothing", None).1,
        "not found: try /metrics or /status\n"
    );
    d.stop();
}

#[test]
fn the_textfile_holds_the_same_metrics_in_the_prometheus_format() {
    let dir = Dir::new("metrics-textfile");
    let text = dir.0.join("textfile");
    std::fs::create_dir_all(&text).unwrap();
    let cfg = dir.config(WATCH_ONLY);
    let d = Daemon::start(
        &cfg,
        &dir.state(),
        &tag("metrics-textfile"),
        &["--textfile", text.to_str().unwrap()],
    );
    let file = text.join("perfpilot.prom");
    let mut body = String::new();
    let ok = wait_until(Duration::from_secs(20), || {
        body = std::fs::read_to_string(&file).unwrap_or_default();
        body.contains("perfpilot_scans_total ")
    });
    assert!(ok, "no scans in {}:\n{body}", file.display());
    assert!(body.contains("# TYPE perfpilot_workloads gauge"), "{body}");
    d.stop();
    let names: Vec<_> = std::fs::read_dir(&text).unwrap().collect();
    assert_eq!(names.len(), 1, "a temporary file was left behind");
}

#[test]
fn a_port_already_in_use_stops_the_daemon_with_a_clear_error() {
    let dir = Dir::new("metrics-port-taken");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    // `listen` is a top-level key: before [tunables].
    let cfg = dir.config(&format!("listen = \"127.0.0.1:{port}\"\n{WATCH_ONLY}"));
    let out = Command::new(EXE)
        .args(["daemon", "--config"])
        .arg(&cfg)
        .arg("--state-dir")
        .arg(dir.state())
        .args(["--for", "5s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}"))
            && err.contains("choose another"),
        "{err}"
    );
}

#[test]
fn a_drop_in_with_an_error_keeps_the_old_config_and_a_good_one_is_taken_in_on_sighup() {
    let dir = Dir::new("metrics-reload");
    let cfg = dir.config(WATCH_ONLY);
    let confd = dir.0.join("conf.d");
    std::fs::create_dir_all(&confd).unwrap();
    let d = Daemon::start(
        &cfg,
        &dir.state(),
        &tag("metrics-reload"),
        &["--listen", "127.0.0.1:0"],
    );
    let addr = d.addr();
    scrape_when(addr, "perfpilot_scan_interval_configured_seconds 0.5");
    let hup = |d: &Daemon| d.signal("-HUP");
    std::fs::write(confd.join("50-bad.toml"), "[tunables]\ninterval_s = -3\n").unwrap();
    hup(&d);
    let mut status = serde_json::Value::Null;
    let refused = wait_until(Duration::from_secs(20), || {
        status = serde_json::from_str(&get(addr, "/status", None).1).unwrap_or_default();
        status["config_error"].is_string()
    });
    assert!(refused, "{status}");
    let why = status["config_error"].as_str().unwrap();
    assert!(why.contains("conf.d/50-bad.toml:2:"), "{why}");
    // The old configuration stays in force.
    assert_eq!(status["interval_s"], 0.5, "{status}");

    std::fs::write(confd.join("50-bad.toml"), "[tunables]\ninterval_s = 0.7\n").unwrap();
    hup(&d);
    scrape_when(addr, "perfpilot_scan_interval_configured_seconds 0.7");
    let status: serde_json::Value = serde_json::from_str(&get(addr, "/status", None).1).unwrap();
    assert!(status["config_error"].is_null(), "{status}");
    assert_eq!(
        status["config_files"].as_array().unwrap().len(),
        2,
        "{status}"
    );
    let log = d.stop();
    assert!(log.contains("reload refused"), "{log}");
    assert!(log.contains("configuration reloaded: tunables"), "{log}");
}
