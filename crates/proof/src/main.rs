//! `perfpilot-proof`: see the library's documentation and `perfpilot-proof --help`.

use anyhow::Result;
use clap::Parser;
use perfpilot_proof::options::{Cli, Command};
use perfpilot_proof::{memload, procs, run};

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(a) => {
            // Ctrl-C and SIGTERM end the current wait; the cell's guards then stop every process
            // and restore every setting before the harness exits.
            ctrlc::set_handler(|| {
                eprintln!("proof: stopping: restoring settings and stopping processes");
                procs::request_stop();
            })?;
            run::run(a)
        }
        Command::Summarize(a) => {
            println!("{}", run::summarize_file(&a.file, a.write_doc.as_deref())?);
            Ok(())
        }
        Command::MemcachedLoad(a) => memload::main(&a),
    }
}
