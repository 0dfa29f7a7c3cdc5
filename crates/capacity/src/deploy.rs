//! Starting a sweep's deployment: each tier's instances in CPU groups of their own (a quota
//! when the tier has one, accounting always), instances from the second of a tier in a network
//! namespace when the sweep asks for a second host, PostgreSQL and nginx as built-in kinds,
//! readiness, and stopping it all (front tier first) when the guard drops.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use perfpilot_lab::netns::NetLab;
use perfpilot_lab::process::{self, StopSignal};
use perfpilot_lab::server::command::{self, Stdout};
use perfpilot_lab::server::postgres::{self as pg, LocalAuth};
use perfpilot_lab::server::{self, Server, ServerError, nginx};
use perfpilot_sys::Fs;
use perfpilot_sys::cpugroup::CpuGroup;

use crate::error::{CapacityError, Result};
use crate::spec::{Balance, Capacity, SweepFile, TierFile, TierKind};

/// How long an instance may take to become ready.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// One running instance.
#[derive(Debug)]
pub struct Instance {
    /// Its address as seen from this host (127.0.0.1, or the namespace's address).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Whether it runs in the second host's namespace.
    pub in_namespace: bool,
    /// The process, stopped first when the instance drops (SIGINT for PostgreSQL, its fast
    /// shutdown, else SIGTERM; SIGKILL after 10 s).
    server: Server,
    /// Its CPU group (quota and accounting), removed once the process is gone.
    pub group: CpuGroup,
    dir: tempfile::TempDir,
}

impl Instance {
    /// Why the instance is no longer running, with the end of its log; `None` while it runs.
    pub fn exited(&mut self) -> Option<String> {
        let status = self.server.exit_status()?;
        Some(format!("exited ({status}){}", log_tail(self.dir.path())))
    }
}

/// One running tier.
#[derive(Debug)]
pub struct Tier {
    /// Its name.
    pub name: String,
    /// Cores one instance can use (its quota, else its `cores`, else the machine's).
    pub cores: f64,
    /// Its instances.
    pub instances: Vec<Instance>,
}

/// A running deployment; dropping it stops the tiers front first, then removes the second
/// host.
#[derive(Debug)]
pub struct Deployed {
    /// The tiers in start order.
    pub tiers: Vec<Tier>,
    /// The URL base of the front tier (`http://127.0.0.1:PORT`).
    pub front: String,
    /// The second host: host 0 of a lab of namespaces joined to this one.
    netns: Option<NetLab>,
}

impl Drop for Deployed {
    fn drop(&mut self) {
        while let Some(t) = self.tiers.pop() {
            drop(t);
        }
        drop(self.netns.take());
    }
}

impl Deployed {
    /// The first instance that exited, named.
    pub fn exited(&mut self) -> Option<String> {
        for t in &mut self.tiers {
            for (i, inst) in t.instances.iter_mut().enumerate() {
                if let Some(why) = inst.exited() {
                    return Some(format!("tier {} instance {}: {why}", t.name, i + 1));
                }
            }
        }
        None
    }

    /// CPU seconds used so far per tier (all instances).
    pub fn cpu_seconds(&self) -> BTreeMap<String, f64> {
        self.tiers
            .iter()
            .map(|t| {
                let s: f64 = t
                    .instances
                    .iter()
                    .filter_map(|i| i.group.usage().ok())
                    .map(|d| d.as_secs_f64())
                    .sum();
                (t.name.clone(), s)
            })
            .collect()
    }

    /// Periods in which a quota throttled each tier (all instances), where the kernel says.
    pub fn throttled(&self) -> BTreeMap<String, u64> {
        self.tiers
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.instances
                        .iter()
                        .filter_map(|i| i.group.throttled_periods())
                        .sum(),
                )
            })
            .collect()
    }
}

fn tier_err(tier: &str, message: impl Into<String>) -> CapacityError {
    CapacityError::Tier {
        tier: tier.to_string(),
        message: message.into(),
    }
}

/// `; its log ends: …` of an instance's directory.
fn log_tail(dir: &Path) -> String {
    perfpilot_lab::log::ends(&dir.join("log"), "log")
}

