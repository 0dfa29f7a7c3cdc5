//! `perfpilot drive`: drive HTTP load, or turn other drivers' output into a Measurement.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use perfpilot_drive::adapters::{self, NumberMeaning};
use perfpilot_drive::coord::wire::{WireLoad, WireSpec};
use perfpilot_drive::{
    BodyTemplate, DataSource, DriveError, DriveSpec, HttpVersion, Load, Measurement,
    RequestProfile, RunControl, ThinkTime, Threshold, TlsOptions, Verdict, cut_short,
    measurements_json, none_succeeded, parse_duration, render_summary,
};

use super::drive_live::{LiveArgs, LiveOutputs, parse_labels, write_csv};

/// Exit code when a `--fail-if` threshold does not hold.
pub const EXIT_THRESHOLD: i32 = 3;
/// Exit code when a run that drove load had not one request succeed (every one failed, or
/// none completed in the window); the summary and the JSON are still written.
pub const EXIT_NONE_SUCCEEDED: i32 = 4;
/// Exit code when a coordinated worker was lost (the merged result of the rest is written).
pub const EXIT_WORKER_LOST: i32 = 5;
/// Exit code after Ctrl-C (the partial summary is printed first).
pub const EXIT_INTERRUPTED: i32 = 130;

/// What `perfpilot drive --help` ends with: how failures are handled and the exit codes.
const AFTER_HELP: &str = "\
Failed requests are counted, not fatal. A user or connection whose connection fails waits 1 ms
before reconnecting, twice as long after each failure in a row up to 1 s; a response resets it.

Exit codes:
  0    the run completed (and every --fail-if threshold held)
  1    an error before or around the run: bad arguments, unreadable files, a tool that failed
  3    a --fail-if threshold did not hold
  4    not one request of a run (this driver's, wrk's, pgbench's, redis-benchmark's) succeeded:
       every one failed, or none completed in the window; the last line says which errors, with
       the first one's text (the summary and --json are still written)
  5    --coordinator: a worker was lost during the run (the merged result of the others and the
       part the lost one measured are written; the lines before say which load was lost)
  130  stopped by Ctrl-C (the summary covers the part before)

Coordinated drivers over SSH (each worker started for the run; no port opens):
  perfpilot drive --coordinator --workers ssh://bob@10.0.0.2,ssh://bob@10.0.0.3 --users 400 -d 60s URL
Or workers that listen, with mutual TLS (certificates from `perfpilot certs`):
  perfpilot drive --worker --listen 10.0.0.2:7070 --tls-cert w2.pem --tls-key w2.key --tls-ca ca.pem
  perfpilot drive --coordinator --workers 10.0.0.2:7070 --tls-cert c.pem --tls-key c.key --tls-ca ca.pem …";

