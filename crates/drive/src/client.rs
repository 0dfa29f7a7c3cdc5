//! Targets (parsed and resolved once, before a run) and the kinds of request errors.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::error::{DriveError, invalid};

/// A parsed `http://host:port/path` or `https://…` target.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub url: String,
    pub addr: SocketAddr,
    pub host_header: String,
    pub path: String,
    /// `https://`: TLS first.
    pub tls: bool,
    /// The host without port or brackets: the TLS server name (SNI) and certificate name.
    pub host: String,
}

impl Target {
    /// Parses and resolves a URL (resolution happens once, before the run).
    pub fn parse(url: &str) -> Result<Self, DriveError> {
        let bad = |reason: &str| invalid("target URL", url, reason.to_string());
        let (rest, tls) = if let Some(r) = url.strip_prefix("http://") {
            (r, false)
        } else if let Some(r) = url.strip_prefix("https://") {
            (r, true)
        } else {
            return Err(bad("expected http://host[:port]/path or https://…"));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('/') => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(bad("has no host (user info is not supported)"));
        }
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(bad("the path contains spaces or control characters"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("unclosed [ in the host"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(bad("unexpected text after the IPv6 host")),
            };
            (h, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port: u16 = match port {
            Some(p) => p
                .parse()
                .map_err(|_| bad("the port is not a number 0-65535"))?,
            None if tls => 443,
            None => 80,
        };
        if host.is_empty() || host.bytes().any(|b| b <= b' ' || b == b'/' || b == 0x7f) {
            return Err(bad("has no valid host"));
        }
        let addr = (host, port)
            .to_socket_addrs()
            .map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?
            .next()
            .ok_or_else(|| bad(&format!("{host} resolves to no address")))?;
        Ok(Target {
            url: url.to_string(),
            addr,
            host_header: authority.to_string(),
            path,
            tls,
            host: host.to_string(),
        })
    }
}

/// What went wrong with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrKind {
    /// The connection could not be established (refused, unreachable), with the OS's reason.
    Connect(io::ErrorKind),
    /// No complete response within the timeout.
    Timeout,
    /// The server reset or closed the connection mid-exchange.
    Reset,
    /// Another I/O error, with the OS's reason.
    Io(io::ErrorKind),
    /// The response was not valid HTTP/1.1 (or HTTP/2 framing).
    Http,
    /// The TLS handshake failed: the connection never carried a request.
    Tls(TlsFailure),
}

/// Why a TLS handshake failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsFailure {
    /// The server's certificate was not trusted (unknown issuer, expired, wrong name).
    Certificate,
    /// The server sent an alert (it refused our protocol versions, ciphers or ALPN).
    Alert,
    /// The server closed the connection during the handshake or spoke something that is not TLS.
    Protocol,
}

impl ErrKind {
    pub fn name(self) -> &'static str {
        match self {
            ErrKind::Connect(_) => "connect",
            ErrKind::Timeout => "timeout",
            ErrKind::Reset => "reset",
            ErrKind::Io(_) => "io",
            ErrKind::Http => "http",
            ErrKind::Tls(_) => "tls",
        }
    }

    /// Whether the connection is gone after this error, so that the next attempt reconnects
    /// (a timeout already waited the whole timeout, so it is not one of them).
    pub fn reconnects(self) -> bool {
        !matches!(self, ErrKind::Timeout)
    }

    /// One line for people: what went wrong with a request to `target` and what to check.
    pub fn describe(self, target: &Target, timeout: Duration) -> String {
        match self {
            ErrKind::Connect(io::ErrorKind::ConnectionRefused) => {
                format!("connection refused by {}: is the server up?", target.addr)
            }
            ErrKind::Connect(io::ErrorKind::AddrNotAvailable) => format!(
                "cannot connect to {}: no local port is free (fewer users or connections?)",
                target.addr
            ),
            ErrKind::Connect(k) => format!(
                "cannot connect to {}: {}: is the address right and reachable?",
                target.addr,
                io::Error::from(k)
            ),
            ErrKind::Timeout => format!(
                "no complete response from {} within the {} timeout",
                target.url,
                perfpilot_units::duration(timeout)
            ),
            ErrKind::Reset => format!(
                "{} closed the connection before its response was complete",
                target.url
            ),
            ErrKind::Io(k) => format!("I/O error with {}: {}", target.url, io::Error::from(k)),
            ErrKind::Http => format!("{} answered with something that is not HTTP", target.url),
            ErrKind::Tls(TlsFailure::Certificate) => format!(
                "TLS handshake with {} failed: its certificate is not trusted (a self-signed \
                 test server? use --insecure, or --cacert FILE)",
                target.addr
            ),
            ErrKind::Tls(TlsFailure::Alert) => format!(
                "TLS handshake with {} failed: the server refused it with an alert (TLS version, \
                 ciphers or ALPN it does not accept)",
                target.addr
            ),
            ErrKind::Tls(TlsFailure::Protocol) => format!(
                "TLS handshake with {} failed: the server closed it or does not speak TLS on \
                 this port (http:// instead of https://?)",
                target.addr
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let t = Target::parse("http://127.0.0.1:8080/score/x?y=1").unwrap();
        assert_eq!(t.addr.port(), 8080);
        assert_eq!(t.host_header, "127.0.0.1:8080");
        assert_eq!(t.path, "/score/x?y=1");
        let t = Target::parse("http://127.0.0.1").unwrap();
        assert_eq!((t.addr.port(), t.path.as_str()), (80, "/"));
        let t = Target::parse("http://[::1]:9/").unwrap();
        assert!(t.addr.is_ipv6());
        let t = Target::parse("https://localhost/x").unwrap();
        assert_eq!(
            (t.addr.port(), t.tls, t.host.as_str()),
            (443, true, "localhost")
        );
        for bad in [
            "ftp://a/",
            "http://",
            "http://a:99999/",
            "http://a/b c",
            "not a url",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_refused_connection_says_which_address_and_to_check_the_server() {
        let t = Target::parse("http://127.0.0.1:9/x").unwrap();
        let refused = ErrKind::Connect(io::ErrorKind::ConnectionRefused);
        assert_eq!(
            refused.describe(&t, Duration::from_secs(10)),
            "connection refused by 127.0.0.1:9: is the server up?"
        );
        let timeout = ErrKind::Timeout.describe(&t, Duration::from_millis(1500));
        assert_eq!(
            timeout,
            "no complete response from http://127.0.0.1:9/x within the 1.5 s timeout"
        );
        assert!(refused.reconnects() && !ErrKind::Timeout.reconnects());
    }
}
