//! What workers and coordinators of `drive` and `study` share on the command line: how a
//! worker listens (mutual TLS, `--insecure-listen`, `--stdio` under ssh), how a coordinator
//! dials (`--ssh`, `--remote-perfpilot`, its certificate), and the worker's log, one dated
//! line per coordinator admitted, refused or served.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use perfpilot_drive::coord::{Admission, Dialer, TlsFiles, check_listen, secure};

/// A certificate, its key and the CA of the other side.
#[derive(Args, Debug, Clone)]
pub struct TlsArgs {
    /// This side's certificate (PEM); with --tls-key and --tls-ca: mutual TLS
    /// (`perfpilot certs` makes them).
    #[arg(long, value_name = "PEM", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// This side's private key (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The CA that signed the other side's certificate (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,
}

impl TlsArgs {
    fn files(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            ca: self.tls_ca.clone()?,
        })
    }
}

/// How a worker is reached.
#[derive(Args, Debug, Clone)]
pub struct ListenArgs {
    /// Listen on ADDR:PORT. Off loopback it needs --tls-cert, --tls-key and --tls-ca, or
    /// --insecure-listen.
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "stdio")]
    pub listen: Option<String>,
    /// Serve the one coordinator on stdin and stdout, then exit: what a coordinator runs over
    /// SSH (`ssh HOST perfpilot … --stdio`); no port opens.
    #[arg(long)]
    pub stdio: bool,
    /// Listen on a non-loopback address without TLS: anyone who reaches the port is served.
    /// Only on a network you trust.
    #[arg(long, requires = "listen")]
    pub insecure_listen: bool,
}

/// Where a listening worker listens, and how it admits a connection.
pub struct Listening {
    /// The bound listener.
    pub listener: TcpListener,
    /// TLS or plain.
    pub admission: Admission,
    /// How it is described in the first log line.
    pub how: String,
}

impl ListenArgs {
    /// Binds `--listen` after checking that plain TCP stays on loopback (or was allowed).
    pub fn bind(&self, tls: &TlsArgs, example: &str) -> Result<Listening> {
        let Some(listen) = &self.listen else {
            bail!("give --listen ADDR:PORT (e.g. {example}) or --stdio (a worker started over ssh)")
        };
        let addr: SocketAddr = listen
            .to_socket_addrs()
            .with_context(|| format!("--listen {listen}: not an ADDRESS:PORT (e.g. {example})"))?
            .next()
            .with_context(|| format!("--listen {listen} resolves to no address"))?;
        let files = tls.files();
        check_listen(addr, files.is_some(), self.insecure_listen).map_err(anyhow::Error::msg)?;
        let (admission, how) = match &files {
            Some(f) => (
                Admission::Tls(secure::server_config(f).map_err(anyhow::Error::msg)?),
                format!("mutual TLS, clients of CA {}", f.ca.display()),
            ),
            None if addr.ip().is_loopback() => (Admission::Plain, "plain TCP, loopback".into()),
            None => (
                Admission::Plain,
                "plain TCP (--insecure-listen: anyone who reaches it is served)".into(),
            ),
        };
        let listener = TcpListener::bind(addr).with_context(|| {
            format!("cannot listen on {listen} (an address of this host, e.g. {example})")
        })?;
        Ok(Listening {
            listener,
            admission,
            how,
        })
    }
}

/// How a coordinator reaches its workers.
#[derive(Args, Debug, Clone)]
pub struct DialArgs {
    /// The ssh command for ssh:// workers, with its own options (e.g. "ssh -F ./ssh_config -J
    /// jump"); BatchMode=yes is added, so a password prompt fails instead of waiting.
    #[arg(long, value_name = "COMMAND", default_value = "ssh")]
    pub ssh: String,
    /// The perfpilot program on ssh:// workers' hosts.
    #[arg(long, value_name = "PATH", default_value = "perfpilot")]
    pub remote_perfpilot: String,
}

impl DialArgs {
    /// The dialer these flags describe.
    pub fn dialer(&self, tls: &TlsArgs) -> Result<Dialer> {
        let ssh = shlex::split(&self.ssh)
            .filter(|w| !w.is_empty())
            .with_context(|| format!("--ssh {:?}: not a command", self.ssh))?;
        let tls = match tls.files() {
            Some(f) => Some(secure::client_config(&f).map_err(anyhow::Error::msg)?),
            None => None,
        };
        Ok(Dialer {
            tls,
            ssh,
            remote: self.remote_perfpilot.clone(),
        })
    }
}

/// A worker's log line: the time, then what happened (stderr: the journal under systemd).
pub fn log(line: &str) {
    eprintln!(
        "{} {line}",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    );
}

/// Who started this `--stdio` worker: the SSH client's address and the user, as sshd says.
pub fn stdio_peer() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "?".into());
    match std::env::var("SSH_CONNECTION") {
        Ok(c) => {
            let mut w = c.split_whitespace();
            match (w.next(), w.next()) {
                (Some(ip), Some(port)) => format!("{user} over ssh from {ip}:{port}"),
                _ => format!("{user} over ssh ({c})"),
            }
        }
        Err(_) => format!("stdio ({user}, not under ssh)"),
    }
}
