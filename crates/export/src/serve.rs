//! The HTTP endpoint: `/metrics` (Prometheus text or OpenMetrics, by the `Accept` header) and
//! `/status` (the `status.json` document), served by hyper on a thread of its own (a
//! single-threaded tokio runtime) from pages the daemon replaces after each scan, so a scrape
//! during a scan gets the last scan's figures at once and never waits for the scan.
//!
//! Who may read: what the web-config file says ([`WebConfig`]: TLS, client certificates,
//! basic-auth users with bcrypt hashes), and `/status` — process ids, command-line signatures —
//! only to clients on loopback unless [`Access::status_remote`] is set. A client gets
//! [`HANDSHAKE`] for its TLS handshake and its request's headers; at most [`CONNECTIONS`]
//! connections are served at once, more are closed at once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use tracing::debug;

use crate::ExportError;
use crate::format::Format;
use crate::webconfig::WebConfig;

/// The longest a client may take over its TLS handshake, and over its request's headers.
pub const HANDSHAKE: Duration = Duration::from_secs(10);
/// Connections served at once.
pub const CONNECTIONS: usize = 64;

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

/// Who may read what.
#[derive(Debug, Default)]
pub struct Access {
    /// TLS and basic auth (`--web-config`); none: plain HTTP, no password.
    pub web: WebConfig,
    /// Serve `/status` to clients off loopback too (`status_remote = true`).
    pub status_remote: bool,
}

/// The running endpoint (stopped when dropped).
pub struct Endpoint {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
    tls: bool,
}

fn listen_err(addr: SocketAddr, why: impl std::fmt::Display) -> ExportError {
    ExportError::Listen {
        addr,
        why: why.to_string(),
    }
}

impl Endpoint {
    /// Listens on `addr` and serves `pages` as `access` allows.
    pub fn start(
        addr: SocketAddr,
        pages: Arc<RwLock<Pages>>,
        access: Access,
    ) -> Result<Endpoint, ExportError> {
        let listener = std::net::TcpListener::bind(addr).map_err(|e| listen_err(addr, e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| listen_err(addr, e))?;
        let bound = listener.local_addr().unwrap_or(addr);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| listen_err(addr, format!("cannot start its runtime: {e}")))?;
        let tls = access.web.tls.is_some();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let state = Arc::new(State { pages, access });
        let thread = std::thread::Builder::new()
            .name("perfpilot-metrics".into())
            .spawn(move || runtime.block_on(accept(listener, state, stopped)))
            .map_err(|e| listen_err(addr, format!("cannot start its thread: {e}")))?;
        Ok(Endpoint {
            stop: Some(stop),
            thread: Some(thread),
            addr: bound,
            tls,
        })
    }

    /// The address it listens on (with the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct State {
    pages: Arc<RwLock<Pages>>,
    access: Access,
}

async fn accept(
    listener: std::net::TcpListener,
    state: Arc<State>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("metrics: cannot serve: {e}");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    let tls = state
        .access
        .web
        .tls
        .clone()
        .map(tokio_rustls::TlsAcceptor::from);
    loop {
        let (sock, peer) = tokio::select! {
            _ = &mut stopped => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    debug!("metrics: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!("metrics: {peer}: closed, {CONNECTIONS} connections are being served");
            continue;
        };
        let (state, tls) = (state.clone(), tls.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tls {
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(sock)).await {
                        Ok(Ok(s)) => http(s, peer, state).await,
                        Ok(Err(e)) => debug!("metrics: {peer}: TLS refused: {e}"),
                        Err(_) => debug!("metrics: {peer}: no TLS handshake within 10 s"),
                    }
                }
                None => http(sock, peer, state).await,
            }
        });
    }
}

async fn http<S>(io: S, peer: SocketAddr, state: Arc<State>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let resp = answer(&req, peer, &state);
        async move { Ok::<_, Infallible>(resp) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE)
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(e) = served {
        debug!("metrics: {peer}: {e}");
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    typed(
        status,
        Bytes::from_static(body.as_bytes()),
        "text/plain; charset=utf-8",
    )
}

fn typed(status: StatusCode, body: Bytes, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Whether the request carries the credentials of a configured user (always, without users).
fn authorized(req: &Request<Incoming>, web: &WebConfig) -> bool {
    if web.users.is_empty() {
        return true;
    }
    let Some(value) = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(encoded) = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))
    else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
        return false;
    };
    let Ok(pair) = String::from_utf8(decoded) else {
        return false;
    };
    match pair.split_once(':') {
        Some((user, password)) => web.admits(user, password),
        None => false,
    }
}

fn answer(req: &Request<Incoming>, peer: SocketAddr, state: &State) -> Response<Full<Bytes>> {
    if !authorized(req, &state.access.web) {
        let mut r = text(
            StatusCode::UNAUTHORIZED,
            "401 Unauthorized: give a user and password of the web config's basic_auth_users\n",
        );
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"perfpilot\", charset=\"UTF-8\""),
        );
        return r;
    }
    if !matches!(req.method(), &Method::GET | &Method::HEAD) {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    let p = state.pages.read().unwrap_or_else(|e| e.into_inner());
    match req.uri().path() {
        "/metrics" => {
            let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
            let f = Format::negotiate(accept);
            let body = match f {
                Format::OpenMetrics => p.openmetrics.clone(),
                Format::Prometheus => p.prometheus.clone(),
            };
            typed(StatusCode::OK, Bytes::from(body), f.content_type())
        }
        "/status" if state.access.status_remote || peer.ip().is_loopback() => typed(
            StatusCode::OK,
            Bytes::from(p.status.clone()),
            "application/json",
        ),
        "/status" => text(
            StatusCode::FORBIDDEN,
            "403 Forbidden: /status (process ids, command lines) is served on loopback only; set status_remote = true in the daemon's config to serve it here\n",
        ),
        "/" => text(
            StatusCode::OK,
            "perfpilot daemon: /metrics (Prometheus text or OpenMetrics), /status (JSON)\n",
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics or /status\n",
        ),
    }
}
