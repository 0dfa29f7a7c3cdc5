//! How a coordinator reaches a worker, by the form of its address:
//!
//! | address | transport |
//! |---|---|
//! | `ssh://[USER@]HOST[:PORT]`, or `[USER@]HOST` (no port) | `ssh HOST perfpilot … --stdio`: the worker runs for this session only, over the SSH keys, known hosts, users and jump hosts already set up; no port opens |
//! | `tls://HOST:PORT` | mutual TLS to a listening worker (`--tls-cert`, `--tls-key`, `--tls-ca`) |
//! | `tcp://HOST:PORT` | plain TCP to a worker that listens on loopback or with `--insecure-listen` |
//! | `HOST:PORT` | TLS when this coordinator has a certificate, plain TCP otherwise |

use std::net::{TcpStream, ToSocketAddrs};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;

use super::link::Link;

/// How long a TCP connection may take to open.
const CONNECT: Duration = Duration::from_secs(5);

/// A worker's address, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Over `ssh`: the destination (`[user@]host`) and the port, if given.
    Ssh {
        /// `[user@]host`.
        dest: String,
        /// The SSH port, when not the default.
        port: Option<u16>,
    },
    /// Mutual TLS to `host:port`.
    Tls(String),
    /// Plain TCP to `host:port`.
    Tcp(String),
    /// `host:port` with no scheme: TLS when the coordinator has a certificate.
    Listening(String),
}

/// Whether `s` ends in `:PORT` (a bracketed IPv6 address, or a name or IPv4 address).
fn has_port(s: &str) -> bool {
    let Some((host, port)) = s.rsplit_once(':') else {
        return false;
    };
    let host_ok = if host.starts_with('[') {
        host.ends_with(']')
    } else {
        !host.contains(':')
    };
    host_ok && !host.is_empty() && port.parse::<u16>().is_ok()
}

impl Route {
    /// Reads an address; `Err` says what forms there are.
    pub fn parse(s: &str) -> Result<Route, String> {
        let s = s.trim();
        let bad = |why: &str| {
            Err(format!(
                "worker {s:?}: {why}; give ssh://[USER@]HOST[:PORT], tls://HOST:PORT, tcp://HOST:PORT or HOST:PORT"
            ))
        };
        if let Some(rest) = s.strip_prefix("ssh://") {
            let rest = rest.trim_end_matches('/');
            if rest.is_empty() || rest.contains('/') {
                return bad("no host after ssh://");
            }
            if has_port(rest) {
                let (dest, port) = rest.rsplit_once(':').unwrap_or((rest, ""));
                return Ok(Route::Ssh {
                    dest: dest.to_string(),
                    port: port.parse().ok(),
                });
            }
            return Ok(Route::Ssh {
                dest: rest.to_string(),
                port: None,
            });
        }
        for (scheme, tls) in [("tls://", true), ("tcp://", false)] {
            if let Some(rest) = s.strip_prefix(scheme) {
                if !has_port(rest) {
                    return bad(&format!("{scheme} needs HOST:PORT"));
                }
                return Ok(match tls {
                    true => Route::Tls(rest.to_string()),
                    false => Route::Tcp(rest.to_string()),
                });
            }
        }
        if s.contains("://") {
            return bad("an unknown scheme");
        }
        if s.is_empty() || s.starts_with('-') || s.chars().any(char::is_whitespace) {
            return bad("not a host");
        }
        Ok(match has_port(s) {
            true => Route::Listening(s.to_string()),
            false => Route::Ssh {
                dest: s.to_string(),
                port: None,
            },
        })
    }
}

/// What a coordinator dials workers with.
#[derive(Clone)]
pub struct Dialer {
    /// Its certificate, key and CA (`--tls-cert`, `--tls-key`, `--tls-ca`), if given.
    pub tls: Option<Arc<ClientConfig>>,
    /// The `ssh` command and its own options (`--ssh "ssh -F ./ssh_config"`).
    pub ssh: Vec<String>,
    /// The perfpilot program on the workers' hosts (`--remote-perfpilot`).
    pub remote: String,
}

impl Default for Dialer {
    fn default() -> Dialer {
        Dialer {
            tls: None,
            ssh: vec!["ssh".into()],
            remote: "perfpilot".into(),
        }
    }
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("tls", &self.tls.is_some())
            .field("ssh", &self.ssh)
            .field("remote", &self.remote)
            .finish()
    }
}