/// Cores of this machine.
pub fn machine_cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// Starts `sweep`'s deployment of `cap`. `tag` names the CPU groups.
pub fn deploy(cap: &Capacity, sweep: &SweepFile, tag: &str) -> Result<Deployed> {
    let fs = Fs::live();
    let stale = perfpilot_sys::cpugroup::remove_stale(&fs, "cap-");
    if !stale.is_empty() {
        eprintln!(
            "perfpilot capacity: removed {} CPU group(s) a killed run left behind",
            stale.len()
        );
    }
    let netns = sweep
        .second_host
        .as_ref()
        .map(|_| NetLab::joined(1))
        .transpose()
        .map_err(|e| tier_err("second host", e.to_string()))?;
    let mut dep = Deployed {
        tiers: Vec::new(),
        front: String::new(),
        netns,
    };
    for t in &cap.file.tier {
        let n = sweep.instances.get(&t.name).copied().unwrap_or(1).max(1);
        let cores = t.cpu_quota.or(t.cores).unwrap_or_else(machine_cores);
        let mut tier = Tier {
            name: t.name.clone(),
            cores,
            instances: Vec::new(),
        };
        for cmd in &t.setup {
            run_setup(&t.name, cmd)?;
        }
        for i in 0..n {
            let in_ns = i > 0 && sweep.second_host.as_deref() == Some(t.name.as_str());
            let inst = start(&fs, &dep, t, i, in_ns, tag)?;
            tier.instances.push(inst);
        }
        dep.tiers.push(tier);
    }
    let front = dep
        .tiers
        .last()
        .and_then(|t| t.instances.first())
        .map(|i| format!("http://{}:{}", i.host, i.port))
        .unwrap_or_default();
    dep.front = front;
    Ok(dep)
}

