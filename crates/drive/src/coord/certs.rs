//! `perfpilot certs`: a private CA and the certificates it signs (rcgen; ECDSA P-256), for
//! workers and coordinators ([`super::secure`]) and the daemon's exporter: `ca` makes
//! `DIR/ca.pem` and `DIR/ca.key`, `server` a certificate for the names and addresses a
//! listener is reached by, `client` one that names a coordinator or a scraper. Keys are written
//! with mode 0600; nothing is overwritten.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// What a certificate is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// A listener (a worker, the exporter), reached by these names and addresses.
    Server(Vec<String>),
    /// A client (a coordinator, Prometheus).
    Client,
}

/// When a certificate is valid.
#[derive(Clone, Copy, Debug)]
pub struct Validity {
    /// From (default: now).
    pub not_before: Option<SystemTime>,
    /// For this long.
    pub days: u32,
}

/// The files written: a certificate and its key.
#[derive(Clone, Debug)]
pub struct Written {
    /// The certificate, PEM.
    pub cert: PathBuf,
    /// Its key, PEM (mode 0600).
    pub key: PathBuf,
}

fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => format!(
                "{} exists: remove it first, or choose another name or directory",
                path.display()
            ),
            _ => format!("cannot write {}: {e}", path.display()),
        })?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn set_validity(p: &mut CertificateParams, v: Validity) {
    let from = v.not_before.unwrap_or_else(|| {
        // A minute back: a host whose clock lags a little accepts it at once.
        SystemTime::now() - Duration::from_secs(60)
    });
    p.not_before = from.into();
    p.not_after = (from + Duration::from_secs(u64::from(v.days) * 86_400)).into();
}

fn err(what: &str, e: rcgen::Error) -> String {
    format!("{what}: {e}")
}

/// Makes a CA in `dir` (`ca.pem`, `ca.key`), named `name`.
pub fn make_ca(dir: &Path, name: &str, v: Validity) -> Result<Written, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(|e| err("the CA", e))?;
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut p, v);
    let key = KeyPair::generate().map_err(|e| err("the CA's key", e))?;
    let key_pem = key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(p, key).map_err(|e| err("the CA", e))?;
    let out = Written {
        cert: dir.join("ca.pem"),
        key: dir.join("ca.key"),
    };
    write_new(&out.key, &key_pem, 0o600)?;
    write_new(&out.cert, &ca.pem(), 0o644)?;
    Ok(out)
}

/// Issues a certificate named `name` for `role`, signed by the CA in `dir`, as
/// `dir/NAME.pem` and `dir/NAME.key`.
pub fn issue(dir: &Path, name: &str, role: &Role, v: Validity) -> Result<Written, String> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') || name == "ca" {
        return Err(format!(
            "{name:?} is not a usable name: it names the files DIR/NAME.pem and DIR/NAME.key"
        ));
    }
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f)).map_err(|e| {
            format!(
                "cannot read {}: {e} (make the CA first: perfpilot certs ca {})",
                dir.join(f).display(),
                dir.display()
            )
        })
    };
    let ca_key = KeyPair::from_pem(&read("ca.key")?).map_err(|e| err("ca.key", e))?;
    let ca = Issuer::from_ca_cert_pem(&read("ca.pem")?, ca_key).map_err(|e| err("ca.pem", e))?;
    let sans = match role {
        Role::Server(hosts) if hosts.is_empty() => {
            return Err(
                "a server certificate needs the names or addresses it is reached by (--host)"
                    .into(),
            );
        }
        Role::Server(hosts) => hosts.clone(),
        Role::Client => Vec::new(),
    };
    let mut p = CertificateParams::new(sans).map_err(|e| err("the names", e))?;
    p.distinguished_name.push(DnType::CommonName, name);
    p.use_authority_key_identifier_extension = true;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![match role {
        Role::Server(_) => ExtendedKeyUsagePurpose::ServerAuth,
        Role::Client => ExtendedKeyUsagePurpose::ClientAuth,
    }];
    set_validity(&mut p, v);
    let key = KeyPair::generate().map_err(|e| err("the key", e))?;
    let cert = p
        .signed_by(&key, &ca)
        .map_err(|e| err("the certificate", e))?;
    let out = Written {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    write_new(&out.key, &key.serialize_pem(), 0o600)?;
    write_new(&out.cert, &cert.pem(), 0o644)?;
    Ok(out)
}
