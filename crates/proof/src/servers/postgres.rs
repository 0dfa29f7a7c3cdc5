//! PostgreSQL 15 with pgbench: a cluster initialized once (`pgbench -i -s SCALE`), started fresh
//! per cell as the `postgres` user with `shared_buffers` of a few GB, prewarmed with
//! `pg_prewarm`, loaded with `pgbench -S` (read-only) or the `tpcb-like` script (read-write).
//! pgbench prints no percentiles: the measured run logs every transaction (`-l`) and p99 comes
//! from those logs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use perfpilot_lab::run::{self, Cut};
use perfpilot_lab::server::postgres::{self as pg, LocalAuth, USER};
use perfpilot_lab::server::{self, Server};

use super::{
    Ctx, Kind, Load, Running, StartOptions, Warm, args, drive, drive_while, limit_for, secs,
};
use crate::install::{Tool, tool};
use crate::stop::stopping;

/// PostgreSQL under pgbench.
pub struct Postgres {
    /// The tpcb-like script instead of `-S`.
    pub read_write: bool,
}

fn as_postgres(program: &str) -> Result<Command> {
    Ok(pg::command(&pg::bin(program)?)?)
}

impl Postgres {
    /// pgbench's arguments for a load of `d`, logging each transaction under `log_prefix`
    /// when given (for the percentiles).
    fn pgbench_args(
        &self,
        ctx: &Ctx,
        run: &Running,
        d: Duration,
        log_prefix: Option<std::path::PathBuf>,
    ) -> Vec<String> {
        let port = run.port.to_string();
        let clients = ctx.sizes.pg_clients.to_string();
        let t = secs(d).to_string();
        let mut a = args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            USER,
            "-c",
            &clients,
            "-j",
            "2",
            "-T",
            &t,
            "-P",
            "1",
        ]);
        if !self.read_write {
            a.push("-S".to_string());
        }
        if let Some(prefix) = log_prefix {
            a.extend(args(["-l", "--log-prefix", &prefix.display().to_string()]));
        }
        a.push("postgres".to_string());
        a
    }

    fn psql(&self, ctx: &Ctx, port: u16, sql: &str) -> Result<String> {
        let mut c = Command::new(pg::bin("psql")?);
        c.args([
            "-X",
            "-q",
            "-t",
            "-A",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            USER,
            "-d",
            "postgres",
            "-c",
            sql,
        ]);
        Ok(run::run(
            "psql",
            c,
            &ctx.dir("pg")?,
            Duration::from_secs(1800),
            &stopping,
        )?
        .stdout)
    }

    fn launch(&self, ctx: &Ctx, opts: StartOptions) -> Result<Running> {
        let data = ctx.work.join("pg/data");
        let sock = ctx.dir("pg/sock")?;
        server::chown(&sock, USER)?;
        let port = perfpilot_lab::port::free_port()?;
        let settings = [
            ("shared_buffers", ctx.sizes.pg_shared_buffers.clone()),
            (
                "huge_pages",
                if opts.own_huge_pages { "on" } else { "off" }.to_string(),
            ),
            ("max_connections", "50".to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v));
        let listen = pg::Listen {
            port,
            addresses: &["127.0.0.1".to_string()],
            sockets: &sock,
        };
        let mut c = pg::server(&data, &listen, &settings)?;
        server::as_user(&mut c, USER)?;
        let mut proc = Server::spawn("postgres", c, &ctx.work.join("pg/server.log"))?;
        // The port opens before recovery ends: ready once it accepts connections.
        pg::wait_ready(&mut proc, port, Duration::from_secs(240), &stopping)?;
        Ok(Running { proc, port })
    }
}

impl Kind for Postgres {
    fn tools(&self) -> Vec<Tool> {
        ["initdb", "postgres", "pg_ctl", "pgbench", "psql"]
            .into_iter()
            .map(|t| tool(t, pg::PACKAGE))
            .collect()
    }