fn run_setup(tier: &str, cmd: &str) -> Result<()> {
    let out = Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| tier_err(tier, format!("setup {cmd:?}: cannot run sh: {e}")))?;
    if !out.status.success() {
        return Err(tier_err(
            tier,
            format!(
                "setup {cmd:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(())
}

/// Template values for an instance: its own host and port, and each running tier's first
/// instance as reachable from where this one runs.
fn values(dep: &Deployed, host: &str, port: u16, in_ns: bool) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    v.insert("host".to_string(), host.to_string());
    v.insert("port".to_string(), port.to_string());
    for t in &dep.tiers {
        if let Some(first) = t.instances.first() {
            // The second host reaches this side's instances at this side's address on the lab.
            let reach = match (&dep.netns, in_ns) {
                (Some(lab), true) if !first.in_namespace => lab.here_addr(),
                _ => None,
            };
            v.insert(
                format!("{}.host", t.name),
                reach.unwrap_or_else(|| first.host.clone()),
            );
            v.insert(format!("{}.port", t.name), first.port.to_string());
        }
    }
    v
}

fn render(template: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = template.to_string();
    for (k, v) in values {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

fn start(
    fs: &Fs,
    dep: &Deployed,
    t: &TierFile,
    index: u32,
    in_ns: bool,
    tag: &str,
) -> Result<Instance> {
    let group = CpuGroup::create(fs, &format!("cap-{tag}-{}-{index}", t.name), t.cpu_quota)
        .map_err(|e| tier_err(&t.name, format!("cannot create its CPU group: {e}")))?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("perfpilot-cap-{}-", t.name))
        .tempdir()
        .map_err(|e| tier_err(&t.name, format!("cannot create a temporary directory: {e}")))?;
    let port = perfpilot_lab::port::free_port()
        .map_err(|e| tier_err(&t.name, format!("no free port: {e}")))?;
    let host = match (&dep.netns, in_ns) {
        (Some(lab), true) => lab.addr(0),
        _ => "127.0.0.1".to_string(),
    };
    // The server joins its group as root and then drops to its user (cgroup v2 lets only a
    // writer of the common ancestor's cgroup.procs move a process).
    let mut user = None;
    let (mut cmd, stop_signal) = match t.kind {
        TierKind::Postgres => {
            if perfpilot_sys::user::is_root() {
                user = Some(perfpilot_lab::user::ids(pg::USER).ok_or_else(|| {
                    tier_err(&t.name, "running as root needs the OS user postgres")
                })?);
            }
            (postgres(dep, t, dir.path(), port)?, StopSignal::Interrupt)
        }
        TierKind::Nginx => (nginx(dep, t, dir.path(), port)?, StopSignal::Terminate),
        TierKind::Command => {
            let line = render(
                t.command.as_deref().unwrap_or(""),
                &values(dep, &host, port, in_ns),
            );
            let words = command::split_words(&line)
                .map_err(|_| tier_err(&t.name, format!("command {line:?} does not parse")))?;
            let mut argv = match (&dep.netns, in_ns) {
                (Some(lab), true) => lab.exec_prefix(lab.host(0)),
                _ => Vec::new(),
            };
            argv.extend(words);
            (command::command(&argv), StopSignal::Terminate)
        }
    };
    group
        .join_on_spawn(&mut cmd, user)
        .map_err(|e| tier_err(&t.name, e.to_string()))?;
    // Its stderr is its log (stdout is dropped: a chatty server would fill it over a sweep).
    command::log_to(&mut cmd, &dir.path().join("log"), Stdout::Dropped)
        .map_err(|e| tier_err(&t.name, format!("cannot create its log: {}", e.source)))?;
    let server = Server::start(&t.name, cmd)
        .map_err(|e| tier_err(&t.name, format!("cannot start: {e}")))?
        .stopped_by(stop_signal, Duration::from_secs(10));
    let mut inst = Instance {
        host,
        port,
        in_namespace: in_ns,
        server,
        group,
        dir,
    };
    wait_ready(t, &mut inst, dep)?;
    Ok(inst)
}

fn wait_ready(t: &TierFile, inst: &mut Instance, dep: &Deployed) -> Result<()> {
    let url = t
        .ready
        .as_ref()
        .map(|u| render(u, &values(dep, &inst.host, inst.port, false)));
    let (host, port) = (inst.host.clone(), inst.port);
    let ready = || match (&url, t.kind) {
        (Some(u), _) => perfpilot_fetch::get(u, Duration::from_secs(2)).is_ok(),
        (None, TierKind::Postgres) => pg::ready(port),
        (None, _) => process::accepts(&host, port),
    };
    let what = format!("ready on {host}:{port}");
    match inst.server.wait_until(&what, READY_LIMIT, ready, &|| false) {
        Ok(()) => Ok(()),
        Err(ServerError::Exited { .. }) => {
            let why = inst.exited().unwrap_or_default();
            Err(tier_err(&t.name, format!("did not start: {why}")))
        }
        Err(_) => Err(tier_err(
            &t.name,
            format!(
                "not ready within {}s on {host}:{port}{}",
                READY_LIMIT.as_secs(),
                log_tail(inst.dir.path())
            ),
        )),
    }
}

/// initdb into `dir` (as the `postgres` user when running as root) and the server command:
/// trusted TCP from loopback and the second host's link, `fsync` off (a throw-away cluster).
fn postgres(dep: &Deployed, t: &TierFile, dir: &Path, port: u16) -> Result<Command> {
    let fail = |e: ServerError| tier_err(&t.name, e.to_string());
    if perfpilot_sys::user::is_root() {
        server::chown(dir, pg::USER).map_err(fail)?;
    }
    let data = dir.join("data");
    let init = pg::initdb(&data, LocalAuth::Trust).map_err(fail)?;
    perfpilot_lab::run::quick("initdb", init).map_err(|e| tier_err(&t.name, e.to_string()))?;
    let mut listen = vec!["127.0.0.1".to_string()];
    let mut hba = "local all all trust\nhost all all 127.0.0.1/32 trust\n".to_string();
    if let Some(lab) = &dep.netns
        && let Some(here) = lab.here_addr()
    {
        listen.push(here);
        hba.push_str(&format!("host all all {}/32 trust\n", lab.addr(0)));
    }
    server::write(&data.join("pg_hba.conf"), &hba).map_err(fail)?;
    let settings: Vec<(String, String)> = std::iter::once(("fsync".into(), "off".into()))
        .chain(t.settings.iter().map(|(k, v)| (k.clone(), v.clone())))
        .collect();
    let at = pg::Listen {
        port,
        addresses: &listen,
        sockets: dir,
    };
    // The switch to the postgres user comes with joining the CPU group (`start`).
    pg::server(&data, &at, &settings).map_err(fail)
}

/// nginx as a reverse proxy over the upstream tier's instances: one worker process (no
/// master, so the process started is the one serving), keep-alive to the upstream.
fn nginx(dep: &Deployed, t: &TierFile, dir: &Path, port: u16) -> Result<Command> {
    let up = t.upstream.as_deref().unwrap_or("");
    let upstream = dep
        .tiers
        .iter()
        .find(|x| x.name == up)
        .ok_or_else(|| tier_err(&t.name, format!("upstream tier `{up}` is not running")))?;
    let servers: String = upstream
        .instances
        .iter()
        .map(|i| format!("    server {}:{};\n", i.host, i.port))
        .collect();
    let balance = match t.balance.unwrap_or_default() {
        Balance::RoundRobin => "",
        Balance::LeastConn => "    least_conn;\n",
    };
    let mut conf = nginx::Conf::new(dir);
    conf.error_log = dir.join("log");
    conf.worker_connections = 4096;
    conf.http = format!(
        "  upstream tier {{\n{balance}{servers}    keepalive 64;\n  }}\n\
           server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://tier;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n"
    );
    conf.command().map_err(|e| tier_err(&t.name, e.to_string()))
}
