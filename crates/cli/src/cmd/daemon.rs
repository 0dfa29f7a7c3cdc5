//! `perfpilot daemon`, `status`, `revert` and `tunables`: the optimizer's commands.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use perfpilot_optimize::admin;
use perfpilot_optimize::cpu::CpuShare;
use perfpilot_optimize::daemon::{self, Options};
use perfpilot_store::{ActionRecord, Store};
use perfpilot_units as units;

use crate::fmt;

#[derive(Args)]
pub struct DaemonArgs {
    /// Configuration file (TOML with [tunables] and [[workload]] tables); the drop-ins of
    /// conf.d/*.toml beside it are read after it. Default: /etc/perfpilot/perfpilot.toml where
    /// it exists. SIGHUP reads them again.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Serve /metrics (Prometheus text or OpenMetrics) and /status on ADDR:PORT, or on a bare
    /// PORT of 127.0.0.1 (the usual port is 10187); overrides the config's `listen`.
    #[arg(long, value_name = "ADDR", value_parser = perfpilot_optimize::config::parse_listen)]
    listen: Option<std::net::SocketAddr>,
    /// TLS and basic auth for --listen: a web-config file in the format of Prometheus'
    /// exporter toolkit (tls_server_config, basic_auth_users with bcrypt hashes); overrides the
    /// config's `web_config`.
    #[arg(long, value_name = "FILE")]
    web_config: Option<PathBuf>,
    /// Serve /status (process ids, command lines) to clients off loopback too; by default
    /// only loopback clients get it.
    #[arg(long)]
    status_remote: bool,
    /// Write the metrics to DIR/perfpilot.prom after each scan, for node_exporter's textfile
    /// collector; overrides the config's `textfile`.
    #[arg(long, value_name = "DIR")]
    textfile: Option<PathBuf>,
    /// State directory: the journal/store, the lock and status.json.
    #[arg(long, value_name = "DIR", env = "PERFPILOT_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Stop after this long (default: until SIGINT/SIGTERM).
    #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
    run_for: Option<Duration>,
    /// Log level (error, warn, info, debug); RUST_LOG overrides it.
    #[arg(long, default_value = "info")]
    log: String,
}

#[derive(Args)]
pub struct StatusArgs {
    #[arg(long, value_name = "DIR", env = "PERFPILOT_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
    /// How many recent actions to show.
    #[arg(long, default_value_t = 20)]
    actions: usize,
}

#[derive(Args)]
pub struct RevertArgs {
    #[arg(long, value_name = "DIR", env = "PERFPILOT_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Revert every open action.
    #[arg(long, conflicts_with = "ids")]
    all: bool,
    /// The actions to revert.
    ids: Vec<i64>,
}

#[derive(Args)]
pub struct TunablesArgs {
    #[arg(long, value_name = "DIR", env = "PERFPILOT_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// List every tunable with its default, range and unit (the default action).
    #[arg(long)]
    list: bool,
    /// Set a tunable (persisted; a running daemon picks it up at its next scan).
    #[arg(short = 'o', value_name = "NAME=VALUE")]
    set: Vec<String>,
}

fn state_dir(p: Option<PathBuf>) -> PathBuf {
    p.unwrap_or_else(daemon::default_state_dir)
}

