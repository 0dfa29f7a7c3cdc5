//! Presets against real servers started here (PostgreSQL, Redis, memcached, nginx) and fake
//! ones (a Prometheus page, a server that never answers): detection from the process's
//! identity and endpoints (given by hand), two reads around some work, and bad input.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use perfpilot_optimize::signal::preset::{
    Candidate, Endpoint, Identity, PresetConfig, PresetError, PresetKind, PresetReader,
    PresetSettings, detect,
};
use perfpilot_sys::Fs;
use perfpilot_sys::process::ProcReader;
use perfpilot_testkit as kit;

const TIMEOUT: Duration = Duration::from_secs(5);

/// What `/proc` says about process `pid`, as the daemon reads it.
fn identity_of(pid: u32) -> Identity {
    Identity::read(&mut ProcReader::new(&Fs::live()), pid as i32).unwrap()
}

fn tcp(port: u16) -> Endpoint {
    Endpoint::Tcp(([127, 0, 0, 1], port).into())
}

/// Reads until the counter has grown by at least `by` over `before` (servers publish their
/// counters a little late: PostgreSQL flushes backend statistics about once a second).
fn read_until_grown(r: &mut PresetReader, before: f64, by: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = r.read(TIMEOUT).unwrap().value;
        if now >= before + by || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sends `n` RESP `PING`s on a new TCP connection and reads the answers.
fn redis_pings(port: u16, password: Option<&str>, n: usize) {
    let mut s = BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
    let mut line = String::new();
    if let Some(p) = password {
        write!(s.get_mut(), "AUTH {p}\r\n").unwrap();
        s.read_line(&mut line).unwrap();
        assert_eq!(line, "+OK\r\n");
    }
    for _ in 0..n {
        s.get_mut().write_all(b"PING\r\n").unwrap();
        line.clear();
        s.read_line(&mut line).unwrap();
        assert_eq!(line, "+PONG\r\n");
    }
}

#[test]
fn postgres_is_found_on_its_socket_and_read_as_its_os_user_through_peer_authentication() {
    if !kit::is_root() {
        println!("skipped: peer authentication as the postgres user needs root");
        return;
    }
    let pg = kit::start_postgres();
    let socket = pg.socket.clone().unwrap();
    let id = identity_of(pg.pid());
    assert_eq!(id.comm, "postgres");
    let found = detect(&id, &[tcp(pg.port), Endpoint::Unix(socket.clone())], &[]);
    assert_eq!(found[0].kind, PresetKind::Postgres);
    assert_eq!(found[0].endpoint, Endpoint::Unix(socket));
    assert_eq!(found[0].settings.run_as, Some((id.uid, id.gid)));
    let mut reader = PresetReader::new(found[0].clone());
    let before = reader.read(TIMEOUT).unwrap();
    assert!(
        before.source.contains("pg_stat_database"),
        "{}",
        before.source
    );
    // 50 transactions in one session, over TCP (trusted here).
    let port = pg.port.to_string();
    let mut psql = std::process::Command::new(kit::require("psql"));
    psql.args([
        "-X",
        "-q",
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-U",
        "postgres",
        "-d",
        "postgres",
    ]);
    for _ in 0..50 {
        psql.args(["-c", "SELECT 1"]);
    }
    let out = psql.output().unwrap();
    assert!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = read_until_grown(&mut reader, before.value, 50.0);
    assert!(
        after >= before.value + 50.0,
        "50 transactions: {} → {after}",
        before.value
    );
    // Over TCP (trusted here) the same counter is read as the default role.
    let mut over_tcp = PresetReader::new(found[1].clone());
    assert!(over_tcp.read(TIMEOUT).unwrap().value >= after);
    // A role the server does not know is an authentication error naming the fields to set.
    let mut stranger = found[1].clone();
    stranger.settings.user = Some("no_such_role".into());
    let e = PresetReader::new(stranger).read(TIMEOUT).unwrap_err();
    assert!(matches!(e, PresetError::Auth { .. }), "{e:?}");
    assert!(e.to_string().contains("set `user` and `password`"), "{e}");
}

#[test]
fn redis_is_read_on_its_socket_and_on_tcp_and_counts_commands() {
    let redis = kit::start_redis();
    let socket = redis.socket.clone().unwrap();
    let id = identity_of(redis.pid());
    let found = detect(&id, &[Endpoint::Unix(socket.clone()), tcp(redis.port)], &[]);
    assert_eq!(found[0].kind, PresetKind::Redis);
    assert_eq!(found[0].endpoint, Endpoint::Unix(socket));
    assert_eq!(found[1].endpoint, tcp(redis.port));
    let mut unix = PresetReader::new(found[0].clone());
    let mut over_tcp = PresetReader::new(found[1].clone());
    let before = unix.read(TIMEOUT).unwrap().value;
    redis_pings(redis.port, None, 100);
    let after = unix.read(TIMEOUT).unwrap().value;
    // 100 PINGs and this reader's one INFO.
    assert_eq!(after - before, 101.0);
    assert!(over_tcp.read(TIMEOUT).unwrap().value > after);
}

#[test]
fn redis_with_a_password_asks_for_password_and_reads_with_it() {
    let redis = kit::start_redis_with_password("s3cret");
    let id = identity_of(redis.pid());
    let found = detect(&id, &[tcp(redis.port)], &[]);
    let e = PresetReader::new(found[0].clone())
        .read(TIMEOUT)
        .unwrap_err();
    assert!(
        matches!(
            e,
            PresetError::Auth {
                field: "password",
                ..
            }
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains(&format!("redis preset at 127.0.0.1:{}", redis.port))
            && text.contains("set `password`"),
        "{text}"
    );
    let config: PresetConfig = toml::from_str("kind = \"redis\"\npassword = \"s3cret\"\n").unwrap();
    config.validate(1).unwrap();
    let found = detect(&id, &[tcp(redis.port)], &[config]);
    let mut reader = PresetReader::new(found[0].clone());
    let before = reader.read(TIMEOUT).unwrap().value;
    redis_pings(redis.port, Some("s3cret"), 10);
    let after = reader.read(TIMEOUT).unwrap().value;
    // 10 PINGs, the AUTH before them and this reader's INFO.
    assert_eq!(after - before, 12.0);
    // A wrong password is refused by name too.
    let wrong: PresetConfig = toml::from_str("kind = \"redis\"\npassword = \"nope\"\n").unwrap();
    let found = detect(&id, &[tcp(redis.port)], &[wrong]);
    let e = PresetReader::new(found[0].clone())
        .read(TIMEOUT)
        .unwrap_err();
    assert!(matches!(e, PresetError::Auth { .. }), "{e}");
}

#[test]
fn memcached_counts_gets_and_sets() {
    let mc = kit::start_memcached();
    let id = identity_of(mc.pid());
    assert_eq!(id.comm, "memcached");
    let found = detect(&id, &[tcp(mc.port)], &[]);
    assert_eq!(found[0].kind, PresetKind::Memcached);
    let mut reader = PresetReader::new(found[0].clone());
    let before = reader.read(TIMEOUT).unwrap();
    assert_eq!(before.source, "cmd_get + cmd_set from stats");
    let mut s = BufReader::new(TcpStream::connect(("127.0.0.1", mc.port)).unwrap());
    let mut line = String::new();
    for i in 0..5 {
        write!(s.get_mut(), "set k{i} 0 0 1\r\nv\r\n").unwrap();
        line.clear();
        s.read_line(&mut line).unwrap();
        assert_eq!(line, "STORED\r\n");
    }
    for i in 0..20 {
        write!(s.get_mut(), "get k{}\r\n", i % 5).unwrap();
        loop {
            line.clear();
            s.read_line(&mut line).unwrap();
            if line == "END\r\n" {
                break;
            }
        }
    }
    let after = reader.read(TIMEOUT).unwrap().value;
    assert_eq!(after - before.value, 25.0);
}

#[test]
fn nginx_stub_status_is_found_and_counts_requests() {
    let nginx = kit::start_nginx();
    let id = identity_of(nginx.pid());
    let found = detect(&id, &[tcp(nginx.port)], &[]);
    assert_eq!(found[0].kind, PresetKind::Nginx);
    let mut reader = PresetReader::new(found[0].clone());
    let before = reader.read(TIMEOUT).unwrap();
    assert_eq!(before.source, "requests from stub_status at /nginx_status");
    for _ in 0..10 {
        perfpilot_fetch::get(&format!("http://127.0.0.1:{}/", nginx.port), TIMEOUT).unwrap();
    }
    let after = reader.read(TIMEOUT).unwrap().value;
    // The 10 GETs and this reader's second look at the page.
    assert_eq!(after - before.value, 11.0);
}

/// A loopback HTTP server answering every request with `page()`, and anything that is not
/// an HTTP request at once (thread ends with the test process).
fn serve(page: impl Fn() -> String + Send + 'static) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n")
                && (head.is_empty() || head.starts_with(b"GET"))
            {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let body = page();
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

fn fake_app() -> Identity {
    Identity {
        comm: "fakeapp".into(),
        exe: None,
        cmdline: "fakeapp --metrics".into(),
        uid: 1000,
        gid: 1000,
    }
}

#[test]
fn a_prometheus_page_gives_its_request_counter_summed_over_series() {
    let served = Arc::new(AtomicU64::new(100));
    let count = served.clone();
    let port = serve(move || {
        let n = count.load(Ordering::Relaxed);
        format!(
            "# TYPE promhttp_metric_handler_requests_total counter\n\
             promhttp_metric_handler_requests_total{{code=\"200\"}} 5000\n\
             # TYPE fake_requests_total counter\n\
             fake_requests_total{{path=\"/a\"}} {n}\nfake_requests_total{{path=\"/b\"}} 1\n"
        )
    });
    let found = detect(&fake_app(), &[tcp(port)], &[]);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].kind, PresetKind::Prometheus);
    let mut reader = PresetReader::new(found[0].clone());
    let before = reader.read(TIMEOUT).unwrap();
    assert_eq!(before.value, 101.0);
    assert_eq!(before.source, "chose fake_requests_total, sum of 2 series");
    served.fetch_add(5, Ordering::Relaxed);
    assert_eq!(reader.read(TIMEOUT).unwrap().value, 106.0);
}

fn candidate(kind: PresetKind, port: u16) -> Candidate {
    Candidate {
        kind,
        endpoint: tcp(port),
        why: "given by the test".into(),
        settings: PresetSettings::default(),
    }
}

#[test]
fn a_refused_connection_names_the_endpoint() {
    let port = kit::free_port();
    for kind in [
        PresetKind::Redis,
        PresetKind::Memcached,
        PresetKind::Postgres,
        PresetKind::Prometheus,
    ] {
        let e = PresetReader::new(candidate(kind, port))
            .read(TIMEOUT)
            .unwrap_err();
        assert!(
            matches!(e, PresetError::Unreachable { .. }),
            "{kind}: {e:?}"
        );
        assert!(
            e.to_string().starts_with(&format!(
                "{kind} preset at 127.0.0.1:{port}: cannot connect"
            )),
            "{e}"
        );
    }
}

#[test]
fn a_garbage_metrics_page_and_an_enormous_one_are_refused() {
    let port = serve(|| "<html><body>hello</body></html>\n".into());
    let e = PresetReader::new(candidate(PresetKind::Prometheus, port))
        .read(TIMEOUT)
        .unwrap_err();
    assert!(
        matches!(&e, PresetError::Garbage { got, .. } if got.contains("<html>")),
        "{e}"
    );
    let port = serve(|| "big_requests_total 1\n".repeat(300_000));
    let e = PresetReader::new(candidate(PresetKind::Prometheus, port))
        .read(TIMEOUT)
        .unwrap_err();
    assert!(
        matches!(e, PresetError::TooLarge { limit, .. } if limit == 4 << 20),
        "{e}"
    );
    assert!(e.to_string().contains("larger than 4"), "{e}");
    // Something that is not Redis at all answers garbage to INFO.
    let port = serve(|| "x".into());
    let e = PresetReader::new(candidate(PresetKind::Redis, port))
        .read(TIMEOUT)
        .unwrap_err();
    assert!(
        matches!(&e, PresetError::Garbage { got, .. } if got.starts_with("HTTP/1.1")),
        "{e}"
    );
}

#[test]
fn a_server_that_never_answers_times_out_and_the_next_read_says_the_first_still_waits() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    // Accepts and holds every connection without a word.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming() {
            held.push(s);
        }
    });
    for kind in [PresetKind::Redis, PresetKind::Prometheus] {
        let mut reader = PresetReader::new(candidate(kind, port));
        let timeout = Duration::from_millis(300);
        let e = reader.read(timeout).unwrap_err();
        assert!(
            matches!(e, PresetError::Timeout { timeout: t, .. } if t == timeout),
            "{kind}: {e}"
        );
        let e = reader.read(timeout).unwrap_err();
        assert!(matches!(e, PresetError::StillWaiting { .. }), "{kind}: {e}");
        assert!(e.to_string().contains("still waiting"), "{e}");
    }
}

#[test]
fn nginx_stub_status_is_read_over_one_kept_connection() {
    let nginx = kit::start_nginx();
    let id = identity_of(nginx.pid());
    let found = detect(&id, &[tcp(nginx.port)], &[]);
    let mut reader = PresetReader::new(found[0].clone());
    // `accepts` counts connections: one look of our own before, five reads, one look after.
    let accepts = || {
        let page = perfpilot_fetch::get(
            &format!("http://127.0.0.1:{}/nginx_status", nginx.port),
            TIMEOUT,
        )
        .unwrap();
        // "server accepts handled requests" then their figures on the next line.
        let figures = page.body.lines().nth(2).unwrap();
        figures
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let before = accepts();
    for _ in 0..5 {
        reader.read(TIMEOUT).unwrap();
    }
    let after = accepts();
    // The reader's one connection and our second look; a connection per read would make 6.
    assert_eq!(after - before, 2);
}
