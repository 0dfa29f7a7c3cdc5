//! The servers of the proof, each a typed kind with an install check, its data prepared once,
//! a fresh start per cell, a prewarm, a load through `perfpilot drive` (or the harness's own
//! memcached load) and a stop.

mod jvm;
mod memcached;
mod nginx;
mod postgres;
mod redis;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use perfpilot_drive::Measurement;
use perfpilot_lab::run::{self, Cut};
use perfpilot_lab::server::Server;

use crate::install::Tool;
use crate::options::{ServerName, Sizes};
use crate::stop::{self, stopping};

/// What every server needs from the run.
pub struct Ctx {
    /// The working directory (data, logs).
    pub work: PathBuf,
    /// The perfpilot binary (`perfpilot drive`).
    pub perfpilot: PathBuf,
    /// This binary (for its memcached load).
    pub self_exe: PathBuf,
    /// Data and load sizes.
    pub sizes: Sizes,
}

impl Ctx {
    /// `work/name`, created.
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.work.join(name);
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(d)
    }
}

/// How a cell wants the server started.
#[derive(Clone, Copy, Debug, Default)]
pub struct StartOptions {
    /// The expert's setting: the server's own huge pages (PostgreSQL's `huge_pages = on`).
    pub own_huge_pages: bool,
}

/// A started server.
pub struct Running {
    /// The server process (stopped when dropped).
    pub proc: Server,
    /// Its loopback port.
    pub port: u16,
}

/// The figures of one load run.
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    /// Completed work per second.
    pub throughput: f64,
    /// What the work is (`tps`, `req/s`, `ops/s`).
    pub unit: &'static str,
    /// 99th percentile latency, ms.
    pub p99_ms: Option<f64>,
    /// Failed requests.
    pub errors: u64,
}

impl Load {
    /// The figures of a drive measurement.
    pub fn of(m: &Measurement, unit: &'static str) -> Load {
        Load {
            throughput: m.throughput_rps,
            unit,
            p99_ms: m.latency.as_ref().and_then(|l| l.p99_ms),
            errors: m.errors,
        }
    }
}

/// One kind of server.
pub trait Kind {
    /// The executables it needs (server, client, load tool).
    fn tools(&self) -> Vec<Tool>;
    /// Prepares its data once (reused while the work directory is).
    fn prepare(&mut self, ctx: &Ctx) -> Result<()>;
    /// Starts it fresh, as its own user, ready for load.
    fn start(&mut self, ctx: &Ctx, opts: StartOptions) -> Result<Running>;
    /// Brings its data into memory before the load (a full scan, a prewarm).
    fn prewarm(&self, _ctx: &Ctx, _run: &mut Running) -> Result<()> {
        Ok(())
    }
    /// Applies load for `d`; `measured` runs also collect percentiles.
    fn load(&self, ctx: &Ctx, run: &mut Running, d: Duration, measured: bool) -> Result<Load>;
    /// The unmeasured load before the measured one (`w`): by default `load` for `w.min`, then
    /// in 20 s pieces while `w.more` says so. A server that forks a process per connection
    /// keeps one client session throughout instead (PostgreSQL).
    fn warm(&self, ctx: &Ctx, run: &mut Running, w: &Warm) -> Result<()> {
        let start = Instant::now();
        if !w.min.is_zero() {
            self.load(ctx, run, w.min, false)?;
        }
        while start.elapsed() < w.max && (w.more)() {
            stop::check_stop()?;
            self.load(ctx, run, Duration::from_secs(20), false)?;
        }
        Ok(())
    }
    /// Stops it cleanly.
    fn stop(&self, _ctx: &Ctx, mut run: Running) -> Result<()> {
        run.proc.stop();
        Ok(())
    }
    /// Huge pages to reserve for its own huge-page setting (the expert cell), when it has one.
    fn own_huge_pages(&self, _ctx: &Ctx) -> Option<Result<u64>> {
        None
    }
}

/// The unmeasured load of a cell: at least `min` (the warm-up), then on while `more` says so
/// (the cell's daemon is deciding), at most `max` in all.
pub struct Warm<'a> {
    /// The warm-up.
    pub min: Duration,
    /// The most it runs.
    pub max: Duration,
    /// Whether to run on past `min`.
    pub more: &'a dyn Fn() -> bool,
}

/// The server of `name`.
pub fn server(name: ServerName) -> Box<dyn Kind> {
    match name {
        ServerName::Postgres => Box::new(postgres::Postgres { read_write: false }),
        ServerName::PostgresRw => Box::new(postgres::Postgres { read_write: true }),
        ServerName::Redis => Box::new(redis::Redis),
        ServerName::Memcached => Box::new(memcached::Memcached),
        ServerName::Nginx => Box::new(nginx::Nginx),
        ServerName::Jvm => Box::new(jvm::Jvm),
    }
}

/// Runs `perfpilot drive ADAPTER --json FILE -q -- ARGS` and reads its (first) measurement.
pub fn drive(ctx: &Ctx, adapter: &str, args: &[String], limit: Duration) -> Result<Measurement> {
    drive_while(ctx, adapter, args, limit, &Cut::never())?
        .with_context(|| format!("perfpilot drive {adapter} was cut short"))
}

/// As [`drive`], stopped without a measurement (`None`) once `cut` says it has run enough.
pub fn drive_while(
    ctx: &Ctx,
    adapter: &str,
    args: &[String],
    limit: Duration,
    cut: &Cut,
) -> Result<Option<Measurement>> {
    let dir = ctx.dir("drive")?;
    let json = dir.join(format!("{adapter}.json"));
    let _ = std::fs::remove_file(&json);
    let mut cmd = Command::new(&ctx.perfpilot);
    cmd.args(["drive", adapter, "--json"])
        .arg(&json)
        .args(["-q", "--"])
        .args(args);
    match run::run_while(
        &format!("perfpilot drive {adapter}"),
        cmd,
        &dir,
        limit,
        cut,
        &stopping,
    )? {
        Some(_) => read_measurement(&json).map(Some),
        None => Ok(None),
    }
}

/// Reads a Measurement JSON file (an array of them gives the first).
pub fn read_measurement(path: &Path) -> Result<Measurement> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    if text.trim_start().starts_with('[') {
        let ms: Vec<Measurement> =
            serde_json::from_str(&text).with_context(|| format!("decoding {}", path.display()))?;
        return ms
            .into_iter()
            .next()
            .with_context(|| format!("{} holds no measurement", path.display()));
    }
    Measurement::from_json(&text).with_context(|| format!("decoding {}", path.display()))
}

/// A limit for a load of `d`: the load plus a minute for starting and stopping.
pub fn limit_for(d: Duration) -> Duration {
    d + Duration::from_secs(60)
}

/// `d` in whole seconds, at least 1.
pub fn secs(d: Duration) -> u64 {
    d.as_secs().max(1)
}

/// A list of string arguments.
pub fn args<const N: usize>(a: [&str; N]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}