pub fn run_daemon(a: DaemonArgs) -> anyhow::Result<()> {
    super::init_log(&a.log);
    // Room for the sampler's kept `stat` descriptors (half of the soft limit at most).
    perfpilot_sys::raise_open_files_limit(1 << 18);
    let stop = Arc::new(AtomicBool::new(false));
    perfpilot_sys::signal::flag_on_stop(stop.clone())
        .context("installing the SIGINT/SIGTERM handler")?;
    let reload = Arc::new(AtomicBool::new(false));
    perfpilot_sys::signal::flag_on_hangup(reload.clone())
        .context("installing the SIGHUP handler")?;
    // The endpoint and the textfile are set at start (a reload says when they changed).
    let (config, _) = daemon::load_config(a.config.as_deref())?;
    let web = match a.web_config.or(config.web_config) {
        Some(path) => perfpilot_export::WebConfig::load(&path)?,
        None => perfpilot_export::WebConfig::default(),
    };
    let access = perfpilot_export::Access {
        web,
        status_remote: a.status_remote || config.status_remote,
    };
    let mut publisher = perfpilot_export::Publisher::start(
        a.listen.or(config.listen),
        a.textfile.or(config.textfile),
        access,
    )?;
    let opts = Options {
        state_dir: state_dir(a.state_dir),
        config: a.config,
        run_for: a.run_for,
        reload,
    };
    daemon::run_publishing(&opts, stop, &mut |s| publisher.publish(s))?;
    Ok(())
}

/// `perfpilot status`: the daemon's last scan and the recent actions with their evidence.
pub fn run_status(a: StatusArgs) -> anyhow::Result<()> {
    let dir = state_dir(a.state_dir);
    let report = admin::status(&dir, a.actions)?;
    let (running, live, actions) = (report.running, report.daemon, report.actions);
    if a.json {
        return print_status_json(running, live, &actions);
    }
    match running {
        Some(pid) => println!(
            "daemon: running{} on {}",
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
            dir.display()
        ),
        None => println!("daemon: not running ({})", dir.display()),
    }
    if let Some(s) = &live {
        print_live(s);
    }
    print_actions(&actions);
    Ok(())
}

/// `status --json`: whether it runs, the daemon's own status file, the journal's actions.
fn print_status_json(
    running: Option<Option<i32>>,
    live: Option<serde_json::Value>,
    actions: &[ActionRecord],
) -> anyhow::Result<()> {
    let acts: Vec<serde_json::Value> = actions
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.id, "workload": r.workload, "signature": r.signature, "strategy": r.strategy, "state": r.state,
                "reason": r.reason, "note": r.note, "created": fmt::time_ms(r.created_ms), "updated": fmt::time_ms(r.updated_ms),
                "changes": serde_json::from_str::<serde_json::Value>(&r.changes).ok(),
                "verdict": r.verdict.as_deref().and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok()),
            })
        })
        .collect();
    let out = serde_json::json!({ "running": running.is_some(), "pid": running.flatten(), "daemon": live, "actions": acts });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// What the running daemon's status file says: its last scan, notes, workloads and trials.
fn print_live(s: &serde_json::Value) {
    // Older status files lack some figures: they read as 0.
    let cpu: CpuShare = serde_json::from_value(s.clone()).unwrap_or_default();
    println!(
        "last scan {}, {} scans, interval {:.1} s, {}",
        s["time_ms"].as_i64().map(fmt::time_ms).unwrap_or_default(),
        s["scans"],
        s["effective_interval_s"].as_f64().unwrap_or(0.0),
        cpu.describe()
    );
    for n in s["notes"].as_array().into_iter().flatten() {
        println!("note: {}", n.as_str().unwrap_or_default());
    }
    if let Some(f) = s["fleet"].as_str() {
        println!("fleet: {f}");
    }
    if let Some(e) = s["config_error"].as_str() {
        println!("config: the last reload was refused, the configuration in force stays: {e}");
    }
    let ws = s["workloads"].as_array().cloned().unwrap_or_default();
    if !ws.is_empty() {
        println!(
            "\n{:<18} {:<22} {:>6} {:>5} {:>10}  STATE",
            "WORKLOAD", "NAME", "CORES", "THR", "RSS"
        );
        for w in ws {
            print_workload(&w);
        }
    }
    for m in s["devices_left_alone"].as_array().into_iter().flatten() {
        println!("device {}", manual_line(m));
    }
    for t in s["trials"].as_array().into_iter().flatten() {
        print_trial(t);
    }
}

