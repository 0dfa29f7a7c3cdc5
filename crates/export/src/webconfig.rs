//! The exporter's web configuration, in the file format of Prometheus' exporter toolkit (what
//! node_exporter's `--web.config.file` reads), so that the files, the hashes and the habits
//! operators have carry over:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.pem
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # or NoClientCert, VerifyClientCertIfGiven
//!   client_ca_file: ca.pem
//!   min_version: TLS12                             # or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$…                           # bcrypt (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! Relative paths are read from the file's directory. Keys the toolkit has that perfpilot does
//! not implement (`cipher_suites`, `curve_preferences`, `http_server_config`, …) are refused by
//! name rather than ignored: a setting that silently did nothing would be worse.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// A web-config file that cannot be used: the file, and what to change.
#[derive(Debug, thiserror::Error)]
#[error("web config {}: {why}", path.display())]
pub struct WebConfigError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, naming the key.
    pub why: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_ca_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    // The toolkit's, refused by name below.
    cipher_suites: Option<serde_yaml_ng::Value>,
    curve_preferences: Option<serde_yaml_ng::Value>,
    prefer_server_cipher_suites: Option<serde_yaml_ng::Value>,
    client_allowed_sans: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Raw {
    tls_server_config: Option<RawTls>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    http_server_config: Option<serde_yaml_ng::Value>,
}

/// Who may read the endpoint: TLS (with client certificates or not) and basic-auth users.
#[derive(Default)]
pub struct WebConfig {
    /// The TLS server configuration, when `tls_server_config` is set.
    pub tls: Option<Arc<ServerConfig>>,
    /// Whether a client certificate is required (`RequireAndVerifyClientCert`).
    pub client_cert_required: bool,
    /// user → bcrypt hash; empty: no basic auth.
    pub users: BTreeMap<String, String>,
    /// The users' highest bcrypt cost, and a hash at that cost made at the first unknown user
    /// (checked for it, see [`WebConfig::admits`]).
    cost: u32,
    dummy: OnceLock<String>,
    /// Digests of (user, password, hash) checked good: a scrape every 15 s must not cost a
    /// bcrypt check each time (about 60 ms of CPU at cost 10).
    admitted: Mutex<HashSet<[u8; 32]>>,
}

/// The most remembered good credentials (a few scrapers use a few).
const REMEMBERED: usize = 64;
/// The highest bcrypt cost taken (each step doubles a check's time; 14 is about a second).
const MAX_COST: u32 = 14;

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("client_cert_required", &self.client_cert_required)
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl WebConfig {
    /// Reads and checks `path` (certificates loaded, hashes parsed).
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| WebConfigError {
            path: path.to_path_buf(),
            why: format!("cannot read it: {e}"),
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        WebConfig::parse(&text, dir).map_err(|why| WebConfigError {
            path: path.to_path_buf(),
            why,
        })
    }

    /// Reads the text of a web-config file; relative paths are taken from `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<WebConfig, String> {
        let raw: Raw = if text.trim().is_empty() {
            Raw::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?
        };
        if raw.http_server_config.is_some() {
            return Err(unsupported("http_server_config"));
        }
        let mut users = BTreeMap::new();
        let mut cost = 4;
        for (user, hash) in raw.basic_auth_users.unwrap_or_default() {
            if user.contains(':') {
                return Err(format!(
                    "basic_auth_users: user {user:?} has a ':', which basic auth cannot carry"
                ));
            }
            let parts = hash.parse::<bcrypt::HashParts>().map_err(|e| {
                format!(
                    "basic_auth_users.{user}: not a bcrypt hash ({e}); make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`"
                )
            })?;
            if parts.get_cost() > MAX_COST {
                return Err(format!(
                    "basic_auth_users.{user}: bcrypt cost {} is above {MAX_COST}: each check would take seconds of CPU; hash it again at 10 to 12",
                    parts.get_cost()
                ));
            }
            cost = cost.max(parts.get_cost());
            users.insert(user, hash);
        }
        let (tls, client_cert_required) = match raw.tls_server_config {
            Some(t) => tls(t, dir)?,
            None => (None, false),
        };
        Ok(WebConfig {
            tls,
            client_cert_required,
            users,
            cost,
            dummy: OnceLock::new(),
            admitted: Mutex::default(),
        })
    }

    /// Whether `user` with `password` is admitted. A user not in the file costs a bcrypt
    /// check all the same, so that timing does not tell which users exist.
    pub fn admits(&self, user: &str, password: &str) -> bool {
        let Some(hash) = self.users.get(user) else {
            let dummy = self.dummy.get_or_init(|| {
                bcrypt::hash(format!("{:?}", std::time::SystemTime::now()), self.cost)
                    .unwrap_or_default()
            });
            let _ = bcrypt::verify(password, dummy);
            return false;
        };
        let digest: [u8; 32] = Sha256::new()
            .chain_update(user.as_bytes())
            .chain_update([0])
            .chain_update(password.as_bytes())
            .chain_update([0])
            .chain_update(hash.as_bytes())
            .finalize()
            .into();
        let mut seen = self.admitted.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains(&digest) {
            return true;
        }
        let ok = bcrypt::verify(password, hash).unwrap_or(false);
        if ok {
            if seen.len() >= REMEMBERED {
                seen.clear();
            }
            seen.insert(digest);
        }
        ok
    }
}

