//! The daemon loop: a lock on the state directory (one daemon per directory), recovery from the
//! journal and the start-up knob (`Engine::begin`), one scan per interval with its monitoring CPU within a budget, `status.json` after
//! every scan (and whatever the caller publishes: `/metrics`, a textfile), the configuration
//! reloaded on request (SIGHUP), the fleet's verdicts taken in, and a clean stop.

use std::fs::TryLockError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use perfpilot_store::Store;
use perfpilot_sys::Fs;
use serde::Serialize;
use tracing::{error, info, warn};

use crate::config::DaemonConfig;
use crate::cpu::Governor;
use crate::engine::{Engine, EngineError, Status};
use crate::fleet::Watcher;
use crate::tunables::Tunables;

/// Daemon failures.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The state directory or its lock file could not be created or used.
    #[error("cannot use the state directory {}: {source}", dir.display())]
    StateDir {
        /// The state directory.
        dir: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Another daemon holds the state directory's lock.
    #[error("another perfpilot daemon{} holds {}; stop it first or use another --state-dir", pid.map(|p| format!(" (pid {p})")).unwrap_or_default(), lock.display())]
    Locked {
        /// The lock file.
        lock: PathBuf,
        /// The holder's pid, as it wrote it in the lock file.
        pid: Option<i32>,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] perfpilot_store::Error),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The configuration file could not be read or is not valid.
    #[error(transparent)]
    Config(#[from] crate::config::DaemonConfigError),
}

