//! Logging in against server messages built from the protocol's documentation (fixed bytes),
//! and SCRAM-SHA-256 against a fake server on a socket pair (the client's nonce is random).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use super::super::wire::fake::{auth, error, msg, ready, wire};
use super::*;

fn login<'a>(user: &'a str, password: Option<&'a str>) -> Login<'a> {
    Login {
        user,
        password,
        dbname: "postgres",
        options: "-c statement_timeout=1000",
        tried: format!("user {user}"),
    }
}

/// What PostgreSQL 15 sends after accepting a login (shortened to two parameters).
fn welcome() -> Vec<u8> {
    let mut input = auth(0, b"");
    input.extend(msg(
        b'S',
        b"server_version\x0015.14 (Debian 15.14-0+deb12u1)\0",
    ));
    input.extend(msg(b'S', b"client_encoding\0UTF8\0"));
    input.extend(msg(b'K', b"\x00\x00\x30\x39\x12\x34\x56\x78"));
    input.extend(ready());
    input
}

/// The StartupMessage perfpilot sends for `login("postgres", None)`.
fn startup() -> Vec<u8> {
    let mut body = 0x0003_0000u32.to_be_bytes().to_vec();
    for (k, v) in [
        ("user", "postgres"),
        ("database", "postgres"),
        ("application_name", "perfpilot"),
        ("client_encoding", "UTF8"),
        ("options", "-c statement_timeout=1000"),
    ] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut out = (body.len() as u32 + 4).to_be_bytes().to_vec();
    out.extend(body);
    out
}

#[test]
fn trust_needs_only_the_startup_message_and_the_server_version_is_kept() {
    let mut m = wire(&welcome());
    let server = log_in(&mut m, &login("postgres", None)).unwrap();
    assert_eq!(
        server.version.as_deref(),
        Some("15.14 (Debian 15.14-0+deb12u1)")
    );
    assert_eq!(m.get_ref().output, startup());
}

#[test]
fn a_cleartext_password_is_sent_as_a_password_message() {
    let mut input = auth(3, b"");
    input.extend(welcome());
    let mut m = wire(&input);
    log_in(&mut m, &login("postgres", Some("secret"))).unwrap();
    assert!(m.get_ref().output.ends_with(&msg(b'p', b"secret\0")));
}

#[test]
fn an_md5_password_is_hashed_with_the_user_and_salt() {
    let mut input = auth(5, &[1, 2, 3, 4]);
    input.extend(welcome());
    let mut m = wire(&input);
    log_in(&mut m, &login("monitor", Some("secret"))).unwrap();
    // Python: "md5" + md5(md5(b"secret" + b"monitor").hexdigest().encode() + bytes([1,2,3,4])).hexdigest()
    assert!(
        m.get_ref()
            .output
            .ends_with(&msg(b'p', b"md529c6313c69e8e7dad4af92984a1f41c1\0"))
    );
}

#[test]
fn a_password_request_without_a_password_names_the_password_field() {
    for request in [
        auth(3, b""),
        auth(5, &[1, 2, 3, 4]),
        auth(10, b"SCRAM-SHA-256\0\0"),
    ] {
        let e = log_in(&mut wire(&request), &login("postgres", None)).unwrap_err();
        assert!(
            matches!(&e, Fault::Auth("password", w) if w.starts_with("the server asks user postgres for")),
            "{e:?}"
        );
    }
}

#[test]
fn a_refused_password_names_the_password_and_an_unknown_role_both_fields() {
    let mut input = auth(5, &[1, 2, 3, 4]);
    input.extend(error(
        "28P01",
        "password authentication failed for user \"monitor\"",
    ));
    let e = log_in(&mut wire(&input), &login("monitor", Some("wrong"))).unwrap_err();
    assert!(
        matches!(&e, Fault::Auth("password", w) if w.contains("password authentication failed")),
        "{e:?}"
    );
    let e = log_in(
        &mut wire(&error("28000", "role \"nobody\" does not exist")),
        &login("nobody", None),
    )
    .unwrap_err();
    assert!(matches!(e, Fault::Auth("user` and `password", _)));
}

#[test]
fn kerberos_gssapi_and_scram_plus_only_are_refused_by_name() {
    let e = log_in(&mut wire(&auth(7, b"")), &login("postgres", Some("pw"))).unwrap_err();
    assert!(
        matches!(&e, Fault::Auth(_, w) if w.contains("GSSAPI")),
        "{e:?}"
    );
    let e = log_in(
        &mut wire(&auth(10, b"SCRAM-SHA-256-PLUS\0\0")),
        &login("postgres", Some("pw")),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Fault::Auth("password", w) if w.contains("offers SCRAM-SHA-256-PLUS")),
        "{e:?}"
    );
}

