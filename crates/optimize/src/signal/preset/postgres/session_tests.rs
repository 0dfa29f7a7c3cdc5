//! Who logs in, a whole read against a fake server on a Unix socket, a kept connection made
//! anew after the server closed it, and any bytes replayed without a panic.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};

use proptest::prelude::*;

use super::super::reader::Session;
use super::wire::fake::{auth, msg, ready};
use super::*;

fn postgres(endpoint: Endpoint, settings: PresetSettings) -> Postgres {
    Postgres::new(endpoint, settings)
}

#[test]
fn a_unix_socket_without_a_password_logs_in_as_the_servers_os_user() {
    let pg = postgres(
        Endpoint::Unix("/var/run/postgresql/.s.PGSQL.5433".into()),
        PresetSettings {
            run_as: Some((0, 0)),
            ..PresetSettings::default()
        },
    );
    let who = pg.who();
    assert_eq!(who.user, "root", "the name of uid 0");
    assert_eq!(who.dbname, "postgres");
    assert_eq!(who.run_as, Some((0, 0)));
    assert!(
        who.tried.contains("as the OS user root (peer)"),
        "{}",
        who.tried
    );
}

#[test]
fn a_password_means_no_peer_authentication() {
    let pg = postgres(
        Endpoint::Unix("/run/pg/.s.PGSQL.5432".into()),
        PresetSettings {
            user: Some("monitor".into()),
            password: Some("pw".into()),
            dbname: Some("app".into()),
            run_as: Some((104, 110)),
            ..PresetSettings::default()
        },
    );
    let who = pg.who();
    assert_eq!((who.user.as_str(), who.dbname.as_str()), ("monitor", "app"));
    assert_eq!(who.run_as, None);
    assert_eq!(who.tried, "user monitor with the configured password");
}

#[test]
fn tcp_logs_in_as_postgres_by_default() {
    let pg = postgres(
        Endpoint::Tcp(([127, 0, 0, 1], 5432).into()),
        PresetSettings {
            run_as: Some((104, 110)),
            ..PresetSettings::default()
        },
    );
    let who = pg.who();
    assert_eq!((who.user.as_str(), who.run_as), ("postgres", None));
}

/// Serves one login and one query on `s`, answering `value`; returns the startup message's
/// parameters and the query's text.
fn serve(mut s: UnixStream, value: &str) -> (Vec<String>, String) {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
    s.read_exact(&mut startup).unwrap();
    let params = startup[4..]
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let mut out = auth(0, b"");
    out.extend(msg(b'S', b"server_version\x0015.14\0"));
    out.extend(ready());
    s.write_all(&out).unwrap();
    let mut header = [0u8; 5];
    s.read_exact(&mut header).unwrap();
    let mut query = vec![0u8; u32::from_be_bytes(header[1..].try_into().unwrap()) as usize - 4];
    s.read_exact(&mut query).unwrap();
    let mut row = 1u16.to_be_bytes().to_vec();
    row.extend_from_slice(&(value.len() as i32).to_be_bytes());
    row.extend_from_slice(value.as_bytes());
    let mut out = msg(
        b'T',
        b"\x00\x01sum\0\0\0\0\0\0\0\0\0\x02\xbd\x00\x08\xff\xff\xff\xff\x00\x00",
    );
    out.extend(msg(b'D', &row));
    out.extend(msg(b'C', b"SELECT 1\0"));
    out.extend(ready());
    s.write_all(&out).unwrap();
    query.pop();
    (params, String::from_utf8(query).unwrap())
}

#[test]
fn a_read_logs_in_queries_and_a_closed_kept_connection_is_made_anew() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".s.PGSQL.5432");
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (first, _) = listener.accept().unwrap();
        let got = serve(first, "41");
        // The first connection is closed here (dropped): the next read finds it closed.
        let (second, _) = listener.accept().unwrap();
        let again = serve(second, "42");
        (got, again)
    });
    let mut pg = postgres(
        Endpoint::Unix(path),
        PresetSettings {
            user: Some("monitor".into()),
            ..PresetSettings::default()
        },
    );
    let r = pg.read(Duration::from_secs(5)).unwrap();
    assert_eq!(r.value, 41.0);
    assert_eq!(
        r.source,
        "xact_commit + xact_rollback from pg_stat_database (PostgreSQL 15.14)"
    );
    let r = pg.read(Duration::from_secs(5)).unwrap();
    assert_eq!(r.value, 42.0);
    let ((params, query), _) = server.join().unwrap();
    assert_eq!(
        params,
        [
            "user",
            "monitor",
            "database",
            "postgres",
            "application_name",
            "perfpilot",
            "client_encoding",
            "UTF8",
            "options",
            "-c statement_timeout=5000"
        ]
    );
    assert_eq!(query, query::QUERY);
}

#[test]
fn a_server_that_never_answers_is_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".s.PGSQL.5432");
    let listener = UnixListener::bind(&path).unwrap();
    let mut pg = postgres(Endpoint::Unix(path), PresetSettings::default());
    assert_eq!(pg.read(Duration::from_millis(200)), Err(Fault::Timeout));
    drop(listener);
}

#[test]
fn a_socket_that_does_not_exist_is_unreachable() {
    let mut pg = postgres(
        Endpoint::Unix("/nonexistent/perfpilot/.s.PGSQL.5432".into()),
        PresetSettings::default(),
    );
    assert!(matches!(
        pg.read(Duration::from_secs(1)),
        Err(Fault::Unreachable(_))
    ));
}

/// A whole session as a trusting server sends it, the query's answer included.
fn session(value: &str) -> Vec<u8> {
    let mut out = auth(0, b"");
    out.extend(msg(b'S', b"server_version\x0015.14\0"));
    out.extend(ready());
    let mut row = 1u16.to_be_bytes().to_vec();
    row.extend_from_slice(&(value.len() as i32).to_be_bytes());
    row.extend_from_slice(value.as_bytes());
    out.extend(msg(b'D', &row));
    out.extend(msg(b'C', b"SELECT 1\0"));
    out.extend(ready());
    out
}

#[test]
fn a_replayed_session_gives_its_value_and_every_cut_of_it_none() {
    let all = session("99");
    assert_eq!(replay(&all, false), Some(99.0));
    for cut in 0..all.len() {
        assert_eq!(replay(&all[..cut], false), None, "cut at {cut}");
    }
}

proptest! {
    #[test]
    fn any_bytes_from_the_server_end_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), password: bool) {
        let _ = replay(&bytes, password);
    }

    #[test]
    fn a_session_with_one_byte_changed_ends_without_a_panic(at in 0usize..60, byte: u8) {
        let mut all = session("12");
        let at = at % all.len();
        all[at] = byte;
        let _ = replay(&all, false);
    }
}
