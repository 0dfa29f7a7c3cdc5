//! The config's `[[preset]]` entries: add a preset the table does not find, or give one the
//! address or credentials it needs.
//!
//! ```toml
//! [[preset]]                       # a Prometheus counter of a process named myapp
//! kind = "prometheus"
//! match = { comm = "myapp" }
//! url = "http://127.0.0.1:9100/metrics"
//! metric = "myapp_jobs_done_total"
//!
//! [[preset]]                       # PostgreSQL over TCP with a password
//! kind = "postgresql"
//! port = 5433
//! user = "monitor"
//! password = "secret"
//! dbname = "postgres"
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use super::{Endpoint, Identity, PresetKind, pg_socket_port};

/// One `[[preset]]` entry of the daemon's config.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresetConfig {
    /// The preset (`postgresql`, `redis`, `memcached`, `nginx`, `mysql`, `prometheus`).
    pub kind: PresetKind,
    /// Which processes it applies to; without it, those the table recognises as `kind`.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<ProcessMatch>,
    /// `false` turns the preset off for the processes it applies to.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The HTTP URL to read (nginx's `stub_status` page, a Prometheus page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The server's Unix socket (PostgreSQL: the `.s.PGSQL.<port>` file itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// The TCP host (an IP address; default 127.0.0.1); needs `port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<IpAddr>,
    /// The TCP port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The user (PostgreSQL role, MySQL user, Redis ACL user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// PostgreSQL's database (default `postgres`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dbname: Option<String>,
    /// The Prometheus metric (summed over its series) instead of the name rules' choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
}

fn yes() -> bool {
    true
}

/// Which processes a `[[preset]]` applies to: every given field must fit.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessMatch {
    /// The command name, exactly (`/proc/PID/comm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// The executable's path, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<PathBuf>,
    /// Text the command line contains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
}

impl ProcessMatch {
    /// Whether `id` fits every given field.
    pub fn fits(&self, id: &Identity) -> bool {
        self.comm.as_ref().is_none_or(|c| *c == id.comm)
            && self.exe.as_ref().is_none_or(|e| id.exe.as_ref() == Some(e))
            && self
                .cmdline
                .as_ref()
                .is_none_or(|c| id.cmdline.contains(c.as_str()))
    }
}

/// A `[[preset]]` entry that cannot be used: which entry, which field, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[[preset]] #{index} (kind = \"{kind}\"): `{field}` {why}")]
pub struct PresetConfigError {
    /// The entry's position in the config, from 1.
    pub index: usize,
    /// Its kind.
    pub kind: PresetKind,
    /// The field at fault.
    pub field: &'static str,
    /// What is wrong and what to write instead.
    pub why: String,
}

impl PresetConfig {
    /// Checks the entry, the `index`-th (from 1) of the config: each field must mean
    /// something for its kind, and addresses must be usable.
    pub fn validate(&self, index: usize) -> Result<(), PresetConfigError> {
        use PresetKind::*;
        let fail = |field, why: &str| PresetConfigError {
            index,
            kind: self.kind,
            field,
            why: why.to_string(),
        };
        let http = matches!(self.kind, Nginx | Prometheus);
        if let Some(m) = &self.matches
            && m.comm.is_none()
            && m.exe.is_none()
            && m.cmdline.is_none()
        {
            return Err(fail("match", "is empty: give comm, exe or cmdline"));
        }
        if let Some(url) = &self.url {
            if !http {
                return Err(fail(
                    "url",
                    "is for nginx and prometheus presets; use socket or host and port",
                ));
            }
            split_url(url).map_err(|why| fail("url", &why))?;
        }
        if http && (self.socket.is_some() || self.host.is_some() || self.port.is_some()) {
            let field = if self.socket.is_some() {
                "socket"
            } else if self.host.is_some() {
                "host"
            } else {
                "port"
            };
            return Err(fail(
                field,
                "is not used by HTTP presets: give the whole url = \"http://HOST:PORT/PATH\"",
            ));
        }
        if let Some(s) = &self.socket {
            if !s.is_absolute() {
                return Err(fail("socket", "must be an absolute path"));
            }
            if self.kind == Postgres
                && s.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(pg_socket_port)
                    .is_none()
            {
                return Err(fail(
                    "socket",
                    "must be PostgreSQL's socket file itself, named .s.PGSQL.<port> \
                     (e.g. /var/run/postgresql/.s.PGSQL.5432)",
                ));
            }
            if self.port.is_some() || self.host.is_some() {
                return Err(fail("socket", "and host/port exclude each other: give one"));
            }
        }
        if self.host.is_some() && self.port.is_none() {
            return Err(fail("host", "needs a port"));
        }
        if self.port == Some(0) {
            return Err(fail("port", "must be 1 to 65535"));
        }
        if self.dbname.is_some() && self.kind != Postgres {
            return Err(fail("dbname", "is only for the postgresql preset"));
        }
        if self.metric.is_some() && self.kind != Prometheus {
            return Err(fail("metric", "is only for the prometheus preset"));
        }
        if self.metric.as_deref().is_some_and(|m| !is_metric_name(m)) {
            return Err(fail(
                "metric",
                "is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)",
            ));
        }
        if (self.user.is_some() || self.password.is_some())
            && matches!(self.kind, Memcached | Nginx | Prometheus)
        {
            let field = if self.user.is_some() {
                "user"
            } else {
                "password"
            };
            return Err(fail(
                field,
                "is not used by this preset (it reads without credentials)",
            ));
        }
        Ok(())
    }

