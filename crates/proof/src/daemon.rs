//! The perfpilot cell: `perfpilot daemon` with an empty configuration (only `min_age_s = 5`
//! and `interval_s = 2`), its own state directory, started before the server. While the cell
//! runs its status is polled for the first action kept on a verdict and for the workloads it
//! sees (the last poll while the server runs is what the table shows: after the load ends, a
//! pre-forked server's busy workers are gone); after it the daemon is stopped (SIGTERM) and
//! `perfpilot status --json` is read for its actions, verdicts, proxy gains (`shadow`) and own
//! CPU. Every field is read tolerantly: the status grows while the harness does not.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use perfpilot_lab::server::Server;
use serde_json::Value;

use crate::record::{ActionSummary, DaemonReport, GainCi, ShadowGain, WorkloadState};

/// The whole configuration of the perfpilot cell.
pub const EMPTY_CONFIG: &str = "# The proof's perfpilot cell: no workloads, no probes; only a faster pace.\n[tunables]\nmin_age_s = 5\ninterval_s = 2\n";

/// How often the status is polled for the first kept action.
const POLL: Duration = Duration::from_secs(3);

/// A running daemon of the perfpilot cell.
pub struct Daemon {
    proc: Server,
    perfpilot: PathBuf,
    state_dir: PathBuf,
    started: Instant,
    server_started: Option<(Instant, SystemTime)>,
    first_kept: Arc<Mutex<Option<Instant>>>,
    seen: Arc<Mutex<Vec<WorkloadState>>>,
    polling: Arc<AtomicBool>,
    poller: Option<std::thread::JoinHandle<()>>,
}

/// `perfpilot status --state-dir DIR --json`, parsed (`None` if it fails).
fn status(perfpilot: &Path, state_dir: &Path) -> Option<Value> {
    read_status(perfpilot, state_dir).ok()
}

/// As [`status`], with why it failed: the exit status and the first line of its error output.
fn read_status(perfpilot: &Path, state_dir: &Path) -> std::result::Result<Value, String> {
    let out = Command::new(perfpilot)
        .args(["status", "--json", "--actions", "100", "--state-dir"])
        .arg(state_dir)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", perfpilot.display()))?;
    serde_json::from_slice(&out.stdout).map_err(|e| {
        let err = String::from_utf8_lossy(&out.stderr);
        format!(
            "{} ({e}): {}",
            out.status,
            err.lines().next().unwrap_or("no error output")
        )
    })
}

/// Reads of the status [`Daemon::deciding`] tries before it stops waiting.
const STATUS_TRIES: u32 = 3;

/// Whether an action was kept on a verdict: the start-up setting (`shmem_enabled` raised to
/// `advise`, journaled as an action in force) is not judged and does not count.
fn kept_on_verdict(action: &Value) -> bool {
    action["state"].as_str() == Some("kept")
        && action["verdict"]["decision"].as_str() == Some("keep")
}

fn has_kept(status: &Value) -> bool {
    status["actions"]
        .as_array()
        .is_some_and(|a| a.iter().any(kept_on_verdict))
}

/// The workloads of `process` (named after it, e.g. `postgres` or `postgres (+3 processes)`).
fn workloads_of(report: &DaemonReport, process: &str) -> Vec<WorkloadState> {
    report
        .workloads
        .iter()
        .filter(|w| w.name == process || w.name.starts_with(&format!("{process} ")))
        .cloned()
        .collect()
}

impl Daemon {
    /// Starts the daemon with the empty configuration in `state_dir` (created).
    pub fn start(perfpilot: &Path, state_dir: &Path) -> Result<Daemon> {
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("creating {}", state_dir.display()))?;
        let config = state_dir.join("perfpilot.toml");
        std::fs::write(&config, EMPTY_CONFIG)?;
        let mut c = Command::new(perfpilot);
        c.arg("daemon")
            .arg("--config")
            .arg(&config)
            .arg("--state-dir")
            .arg(state_dir);
        let mut proc = Server::spawn("perfpilot daemon", c, &state_dir.join("daemon.log"))?;
        // Its first scan writes status.json; a daemon that dies at once says why in its log.
        let end = Instant::now() + Duration::from_secs(30);
        while Instant::now() < end && !state_dir.join("status.json").is_file() {
            proc.check_alive()?;
            crate::stop::check_stop()?;
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(Daemon {
            proc,
            perfpilot: perfpilot.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
            started: Instant::now(),
            server_started: None,
            first_kept: Arc::new(Mutex::new(None)),
            seen: Arc::new(Mutex::new(Vec::new())),
            polling: Arc::new(AtomicBool::new(true)),
            poller: None,
        })
    }