/// The default state directory: `/var/lib/perfpilot` for root, else
/// `$XDG_STATE_HOME/perfpilot` or `~/.local/state/perfpilot`.
pub fn default_state_dir() -> PathBuf {
    if perfpilot_sys::user::is_root() {
        return PathBuf::from("/var/lib/perfpilot");
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| Path::new(x).is_absolute()) {
        return Path::new(&x).join("perfpilot");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    Path::new(&home).join(".local/state/perfpilot")
}

/// The store of a state directory.
pub fn store_path(state_dir: &Path) -> PathBuf {
    state_dir.join("perfpilot.db")
}

/// The status file of a state directory.
pub fn status_path(state_dir: &Path) -> PathBuf {
    state_dir.join("status.json")
}

/// The exclusive lock a daemon holds on its state directory (released when dropped or when the
/// process dies, also by `kill -9`).
pub struct Lock {
    /// Held open: the lock lives as long as the descriptor.
    _file: std::fs::File,
    path: PathBuf,
}

impl Lock {
    /// Takes the lock of `state_dir`, or says who holds it.
    pub fn take(state_dir: &Path) -> Result<Lock, DaemonError> {
        // Created 0700: the journal and status say what runs on the machine.
        use std::os::unix::fs::DirBuilderExt;
        let mut dir = std::fs::DirBuilder::new();
        dir.recursive(true).mode(0o700);
        dir.create(state_dir)
            .map_err(|source| DaemonError::StateDir {
                dir: state_dir.to_path_buf(),
                source,
            })?;
        let path = state_dir.join("daemon.lock");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| DaemonError::StateDir {
                dir: state_dir.to_path_buf(),
                source,
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let pid = lock_holder(&path);
                return Err(DaemonError::Locked { lock: path, pid });
            }
            Err(TryLockError::Error(source)) => {
                return Err(DaemonError::StateDir {
                    dir: state_dir.to_path_buf(),
                    source,
                });
            }
        }
        file.set_len(0).map_err(|source| DaemonError::StateDir {
            dir: state_dir.to_path_buf(),
            source,
        })?;
        let _ = write!(file, "{}", std::process::id());
        Ok(Lock { _file: file, path })
    }

    /// `Some(pid)` when a live daemon holds the lock of `state_dir` (without taking it).
    pub fn held(state_dir: &Path) -> Option<Option<i32>> {
        let path = state_dir.join("daemon.lock");
        let file = std::fs::File::open(&path).ok()?;
        // A shared lock is refused while a daemon holds the exclusive one; it is released when
        // `file` closes. A failure to ask counts as held: callers then refuse to act.
        if file.try_lock_shared().is_ok() {
            return None;
        }
        Some(lock_holder(&path))
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The pid a daemon wrote in its lock file, if readable.
fn lock_holder(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// `status.json` (and `/status`): the engine's status and the daemon's own figures.
#[derive(Serialize)]
pub struct StatusFile<'a> {
    /// The daemon's pid.
    pub pid: u32,
    /// The engine's status.
    #[serde(flatten)]
    pub status: &'a Status,
    /// The interval in force after the CPU budget stretched it, seconds.
    pub effective_interval_s: f64,
    /// The configuration files read, in order.
    pub config_files: &'a [PathBuf],
    /// Why the last reload was refused, while the old configuration stays in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_error: Option<&'a str>,
    /// Where the fleet's verdicts come from and how that goes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<String>,
}

/// What the daemon hands its publisher after every scan.
pub struct Scanned<'a> {
    /// The status document, as `status.json` holds it.
    pub file: &'a StatusFile<'a>,
    /// The interval the tunables ask for, seconds (the effective one is in `file`).
    pub configured_interval_s: f64,
    /// How long this scan took, seconds.
    pub scan_s: f64,
    /// The journal (for the actions and verdicts).
    pub store: &'a perfpilot_store::Store,
}

fn write_status(dir: &Path, file: &StatusFile) {
    let tmp = dir.join("status.json.tmp");
    let body = serde_json::to_vec_pretty(file).unwrap_or_default();
    if let Err(e) =
        std::fs::write(&tmp, body).and_then(|()| std::fs::rename(&tmp, status_path(dir)))
    {
        warn!("cannot write {}: {e}", status_path(dir).display());
    }
}

/// How the daemon runs.
pub struct Options {
    /// The state directory: the store, the lock and `status.json`.
    pub state_dir: PathBuf,
    /// The configuration file, if any.
    pub config: Option<PathBuf>,
    /// Stop after this long (default: until `stop` is set).
    pub run_for: Option<Duration>,
    /// Set (by SIGHUP) to read the configuration again before the next scan.
    pub reload: Arc<AtomicBool>,
}

/// The fleet line of status: where the verdicts come from, and how many pairs or the error.
fn fleet_line(w: &Watcher) -> String {
    match (w.priors(), w.error()) {
        (_, Some(e)) => format!("{}: {e}; deciding alone", w.url()),
        (Some(p), None) => format!(
            "{}: {} workload × strategy verdicts",
            w.url(),
            p.pairs.len()
        ),
        (None, None) => format!("{}: not read yet", w.url()),
    }
}

/// Reads the configuration: the file given, or the system file where it exists, with the
/// drop-ins beside it; none is the defaults.
pub fn load_config(given: Option<&Path>) -> Result<(DaemonConfig, Vec<PathBuf>), DaemonError> {
    let system = Path::new(crate::dropins::SYSTEM_CONFIG);
    match given {
        Some(p) => Ok(DaemonConfig::load_layered(p)?),
        None if system.exists() => Ok(DaemonConfig::load_layered(system)?),
        None => Ok((DaemonConfig::default(), Vec::new())),
    }
}

/// Runs the daemon until `stop` is set (or `run_for` passes), then stops cleanly.
pub fn run(opts: &Options, stop: Arc<AtomicBool>) -> Result<(), DaemonError> {
    run_publishing(opts, stop, &mut |_| {})
}

/// As [`run`], handing `publish` what each scan found.
pub fn run_publishing(
    opts: &Options,
    stop: Arc<AtomicBool>,
    publish: &mut dyn FnMut(&Scanned),
) -> Result<(), DaemonError> {
    let (config, mut files) = load_config(opts.config.as_deref())?;
    let _lock = Lock::take(&opts.state_dir)?;
    let store = Store::open(store_path(&opts.state_dir))?;
    let mut tun = Tunables::default();
    config.apply_tunables(&mut tun);
    let fs = Fs::live();
    let mut fleet = config.fleet.as_ref().map(Watcher::start);
    if let (Some(w), Some(c)) = (&fleet, &config.fleet) {
        w.wait_first(c.timeout() + Duration::from_millis(500));
    }
    let mut engine = Engine::new(&fs, store, config, tun)?;
    let start = Instant::now();
    info!(state_dir = %opts.state_dir.display(), "perfpilot daemon started (pid {})", std::process::id());
    for n in &engine.status.notes {
        info!("{n}");
    }
    // Recovery, and `shmem_enabled` raised before anything is sampled (it logs its own lines).
    engine.begin()?;
    crate::privilege::drop_after_start();
    let mut governor = Governor::new(engine.tun.interval_s);
    let mut effective = engine.tun.interval_s;
    let mut config_error: Option<String> = None;
    while !stop.load(Ordering::SeqCst) && opts.run_for.is_none_or(|d| start.elapsed() < d) {
        if opts.reload.swap(false, Ordering::SeqCst) {
            match load_config(opts.config.as_deref()) {
                Ok((c, f)) => {
                    if c.fleet != engine.config().fleet {
                        fleet = c.fleet.as_ref().map(Watcher::start);
                    }
                    engine.reload_config(c);
                    files = f;
                    config_error = None;
                }
                Err(e) => {
                    error!("reload refused, the configuration in force stays: {e}");
                    config_error = Some(e.to_string());
                }
            }
        }
        engine.set_fleet(fleet.as_ref().and_then(Watcher::priors));
        let scan_start = Instant::now();
        engine.scan()?;
        let scan_s = scan_start.elapsed().as_secs_f64();
        // The monitoring CPU is kept under its budget by stretching the interval; the cost of
        // making changes is bounded by their pacing tunables instead.
        effective = governor.after_scan(engine.tun.interval_s, engine.tun.cpu_budget_pct);
        let file = StatusFile {
            pid: std::process::id(),
            status: &engine.status,
            effective_interval_s: effective,
            config_files: &files,
            config_error: config_error.as_deref(),
            fleet: fleet.as_ref().map(fleet_line),
        };
        write_status(&opts.state_dir, &file);
        let configured = engine.tun.interval_s;
        publish(&Scanned {
            file: &file,
            configured_interval_s: configured,
            scan_s,
            store: engine.store_ref(),
        });
        let next = scan_start + Duration::from_secs_f64(effective);
        while !stop.load(Ordering::SeqCst)
            && Instant::now() < next
            && opts.run_for.is_none_or(|d| start.elapsed() < d)
        {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(100)));
        }
    }
    engine.shutdown()?;
    info!(
        "perfpilot daemon stopped after {} scans; {}",
        engine.status.scans,
        engine.status.cpu.describe()
    );
    write_status(
        &opts.state_dir,
        &StatusFile {
            pid: std::process::id(),
            status: &engine.status,
            effective_interval_s: effective,
            config_files: &files,
            config_error: config_error.as_deref(),
            fleet: fleet.as_ref().map(fleet_line),
        },
    );
    Ok(())
}
