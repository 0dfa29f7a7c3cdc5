//! The HTTP endpoint: `/metrics` (Prometheus text or OpenMetrics, by the `Accept` header) and
//! `/status` (the `status.json` document), served by `tiny_http` on a thread of its own from
//! pages the daemon replaces after each scan, so a scrape during a scan gets the last scan's
//! figures at once and never waits for the scan.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

use tiny_http::{Header, Method, Request, Response, Server};
use tracing::debug;

use crate::ExportError;
use crate::format::Format;

/// What the endpoint serves, replaced whole after each scan.
#[derive(Debug, Clone, Default)]
pub struct Pages {
    /// `/metrics` in OpenMetrics.
    pub openmetrics: String,
    /// `/metrics` in the Prometheus text format.
    pub prometheus: String,
    /// `/status`: JSON.
    pub status: String,
}

/// The running endpoint (stopped when dropped).
pub struct Endpoint {
    server: Arc<Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Endpoint {
    /// Listens on `addr` and serves `pages`.
    pub fn start(addr: SocketAddr, pages: Arc<RwLock<Pages>>) -> Result<Endpoint, ExportError> {
        let server = Server::http(addr).map_err(|e| ExportError::Listen {
            addr,
            why: e.to_string(),
        })?;
        let bound = server.server_addr().to_ip().unwrap_or(addr);
        let server = Arc::new(server);
        let s2 = server.clone();
        let thread = std::thread::Builder::new()
            .name("perfpilot-metrics".into())
            .spawn(move || {
                for req in s2.incoming_requests() {
                    answer(req, &pages);
                }
            })
            .map_err(|e| ExportError::Listen {
                addr,
                why: format!("cannot start its thread: {e}"),
            })?;
        Ok(Endpoint {
            server,
            thread: Some(thread),
            addr: bound,
        })
    }

    /// The address it listens on (with the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A response with its content type (our own constant types always make a valid header).
fn typed<R: std::io::Read>(mut r: Response<R>, content_type: &str) -> Response<R> {
    if let Ok(h) = Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes()) {
        r.add_header(h);
    }
    r
}

fn answer(req: Request, pages: &RwLock<Pages>) {
    if !matches!(req.method(), Method::Get | Method::Head) {
        let _ = req.respond(Response::from_string("only GET\n").with_status_code(405));
        return;
    }
    let path = req.url().split('?').next().unwrap_or_default().to_string();
    let p = pages.read().unwrap_or_else(|e| e.into_inner());
    let resp = match path.as_str() {
        "/metrics" => {
            let accept = req
                .headers()
                .iter()
                .find(|h| h.field.equiv("Accept"))
                .map(|h| h.value.as_str().to_string());
            let f = Format::negotiate(accept.as_deref());
            let body = match f {
                Format::OpenMetrics => p.openmetrics.clone(),
                Format::Prometheus => p.prometheus.clone(),
            };
            typed(Response::from_string(body), f.content_type())
        }
        "/status" => typed(Response::from_string(p.status.clone()), "application/json"),
        "/" => typed(
            Response::from_string(
                "perfpilot daemon: /metrics (Prometheus text or OpenMetrics), /status (JSON)\n",
            ),
            "text/plain; charset=utf-8",
        ),
        _ => Response::from_string("not found: try /metrics or /status\n").with_status_code(404),
    };
    drop(p);
    if let Err(e) = req.respond(resp) {
        debug!("metrics: answering {path}: {e}");
    }
}
