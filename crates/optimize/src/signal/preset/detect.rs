//! The preset table, and detection: which presets fit a process, at which endpoints, in
//! which order, with the config's `[[preset]]` entries applied.

use std::net::SocketAddr;

use super::{Candidate, Endpoint, Identity, PresetConfig, PresetKind, PresetSettings};

/// How a kind's Unix socket is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnixHint {
    /// It has no Unix socket perfpilot reads.
    None,
    /// PostgreSQL's `.s.PGSQL.<port>` (the port is part of the name).
    PgStyle,
    /// One of these file names.
    Named(&'static [&'static str]),
    /// Any Unix socket of a process recognised by name (no name rule of its own).
    Any,
}

/// One row of the preset table: how a kind is recognised and what it reads.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    /// The kind.
    pub kind: PresetKind,
    /// Command or executable names of its servers (a process with another name is recognised
    /// by its sockets instead).
    pub names: &'static [&'static str],
    /// Its well-known TCP ports, tried first and enough to recognise it alone.
    pub ports: &'static [u16],
    /// How its Unix socket is named.
    pub unix: UnixHint,
    /// Whether it is read over TCP listeners other than its well-known ports.
    pub any_tcp: bool,
    /// What it reads, for `status`.
    pub reads: &'static str,
}

/// The preset table, one row per [`PresetKind`] in the order of [`PresetKind::ALL`].
pub static PRESETS: [Preset; 6] = [
    Preset {
        kind: PresetKind::Postgres,
        names: &["postgres", "postmaster"],
        ports: &[5432],
        unix: UnixHint::PgStyle,
        any_tcp: true,
        reads: "xact_commit + xact_rollback from pg_stat_database",
    },
    Preset {
        kind: PresetKind::Redis,
        names: &["redis-server", "valkey-server"],
        ports: &[6379],
        unix: UnixHint::Any,
        any_tcp: true,
        reads: "total_commands_processed from INFO stats",
    },
    Preset {
        kind: PresetKind::Memcached,
        names: &["memcached"],
        ports: &[11211],
        unix: UnixHint::Any,
        any_tcp: true,
        reads: "cmd_get + cmd_set from stats",
    },
    Preset {
        kind: PresetKind::Nginx,
        names: &["nginx"],
        ports: &[],
        unix: UnixHint::None,
        any_tcp: true,
        reads: "requests from stub_status (/nginx_status, /stub_status or /basic_status)",
    },
    Preset {
        kind: PresetKind::Mysql,
        names: &["mysqld", "mariadbd"],
        ports: &[3306],
        unix: UnixHint::Named(&["mysqld.sock", "mysql.sock"]),
        any_tcp: true,
        reads: "Questions from SHOW GLOBAL STATUS",
    },
    Preset {
        kind: PresetKind::Prometheus,
        names: &[],
        ports: &[],
        unix: UnixHint::None,
        any_tcp: true,
        reads: "a request or operation counter from /metrics",
    },
];

