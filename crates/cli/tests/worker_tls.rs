//! A study worker listening with mutual TLS on loopback: certificates from `perfpilot certs`;
//! a plain TCP client, a client of another CA, one with no certificate, one whose certificate
//! expired or is not valid yet, and a coordinator that dials a name the worker's certificate
//! does not carry are each refused with a line in the worker's log and nothing run; a client
//! that connects and says nothing holds no one up; a coordinator with a good certificate runs
//! the study, and the worker logs who it served. Plain TCP off loopback is refused at start.
//! Needs nginx and openssl (scripts/install-deps).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use perfpilot_testkit::{self as kit, Listening};
use support::hosts::{nginx_study, trials};
use support::{EXE, text, wait_until};

/// Where the study's nginx listens.
const NGINX_PORT: u16 = 18491;

/// `perfpilot certs ARGS…`, which must succeed.
fn certs(args: &[&str]) {
    let out = Command::new(EXE).arg("certs").args(args).output().unwrap();
    assert!(out.status.success(), "certs {args:?}: {}", text(&out));
}

/// The worker, its log collected as it runs; killed on drop.
struct Worker {
    run: Listening,
    addr: String,
}

impl Worker {
    /// Starts one on port 0 (a port drawn before the bind can be taken by another test's
    /// server) and reads the address it logs.
    fn start(dir: &Path, args: &[&str]) -> Worker {
        let mut cmd = Command::new(EXE);
        cmd.args(["study", "worker", "--listen", "127.0.0.1:0", "--store"])
            .arg(dir.join("worker.db"))
            .args(args);
        let run = kit::spawn_listening(
            cmd,
            kit::Stream::Stderr,
            "study worker listening on ",
            Duration::from_secs(20),
        );
        let addr = run.addr.to_string();
        Worker { run, addr }
    }

    fn log(&self) -> String {
        self.run.output()
    }

    fn said(&self, what: &str) -> bool {
        self.run.said(what)
    }

    /// Waits for `what` in the log (a refusal is logged as the handshake fails).
    fn expect(&self, what: &str) {
        assert!(
            wait_until(Duration::from_secs(15), || self.said(what)),
            "the worker's log lacks {what:?}:\n{}",
            self.log()
        );
    }
}

/// A study run against the worker with `tls` (cert, key, CA).
fn coordinate(dir: &Path, study: &Path, store: &Path, host: &str, tls: [&Path; 3]) -> Output {
    Command::new(EXE)
        .current_dir(dir)
        .args(["study", "run"])
        .arg(study)
        .arg("--store")
        .arg(store)
        .args(["--hosts", host, "--tls-cert"])
        .arg(tls[0])
        .arg("--tls-key")
        .arg(tls[1])
        .arg("--tls-ca")
        .arg(tls[2])
        .output()
        .unwrap()
}

/// The PEM files of a CA directory: `NAME.pem`, `NAME.key`.
fn pair(ca: &Path, name: &str) -> (PathBuf, PathBuf) {
    (
        ca.join(format!("{name}.pem")),
        ca.join(format!("{name}.key")),
    )
}