    fn prepare(&mut self, ctx: &Ctx) -> Result<()> {
        let dir = ctx.dir("pg")?;
        let marker = dir.join(format!("prepared-scale-{}", ctx.sizes.pg_scale));
        if marker.is_file() {
            return Ok(());
        }
        let data = dir.join("data");
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data)?;
        server::chown(&dir, USER)?;
        eprintln!(
            "proof: postgres: initdb and pgbench -i -s {} (once)",
            ctx.sizes.pg_scale
        );
        let mut c = pg::initdb(&data, LocalAuth::Trust)?;
        c.args(["-E", "UTF8"]);
        run::run("initdb", c, &dir, Duration::from_secs(300), &stopping)?;
        let run = self.launch(ctx, StartOptions::default())?;
        let mut c = Command::new(pg::bin("pgbench")?);
        c.args([
            "-i",
            "-q",
            "-s",
            &ctx.sizes.pg_scale.to_string(),
            "-h",
            "127.0.0.1",
            "-p",
            &run.port.to_string(),
            "-U",
            USER,
            "postgres",
        ]);
        run::run("pgbench -i", c, &dir, Duration::from_secs(3600), &stopping)?;
        self.psql(ctx, run.port, "CREATE EXTENSION IF NOT EXISTS pg_prewarm")?;
        self.stop(ctx, run)?;
        std::fs::write(&marker, "")?;
        Ok(())
    }

    fn start(&mut self, ctx: &Ctx, opts: StartOptions) -> Result<Running> {
        self.launch(ctx, opts)
    }

    fn prewarm(&self, ctx: &Ctx, run: &mut Running) -> Result<()> {
        self.psql(
            ctx,
            run.port,
            "SELECT sum(pg_prewarm(c.oid::regclass)) FROM pg_class c \
             WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'i')",
        )
        .context("prewarming the pgbench tables with pg_prewarm")?;
        Ok(())
    }

    fn load(&self, ctx: &Ctx, run: &mut Running, d: Duration, measured: bool) -> Result<Load> {
        let logs = ctx.dir("pg/txlog")?;
        for e in std::fs::read_dir(&logs)?.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        let a = self.pgbench_args(ctx, run, d, measured.then(|| logs.join("tx")));
        let m = drive(ctx, "pgbench", &a, limit_for(d))?;
        let mut load = Load::of(&m, "tps");
        if measured {
            load.p99_ms = p99_of_logs(&logs)?;
        }
        Ok(load)
    }

    /// One pgbench session throughout: each new session forks a backend per client and
    /// vacuums, and the daemon's windows over those seconds read a server doing other work
    /// (a window at a third of its neighbours' transactions per CPU-second, 2026-11-25).
    fn warm(&self, ctx: &Ctx, run: &mut Running, w: &Warm) -> Result<()> {
        let a = self.pgbench_args(ctx, run, w.max, None);
        let cut = Cut {
            after: w.min,
            every: Duration::from_secs(5),
            more: w.more,
        };
        drive_while(ctx, "pgbench", &a, limit_for(w.max), &cut)?;
        Ok(())
    }

    fn stop(&self, ctx: &Ctx, mut run: Running) -> Result<()> {
        let mut c = as_postgres("pg_ctl")?;
        c.arg("-D")
            .arg(ctx.work.join("pg/data"))
            .args(["-m", "fast", "-w", "stop"]);
        let stopped = run::run(
            "pg_ctl stop",
            c,
            &ctx.dir("pg")?,
            Duration::from_secs(120),
            &stopping,
        );
        run.proc.wait_exit(Duration::from_secs(30));
        stopped?;
        Ok(())
    }

    fn own_huge_pages(&self, ctx: &Ctx) -> Option<Result<u64>> {
        Some(
            (|| {
                let mut c = as_postgres("postgres").ok()?;
                c.arg("-D")
                    .arg(ctx.work.join("pg/data"))
                    .arg("-c")
                    .arg(format!("shared_buffers={}", ctx.sizes.pg_shared_buffers))
                    .args([
                        "-c",
                        "max_connections=50",
                        "-C",
                        "shared_memory_size_in_huge_pages",
                    ]);
                let out = run::run(
                    "postgres -C",
                    c,
                    &ctx.work.join("pg"),
                    Duration::from_secs(60),
                    &stopping,
                )
                .ok()?;
                out.stdout.trim().parse::<u64>().ok()
            })()
            .context("postgres -C shared_memory_size_in_huge_pages gave no number"),
        )
    }
}

/// p99 (ms) of the transaction latencies in pgbench's `-l` logs (column 3, µs).
pub fn p99_of_logs(dir: &Path) -> Result<Option<f64>> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .context("creating a latency histogram")?;
    for e in std::fs::read_dir(dir)?.flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for line in text.lines() {
            if let Some(us) = line
                .split_whitespace()
                .nth(2)
                .and_then(|v| v.parse::<u64>().ok())
            {
                let _ = h.record(us.max(1));
            }
        }
    }
    Ok((!h.is_empty()).then(|| h.value_at_quantile(0.99) as f64 / 1000.0))
}
