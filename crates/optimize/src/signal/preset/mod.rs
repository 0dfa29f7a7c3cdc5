//! Built-in application signals ("presets"): for a server found with no configuration, a
//! counter of completed work read from the server itself.
//!
//! [`detect`] looks at what a process is ([`Identity`]) and where it listens ([`Endpoint`]s)
//! and lists the [`Candidate`]s to try, best first, from the table [`PRESETS`] and the
//! config's `[[preset]]` entries ([`PresetConfig`]). A [`PresetReader`] reads one candidate:
//! each [`read`](PresetReader::read) gives a [`Reading`] (a count that only grows) or a
//! [`PresetError`] naming the preset, the endpoint and what to do.
//!
//! | preset | recognised by | reads |
//! |---|---|---|
//! | `postgresql` | `postgres`; `.s.PGSQL.<port>`; port 5432 | `xact_commit + xact_rollback` summed over `pg_stat_database` |
//! | `redis` | `redis-server`, `valkey-server`; port 6379 | `INFO stats` `total_commands_processed` |
//! | `memcached` | `memcached`; port 11211 | `stats` `cmd_get + cmd_set` |
//! | `nginx` | `nginx` | `requests` of `stub_status` |
//! | `mysql` | `mysqld`, `mariadbd`; `mysqld.sock`, `mysql.sock`; port 3306 | `SHOW GLOBAL STATUS LIKE 'Questions'` (as `root` over the socket by default) |
//! | `prometheus` | any TCP listener | a request or operation counter of `/metrics`, by [`prometheus::COUNTER_RULES`] |

mod config;
mod detect;
#[doc(hidden)]
pub mod fuzzing;
mod memcached;
mod mysql;
mod nginx;
mod postgres;
pub mod prometheus;
mod reader;
mod redis;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use perfpilot_sys::process::ProcReader;

pub use config::{PresetConfig, PresetConfigError, ProcessMatch};
pub(crate) use detect::pg_socket_port;
pub use detect::{PRESETS, Preset, UnixHint, detect};
pub use reader::PresetReader;

/// The kinds of server perfpilot reads a work counter from without configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PresetKind {
    /// PostgreSQL: committed and rolled-back transactions.
    Postgres,
    /// Redis or Valkey: commands processed.
    Redis,
    /// memcached: get and set commands.
    Memcached,
    /// nginx: requests, from `stub_status`.
    Nginx,
    /// MySQL or MariaDB: `Questions`.
    Mysql,
    /// Any server with a Prometheus `/metrics` page: a request or operation counter.
    Prometheus,
}

impl PresetKind {
    /// How often the counter moves, for a counter that moves in lumps rather than with each
    /// unit of work: PostgreSQL's backends flush their statistics at most once a second
    /// (measured: docs/optimizer.md). `None`: it moves with the work.
    pub fn lump_period_s(self) -> Option<f64> {
        match self {
            PresetKind::Postgres => Some(1.0),
            _ => None,
        }
    }

    /// Every kind, in the order [`detect`] tries them (Prometheus last: it fits anything).
    pub const ALL: [PresetKind; 6] = [
        PresetKind::Postgres,
        PresetKind::Redis,
        PresetKind::Memcached,
        PresetKind::Nginx,
        PresetKind::Mysql,
        PresetKind::Prometheus,
    ];

    /// The name in the config (`kind = "…"`) and in `status`.
    pub fn as_str(self) -> &'static str {
        match self {
            PresetKind::Postgres => "postgresql",
            PresetKind::Redis => "redis",
            PresetKind::Memcached => "memcached",
            PresetKind::Nginx => "nginx",
            PresetKind::Mysql => "mysql",
            PresetKind::Prometheus => "prometheus",
        }
    }

    /// This kind's row of [`PRESETS`].
    pub fn preset(self) -> &'static Preset {
        // The table has one row per kind, in the order of ALL (a unit test checks it).
        &PRESETS[self as usize]
    }
}

impl fmt::Display for PresetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A preset name that is none of [`PresetKind`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown preset kind {0:?}: use one of postgresql, redis, memcached, nginx, mysql, prometheus"
)]
pub struct UnknownPresetKind(pub String);

