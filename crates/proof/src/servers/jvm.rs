//! workloads/jvmcache: a JVM service with a large heap (a table of several GB of longs on the
//! Java heap, lookups that walk it), built once with javac, started fresh per cell as `nobody`,
//! loaded with wrk over random keys (a Lua script).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use perfpilot_lab::run;
use perfpilot_lab::server::{self, Server, jvm};

use super::{Ctx, Kind, Load, Running, StartOptions, args, drive, limit_for, secs};
use crate::install::{Tool, tool};
use crate::stop::stopping;

/// The source, found from the repository root (the harness runs from it) or next to the crate.
fn source() -> Result<PathBuf> {
    let candidates = [
        PathBuf::from("workloads/jvmcache/Jvmcache.java"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../workloads/jvmcache/Jvmcache.java"),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .context("workloads/jvmcache/Jvmcache.java not found: run the harness from the repository root (scripts/proof does)")
}

/// The JVM service under wrk.
#[derive(Default)]
pub struct Jvm;

impl Kind for Jvm {
    fn tools(&self) -> Vec<Tool> {
        vec![
            tool("javac", "openjdk-17-jdk-headless"),
            tool("java", "openjdk-17-jdk-headless"),
            tool("wrk", "wrk"),
        ]
    }

    fn prepare(&mut self, ctx: &Ctx) -> Result<()> {
        let dir = ctx.dir("jvm")?;
        jvm::compile(
            &source()?,
            &dir.join("classes"),
            Duration::from_secs(300),
            &stopping,
        )?;
        // Random keys: wrk sends the same URL unless a script varies it.
        let keys = ctx.sizes.jvm_table_mib * 1024 * 1024 / 8;
        std::fs::write(
            dir.join("keys.lua"),
            format!(
                "math.randomseed(1)\nrequest = function()\n  return wrk.format(nil, \"/get?k=\" .. math.random(0, {}))\nend\n",
                keys.saturating_sub(1).min(2_000_000_000)
            ),
        )?;
        // The JVM runs as nobody: it must read its classes (the work directory is 0755).
        let mut p = Command::new("chmod");
        p.args(["-R", "a+rX"]).arg(&dir);
        run::run("chmod", p, &dir, Duration::from_secs(60), &stopping)?;
        Ok(())
    }

    fn start(&mut self, ctx: &Ctx, _opts: StartOptions) -> Result<Running> {
        let dir = ctx.dir("jvm")?;
        let port = perfpilot_lab::port::free_port()?;
        let heap_mib = ctx.sizes.jvm_table_mib + 1024;
        let mut c = jvm::command(&dir.join("classes"), "Jvmcache", heap_mib)?;
        server::as_user(&mut c, "nobody")?;
        c.args([
            "--port",
            &port.to_string(),
            "--table-mib",
            &ctx.sizes.jvm_table_mib.to_string(),
            "--threads",
            "4",
        ]);
        let mut proc = Server::spawn("jvmcache", c, &dir.join("server.log"))?;
        // The port opens once the table is full.
        proc.wait_port("127.0.0.1", port, Duration::from_secs(300), &stopping)?;
        Ok(Running { proc, port })
    }

    fn load(&self, ctx: &Ctx, run: &mut Running, d: Duration, _measured: bool) -> Result<Load> {
        let url = format!("http://127.0.0.1:{}/", run.port);
        let script = ctx.work.join("jvm/keys.lua").display().to_string();
        let t = format!("{}s", secs(d));
        let a = args([
            "-t",
            "2",
            "-c",
            "16",
            "-d",
            &t,
            "--latency",
            "-s",
            &script,
            &url,
        ]);
        Ok(Load::of(&drive(ctx, "wrk", &a, limit_for(d))?, "req/s"))
    }
}