/// One workload's row, then its signal, the sources passed over, its capacity, cgroup and
/// manual tuning, each on a line of its own.
fn print_workload(w: &serde_json::Value) {
    println!(
        "{:<18} {:<22} {:>6.2} {:>5} {:>10}  {}",
        w["signature"].as_str().unwrap_or_default(),
        fmt::trunc(w["name"].as_str().unwrap_or_default(), 22),
        w["cpu_cores"].as_f64().unwrap_or(0.0),
        w["threads"].as_u64().unwrap_or(0),
        fmt::bytes(w["rss"].as_u64().unwrap_or(0)),
        w["state"].as_str().unwrap_or_default()
    );
    // The signal and where it comes from; why the better sources were not used.
    if let Some(sig) = w["signal"].as_str() {
        println!(
            "{:<18} signal ({}): {sig}",
            "",
            w["signal_source"].as_str().unwrap_or("?")
        );
    }
    let passed: Vec<&str> = w["signal_passed_over"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str())
        .collect();
    if !passed.is_empty() {
        println!("{:<18} not used: {}", "", passed.join("; "));
    }
    if let Some(line) = capacity_line(&w["capacity"]) {
        println!("{:<18} {line}", "");
    }
    if let Some(line) = cgroup_line(w) {
        println!("{:<18} {line}", "");
    }
    for m in w["manual"].as_array().into_iter().flatten() {
        println!("{:<18} {}", "", manual_line(m));
    }
}

/// A running trial: its phase and windows, then its design and why, and the pairs so far.
fn print_trial(t: &serde_json::Value) {
    println!(
        "trial: action {} {} on {}: {}, windows off {} on {} of {}, signal {}",
        t["action"],
        t["strategy"].as_str().unwrap_or_default(),
        t["workload"].as_str().unwrap_or_default(),
        t["phase"].as_str().unwrap_or_default(),
        t["windows_off"],
        t["windows_on"],
        t["windows_needed"],
        t["signal"].as_str().unwrap_or_default()
    );
    let mut design = t["design_why"].as_str().unwrap_or_default().to_string();
    if let Some(p) = t["pairs"].as_u64() {
        design = format!("{design}; {p} pairs of periods judged so far");
    }
    if !design.is_empty() {
        println!("       design: {design}");
    }
}

/// The journal's actions, newest last, with why each was tried and what became of it.
fn print_actions(actions: &[ActionRecord]) {
    if actions.is_empty() {
        println!("\nno actions yet");
        return;
    }
    println!(
        "\n{:>5} {:<16} {:<20} {:<9} {:<20}  EVIDENCE",
        "ID", "STRATEGY", "WORKLOAD", "STATE", "UPDATED"
    );
    for r in actions {
        println!(
            "{:>5} {:<16} {:<20} {:<9} {:<20}  {}",
            r.id,
            r.strategy,
            fmt::trunc(&r.workload, 20),
            r.state,
            fmt::time_ms(r.updated_ms),
            admin::evidence(r)
        );
        println!("{:>5} why: {}", "", r.reason);
        // What became of it, where the evidence does not already say it.
        if !r.note.is_empty() && admin::evidence(r) != r.note {
            println!("{:>5} note: {}", "", r.note);
        }
    }
}

/// Where a workload runs, as status shows it: `cgroup PATH (pod NS/NAME …), cpuset CPUS`.
fn cgroup_line(w: &serde_json::Value) -> Option<String> {
    let cgroup = w["cgroup"].as_str()?;
    let mut line = format!("cgroup {cgroup}");
    if let Ok(c) = serde_json::from_value::<perfpilot_sys::cgroup::container::Container>(
        w["container"].clone(),
    ) {
        line.push_str(&format!(" ({})", c.describe()));
    }
    if let Some(cs) = w["cpuset"].as_str() {
        line.push_str(&format!(", cpuset {cs}: strategies place it inside"));
    }
    Some(line)
}