/// The host part of `host:port` (brackets of an IPv6 address removed).
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A TCP connection to `addr` (`host:port`), within 5 s.
pub fn tcp(addr: &str) -> Result<TcpStream, String> {
    let sock = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve it: {e}"))?
        .next()
        .ok_or_else(|| "it resolves to no address".to_string())?;
    TcpStream::connect_timeout(&sock, CONNECT).map_err(|e| format!("cannot connect: {e}"))
}

impl Dialer {
    /// Connects to the worker at `addr` ([`Route`]); over SSH, the worker is started as
    /// `REMOTE worker_args…` (ending in `--stdio`). `Err` says why, in words.
    pub fn dial(&self, addr: &str, worker_args: &[&str]) -> Result<Link, String> {
        match Route::parse(addr)? {
            Route::Ssh { dest, port } => self.ssh(&dest, port, worker_args),
            Route::Tls(a) => match &self.tls {
                Some(c) => super::secure::connect(&a, c),
                None => Err(
                    "tls:// needs this coordinator's certificate: give --tls-cert, --tls-key and --tls-ca"
                        .into(),
                ),
            },
            Route::Listening(a) => match &self.tls {
                Some(c) => super::secure::connect(&a, c),
                None => plain(&a),
            },
            Route::Tcp(a) => plain(&a),
        }
    }

    fn ssh(&self, dest: &str, port: Option<u16>, worker_args: &[&str]) -> Result<Link, String> {
        let (program, own) = self
            .ssh
            .split_first()
            .ok_or_else(|| "--ssh is empty: give the ssh command (ssh)".to_string())?;
        let mut words = vec![self.remote.as_str()];
        words.extend_from_slice(worker_args);
        let remote = shlex::try_join(words.iter().copied())
            .map_err(|e| format!("cannot quote the remote command: {e}"))?;
        let mut c = Command::new(program);
        // The user's options come first: ssh keeps the first value it reads of each.
        c.args(own).args([
            // A password or passphrase prompt fails at once instead of waiting for a person.
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            // A host that vanishes mid-round is noticed within 15 s.
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
            "-T",
        ]);
        if let Some(p) = port {
            c.args(["-p", &p.to_string()]);
        }
        c.arg("--").arg(dest).arg(remote);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = c
            .spawn()
            .map_err(|e| format!("cannot run {program}: {e} (is OpenSSH's client installed?)"))?;
        Link::child(child, format!("ssh://{dest}")).map_err(|e| e.to_string())
    }
}

fn plain(addr: &str) -> Result<Link, String> {
    let s = tcp(addr)?;
    Link::tcp(s, addr.to_string()).map_err(|e| e.to_string())
}

/// Why a link closed before the worker answered: what the transport said (ssh's error), if
/// anything.
pub fn closed_early(link_said: Option<String>) -> String {
    match link_said {
        Some(said) => format!("closed the connection ({said})"),
        None => "closed the connection".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_pick_their_transport() {
        let ssh = |d: &str, p| Route::Ssh {
            dest: d.into(),
            port: p,
        };
        assert_eq!(Route::parse("ssh://bob@w1").unwrap(), ssh("bob@w1", None));
        assert_eq!(
            Route::parse("ssh://w1.example:2222").unwrap(),
            ssh("w1.example", Some(2222))
        );
        assert_eq!(
            Route::parse("bob@10.0.0.2").unwrap(),
            ssh("bob@10.0.0.2", None)
        );
        assert_eq!(Route::parse("w1").unwrap(), ssh("w1", None));
        assert_eq!(
            Route::parse("tls://w1:7071").unwrap(),
            Route::Tls("w1:7071".into())
        );
        assert_eq!(
            Route::parse("tcp://[::1]:7071").unwrap(),
            Route::Tcp("[::1]:7071".into())
        );
        assert_eq!(
            Route::parse("10.0.0.2:7071").unwrap(),
            Route::Listening("10.0.0.2:7071".into())
        );
        for bad in [
            "tls://w1",
            "http://w1:80",
            "ssh://",
            "-oProxyCommand=x",
            "a b",
        ] {
            let e = Route::parse(bad).unwrap_err();
            assert!(e.contains("ssh://[USER@]HOST"), "{bad}: {e}");
        }
        assert_eq!(host_of("[::1]:7071"), "::1");
        assert_eq!(host_of("w1:7071"), "w1");
    }
}