    /// The address the entry gives, with the HTTP path of a `url`: `None` when it gives
    /// none (then it only lends its settings to the table's candidates).
    pub(crate) fn endpoint(&self) -> Option<(Endpoint, Option<String>)> {
        if let Some(url) = &self.url {
            let (addr, path) = split_url(url).ok()?;
            return Some((Endpoint::Tcp(addr), Some(path)));
        }
        if let Some(s) = &self.socket {
            return Some((Endpoint::Unix(s.clone()), None));
        }
        let port = self.port?;
        let host = self.host.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        Some((Endpoint::Tcp(SocketAddr::new(host, port)), None))
    }
}

/// Splits `http://HOST:PORT/PATH` (HOST an IP address, `[v6]`, or `localhost`) into the
/// address and the path.
fn split_url(url: &str) -> Result<(SocketAddr, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("must start with http:// (https is not read)")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    let authority = authority.replacen("localhost", "127.0.0.1", 1);
    let addr = authority
        .parse::<SocketAddr>()
        .or_else(|_| {
            authority
                .parse::<IpAddr>()
                .map(|ip| SocketAddr::new(ip, 80))
        })
        .map_err(|_| {
            format!(
                "has host {authority:?}: give an IP address or localhost, with the port \
                 (http://127.0.0.1:9100/metrics)"
            )
        })?;
    Ok((addr, path))
}

/// Whether `name` is a valid Prometheus metric name.
pub(crate) fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<Vec<PresetConfig>, String> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            preset: Vec<PresetConfig>,
        }
        let f: File = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        for (i, p) in f.preset.iter().enumerate() {
            p.validate(i + 1).map_err(|e| e.to_string())?;
        }
        Ok(f.preset)
    }

    #[test]
    fn a_prometheus_entry_with_match_url_and_metric_is_read() {
        let p = parse(
            "[[preset]]\nkind = \"prometheus\"\nmatch = { comm = \"myapp\" }\n\
             url = \"http://127.0.0.1:9100/metrics\"\nmetric = \"myapp_jobs_total\"\n",
        )
        .unwrap();
        assert_eq!(p[0].kind, PresetKind::Prometheus);
        assert_eq!(
            p[0].matches.as_ref().unwrap().comm.as_deref(),
            Some("myapp")
        );
        assert!(p[0].enabled);
        assert_eq!(
            p[0].endpoint(),
            Some((
                Endpoint::Tcp("127.0.0.1:9100".parse().unwrap()),
                Some("/metrics".into())
            ))
        );
    }

    #[test]
    fn a_postgres_entry_with_credentials_gives_a_loopback_tcp_endpoint() {
        let p = parse(
            "[[preset]]\nkind = \"postgres\"\nport = 5433\nuser = \"monitor\"\n\
             password = \"pw\"\ndbname = \"app\"\n",
        )
        .unwrap();
        assert_eq!(p[0].kind, PresetKind::Postgres);
        assert_eq!(
            p[0].endpoint(),
            Some((Endpoint::Tcp("127.0.0.1:5433".parse().unwrap()), None))
        );
    }

    #[test]
    fn an_unknown_field_or_kind_is_refused_by_name() {
        let e = parse("[[preset]]\nkind = \"redis\"\npasword = \"x\"\n").unwrap_err();
        assert!(e.contains("pasword"), "{e}");
        let e = parse("[[preset]]\nkind = \"oracle\"\n").unwrap_err();
        assert!(e.contains("unknown preset kind \"oracle\""), "{e}");
        let e = parse("[[preset]]\nkind = \"redis\"\nmatch = { name = \"x\" }\n").unwrap_err();
        assert!(e.contains("name"), "{e}");
    }

    #[test]
    fn fields_that_mean_nothing_for_the_kind_are_errors_naming_the_field() {
        for (text, field) in [
            ("kind = \"redis\"\nurl = \"http://127.0.0.1:1/\"", "`url`"),
            ("kind = \"nginx\"\nport = 80", "`port`"),
            ("kind = \"prometheus\"\nurl = \"https://x:1/\"", "`url`"),
            (
                "kind = \"prometheus\"\nurl = \"http://example.com:1/\"",
                "`url`",
            ),
            ("kind = \"redis\"\ndbname = \"x\"", "`dbname`"),
            ("kind = \"redis\"\nmetric = \"x\"", "`metric`"),
            ("kind = \"prometheus\"\nmetric = \"bad-name\"", "`metric`"),
            (
                "kind = \"postgresql\"\nsocket = \"/tmp/pg.sock\"",
                "`socket`",
            ),
            ("kind = \"redis\"\nsocket = \"relative.sock\"", "`socket`"),
            ("kind = \"redis\"\nhost = \"127.0.0.1\"", "`host`"),
            ("kind = \"memcached\"\npassword = \"x\"", "`password`"),
            ("kind = \"redis\"\nmatch = {}", "`match`"),
        ] {
            let e = parse(&format!("[[preset]]\n{text}\n")).unwrap_err();
            assert!(
                e.contains(field) && e.contains("[[preset]] #1"),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn a_match_needs_every_given_field_to_fit() {
        let id = Identity {
            comm: "myapp".into(),
            exe: Some("/opt/myapp/bin/myapp".into()),
            cmdline: "/opt/myapp/bin/myapp --port 9100".into(),
            uid: 1000,
            gid: 1000,
        };
        let m = |comm: Option<&str>, cmd: Option<&str>| ProcessMatch {
            comm: comm.map(Into::into),
            exe: None,
            cmdline: cmd.map(Into::into),
        };
        assert!(m(Some("myapp"), None).fits(&id));
        assert!(m(Some("myapp"), Some("--port 9100")).fits(&id));
        assert!(!m(Some("myapp"), Some("--port 9200")).fits(&id));
        assert!(!m(Some("other"), None).fits(&id));
    }
}
