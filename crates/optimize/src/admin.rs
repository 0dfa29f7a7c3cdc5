//! A daemon's state directory seen from outside: what `perfpilot status`, `perfpilot revert`
//! and `perfpilot tunables` read and do, while a daemon runs or after it stopped.

use std::path::{Path, PathBuf};

use perfpilot_store::{ActionRecord, Store};
use perfpilot_sys::Fs;
use perfpilot_units as units;

use crate::daemon::{Lock, status_path, store_path};
use crate::journal::{self, JournalError};
use crate::tunables::{self, Def, TunableError};

/// Why a command on a state directory failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No daemon ever ran on the directory (status).
    #[error(
        "no perfpilot state in {}: start `perfpilot daemon --state-dir {}` first",
        dir.display(),
        dir.display()
    )]
    NeverStarted {
        /// The state directory.
        dir: PathBuf,
    },
    /// The caller may not change what the directory journals (not root, not its owner).
    #[error("{0}")]
    NotAllowed(String),
    /// The directory holds no journal (revert).
    #[error("no perfpilot state in {}", dir.display())]
    NoState {
        /// The state directory.
        dir: PathBuf,
    },
    /// A daemon runs on the directory: reverting under it would fight it.
    #[error(
        "a perfpilot daemon{} is running on {}: stop it first (it reverts its actions on stop, except huge pages, unless revert_on_stop is off)",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        dir.display()
    )]
    Running {
        /// The state directory.
        dir: PathBuf,
        /// The daemon's pid, as it wrote it in its lock file.
        pid: Option<i32>,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] perfpilot_store::Error),
    /// Reverting failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A tunable's name or value is not valid.
    #[error(transparent)]
    Tunable(#[from] TunableError),
    /// The engine of a dry run failed.
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    /// A dry run found no place for a throw-away journal.
    #[error("a dry run needs a temporary directory for its throw-away journal: {0}")]
    Temp(String),
}

/// What `perfpilot status` shows of a state directory.
#[derive(Debug, Clone)]
pub struct StateReport {
    /// `Some(pid)` when a daemon holds the directory's lock (its pid where readable).
    pub running: Option<Option<i32>>,
    /// The last `status.json` a daemon wrote, where readable.
    pub daemon: Option<serde_json::Value>,
    /// The most recent actions, newest first.
    pub actions: Vec<ActionRecord>,
}

/// Reads the state of `dir`: whether a daemon runs, its last status, its `actions` most recent
/// actions.
pub fn status(dir: &Path, actions: usize) -> Result<StateReport, AdminError> {
    let running = Lock::held(dir);
    let daemon = std::fs::read(status_path(dir))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let db = store_path(dir);
    if !db.exists() {
        return Err(AdminError::NeverStarted {
            dir: dir.to_path_buf(),
        });
    }
    let store = Store::open_existing(&db)?;
    Ok(StateReport {
        running,
        daemon,
        actions: store.actions(false, actions)?,
    })
}

/// The evidence of an action in a line: its verdict's figures (signal, windows before and after,
/// gain with its interval, decision), else the verdict's reason, else the action's note.
pub fn evidence(rec: &ActionRecord) -> String {
    let v: Option<serde_json::Value> = rec
        .verdict
        .as_deref()
        .and_then(|v| serde_json::from_str(v).ok());
    // The proxy's view of the same windows, where it watched beside the signal.
    let shadow = |v: &serde_json::Value| {
        v["shadow"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["gain"].is_object())
            .map(|s| {
                format!(
                    "; proxy saw x{:.3} [{:.3}, {:.3}]",
                    s["gain"]["ratio"].as_f64().unwrap_or(f64::NAN),
                    s["gain"]["ci_low"].as_f64().unwrap_or(f64::NAN),
                    s["gain"]["ci_high"].as_f64().unwrap_or(f64::NAN)
                )
            })
            .collect::<String>()
    };
    // The design, the control, and how long the trial took, where the verdict says them.
    let design = |v: &serde_json::Value| {
        let mut d = match v["design"].as_str().unwrap_or("before_after") {
            "before_after" => "before/after",
            "one_way" => "one-way",
            other => other,
        }
        .to_string();
        if let Some(c) = v["control"].as_str() {
            d = format!("{d} against {c}");
        }
        if let Some(s) = v["decided_after_s"].as_f64() {
            d = format!("{d}, {} after its start", units::duration_secs(s));
        }
        d
    };
    let decision = |v: &serde_json::Value| match (
        v["decision"].as_str(),
        v["shown"]["no_harm"]["bound"].as_f64(),
    ) {
        (Some("keep"), Some(bound)) => format!(
            "keep (no loss worse than {:.0} %; gain not resolved)",
            bound * 100.0
        ),
        (d, _) => d.unwrap_or_default().to_string(),
    };
    match &v {
        Some(v) if v["gain"].is_object() => format!(
            "{} ({}): before {} (n {}), after {} (n {}), gain x{:.3} [{:.3}, {:.3}] → {}{}",
            v["signal"].as_str().unwrap_or_default(),
            design(v),
            units::number(v["before"]["mean"].as_f64().unwrap_or(f64::NAN)),
            v["before"]["n"],
            units::number(v["after"]["mean"].as_f64().unwrap_or(f64::NAN)),
            v["after"]["n"],
            v["gain"]["ratio"].as_f64().unwrap_or(f64::NAN),
            v["gain"]["ci_low"].as_f64().unwrap_or(f64::NAN),
            v["gain"]["ci_high"].as_f64().unwrap_or(f64::NAN),
            decision(v),
            shadow(v)
        ),
        Some(v) => v["why"].as_str().unwrap_or_default().to_string(),
        None => rec.note.clone(),
    }
}