#[test]
fn a_tls_worker_refuses_every_stranger_and_serves_the_coordinator_of_its_ca() {
    let dir = kit::TempDir::new("worker-tls");
    let d = &dir.0;
    let (ca, other) = (d.join("ca"), d.join("other"));
    let s = |p: &Path| p.display().to_string();
    certs(&["ca", &s(&ca)]);
    certs(&["server", &s(&ca), "worker", "--host", "127.0.0.1,localhost"]);
    certs(&["server", &s(&ca), "elsewhere", "--host", "worker.invalid"]);
    certs(&["client", &s(&ca), "coordinator-a"]);
    let old = ["--not-before", "2020-01-01T00:00:00Z", "--days", "30"];
    certs(&[&["client", &s(&ca), "expired"][..], &old[..]].concat());
    let soon = ["--not-before", "2099-01-01T00:00:00Z"];
    certs(&[&["client", &s(&ca), "future"][..], &soon[..]].concat());
    certs(&["ca", &s(&other), "--name", "another CA"]);
    certs(&["client", &s(&other), "stranger"]);
    // Nothing is overwritten.
    let again = Command::new(EXE)
        .args(["certs", "client", &s(&ca), "coordinator-a"])
        .output()
        .unwrap();
    assert!(
        !again.status.success() && String::from_utf8_lossy(&again.stderr).contains("exists"),
        "{}",
        text(&again)
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(ca.join("ca.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let (wc, wk) = pair(&ca, "worker");
    let ca_pem = ca.join("ca.pem");
    let tls = |c: &Path, k: &Path| -> Vec<String> {
        vec![
            "--tls-cert".into(),
            s(c),
            "--tls-key".into(),
            s(k),
            "--tls-ca".into(),
            s(&ca_pem),
        ]
    };
    let wargs = tls(&wc, &wk);
    let wargs: Vec<&str> = wargs.iter().map(String::as_str).collect();
    let w = Worker::start(d, &wargs);
    assert!(w.said("mutual TLS"), "{}", w.log());
    let study = nginx_study(d, NGINX_PORT, 2, 1);

    // A plain TCP client: its hello is not TLS; it gets no answer it can read as one.
    let mut plain = TcpStream::connect(&w.addr).unwrap();
    plain
        .write_all(b"{\"msg\":\"hello\",\"version\":\"0.1.0\",\"protocol\":1}\n")
        .unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("\"msg\""),
        "{answer:?}"
    );
    w.expect("does not speak TLS");

    // A client with a certificate of another CA, one with none, expired, not valid yet.
    let store = d.join("s.db");
    // (It trusts the worker's CA: the worker, not the coordinator, is what refuses here.)
    let (sc, sk) = pair(&other, "stranger");
    let out = coordinate(d, &study, &store, &w.addr, [&sc, &sk, &ca_pem]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    w.expect("not signed by the CA given");
    let no_cert = Command::new("openssl")
        .args(["s_client", "-connect", &w.addr, "-CAfile", &s(&ca_pem)])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&no_cert.stdout).contains("\"msg\""),
        "{}",
        text(&no_cert)
    );
    w.expect("sent no certificate");
    for (name, says) in [("expired", "has expired"), ("future", "not valid yet")] {
        let (c, k) = pair(&ca, name);
        let out = coordinate(d, &study, &store, &w.addr, [&c, &k, &ca_pem]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out));
        w.expect(says);
    }
    assert!(!store.exists(), "a refused coordinator began a run");
    assert!(!w.said("study nginx-hosts"), "{}", w.log());

    // A client that connects and says nothing: refused after the handshake's time, and a
    // coordinator that comes meanwhile is served.
    let silent = TcpStream::connect(&w.addr).unwrap();
    let (cc, ck) = pair(&ca, "coordinator-a");
    let out = coordinate(d, &study, &store, &w.addr, [&cc, &ck, &ca_pem]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("best: conf=fast"),
        "{}",
        text(&out)
    );
    w.expect("no TLS handshake within 10s");
    drop(silent);
    assert!(
        trials(&store, 1)
            .iter()
            .all(|t| t.status.to_string() == "ok")
    );
    // Who was served, when, which study.
    let log = w.log();
    let served: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CN=coordinator-a") && l.contains("study nginx-hosts"))
        .collect();
    assert_eq!(served.len(), 1, "{log}");
    assert!(
        served[0].starts_with("20") && served[0].contains('T'),
        "no time on {:?}",
        served[0]
    );

    // The worker's certificate does not carry the name dialled: the coordinator refuses it.
    drop(w);
    let (ec, ek) = pair(&ca, "elsewhere");
    let wargs = tls(&ec, &ek);
    let wargs: Vec<&str> = wargs.iter().map(String::as_str).collect();
    let w = Worker::start(d, &wargs);
    let out = coordinate(d, &study, &d.join("s2.db"), &w.addr, [&cc, &ck, &ca_pem]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not for the name or address dialled"),
        "{}",
        text(&out)
    );
}

#[test]
fn plain_tcp_off_loopback_is_refused_unless_insecure_listen_is_said() {
    let out = Command::new(EXE)
        .args(["study", "worker", "--listen", "0.0.0.0:0", "--store"])
        .arg(std::env::temp_dir().join("perfpilot-never.db"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without TLS")
            && stderr.contains("--insecure-listen")
            && stderr.contains("perfpilot certs"),
        "{stderr}"
    );
    let out = Command::new(EXE)
        .args(["drive", "--worker", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("without TLS"),
        "{}",
        text(&out)
    );
}