/// Drive load against HTTP targets (closed or open loop), or adapt another driver's results.
///
/// Closed loop (virtual users with think time):
///   perfpilot drive --users 50 --think-time exp:1s --warmup 30s --duration 5m http://127.0.0.1:8080/
///
/// Open loop (constant arrival rate; latency from the intended send time):
///   perfpilot drive --rate 2000/s --connections 64 --duration 60s http://127.0.0.1:8080/
///
/// A mix of requests from a CSV profile (rows with weights; paths joined to the base URL):
///   perfpilot drive --users 32 --think-time exp:10ms --requests examples/drive/filestore-mix.csv http://127.0.0.1:8080
///
/// HTTPS (HTTP/2 where the server offers it), with outputs other tools read:
///   perfpilot drive --insecure --csv s.csv --hlog s.hlog https://127.0.0.1:8443/
#[derive(Args, Debug)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = AFTER_HELP
)]
pub struct DriveArgs {
    #[command(subcommand)]
    sub: Option<DriveSub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum DriveSub {
    /// Merge measurements of runs that ran at the same time (histograms add exactly).
    Merge {
        /// Measurement JSON files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Print the summary of a measurement file and check thresholds.
    Show {
        file: PathBuf,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Run wrk with the given arguments (after `--`) and convert its output.
    Wrk {
        #[command(flatten)]
        out: OutputArgs,
        /// wrk's arguments; add --latency for percentiles.
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
    /// Run pgbench with the given arguments (after `--`; add `-P 1` for a per-second series).
    Pgbench {
        #[command(flatten)]
        out: OutputArgs,
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
    /// Run redis-benchmark with the given arguments (after `--`); one measurement per test.
    RedisBenchmark {
        #[command(flatten)]
        out: OutputArgs,
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
    /// Run any command and take the last number it prints on stdout.
    Command {
        /// What the number is.
        #[arg(long = "as", value_enum, default_value = "throughput")]
        meaning: Meaning,
        #[command(flatten)]
        out: OutputArgs,
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Meaning {
    /// Operations per second.
    Throughput,
    /// A latency in milliseconds.
    LatencyMs,
    /// A plain value (kept under extra.value).
    Value,
}

#[derive(Args, Debug)]
struct OutputArgs {
    /// Write the Measurement JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Threshold that must hold, e.g. 'p99<50ms', 'errors<0.1%', 'throughput>=900' (repeatable).
    /// A failed threshold makes the exit code 3.
    #[arg(long = "fail-if", value_name = "EXPR")]
    fail_if: Vec<String>,
    /// Do not print the human summary.
    #[arg(long, short)]
    quiet: bool,
    /// Write the k6-style end-of-run summary (the data object of k6's handleSummary) to FILE,
    /// with the --fail-if thresholds under their metrics.
    #[arg(long, value_name = "FILE")]
    summary_export: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Target URLs (http:// or https://host:port/path); users or connections are spread over
    /// them round-robin. With --requests: at most one, the base URL the profile's paths join.
    #[arg(required_unless_present_any = ["worker", "requests"], value_name = "URL")]
    targets: Vec<String>,
    /// Request profile: a CSV with the header name,weight,method,url (and optionally
    /// body_bytes, body_file, header:NAME), one row per kind of request; each request draws a
    /// row by weight. A url may be a path joined to the base URL, and may draw {{rand:A-B}},
    /// {{randf:A-B}} or {{seq}} per request. The summary and --json count each row apart.
    #[arg(
        long,
        value_name = "CSV",
        conflicts_with_all = ["method", "body", "body_file", "data", "coordinator", "worker"]
    )]
    requests: Option<PathBuf>,
    /// HTTP version: auto (HTTP/2 where an https:// target offers it by ALPN), 1.1, or 2 (also
    /// on http://, by prior knowledge).
    #[arg(long, default_value = "auto", value_name = "auto|1.1|2")]
    http: String,
    /// Accept any TLS certificate (self-signed test servers).
    #[arg(long, short = 'k')]
    insecure: bool,
    /// PEM file of further trusted certificates (a test CA).
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// Write the per-second series as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write an HdrHistogram interval log (one histogram per second, µs) to FILE.
    #[arg(long, value_name = "FILE")]
    hlog: Option<PathBuf>,
    /// Push the live series to this Prometheus remote-write URL (e.g.
    /// http://127.0.0.1:9090/api/v1/write); a receiver that is down costs a warning, not the run.
    #[arg(long, value_name = "URL")]
    remote_write: Option<String>,
    /// A label NAME=VALUE on every remote-written series (repeatable).
    #[arg(long, value_name = "NAME=VALUE")]
    remote_write_label: Vec<String>,
    /// Run as a worker: wait for coordinators on --listen (or serve the one on --stdio) and run
    /// the shares they send.
    #[arg(long, conflicts_with = "coordinator")]
    worker: bool,
    #[command(flatten)]
    listen: super::remote::ListenArgs,
    /// Worker: serve one coordinator, then exit.
    #[arg(long)]
    once: bool,
    /// Coordinate the workers of --workers: split the load, start together, merge live.
    #[arg(long, requires = "workers")]
    coordinator: bool,
    /// Coordinator: the workers, comma-separated: ssh://[USER@]HOST[:PORT] (the worker is
    /// started over SSH for this run), HOST:PORT of a listening worker (mutual TLS with
    /// --tls-cert, plain TCP without), or tls:// or tcp:// to say which.
    #[arg(long, value_delimiter = ',', value_name = "WORKER,…")]
    workers: Vec<String>,
    #[command(flatten)]
    dial: super::remote::DialArgs,
    #[command(flatten)]
    tls: super::remote::TlsArgs,
    /// Coordinator: refuse a worker whose clock is further off than this (closer ones are
    /// corrected).
    #[arg(long, default_value = "50ms")]
    max_clock_offset: String,
    /// Closed loop: this many virtual users, each with its own keep-alive connection.
    #[arg(long, short = 'u', conflicts_with = "rate")]
    users: Option<usize>,
    /// Closed loop think time after each response: 0, a constant (100ms) or exponential (exp:1s).
    #[arg(long, default_value = "0", conflicts_with = "rate")]
    think_time: String,
    /// Open loop: constant arrival rate in total, e.g. 500/s.
    #[arg(long)]
    rate: Option<String>,
    /// Open loop: connections the rate is spread over (each keeps its own schedule).
    #[arg(long, short = 'c', default_value_t = 32)]
    connections: usize,
    /// HTTP method.
    #[arg(long, short = 'X', default_value = "GET")]
    method: String,
    /// Request header 'Name: value' (repeatable).
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Request body template; {{column}} takes values from --data, {{seq}}, {{rand:A-B}}, {{randf:A-B}} are generated.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Read the body template from FILE.
    #[arg(long, value_name = "FILE")]
    body_file: Option<PathBuf>,
    /// CSV file (with a header line) whose rows fill the body template in turn.
    #[arg(long, value_name = "CSV")]
    data: Option<PathBuf>,
    /// Seed of each user's random draws (think times, {{rand:A-B}}, the --requests row): the
    /// same seed draws the same sequence per user.
    #[arg(long, default_value_t = 0, conflicts_with = "coordinator")]
    seed: u64,
    /// Per-request timeout.
    #[arg(long, default_value = "10s")]
    timeout: String,
    /// Unmeasured warm-up before the measured window.
    #[arg(long, default_value = "0")]
    warmup: String,
    /// Length of the measured window.
    #[arg(long, short = 'd', default_value = "10s")]
    duration: String,
    /// Driver threads (default: one per CPU); at most one per CPU this process may run on (its
    /// affinity and cgroup quota) and one per user or connection.
    #[arg(long, short = 't')]
    threads: Option<usize>,
    /// No live progress line.
    #[arg(long)]
    no_progress: bool,
    #[command(flatten)]
    out: OutputArgs,
}

impl DriveArgs {
    /// Whether this command speaks to workers or coordinators (a peer that goes away must be
    /// an error, not a SIGPIPE that ends the process).
    pub fn talks_to_peers(&self) -> bool {
        self.sub.is_none() && (self.run.worker || self.run.coordinator)
    }
}

pub fn run(args: DriveArgs) -> Result<()> {
    match args.sub {
        None => drive(args.run),
        Some(DriveSub::Merge { files, out }) => {
            let parts = files
                .iter()
                .map(read_measurement)
                .collect::<Result<Vec<_>>>()?;
            let merged = match Measurement::merge(&parts) {
                Ok(m) => m,
                Err(DriveError::SameRun { first, second, run }) => bail!(
                    "{} and {} are the same run ({run}): merged, it would count twice; give each run once",
                    files[first].display(),
                    files[second].display()
                ),
                Err(e) => return Err(e).context("cannot merge the measurements"),
            };
            finish(&[merged], &out, Ran::Read)
        }
        Some(DriveSub::Show { file, out }) => finish(&[read_measurement(&file)?], &out, Ran::Read),
        Some(DriveSub::Wrk { out, args }) => finish(&[adapters::run_wrk(&args)?], &out, Ran::Drove),
        Some(DriveSub::Pgbench { out, args }) => {
            finish(&[adapters::run_pgbench(&args)?], &out, Ran::Drove)
        }
        Some(DriveSub::RedisBenchmark { out, args }) => {
            finish(&adapters::run_redis_benchmark(&args)?, &out, Ran::Drove)
        }
        Some(DriveSub::Command { meaning, out, argv }) => {
            let meaning = match meaning {
                Meaning::Throughput => NumberMeaning::Throughput,
                Meaning::LatencyMs => NumberMeaning::LatencyMs,
                Meaning::Value => NumberMeaning::Value,
            };
            // A command's number counts no requests: nothing to say about their success.
            finish(&[adapters::run_command(&argv, meaning)?], &out, Ran::Read)
        }
    }
}

fn read_measurement(path: &PathBuf) -> Result<Measurement> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Measurement::from_json(&text).with_context(|| format!("in {}", path.display()))
}

fn drive(a: RunArgs) -> Result<()> {
    if a.worker {
        return super::drive_coord::worker(&a.listen, &a.tls, a.once);
    }
    // Reject a bad threshold before driving any load.
    parse_thresholds(&a.out.fail_if)?;
    let (spec, body) = drive_spec(&a)?;
    let live_args = LiveArgs {
        hlog: a.hlog.clone(),
        remote_write: a.remote_write.clone(),
        labels: parse_labels(&a.remote_write_label)?,
    };
    if a.coordinator {
        coordinated(&a, &spec, body.as_deref(), &live_args)
    } else {
        here(&a, &spec, &live_args)
    }
}

/// The run the arguments describe, and its body template's text (for workers).
fn drive_spec(a: &RunArgs) -> Result<(DriveSpec, Option<String>)> {
    let load = match (&a.rate, a.users) {
        (Some(rate), _) => Load::open(rate, a.connections)?,
        (None, users) => Load::Closed {
            users: users.unwrap_or(10),
            think: ThinkTime::parse(&a.think_time)?,
        },
    };
    let mut spec = DriveSpec::new(a.targets.clone(), load);
    if let Some(path) = &a.requests {
        if a.targets.len() > 1 {
            bail!(
                "--requests {} takes at most one URL on the command line, the base URL its rows' \
                 paths are joined to; the profile's rows say what to request (got {} URLs: {})",
                path.display(),
                a.targets.len(),
                a.targets.join(" ")
            );
        }
        spec.profile = Some(RequestProfile::from_csv(
            path,
            a.targets.first().map(String::as_str),
        )?);
    }
    spec.seed = a.seed;
    spec.method = a.method.to_ascii_uppercase();
    for h in &a.headers {
        let (k, v) = h
            .split_once(':')
            .with_context(|| format!("header {h:?} must look like 'Name: value'"))?;
        spec.headers
            .push((k.trim().to_string(), v.trim().to_string()));
    }
    let (body, template) = body_template(a)?;
    spec.body = template;
    spec.timeout = parse_duration(&a.timeout)?;
    if spec.timeout.is_zero() {
        bail!("--timeout must be positive");
    }
    spec.warmup = parse_duration(&a.warmup)?;
    spec.duration = parse_duration(&a.duration)?;
    if spec.duration < Duration::from_millis(100) {
        bail!("--duration must be at least 100ms");
    }
    if let Some(t) = a.threads {
        spec.threads = t.max(1);
    }
    spec.http = HttpVersion::parse(&a.http)?;
    spec.tls = TlsOptions {
        insecure: a.insecure,
        ca_file: a.cacert.clone(),
    };
    Ok((spec, body))
}

/// The body template's text (`--body`, or `--body-file`'s contents) and the template compiled
/// with `--data`'s columns.
fn body_template(a: &RunArgs) -> Result<(Option<String>, Option<BodyTemplate>)> {
    let data = a
        .data
        .as_ref()
        .map(|p| DataSource::from_csv(p))
        .transpose()?;
    let body = match (&a.body, &a.body_file) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(f)) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("cannot read the body template {}", f.display()))?
                .trim_end_matches('\n')
                .to_string(),
        ),
        (None, None) => None,
    };
    if data.is_some() && body.is_none() {
        bail!("--data needs a body template (--body or --body-file) that uses its columns");
    }
    let template = body
        .as_ref()
        .map(|b| BodyTemplate::compile(b, data.as_ref()))
        .transpose()?;
    Ok((body, template))
}

/// Drives the run from workers (`--coordinator`), merging their seconds live.
fn coordinated(
    a: &RunArgs,
    spec: &DriveSpec,
    body: Option<&str>,
    live_args: &LiveArgs,
) -> Result<()> {
    let wire = wire_spec(a, spec, body)?;
    let bound = parse_duration(&a.max_clock_offset)?;
    let dialer = a.dial.dialer(&a.tls)?;
    let (outputs, senders) = LiveOutputs::start(live_args)?;
    let progress = !a.no_progress && !a.out.quiet;
    let result =
        super::drive_coord::coordinate(a.workers.clone(), dialer, wire, bound, &senders, progress);
    drop(senders);
    outputs.finish(a.out.quiet)?;
    let (m, lost, interrupted) = result?;
    if let Some(path) = &a.csv {
        write_csv(path, &m)?;
    }
    let ran = if interrupted {
        Ran::Interrupted
    } else if lost {
        Ran::LostWorker
    } else {
        Ran::Drove
    };
    finish(&[m], &a.out, ran)
}

/// Drives the run from this process.
fn here(a: &RunArgs, spec: &DriveSpec, live_args: &LiveArgs) -> Result<()> {
    let threads = perfpilot_drive::driver_threads(spec);
    if let Some(asked) = a.threads
        && threads < asked
        && !a.out.quiet
    {
        eprintln!(
            "note: {threads} driver thread(s), not {asked}: one per user or connection and one per CPU this process may run on at most"
        );
    }
    let (outputs, senders) = LiveOutputs::start(live_args)?;
    let control = RunControl {
        progress: !a.no_progress && !a.out.quiet,
        ctrl_c: true,
        live: senders,
        cpu_clock: Some(perfpilot_sys::self_cpu_time),
        ..Default::default()
    };
    let result = perfpilot_drive::run(spec, &control);
    drop(control);
    outputs.finish(a.out.quiet)?;
    let m = result?;
    if let Some(path) = &a.csv {
        write_csv(path, &m)?;
    }
    let ran = if cut_short(&m, spec) {
        Ran::Interrupted
    } else {
        Ran::Drove
    };
    finish(&[m], &a.out, ran)
}

/// The run of `a` in the form workers receive (template, data and CA as text).
fn wire_spec(a: &RunArgs, spec: &DriveSpec, body: Option<&str>) -> Result<WireSpec> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
    };
    Ok(WireSpec {
        targets: spec.targets.clone(),
        method: spec.method.clone(),
        headers: spec.headers.clone(),
        body: body.map(str::to_string),
        data: match &a.data {
            Some(p) => Some((p.display().to_string(), read(p)?)),
            None => None,
        },
        load: match &spec.load {
            Load::Closed { users, .. } => WireLoad::Closed {
                users: *users,
                think: a.think_time.clone(),
            },
            Load::Open { rate, connections } => WireLoad::Open {
                rate: *rate,
                connections: *connections,
            },
        },
        timeout_ms: spec.timeout.as_millis() as u64,
        warmup_ms: spec.warmup.as_millis() as u64,
        duration_ms: spec.duration.as_millis() as u64,
        threads: a.threads,
        http: a.http.clone(),
        insecure: a.insecure,
        ca_pem: a.cacert.as_ref().map(read).transpose()?,
        slot_offset: 0,
        schedule_offset_us: 0,
    })
}

