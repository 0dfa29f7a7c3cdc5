//! HTTPS and HTTP/2 against nginx with a throw-away CA: HTTP/2 where ALPN offers it, HTTP/1.1
//! when asked, h2c by prior knowledge, and TLS failures counted per request, never fatal.

use std::time::Duration;

use perfpilot_drive::{
    DriveSpec, HttpVersion, Load, Measurement, RunControl, ThinkTime, TlsOptions, run,
};
use perfpilot_testkit::tls::start_nginx_tls;

fn drive(url: String, http: HttpVersion, tls: TlsOptions) -> Measurement {
    let mut s = DriveSpec::new(
        vec![url],
        Load::Closed {
            users: 2,
            think: ThinkTime::Constant(Duration::from_millis(10)),
        },
    );
    s.duration = Duration::from_millis(800);
    s.threads = 1;
    s.timeout = Duration::from_secs(2);
    s.http = http;
    s.tls = tls;
    run(&s, &RunControl::default()).unwrap()
}

fn insecure() -> TlsOptions {
    TlsOptions {
        insecure: true,
        ca_file: None,
    }
}

#[test]
fn https_speaks_http2_where_alpn_offers_it_and_http1_where_asked_or_offered_alone() {
    let n = start_nginx_tls();
    let h2 = drive(
        format!("https://127.0.0.1:{}/", n.https_port),
        HttpVersion::Auto,
        insecure(),
    );
    assert!(h2.ok > 10 && h2.errors == 0, "{h2:?}");
    assert_eq!(h2.extra.get("http2_responses"), Some(&(h2.ok as f64)));
    let h1 = drive(
        format!("https://127.0.0.1:{}/", n.https_port),
        HttpVersion::Http1,
        insecure(),
    );
    assert!(h1.ok > 10 && h1.errors == 0, "{h1:?}");
    assert_eq!(h1.extra.get("http2_responses"), None);
    let only_h1 = drive(
        format!("https://127.0.0.1:{}/", n.h1_port),
        HttpVersion::Auto,
        insecure(),
    );
    assert!(
        only_h1.ok > 10 && !only_h1.extra.contains_key("http2_responses"),
        "{only_h1:?}"
    );
    let h2c = drive(
        format!("http://127.0.0.1:{}/", n.h2c_port),
        HttpVersion::Http2,
        TlsOptions::default(),
    );
    assert!(h2c.ok > 10 && h2c.errors == 0, "{h2c:?}");
    assert_eq!(h2c.extra.get("http2_responses"), Some(&(h2c.ok as f64)));
}

#[test]
fn the_test_ca_given_as_cacert_is_trusted_and_without_it_each_handshake_is_a_tls_error() {
    let n = start_nginx_tls();
    let url = format!("https://localhost:{}/", n.https_port);
    let trusted = drive(
        url.clone(),
        HttpVersion::Auto,
        TlsOptions {
            insecure: false,
            ca_file: Some(n.certs.ca.clone()),
        },
    );
    assert!(trusted.ok > 10 && trusted.errors == 0, "{trusted:?}");
    let untrusted = drive(url, HttpVersion::Auto, TlsOptions::default());
    assert_eq!(untrusted.ok, 0);
    assert!(untrusted.requests > 0, "the run went on: {untrusted:?}");
    assert_eq!(untrusted.errors_by_kind.get("tls"), Some(&untrusted.errors));
    let first = untrusted.first_error.unwrap();
    assert!(
        first.contains("certificate is not trusted") && first.contains("--insecure"),
        "{first}"
    );
}

#[test]
fn https_to_a_port_that_does_not_speak_tls_is_a_tls_protocol_error() {
    let n = start_nginx_tls();
    let m = drive(
        format!("https://127.0.0.1:{}/", n.h2c_port),
        HttpVersion::Auto,
        insecure(),
    );
    assert_eq!(m.ok, 0);
    assert!(m.errors_by_kind.get("tls").is_some_and(|t| *t > 0), "{m:?}");
    assert!(m.first_error.unwrap().contains("does not speak TLS"));
}

#[test]
fn http1_over_tls_on_the_event_loop_counts_untrusted_and_non_tls_servers_as_tls_errors() {
    // HTTP/1.1 asked for: the event loop drives rustls itself (no ALPN probe, no tokio).
    let n = start_nginx_tls();
    let untrusted = drive(
        format!("https://localhost:{}/", n.https_port),
        HttpVersion::Http1,
        TlsOptions::default(),
    );
    assert_eq!(untrusted.ok, 0);
    assert!(untrusted.requests > 0, "the run went on: {untrusted:?}");
    assert_eq!(untrusted.errors_by_kind.get("tls"), Some(&untrusted.errors));
    assert!(
        untrusted
            .first_error
            .as_deref()
            .is_some_and(|e| e.contains("certificate is not trusted")),
        "{untrusted:?}"
    );
    let plain = drive(
        format!("https://127.0.0.1:{}/", n.h2c_port),
        HttpVersion::Http1,
        insecure(),
    );
    assert_eq!(plain.ok, 0);
    assert!(
        plain
            .first_error
            .as_deref()
            .is_some_and(|e| e.contains("does not speak TLS")),
        "{plain:?}"
    );
    let trusted = drive(
        format!("https://localhost:{}/", n.https_port),
        HttpVersion::Http1,
        TlsOptions {
            insecure: false,
            ca_file: Some(n.certs.ca.clone()),
        },
    );
    assert!(trusted.ok > 10 && trusted.errors == 0, "{trusted:?}");
}
