//! `perfpilot bench drive`: what `perfpilot drive` costs per request against wrk. nginx (one
//! worker, `return 200`) runs pinned to one CPU and each client pinned to others; wrk and
//! `drive` take turns in every round (the order alternating), and each run's CPU time is the
//! client process's own (user + system, `getrusage(RUSAGE_CHILDREN)` around its wait). A case's
//! figure is the client's CPU per 1,000 successful requests; the ratio `drive / wrk` is the
//! geometric mean of the rounds' ratios with its 95 % interval (`perfpilot_stats`).
//!
//! The open-loop case sends a fixed rate below both clients' limits. wrk has no open loop (wrk2
//! is not packaged), so it runs its closed loop with a think time (a Lua `delay()`) calibrated
//! to reach the same rate: short runs before the rounds, and after each of its runs in them. A
//! CPU-per-request ratio is only fair at equal throughput, so a case whose two rates differ by
//! more than [`EQUAL_RATES`] is flagged under the table.

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
    /// The open-loop case's rate, requests per second (0: no open-loop case). wrk gets the think
    /// time that reaches it, calibrated by short runs before the rounds.
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
    /// wrk's think time in the open-loop case, milliseconds: calibrated so that its closed loop
    /// runs at `rate`.
    wrk_think_ms: f64,
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
    secs: u64,
) -> anyhow::Result<Command> {
    let mut c = pinned(&a.client_cpus, a.nice);
    let (conns, url) = (a.connections, server.url(case.tls));
    match client {
        Client::Wrk => {
            c.arg(find_tool("wrk")?);
            c.args([format!("-t{}", case.threads), format!("-c{conns}")]);
            c.arg(format!("-d{secs}s"));
            if case.rate.is_some() {
                let script = server.dir.join("delay.lua");
                std::fs::write(&script, delay_script(case.wrk_think_ms))?;
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

/// Runs `client` once for `secs` seconds and measures its CPU time.
fn run_once(
    client: &Client,
    case: &Case,
    a: &DriveBench,
    server: &Server,
    secs: u64,
) -> anyhow::Result<Run> {
    let json = server.dir.join("drive.json");
    let mut cmd = command(client, case, a, server, &json, secs)?;
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

/// A wrk script whose `delay()` averages `ms` milliseconds. wrk truncates `delay()` to whole
/// milliseconds, so the fraction is the chance of drawing one millisecond more.
fn delay_script(ms: f64) -> String {
    let ms = ms.max(0.0);
    let whole = ms.floor();
    format!(
        "local whole, frac = {whole:.0}, {:.4}\nfunction delay()\n  if math.random() < frac then return whole + 1 end\n  return whole\nend\n",
        ms - whole
    )
}

/// The rates of an open-loop case's clients count as equal within this fraction.
const EQUAL_RATES: f64 = 0.03;

/// wrk's think time corrected after a run at `achieved` requests/s: each of the `connections`
/// should take connections / rate per request, so the think time moves by `step` (1: all) of
/// the difference.
fn recalibrate(think_ms: f64, connections: usize, rate: u64, achieved: f64, step: f64) -> f64 {
    let cycle_ms = |r: f64| connections as f64 * 1000.0 / r.max(1e-9);
    (think_ms + step * (cycle_ms(rate as f64) - cycle_ms(achieved))).max(0.0)
}

/// Calibrates wrk's think time for `case` (an open loop) by short runs, until its rate is within
/// a third of [`EQUAL_RATES`] of the case's (at most four runs).
fn calibrate(case: &mut Case, a: &DriveBench, server: &Server) -> anyhow::Result<()> {
    let Some(rate) = case.rate else {
        return Ok(());
    };
    for _ in 0..4 {
        let r = run_once(&Client::Wrk, case, a, server, a.seconds.min(2))?;
        let off = r.ok_per_s / rate as f64 - 1.0;
        eprintln!(
            "calibrating wrk on {}: think time {:.3} ms gave {:.0} req/s",
            case.name(),
            case.wrk_think_ms,
            r.ok_per_s
        );
        if off.abs() <= EQUAL_RATES / 3.0 {
            break;
        }
        case.wrk_think_ms = recalibrate(case.wrk_think_ms, a.connections, rate, r.ok_per_s, 1.0);
    }
    Ok(())
}

/// Open-loop cases whose clients' mean rates differ from wrk's by more than [`EQUAL_RATES`]: the
/// lines said under the table.
fn unequal_rates(cases: &[Case], clients: &[Client], runs: &[Vec<Vec<Run>>]) -> Vec<String> {
    let mean_rate =
        |rs: &[Run]| rs.iter().map(|r| r.ok_per_s).sum::<f64>() / rs.len().max(1) as f64;
    let mut out = Vec::new();
    for (ci, case) in cases.iter().enumerate() {
        if case.rate.is_none() {
            continue;
        }
        let wrk = mean_rate(&runs[ci][0]);
        for (k, client) in clients.iter().enumerate().skip(1) {
            let other = mean_rate(&runs[ci][k]);
            let diff = other / wrk.max(1e-9) - 1.0;
            if diff.abs() > EQUAL_RATES {
                out.push(format!(
                    "not at equal throughput: {}: {} {:.0} req/s against wrk's {:.0} ({:+.1} %), so its CPU ratio is not a fair comparison",
                    case.name(),
                    client.label(),
                    other,
                    wrk,
                    diff * 100.0
                ));
            }
        }
    }
    out
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
                wrk_think_ms: 0.0,
            });
        }
        if a.rate > 0 {
            out.push(Case {
                tls,
                threads: 1,
                rate: Some(a.rate),
                wrk_think_ms: a.connections as f64 * 1000.0 / a.rate as f64,
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
    let mut cases = cases(&a)?;
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
    for case in &mut cases {
        calibrate(case, &a, &server)?;
    }
    // runs[case][client][round]
    let mut runs = vec![vec![Vec::new(); clients.len()]; cases.len()];
    for round in 0..a.rounds {
        for (ci, case) in cases.iter_mut().enumerate() {
            let mut order: Vec<usize> = (0..clients.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for k in order {
                let r = run_once(&clients[k], case, &a, &server, a.seconds)?;
                let think = match (&clients[k], case.rate) {
                    (Client::Wrk, Some(_)) => format!(", think time {:.3} ms", case.wrk_think_ms),
                    _ => String::new(),
                };
                eprintln!(
                    "round {}: {}: {}: {:.0} req/s, {:.2} CPU ms per 1,000{think}",
                    round + 1,
                    case.name(),
                    clients[k].label(),
                    r.ok_per_s,
                    r.cost()
                );
                if let (Client::Wrk, Some(rate)) = (&clients[k], case.rate) {
                    // The machine's load changes between rounds: the think time follows, by
                    // half the difference, since one run's rate on a busy machine swings with
                    // its response times.
                    case.wrk_think_ms =
                        recalibrate(case.wrk_think_ms, a.connections, rate, r.ok_per_s, 0.5);
                }
                runs[ci][k].push(r);
            }
        }
    }
    print!("{}", table(&cases, &clients, &runs));
    for line in unequal_rates(&cases, &clients, &runs) {
        println!("\n{line}");
    }
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
            wrk_think_ms: 0.0,
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

    #[test]
    fn wrks_think_time_draws_whole_milliseconds_averaging_the_fraction() {
        let script = delay_script(15.25);
        assert!(
            script.contains("local whole, frac = 15, 0.2500"),
            "{script}"
        );
        assert!(script.contains("return whole + 1"), "{script}");
        assert!(delay_script(-3.0).contains("local whole, frac = 0, 0.0000"));
    }

    #[test]
    fn a_slow_wrk_gets_a_shorter_think_time_and_a_fast_one_a_longer() {
        // 64 connections at 4,000/s: 16 ms a request each. At 3,200/s each took 20 ms, 4 too
        // many.
        assert!((recalibrate(16.0, 64, 4000, 3200.0, 1.0) - 12.0).abs() < 1e-9);
        assert!((recalibrate(12.0, 64, 4000, 5000.0, 1.0) - 15.2).abs() < 1e-9);
        assert!((recalibrate(16.0, 64, 4000, 3200.0, 0.5) - 14.0).abs() < 1e-9);
        // A client that cannot reach the rate thinks not at all.
        assert_eq!(recalibrate(1.0, 64, 4000, 100.0, 1.0), 0.0);
    }

    #[test]
    fn an_open_loop_case_whose_rates_differ_by_over_3_percent_is_flagged() {
        let open = Case {
            tls: false,
            threads: 1,
            rate: Some(4000),
            wrk_think_ms: 16.0,
        };
        let clients = [
            Client::Wrk,
            Client::Drive {
                exe: PathBuf::from("x"),
                label: "drive".into(),
            },
        ];
        let at = |rate: f64| Run {
            ok: 4000,
            ok_per_s: rate,
            cpu_s: 0.1,
        };
        let equal = vec![vec![vec![at(3950.0)], vec![at(4000.0)]]];
        assert!(unequal_rates(std::slice::from_ref(&open), &clients, &equal).is_empty());
        let unequal = vec![vec![vec![at(3700.0)], vec![at(4000.0)]]];
        let lines = unequal_rates(std::slice::from_ref(&open), &clients, &unequal);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("drive 4000 req/s against wrk's 3700 (+8.1 %)"),
            "{lines:?}"
        );
        // A closed loop runs as fast as each client can: its rates may differ.
        let closed = Case { rate: None, ..open };
        assert!(unequal_rates(&[closed], &clients, &unequal).is_empty());
    }
}
