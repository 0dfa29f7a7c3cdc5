//! What the daemon does, or would do, with each workload, and why not more; never worked out a
//! second time here. A running daemon's own `status.json` says what it does; without one, a
//! dry run of the engine (`perfpilot_optimize::admin::dry_run`: one scan of the same policy,
//! signal and strategy code, with "would try" where the daemon would start a trial, nothing
//! journaled or applied) says what an empty-config daemon would do now.

use std::path::{Path, PathBuf};

use perfpilot_optimize::admin::{self, AdminError};
use serde::{Deserialize, Serialize};

/// The daemon's view of one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadPlan {
    /// A readable name.
    pub name: String,
    /// The stable signature (the journal's key).
    pub signature: String,
    /// Its processes.
    pub pids: Vec<i32>,
    /// What the daemon does with it next, or why nothing: `trial of large_pages (action 7)`,
    /// `too young (12 s < min_age_s 60)`, `large_pages backed off for 3600 s: …`,
    /// `excluded by the config`, `no signal: …`.
    pub next: String,
    /// The signal that would judge an action on it, if it has one.
    pub signal: Option<String>,
}

/// What the daemon does, as its last scan said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonView {
    /// The state directory read.
    pub state_dir: PathBuf,
    /// Whether a daemon holds the directory's lock now.
    pub running: bool,
    /// Its pid, where it wrote it.
    pub pid: Option<i32>,
    /// When its last scan ended (ms since the epoch); `None` without a status file.
    pub as_of_ms: Option<i64>,
    /// Each listed workload.
    pub workloads: Vec<WorkloadPlan>,
    /// In a sentence: where this comes from and how current it is.
    pub note: String,
    /// Where it comes from.
    pub source: ViewSource,
}

/// Where a [`DaemonView`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViewSource {
    /// The running daemon's last scan.
    Daemon,
    /// A dry run of the engine now (no daemon runs on the state directory).
    DryRun,
    /// The last scan of a daemon that no longer runs (the dry run failed).
    LastScan,
    /// Nothing could be read.
    None,
}

/// The daemon's view from `state_dir`: the running daemon's, else a dry run over `fs` with two
/// samples `settle` apart, else the last scan a daemon wrote.
pub fn read(fs: &perfpilot_sys::Fs, state_dir: &Path, settle: std::time::Duration) -> DaemonView {
    if perfpilot_optimize::daemon::Lock::held(state_dir).is_none() {
        let config = perfpilot_optimize::DaemonConfig::default();
        match admin::dry_run(fs, state_dir, config, settle) {
            Ok(status) => {
                return DaemonView {
                    state_dir: state_dir.to_path_buf(),
                    running: false,
                    pid: None,
                    as_of_ms: Some(status.time_ms),
                    workloads: status
                        .workloads
                        .iter()
                        .map(|w| WorkloadPlan {
                            name: w.name.clone(),
                            signature: w.signature.clone(),
                            pids: w.pids.clone(),
                            next: w.state.clone(),
                            signal: w.signal.clone(),
                        })
                        .collect(),
                    note: format!(
                        "no daemon runs on {}: a dry run of its engine now (an empty configuration, the tunables and verdicts stored there), proposing without acting",
                        state_dir.display()
                    ),
                    source: ViewSource::DryRun,
                };
            }
            Err(e) => {
                let mut view = last_scan(state_dir);
                view.note = format!("the dry run failed ({e}); {}", view.note);
                return view;
            }
        }
    }
    last_scan(state_dir)
}

/// The view from the `status.json` a daemon wrote in `state_dir`.
fn last_scan(state_dir: &Path) -> DaemonView {
    let mut view = DaemonView {
        state_dir: state_dir.to_path_buf(),
        running: false,
        pid: None,
        as_of_ms: None,
        workloads: Vec::new(),
        note: String::new(),
        source: ViewSource::None,
    };
    let report = match admin::status(state_dir, 0) {
        Ok(r) => r,
        Err(AdminError::NeverStarted { .. }) => {
            view.note = format!(
                "no daemon has run on {}; `perfpilot daemon --state-dir {}` tries changes on eligible workloads and measures each, and then this shows every workload's next step or why it has none",
                state_dir.display(),
                state_dir.display()
            );
            return view;
        }
        Err(e) => {
            view.note = format!("could not read the daemon's state: {e}");
            return view;
        }
    };
    view.running = report.running.is_some();
    view.source = if view.running {
        ViewSource::Daemon
    } else {
        ViewSource::LastScan
    };
    view.pid = report.running.flatten();
    let Some(status) = report.daemon else {
        view.note = format!(
            "the daemon has written no status.json in {} yet (it does after its first scan)",
            state_dir.display()
        );
        return view;
    };
    view.as_of_ms = status["time_ms"].as_i64();
    view.workloads = parse_workloads(&status);
    let age = view.as_of_ms.map(|t| {
        let s = (perfpilot_sys::clock::now_ms() - t).max(0) as f64 / 1000.0;
        perfpilot_units::duration_secs(s)
    });
    view.note = match (view.running, age) {
        (true, Some(a)) => format!("from the running daemon's last scan, {a} ago"),
        (false, Some(a)) => {
            format!("the daemon is not running: this is its last scan, {a} ago")
        }
        (_, None) => "from the daemon's status.json (no scan time in it)".into(),
    };
    view
}

/// The workloads of a `status.json` document.
pub(crate) fn parse_workloads(status: &serde_json::Value) -> Vec<WorkloadPlan> {
    let Some(list) = status["workloads"].as_array() else {
        return Vec::new();
    };
    list.iter()
        .map(|w| WorkloadPlan {
            name: w["name"].as_str().unwrap_or("").to_string(),
            signature: w["signature"].as_str().unwrap_or("").to_string(),
            pids: w["pids"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p.as_i64())
                        .map(|p| p as i32)
                        .collect()
                })
                .unwrap_or_default(),
            next: w["state"].as_str().unwrap_or("").to_string(),
            signal: w["signal"].as_str().map(str::to_string),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_directory_no_daemon_used_says_how_to_start_one() {
        let dir = tempfile::tempdir().unwrap();
        let v = last_scan(dir.path());
        assert!(!v.running);
        assert!(v.workloads.is_empty());
        assert!(
            v.note.contains("perfpilot daemon --state-dir"),
            "{}",
            v.note
        );
    }

    #[test]
    fn a_status_document_gives_each_workload_its_next_step() {
        let doc = serde_json::json!({
            "time_ms": 1000,
            "workloads": [
                {"signature": "ab", "name": "java", "pids": [1, 2], "state": "too young (3 s < min_age_s 60)", "signal": null},
                {"signature": "cd", "name": "pg", "pids": [3], "state": "trial of large_pages (action 4)", "signal": "tps"}
            ]
        });
        let w = parse_workloads(&doc);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].pids, [1, 2]);
        assert!(w[0].next.starts_with("too young"));
        assert_eq!(w[1].signal.as_deref(), Some("tps"));
    }
}
