//! The sockets processes listen on: each process's socket inodes (`/proc/<pid>/fd`) matched
//! against the socket tables of its network namespace (`/proc/<pid>/net/{tcp,tcp6,unix}`).

use std::collections::{BTreeSet, HashMap};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::sockets::{TcpSocket, TcpState, UnixSocket, parse_tcp, parse_unix};
use crate::{Error, Fs, Result};

/// Where a process accepts connections. Ordered TCP first, then Unix, each by address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Listener {
    /// A listening TCP socket's local address (`0.0.0.0` or `::` for every address).
    Tcp(SocketAddr),
    /// A listening Unix-domain socket's name: a path, or `@name` for an abstract one.
    Unix(PathBuf),
}

impl std::fmt::Display for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listener::Tcp(addr) => write!(f, "tcp {addr}"),
            Listener::Unix(path) => write!(f, "unix {}", path.display()),
        }
    }
}

/// A listening socket and its inode (which `/proc/<pid>/fd` links name `socket:[inode]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListeningSocket {
    /// Where it listens.
    pub listener: Listener,
    /// Its inode.
    pub inode: u64,
}

/// A process holding a socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketOwner {
    /// Its process id.
    pub pid: i32,
    /// Its command name (`/proc/<pid>/comm`).
    pub comm: String,
}

/// Who holds a TCP port, from the socket tables of the caller's network namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpPortHolder {
    /// The user id owning the socket.
    pub uid: u32,
    /// The process with a descriptor on it, when this user may read that process's
    /// descriptors.
    pub owner: Option<SocketOwner>,
}

/// The `net` directory to read for `pid`: its own, which shows its network namespace, or
/// `proc/net` (the reader's namespace) where there is none, as in a captured tree.
fn net_dir(fs: &Fs, pid: i32) -> Result<String> {
    let own = format!("proc/{pid}/net");
    if fs.path(&own).is_dir() {
        return Ok(own);
    }
    let dir = fs.path(&format!("proc/{pid}"));
    if dir.is_dir() {
        Ok("proc/net".into())
    } else {
        Err(Error::Vanished { path: dir })
    }
}

/// Reads `dir/name`; `None` where an optional table is absent (`tcp6` without IPv6).
fn read_table(fs: &Fs, dir: &str, name: &str, required: bool) -> Result<Option<Vec<u8>>> {
    let path = fs.path(&format!("{dir}/{name}"));
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound && !required => Ok(None),
        // A per-process table that went away means the process did.
        Err(e) if e.kind() == ErrorKind::NotFound && dir != "proc/net" => {
            Err(Error::Vanished { path })
        }
        Err(source) => Err(Error::Io { path, source }),
    }
}

/// The TCP sockets (IPv4, then IPv6) of the namespace `dir` shows.
fn tcp_in(fs: &Fs, dir: &str) -> Result<Vec<TcpSocket>> {
    let mut out = Vec::new();
    for (name, required) in [("tcp", true), ("tcp6", false)] {
        if let Some(bytes) = read_table(fs, dir, name, required)? {
            let path = fs.path(&format!("{dir}/{name}"));
            let text = std::str::from_utf8(&bytes)
                .map_err(|_| Error::parse(&path, 1, "the table is not text"))?;
            out.extend(parse_tcp(text, &path)?);
        }
    }
    Ok(out)
}

/// Every TCP socket (IPv4, then IPv6) in `pid`'s network namespace.
pub fn tcp_sockets(fs: &Fs, pid: i32) -> Result<Vec<TcpSocket>> {
    tcp_in(fs, &net_dir(fs, pid)?)
}

/// Every Unix-domain socket in `pid`'s network namespace.
pub fn unix_sockets(fs: &Fs, pid: i32) -> Result<Vec<UnixSocket>> {
    let dir = net_dir(fs, pid)?;
    match read_table(fs, &dir, "unix", false)? {
        Some(bytes) => parse_unix(&bytes, &fs.path(&format!("{dir}/unix"))),
        None => Ok(Vec::new()),
    }
}

/// Every listening socket in `pid`'s network namespace, whoever holds it: TCP (IPv4, IPv6),
/// then Unix, in table order.
pub fn listening_sockets(fs: &Fs, pid: i32) -> Result<Vec<ListeningSocket>> {
    let tcp = tcp_sockets(fs, pid)?
        .into_iter()
        .filter(|s| s.state == TcpState::Listen)
        .map(|s| ListeningSocket {
            listener: Listener::Tcp(s.local),
            inode: s.inode,
        });
    let unix = unix_sockets(fs, pid)?.into_iter().filter_map(|s| {
        Some(ListeningSocket {
            listener: Listener::Unix(s.path.filter(|_| s.listening)?),
            inode: s.inode,
        })
    });
    Ok(tcp.chain(unix).collect())
}

