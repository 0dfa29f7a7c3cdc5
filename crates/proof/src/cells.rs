//! The cells: what each configuration sets up before the server starts, and takes down after it
//! stops. Every cell runs inside a [`SettingsGuard`], so whatever it (or numad, tuned or the
//! daemon) changed in the watched kernel settings is put back and listed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use perfpilot_lab::server::Server;
use perfpilot_lab::{run, tool};
use perfpilot_sys::Fs;
use perfpilot_sys::knob::{read_knob, write_knob};

use crate::daemon::Daemon;
use crate::install::{Tool, tool};
use crate::options::CellName;
use crate::record::DaemonReport;
use crate::servers::{Ctx, Kind, StartOptions};
use crate::settings::{NR_HUGEPAGES, SettingsGuard, THP_ENABLED};
use crate::stop::{self, stopping};

const NUMAD_PID: &str = "/var/run/numad.pid";
const TUNED_PID: &str = "/run/tuned/tuned.pid";

/// The tools a cell needs.
pub fn tools(cell: CellName) -> Vec<Tool> {
    match cell {
        CellName::Numad => vec![tool("numad", "numad")],
        CellName::Tuned => vec![tool("tuned", "tuned")],
        _ => Vec::new(),
    }
}

/// The process of a pid file, if it is running.
fn running_pid(pid_file: &str) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pid_file)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

/// numad, started as a daemon (it forks) and stopped with `numad -i 0`.
struct Numad {
    pid: Option<u32>,
}

impl Numad {
    fn start(dir: &Path) -> Result<Numad> {
        if let Some(pid) = running_pid(NUMAD_PID) {
            bail!(
                "numad is already running (pid {pid}, not started by the harness): stop it first"
            );
        }
        let exe = tool::require("numad", "numad")?;
        let mut c = Command::new(&exe);
        c.args(["-i", "5"]);
        run::run("numad -i 5", c, dir, Duration::from_secs(30), &stopping)?;
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Some(pid) = running_pid(NUMAD_PID) {
                return Ok(Numad { pid: Some(pid) });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("numad started but wrote no running pid to {NUMAD_PID} (see /var/log/numad.log)")
    }

    fn stop(&mut self) {
        let Some(pid) = self.pid.take() else { return };
        if let Some(exe) = perfpilot_lab::tool::find("numad") {
            let _ = Command::new(exe).args(["-i", "0"]).status();
        }
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end && Path::new(&format!("/proc/{pid}")).exists() {
            std::thread::sleep(Duration::from_millis(100));
        }
        if Path::new(&format!("/proc/{pid}")).exists() {
            let _ = perfpilot_sys::signal::terminate(pid);
        }
    }
}

impl Drop for Numad {
    fn drop(&mut self) {
        self.stop();
    }
}

/// tuned in the foreground without D-Bus (there is no systemd here); SIGTERM rolls it back.
fn start_tuned(dir: &Path) -> Result<Server> {
    if let Some(pid) = running_pid(TUNED_PID) {
        bail!("tuned is already running (pid {pid}, not started by the harness): stop it first");
    }
    let log = dir.join("tuned.log");
    let _ = std::fs::remove_file(&log);
    let mut c = Command::new(tool::require("tuned", "tuned")?);
    c.args([
        "--no-dbus",
        "--no-socket",
        "--profile",
        "throughput-performance",
        "--log",
    ])
    .arg(&log);
    let mut p = Server::spawn("tuned", c, &dir.join("tuned.out"))?;
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        stop::check_stop()?;
        p.check_alive()?;
        if std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("static tuning from profile")
        {
            return Ok(p);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!(
        "tuned did not apply throughput-performance within 60 s; see {}",
        log.display()
    )
}

/// A cell set up around one server run.
pub struct CellSetup {
    /// How the server is to be started.
    pub start: StartOptions,
    daemon: Option<Daemon>,
    tuned: Option<Server>,
    numad: Option<Numad>,
    // Declared last: dropped after the helpers have stopped.
    guard: SettingsGuard,
}

/// Sets up `cell` for `server` (settings under `fs`, helpers' files in `dir`).
pub fn apply(
    cell: CellName,
    fs: &Fs,
    ctx: &Ctx,
    server: &dyn Kind,
    dir: &Path,
) -> Result<CellSetup> {
    let guard = SettingsGuard::take(fs);
    let mut setup = CellSetup {
        start: StartOptions::default(),
        daemon: None,
        tuned: None,
        numad: None,
        guard,
    };
    match cell {
        CellName::Untuned => {}
        CellName::ThpAlways => setup.guard.set(THP_ENABLED, "always")?,
        CellName::Expert => {
            let pages = server.own_huge_pages(ctx).context(
                "the expert cell applies only to servers with their own huge-page setting",
            )??;
            // Compaction first, so the reservation finds free 2 MiB blocks.
            let _ = write_knob(fs, "proc/sys/vm/compact_memory", "1");
            setup.guard.set(NR_HUGEPAGES, &pages.to_string())?;
            let got: u64 = read_knob(fs, NR_HUGEPAGES)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if got < pages {
                bail!(
                    "only {got} of the {pages} huge pages the server needs could be reserved (memory is fragmented: free page cache with `sync; echo 3 > /proc/sys/vm/drop_caches` and retry)"
                );
            }
            setup.start.own_huge_pages = true;
        }
        CellName::Numad => setup.numad = Some(Numad::start(dir)?),
        CellName::Tuned => setup.tuned = Some(start_tuned(dir)?),
        CellName::Perfpilot => {
            setup.daemon = Some(Daemon::start(&ctx.perfpilot, &dir.join("perfpilot-state"))?)
        }
    }
    Ok(setup)
}

impl CellSetup {
    /// Whether this cell's perfpilot daemon is deciding something (false in other cells).
    pub fn daemon_deciding(&self) -> bool {
        self.daemon.as_ref().is_some_and(|d| d.deciding())
    }

    /// Call when the server whose processes are named `process` has started (the daemon's
    /// times count from it).
    pub fn server_started(&mut self, process: &str) {
        if let Some(d) = self.daemon.as_mut() {
            d.server_started(process);
        }
    }

    /// Takes the cell down: the daemon (with its report), tuned, numad, then the settings.
    pub fn finish(mut self) -> (Option<DaemonReport>, Vec<String>) {
        let report = self.daemon.take().map(Daemon::finish);
        if let Some(mut t) = self.tuned.take() {
            t.stop();
        }
        if let Some(mut n) = self.numad.take() {
            n.stop();
        }
        let restored = self.guard.finish();
        (report, restored)
    }
}
