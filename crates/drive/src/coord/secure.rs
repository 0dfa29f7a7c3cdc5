//! Mutual TLS for workers that listen (`study worker`, `drive --worker` with `--tls-cert`,
//! `--tls-key`, `--tls-ca`): the worker admits only a coordinator whose certificate its CA
//! signed, the coordinator only a worker whose certificate that CA signed for the name it
//! dialled. rustls with the ring provider, TLS 1.2 and 1.3; certificates from `perfpilot certs`
//! ([`super::certs`]) or any CA. What a refused handshake means is said in words
//! ([`describe`]), and the rule that keeps plain TCP off the network is [`check_listen`].

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    ClientConfig, ClientConnection, Connection, RootCertStore, ServerConfig, ServerConnection,
};

use super::link::{Link, Said};

/// The longest a TLS handshake may take.
pub const HANDSHAKE: Duration = Duration::from_secs(10);

/// The PEM files of one side: its certificate (chain), its key, and the CA that signs the
/// other side's certificates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// This side's certificate, PEM (a chain: the leaf first).
    pub cert: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA certificate(s) the other side's certificate must chain to, PEM.
    pub ca: PathBuf,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The PEM certificates of `path` (`what` names the file in errors).
pub fn load_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let all: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what} {}: not PEM certificates: {e}", path.display()))?;
    if all.is_empty() {
        return Err(format!(
            "{what} {}: no certificate in it (expected -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(all)
}

/// The PEM private key of `path`.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        format!(
            "key {}: {e} (expected a PEM private key, as `perfpilot certs` writes)",
            path.display()
        )
    })
}

/// The CA certificates of `path`, as trust roots.
pub fn load_roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for c in load_certs(path, "CA")? {
        roots
            .add(c)
            .map_err(|e| format!("CA {}: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

/// A certificate and key that rustls refused together.
fn pair_err(f: &TlsFiles, e: &rustls::Error) -> String {
    format!(
        "certificate {} and key {}: {e}",
        f.cert.display(),
        f.key.display()
    )
}

/// The worker's side: its certificate, and client certificates required, signed by `f.ca`.
pub fn server_config(f: &TlsFiles) -> Result<Arc<ServerConfig>, String> {
    let verifier = WebPkiClientVerifier::builder_with_provider(load_roots(&f.ca)?, provider())
        .build()
        .map_err(|e| format!("CA {}: {e}", f.ca.display()))?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(load_certs(&f.cert, "certificate")?, load_key(&f.key)?)
        .map_err(|e| pair_err(f, &e))?;
    Ok(Arc::new(config))
}

/// The coordinator's side: workers' certificates must chain to `f.ca`; its own is sent.
pub fn client_config(f: &TlsFiles) -> Result<Arc<ClientConfig>, String> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(load_roots(&f.ca)?)
        .with_client_auth_cert(load_certs(&f.cert, "certificate")?, load_key(&f.key)?)
        .map_err(|e| pair_err(f, &e))?;
    Ok(Arc::new(config))
}

/// Refuses plain TCP on an address other hosts can reach unless `insecure` (`--insecure-listen`).
pub fn check_listen(addr: SocketAddr, tls: bool, insecure: bool) -> Result<(), String> {
    if tls || insecure || addr.ip().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "refusing to listen on {addr} without TLS: whoever reaches it could make this host run commands (a study) or send load (drive). Give --tls-cert, --tls-key and --tls-ca (`perfpilot certs` makes them), use SSH (`ssh://HOST` on the coordinator: no listener at all), listen on 127.0.0.1, or say --insecure-listen on a network you trust"
    ))
}

/// A rustls error in words, from the side that saw it.
pub fn describe(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    use rustls::Error as E;
    match e {
        E::InvalidCertificate(c) => match c {
            C::Expired | C::ExpiredContext { .. } => {
                "the other side's certificate has expired: issue a new one (`perfpilot certs`)".into()
            }
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "the other side's certificate is not valid yet (its start is in the future: check both clocks)".into()
            }
            C::UnknownIssuer => {
                "the other side's certificate is not signed by the CA given (--tls-ca): both sides need certificates of one CA".into()
            }
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "the worker's certificate is not for the name or address dialled: issue it for that name (`perfpilot certs worker … --host NAME`) or dial a name it has".into()
            }
            C::BadSignature => "the other side's certificate has a bad signature".into(),
            other => format!("the other side's certificate is refused: {other:?}"),
        },
        E::NoCertificatesPresented => {
            "the coordinator sent no certificate: it needs --tls-cert, --tls-key and --tls-ca".into()
        }
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => {
            "the other side does not speak TLS (a plain-TCP coordinator or worker?)".into()
        }
        E::AlertReceived(a) => format!(
            "the other side refused the TLS session ({a:?}): its log says why (a certificate not of its CA, none, or expired)"
        ),
        E::PeerIncompatible(p) => format!("no TLS version or cipher in common: {p:?}"),
        other => other.to_string(),
    }
}

/// An I/O error of a TLS session, in words where it came from rustls.
fn tls_io(e: std::io::Error) -> std::io::Error {
    let text = match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(t) => describe(t),
        None => return e,
    };
    std::io::Error::new(std::io::ErrorKind::InvalidData, text)
}

