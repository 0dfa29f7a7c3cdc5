//! A minimal HTTP/1.1 keep-alive client on hyper's connection API: one connection per virtual
//! user (or open-loop lane), no pool, no cross-thread hand-offs.

use std::net::{SocketAddr, ToSocketAddrs};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::{DriveError, invalid};

/// A parsed `http://host:port/path` target.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub url: String,
    pub addr: SocketAddr,
    pub host_header: String,
    pub path: String,
}

impl Target {
    /// Parses and resolves a URL (resolution happens once, before the run).
    pub fn parse(url: &str) -> Result<Self, DriveError> {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| invalid("target URL", url, format!("{e}")))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(invalid(
                    "target URL",
                    url,
                    "https is not supported; use http://",
                ));
            }
            _ => {
                return Err(invalid(
                    "target URL",
                    url,
                    "expected http://host[:port]/path",
                ));
            }
        }
        let host = uri
            .host()
            .ok_or_else(|| invalid("target URL", url, "has no host"))?;
        let port = uri.port_u16().unwrap_or(80);
        let host_for_resolve = host.trim_start_matches('[').trim_end_matches(']');
        let addr = (host_for_resolve, port)
            .to_socket_addrs()
            .map_err(|e| invalid("target URL", url, format!("cannot resolve {host}: {e}")))?
            .next()
            .ok_or_else(|| invalid("target URL", url, format!("{host} resolves to no address")))?;
        let host_header = match uri.port_u16() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        let path = uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".to_string());
        Ok(Target {
            url: url.to_string(),
            addr,
            host_header,
            path,
        })
    }
}

/// What went wrong with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrKind {
    /// The connection could not be established (refused, unreachable).
    Connect,
    /// No complete response within the timeout.
    Timeout,
    /// The server reset or closed the connection mid-exchange.
    Reset,
    /// Another I/O error.
    Io,
    /// The response was not valid HTTP/1.1.
    Http,
}

impl ErrKind {
    pub fn name(self) -> &'static str {
        match self {
            ErrKind::Connect => "connect",
            ErrKind::Timeout => "timeout",
            ErrKind::Reset => "reset",
            ErrKind::Io => "io",
            ErrKind::Http => "http",
        }
    }
}

pub(crate) type Sender = SendRequest<Full<Bytes>>;

/// Opens one keep-alive connection; its driver runs as a task on the current runtime.
pub(crate) async fn connect(target: &Target) -> Result<Sender, ErrKind> {
    let stream = TcpStream::connect(target.addr)
        .await
        .map_err(|_| ErrKind::Connect)?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| ErrKind::Connect)?;
    tokio::spawn(async move {
        // The connection ends when the server closes it or the sender is dropped; its error,
        // if any, surfaces on the request that was in flight.
        let _ = conn.await;
    });
    Ok(sender)
}

/// Sends one request and reads the whole response body; returns the status code.
pub(crate) async fn exchange(
    sender: &mut Sender,
    req: hyper::Request<Full<Bytes>>,
) -> Result<u16, ErrKind> {
    let resp = sender.send_request(req).await.map_err(classify)?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        frame.map_err(classify)?;
    }
    Ok(status)
}

fn classify(e: hyper::Error) -> ErrKind {
    if e.is_timeout() {
        return ErrKind::Timeout;
    }
    if e.is_parse() || e.is_parse_status() {
        return ErrKind::Http;
    }
    if e.is_incomplete_message() || e.is_closed() || e.is_canceled() {
        return ErrKind::Reset;
    }
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::UnexpectedEof => ErrKind::Reset,
                _ => ErrKind::Io,
            };
        }
        source = s.source();
    }
    ErrKind::Io
}
