//! nginx serving a small static file, loaded with wrk: the server where nothing should help
//! (and nothing may hurt).

use std::time::Duration;

use anyhow::Result;
use perfpilot_lab::server::{self, Server, nginx};

use super::{Ctx, Kind, Load, Running, StartOptions, args, drive, limit_for, secs};
use crate::install::{Tool, tool};
use crate::stop::stopping;

/// nginx under wrk.
pub struct Nginx;

impl Kind for Nginx {
    fn tools(&self) -> Vec<Tool> {
        vec![tool("nginx", "nginx-light"), tool("wrk", "wrk")]
    }

    fn prepare(&mut self, ctx: &Ctx) -> Result<()> {
        let dir = ctx.dir("nginx/html")?;
        std::fs::write(
            dir.join("index.html"),
            "<html><body>perfpilot proof: a small static file</body></html>\n",
        )?;
        server::chown(&ctx.work.join("nginx"), "www-data")?;
        Ok(())
    }

    fn start(&mut self, ctx: &Ctx, _opts: StartOptions) -> Result<Running> {
        let dir = ctx.dir("nginx")?;
        let port = perfpilot_lab::port::free_port()?;
        // The master starts as root and its workers run as www-data, as Debian's service does.
        let mut conf = nginx::Conf::new(&dir);
        conf.master = true;
        conf.user = Some("www-data".into());
        conf.temp = dir.join("tmp");
        conf.http = format!(
            "  sendfile on;\n  server {{ listen 127.0.0.1:{port}; root {}/html; }}\n",
            dir.display()
        );
        let c = conf.command()?;
        let mut proc = Server::spawn("nginx", c, &dir.join("server.log"))?;
        proc.wait_port("127.0.0.1", port, Duration::from_secs(30), &stopping)?;
        Ok(Running { proc, port })
    }

    fn load(&self, ctx: &Ctx, run: &mut Running, d: Duration, _measured: bool) -> Result<Load> {
        let url = format!("http://127.0.0.1:{}/index.html", run.port);
        let t = format!("{}s", secs(d));
        let a = args(["-t", "2", "-c", "16", "-d", &t, "--latency", &url]);
        Ok(Load::of(&drive(ctx, "wrk", &a, limit_for(d))?, "req/s"))
    }
}
