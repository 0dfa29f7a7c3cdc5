//! The socket tables of a network namespace: `/proc/net/tcp`, `/proc/net/tcp6` and
//! `/proc/net/unix`, parsed into one typed row per socket.

use std::ffi::OsStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The state of a TCP socket (the `st` column; numbered as in the kernel's `tcp_states.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TcpState {
    /// `01`: a connection that carries data.
    Established,
    /// `02`: connecting, SYN sent.
    SynSent,
    /// `03`: a SYN received, answer sent.
    SynRecv,
    /// `04`: closing, FIN sent.
    FinWait1,
    /// `05`: closing, FIN acknowledged.
    FinWait2,
    /// `06`: closed, waiting for late segments.
    TimeWait,
    /// `07`: closed.
    Close,
    /// `08`: the peer closed; this side has not yet.
    CloseWait,
    /// `09`: closing, waiting for the last acknowledgement.
    LastAck,
    /// `0A`: a listening socket.
    Listen,
    /// `0B`: both sides closing at once.
    Closing,
    /// Any other code (kernels add internal states now and then).
    Other(u8),
}

impl TcpState {
    /// The state of a `st` code.
    pub fn from_code(code: u8) -> Self {
        use TcpState::*;
        match code {
            0x01 => Established,
            0x02 => SynSent,
            0x03 => SynRecv,
            0x04 => FinWait1,
            0x05 => FinWait2,
            0x06 => TimeWait,
            0x07 => Close,
            0x08 => CloseWait,
            0x09 => LastAck,
            0x0A => Listen,
            0x0B => Closing,
            other => Other(other),
        }
    }
}

/// One row of `/proc/net/tcp` or `/proc/net/tcp6`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpSocket {
    /// The local address and port.
    pub local: SocketAddr,
    /// The remote address and port (unspecified, port 0, for a listening socket).
    pub remote: SocketAddr,
    /// The connection state.
    pub state: TcpState,
    /// The user id owning the socket.
    pub uid: u32,
    /// The socket's inode, which `/proc/<pid>/fd` links name as `socket:[inode]`; 0 for a
    /// socket no descriptor holds any more (`TIME_WAIT`).
    pub inode: u64,
}

/// The type of a Unix-domain socket (the `Type` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnixType {
    /// `0001`: `SOCK_STREAM`.
    Stream,
    /// `0002`: `SOCK_DGRAM`.
    Datagram,
    /// `0005`: `SOCK_SEQPACKET`.
    SeqPacket,
    /// Any other type code.
    Other(u16),
}

impl UnixType {
    /// The type of a `Type` code.
    pub fn from_code(code: u16) -> Self {
        match code {
            1 => UnixType::Stream,
            2 => UnixType::Datagram,
            5 => UnixType::SeqPacket,
            other => UnixType::Other(other),
        }
    }
}

/// One row of `/proc/net/unix`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnixSocket {
    /// The bound name: a filesystem path, or an abstract name written `@name` (the kernel
    /// prints the leading and any inner NUL bytes as `@`); `None` for an unbound socket.
    pub path: Option<PathBuf>,
    /// Stream, datagram or sequenced packets.
    pub kind: UnixType,
    /// True for a socket that accepts connections (`__SO_ACCEPTCON` in `Flags`).
    pub listening: bool,
    /// The socket's inode, as in `/proc/<pid>/fd` links.
    pub inode: u64,
}

/// `__SO_ACCEPTCON`: the flag `listen()` sets on a socket.
const ACCEPT_CONNECTIONS: u32 = 1 << 16;

/// Parses `/proc/net/tcp` or `/proc/net/tcp6` text (a header line, then `sl local_address
/// rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...`).
pub fn parse_tcp(text: &str, path: &Path) -> Result<Vec<TcpSocket>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: &str| Error::parse(path, i + 1, format!("{what} in {:?}", line.trim()));
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.len() < 10 {
            return Err(bad(&format!("{} columns; expected at least 10", f.len())));
        }
        let local = parse_address(f[1]).ok_or_else(|| bad("a malformed local address"))?;
        let remote = parse_address(f[2]).ok_or_else(|| bad("a malformed remote address"))?;
        let state = u8::from_str_radix(f[3], 16).map_err(|_| bad("a malformed state"))?;
        let uid = f[7].parse().map_err(|_| bad("a malformed uid"))?;
        let inode = f[9].parse().map_err(|_| bad("a malformed inode"))?;
        out.push(TcpSocket {
            local,
            remote,
            state: TcpState::from_code(state),
            uid,
            inode,
        });
    }
    Ok(out)
}

