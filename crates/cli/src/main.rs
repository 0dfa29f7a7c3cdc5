//! The `perfpilot` binary: argument parsing and printing, nothing else.
//!
//! Every subcommand lives in its own module under `cmd/` and calls into the
//! library crates (`observe`, `store`, `model`, `drive`, …), which hold the logic.

use clap::{Parser, Subcommand};

mod cmd;

/// perfpilot: an autonomous performance optimizer and performance-study toolkit for Linux servers.
#[derive(Parser)]
#[command(name = "perfpilot", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Drive load (closed or open loop) and measure it, or adapt another driver's results.
    Drive(cmd::drive::DriveArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Drive(args) => cmd::drive::run(args),
    }
}