impl FromStr for PresetKind {
    type Err = UnknownPresetKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "postgresql" | "postgres" => PresetKind::Postgres,
            "redis" | "valkey" => PresetKind::Redis,
            "memcached" => PresetKind::Memcached,
            "nginx" => PresetKind::Nginx,
            "mysql" | "mariadb" => PresetKind::Mysql,
            "prometheus" => PresetKind::Prometheus,
            other => return Err(UnknownPresetKind(other.to_string())),
        })
    }
}

impl serde::Serialize for PresetKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for PresetKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where a server listens.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix stream socket's path.
    Unix(PathBuf),
}

impl Endpoint {
    /// The address to connect to: a wildcard listen address (`0.0.0.0`, `::`) is reached
    /// through loopback (`127.0.0.1`, `::1`); anything else is itself.
    pub fn reachable(&self) -> Endpoint {
        match self {
            Endpoint::Tcp(a) if a.ip() == IpAddr::V4(Ipv4Addr::UNSPECIFIED) => {
                Endpoint::Tcp(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), a.port()))
            }
            Endpoint::Tcp(a) if a.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED) => {
                Endpoint::Tcp(SocketAddr::new(Ipv6Addr::LOCALHOST.into(), a.port()))
            }
            other => other.clone(),
        }
    }

    /// The TCP port, for a TCP endpoint.
    pub fn port(&self) -> Option<u16> {
        match self {
            Endpoint::Tcp(a) => Some(a.port()),
            Endpoint::Unix(_) => None,
        }
    }

    /// The socket file's name, for a Unix endpoint.
    fn file_name(&self) -> Option<&str> {
        match self {
            Endpoint::Unix(p) => p.file_name().and_then(|n| n.to_str()),
            Endpoint::Tcp(_) => None,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "{a}"),
            Endpoint::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// What a process is, as far as recognising a preset goes.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    /// The command name (`/proc/PID/comm`).
    pub comm: String,
    /// The executable (`/proc/PID/exe`), when readable.
    pub exe: Option<PathBuf>,
    /// The command line, words joined by spaces.
    pub cmdline: String,
    /// The real user id the process runs as.
    pub uid: u32,
    /// The real group id the process runs as.
    pub gid: u32,
}

impl Identity {
    /// What `/proc` says about process `pid`; `None` when its status cannot be read (it ended,
    /// or is not ours to read). The command line is empty where `/proc` gives none.
    pub fn read(reader: &mut ProcReader, pid: i32) -> Option<Identity> {
        let status = reader.status(pid).ok()?;
        Some(Identity {
            comm: status.name,
            exe: reader.exe(pid).ok().flatten(),
            cmdline: reader.cmdline(pid).map(|c| c.join(" ")).unwrap_or_default(),
            uid: status.uid,
            gid: status.gid,
        })
    }

    /// The executable's file name, when known.
    fn exe_name(&self) -> Option<&str> {
        self.exe
            .as_deref()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
    }
}

/// Connection settings of a candidate: from the config, or derived from the process.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct PresetSettings {
    /// The user (PostgreSQL role, MySQL user, Redis ACL user).
    pub user: Option<String>,
    /// The password; never serialized, so a candidate shown in `status --json` or logged as
    /// JSON does not carry it.
    #[serde(skip_serializing, default)]
    pub password: Option<String>,
    /// PostgreSQL's database (default `postgres`).
    pub dbname: Option<String>,
    /// The HTTP path (nginx, Prometheus), when not the default ones.
    pub path: Option<String>,
    /// The Prometheus metric to read, when not chosen by the name rules.
    pub metric: Option<String>,
    /// The server's uid and gid, to connect to a Unix socket as its OS user (peer
    /// authentication) when no password is configured.
    pub run_as: Option<(u32, u32)>,
}

/// One thing to try: a kind at an endpoint, why, and how to connect.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Candidate {
    /// The preset.
    pub kind: PresetKind,
    /// Where to connect (already made reachable: wildcard addresses become loopback).
    pub endpoint: Endpoint,
    /// Why it was chosen, for `status` ("postgres listens on /run/postgresql/.s.PGSQL.5432").
    pub why: String,
    /// How to connect.
    pub settings: PresetSettings,
}

impl Candidate {
    /// What it reads and where, for `status` ("redis at 127.0.0.1:6379: total_commands_processed from INFO stats").
    pub fn describe(&self) -> String {
        format!(
            "{} at {}: {}",
            self.kind,
            self.endpoint,
            self.kind.preset().reads
        )
    }
}

