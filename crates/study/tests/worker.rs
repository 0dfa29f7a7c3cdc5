//! A study worker on loopback: a connection that never says hello (a port check, a scanner)
//! does not claim it, so the coordinator that comes next is served, while a second coordinator
//! that says hello during a session is refused, naming the first.

use std::io::BufReader;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use perfpilot_drive::coord::wire::{recv, send};
use perfpilot_observe::{Fs, Topology};
use perfpilot_study::hosts::wire::{PROTOCOL, Reply, Request};
use perfpilot_study::hosts::{VERSION, WorkerConfig, serve};

/// A worker serving on a loopback port (its thread lives as long as the test process).
fn worker(dir: &std::path::Path) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/vm-1node");
    let cfg = WorkerConfig {
        version: VERSION.to_string(),
        topology: Topology::read(&Fs::at(fixture)).unwrap(),
        knob_fs: Fs::at(dir),
        knob_journal: dir.join("knobs.journal"),
        quit: Arc::new(AtomicBool::new(false)),
        busy: Arc::new(AtomicBool::new(false)),
    };
    std::thread::spawn(move || serve(&listener, &cfg, |_| {}));
    addr
}

/// Connects as a coordinator and says hello; the worker's first reply.
fn hello(addr: &str) -> (TcpStream, Reply) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    send(
        &mut &s,
        &Request::Hello {
            version: VERSION.to_string(),
            protocol: PROTOCOL,
        },
    )
    .unwrap();
    let reply = recv::<Reply>(&mut BufReader::new(&s))
        .unwrap()
        .expect("a reply");
    (s, reply)
}

#[test]
fn a_connection_without_a_hello_does_not_make_the_next_coordinator_find_the_worker_busy() {
    let dir = tempfile::tempdir().unwrap();
    let addr = worker(dir.path());
    for _ in 0..20 {
        // A readiness check: connect, close at once; then a coordinator right behind it.
        drop(TcpStream::connect(&addr).unwrap());
        let (s, reply) = hello(&addr);
        assert!(matches!(reply, Reply::Hello { .. }), "{reply:?}");
        drop(s);
        // The session ends when the coordinator goes; give the worker a moment to free itself.
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_second_coordinator_during_a_session_is_refused_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let addr = worker(dir.path());
    let (first, reply) = hello(&addr);
    assert!(matches!(reply, Reply::Hello { .. }), "{reply:?}");
    let peer = first.local_addr().unwrap().to_string();
    let (_second, reply) = hello(&addr);
    let Reply::Refused { reason } = reply else {
        panic!("{reply:?}")
    };
    assert!(reason.contains(&peer), "{reason}");
    assert!(reason.contains("one coordinator at a time"), "{reason}");
}
