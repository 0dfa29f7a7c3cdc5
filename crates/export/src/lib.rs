//! The daemon seen from outside, on the engines operators already run: its live metrics on
//! `/metrics` (Prometheus text or OpenMetrics, by content negotiation) and its status on
//! `/status`, or the same text in a file for node_exporter's textfile collector; and the
//! fleet's verdicts read back from the Prometheus that scrapes every daemon.
//!
//! - `journal`: the daemon's actions and verdicts, kept current from the store;
//! - `families`: the metric families, built after each scan;
//! - `format`: OpenMetrics or the Prometheus text format, chosen by the `Accept` header;
//! - `serve`: the HTTP endpoint (on its own thread; a scrape never waits for a scan);
//! - `webconfig`: who may read it (the exporter toolkit's web-config file: TLS, basic auth);
//! - `textfile`: the textfile, replaced atomically;
//! - `publisher`: all of it, fed by the daemon after each scan;
//! - `fleet_status`: `perfpilot fleet status`, per workload signature × strategy.

pub mod families;
pub mod fleet_status;
pub mod format;
pub mod journal;
pub mod publisher;
pub mod serve;
pub mod textfile;
pub mod webconfig;

pub use families::TOP_SIGNATURES;
pub use publisher::Publisher;
pub use serve::Access;
pub use webconfig::{WebConfig, WebConfigError};

/// What can go wrong exporting.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The listen address is taken or not ours.
    #[error(
        "cannot listen on {addr}: {why} (is another daemon or exporter on that port? choose another with --listen or `listen =`)"
    )]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        why: String,
    },
    /// The textfile directory cannot be written.
    #[error("cannot write the textfile in {}: {source}", dir.display())]
    Textfile {
        /// The directory.
        dir: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
