//! What the daemon's end-to-end tests share: a temporary state directory, the daemon started
//! on it, and `perfpilot status --json` read back.

#![allow(dead_code)] // each test binary uses a part

pub mod hosts;
pub mod sshd;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The perfpilot binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_perfpilot");

/// A load the test started, killed and reaped when dropped (also when the test panics).
pub struct Load(pub Child);

impl Load {
    /// Starts `c` (a `perfpilot bench load`, however launched) with its stdin and stdout piped,
    /// and waits for the `ready` line it prints once its threads run.
    pub fn ready(mut c: Command) -> Load {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {c:?}: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "{c:?} did not start");
        Load(child)
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("perfpilot-daemon-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
    pub fn config(&self, text: &str) -> PathBuf {
        let p = self.0.join("perfpilot.toml");
        std::fs::write(&p, text).unwrap();
        p
    }
    pub fn state(&self) -> PathBuf {
        self.0.join("state")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn daemon(config: &Path, state: &Path, run_for: &str) -> Child {
    Command::new(EXE)
        .args([
            "daemon",
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
            "--for",
            run_for,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub fn finish(d: Child) -> String {
    let out = d.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "daemon failed: {log}");
    log
}

pub fn status_json(state: &Path) -> serde_json::Value {
    let out = Command::new(EXE)
        .args(["status", "--json", "--state-dir", state.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `perfpilot status --json` while a daemon runs, or `None` when it cannot answer yet (no
/// store before the daemon's first write).
pub fn status_if_written(state: &Path) -> Option<serde_json::Value> {
    let out = Command::new(EXE)
        .args(["status", "--json", "--state-dir", state.to_str()?])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Stops a daemon the way systemd does (SIGTERM): it reverts on stop and exits 0.
pub fn terminate(d: &Child) {
    perfpilot_sys::signal::terminate(d.id()).unwrap();
}

pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// A lab of `hosts` network-namespace hosts, or `None` (the test is skipped, and says why) where
/// namespaces cannot be made (not root, no iproute2).
pub fn lab_or_skip(hosts: usize) -> Option<perfpilot_testkit::netns::NetLab> {
    if let Some(why) = perfpilot_testkit::netns::unavailable() {
        println!("skipped: {why}");
        return None;
    }
    Some(perfpilot_testkit::netns::NetLab::new(hosts).expect("create the namespace lab"))
}

/// A finished command's status, standard output and standard error, for assertion messages.
pub fn text(o: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
