//! The daemon's exporter behind a web-config file (the exporter toolkit's format), checked with
//! curl and openssl as a scraper would meet it: without the password 401, with it the
//! metrics; over TLS the certificate served is the configured one; with client certificates
//! required, a client without one is refused at the handshake. `/status` answers loopback
//! clients only: from another host of a namespace lab it is 403 while `/metrics` is served.
//! The daemons change nothing (every strategy off). Needs curl and openssl.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use perfpilot_testkit::{self as kit, Listening};
use support::{EXE, lab_or_skip, text, wait_until};

/// Every strategy off: these daemons watch and report, and change nothing.
const WATCH_ONLY: &str = "only_matched = true\n[tunables]\ninterval_s = 0.5\ncache_affinity = false\nmemory_affinity = false\nlarge_pages = false\nread_ahead = false\n";

/// A daemon with its log collected; killed on drop.
struct Daemon(Listening);

impl Daemon {
    /// Starts `c` and reads the address its endpoint logs it serves on.
    fn start(c: Command) -> Daemon {
        let limit = Duration::from_secs(20);
        Daemon(kit::spawn_listening(
            c,
            kit::Stream::Stderr,
            "metrics: serving ",
            limit,
        ))
    }

    fn log(&self) -> String {
        self.0.output()
    }
}

fn daemon_command(dir: &Path, program: Command, listen: &str, web: &Path) -> Command {
    let config = dir.join("perfpilot.toml");
    std::fs::write(&config, WATCH_ONLY).unwrap();
    let mut c = program;
    c.args(["daemon", "--for", "60s", "--config"])
        .arg(&config)
        .arg("--state-dir")
        .arg(dir.join(format!("state-{}", kit::free_port())))
        .args(["--listen", listen, "--web-config"])
        .arg(web);
    c
}

/// A daemon on loopback with the web config `web`, and its address: port 0, read back from
/// its log (a port drawn before the bind can be taken by another test's server).
fn on_loopback(dir: &Path, web: &Path) -> (Daemon, String) {
    let d = Daemon::start(daemon_command(dir, Command::new(EXE), "127.0.0.1:0", web));
    let listen = d.0.addr.to_string();
    (d, listen)
}