/// How the measurements to finish came about, which decides the exit codes that apply.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ran {
    /// Load was driven to the end: a run where no request succeeded fails.
    Drove,
    /// Load was driven and Ctrl-C stopped it.
    Interrupted,
    /// Read from files or a command's number: only thresholds decide.
    Read,
    /// A coordinated run in which a worker was lost.
    LostWorker,
}

fn parse_thresholds(exprs: &[String]) -> Result<Vec<Threshold>> {
    exprs
        .iter()
        .map(|e| Threshold::parse(e).map_err(anyhow::Error::from))
        .collect()
}

/// Prints summaries, writes JSON, checks thresholds and exits non-zero when the run was
/// interrupted, no request of a run succeeded, or a threshold failed (in that order).
fn finish(ms: &[Measurement], out: &OutputArgs, ran: Ran) -> Result<()> {
    let interrupted = ran == Ran::Interrupted;
    let thresholds = parse_thresholds(&out.fail_if)?;
    if let Some(path) = &out.json {
        let text = measurements_json(ms);
        if path.as_os_str() == "-" {
            println!("{text}");
        } else {
            std::fs::write(path, text + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    if let Some(path) = &out.summary_export {
        let [m] = ms else {
            bail!(
                "--summary-export writes one run's summary; this gave {} measurements (e.g. one per redis-benchmark test): write them with --json instead",
                ms.len()
            );
        };
        let text = serde_json::to_string_pretty(&perfpilot_drive::k6_summary(m, &thresholds))?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let to_stdout = out.json.as_ref().is_none_or(|p| p.as_os_str() != "-");
    if !out.quiet {
        for m in ms {
            let s = render_summary(m);
            if to_stdout {
                print!("{s}");
            } else {
                eprint!("{s}");
            }
        }
        if interrupted {
            eprintln!("interrupted: the summary covers the part of the run before Ctrl-C");
        }
    }
    let verdict = Verdict::check(&thresholds, ms);
    for o in &verdict.outcomes {
        eprintln!("{o}");
    }
    if interrupted {
        std::process::exit(EXIT_INTERRUPTED);
    }
    if ran == Ran::Drove || ran == Ran::LostWorker {
        let failed: Vec<String> = ms.iter().filter_map(none_succeeded).collect();
        if !failed.is_empty() {
            for why in &failed {
                eprintln!("error: {why}");
            }
            std::process::exit(EXIT_NONE_SUCCEEDED);
        }
    }
    if !verdict.passed() {
        std::process::exit(EXIT_THRESHOLD);
    }
    if ran == Ran::LostWorker {
        eprintln!(
            "error: a worker was lost during the run (see above); the merged result covers the rest"
        );
        std::process::exit(EXIT_WORKER_LOST);
    }
    Ok(())
}
