//! `perfpilot bench drive`: what `perfpilot drive` costs per request against wrk. nginx (one
//! worker, `return 200`) runs pinned to one CPU and each client pinned to others; wrk and
//! `drive` take turns in every round (the order alternating), and each run's CPU time is the
//! client process's own (user + system, `getrusage(RUSAGE_CHILDREN)` around its wait). A case's
//! figure is the client's CPU per 1,000 successful requests; the ratio `drive / wrk` is the
//! geometric mean of the rounds' ratios with its 95 % interval (`perfpilot_stats`).
//!
//! The open-loop case sends a fixed rate below both clients' limits. wrk has no open loop (wrk2
//! is not packaged), so it runs its closed loop with the think time (a Lua `delay()`) that makes
//! it reach the same rate: the cost per request is then compared at equal throughput.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use perfpilot_drive::Measurement;
use perfpilot_drive::adapters::parse_wrk;
use perfpilot_stats::paired_ratio_ci;

#[derive(Args)]
pub struct DriveBench {
    /// Rounds: each runs every case once with every client, in alternating order.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Connections of every client.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Client threads of the closed-loop cases, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    threads: Vec<usize>,
    /// The open-loop case's rate, requests per second (0: no open-loop case). wrk's think time
    /// is connections / rate, in whole milliseconds: pick a rate that divides evenly.
    #[arg(long, default_value_t = 4000)]
    rate: u64,
    /// Which protocols, comma-separated: http (HTTP/1.1 keep-alive), https (HTTP/1.1 over TLS).
    #[arg(long, value_delimiter = ',', default_value = "http,https")]
    protocols: Vec<String>,
    /// The CPU (list) nginx is pinned to.
    #[arg(long, default_value = "0")]
    server_cpus: String,
    /// The CPU list the clients are pinned to.
    #[arg(long, default_value = "1")]
    client_cpus: String,
    /// The niceness nginx and the clients run at (lowering it needs root): on a shared
    /// machine, builds at a higher niceness then disturb them less.
    #[arg(long, default_value_t = -10, allow_hyphen_values = true)]
    nice: i32,
    /// More `perfpilot` binaries whose `drive` is measured in the same rounds (an earlier
    /// build, to compare a change side by side), repeatable.
    #[arg(long, value_name = "FILE")]
    also: Vec<PathBuf>,
}

/// One load measured with every client.
#[derive(Clone, Debug)]
struct Case {
    tls: bool,
    threads: usize,
    /// Open loop at this rate.
    rate: Option<u64>,
}

impl Case {
    fn name(&self) -> String {
        let proto = if self.tls { "HTTPS" } else { "HTTP/1.1" };
        let threads = if self.threads == 1 {
            "1 thread".to_string()
        } else {
            format!("{} threads", self.threads)
        };
        match self.rate {
            Some(r) => format!("{proto}, {threads}, open loop {r}/s"),
            None => format!("{proto}, {threads}, closed loop"),
        }
    }
}

/// A client: wrk, or the `drive` of a perfpilot binary.
#[derive(Clone, Debug)]
enum Client {
    Wrk,
    Drive { exe: PathBuf, label: String },
}

impl Client {
    fn label(&self) -> &str {
        match self {
            Client::Wrk => "wrk",
            Client::Drive { label, .. } => label,
        }
    }
}

/// What one run of a client did.
#[derive(Clone, Copy, Debug)]
struct Run {
    ok: u64,
    ok_per_s: f64,
    cpu_s: f64,
}

impl Run {
    /// CPU milliseconds per 1,000 successful requests (µs per request).
    fn cost(&self) -> f64 {
        self.cpu_s * 1e6 / self.ok.max(1) as f64
    }
}

/// nginx serving `return 200` on plain and TLS ports, killed on drop.
struct Server {
    child: std::process::Child,
    dir: PathBuf,
    http: u16,
    https: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

fn wait_port(port: u16) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("nginx never opened port {port}")
}

fn find_tool(name: &str) -> anyhow::Result<String> {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin"])
    {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return Ok(p.to_string_lossy().into_owned());
        }
    }
    bail!("{name} is not installed: run scripts/install-deps")
}

