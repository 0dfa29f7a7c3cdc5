//! Networking: interface counters (`/proc/net/dev`, here), and the sockets processes listen
//! on (`/proc/net/{tcp,tcp6,unix}` with `/proc/<pid>/fd`), which tell what a process serves.

mod listen;
mod port;
mod sockets;

pub use listen::{
    Listener, ListeningSocket, SocketOwner, TcpPortHolder, holder_of_tcp_port, listeners_of,
    listening_sockets, socket_inodes, socket_owner, tcp_sockets, unix_sockets,
};
pub use port::port_free;
pub use sockets::{TcpSocket, TcpState, UnixSocket, UnixType, parse_tcp, parse_unix};

use serde::{Deserialize, Serialize};

use crate::{Error, Fs, Result};

/// The counters of one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetDev {
    /// The interface name (`eth0`, `lo`).
    pub name: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Received packets dropped.
    pub rx_dropped: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Send errors.
    pub tx_errors: u64,
    /// Packets dropped on sending.
    pub tx_dropped: u64,
}

/// Parses `/proc/net/dev` (two header lines, then `name: 16 counters`).
pub fn parse_net_dev(text: &str, path: &std::path::Path) -> Result<Vec<NetDev>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some((name, rest)) = line.split_once(':') else {
            continue; // header lines
        };
        if name.contains('|') {
            continue;
        }
        let v: Vec<u64> = rest
            .split_ascii_whitespace()
            .map(|t| t.parse::<u64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| {
                Error::parse(
                    path,
                    i + 1,
                    format!("{}: counters are not numbers", name.trim()),
                )
            })?;
        if v.len() < 16 {
            return Err(Error::parse(
                path,
                i + 1,
                format!("{}: {} counters; expected 16", name.trim(), v.len()),
            ));
        }
        out.push(NetDev {
            name: name.trim().to_string(),
            rx_bytes: v[0],
            rx_packets: v[1],
            rx_errors: v[2],
            rx_dropped: v[3],
            tx_bytes: v[8],
            tx_packets: v[9],
            tx_errors: v[10],
            tx_dropped: v[11],
        });
    }
    Ok(out)
}

/// Reads `/proc/net/dev`.
pub fn read_net_dev(fs: &Fs) -> Result<Vec<NetDev>> {
    let path = fs.path("proc/net/dev");
    let text = crate::fs::read_string(&path)?;
    parse_net_dev(&text, &path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_dev_lines() {
        let text = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0\n  eth0: 100 2 0 1 0 0 0 0 200 3 0 0 0 0 0 0\n";
        let d = parse_net_dev(text, std::path::Path::new("/proc/net/dev")).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].name, "eth0");
        assert_eq!(d[1].rx_dropped, 1);
        assert_eq!(d[1].tx_bytes, 200);
        assert!(parse_net_dev("eth0: 1 2 3\n", std::path::Path::new("/n")).is_err());
    }
}