/// The candidates to try for a process, best first.
///
/// `listeners` are the process's listening sockets as found (wildcard addresses allowed);
/// `overrides` are the config's `[[preset]]` entries, already validated. An entry applies to
/// the process when its `match` fits the identity, or, without `match`, when the process is
/// recognised as its kind. An applying entry with an address (`url`, `socket`, `port`) comes
/// first; its other settings (`user`, `password`, `dbname`, `metric`) go to every candidate
/// of its kind; `enabled = false` removes its kind. Then come the kinds the table recognises
/// (by name, Unix socket name or well-known port), their Unix sockets before their TCP
/// ports, well-known ports first; Prometheus comes last, on every TCP listener.
pub fn detect(id: &Identity, listeners: &[Endpoint], overrides: &[PresetConfig]) -> Vec<Candidate> {
    let listeners: Vec<Endpoint> = listeners.iter().map(Endpoint::reachable).collect();
    let mut out: Vec<Candidate> = Vec::new();
    let applying: Vec<(usize, &PresetConfig)> = overrides
        .iter()
        .enumerate()
        .filter(|(_, o)| match &o.matches {
            Some(m) => m.fits(id),
            None => recognise(o.kind, id, &listeners).is_some(),
        })
        .collect();
    let disabled = |kind| applying.iter().any(|(_, o)| o.kind == kind && !o.enabled);
    for &(i, o) in &applying {
        if !o.enabled {
            continue;
        }
        if let Some((endpoint, path)) = o.endpoint() {
            let mut settings = settings_for(o.kind, id, &endpoint, &applying);
            if path.is_some() {
                settings.path = path;
            }
            out.push(Candidate {
                kind: o.kind,
                why: format!(
                    "[[preset]] #{} ({}) for {}: {endpoint}",
                    i + 1,
                    o.kind,
                    id.comm
                ),
                endpoint,
                settings,
            });
        }
    }
    for kind in PresetKind::ALL {
        if disabled(kind) {
            continue;
        }
        let reason = recognise(kind, id, &listeners).or_else(|| {
            applying
                .iter()
                .find(|(_, o)| o.kind == kind && o.enabled)
                .map(|(i, _)| format!("[[preset]] #{} matches {}", i + 1, id.comm))
        });
        let Some(reason) = reason else { continue };
        for endpoint in endpoints_of(kind.preset(), &listeners) {
            let settings = settings_for(kind, id, &endpoint, &applying);
            out.push(Candidate {
                kind,
                why: format!("{reason}; listens on {endpoint}"),
                endpoint,
                settings,
            });
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| seen.insert((c.kind, c.endpoint.clone(), c.settings.path.clone())));
    out
}

/// Why the process is of `kind` per the table, or `None`.
fn recognise(kind: PresetKind, id: &Identity, listeners: &[Endpoint]) -> Option<String> {
    let p = kind.preset();
    if kind == PresetKind::Prometheus {
        return listeners
            .iter()
            .any(|l| matches!(l, Endpoint::Tcp(_)))
            .then(|| format!("{} has a TCP listener", id.comm));
    }
    if p.names.contains(&id.comm.as_str()) {
        return Some(format!("{} is {kind} by its name", id.comm));
    }
    if let Some(exe) = id.exe_name().filter(|n| p.names.contains(n)) {
        return Some(format!("{} runs {exe}", id.comm));
    }
    for l in listeners {
        if unix_fits(p.unix, l, false) {
            return Some(format!("{} has {kind}'s socket {l}", id.comm));
        }
        if l.port().is_some_and(|port| p.ports.contains(&port)) {
            return Some(format!("{} listens on {kind}'s port {l}", id.comm));
        }
    }
    None
}

/// Whether `l` is a Unix socket named as `hint` says; `Any` fits only a process already
/// recognised by name (`by_name`).
fn unix_fits(hint: UnixHint, l: &Endpoint, by_name: bool) -> bool {
    let Some(name) = l.file_name() else {
        return false;
    };
    match hint {
        UnixHint::None => false,
        UnixHint::PgStyle => pg_socket_port(name).is_some(),
        UnixHint::Named(names) => names.contains(&name),
        UnixHint::Any => by_name,
    }
}

/// The port in a PostgreSQL socket name `.s.PGSQL.<port>`.
pub(crate) fn pg_socket_port(name: &str) -> Option<u16> {
    name.strip_prefix(".s.PGSQL.")?.parse().ok()
}

/// A recognised kind's endpoints, in the order to try: Unix sockets, then well-known ports,
/// then the other TCP listeners by port (one address per port, IPv4 first).
fn endpoints_of(p: &Preset, listeners: &[Endpoint]) -> Vec<Endpoint> {
    let mut unix: Vec<Endpoint> = listeners
        .iter()
        .filter(|l| unix_fits(p.unix, l, true))
        .cloned()
        .collect();
    unix.sort();
    let mut tcp: Vec<SocketAddr> = listeners
        .iter()
        .filter_map(|l| match l {
            Endpoint::Tcp(a) => Some(*a),
            Endpoint::Unix(_) => None,
        })
        .filter(|a| p.any_tcp || p.ports.contains(&a.port()))
        .collect();
    tcp.sort_by_key(|a| (!p.ports.contains(&a.port()), a.port(), a.is_ipv6(), a.ip()));
    tcp.dedup_by_key(|a| a.port());
    unix.into_iter()
        .chain(tcp.into_iter().map(Endpoint::Tcp))
        .collect()
}

/// The settings of a candidate of `kind` at `endpoint`: the applying entries' credentials
/// and metric, and the server's ids for a Unix socket reached without a password.
fn settings_for(
    kind: PresetKind,
    id: &Identity,
    endpoint: &Endpoint,
    applying: &[(usize, &PresetConfig)],
) -> PresetSettings {
    let mut s = PresetSettings::default();
    for (_, o) in applying.iter().filter(|(_, o)| o.kind == kind) {
        s.user = s.user.take().or_else(|| o.user.clone());
        s.password = s.password.take().or_else(|| o.password.clone());
        s.dbname = s.dbname.take().or_else(|| o.dbname.clone());
        s.metric = s.metric.take().or_else(|| o.metric.clone());
    }
    if matches!(endpoint, Endpoint::Unix(_)) && s.password.is_none() {
        s.run_as = Some((id.uid, id.gid));
    }
    s
}