/// Runs a handshake on `sock` to its end, within [`HANDSHAKE`] in all (a client that trickles
/// its bytes gets no longer).
fn handshake(conn: &mut Connection, sock: &mut TcpStream) -> std::io::Result<()> {
    let until = std::time::Instant::now() + HANDSHAKE;
    sock.set_write_timeout(Some(HANDSHAKE))?;
    while conn.is_handshaking() {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no TLS handshake within {} (a client that sends nothing?)",
                    perfpilot_units::clock(HANDSHAKE)
                ),
            ));
        }
        sock.set_read_timeout(Some(left))?;
        conn.complete_io(sock).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no TLS handshake within {} (a client that sends nothing?)",
                    perfpilot_units::clock(HANDSHAKE)
                ),
            ),
            std::io::ErrorKind::UnexpectedEof => std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the connection closed during the TLS handshake",
            ),
            _ => tls_io(e),
        })?;
    }
    // The first message, from the client, may follow the handshake's last flight at once.
    if conn.wants_write() {
        conn.complete_io(sock).map_err(tls_io)?;
    }
    sock.set_read_timeout(None)?;
    sock.set_write_timeout(None)?;
    Ok(())
}

/// The subject of the peer's first certificate (`CN=coordinator-1`), or its SHA-256 where it
/// does not parse.
fn subject(conn: &Connection) -> Option<String> {
    let der = conn.peer_certificates()?.first()?;
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => Some(cert.subject().to_string()),
        Err(_) => Some(format!("certificate of {} bytes", der.len())),
    }
}

/// The server side: the handshake on an accepted `sock`, the client's certificate checked.
/// `Err` says who (the address) and why, for the worker's log.
pub fn accept(mut sock: TcpStream, config: &Arc<ServerConfig>) -> Result<Link, String> {
    let addr = sock
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let server = ServerConnection::new(config.clone()).map_err(|e| describe(&e))?;
    let mut conn = Connection::from(server);
    handshake(&mut conn, &mut sock).map_err(|e| e.to_string())?;
    let who = subject(&conn).map_or(addr.clone(), |s| format!("{s} at {addr}"));
    Ok(duplex(conn, sock, who))
}

/// The client side: connects to `addr` (`host:port`) and checks the worker's certificate for
/// `host`.
pub fn connect(addr: &str, config: &Arc<ClientConfig>) -> Result<Link, String> {
    let mut sock = super::dial::tcp(addr)?;
    let host = super::dial::host_of(addr);
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host} is not a name a certificate can carry: {e}"))?;
    let client = ClientConnection::new(config.clone(), name).map_err(|e| describe(&e))?;
    let mut conn = Connection::from(client);
    handshake(&mut conn, &mut sock).map_err(|e| e.to_string())?;
    let who = subject(&conn).map_or(addr.to_string(), |s| format!("{addr} ({s})"));
    Ok(duplex(conn, sock, who))
}

/// One TLS session shared by the reading and the writing half: the socket's blocking reads
/// happen outside the lock, so a writer never waits for a read.
struct Session {
    conn: Mutex<Connection>,
    sock: TcpStream,
}

impl Session {
    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends what rustls has queued (alerts, key updates, records).
    fn flush_tls(&self, conn: &mut Connection) -> std::io::Result<()> {
        while conn.wants_write() {
            conn.write_tls(&mut &self.sock)?;
        }
        Ok(())
    }
}

struct TlsRead {
    session: Arc<Session>,
    sock: TcpStream,
    /// Bytes read from the socket that rustls has not taken yet.
    pending: Vec<u8>,
}

impl Read for TlsRead {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        loop {
            {
                let mut conn = self.session.lock();
                match conn.reader().read(out) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    // Closed without close_notify: the end of the session all the same.
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(0),
                    Err(e) => return Err(tls_io(e)),
                }
                if !self.pending.is_empty() {
                    let mut rest = &self.pending[..];
                    let took = conn.read_tls(&mut rest);
                    let left = rest.len();
                    let processed = conn.process_new_packets();
                    let _ = self.session.flush_tls(&mut conn);
                    processed.map_err(|e| {
                        std::io::Error::new(std::io::ErrorKind::InvalidData, describe(&e))
                    })?;
                    let used = self.pending.len() - left;
                    self.pending.drain(..used);
                    took?;
                    continue;
                }
            }
            let mut buf = [0u8; 16 << 10];
            let n = self.sock.read(&mut buf)?;
            if n == 0 {
                let mut conn = self.session.lock();
                let _ = conn.read_tls(&mut &[][..]);
                let _ = conn.process_new_packets();
                return match conn.reader().read(out) {
                    Ok(n) => Ok(n),
                    Err(_) => Ok(0),
                };
            }
            self.pending.extend_from_slice(&buf[..n]);
        }
    }
}

struct TlsWrite(Arc<Session>);

impl Write for TlsWrite {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut conn = self.0.lock();
        conn.writer().write_all(buf)?;
        self.0.flush_tls(&mut conn)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let mut conn = self.0.lock();
        self.0.flush_tls(&mut conn)
    }
}

fn duplex(conn: Connection, sock: TcpStream, peer: String) -> Link {
    let _ = sock.set_nodelay(true);
    let reading = sock.try_clone();
    let session = Arc::new(Session {
        conn: Mutex::new(conn),
        sock,
    });
    let closer = session.clone();
    let close = Box::new(move |how: Shutdown| {
        {
            let mut conn = closer.lock();
            conn.send_close_notify();
            let _ = closer.flush_tls(&mut conn);
        }
        let _ = closer.sock.shutdown(how);
    });
    match reading {
        Ok(sock) => Link::from_parts(
            peer,
            TlsRead {
                session: session.clone(),
                sock,
                pending: Vec::new(),
            },
            TlsWrite(session),
            close,
            Said::none(),
        ),
        // No second handle on the socket: a link that reads nothing (its first read ends it).
        Err(_) => Link::from_parts(
            peer,
            std::io::empty(),
            TlsWrite(session),
            close,
            Said::none(),
        ),
    }
}