#[test]
fn another_protocol_or_a_cut_or_endless_login_is_refused_without_a_panic() {
    let e = log_in(
        &mut wire(b"SSH-2.0-OpenSSH_9.2\r\n"),
        &login("postgres", None),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Fault::Garbage(_) | Fault::TooLarge(_)),
        "{e:?}"
    );
    let e = log_in(&mut wire(b"HTTP/1.1 400 Bad"), &login("postgres", None)).unwrap_err();
    assert!(
        matches!(&e, Fault::Garbage(g) if g.contains("'H'")),
        "{e:?}"
    );
    let all = welcome();
    for cut in [1, 5, 9, all.len() - 1] {
        let e = log_in(&mut wire(&all[..cut]), &login("postgres", None)).unwrap_err();
        assert!(
            matches!(&e, Fault::Failed(w) if w.contains("closed")),
            "{cut}: {e:?}"
        );
    }
    let notices: Vec<u8> = (0..MAX_MESSAGES).flat_map(|_| auth(0, b"")).collect();
    let e = log_in(&mut wire(&notices), &login("postgres", None)).unwrap_err();
    assert!(
        matches!(&e, Fault::Failed(w) if w.contains("never said it was ready")),
        "{e:?}"
    );
    // SCRAM messages out of order.
    let e = log_in(
        &mut wire(&auth(12, b"v=abc")),
        &login("postgres", Some("pw")),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Fault::Garbage(g) if g.contains("out of step")),
        "{e:?}"
    );
}

/// Reads one frontend message (type byte, length, body) from the client's side.
fn read_message(s: &mut UnixStream) -> (u8, Vec<u8>) {
    let mut header = [0u8; 5];
    s.read_exact(&mut header).unwrap();
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    let mut body = vec![0u8; len - 4];
    s.read_exact(&mut body).unwrap();
    (header[0], body)
}

/// A server that asks for SCRAM-SHA-256, answers the client's first message with `salt` and
/// its nonce extended, and sends `last` after the client's proof. Returns the client's two
/// SCRAM messages.
fn scram_server(mut s: UnixStream, last: Vec<u8>) -> (String, String) {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
    s.read_exact(&mut startup).unwrap();
    s.write_all(&auth(10, b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0"))
        .unwrap();
    let (tag, body) = read_message(&mut s);
    assert_eq!(tag, b'p');
    let rest = body.strip_prefix(b"SCRAM-SHA-256\0").unwrap();
    let first = String::from_utf8(rest[4..].to_vec()).unwrap();
    let nonce = first.strip_prefix("n,,n=,r=").unwrap();
    let server_first = format!("r={nonce}SRVNONCE,s=c2FsdHNhbHQ=,i=4096");
    s.write_all(&auth(11, server_first.as_bytes())).unwrap();
    let (tag, body) = read_message(&mut s);
    assert_eq!(tag, b'p');
    let last_sent = String::from_utf8(body).unwrap();
    s.write_all(&last).unwrap();
    (first, last_sent)
}

#[test]
fn scram_sends_its_proof_and_refuses_a_server_whose_proof_is_wrong() {
    for (last, expected) in [
        (
            auth(12, b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
            "proof is wrong",
        ),
        (auth(12, b"e=invalid-proof"), "invalid-proof"),
    ] {
        let (client, server) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || scram_server(server, last));
        let mut m = Messages::new(client);
        let e = log_in(&mut m, &login("postgres", Some("pencil"))).unwrap_err();
        assert!(
            matches!(&e, Fault::Failed(w) if w.contains(expected)),
            "{e:?}"
        );
        let (first, proof) = t.join().unwrap();
        assert!(first.starts_with("n,,n=,r="), "{first}");
        let nonce = &first["n,,n=,r=".len()..];
        assert!(
            proof.starts_with(&format!("c=biws,r={nonce}SRVNONCE,p=")),
            "{proof}"
        );
    }
}

#[test]
fn a_scram_server_nonce_that_does_not_extend_the_clients_is_refused() {
    let (client, mut server) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        let mut len = [0u8; 4];
        server.read_exact(&mut len).unwrap();
        let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
        server.read_exact(&mut startup).unwrap();
        server.write_all(&auth(10, b"SCRAM-SHA-256\0\0")).unwrap();
        read_message(&mut server);
        server
            .write_all(&auth(11, b"r=someoneelse,s=c2FsdA==,i=4096"))
            .unwrap();
    });
    let e = log_in(&mut Messages::new(client), &login("postgres", Some("pw"))).unwrap_err();
    t.join().unwrap();
    assert!(
        matches!(&e, Fault::Garbage(g) if g.contains("invalid nonce")),
        "{e:?}"
    );
}
