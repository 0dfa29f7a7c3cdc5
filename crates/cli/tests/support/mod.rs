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
pub fn lab_or_skip(hosts: usize) -> Option<perfpilot_lab::netns::NetLab> {
    if let Some(why) = perfpilot_lab::netns::unavailable() {
        println!("skipped: {why}");
        return None;
    }
    Some(perfpilot_lab::netns::NetLab::new(hosts).expect("create the namespace lab"))
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

/// The THP setting the daemon raises at start when large pages are on.
pub const SHMEM_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// Puts `shmem_enabled` back as it was, also when the test panics.
pub struct ShmemGuard(pub String);

impl ShmemGuard {
    pub fn take() -> ShmemGuard {
        ShmemGuard(selected(&std::fs::read_to_string(SHMEM_ENABLED).unwrap()))
    }
}

impl Drop for ShmemGuard {
    fn drop(&mut self) {
        let _ = std::fs::write(SHMEM_ENABLED, &self.0);
    }
}

/// The bracketed choice of a THP setting (`always within_size advise [never] deny force`).
pub fn selected(text: &str) -> String {
    perfpilot_sys::stat::selected_choice(text)
        .unwrap_or_default()
        .to_string()
}

/// A pgbench table of `scale` in the PostgreSQL on `port`, prewarmed into its buffer pool
/// (huge pages are made of populated memory only), and `pgbench -S` with two clients on it for
/// `seconds`.
pub fn pgbench_select_load(port: u16, scale: u32, seconds: u32) -> Load {
    use perfpilot_testkit as kit;
    let port = port.to_string();
    let pg_args = ["-h", "127.0.0.1", "-p", port.as_str(), "-U", "postgres"];
    let scale = scale.to_string();
    let out = Command::new(kit::require("pgbench"))
        .args(pg_args)
        .args(["-i", "-q", "-s", scale.as_str(), "postgres"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(kit::require("psql"))
        .args(pg_args)
        .args([
            "-c",
            "create extension pg_prewarm; select pg_prewarm('pgbench_accounts'), pg_prewarm('pgbench_accounts_pkey');",
            "postgres",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Load(
        Command::new(kit::require("pgbench"))
            .args(pg_args)
            .args([
                "-S",
                "-c",
                "2",
                "-j",
                "2",
                "-T",
                &seconds.to_string(),
                "postgres",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}
