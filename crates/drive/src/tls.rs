//! TLS for the load engine (rustls with the ring provider): the client configuration — the
//! system's roots plus `--cacert`, or no verification with `--insecure` — the ALPN offer that
//! decides between HTTP/1.1 and HTTP/2, and what a failed handshake means.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::client::{ErrKind, TlsFailure};
use crate::error::{DriveError, invalid};

/// Which HTTP version to speak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HttpVersion {
    /// HTTP/2 where an `https://` target offers it by ALPN, HTTP/1.1 otherwise.
    #[default]
    Auto,
    /// HTTP/1.1 only.
    Http1,
    /// HTTP/2 only: by ALPN on `https://`, by prior knowledge (h2c) on `http://`.
    Http2,
}

impl HttpVersion {
    /// Parses `auto`, `1.1`, `2`.
    pub fn parse(s: &str) -> Result<Self, DriveError> {
        match s.trim() {
            "auto" => Ok(HttpVersion::Auto),
            "1.1" | "1" | "http/1.1" => Ok(HttpVersion::Http1),
            "2" | "h2" | "http/2" => Ok(HttpVersion::Http2),
            other => Err(invalid("HTTP version", other, "expected auto, 1.1 or 2")),
        }
    }

    /// The ALPN protocols offered in the TLS handshake, preferred first.
    fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            HttpVersion::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            HttpVersion::Http1 => vec![b"http/1.1".to_vec()],
            HttpVersion::Http2 => vec![b"h2".to_vec()],
        }
    }
}

/// How `https://` targets are verified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// Accept any certificate (self-signed test servers). The handshake's signatures are still
    /// checked, so the cost of a handshake is the real one.
    pub insecure: bool,
    /// PEM file of further trusted certificates (a test CA), besides the system's roots.
    pub ca_file: Option<PathBuf>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client configuration of a run.
pub(crate) fn client_config(
    opts: &TlsOptions,
    http: HttpVersion,
) -> Result<Arc<ClientConfig>, DriveError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS configuration", "", e.to_string()))?;
    let mut config = if opts.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        // Unreadable system certificates are skipped: a run against a test CA needs none.
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if let Some(path) = &opts.ca_file {
            let shown = path.display().to_string();
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| invalid("--cacert file", &shown, e.to_string()))?
                .collect::<Result<_, _>>()
                .map_err(|e| invalid("--cacert file", &shown, e.to_string()))?;
            if certs.is_empty() {
                return Err(invalid(
                    "--cacert file",
                    &shown,
                    "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                ));
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| invalid("--cacert file", &shown, e.to_string()))?;
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = http.alpn();
    Ok(Arc::new(config))
}

/// The name the server's certificate must carry.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, DriveError> {
    ServerName::try_from(host.to_string())
        .map_err(|e| invalid("TLS server name", host, e.to_string()))
}

/// Classifies the error of a failed handshake.
pub(crate) fn handshake_failure(e: &std::io::Error) -> ErrKind {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(e) => failure_of(e),
        None => ErrKind::Tls(TlsFailure::Protocol),
    }
}

/// Classifies rustls's reason for a failed handshake.
pub(crate) fn failure_of(e: &rustls::Error) -> ErrKind {
    ErrKind::Tls(match e {
        rustls::Error::InvalidCertificate(_) => TlsFailure::Certificate,
        rustls::Error::AlertReceived(_) => TlsFailure::Alert,
        _ => TlsFailure::Protocol,
    })
}

/// `--insecure`: every certificate is accepted, signatures are verified as usual.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_versions_parse_and_offer_their_alpn() {
        assert_eq!(HttpVersion::parse("2").unwrap(), HttpVersion::Http2);
        assert_eq!(HttpVersion::parse("1.1").unwrap(), HttpVersion::Http1);
        assert!(HttpVersion::parse("3").is_err());
        assert_eq!(HttpVersion::Auto.alpn()[0], b"h2");
        assert_eq!(HttpVersion::Http1.alpn(), vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn a_cacert_file_without_certificates_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("pp-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("empty.pem");
        std::fs::write(&f, "not a certificate\n").unwrap();
        let opts = TlsOptions {
            insecure: false,
            ca_file: Some(f.clone()),
        };
        let e = client_config(&opts, HttpVersion::Auto)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("empty.pem") && e.contains("no PEM certificate"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