/// Reverts the open actions of `dir` (all, or those in `ids`) from its journal, while no daemon
/// runs on it. Returns each reverted action with what was restored, line by line.
pub fn revert(dir: &Path, ids: Option<&[i64]>) -> Result<Vec<(i64, Vec<String>)>, AdminError> {
    crate::privilege::may_change(dir, "revert").map_err(AdminError::NotAllowed)?;
    if let Some(pid) = Lock::held(dir) {
        return Err(AdminError::Running {
            dir: dir.to_path_buf(),
            pid,
        });
    }
    let db = store_path(dir);
    if !db.exists() {
        return Err(AdminError::NoState {
            dir: dir.to_path_buf(),
        });
    }
    let mut store = Store::open(&db)?;
    Ok(journal::revert_open(
        &mut store,
        &Fs::live(),
        ids,
        "reverted by `perfpilot revert`",
    )?)
}

/// Validates `value` for the tunable `name` and persists it in `store` (a running daemon picks
/// it up at its next scan). Returns the value as persisted (`yes` → `on`).
pub fn set_tunable(store: &mut Store, name: &str, value: &str) -> Result<String, AdminError> {
    let v = tunables::validate(name, value)?;
    store.tunable_set(name, &v)?;
    Ok(v)
}

/// Every tunable with the value in force in `store` (see [`tunables::listing`]).
pub fn list_tunables(store: &Store) -> Result<Vec<(&'static Def, String)>, AdminError> {
    Ok(tunables::listing(&store.tunables()?))
}

/// What an empty-config daemon (`config`, with the tunables persisted in `dir`) would do now
/// with each workload, as `perfpilot advise` shows it: one dry scan of the engine, two samples
/// `settle` apart, proposing without acting (`engine/dryrun.rs`). The journal of `dir` is read
/// for kept actions and back-offs when it exists; otherwise a throw-away one is used, so the
/// dry run never creates state where no daemon ran.
pub fn dry_run(
    fs: &Fs,
    dir: &Path,
    config: crate::DaemonConfig,
    settle: std::time::Duration,
) -> Result<crate::engine::Status, AdminError> {
    let db = store_path(dir);
    let (store, _scratch) = if db.exists() {
        (Store::open_existing(&db)?, None)
    } else {
        let scratch = tempfile::tempdir().map_err(|e| AdminError::Temp(e.to_string()))?;
        (
            Store::open(scratch.path().join("perfpilot.db"))?,
            Some(scratch),
        )
    };
    let (mut tun, _) = tunables::Tunables::with_persisted(&store.tunables()?);
    config.apply_tunables(&mut tun);
    let engine = crate::engine::Engine::new(fs, store, config, tun)?;
    Ok(engine.dry_run(settle)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfpilot_store::journal::ActionState;

    #[test]
    fn status_of_a_directory_no_daemon_used_says_how_to_start_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let e = status(&dir, 10).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "no perfpilot state in {}: start `perfpilot daemon --state-dir {}` first",
                dir.display(),
                dir.display()
            )
        );
        let e = revert(&dir, None).unwrap_err().to_string();
        assert_eq!(e, format!("no perfpilot state in {}", dir.display()));
    }

    #[test]
    fn evidence_gives_the_verdicts_figures_else_its_reason_else_the_note() {
        let mut rec = ActionRecord {
            id: 1,
            signature: "s".into(),
            workload: "w".into(),
            strategy: "cache_affinity".into(),
            state: ActionState::Kept,
            changes: "{}".into(),
            undo: "[]".into(),
            reason: "r".into(),
            note: "the note".into(),
            verdict: None,
            created_ms: 0,
            updated_ms: 0,
        };
        assert_eq!(evidence(&rec), "the note");
        rec.verdict =
            Some(r#"{"action":1,"decision":"unverified","why":"no usable signal"}"#.into());
        assert_eq!(evidence(&rec), "no usable signal");
        rec.verdict = Some(
            r#"{"signal":"cpi","before":{"n":6,"mean":2.0},"after":{"n":6,"mean":1.5},"gain":{"ratio":1.333,"ci_low":1.2,"ci_high":1.5},"decision":"keep"}"#
                .into(),
        );
        assert_eq!(
            evidence(&rec),
            "cpi (before/after): before 2 (n 6), after 1.5 (n 6), gain x1.333 [1.200, 1.500] → keep"
        );
        // A one-way keep that showed only that there was no harm says so, with its design.
        rec.verdict = Some(
            r#"{"signal":"postgresql","design":"one_way","decided_after_s":281.0,"before":{"n":16,"mean":2.0},"after":{"n":16,"mean":2.1},"gain":{"ratio":1.07,"ci_low":0.99,"ci_high":1.16},"decision":"keep","shown":{"no_harm":{"bound":0.02}}}"#
                .into(),
        );
        assert_eq!(
            evidence(&rec),
            "postgresql (one-way, 4 min 41 s after its start): before 2 (n 16), after 2.1 (n 16), gain x1.070 [0.990, 1.160] → keep (no loss worse than 2 %; gain not resolved)"
        );
    }

    #[test]
    fn a_tunable_is_validated_before_it_is_persisted() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let mut store = Store::open(store_path(&dir)).unwrap();
        assert_eq!(
            set_tunable(&mut store, "allow_unverified", "yes").unwrap(),
            "on"
        );
        let e = set_tunable(&mut store, "affinity_level", "socket").unwrap_err();
        assert!(
            e.to_string().contains("expected one of node, llc, core"),
            "{e}"
        );
        assert!(!store.tunables().unwrap().contains_key("affinity_level"));
        let list = list_tunables(&store).unwrap();
        let (_, v) = list
            .iter()
            .find(|(d, _)| d.name == "allow_unverified")
            .unwrap();
        assert_eq!(v, "on");
    }
}
