//! `scoring`: the reference real-time scoring service (see the library docs for the API).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use perfpilot_scoring::{Lookup, Service, ServiceConfig, serve};

/// Real-time scoring of PMML models over HTTP (POST /score/MODEL, GET /metrics).
#[derive(Parser, Debug)]
#[command(name = "scoring", version, about)]
struct Args {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Directory of NAME.pmml model files.
    #[arg(long, default_value = "examples/scoring/models")]
    models: PathBuf,
    /// Parsed models kept in memory; a model beyond it is parsed from disk again on each miss.
    #[arg(long, default_value_t = 300)]
    cache_size: usize,
    /// Worker threads serving requests (the study used 50 web container threads).
    #[arg(long, default_value_t = 50)]
    threads: usize,
    /// Echo the input fields in every response (the study's best practice is not to).
    #[arg(long)]
    echo_inputs: bool,
    /// PostgreSQL to look up after each score (libpq key=value form, e.g.
    /// "host=127.0.0.1 port=5432 user=postgres").
    #[arg(long)]
    db: Option<String>,
    /// Consecutive rows each lookup sums (the database's work per request).
    #[arg(long, default_value_t = 1000)]
    db_rows: i32,
    /// Connections to PostgreSQL (queries are pipelined on each).
    #[arg(long, default_value_t = 4)]
    db_connections: usize,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("scoring: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    if !args.models.is_dir() {
        return Err(format!(
            "model directory {} does not exist",
            args.models.display()
        ));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let service = Service::new(ServiceConfig {
        model_dir: args.models.clone(),
        cache_size: args.cache_size,
        echo_inputs: args.echo_inputs,
    });
    rt.block_on(async move {
        let service = Arc::new(match &args.db {
            Some(db) => {
                service.with_lookup(Lookup::connect(db, args.db_connections, args.db_rows).await?)
            }
            None => service,
        });
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot read the bound address: {e}"))?;
        println!(
            "scoring: listening on http://{addr} (models {}, cache {}, threads {}, echo {})",
            args.models.display(),
            args.cache_size,
            args.threads,
            args.echo_inputs
        );
        tokio::select! {
            r = serve(listener, service) => r.map_err(|e| format!("accept failed: {e}")),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}
