//! Listening sockets: read from a tree captured on the build VM, and live from sockets this
//! test binds itself.

use std::net::{SocketAddr, TcpListener};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use perfpilot_sys::Fs;
use perfpilot_sys::net::{
    Listener, SocketOwner, TcpPortHolder, holder_of_tcp_port, listeners_of, listening_sockets,
    socket_inodes,
};

/// The captured tree (see tests/fixtures/listeners/README.md): pid 8509 listens, 8510 is a
/// worker that shares one Unix listener and has no `net` directory of its own.
fn fixture() -> Fs {
    Fs::at(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/listeners"
    ))
}

fn tcp(addr: &str) -> Listener {
    Listener::Tcp(addr.parse::<SocketAddr>().unwrap())
}

fn unix(path: &str) -> Listener {
    Listener::Unix(PathBuf::from(path))
}

#[test]
fn a_process_listens_where_its_descriptors_meet_listening_sockets() {
    assert_eq!(
        listeners_of(&fixture(), &[8509]),
        vec![
            tcp("0.0.0.0:18081"),
            tcp("127.0.0.1:18080"),
            tcp("[::]:18083"),
            tcp("[::1]:18082"),
            unix("/tmp/netcap/app.sock"),
            unix("/tmp/netcap/seq.sock"),
            unix("/tmp/netcap/with space.sock"),
            unix("@perfpilot-abstract"),
        ],
        "port 2024 listens in the namespace but 8509 holds no descriptor on it; the bound \
         but idle and the datagram sockets do not listen"
    );
}

#[test]
fn the_namespace_lists_every_listening_socket_whoever_holds_it() {
    let all = listening_sockets(&fixture(), 8509).unwrap();
    assert_eq!(all.len(), 9);
    assert!(all.contains(&perfpilot_sys::net::ListeningSocket {
        listener: tcp("0.0.0.0:2024"),
        inode: 616,
    }));
}

#[test]
fn a_worker_without_its_own_tables_is_read_against_proc_net_and_groups_are_merged() {
    let fs = fixture();
    assert_eq!(
        listeners_of(&fs, &[8510]),
        vec![unix("/tmp/netcap/app.sock")]
    );
    assert_eq!(
        listeners_of(&fs, &[8510, 8509, 2_000_000_000]),
        listeners_of(&fs, &[8509]),
        "one listing, without duplicates, and the vanished pid skipped"
    );
}

#[test]
fn socket_inodes_come_from_descriptor_links_and_a_missing_process_is_vanished() {
    let fs = fixture();
    let inodes = socket_inodes(&fs, 8509).unwrap();
    assert_eq!(inodes, (444067..=444080).collect());
    let e = socket_inodes(&fs, 2_000_000_000).unwrap_err();
    assert!(e.is_vanished(), "{e}");
}

#[test]
fn a_port_holder_is_named_with_its_uid_and_process_where_one_holds_it() {
    let fs = fixture();
    let python = Some(SocketOwner {
        pid: 8509,
        comm: "python3".into(),
    });
    assert_eq!(
        holder_of_tcp_port(&fs, 18080),
        Some(TcpPortHolder {
            uid: 0,
            owner: python.clone()
        })
    );
    // The client end of a connection holds its ephemeral port too.
    assert_eq!(holder_of_tcp_port(&fs, 34300).and_then(|h| h.owner), python);
    assert_eq!(
        holder_of_tcp_port(&fs, 2024),
        Some(TcpPortHolder {
            uid: 0,
            owner: None
        })
    );
    // Ports 35442 and 48172 are only in TIME_WAIT, which no descriptor holds.
    assert_eq!(holder_of_tcp_port(&fs, 35442), None);
    assert_eq!(holder_of_tcp_port(&fs, 18090), None);
}

#[test]
fn this_process_is_found_listening_on_the_sockets_it_binds() {
    let dir = tempfile::tempdir().unwrap();
    let tcp_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let path = dir.path().join("live.sock");
    let _unix_listener = UnixListener::bind(&path).unwrap();
    let name = format!("perfpilot-net-test-{}", std::process::id());
    let abstract_addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let _abstract_listener = UnixListener::bind_addr(&abstract_addr).unwrap();
    let fs = Fs::live();
    let pid = std::process::id() as i32;

    let found = listeners_of(&fs, &[pid]);
    let tcp_addr = tcp_listener.local_addr().unwrap();
    assert!(found.contains(&Listener::Tcp(tcp_addr)), "{found:?}");
    assert!(found.contains(&Listener::Unix(path.clone())), "{found:?}");
    assert!(found.contains(&unix(&format!("@{name}"))), "{found:?}");

    let holder = holder_of_tcp_port(&fs, tcp_addr.port()).unwrap();
    assert_eq!(holder.owner.map(|o| o.pid), Some(pid));
    // The socket belongs to the effective user that created it: the second `Uid:` field.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1))
        .unwrap();
    assert_eq!(holder.uid.to_string(), euid);
}