/// One reading of a preset's counter.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reading {
    /// The count of completed work so far; it only grows while the server runs.
    pub value: f64,
    /// What was read, for `status` ("chose app_requests_total, sum of 3 series").
    pub source: String,
}

/// The preset and endpoint an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At {
    /// The preset.
    pub kind: PresetKind,
    /// Where it was read.
    pub endpoint: Endpoint,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} preset at {}", self.kind, self.endpoint)
    }
}

/// Why a preset gave no reading. Every message names the preset and the endpoint.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PresetError {
    /// No connection: refused, no such socket, unreachable.
    #[error("{at}: cannot connect ({why}); is the server still listening there?")]
    Unreachable {
        /// Which preset and endpoint.
        at: At,
        /// The system's answer.
        why: String,
    },
    /// The server wants credentials, or refused the ones given.
    #[error("{at}: {why}; set `{field}` in a [[preset]] with kind = \"{kind}\"", kind = at.kind)]
    Auth {
        /// Which preset and endpoint.
        at: At,
        /// The `[[preset]]` field to set (`password`, `user`).
        field: &'static str,
        /// What the server said.
        why: String,
    },
    /// No answer within the timeout.
    #[error("{at}: no answer within {}", perfpilot_units::duration(*timeout))]
    Timeout {
        /// Which preset and endpoint.
        at: At,
        /// The timeout.
        timeout: Duration,
    },
    /// An earlier read that timed out has still not returned; no new read is started.
    #[error(
        "{at}: an earlier read is still waiting for the server after {}; no new read until it ends",
        perfpilot_units::duration(*waiting)
    )]
    StillWaiting {
        /// Which preset and endpoint.
        at: At,
        /// How long the earlier read has waited.
        waiting: Duration,
    },
    /// The answer is not what this kind of server says.
    #[error("{at}: the answer is not {kind}'s: {got:?}", kind = at.kind)]
    Garbage {
        /// Which preset and endpoint.
        at: At,
        /// The start of what was received.
        got: String,
    },
    /// The answer lacks the counter.
    #[error("{at}: {what} is not in the answer")]
    MetricMissing {
        /// Which preset and endpoint.
        at: At,
        /// What was looked for.
        what: String,
    },
    /// The answer is larger than perfpilot reads.
    #[error("{at}: the answer is larger than {}; perfpilot reads no further", perfpilot_units::bytes(*limit))]
    TooLarge {
        /// Which preset and endpoint.
        at: At,
        /// The cap in bytes.
        limit: u64,
    },
    /// The server answered with an error, or something else went wrong.
    #[error("{at}: {why}")]
    Failed {
        /// Which preset and endpoint.
        at: At,
        /// What happened, and what to do.
        why: String,
    },
    /// This build cannot read this kind.
    #[error("{at}: not supported in this build: {why}")]
    Unsupported {
        /// Which preset and endpoint.
        at: At,
        /// Why, and what to use instead.
        why: String,
    },
}

impl PresetError {
    /// The preset and endpoint the error is about.
    pub fn at(&self) -> &At {
        match self {
            PresetError::Unreachable { at, .. }
            | PresetError::Auth { at, .. }
            | PresetError::Timeout { at, .. }
            | PresetError::StillWaiting { at, .. }
            | PresetError::Garbage { at, .. }
            | PresetError::MetricMissing { at, .. }
            | PresetError::TooLarge { at, .. }
            | PresetError::Failed { at, .. }
            | PresetError::Unsupported { at, .. } => at,
        }
    }
}

/// The first `max` characters of `bytes` as text (lossy), with `…` when cut: what an error
/// shows of an answer.
pub(crate) fn snippet(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text.chars().take(max).collect();
    if text.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// `bytes` as text when they are printable ASCII, else as hex: what an error shows of an
/// answer that is not the server's protocol.
pub(crate) fn printable(bytes: &[u8]) -> String {
    if bytes
        .iter()
        .all(|b| b.is_ascii_graphic() || *b == b' ' || *b == b'\r' || *b == b'\n')
    {
        snippet(bytes, 80)
    } else {
        let mut out: Vec<String> = bytes.iter().take(32).map(|b| format!("{b:02x}")).collect();
        if bytes.len() > 32 {
            out.push("…".into());
        }
        out.join(" ")
    }
}

#[cfg(test)]
mod tests;
