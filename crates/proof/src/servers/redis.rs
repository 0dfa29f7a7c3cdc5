//! Redis with redis-benchmark: a dataset of several GB written once (keys named exactly as
//! redis-benchmark's `-r` draws them, `key:000000001234`, so every GET hits) and saved to an RDB
//! file that each fresh start loads; the load is `redis-benchmark -t get -c 8 -P 16 -r KEYS`.
//! redis-benchmark runs a request count, not a time: the count of the measured run comes from the
//! rate seen during the warm-up.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use perfpilot_lab::server::{self, Server};

use super::{Ctx, Kind, Load, Running, StartOptions, args, drive, limit_for};
use crate::install::{Tool, tool};
use crate::stop::{self, stopping};

const USER: &str = "redis";

/// Redis under redis-benchmark.
pub struct Redis;

/// Sends `command` (inline form) and returns the first reply line.
fn ask(port: u16, command: &str, timeout: Duration) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(format!("{command}\r\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    Ok(line.trim_end().to_string())
}

/// Writes keys `from..to` (`key:%012d`, values of `size` bytes) over one connection, 1,000
/// commands a batch.
fn populate_range(port: u16, from: u64, to: u64, size: usize) -> Result<()> {
    let s =
        TcpStream::connect(("127.0.0.1", port)).context("connecting to redis to populate it")?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, s.try_clone()?);
    let mut r = BufReader::new(s);
    let value = "x".repeat(size);
    let mut k = from;
    let mut line = String::new();
    while k < to {
        stop::check_stop()?;
        let end = (k + 1000).min(to);
        for i in k..end {
            let key = format!("key:{i:012}");
            write!(
                w,
                "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
                key.len(),
                value.len()
            )?;
        }
        w.flush()?;
        for _ in k..end {
            line.clear();
            r.read_line(&mut line)?;
            if !line.starts_with("+OK") {
                bail!("redis refused a SET while populating: {}", line.trim_end());
            }
        }
        k = end;
    }
    Ok(())
}

impl Redis {
    fn launch(&self, ctx: &Ctx) -> Result<Running> {
        let dir = ctx.dir("redis")?;
        server::chown(&dir, USER)?;
        let port = perfpilot_lab::port::free_port()?;
        let mut c = perfpilot_lab::server::redis::command(port, &dir)?;
        c.args(["--dbfilename", "dump.rdb"]);
        server::as_user(&mut c, USER)?;
        let mut proc = Server::spawn("redis-server", c, &dir.join("server.log"))?;
        proc.wait_port("127.0.0.1", port, Duration::from_secs(60), &stopping)?;
        // It answers -LOADING while it reads the RDB file.
        let end = Instant::now() + Duration::from_secs(900);
        loop {
            stop::check_stop()?;
            proc.check_alive()?;
            match ask(port, "PING", Duration::from_secs(5)) {
                Ok(l) if l == "+PONG" => break,
                _ if Instant::now() > end => {
                    bail!("redis-server on port {port} was still loading its data after 15 min")
                }
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
        Ok(Running { proc, port })
    }

    fn benchmark(&self, ctx: &Ctx, run: &Running, n: u64, limit: Duration) -> Result<Load> {
        let a = args([
            "-h",
            "127.0.0.1",
            "-p",
            &run.port.to_string(),
            "-t",
            "get",
            "-c",
            "8",
            "-P",
            "16",
            "-r",
            &ctx.sizes.redis_keys.to_string(),
            "-n",
            &n.to_string(),
        ]);
        Ok(Load::of(
            &drive(ctx, "redis-benchmark", &a, limit)?,
            "req/s",
        ))
    }
}

impl Kind for Redis {
    fn tools(&self) -> Vec<Tool> {
        vec![
            tool("redis-server", "redis-server"),
            tool("redis-benchmark", "redis-tools"),
        ]
    }

    fn prepare(&mut self, ctx: &Ctx) -> Result<()> {
        let dir = ctx.dir("redis")?;
        let (keys, size) = (ctx.sizes.redis_keys, ctx.sizes.redis_value);
        let marker = dir.join(format!("prepared-{keys}-{size}"));
        if marker.is_file() {
            return Ok(());
        }
        let _ = std::fs::remove_file(dir.join("dump.rdb"));
        eprintln!("proof: redis: writing {keys} keys of {size} bytes and saving them (once)");
        let run = self.launch(ctx)?;
        let port = run.port;
        let half = keys / 2;
        let other = std::thread::spawn(move || populate_range(port, half, keys, size));
        populate_range(port, 0, half, size)?;
        other
            .join()
            .map_err(|_| anyhow::anyhow!("the populating thread panicked"))??;
        let saved = ask(port, "SAVE", Duration::from_secs(1800))?;
        if saved != "+OK" {
            bail!(
                "redis SAVE answered {saved:?}; see {}",
                dir.join("server.log").display()
            );
        }
        self.stop(ctx, run)?;
        std::fs::write(&marker, "")?;
        Ok(())
    }

    fn start(&mut self, ctx: &Ctx, _opts: StartOptions) -> Result<Running> {
        self.launch(ctx)
    }

    fn load(&self, ctx: &Ctx, run: &mut Running, d: Duration, measured: bool) -> Result<Load> {
        if !measured {
            // Chunks until the time is up; the rate sizes the measured run.
            let end = Instant::now() + d;
            let mut last = None;
            while Instant::now() < end || last.is_none() {
                last = Some(self.benchmark(ctx, run, 500_000, limit_for(d))?);
            }
            if let Some(l) = &last {
                std::fs::write(ctx.dir("redis")?.join("rate"), l.throughput.to_string())?;
            }
            return last.context("no warm-up run");
        }
        let rate: f64 = match std::fs::read_to_string(ctx.work.join("redis/rate")) {
            Ok(t) => t.trim().parse().unwrap_or(0.0),
            Err(_) => 0.0,
        };
        let rate = if rate > 0.0 {
            rate
        } else {
            self.benchmark(ctx, run, 200_000, limit_for(d))?.throughput
        };
        let n = ((rate * d.as_secs_f64()) as u64).max(10_000);
        self.benchmark(ctx, run, n, limit_for(d * 3))
    }
}
