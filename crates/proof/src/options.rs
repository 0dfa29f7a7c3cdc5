//! The harness's command line: typed options for `run`, `summarize` and the memcached load.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};

/// A duration: `90s`, `2m`, `1m30s`, or a bare number of seconds.
pub fn duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.trim().parse::<f64>()
        && secs >= 0.0
        && secs.is_finite()
    {
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{e} (give e.g. 30s, 2m or a number of seconds)"))
}

/// Proves (or disproves) perfpilot on real servers: each server under its own benchmark tool, in
/// every configuration ("cell"), in alternating rounds, with the throughput ratio to the untuned
/// machine and its 95 % interval. Must run as root: cells change global kernel settings (every one
/// is restored after its cell, also on Ctrl-C or a panic).
#[derive(Parser, Debug)]
#[command(name = "perfpilot-proof", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The harness's commands.
#[derive(Subcommand, Debug)]
// Parsed once at start: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the rounds and print the table (results are appended to a JSON-lines file as each
    /// cell ends).
    Run(RunArgs),
    /// Print the table of a results file (of a finished or partial run).
    Summarize(SummarizeArgs),
    /// The built-in memcached load (text protocol): used by the harness, printed as a
    /// Measurement JSON.
    #[command(hide = true)]
    MemcachedLoad(MemcachedLoadArgs),
}

/// A server of the proof.
#[derive(
    ValueEnum, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "kebab-case")]
pub enum ServerName {
    /// PostgreSQL 15, `pgbench -S` (read-only).
    Postgres,
    /// PostgreSQL 15, pgbench's read-write `tpcb-like` script.
    PostgresRw,
    /// Redis, `redis-benchmark -t get` over a dataset of several GB.
    Redis,
    /// memcached, the harness's own get/set load over a dataset of several GB.
    Memcached,
    /// nginx serving a small static file with wrk (the server where nothing should help).
    Nginx,
    /// workloads/jvmcache: a JVM service with a large heap, loaded with wrk.
    Jvm,
}

impl ServerName {
    /// Every server, in the order the table lists them.
    pub const ALL: [ServerName; 6] = [
        ServerName::Postgres,
        ServerName::PostgresRw,
        ServerName::Redis,
        ServerName::Memcached,
        ServerName::Nginx,
        ServerName::Jvm,
    ];

    /// The server's process name, as the daemon names its workload.
    pub fn process(self) -> &'static str {
        match self {
            ServerName::Postgres | ServerName::PostgresRw => "postgres",
            ServerName::Redis => "redis-server",
            ServerName::Memcached => "memcached",
            ServerName::Nginx => "nginx",
            ServerName::Jvm => "java",
        }
    }

    /// The name on the command line and in the results.
    pub fn name(self) -> &'static str {
        match self {
            ServerName::Postgres => "postgres",
            ServerName::PostgresRw => "postgres-rw",
            ServerName::Redis => "redis",
            ServerName::Memcached => "memcached",
            ServerName::Nginx => "nginx",
            ServerName::Jvm => "jvm",
        }
    }
}

/// A configuration a server runs in.
#[derive(
    ValueEnum, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "kebab-case")]
pub enum CellName {
    /// The machine as found.
    Untuned,
    /// THP `enabled = always` from before the server starts.
    ThpAlways,
    /// PostgreSQL's own `huge_pages = on` with reserved huge pages (PostgreSQL only).
    Expert,
    /// Debian's numad running.
    Numad,
    /// Debian's tuned with the `throughput-performance` profile.
    Tuned,
    /// The perfpilot daemon with an empty configuration.
    Perfpilot,
}

impl CellName {
    /// Every cell, in the order the table lists them.
    pub const ALL: [CellName; 6] = [
        CellName::Untuned,
        CellName::ThpAlways,
        CellName::Expert,
        CellName::Numad,
        CellName::Tuned,
        CellName::Perfpilot,
    ];

    /// The name on the command line and in the results.
    pub fn name(self) -> &'static str {
        match self {
            CellName::Untuned => "untuned",
            CellName::ThpAlways => "thp-always",
            CellName::Expert => "expert",
            CellName::Numad => "numad",
            CellName::Tuned => "tuned",
            CellName::Perfpilot => "perfpilot",
        }
    }

    /// Whether the cell means anything for `server` (the expert's setting is PostgreSQL's).
    pub fn applies_to(self, server: ServerName) -> bool {
        self != CellName::Expert || matches!(server, ServerName::Postgres | ServerName::PostgresRw)
    }
}

/// `SERVER=DURATION`, as `--warmup-for` takes it.
fn server_duration(s: &str) -> Result<(ServerName, Duration), String> {
    let (server, d) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: give SERVER=DURATION, e.g. postgres=150s"))?;
    let server = ServerName::from_str(server.trim(), true).map_err(|_| {
        let names: Vec<&str> = ServerName::ALL.iter().map(|s| s.name()).collect();
        format!(
            "`{server}` is not a server of the proof (one of {})",
            names.join(", ")
        )
    })?;
    Ok((server, duration(d)?))
}

impl RunArgs {
    /// The warm-up load of `server`: its own from `--warmup-for`, else `--warmup`.
    pub fn warmup_of(&self, server: ServerName) -> Duration {
        self.warmup_for
            .iter()
            .rev()
            .find(|(s, _)| *s == server)
            .map_or(self.warmup, |(_, d)| *d)
    }
}

