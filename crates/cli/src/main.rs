//! The `perfpilot` binary: argument parsing and printing, nothing else.
//!
//! Every subcommand lives in its own module under `cmd/` and calls into the library crates
//! (`observe`, `store`, `model`, `drive`, …), which hold the logic.

use clap::{Parser, Subcommand};

mod cmd;
mod fmt;

/// The exit status of a command that found nothing to read at the path it was given: no store,
/// or no daemon state (sysexits' `EX_NOINPUT`). Commands that only read create nothing.
const EXIT_NOTHING_THERE: i32 = 66;

/// The exit statuses, in `--help`.
const EXIT_HELP: &str = "\
Exit status:
  0   done
  1   failed; the message says why and what to do
  2   the command line is wrong
  66  nothing there: no store (or daemon state) at the path given. Commands that only read
      (status, tunables without -o, dump, study list|report|replay|compare) create nothing.
  `drive` adds its own: 3 when a --fail-if threshold fails, 130 after Ctrl-C.";

/// perfpilot: an autonomous performance optimizer and performance-study toolkit for Linux servers.
#[derive(Parser)]
#[command(
    name = "perfpilot",
    version,
    about,
    long_about = None,
    propagate_version = true,
    after_help = EXIT_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Best-practice checks: each finding with its evidence, the command that applies it and
    /// how to verify it (read-only).
    #[command(after_help = cmd::advise::EXIT_HELP)]
    Advise(cmd::advise::AdviseArgs),
    /// Show the machine's topology: NUMA nodes, LLC domains, cores, SMT threads (like `lssrad -av`).
    Topology(cmd::topology::TopologyArgs),
    /// A live view of CPUs, processes, threads, memory placement, huge pages, disks, network, PSI.
    Observe(cmd::observe::ObserveArgs),
    /// The autonomous optimizer: watch workloads, apply, verify, keep or revert.
    Daemon(cmd::daemon::DaemonArgs),
    /// What the optimizer sees and did: workloads, trials, actions with their evidence.
    #[command(after_help = EXIT_HELP)]
    Status(cmd::daemon::StatusArgs),
    /// Undo the optimizer's actions from the journal (the daemon must be stopped).
    Revert(cmd::daemon::RevertArgs),
    /// List or set the optimizer's tunables (persisted).
    #[command(after_help = EXIT_HELP)]
    Tunables(cmd::daemon::TunablesArgs),
    /// Append samples to the embedded store at a fixed interval.
    Record(cmd::record::RecordArgs),
    /// Replay recorded samples as rates (JSON, CSV or OpenMetrics).
    #[command(after_help = EXIT_HELP)]
    Dump(cmd::dump::DumpArgs),
    /// Benchmarks that print figures (`bench sample`), and the synthetic load they use.
    Bench(cmd::bench::BenchArgs),
    /// Queueing-network capacity models: solve, fit, predict, validate.
    Model(cmd::model::ModelArgs),
    /// Drive load (closed or open loop) and measure it, or adapt another driver's results.
    Drive(cmd::drive::DriveArgs),
    /// Configuration studies: validate, run (racing, confirmation), scale, report.
    Study(Box<cmd::study::StudyArgs>),
    /// Capacity runs: sweep a multi-tier deployment, fit a queueing model from the lowest
    /// loads, check its predictions at every other load and scale-out, and report.
    Capacity(cmd::capacity::CapacityArgs),
    /// The fleet's verdicts and daemons, read from the Prometheus that scrapes them.
    Fleet(cmd::fleet::FleetArgs),
    /// A private CA and certificates for mutual TLS (workers, coordinators, the exporter).
    Certs(cmd::certs::CertsArgs),
    /// Man pages and shell completions from this CLI definition (for packaging).
    #[command(hide = true)]
    Generate(cmd::generate::GenerateArgs),
}

fn main() {
    let cli = Cli::parse();
    // A reader that closes the pipe ends a printing command quietly; the daemon ignores it, and
    // so do the workers and coordinators, whose sockets and ssh pipes a peer may close (a
    // write then fails with an error that names the peer).
    let peers = match &cli.command {
        Command::Drive(a) => a.talks_to_peers(),
        Command::Study(a) => a.talks_to_peers(),
        _ => false,
    };
    if !matches!(cli.command, Command::Daemon(_)) && !peers {
        perfpilot_sys::signal::end_on_closed_pipe();
    }
    let Err(e) = run(cli) else {
        return;
    };
    // A closed pipe (`perfpilot dump … | head`) is the reader's choice, not an error.
    if e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    }) {
        return;
    }
    // The message and its causes, without the backtrace anyhow captures when RUST_BACKTRACE
    // is set: these are errors in the input or the machine's state, each saying what to do;
    // a bug panics, and a panic still prints its backtrace.
    eprintln!("Error: {e}");
    for cause in e.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
    std::process::exit(if nothing_there(&e) {
        EXIT_NOTHING_THERE
    } else {
        1
    });
}

/// Whether `e` says there was nothing to read at the path given: no store, or a state directory
/// no daemon has used (see [`EXIT_NOTHING_THERE`]).
fn nothing_there(e: &anyhow::Error) -> bool {
    use perfpilot_optimize::admin::AdminError;
    e.chain().any(|c| {
        c.downcast_ref::<perfpilot_store::Error>()
            .is_some_and(perfpilot_store::Error::is_nothing_there)
            || c.downcast_ref::<AdminError>().is_some_and(|a| match a {
                AdminError::NeverStarted { .. } | AdminError::NoState { .. } => true,
                AdminError::Store(s) => s.is_nothing_there(),
                _ => false,
            })
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Advise(a) => cmd::advise::run(a),
        Command::Topology(a) => cmd::topology::run(a),
        Command::Observe(a) => cmd::observe::run(a),
        Command::Daemon(a) => cmd::daemon::run_daemon(a),
        Command::Status(a) => cmd::daemon::run_status(a),
        Command::Revert(a) => cmd::daemon::run_revert(a),
        Command::Tunables(a) => cmd::daemon::run_tunables(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Dump(a) => cmd::dump::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Model(args) => cmd::model::run(args),
        Command::Drive(args) => cmd::drive::run(args),
        Command::Study(args) => cmd::study::run(*args),
        Command::Capacity(args) => cmd::capacity::run(args),
        Command::Fleet(a) => cmd::fleet::run(a),
        Command::Certs(a) => cmd::certs::run(a),
        Command::Generate(a) => cmd::generate::run(a),
    }
}
