//! HTTP readiness; the binding wrapper.

use perfpilot_study::InstanceLayout;
use perfpilot_study::deploy::{http_ok, wrapper};
use perfpilot_sys::CpuSet;

#[test]
fn readiness_needs_a_2xx_answer() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        for status in ["503 Service Unavailable", "200 OK"] {
            let (mut s, _) = l.accept().unwrap();
            // Read the whole request before answering.
            let mut req = Vec::new();
            let mut buf = [0u8; 256];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                req.extend_from_slice(&buf[..n]);
            }
            // In two pieces, as a server may send it.
            s.write_all(b"HTTP/1.1 ").unwrap();
            s.flush().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
            write!(s, "{status}\r\nContent-Length: 0\r\n\r\n").unwrap();
        }
    });
    let url = format!("http://127.0.0.1:{port}/health");
    let e = http_ok(&url).unwrap_err().to_string();
    assert!(e.contains("503"), "{e}");
    http_ok(&url).unwrap();
    server.join().unwrap();
}

#[test]
fn wrappers_bind_cpus_and_memory() {
    let mut il = InstanceLayout {
        instance: 0,
        cpuset: CpuSet::parse("0-3,32-35").unwrap(),
        bound: true,
        cpus: 8,
        membind: vec![],
    };
    let mut notes = Vec::new();
    assert_eq!(
        wrapper(&il, true, &mut notes),
        ["taskset", "-c", "0-3,32-35"]
    );
    il.membind = vec![0];
    assert_eq!(
        wrapper(&il, true, &mut notes),
        ["numactl", "--physcpubind=0-3,32-35", "--membind=0"]
    );
    assert!(notes.is_empty());
    assert_eq!(
        wrapper(&il, false, &mut notes),
        ["taskset", "-c", "0-3,32-35"]
    );
    assert!(notes[0].contains("numactl is not installed"), "{notes:?}");
    il.bound = false;
    assert!(wrapper(&il, true, &mut notes).is_empty());
}