    /// Notes the start of the server whose processes are named `process` (times count from
    /// it) and starts polling for a kept action and for the daemon's view of the server.
    pub fn server_started(&mut self, process: &str) {
        self.server_started = Some((Instant::now(), SystemTime::now()));
        let (perfpilot, dir) = (self.perfpilot.clone(), self.state_dir.clone());
        let (first, seen, polling) = (
            self.first_kept.clone(),
            self.seen.clone(),
            self.polling.clone(),
        );
        let process = process.to_string();
        self.poller = Some(std::thread::spawn(move || {
            while polling.load(Ordering::SeqCst) {
                if let Some(s) = status(&perfpilot, &dir) {
                    if has_kept(&s)
                        && let Ok(mut f) = first.lock()
                    {
                        f.get_or_insert_with(Instant::now);
                    }
                    let now_seen = workloads_of(&parse_status(&s), &process);
                    if !now_seen.is_empty()
                        && let Ok(mut v) = seen.lock()
                    {
                        *v = now_seen;
                    }
                }
                let end = Instant::now() + POLL;
                while Instant::now() < end && polling.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }));
    }

    /// Whether the daemon is deciding something now: an action in `trial`, or a workload it
    /// would try an action on once the signal is steady (Redis's trial began 2 s after a fixed
    /// warm-up ended, while the gate still waited, and the cell measured the trial's start).
    /// A failed read is tried again: one failure must not end a cell's wait in the middle of
    /// a trial (a PostgreSQL cell measured a trial's baseline once, 2026-11-24).
    pub fn deciding(&self) -> bool {
        let read = || read_status(&self.perfpilot, &self.state_dir);
        decide(read, Duration::from_secs(1)).unwrap_or_else(|why| {
            eprintln!(
                "proof: perfpilot status failed {STATUS_TRIES} times ({why}); the cell stops waiting for the daemon's decision"
            );
            false
        })
    }

    /// Stops the daemon and reports what it did.
    pub fn finish(mut self) -> DaemonReport {
        self.polling.store(false, Ordering::SeqCst);
        if let Some(p) = self.poller.take() {
            let _ = p.join();
        }
        let life = self.started.elapsed().as_secs_f64();
        let cpu_pct = perfpilot_lab::process::cpu_seconds(self.proc.pid())
            .filter(|_| life > 0.0)
            .map(|s| s / life * 100.0);
        self.proc.stop();
        let status = status(&self.perfpilot, &self.state_dir).unwrap_or(Value::Null);
        let mut report = parse_status(&status);
        report.cpu_pct = cpu_pct;
        if let Ok(seen) = self.seen.lock()
            && !seen.is_empty()
        {
            report.workloads = seen.clone();
        }
        report.state_dir = self.state_dir.display().to_string();
        let polled = self.first_kept.lock().ok().and_then(|f| *f);
        report.first_kept_s = match (self.server_started, polled) {
            (Some((t0, _)), Some(t)) => Some(t.saturating_duration_since(t0).as_secs_f64()),
            // Kept after the last poll: its journal time (whole seconds) is the best there is.
            (Some((_, wall0)), None) => first_kept_from_journal(&status, wall0),
            _ => None,
        };
        report
    }
}

/// Whether the status `read` gives shows the daemon deciding, trying a failed read up to
/// [`STATUS_TRIES`] times `pause` apart; the last failure when none succeeded.
fn decide(
    mut read: impl FnMut() -> std::result::Result<Value, String>,
    pause: Duration,
) -> std::result::Result<bool, String> {
    let mut why = String::new();
    for attempt in 1..=STATUS_TRIES {
        match read() {
            Ok(s) => return Ok(deciding(&s)),
            Err(e) => why = e,
        }
        if attempt < STATUS_TRIES {
            std::thread::sleep(pause);
        }
    }
    Err(why)
}

/// Whether a status document shows a trial running or one waiting for its signal.
pub fn deciding(status: &Value) -> bool {
    let trial = status["actions"]
        .as_array()
        .is_some_and(|a| a.iter().any(|a| a["state"].as_str() == Some("trial")));
    let waiting = status["daemon"]["workloads"].as_array().is_some_and(|w| {
        w.iter().any(|w| {
            w["state"]
                .as_str()
                .is_some_and(|s| s.starts_with("would try "))
        })
    });
    trial || waiting
}

/// Seconds from `wall0` to the earliest `updated` time of a kept action.
fn first_kept_from_journal(status: &Value, wall0: SystemTime) -> Option<f64> {
    status["actions"]
        .as_array()?
        .iter()
        .filter(|a| kept_on_verdict(a))
        .filter_map(|a| humantime::parse_rfc3339_weak(a["updated"].as_str()?).ok())
        .filter_map(|t| t.duration_since(wall0).ok())
        .map(|d| d.as_secs_f64())
        .min_by(f64::total_cmp)
}

fn gain(v: &Value) -> Option<GainCi> {
    Some(GainCi {
        ratio: v["ratio"].as_f64()?,
        ci_low: v["ci_low"].as_f64()?,
        ci_high: v["ci_high"].as_f64()?,
    })
}

/// The actions, notes and own CPU of a `perfpilot status --json` document; absent fields stay
/// empty.
pub fn parse_status(status: &Value) -> DaemonReport {
    let actions = status["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let v = &a["verdict"];
            ActionSummary {
                id: a["id"].as_i64().unwrap_or(0),
                strategy: a["strategy"].as_str().unwrap_or_default().to_string(),
                workload: a["workload"].as_str().unwrap_or_default().to_string(),
                state: a["state"].as_str().unwrap_or_default().to_string(),
                decision: v["decision"].as_str().map(str::to_string),
                signal: v["signal"].as_str().map(str::to_string),
                gain: gain(&v["gain"]),
                shadow: v["shadow"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| {
                        Some(ShadowGain {
                            signal: s["signal"].as_str().unwrap_or("proxy").to_string(),
                            gain: gain(&s["gain"])?,
                        })
                    })
                    .collect(),
            }
        })
        .collect();
    let d = &status["daemon"];
    DaemonReport {
        own_cpu_pct: d["own_cpu_pct"].as_f64(),
        notes: d["notes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect(),
        workloads: d["workloads"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| WorkloadState {
                name: w["name"].as_str().unwrap_or_default().to_string(),
                signal: w["signal"].as_str().map(str::to_string),
                state: w["state"].as_str().unwrap_or_default().to_string(),
            })
            .collect(),
        actions,
        ..DaemonReport::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_status_read_is_tried_again_before_the_cell_stops_waiting() {
        let trial = serde_json::json!({"actions": [{"state": "trial"}]});
        let mut calls = 0;
        let flaky = || {
            calls += 1;
            if calls < 3 {
                Err("exit status: 1 (EOF while parsing): database is locked".to_string())
            } else {
                Ok(trial.clone())
            }
        };
        assert_eq!(decide(flaky, Duration::ZERO), Ok(true));
        let broken = || Err::<Value, _>("exit status: 2 (EOF): boom".to_string());
        assert_eq!(
            decide(broken, Duration::ZERO),
            Err("exit status: 2 (EOF): boom".to_string())
        );
        let idle = || Ok(serde_json::json!({"actions": [{"state": "kept"}]}));
        assert_eq!(decide(idle, Duration::ZERO), Ok(false));
    }

    #[test]
    fn the_start_up_setting_is_not_a_kept_action_but_a_verdict_to_keep_is() {
        let startup = serde_json::json!({"actions": [
            {"id": 1, "strategy": "large_pages", "workload": "shmem_enabled", "state": "kept"}
        ]});
        assert!(!has_kept(&startup));
        let judged = serde_json::json!({"actions": [
            {"id": 1, "strategy": "large_pages", "workload": "shmem_enabled", "state": "kept"},
            {"id": 2, "strategy": "large_pages", "workload": "redis-server", "state": "kept",
             "verdict": {"decision": "keep"}}
        ]});
        assert!(has_kept(&judged));
    }

    #[test]
    fn a_grouped_workload_is_found_by_its_process_name_and_others_are_not() {
        let status = serde_json::json!({"daemon": {"workloads": [
            {"name": "postgres (+3 processes)", "state": "trying large_pages"},
            {"name": "postgresql-exporter", "state": "idle"},
            {"name": "pgbench", "state": "idle"}
        ]}});
        let seen = workloads_of(&parse_status(&status), "postgres");
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].state, "trying large_pages");
    }
}
