//! TLS test servers: a throw-away certificate authority (rcgen) and nginx serving HTTPS with
//! HTTP/2 offered by ALPN, HTTPS with HTTP/1.1 only, and HTTP/2 over plain TCP (h2c).

use std::path::PathBuf;
use std::time::Duration;

use perfpilot_lab::server::nginx;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

use crate::{ServerProcess, TempDir, free_port, require, serve};

/// PEM files of a test CA and a server certificate it signed for `localhost` and 127.0.0.1.
pub struct TestCerts {
    /// The CA's certificate (what `--cacert` takes).
    pub ca: PathBuf,
    /// The server's certificate.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

/// Writes a fresh CA and a server certificate into `dir`.
pub fn make_certs(dir: &std::path::Path) -> TestCerts {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let files = TestCerts {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    };
    std::fs::write(&files.ca, ca.pem()).unwrap();
    std::fs::write(&files.cert, leaf.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    files
}

/// nginx with TLS: `https_port` offers h2 and http/1.1 by ALPN, `h1_port` only http/1.1,
/// `h2c_port` is HTTP/2 without TLS; every `/` answers 200 "ok".
pub struct NginxTls {
    /// The server (its directory holds the certificates).
    pub server: ServerProcess,
    /// HTTPS with HTTP/2 offered.
    pub https_port: u16,
    /// HTTPS with HTTP/1.1 only.
    pub h1_port: u16,
    /// HTTP/2 by prior knowledge, no TLS.
    pub h2c_port: u16,
    /// The certificates.
    pub certs: TestCerts,
}

/// Starts nginx serving TLS on three loopback ports.
pub fn start_nginx_tls() -> NginxTls {
    require("nginx");
    let dir = TempDir::new("nginx-tls");
    let certs = make_certs(&dir.0);
    let (https_port, h1_port, h2c_port) = (free_port(), free_port(), free_port());
    let (c, k) = (certs.cert.display(), certs.key.display());
    let ok = "location / { return 200 \"ok\\n\"; }";
    let mut conf = nginx::Conf::new(&dir.0);
    conf.http = format!(
        "  ssl_certificate {c}; ssl_certificate_key {k};\n\
           server {{ listen 127.0.0.1:{https_port} ssl http2; {ok} }}\n\
           server {{ listen 127.0.0.1:{h1_port} ssl; {ok} }}\n\
           server {{ listen 127.0.0.1:{h2c_port} http2; {ok} }}\n"
    );
    let cmd = conf.command().expect("write nginx.conf");
    let mut server = serve("nginx (TLS)", cmd, dir, https_port, None);
    for p in [h1_port, h2c_port] {
        server
            .server
            .wait_port("127.0.0.1", p, Duration::from_secs(30), &|| false)
            .expect("nginx (TLS) listens on every port");
    }
    NginxTls {
        server,
        https_port,
        h1_port,
        h2c_port,
        certs,
    }
}