/// The inodes of the sockets `pid` has descriptors on (`/proc/<pid>/fd/*` -> `socket:[N]`).
/// A process that is gone gives [`Error::Vanished`]; one this user may not look into, an
/// [`Error::Io`] for which [`Error::is_permission`] holds. A descriptor closed while the
/// directory is read is skipped.
pub fn socket_inodes(fs: &Fs, pid: i32) -> Result<BTreeSet<u64>> {
    let dir = fs.path(&format!("proc/{pid}/fd"));
    let entries = std::fs::read_dir(&dir).map_err(|source| match source.kind() {
        ErrorKind::NotFound => Error::Vanished { path: dir.clone() },
        _ => Error::Io {
            path: dir.clone(),
            source,
        },
    })?;
    let mut out = BTreeSet::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        let link = match std::fs::read_link(entry.path()) {
            Ok(link) => link,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(Error::Io {
                    path: entry.path(),
                    source,
                });
            }
        };
        let inode: Option<u64> = link
            .to_str()
            .and_then(|l| l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok());
        out.extend(inode);
    }
    Ok(out)
}

/// The listening sockets that any of `pids` holds a descriptor on: de-duplicated, TCP first
/// and then Unix, each sorted. A pre-forked server's listening socket is often held by the
/// parent only, so pass the whole group. Processes that vanished or cannot be looked into
/// are skipped; each network namespace's tables are read once.
pub fn listeners_of(fs: &Fs, pids: &[i32]) -> Vec<Listener> {
    let mut tables: HashMap<String, Vec<ListeningSocket>> = HashMap::new();
    let mut out = BTreeSet::new();
    for &pid in pids {
        let Ok(inodes) = socket_inodes(fs, pid) else {
            continue;
        };
        if inodes.is_empty() {
            continue;
        }
        // The namespace's identity where the kernel shows it, else the directory read.
        let key = std::fs::read_link(fs.path(&format!("proc/{pid}/ns/net")))
            .map(|l| l.to_string_lossy().into_owned())
            .or_else(|_| net_dir(fs, pid));
        let Ok(key) = key else {
            continue;
        };
        let listening = match tables.get(&key) {
            Some(l) => l,
            None => {
                let Ok(l) = listening_sockets(fs, pid) else {
                    continue;
                };
                tables.entry(key).or_insert(l)
            }
        };
        out.extend(
            listening
                .iter()
                .filter(|s| inodes.contains(&s.inode))
                .map(|s| s.listener.clone()),
        );
    }
    out.into_iter().collect()
}

/// The process (lowest pid first) with a descriptor on socket `inode`, among those this user
/// may look into; `None` when there is none.
pub fn socket_owner(fs: &Fs, inode: u64) -> Option<SocketOwner> {
    let mut pids: Vec<i32> = fs
        .list("proc")
        .ok()?
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter().find_map(|pid| {
        if !socket_inodes(fs, pid).is_ok_and(|s| s.contains(&inode)) {
            return None;
        }
        // A process whose name cannot be read has exited since.
        let comm = fs.read(&format!("proc/{pid}/comm")).ok()?;
        Some(SocketOwner {
            pid,
            comm: comm.trim_end_matches('\n').to_string(),
        })
    })
}

/// Who holds TCP `port` in the caller's network namespace (`/proc/net/tcp{,6}`): a listening
/// socket's owner before that of any other socket bound to the port; `None` when no socket
/// held by a descriptor is.
pub fn holder_of_tcp_port(fs: &Fs, port: u16) -> Option<TcpPortHolder> {
    // A table that cannot be read leaves only the other one to look at.
    let sockets: Vec<TcpSocket> = ["tcp", "tcp6"]
        .into_iter()
        .filter_map(|name| {
            let bytes = read_table(fs, "proc/net", name, false).ok()??;
            let path = fs.path(&format!("proc/net/{name}"));
            parse_tcp(std::str::from_utf8(&bytes).ok()?, &path).ok()
        })
        .flatten()
        .filter(|s| s.local.port() == port && s.inode != 0)
        .collect();
    let socket = sockets
        .iter()
        .find(|s| s.state == TcpState::Listen)
        .or_else(|| sockets.first())?;
    Some(TcpPortHolder {
        uid: socket.uid,
        owner: socket_owner(fs, socket.inode),
    })
}
