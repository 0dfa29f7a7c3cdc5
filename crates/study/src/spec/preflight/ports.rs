//! The ports a study's instances will take: `deployment.base_port` up to the largest instance
//! count, each bound on 127.0.0.1 as the runner's own free-port check does; a busy one is
//! named with its holder from `/proc/net/tcp{,6}` and `/proc/*/fd`.

use std::net::{Ipv4Addr, TcpListener};

use perfpilot_sys::Fs;

use super::{FindingKind, Findings, PortHolder, Severity};
use crate::spec::{Config, Study};

/// What to do about a busy port (the runner would skip it and take the next free one).
const FIX: &str = "stop that process or set deployment.base_port to a free range; otherwise the runner skips the port and takes the next free one";

/// Binds each port instances will take and names the busy ones.
pub(super) fn check(study: &Study, configs: &[Config], out: &mut Findings) {
    let most = configs.iter().map(Config::instances).max().unwrap_or(1);
    let base = usize::from(study.deployment.base_port);
    let fs = Fs::live();
    for instance in 0..most {
        let Ok(port) = u16::try_from(base + instance) else {
            break;
        };
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            continue;
        }
        let holder = holder(&fs, port);
        out.push(
            Severity::Warning,
            "deployment.base_port",
            FindingKind::PortBusy {
                port,
                instance,
                holder,
            },
            FIX,
        );
    }
}

/// A TCP socket bound to a port, from a `/proc/net/tcp` line.
#[derive(Debug, PartialEq)]
struct Socket {
    inode: u64,
    uid: u32,
    listening: bool,
}

/// Who holds `port`: a listening socket's owner before any other bound to it.
fn holder(fs: &Fs, port: u16) -> Option<PortHolder> {
    let socket = ["proc/net/tcp", "proc/net/tcp6"]
        .iter()
        .filter_map(|rel| fs.read(rel).ok())
        .flat_map(|text| sockets(&text, port))
        .max_by_key(|s| s.listening)?;
    Some(PortHolder {
        uid: socket.uid,
        process: process_of(fs, socket.inode),
    })
}

/// The sockets of `/proc/net/tcp` text whose local port is `port` (fields: `sl
/// local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode`, ports in hex;
/// state `0A` is LISTEN).
fn sockets(text: &str, port: u16) -> Vec<Socket> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (_, local_port) = f.get(1)?.rsplit_once(':')?;
            if u16::from_str_radix(local_port, 16).ok()? != port {
                return None;
            }
            let inode: u64 = f.get(9)?.parse().ok()?;
            Some(Socket {
                inode,
                uid: f.get(7)?.parse().ok()?,
                listening: f.get(3) == Some(&"0A"),
            })
        })
        .filter(|s| s.inode != 0)
        .collect()
}

/// The process with a descriptor on socket `inode`, and its name; `None` when no process
/// this user may look into has one.
fn process_of(fs: &Fs, inode: u64) -> Option<(u32, String)> {
    let want = format!("socket:[{inode}]");
    let pids = fs.list("proc").ok()?;
    pids.iter()
        .filter_map(|p| p.parse::<u32>().ok())
        .find(|pid| {
            let Ok(fds) = fs.list(&format!("proc/{pid}/fd")) else {
                return false;
            };
            fds.iter().any(|fd| {
                std::fs::read_link(fs.path(&format!("proc/{pid}/fd/{fd}")))
                    .is_ok_and(|link| link.as_os_str() == want.as_str())
            })
        })
        .map(|pid| {
            let name = fs
                .read(&format!("proc/{pid}/comm"))
                .map(|c| c.trim().to_string())
                .unwrap_or_else(|_| "name unknown".into());
            (pid, name)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 777 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 0 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 888 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn the_listening_socket_of_a_port_is_found_with_its_process() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("proc/net")).unwrap();
        std::fs::write(r.join("proc/net/tcp"), TCP).unwrap();
        std::fs::create_dir_all(r.join("proc/42/fd")).unwrap();
        std::fs::write(r.join("proc/42/comm"), "nginx\n").unwrap();
        std::os::unix::fs::symlink("socket:[777]", r.join("proc/42/fd/3")).unwrap();
        let fs = Fs::at(r);
        assert_eq!(
            holder(&fs, 0x1F90),
            Some(PortHolder {
                uid: 1000,
                process: Some((42, "nginx".into()))
            })
        );
        assert_eq!(
            holder(&fs, 0x1F91),
            Some(PortHolder {
                uid: 0,
                process: None
            })
        );
        assert_eq!(holder(&fs, 0x1F92), None);
    }
}