/// Parses `ADDRESS:PORT` in hex. The kernel prints each 32-bit word of the network-order
/// address as a host-order number (so little-endian on x86 and arm64), and the port plainly.
fn parse_address(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |hex: &[u8]| -> Option<[u8; 4]> {
        let hex = std::str::from_utf8(hex).ok()?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip: IpAddr = match ip.len() {
        8 => Ipv4Addr::from(word(ip.as_bytes())?).into(),
        32 => {
            let mut bytes = [0u8; 16];
            for (dst, hex) in bytes.chunks_mut(4).zip(ip.as_bytes().chunks(8)) {
                dst.copy_from_slice(&word(hex)?);
            }
            Ipv6Addr::from(bytes).into()
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Parses `/proc/net/unix` (a header line, then `Num: RefCount Protocol Flags Type St Inode
/// [Path]`). Bytes rather than text, because a socket path may be any bytes. The path is
/// printed raw, so one holding a newline continues on the next line: such a line is joined
/// back onto the path before it.
pub fn parse_unix(text: &[u8], path: &Path) -> Result<Vec<UnixSocket>> {
    let mut out: Vec<UnixSocket> = Vec::new();
    let mut lines = text.split(|&b| b == b'\n').enumerate().skip(1).peekable();
    while let Some((i, line)) = lines.next() {
        if line.is_empty() && lines.peek().is_none() {
            break; // the final newline
        }
        let shown = || String::from_utf8_lossy(line).trim().to_string();
        let bad = |what: &str| Error::parse(path, i + 1, format!("{what} in {:?}", shown()));
        let (fields, rest) = split_fields::<7>(line);
        let named_row = fields[0].is_some_and(|f| f.ends_with(b":"));
        if !named_row {
            // The rest of the previous socket's path, cut by a newline in it.
            match out.last_mut().and_then(|s| s.path.as_mut()) {
                Some(p) => {
                    let mut bytes = p.as_os_str().as_bytes().to_vec();
                    bytes.push(b'\n');
                    bytes.extend_from_slice(line);
                    *p = PathBuf::from(OsStr::from_bytes(&bytes));
                    continue;
                }
                None => return Err(bad("a line that is not a socket")),
            }
        }
        let [
            Some(_),
            Some(_),
            Some(_),
            Some(flags),
            Some(kind),
            Some(_),
            Some(inode),
        ] = fields
        else {
            return Err(bad("fewer than 7 columns"));
        };
        let hex = |b: &[u8]| {
            std::str::from_utf8(b)
                .ok()
                .and_then(|s| u32::from_str_radix(s, 16).ok())
        };
        let flags = hex(flags).ok_or_else(|| bad("malformed flags"))?;
        let kind = hex(kind)
            .and_then(|k| u16::try_from(k).ok())
            .ok_or_else(|| bad("a malformed type"))?;
        let inode = std::str::from_utf8(inode)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("a malformed inode"))?;
        // One space separates the inode from the path, which is kept byte for byte.
        let name = rest.strip_prefix(b" ").filter(|p| !p.is_empty());
        out.push(UnixSocket {
            path: name.map(|p| PathBuf::from(OsStr::from_bytes(p))),
            kind: UnixType::from_code(kind),
            listening: flags & ACCEPT_CONNECTIONS != 0,
            inode,
        });
    }
    Ok(out)
}

/// The first `N` space-separated fields of `line` and what follows the last of them.
fn split_fields<const N: usize>(line: &[u8]) -> ([Option<&[u8]>; N], &[u8]) {
    let mut fields = [None; N];
    let mut pos = 0;
    for field in &mut fields {
        while line.get(pos) == Some(&b' ') {
            pos += 1;
        }
        let start = pos;
        while line.get(pos).is_some_and(|&b| b != b' ') {
            pos += 1;
        }
        if pos == start {
            break;
        }
        *field = Some(&line[start..pos]);
    }
    (fields, &line[pos..])
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured on this project's build VM from a python3 process that bound and listened on
    // 127.0.0.1:18080, 0.0.0.0:18081, [::1]:18082, [::]:18083, and Unix sockets (see
    // tests/fixtures/listeners/README.md).
    const TCP: &str = include_str!("../../tests/fixtures/listeners/proc/8509/net/tcp");
    const TCP6: &str = include_str!("../../tests/fixtures/listeners/proc/8509/net/tcp6");
    const UNIX: &[u8] = include_bytes!("../../tests/fixtures/listeners/proc/8509/net/unix");

    fn tcp(text: &str) -> Vec<TcpSocket> {
        parse_tcp(text, Path::new("/proc/net/tcp")).unwrap()
    }

    fn unix(text: &[u8]) -> Vec<UnixSocket> {
        parse_unix(text, Path::new("/proc/net/unix")).unwrap()
    }

    #[test]
    fn ipv4_rows_give_addresses_ports_states_and_inodes() {
        let s = tcp(TCP);
        assert_eq!(s.len(), 7);
        assert_eq!(s[0].local, "127.0.0.1:18080".parse().unwrap());
        assert_eq!(s[0].remote, "0.0.0.0:0".parse().unwrap());
        assert_eq!(
            (s[0].state, s[0].uid, s[0].inode),
            (TcpState::Listen, 0, 444067)
        );
        assert_eq!(s[2].local, "0.0.0.0:18081".parse().unwrap());
        // The accepted connection and its client, both ends on loopback.
        assert_eq!(s[3].state, TcpState::Established);
        assert_eq!(s[3].remote, "127.0.0.1:34300".parse().unwrap());
        // Connections in TIME_WAIT are held by no descriptor.
        assert_eq!((s[5].state, s[5].inode), (TcpState::TimeWait, 0));
        assert_eq!(s[5].local, "192.0.2.2:35442".parse().unwrap());
        assert_eq!(s[5].remote, "203.0.113.80:80".parse().unwrap());
    }

    #[test]
    fn ipv6_rows_give_addresses_in_network_order() {
        let s = tcp(TCP6);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].local, "[::1]:18082".parse().unwrap());
        assert_eq!(s[1].local, "[::]:18083".parse().unwrap());
        assert!(s.iter().all(|s| s.state == TcpState::Listen));
        let mapped = "   0: 0000000000000000FFFF00000100007F:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 5 1 0 100 0 0 10 0\n";
        let s = tcp(&format!("header\n{mapped}"));
        assert_eq!(s[0].local, "[::ffff:127.0.0.1]:8080".parse().unwrap());
        assert_eq!(s[0].uid, 1000);
    }

    #[test]
    fn a_malformed_tcp_row_is_an_error_naming_the_file_and_line() {
        let text = "header\n   0: 0100007F:1F90 00000000:0000 0A 0:0 00:0 0 0 0 7\n   1: 0100007G:1F90 00000000:0000 0A 0:0 00:0 0 0 0 7\n";
        let e = parse_tcp(text, Path::new("/proc/1/net/tcp")).unwrap_err();
        assert!(matches!(e, Error::Parse { line: 3, .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("/proc/1/net/tcp:3: a malformed local address"),
            "{e}"
        );
        let short = parse_tcp(
            "header\n   0: 0100007F:1F90 00000000:0000 0A\n",
            Path::new("/t"),
        );
        assert!(short.unwrap_err().to_string().contains("4 columns"));
    }

    #[test]
    fn unix_rows_give_paths_types_and_the_listening_flag() {
        let s = unix(UNIX);
        assert_eq!(s.len(), 14);
        let by_inode = |inode: u64| s.iter().find(|s| s.inode == inode).unwrap();
        let app = by_inode(444071);
        assert_eq!(app.path.as_deref(), Some(Path::new("/tmp/netcap/app.sock")));
        assert!(app.listening && app.kind == UnixType::Stream);
        let spaced = by_inode(444072);
        assert_eq!(
            spaced.path.as_deref(),
            Some(Path::new("/tmp/netcap/with space.sock"))
        );
        let seq = by_inode(444073);
        assert!(seq.listening && seq.kind == UnixType::SeqPacket);
        let dgram = by_inode(444074);
        assert!(!dgram.listening && dgram.kind == UnixType::Datagram);
        let abstract_name = by_inode(444075);
        assert_eq!(
            abstract_name.path.as_deref(),
            Some(Path::new("@perfpilot-abstract"))
        );
        assert!(abstract_name.listening);
        // Bound but never listened on; and the server end of an accepted connection, which
        // shows the listener's path without its flag.
        assert!(!by_inode(444076).listening);
        assert!(!by_inode(444080).listening && by_inode(444080).path.is_some());
        // An unbound socket, with the inode padded to five columns.
        assert_eq!(by_inode(1078).path, None);
    }

    #[test]
    fn a_unix_path_holding_a_newline_is_joined_back() {
        let text = b"Num       RefCount Protocol Flags    Type St Inode Path\n0000000000000000: 00000002 00000000 00010000 0001 01 7 /tmp/a\nb.sock\n0000000000000000: 00000002 00000000 00010000 0001 01 8 /tmp/c.sock\n";
        let s = unix(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].path.as_deref(), Some(Path::new("/tmp/a\nb.sock")));
        assert_eq!(s[1].inode, 8);
        let e = parse_unix(b"header\n0000: 2 0 00010000\n", Path::new("/proc/net/unix"));
        assert!(
            e.unwrap_err()
                .to_string()
                .starts_with("/proc/net/unix:2: fewer than 7")
        );
    }
}