fn unsupported(key: &str) -> String {
    format!(
        "{key} is a key of the exporter toolkit that perfpilot does not implement: remove it (perfpilot takes tls_server_config's cert_file, key_file, client_ca_file, client_auth_type, min_version and max_version, and basic_auth_users)"
    )
}

fn resolve(dir: &Path, p: PathBuf) -> PathBuf {
    if p.is_absolute() { p } else { dir.join(p) }
}

fn version(v: Option<&str>, key: &str) -> Result<Option<u8>, String> {
    match v {
        None => Ok(None),
        Some("TLS12") => Ok(Some(12)),
        Some("TLS13") => Ok(Some(13)),
        Some(other) => Err(format!(
            "tls_server_config.{key}: {other:?}; perfpilot speaks TLS12 and TLS13"
        )),
    }
}

/// The TLS configuration of `tls_server_config`, and whether client certificates are required.
fn tls(t: RawTls, dir: &Path) -> Result<(Option<Arc<ServerConfig>>, bool), String> {
    for (set, key) in [
        (t.cipher_suites.is_some(), "tls_server_config.cipher_suites"),
        (
            t.curve_preferences.is_some(),
            "tls_server_config.curve_preferences",
        ),
        (
            t.prefer_server_cipher_suites.is_some(),
            "tls_server_config.prefer_server_cipher_suites",
        ),
        (
            t.client_allowed_sans.is_some(),
            "tls_server_config.client_allowed_sans",
        ),
    ] {
        if set {
            return Err(unsupported(key));
        }
    }
    let (Some(cert), Some(key)) = (t.cert_file, t.key_file) else {
        return Err("tls_server_config needs cert_file and key_file".into());
    };
    let (cert, key) = (resolve(dir, cert), resolve(dir, key));
    let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let ca = t.client_ca_file.map(|p| resolve(dir, p));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match (auth, &ca) {
        ("NoClientCert", _) => None,
        ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven", None) => {
            return Err(format!(
                "tls_server_config.client_auth_type {auth} needs client_ca_file"
            ));
        }
        ("RequireAndVerifyClientCert", Some(ca)) => Some(
            WebPkiClientVerifier::builder_with_provider(
                perfpilot_drive::coord::secure::load_roots(ca)?,
                provider.clone(),
            )
            .build()
            .map_err(|e| format!("tls_server_config.client_ca_file: {e}"))?,
        ),
        ("VerifyClientCertIfGiven", Some(ca)) => Some(
            WebPkiClientVerifier::builder_with_provider(
                perfpilot_drive::coord::secure::load_roots(ca)?,
                provider.clone(),
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("tls_server_config.client_ca_file: {e}"))?,
        ),
        ("RequestClientCert" | "RequireAnyClientCert", _) => {
            return Err(format!(
                "tls_server_config.client_auth_type {auth}: a certificate checked against no CA admits anyone; use RequireAndVerifyClientCert with client_ca_file"
            ));
        }
        (other, _) => {
            return Err(format!(
                "tls_server_config.client_auth_type {other:?}: expected NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
            ));
        }
    };
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = match (
        version(t.min_version.as_deref(), "min_version")?.unwrap_or(12),
        version(t.max_version.as_deref(), "max_version")?.unwrap_or(13),
    ) {
        (12, 13) => vec![&rustls::version::TLS13, &rustls::version::TLS12],
        (12, 12) => vec![&rustls::version::TLS12],
        (13, 13) => vec![&rustls::version::TLS13],
        _ => return Err("tls_server_config: min_version is above max_version".into()),
    };
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| e.to_string())?;
    let required = auth == "RequireAndVerifyClientCert";
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(
            perfpilot_drive::coord::secure::load_certs(&cert, "tls_server_config.cert_file")?,
            perfpilot_drive::coord::secure::load_key(&key)?,
        )
        .map_err(|e| format!("tls_server_config cert_file and key_file: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Some(Arc::new(config)), required))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_with_bcrypt_hashes_are_admitted_by_password_only() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let c = WebConfig::parse(
            &format!("basic_auth_users:\n  prometheus: '{hash}'\n"),
            Path::new("/"),
        )
        .unwrap();
        assert!(c.admits("prometheus", "s3cret"));
        assert!(!c.admits("prometheus", "wrong"));
        assert!(!c.admits("nobody", "s3cret"));
        assert!(c.tls.is_none());
    }

    #[test]
    fn keys_perfpilot_does_not_implement_and_bad_hashes_are_refused_by_name() {
        for (text, says) in [
            (
                "http_server_config:\n  http2: false\n",
                "http_server_config",
            ),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n",
                "tls_server_config.cipher_suites",
            ),
            ("basic_auth_users:\n  bob: plain\n", "basic_auth_users.bob"),
            ("basic_auth_user:\n  bob: x\n", "basic_auth_user"),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n",
                "needs client_ca_file",
            ),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n",
                "admits anyone",
            ),
        ] {
            let e = WebConfig::parse(text, Path::new("/")).err().unwrap();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
