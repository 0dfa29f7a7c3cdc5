//! memcached with the harness's own load (see `memload`): started fresh per cell as the
//! `memcache` user with room for the dataset, filled with every key (it keeps nothing across
//! restarts), then loaded with 90 % gets and 10 % sets.

use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use perfpilot_lab::run;
use perfpilot_lab::server::{self, Server};

use super::{Ctx, Kind, Load, Running, StartOptions, limit_for, read_measurement, secs};
use crate::install::{Tool, tool};
use crate::stop::stopping;

/// memcached under the built-in load.
pub struct Memcached;

impl Memcached {
    fn load_command(&self, ctx: &Ctx, run: &Running) -> Command {
        let mut c = Command::new(&ctx.self_exe);
        c.args([
            "memcached-load",
            "--addr",
            &format!("127.0.0.1:{}", run.port),
        ])
        .args(["--keys", &ctx.sizes.memcached_keys.to_string()])
        .args(["--value", &ctx.sizes.memcached_value.to_string()])
        .args(["--connections", "8"]);
        c
    }
}

impl Kind for Memcached {
    fn tools(&self) -> Vec<Tool> {
        vec![tool("memcached", "memcached")]
    }

    fn prepare(&mut self, ctx: &Ctx) -> Result<()> {
        ctx.dir("memcached").map(|_| ())
    }

    fn start(&mut self, ctx: &Ctx, _opts: StartOptions) -> Result<Running> {
        let dir = ctx.dir("memcached")?;
        let port = perfpilot_lab::port::free_port()?;
        // Room for every item with its header and slab slack, and some to spare.
        let item = ctx.sizes.memcached_value as u64 + 100;
        let mb = (ctx.sizes.memcached_keys * item * 13 / 10 / (1024 * 1024)).max(64);
        let mut c = perfpilot_lab::server::memcached::command(port, mb)?;
        c.args(["-t", "2", "-c", "1024"]);
        server::as_user(&mut c, "memcache")?;
        let mut proc = Server::spawn("memcached", c, &dir.join("server.log"))?;
        proc.wait_port("127.0.0.1", port, Duration::from_secs(30), &stopping)?;
        let run = Running { proc, port };
        let mut fill = self.load_command(ctx, &run);
        fill.arg("--populate");
        run::run(
            "memcached populate",
            fill,
            &dir,
            Duration::from_secs(1800),
            &stopping,
        )?;
        Ok(run)
    }

    fn load(&self, ctx: &Ctx, run: &mut Running, d: Duration, _measured: bool) -> Result<Load> {
        let dir = ctx.dir("memcached")?;
        let json = dir.join("load.json");
        let mut c = self.load_command(ctx, run);
        c.args(["--duration", &format!("{}s", secs(d))])
            .arg("--json")
            .arg(&json);
        run::run("memcached load", c, &dir, limit_for(d), &stopping)?;
        Ok(Load::of(&read_measurement(&json)?, "ops/s"))
    }
}