/// A knob someone else set: `STRATEGIES left alone: manually tuned KNOB (EVIDENCE)`.
fn manual_line(m: &serde_json::Value) -> String {
    let blocks: Vec<&str> = m["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b.as_str())
        .collect();
    let knob =
        serde_json::from_value::<perfpilot_optimize::engine::manual::Knob>(m["knob"].clone())
            .map(|k| k.as_str())
            .unwrap_or("?");
    format!(
        "{} left alone: manually tuned {knob} ({})",
        blocks.join(", "),
        m["evidence"].as_str().unwrap_or_default()
    )
}

/// `perfpilot revert`: undoes open actions from the journal while no daemon runs.
pub fn run_revert(a: RevertArgs) -> anyhow::Result<()> {
    let dir = state_dir(a.state_dir);
    if !a.all && a.ids.is_empty() {
        bail!("say what to revert: --all, or action ids (see `perfpilot status`)");
    }
    let ids = (!a.all).then_some(a.ids.as_slice());
    let done = admin::revert(&dir, ids)?;
    if done.is_empty() {
        println!(
            "nothing to revert: no open action{}",
            if a.all { "" } else { " with those ids" }
        );
    }
    for (id, lines) in done {
        println!(
            "action {id}: {}",
            if lines.is_empty() {
                "nothing was applied".to_string()
            } else {
                lines.join("; ")
            }
        );
    }
    Ok(())
}

/// `perfpilot tunables`: persists `-o name=value` settings and lists every tunable.
pub fn run_tunables(a: TunablesArgs) -> anyhow::Result<()> {
    let dir = state_dir(a.state_dir);
    let path = daemon::store_path(&dir);
    // Only `-o` writes: a listing reads the store if there is one, and creates nothing.
    let listing = if a.set.is_empty() {
        match Store::open_existing(&path) {
            Ok(store) => admin::list_tunables(&store)?,
            Err(perfpilot_store::Error::Missing { .. }) => {
                eprintln!(
                    "note: no store at {}: every tunable has its default (`-o NAME=VALUE` persists one)",
                    path.display()
                );
                perfpilot_optimize::tunables::listing(&Default::default())
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        perfpilot_optimize::privilege::may_change(&dir, "tunables -o")
            .map_err(anyhow::Error::msg)?;
        let mut store = Store::open(&path)?;
        for kv in &a.set {
            let (n, v) = kv
                .split_once('=')
                .with_context(|| format!("-o {kv:?}: expected NAME=VALUE"))?;
            let v = admin::set_tunable(&mut store, n.trim(), v)?;
            println!("{} = {v} (persisted in {})", n.trim(), dir.display());
        }
        if !a.list {
            return Ok(());
        }
        admin::list_tunables(&store)?
    };
    println!(
        "{:<24} {:>8} {:>8} {:<22} {:<14} DESCRIPTION",
        "NAME", "VALUE", "DEFAULT", "RANGE", "UNIT"
    );
    for (d, v) in listing {
        println!(
            "{:<24} {:>8} {:>8} {:<22} {:<14} {}",
            d.name,
            v,
            d.default,
            d.range(),
            d.unit,
            d.help
        );
    }
    Ok(())
}

/// A workload's tier in its capacity model, for `status`: `model M: tier app 25 % busy
/// (≈ 55.6 req/s by its CPU); bottleneck app saturates at 222 req/s: headroom ×4.00`.
fn capacity_line(c: &serde_json::Value) -> Option<String> {
    let model = c["model"].as_str()?;
    let f = |k: &str| c[k].as_f64().unwrap_or(0.0);
    let headroom = match c["headroom"].as_f64() {
        Some(h) => format!("headroom ×{h:.2}"),
        None => "idle".to_string(),
    };
    Some(format!(
        "model {model}: tier {} {} busy (≈ {} by its CPU); bottleneck {} saturates at {}: {headroom}",
        c["tier"].as_str().unwrap_or("?"),
        units::percent(f("utilisation") * 100.0),
        units::rate(f("throughput"), "req"),
        c["bottleneck"].as_str().unwrap_or("?"),
        units::rate(f("max_throughput"), "req"),
    ))
}
