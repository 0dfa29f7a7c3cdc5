//! One user's or lane's connection, whatever it speaks: HTTP/1.1 over TCP or TLS (the lean
//! client of `h1`), or HTTP/2 (the `h2` crate) over TLS when the server picks it by ALPN or over
//! TCP by prior knowledge. Each user keeps its own connection, as with HTTP/1.1, so that `users`
//! means the same number of connections whatever the protocol.

use std::sync::Arc;

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::client::{ErrKind, Target};
use crate::error::DriveError;
use crate::h1::{Conn, io_kind};
use crate::tls::{self, HttpVersion, TlsOptions};

/// What a run connects with: the TLS configuration when any target is `https://`.
pub(crate) struct Connector {
    tls: Option<TlsConnector>,
    /// The configuration `tls` was made from (the event loop drives rustls itself).
    config: Option<Arc<rustls::ClientConfig>>,
    http: HttpVersion,
}

impl Connector {
    /// Builds the TLS configuration once, when some target needs it.
    pub fn new(
        targets: &[Arc<Target>],
        http: HttpVersion,
        opts: &TlsOptions,
    ) -> Result<Self, DriveError> {
        let config = if targets.iter().any(|t| t.tls) {
            Some(tls::client_config(opts, http)?)
        } else {
            None
        };
        for t in targets.iter().filter(|t| t.tls) {
            tls::server_name(&t.host)?;
        }
        Ok(Connector {
            tls: config.clone().map(TlsConnector::from),
            config,
            http,
        })
    }

    /// The TLS client configuration, when some target is `https://`.
    pub fn tls_config(&self) -> Option<&Arc<rustls::ClientConfig>> {
        self.config.as_ref()
    }

    /// Connects to `target` and shakes hands.
    pub async fn connect(&self, target: &Target) -> Result<Link, ErrKind> {
        let tcp = TcpStream::connect(target.addr)
            .await
            .map_err(|e| ErrKind::Connect(e.kind()))?;
        let _ = tcp.set_nodelay(true);
        match (&self.tls, target.tls) {
            (Some(connector), true) => {
                // Checked in `new`; a name that fails here is a TLS failure of this connection.
                let name = tls::server_name(&target.host)
                    .map_err(|_| ErrKind::Tls(crate::client::TlsFailure::Protocol))?;
                let stream = connector
                    .connect(name, tcp)
                    .await
                    .map_err(|e| tls::handshake_failure(&e))?;
                if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                    Ok(Link::H2(H2Conn::handshake(stream).await?))
                } else {
                    Ok(Link::Tls(Box::new(Conn::new(stream))))
                }
            }
            _ if self.http == HttpVersion::Http2 => Ok(Link::H2(H2Conn::handshake(tcp).await?)),
            _ => Ok(Link::Plain(Conn::new(tcp))),
        }
    }
}

/// A connection ready for requests.
pub(crate) enum Link {
    /// HTTP/1.1 over TCP.
    Plain(Conn<TcpStream>),
    /// HTTP/1.1 over TLS.
    Tls(Box<Conn<TlsStream<TcpStream>>>),
    /// HTTP/2, over TLS or TCP.
    H2(H2Conn),
}

impl Link {
    /// Whether the server closed the connection (it must not be reused).
    pub fn closed(&self) -> bool {
        match self {
            Link::Plain(c) => c.closed,
            Link::Tls(c) => c.closed,
            Link::H2(c) => c.closed,
        }
    }

    /// Whether the connection speaks HTTP/2.
    pub fn is_h2(&self) -> bool {
        matches!(self, Link::H2(_))
    }
}

/// A request in HTTP/2's terms, built once per user when it does not change.
#[derive(Clone, Debug)]
pub(crate) struct H2Request {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
}

impl H2Request {
    /// The request for `path` on `target`'s server; `None` when a header does not fit
    /// HTTP/2's rules (the user then counts an `http` error per request, as a server would
    /// refuse it).
    pub fn new(
        target: &Target,
        path: &str,
        method: &str,
        headers: &[(String, String)],
    ) -> Option<Self> {
        let scheme = if target.tls { "https" } else { "http" };
        let uri = format!("{scheme}://{}{path}", target.host_header)
            .parse()
            .ok()?;
        let mut map = http::HeaderMap::new();
        for (k, v) in headers {
            map.append(
                http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).ok()?,
                http::HeaderValue::from_str(v).ok()?,
            );
        }
        Some(H2Request {
            method: http::Method::from_bytes(method.as_bytes()).ok()?,
            uri,
            headers: map,
        })
    }
}

/// One HTTP/2 connection; its frames are driven by a task of the same event loop.
pub(crate) struct H2Conn {
    send: h2::client::SendRequest<Bytes>,
    closed: bool,
}

fn h2_kind(e: &h2::Error) -> ErrKind {
    if let Some(io) = e.get_io() {
        io_kind(io)
    } else if e.is_go_away() || e.is_reset() || e.is_remote() {
        ErrKind::Reset
    } else {
        ErrKind::Http
    }
}

impl H2Conn {
    async fn handshake<S>(io: S) -> Result<H2Conn, ErrKind>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (send, conn) = h2::client::handshake(io).await.map_err(|e| h2_kind(&e))?;
        tokio::spawn(async move {
            // Ends when the server closes or every handle to the connection is dropped.
            let _ = conn.await;
        });
        Ok(H2Conn {
            send,
            closed: false,
        })
    }

    /// Sends one request (with `body`, if any) and reads its whole response; returns the status.
    pub async fn exchange(
        &mut self,
        req: &H2Request,
        body: Option<Bytes>,
        head_request: bool,
    ) -> Result<u16, ErrKind> {
        let result = self.exchange_inner(req, body, head_request).await;
        if result.is_err() {
            self.closed = true;
        }
        result
    }

    async fn exchange_inner(
        &mut self,
        req: &H2Request,
        body: Option<Bytes>,
        head_request: bool,
    ) -> Result<u16, ErrKind> {
        let mut request = http::Request::new(());
        *request.method_mut() = req.method.clone();
        *request.uri_mut() = req.uri.clone();
        *request.headers_mut() = req.headers.clone();
        self.send = self.send.clone().ready().await.map_err(|e| h2_kind(&e))?;
        let (response, mut stream) = self
            .send
            .send_request(request, body.is_none())
            .map_err(|e| h2_kind(&e))?;
        if let Some(b) = body {
            stream.send_data(b, true).map_err(|e| h2_kind(&e))?;
        }
        let response = response.await.map_err(|e| h2_kind(&e))?;
        let status = response.status().as_u16();
        if !head_request {
            let mut body = response.into_body();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.map_err(|e| h2_kind(&e))?;
                let _ = body.flow_control().release_capacity(chunk.len());
            }
        }
        Ok(status)
    }
}
