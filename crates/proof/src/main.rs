//! `perfpilot-proof`: see the library's documentation and `perfpilot-proof --help`.

use std::process::ExitCode;

use clap::Parser;
use perfpilot_proof::options::{Cli, Command};
use perfpilot_proof::{memload, run, stop};

/// Exit code after Ctrl-C or SIGTERM (what was measured is in the results file).
const EXIT_INTERRUPTED: u8 = 130;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => {
            // Ctrl-C and SIGTERM end the current wait; the cell's guards then stop every process
            // and restore every setting before the harness exits.
            match ctrlc::set_handler(|| {
                eprintln!("proof: stopping: restoring settings and stopping processes");
                stop::request_stop();
            }) {
                Ok(()) => run::run(a),
                Err(e) => Err(anyhow::anyhow!("installing the Ctrl-C handler: {e}")),
            }
        }
        Command::Summarize(a) => {
            run::summarize_file(&a.file, a.write_doc.as_deref()).map(|t| println!("{t}"))
        }
        Command::MemcachedLoad(a) => memload::main(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) if stop::stopping() => {
            eprintln!("proof: interrupted; every setting was restored and every process stopped");
            ExitCode::from(EXIT_INTERRUPTED)
        }
        Err(e) => {
            eprintln!("perfpilot-proof: {e:#}");
            ExitCode::FAILURE
        }
    }
}
