//! A study worker on loopback: a connection that never says hello (a port check, a scanner)
//! does not claim it, so the coordinator that comes next is served, while a second coordinator
//! that says hello during a session is refused, naming the first. A coordinator that sends a
//! study of 100 MB, one of another version, and one that says nothing are refused in words
//! (the last after the opening's time) and the worker serves the next.

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use perfpilot_fetch::lines::{recv, send};
use perfpilot_observe::{Fs, Topology};
use perfpilot_study::hosts::wire::{PROTOCOL, Reply, Request};
use perfpilot_study::hosts::{Admission, VERSION, WorkerConfig, serve};

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
    std::thread::spawn(move || serve(&listener, &Admission::Plain, &cfg, |_| {}));
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

/// The worker's log lines, collected (the worker's `log` is a plain function).
static LOG: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn logged(line: &str) {
    LOG.lock().unwrap().push(line.to_string());
}

fn log_has(what: &str) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        if LOG.lock().unwrap().iter().any(|l| l.contains(what)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn a_study_of_100_mb_another_version_and_silence_are_refused_and_the_next_coordinator_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/vm-1node");
    let cfg = WorkerConfig {
        version: VERSION.to_string(),
        topology: Topology::read(&Fs::at(fixture)).unwrap(),
        knob_fs: Fs::at(dir.path()),
        knob_journal: dir.path().join("knobs.journal"),
        quit: Arc::new(AtomicBool::new(false)),
        busy: Arc::new(AtomicBool::new(false)),
    };
    std::thread::spawn(move || serve(&listener, &Admission::Plain, &cfg, logged));

    // Silent: connects, says nothing (refused after the opening's 10 s, meanwhile no one waits).
    let silent = TcpStream::connect(&addr).unwrap();

    // 100 MB of study: refused in words once past the framing's limit, nothing parsed.
    let (s, reply) = hello(&addr);
    assert!(matches!(reply, Reply::Hello { .. }), "{reply:?}");
    let writer = s.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut w = std::io::BufWriter::new(writer);
        let _ = w.write_all(b"{\"msg\":\"study\",\"source\":\"");
        let chunk = vec![b'#'; 1 << 20];
        for _ in 0..100 {
            if w.write_all(&chunk).is_err() {
                return;
            }
        }
        let _ = w.write_all(b"\",\"path\":\"/s.toml\",\"workdir\":\"/\"}\n");
    });
    let reply = recv::<Reply>(&mut BufReader::new(&s)).unwrap();
    let Some(Reply::Refused { reason }) = reply else {
        panic!("{reply:?}")
    };
    assert!(reason.contains("more than 16"), "{reason}");
    assert!(log_has("more than 16"), "{:?}", LOG.lock().unwrap());
    drop(s);
    std::thread::sleep(Duration::from_millis(100));

    // Another version: refused naming both.
    let s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    send(
        &mut &s,
        &Request::Hello {
            version: "0.0.1-old".into(),
            protocol: PROTOCOL,
        },
    )
    .unwrap();
    let reply = recv::<Reply>(&mut BufReader::new(&s)).unwrap();
    let Some(Reply::Refused { reason }) = reply else {
        panic!("{reply:?}")
    };
    assert!(
        reason.contains("0.0.1-old") && reason.contains(VERSION),
        "{reason}"
    );
    drop(s);
    std::thread::sleep(Duration::from_millis(100));

    // The silent one is dropped after the opening; the next coordinator is served.
    assert!(log_has("no hello within 10s"), "{:?}", LOG.lock().unwrap());
    drop(silent);
    let (_s, reply) = hello(&addr);
    assert!(matches!(reply, Reply::Hello { .. }), "{reply:?}");
    assert!(
        !LOG.lock().unwrap().iter().any(|l| l.contains("trial")),
        "nothing ran: {:?}",
        LOG.lock().unwrap()
    );
}
