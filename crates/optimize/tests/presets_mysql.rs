//! The MySQL/MariaDB preset against a real MariaDB started here (its Unix socket with
//! `unix_socket` authentication, a user with a password over TCP, refused credentials) and
//! against fake servers (none listening, one that never answers, one speaking another
//! protocol).

use std::io::Write;
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use perfpilot_optimize::signal::preset::{
    Candidate, Endpoint, Identity, PresetConfig, PresetError, PresetKind, PresetReader,
    PresetSettings, detect,
};
use perfpilot_sys::Fs;
use perfpilot_sys::process::ProcReader;
use perfpilot_testkit::{self as kit, ServerProcess};

const TIMEOUT: Duration = Duration::from_secs(5);

fn tcp(port: u16) -> Endpoint {
    Endpoint::Tcp(([127, 0, 0, 1], port).into())
}

/// What `/proc` says about process `pid`, as the daemon reads it.
fn identity_of(pid: u32) -> Identity {
    Identity::read(&mut ProcReader::new(&Fs::live()), pid as i32).unwrap()
}

/// The OS user running the tests: the one MariaDB's `unix_socket` admits as an administrator.
fn os_user() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs `statements` with the `mariadb` client over the socket as the administrator, and
/// gives its output (tab-separated, no column names).
fn sql(db: &ServerProcess, statements: &str) -> String {
    let out = Command::new(kit::require("mariadb"))
        .arg("--no-defaults")
        .arg("--socket")
        .arg(db.socket.as_ref().unwrap())
        .args(["-u", &os_user(), "-N", "-B", "-e", statements])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mariadb -e {statements:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A global status counter, read with the `mariadb` client.
fn status(db: &ServerProcess, name: &str) -> u64 {
    let out = sql(db, &format!("SHOW GLOBAL STATUS LIKE '{name}'"));
    out.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn candidate(endpoint: Endpoint, settings: PresetSettings) -> Candidate {
    Candidate {
        kind: PresetKind::Mysql,
        endpoint,
        why: "given by the test".into(),
        settings,
    }
}

#[test]
fn mariadb_is_found_on_its_socket_and_read_as_root_through_unix_socket_authentication() {
    if !kit::is_root() {
        println!("skipped: unix_socket authentication as the MariaDB user root needs root");
        return;
    }
    let db = kit::start_mariadb();
    let socket = db.socket.clone().unwrap();
    let id = identity_of(db.pid());
    assert_eq!(id.comm, "mariadbd");
    let found = detect(&id, &[tcp(db.port), Endpoint::Unix(socket.clone())], &[]);
    assert_eq!(found[0].kind, PresetKind::Mysql);
    assert_eq!(found[0].endpoint, Endpoint::Unix(socket));
    let mut reader = PresetReader::new(found[0].clone());
    let before = reader.read(TIMEOUT).unwrap();
    assert!(
        before
            .source
            .starts_with("Questions from SHOW GLOBAL STATUS")
            && before.source.contains("MariaDB"),
        "{}",
        before.source
    );
    sql(&db, &"SELECT 1;".repeat(30));
    let after = reader.read(TIMEOUT).unwrap().value;
    // 30 SELECTs, whatever the client sends around them, and this reader's one query.
    assert!(
        after >= before.value + 31.0,
        "30 queries: {} → {after}",
        before.value
    );
    // The connection is kept: three more reads open no connection (the client's two do).
    let connections = status(&db, "Connections");
    for _ in 0..3 {
        reader.read(TIMEOUT).unwrap();
    }
    assert_eq!(status(&db, "Connections"), connections + 1);
    // A kept connection the server has closed since (here killed) costs no failed read: the
    // reader connects anew at once.
    let idle = sql(
        &db,
        "SELECT id FROM information_schema.processlist WHERE command = 'Sleep'",
    );
    let idle: Vec<&str> = idle.split_whitespace().collect();
    assert_eq!(
        idle.len(),
        1,
        "the reader's connection alone is idle: {idle:?}"
    );
    sql(&db, &format!("KILL CONNECTION {}", idle[0]));
    let connections = status(&db, "Connections");
    let later = reader.read(TIMEOUT).unwrap().value;
    assert!(later > after, "{after} → {later}");
    assert_eq!(status(&db, "Connections"), connections + 2);
    // Over TCP, root without a password is refused (root@localhost is for the socket only;
    // this server knows no user at 127.0.0.1), and the error says which fields to set.
    let e = PresetReader::new(found[1].clone())
        .read(TIMEOUT)
        .unwrap_err();
    assert!(
        matches!(&e, PresetError::Auth { field, .. } if *field == "user` and `password"),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("mysql preset at 127.0.0.1:{}: ", db.port))
            && text.contains("refused user root with no password (the default)")
            && text.contains("Host '127.0.0.1' is not allowed")
            && text.ends_with("set `user` and `password` in a [[preset]] with kind = \"mysql\""),
        "{text}"
    );
}

#[test]
fn a_user_with_a_password_is_read_and_a_wrong_password_names_the_password_field() {
    let db = kit::start_mariadb();
    sql(
        &db,
        "CREATE USER 'monitor'@'127.0.0.1' IDENTIFIED BY 's3cret';
         CREATE USER 'monitor'@'localhost' IDENTIFIED BY 's3cret';",
    );
    let id = identity_of(db.pid());
    let socket = Endpoint::Unix(db.socket.clone().unwrap());
    let config: PresetConfig =
        toml::from_str("kind = \"mariadb\"\nuser = \"monitor\"\npassword = \"s3cret\"\n").unwrap();
    config.validate(1).unwrap();
    let found = detect(&id, &[socket.clone(), tcp(db.port)], &[config]);
    assert_eq!(found[0].endpoint, socket);
    assert_eq!(found[0].settings.user.as_deref(), Some("monitor"));
    let mut over_tcp = PresetReader::new(found[1].clone());
    assert_eq!(found[1].endpoint, tcp(db.port));
    let before = over_tcp.read(TIMEOUT).unwrap().value;
    sql(&db, &"SELECT 1;".repeat(10));
    let after = over_tcp.read(TIMEOUT).unwrap().value;
    assert!(after >= before + 11.0, "10 queries: {before} → {after}");
    // The same user over the socket, with its password.
    let on_socket = PresetReader::new(found[0].clone()).read(TIMEOUT).unwrap();
    assert!(on_socket.value > after);

    let wrong: PresetConfig =
        toml::from_str("kind = \"mysql\"\nuser = \"monitor\"\npassword = \"nope\"\n").unwrap();
    for endpoint in [tcp(db.port), socket] {
        let found = detect(
            &id,
            std::slice::from_ref(&endpoint),
            std::slice::from_ref(&wrong),
        );
        let e = PresetReader::new(found[0].clone())
            .read(TIMEOUT)
            .unwrap_err();
        assert!(
            matches!(
                &e,
                PresetError::Auth {
                    field: "password",
                    ..
                }
            ),
            "{endpoint}: {e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("refused user monitor with the configured password")
                && text.contains("Access denied for user 'monitor'")
                && text.ends_with("set `password` in a [[preset]] with kind = \"mysql\""),
            "{text}"
        );
    }
}

#[test]
fn no_server_a_silent_one_and_another_protocol_each_give_their_error() {
    let port = kit::free_port();
    let e = PresetReader::new(candidate(tcp(port), PresetSettings::default()))
        .read(TIMEOUT)
        .unwrap_err();
    assert!(matches!(e, PresetError::Unreachable { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with(&format!("mysql preset at 127.0.0.1:{port}: cannot connect")),
        "{e}"
    );

    // Accepts and holds every connection without a word: no greeting ever comes.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming() {
            held.push(s);
        }
    });
    let mut reader = PresetReader::new(candidate(tcp(port), PresetSettings::default()));
    let timeout = Duration::from_millis(300);
    let e = reader.read(timeout).unwrap_err();
    assert!(
        matches!(e, PresetError::Timeout { timeout: t, .. } if t == timeout),
        "{e}"
    );
    let e = reader.read(timeout).unwrap_err();
    assert!(matches!(e, PresetError::StillWaiting { .. }), "{e}");

    // An SSH server greets first too, but not in MySQL's packets.
    let ssh = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = ssh.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in ssh.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n");
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let e = PresetReader::new(candidate(tcp(port), PresetSettings::default()))
        .read(TIMEOUT)
        .unwrap_err();
    assert!(
        matches!(&e, PresetError::Garbage { got, .. } if got.contains("SSH-")),
        "{e:?}"
    );
}
