//! The PostgreSQL preset logging in with a password against a real server: md5,
//! SCRAM-SHA-256 and a cleartext password over TCP, SCRAM-SHA-256 over the Unix socket, and
//! the faults of a wrong or missing password and of a missing database.

use std::process::Command;
use std::time::{Duration, Instant};

use perfpilot_optimize::signal::preset::{
    Candidate, Endpoint, PresetError, PresetKind, PresetReader, PresetSettings,
};
use perfpilot_testkit as kit;

const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `sql` as the role postgres over TCP (trusted for that role here).
fn psql(port: u16, sql: &str) {
    let out = Command::new(kit::require("psql"))
        .args([
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
        ])
        .args(["-p", &port.to_string(), "-d", "postgres", "-c", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn reader(endpoint: Endpoint, user: &str, password: Option<&str>) -> PresetReader {
    PresetReader::new(Candidate {
        kind: PresetKind::Postgres,
        endpoint,
        why: "a test".into(),
        settings: PresetSettings {
            user: Some(user.into()),
            password: password.map(String::from),
            ..PresetSettings::default()
        },
    })
}

#[test]
fn md5_scram_and_cleartext_passwords_read_the_counter_and_wrong_ones_name_the_field() {
    if kit::find("initdb").is_none() || kit::find("psql").is_none() {
        println!("skipped: PostgreSQL is not installed (scripts/install-deps installs it)");
        return;
    }
    let pg = kit::start_postgres();
    psql(
        pg.port,
        "SET password_encryption = 'md5'; CREATE ROLE md5er LOGIN PASSWORD 'md5-secret'; \
         SET password_encryption = 'scram-sha-256'; \
         CREATE ROLE scrammer LOGIN PASSWORD 'scram-secret'; \
         CREATE ROLE clear LOGIN PASSWORD 'clear-secret'",
    );
    // These lines come first, so they win over initdb's `trust` and `peer` lines.
    let hba = pg.dir.0.join("data/pg_hba.conf");
    let old = std::fs::read_to_string(&hba).unwrap();
    let lines = "host all md5er 127.0.0.1/32 md5\n\
                 host all scrammer 127.0.0.1/32 scram-sha-256\n\
                 host all clear 127.0.0.1/32 password\n\
                 local all scrammer scram-sha-256\n";
    std::fs::write(&hba, format!("{lines}{old}")).unwrap();
    psql(pg.port, "SELECT pg_reload_conf()");
    let tcp = Endpoint::Tcp(([127, 0, 0, 1], pg.port).into());
    let unix = Endpoint::Unix(pg.socket.clone().unwrap());

    // The server reloads its pg_hba.conf a moment later: until then md5er is trusted.
    let deadline = Instant::now() + Duration::from_secs(10);
    let asked = loop {
        match reader(tcp.clone(), "md5er", None).read(TIMEOUT) {
            Err(e) => break e,
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(r) => panic!("md5er still read without a password after 10 s: {r:?}"),
        }
    };
    assert!(
        matches!(
            asked,
            PresetError::Auth {
                field: "password",
                ..
            }
        ),
        "{asked}"
    );
    assert!(
        asked
            .to_string()
            .contains("asks user md5er with no password for an md5 password"),
        "{asked}"
    );

    for (endpoint, user, password) in [
        (&tcp, "md5er", "md5-secret"),
        (&tcp, "scrammer", "scram-secret"),
        (&unix, "scrammer", "scram-secret"),
        (&tcp, "clear", "clear-secret"),
    ] {
        let mut r = reader(endpoint.clone(), user, Some(password));
        let first = r
            .read(TIMEOUT)
            .unwrap_or_else(|e| panic!("{user} at {endpoint}: {e}"));
        assert!(first.value > 0.0, "{user}: {first:?}");
        // The kept connection reads again.
        assert!(r.read(TIMEOUT).unwrap().value >= first.value);
    }

    let e = reader(tcp.clone(), "scrammer", Some("wrong"))
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
        text.contains("password authentication failed") && text.contains("set `password`"),
        "{text}"
    );
    let e = reader(tcp.clone(), "scrammer", None)
        .read(TIMEOUT)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("asks user scrammer with no password for a SCRAM-SHA-256 password"),
        "{e}"
    );

    let mut c = Candidate {
        kind: PresetKind::Postgres,
        endpoint: tcp,
        why: "a test".into(),
        settings: PresetSettings {
            user: Some("scrammer".into()),
            password: Some("scram-secret".into()),
            dbname: Some("no_such_db".into()),
            ..PresetSettings::default()
        },
    };
    let e = PresetReader::new(c.clone()).read(TIMEOUT).unwrap_err();
    assert!(
        matches!(&e, PresetError::Failed { why, .. } if why.contains("\"no_such_db\" does not exist") && why.contains("set `dbname`")),
        "{e}"
    );
    c.settings.dbname = None;
    assert!(PresetReader::new(c).read(TIMEOUT).is_ok());
}
