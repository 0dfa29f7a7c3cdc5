//! The `perfpilot` binary: argument parsing and printing, nothing else.
//!
//! Every subcommand lives in its own module under `cmd/` and calls into the library crates
//! (`observe`, `store`, `model`, `drive`, …), which hold the logic.

use clap::{Parser, Subcommand};

mod cmd;
mod fmt;

/// perfpilot: an autonomous performance optimizer and performance-study toolkit for Linux servers.
#[derive(Parser)]
#[command(name = "perfpilot", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the machine's topology: NUMA nodes, LLC domains, cores, SMT threads (like `lssrad -av`).
    Topology(cmd::topology::TopologyArgs),
    /// A live view of CPUs, processes, threads, memory placement, huge pages, disks, network, PSI.
    Observe(cmd::observe::ObserveArgs),
    /// Benchmarks that print figures (`bench sample`), and the synthetic load they use.
    Bench(cmd::bench::BenchArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Topology(a) => cmd::topology::run(a),
        Command::Observe(a) => cmd::observe::run(a),
        Command::Bench(a) => cmd::bench::run(a),
    }
}
