//! What the daemon publishes after each scan: the metric families and the status document,
//! to the HTTP endpoint and/or the textfile.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use perfpilot_optimize::counters::COUNTERS;
use perfpilot_optimize::cpu::CpuTime;
use perfpilot_optimize::daemon::Scanned;
use prometheus_client::metrics::histogram::Histogram;
use tracing::{info, warn};

use crate::ExportError;
use crate::families::{self, Figures};
use crate::format::to_prometheus;
use crate::journal::Journal;
use crate::serve::{Access, Endpoint, Pages};
use crate::textfile;

/// The publisher (the endpoint stops when it is dropped).
pub struct Publisher {
    journal: Journal,
    scans: Histogram,
    pages: Arc<RwLock<Pages>>,
    endpoint: Option<Endpoint>,
    textfile: Option<PathBuf>,
    textfile_failing: bool,
}

impl Publisher {
    /// Starts the endpoint on `listen`, readable as `access` says (a warning when that is not a
    /// loopback address and neither TLS nor a password guards it), and checks that the
    /// textfile directory can be written.
    pub fn start(
        listen: Option<SocketAddr>,
        textfile_dir: Option<PathBuf>,
        access: Access,
    ) -> Result<Publisher, ExportError> {
        let pages = Arc::new(RwLock::new(Pages::default()));
        let endpoint = match listen {
            Some(addr) => {
                let guarded = access.web.tls.is_some() || !access.web.users.is_empty();
                if !addr.ip().is_loopback() && !guarded {
                    warn!(
                        "metrics: listening on {addr}, which is not a loopback address, without TLS or a password: /metrics (workload names, command-line signatures) is open to whoever can reach it{}; give a web config (--web-config: TLS, basic auth), firewall it, or use 127.0.0.1",
                        if access.status_remote {
                            ", and so is /status (pids)"
                        } else {
                            ""
                        }
                    );
                }
                let e = Endpoint::start(addr, pages.clone(), access)?;
                info!(
                    "metrics: serving {}://{}/metrics and /status",
                    e.scheme(),
                    e.addr()
                );
                Some(e)
            }
            None => None,
        };
        if let Some(dir) = &textfile_dir {
            textfile::write(dir, "")?;
            info!(
                "metrics: writing {}",
                dir.join(textfile::FILE_NAME).display()
            );
        }
        Ok(Publisher {
            journal: Journal::default(),
            scans: families::scan_histogram(),
            pages,
            endpoint,
            textfile: textfile_dir,
            textfile_failing: false,
        })
    }

    /// The endpoint's address, when it listens.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.endpoint.as_ref().map(Endpoint::addr)
    }

    /// Publishes what a scan found.
    pub fn publish(&mut self, s: &Scanned) {
        self.journal.refresh(s.store);
        self.scans.observe(s.scan_s);
        let om = families::render(
            &Figures {
                status: s.file.status,
                effective_interval_s: s.file.effective_interval_s,
                configured_interval_s: s.configured_interval_s,
                cpu: CpuTime::now(),
                totals: COUNTERS.totals(),
            },
            &self.journal,
            &self.scans,
        );
        let prom = to_prometheus(&om);
        if let Some(dir) = &self.textfile {
            match textfile::write(dir, &prom) {
                Ok(_) => self.textfile_failing = false,
                Err(e) if !self.textfile_failing => {
                    warn!("metrics: {e}");
                    self.textfile_failing = true;
                }
                Err(_) => {}
            }
        }
        if self.endpoint.is_some() {
            let status = serde_json::to_string_pretty(s.file).unwrap_or_default();
            let mut p = self.pages.write().unwrap_or_else(|e| e.into_inner());
            *p = Pages {
                openmetrics: om,
                prometheus: prom,
                status,
            };
        }
    }
}