/// Options of `perfpilot-proof run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Servers to prove, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "postgres,postgres-rw,redis,memcached,nginx,jvm"
    )]
    pub servers: Vec<ServerName>,
    /// Cells (configurations), comma-separated; `untuned` is the baseline of every ratio.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "untuned,thp-always,expert,numad,tuned,perfpilot"
    )]
    pub cells: Vec<CellName>,
    /// Rounds: in each, every cell of every server runs once, in an order rotated per round.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Load before the measured window (the daemon has this time to act).
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub warmup: Duration,
    /// A server's own warm-up, overriding --warmup for it: `postgres=150s` (repeatable). The
    /// daemon judges PostgreSQL over 8 s windows, so it needs longer than servers read per scan.
    #[arg(long = "warmup-for", value_name = "SERVER=DURATION", value_parser = server_duration)]
    pub warmup_for: Vec<(ServerName, Duration)>,
    /// The measured load.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub measure: Duration,
    /// Quiet time between a server's start (and prewarm) and its load.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub settle: Duration,
    /// In the perfpilot cell, the warm-up goes on (in 20 s loads) while the daemon has a trial
    /// running, up to this much longer, so that the measured window shows what it decided
    /// rather than a trial half done (a daemon runs for days; the cell lasts minutes). `0s`:
    /// the fixed warm-up only. A noisy signal takes up to `max_windows` (30) windows a side:
    /// PostgreSQL's 8 s windows then need 8 minutes.
    #[arg(long, default_value = "12m", value_parser = duration)]
    pub decide_within: Duration,
    /// Seed of the round orders (a resumed run takes the seed of its file).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Results file (JSON lines), appended as each cell ends [default: proof-<time>.jsonl].
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Continue the run recorded in FILE: cells already measured there are skipped, new ones
    /// are appended to it.
    #[arg(long, value_name = "FILE", conflicts_with = "out")]
    pub resume: Option<PathBuf>,
    /// Working directory for data and logs (kept, and prepared data reused, when given)
    /// [default: a temporary directory removed at exit].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Install missing servers, load tools, numad and tuned with apt-get.
    #[arg(long)]
    pub install: bool,
    /// The perfpilot binary [default: next to this one, else on PATH].
    #[arg(long, value_name = "FILE")]
    pub perfpilot: Option<PathBuf>,
    /// Write the table into this Markdown file between its proof markers (e.g. docs/proofs.md).
    #[arg(long, value_name = "FILE")]
    pub write_doc: Option<PathBuf>,
    /// Data and load sizes.
    #[command(flatten)]
    pub sizes: Sizes,
}

/// Sizes of the servers' data and load.
#[derive(Args, Debug, Clone, Serialize, Deserialize)]
pub struct Sizes {
    /// pgbench scale (100 ≈ 1.5 GB of tables).
    #[arg(long, default_value_t = 100)]
    pub pg_scale: u32,
    /// PostgreSQL's shared_buffers.
    #[arg(long, default_value = "2GB")]
    pub pg_shared_buffers: String,
    /// pgbench clients.
    #[arg(long, default_value_t = 4)]
    pub pg_clients: u32,
    /// Redis keys (values of --redis-value bytes each).
    #[arg(long, default_value_t = 3_000_000)]
    pub redis_keys: u64,
    /// Redis value size, bytes.
    #[arg(long, default_value_t = 1000)]
    pub redis_value: usize,
    /// memcached keys (values of --memcached-value bytes each).
    #[arg(long, default_value_t = 3_000_000)]
    pub memcached_keys: u64,
    /// memcached value size, bytes.
    #[arg(long, default_value_t = 1000)]
    pub memcached_value: usize,
    /// The JVM service's table, MiB (its heap is this plus 1 GiB).
    #[arg(long, default_value_t = 3072)]
    pub jvm_table_mib: u64,
}

/// Options of `perfpilot-proof summarize`.
#[derive(Args, Debug)]
pub struct SummarizeArgs {
    /// The results file (JSON lines) of a run.
    pub file: PathBuf,
    /// Write the table into this Markdown file between its proof markers.
    #[arg(long, value_name = "FILE")]
    pub write_doc: Option<PathBuf>,
}

/// Options of the built-in memcached load.
#[derive(Args, Debug, Clone)]
pub struct MemcachedLoadArgs {
    /// The server, host:port.
    #[arg(long)]
    pub addr: String,
    /// Keys to spread requests over (`key:N`, N below this).
    #[arg(long)]
    pub keys: u64,
    /// Value size of sets, bytes.
    #[arg(long, default_value_t = 1000)]
    pub value: usize,
    /// Connections, each on its own thread, one request in flight.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// Share of requests that are sets (the rest are gets).
    #[arg(long, default_value_t = 0.1)]
    pub set_ratio: f64,
    /// How long to run; `0s` with --populate stores every key once instead.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub duration: Duration,
    /// Store every key once (the dataset) and exit.
    #[arg(long)]
    pub populate: bool,
    /// Where to write the Measurement JSON (`-` for stdout).
    #[arg(long, default_value = "-")]
    pub json: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let cli = Cli::try_parse_from(["perfpilot-proof", "run"].iter().chain(args))?;
        match cli.command {
            Command::Run(a) => Ok(a),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn a_server_warm_up_overrides_the_common_one_only_for_that_server() {
        let a = run_args(&["--warmup", "40s", "--warmup-for", "postgres=150s"]).unwrap();
        assert_eq!(a.warmup_of(ServerName::Postgres), Duration::from_secs(150));
        assert_eq!(a.warmup_of(ServerName::PostgresRw), Duration::from_secs(40));
        assert_eq!(a.warmup_of(ServerName::Redis), Duration::from_secs(40));
    }

    #[test]
    fn an_unknown_server_in_warmup_for_is_refused_with_the_names_it_takes() {
        let e = run_args(&["--warmup-for", "oracle=10s"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`oracle` is not a server of the proof"), "{e}");
        assert!(e.contains("postgres-rw"), "{e}");
        let e = run_args(&["--warmup-for", "postgres"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("give SERVER=DURATION"), "{e}");
    }
}