/// `curl ARGS… URL`: (HTTP status, body), and the output for messages.
fn curl(args: &[&str], url: &str) -> (String, String, Output) {
    let body = std::env::temp_dir().join(format!("perfpilot-curl-{}", kit::free_port()));
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-o"])
        .arg(&body)
        .args(["-w", "%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&body).unwrap_or_default();
    let _ = std::fs::remove_file(&body);
    (String::from_utf8_lossy(&out.stdout).into_owned(), text, out)
}

/// The base64 of a PEM file's first certificate.
fn pem_body(pem: &str) -> String {
    pem.split("-----BEGIN CERTIFICATE-----")
        .nth(1)
        .and_then(|r| r.split("-----END CERTIFICATE-----").next())
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

fn certs(args: &[&str]) {
    let out = Command::new(EXE).arg("certs").args(args).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn a_scraper_needs_the_password_and_gets_the_configured_certificate_and_client_certs_are_enforced()
{
    kit::require("curl");
    kit::require("openssl");
    let dir = kit::TempDir::new("metrics-auth");
    let d = &dir.0;
    let ca = d.join("ca");
    let s = |p: &Path| p.display().to_string();
    certs(&["ca", &s(&ca)]);
    certs(&["server", &s(&ca), "node", "--host", "127.0.0.1,localhost"]);
    certs(&["client", &s(&ca), "prometheus"]);
    let hash = bcrypt::hash("scrape-me", 4).unwrap();
    let web = d.join("web-config.yml");
    // Relative paths: from the file's directory, as the exporter toolkit reads them.
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: ca/node.pem\n  key_file: ca/node.key\nbasic_auth_users:\n  prometheus: {hash}\n"
        ),
    )
    .unwrap();
    let (daemon, listen) = on_loopback(d, &web);
    assert!(
        daemon.log().contains("serving https://"),
        "{}",
        daemon.log()
    );
    let url = format!("https://{listen}/metrics");
    let cacert = ["--cacert", &s(&ca.join("ca.pem"))];

    let (code, _, out) = curl(&cacert, &url);
    assert_eq!(code, "401", "{}", text(&out));
    let wrong = [&cacert[..], &["-u", "prometheus:wrong"]].concat();
    assert_eq!(curl(&wrong, &url).0, "401");
    let good = [&cacert[..], &["-u", "prometheus:scrape-me"]].concat();
    let (code, _, out) = curl(&good, &url);
    assert_eq!(code, "200", "{}", text(&out));
    scraped(&good, &url);
    // /status on loopback, with the password.
    let (code, body, _) = curl(&good, &format!("https://{listen}/status"));
    assert_eq!(code, "200");
    assert!(body.starts_with('{') || body.is_empty(), "{body}");
    // Plain HTTP to the TLS port is no way in.
    let (code, _, _) = curl(
        &["-u", "prometheus:scrape-me"],
        &format!("http://{listen}/metrics"),
    );
    assert_ne!(code, "200");

    // The certificate served is the one configured.
    let shown = Command::new("openssl")
        .args(["s_client", "-connect", &listen, "-showcerts"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let served = pem_body(&String::from_utf8_lossy(&shown.stdout));
    let configured = pem_body(&std::fs::read_to_string(ca.join("node.pem")).unwrap());
    assert!(!served.is_empty(), "{}", text(&shown));
    assert_eq!(served, configured);
    drop(daemon);

    // Client certificates required: no certificate, no handshake; the CA's client gets in.
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: ca/node.pem\n  key_file: ca/node.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca/ca.pem\nbasic_auth_users:\n  prometheus: {hash}\n"
        ),
    )
    .unwrap();
    let (_daemon, listen) = on_loopback(d, &web);
    let url = format!("https://{listen}/metrics");
    let (code, _, out) = curl(&good, &url);
    assert_eq!(code, "000", "{}", text(&out));
    let (cert, key) = (s(&ca.join("prometheus.pem")), s(&ca.join("prometheus.key")));
    let with_cert = [&good[..], &["--cert", &cert, "--key", &key]].concat();
    let (code, _, out) = curl(&with_cert, &url);
    assert_eq!(code, "200", "{}", text(&out));
    scraped(&with_cert, &url);
}

/// Scrapes until the first scan's figures are there (the pages are empty before it).
fn scraped(args: &[&str], url: &str) {
    let mut last = String::new();
    let ok = wait_until(Duration::from_secs(20), || {
        last = curl(args, url).1;
        last.contains("perfpilot_build_info")
    });
    assert!(ok, "no metrics at {url}: {last}");
}

#[test]
fn status_is_served_to_loopback_only_unless_status_remote_is_set() {
    kit::require("curl");
    let Some(lab) = lab_or_skip(1) else { return };
    let dir = kit::TempDir::new("metrics-status");
    let d = &dir.0;
    let web = d.join("web-config.yml");
    std::fs::write(&web, "").unwrap();
    let listen = "0.0.0.0:10187";
    let daemon = Daemon::start(daemon_command(
        d,
        lab.command(lab.host(0), EXE),
        listen,
        &web,
    ));
    let remote = |path: &str| {
        let out = lab
            .command(lab.hub(), "curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ])
            .arg(format!("http://{}:10187{path}", lab.addr(0)))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(remote("/metrics"), "200");
    assert_eq!(remote("/status"), "403");
    let local = lab
        .command(lab.host(0), "curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg("http://127.0.0.1:10187/status")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&local.stdout), "200");
    drop(daemon);
    // Enabled: served to the other host too.
    let mut c = daemon_command(d, lab.command(lab.host(0), EXE), listen, &web);
    c.arg("--status-remote");
    let _daemon = Daemon::start(c);
    assert_eq!(remote("/status"), "200");
}
