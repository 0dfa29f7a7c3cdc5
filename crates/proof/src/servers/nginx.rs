//! nginx serving a small static file, loaded with wrk: the server where nothing should help
//! (and nothing may hurt).

use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use super::{Ctx, Load, Running, Server, StartOptions, args, drive, limit_for, secs};
use crate::install::{Tool, tool};
use crate::procs::{self, Proc};

/// nginx under wrk.
pub struct Nginx;

impl Server for Nginx {
    fn tools(&self) -> Vec<Tool> {
        vec![tool("nginx", "nginx-light"), tool("wrk", "wrk")]
    }

    fn prepare(&mut self, ctx: &Ctx) -> Result<()> {
        let dir = ctx.dir("nginx/html")?;
        std::fs::write(
            dir.join("index.html"),
            "<html><body>perfpilot proof: a small static file</body></html>\n",
        )?;
        procs::chown(&ctx.work.join("nginx"), "www-data")?;
        Ok(())
    }

    fn start(&mut self, ctx: &Ctx, _opts: StartOptions) -> Result<Running> {
        let dir = ctx.dir("nginx")?;
        let port = perfpilot_lab::port::free_port()?;
        let d = dir.display();
        // The master starts as root and its workers run as www-data, as Debian's service does.
        let conf = format!(
            "daemon off;\nuser www-data;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;\n  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n  keepalive_requests 1000000;\n  sendfile on;\n\
               server {{ listen 127.0.0.1:{port}; root {d}/html; }}\n}}\n"
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let mut c = Command::new(procs::require_tool("nginx", "nginx-light")?);
        c.arg("-c").arg(&conf_path).arg("-p").arg(&dir);
        let mut proc = Proc::spawn("nginx", c, &dir.join("server.log"))?;
        proc.wait_port(port, Duration::from_secs(30))?;
        Ok(Running { proc, port })
    }

    fn load(&self, ctx: &Ctx, run: &mut Running, d: Duration, _measured: bool) -> Result<Load> {
        let url = format!("http://127.0.0.1:{}/index.html", run.port);
        let t = format!("{}s", secs(d));
        let a = args(["-t", "2", "-c", "16", "-d", &t, "--latency", &url]);
        Ok(Load::of(&drive(ctx, "wrk", &a, limit_for(d))?, "req/s"))
    }
}
