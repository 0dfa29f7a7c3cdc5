//! `filestore`: the reference content store (see the library docs for the routes).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use perfpilot_filestore::preload::preload;
use perfpilot_filestore::{Store, StoreConfig, serve};

/// A content store over HTTP: PUT/GET /docs/ID, GET /docs, GET /search?KEY=VALUE, GET /metrics.
#[derive(Parser, Debug)]
#[command(name = "filestore", version, about)]
struct Args {
    /// Directory of the document tree and (by default) the catalog; created if missing.
    #[arg(long)]
    dir: PathBuf,
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// The SQLite catalog (default DIR/catalog.sqlite).
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Worker threads serving requests (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// The largest document accepted, bytes (413 beyond).
    #[arg(long, default_value_t = 64 << 20)]
    max_doc_bytes: u64,
    /// Before listening, store generated documents doc-1 … doc-N (metadata dept and year), so
    /// that a study's every trial serves the same corpus.
    #[arg(long, default_value_t = 0, value_name = "N")]
    preload: u64,
    /// The size of each preloaded document, bytes.
    #[arg(long, default_value_t = 4096, value_name = "BYTES")]
    preload_bytes: usize,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("filestore: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    let config = StoreConfig {
        dir: args.dir.clone(),
        catalog: args.catalog.clone(),
        max_doc_bytes: args.max_doc_bytes,
    };
    let store = Store::open(&config).map_err(|e| e.to_string())?;
    if args.preload > 0 {
        let new = preload(&store, args.preload, args.preload_bytes)
            .map_err(|e| format!("preloading {} documents: {e}", args.preload))?;
        println!(
            "filestore: preloaded {} documents of {} bytes ({new} new)",
            args.preload, args.preload_bytes
        );
    }
    let store = Arc::new(store);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot read the bound address: {e}"))?;
        println!(
            "filestore: listening on http://{addr} (dir {})",
            args.dir.display()
        );
        tokio::select! {
            r = serve(listener, store) => r.map_err(|e| format!("accept failed: {e}")),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}