impl Server {
    fn start(cpus: &str, nice: i32) -> anyhow::Result<Server> {
        let nginx = find_tool("nginx")?;
        let dir =
            std::env::temp_dir().join(format!("perfpilot-bench-drive-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let d = dir.display();
        let status = Command::new(find_tool("openssl")?)
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout"])
            .arg(dir.join("key.pem"))
            .arg("-out")
            .arg(dir.join("cert.pem"))
            .stderr(std::process::Stdio::null())
            .status()
            .context("running openssl for the test certificate")?;
        if !status.success() {
            bail!("openssl could not make a test certificate ({status})");
        }
        let (http, https) = (free_port()?, free_port()?);
        let conf = format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 10000000;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
  ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem;
  server {{ listen 127.0.0.1:{http}; location / {{ return 200 \"ok\\n\"; }} }}
  server {{ listen 127.0.0.1:{https} ssl; location / {{ return 200 \"ok\\n\"; }} }} }}
"
        );
        std::fs::write(dir.join("nginx.conf"), conf)?;
        let child = pinned(cpus, nice)
            .arg(&nginx)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-p")
            .arg(&dir)
            .spawn()
            .context("starting nginx under taskset")?;
        let server = Server {
            child,
            dir,
            http,
            https,
        };
        wait_port(http)?;
        wait_port(https)?;
        Ok(server)
    }

    fn url(&self, tls: bool) -> String {
        if tls {
            format!("https://127.0.0.1:{}/", self.https)
        } else {
            format!("http://127.0.0.1:{}/", self.http)
        }
    }
}

/// A command that runs the program given next on `cpus` at niceness `nice` (`nice` warns and
/// runs it at the caller's where that is not permitted).
fn pinned(cpus: &str, nice: i32) -> Command {
    let mut c = if nice != 0 {
        let mut c = Command::new("nice");
        c.args(["-n", &nice.to_string(), "taskset"]);
        c
    } else {
        Command::new("taskset")
    };
    c.args(["-c", cpus]);
    c
}

/// The arguments that run `client` on `case` for `secs` seconds.
fn command(
    client: &Client,
    case: &Case,
    a: &DriveBench,
    server: &Server,
    out: &Path,
) -> anyhow::Result<Command> {
    let mut c = pinned(&a.client_cpus, a.nice);
    let (conns, secs, url) = (a.connections, a.seconds, server.url(case.tls));
    match client {
        Client::Wrk => {
            c.arg(find_tool("wrk")?);
            c.args([format!("-t{}", case.threads), format!("-c{conns}")]);
            c.arg(format!("-d{secs}s"));
            if let Some(rate) = case.rate {
                // Each connection waits connections / rate after each response: a closed loop
                // at the open loop's rate.
                let script = server.dir.join("delay.lua");
                let ms = conns as f64 * 1000.0 / rate as f64;
                std::fs::write(&script, format!("function delay() return {ms} end\n"))?;
                c.arg("-s").arg(script);
            }
            c.arg(url);
        }
        Client::Drive { exe, .. } => {
            c.arg(exe).arg("drive");
            match case.rate {
                Some(rate) => c.args([
                    "--rate".to_string(),
                    format!("{rate}/s"),
                    "--connections".to_string(),
                    conns.to_string(),
                ]),
                None => c.args(["--users".to_string(), conns.to_string()]),
            };
            c.args(["--threads", &case.threads.to_string()]);
            c.args(["--duration", &format!("{secs}s"), "--warmup", "0"]);
            if case.tls {
                c.args(["--insecure", "--http", "1.1"]);
            }
            c.args(["--quiet", "--no-progress", "--json"]).arg(out);
            c.arg(url);
        }
    }
    Ok(c)
}

/// Runs `client` once and measures its CPU time.
fn run_once(client: &Client, case: &Case, a: &DriveBench, server: &Server) -> anyhow::Result<Run> {
    let json = server.dir.join("drive.json");
    let mut cmd = command(client, case, a, server, &json)?;
    let cpu0 = perfpilot_sys::children_cpu_time();
    let out = cmd
        .output()
        .with_context(|| format!("running {}", client.label()))?;
    let cpu_s = (perfpilot_sys::children_cpu_time() - cpu0).as_secs_f64();
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            client.label(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let m = match client {
        Client::Wrk => parse_wrk(&String::from_utf8_lossy(&out.stdout))?,
        Client::Drive { .. } => {
            let text = std::fs::read_to_string(&json)
                .with_context(|| format!("reading {}", json.display()))?;
            Measurement::from_json(&text)?
        }
    };
    if m.ok == 0 {
        bail!(
            "{} had no successful request on {}",
            client.label(),
            case.name()
        );
    }
    Ok(Run {
        ok: m.ok,
        ok_per_s: m.ok as f64 / m.duration_s.max(1e-9),
        cpu_s,
    })
}

fn cases(a: &DriveBench) -> anyhow::Result<Vec<Case>> {
    let mut out = Vec::new();
    for p in &a.protocols {
        let tls = match p.as_str() {
            "http" => false,
            "https" => true,
            other => bail!("--protocols: unknown {other:?} (expected http or https)"),
        };
        for &threads in &a.threads {
            if threads == 0 || threads > a.connections {
                bail!("--threads {threads}: each thread needs a connection (1 to --connections)");
            }
            out.push(Case {
                tls,
                threads,
                rate: None,
            });
        }
        if a.rate > 0 {
            out.push(Case {
                tls,
                threads: 1,
                rate: Some(a.rate),
            });
        }
    }
    Ok(out)
}

pub fn run(a: DriveBench) -> anyhow::Result<()> {
    if a.rounds < 2 {
        bail!("--rounds must be at least 2 (the interval is over the rounds)");
    }
    let mut clients = vec![
        Client::Wrk,
        Client::Drive {
            exe: std::env::current_exe().context("locating the perfpilot binary")?,
            label: "drive".to_string(),
        },
    ];
    for exe in &a.also {
        if !exe.is_file() {
            bail!("--also {}: no such file", exe.display());
        }
        clients.push(Client::Drive {
            exe: exe.clone(),
            label: format!("drive ({})", exe.display()),
        });
    }
    let cases = cases(&a)?;
    let server = Server::start(&a.server_cpus, a.nice)?;
    eprintln!(
        "nginx (1 worker) on CPU {}, clients on CPU {}, nice {}: {} cases x {} clients x {} rounds of {} s",
        a.server_cpus,
        a.client_cpus,
        a.nice,
        cases.len(),
        clients.len(),
        a.rounds,
        a.seconds
    );
    // runs[case][client][round]
    let mut runs = vec![vec![Vec::new(); clients.len()]; cases.len()];
    for round in 0..a.rounds {
        for (ci, case) in cases.iter().enumerate() {
            let mut order: Vec<usize> = (0..clients.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for k in order {
                let r = run_once(&clients[k], case, &a, &server)?;
                eprintln!(
                    "round {}: {}: {}: {:.0} req/s, {:.2} CPU ms per 1,000",
                    round + 1,
                    case.name(),
                    clients[k].label(),
                    r.ok_per_s,
                    r.cost()
                );
                runs[ci][k].push(r);
            }
        }
    }
    print!("{}", table(&cases, &clients, &runs));
    Ok(())
}

/// The Markdown table: per case and client, mean req/s and CPU per 1,000 requests, and each
/// drive's ratio to wrk with its interval.
fn table(cases: &[Case], clients: &[Client], runs: &[Vec<Vec<Run>>]) -> String {
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    let mut s = String::from(
        "| case | client | req/s | CPU ms per 1,000 requests | CPU per request / wrk's (95 % CI) |\n|---|---|---|---|---|\n",
    );
    for (ci, case) in cases.iter().enumerate() {
        let wrk: Vec<f64> = runs[ci][0].iter().map(Run::cost).collect();
        for (k, client) in clients.iter().enumerate() {
            let rs = &runs[ci][k];
            let rate = mean(&rs.iter().map(|r| r.ok_per_s).collect::<Vec<_>>());
            let costs: Vec<f64> = rs.iter().map(Run::cost).collect();
            let ratio = if k == 0 {
                "—".to_string()
            } else {
                match paired_ratio_ci(&costs, &wrk, 0.95) {
                    Some(r) => format!("{:.3} ({:.3}–{:.3})", r.ratio, r.low, r.high),
                    None => "?".to_string(),
                }
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.2} | {ratio} |",
                case.name(),
                client.label(),
                perfpilot_units::count(rate.round() as u64),
                mean(&costs)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ok: u64, cpu_s: f64) -> Run {
        Run {
            ok,
            ok_per_s: ok as f64,
            cpu_s,
        }
    }

    #[test]
    fn the_table_gives_each_drive_its_cost_ratio_to_wrk_over_the_rounds() {
        let cases = [Case {
            tls: false,
            threads: 1,
            rate: None,
        }];
        let clients = [
            Client::Wrk,
            Client::Drive {
                exe: PathBuf::from("x"),
                label: "drive".into(),
            },
        ];
        // wrk: 10 µs per request; drive: 9 and 9 µs.
        let runs = vec![vec![
            vec![run(1000, 0.010), run(2000, 0.020)],
            vec![run(1000, 0.009), run(2000, 0.018)],
        ]];
        let t = table(&cases, &clients, &runs);
        assert!(
            t.contains("| HTTP/1.1, 1 thread, closed loop | wrk | 1,500 | 10.00 | — |"),
            "{t}"
        );
        assert!(
            t.contains(
                "| HTTP/1.1, 1 thread, closed loop | drive | 1,500 | 9.00 | 0.900 (0.900–0.900) |"
            ),
            "{t}"
        );
    }
}
