//! Logging in against captured MariaDB 10.11 packets and synthesized MySQL 8 ones.

use super::super::packet::{frame, unhex, wire};
use super::*;

/// MariaDB 10.11.19's greeting, as sent on the wire (header included).
const GREETING: &str = "64 00 00 00 0a 35 2e 35 2e 35 2d 31 30 2e 31 31 2e 31 39 2d 4d 61 72 69 61
    44 42 2d 30 2b 64 65 62 31 32 75 31 00 08 00 00 00 60 31 6f 5d 66 66 4d 2f 00 fe f7 08 02 00
    ff 81 15 00 00 00 00 00 00 1d 00 00 00 41 3a 41 73 44 37 27 5c 7a 71 48 53 00 6d 79 73 71 6c
    5f 6e 61 74 69 76 65 5f 70 61 73 73 77 6f 72 64 00";
/// Its auth switch to mysql_native_password (asked for by a client that offered `dialog`).
const SWITCH: &str = "2c 00 00 02 fe 6d 79 73 71 6c 5f 6e 61 74 69 76 65 5f 70 61 73 73 77 6f 72
    64 00 60 31 6f 5d 66 66 4d 2f 41 3a 41 73 44 37 27 5c 7a 71 48 53 00";
/// The mariadb client's answer to it for the password `secret`, and the server's OK.
const SCRAMBLED: &str = "14 00 00 03 7c 82 bc 63 ce a3 77 fe 9f a5 5a ee 64 f7 26 6c d8 3e 2e 7f";
const OK_AFTER_SWITCH: &str = "07 00 00 04 00 00 00 02 00 00 00";
/// The nonce of that greeting.
const NONCE: &[u8] = b"`1o]ffM/A:AsD7'\\zqHS";

fn login<'a>(user: &'a str, password: Option<&'a str>, unix: bool) -> Login<'a> {
    Login {
        user,
        password,
        unix,
        field: "password",
        tried: format!("user {user}"),
    }
}

/// A MySQL 8 style greeting naming `plugin`, with the nonce 1..=20.
fn greeting_of(plugin: &str) -> Vec<u8> {
    let mut p = vec![10];
    p.extend_from_slice(b"8.0.36\0");
    p.extend_from_slice(&7u32.to_le_bytes());
    p.extend(1..=8u8);
    p.push(0);
    p.extend_from_slice(&0xf7ffu16.to_le_bytes());
    p.push(255);
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&0xdfffu16.to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 10]);
    p.extend(9..=20u8);
    p.push(0);
    p.extend_from_slice(plugin.as_bytes());
    p.push(0);
    frame(0, &p)
}

#[test]
fn the_captured_mariadb_greeting_gives_its_version_nonce_and_plugin() {
    let g = Greeting::parse(&unhex(GREETING)[4..]).unwrap();
    assert_eq!(g.version, "5.5.5-10.11.19-MariaDB-0+deb12u1");
    assert_eq!(g.server(), "10.11.19-MariaDB-0+deb12u1");
    assert_eq!(g.nonce, NONCE);
    assert_eq!(g.plugin.as_deref(), Some(NATIVE));
    assert_eq!(g.caps & CLIENT_PLUGIN_AUTH, CLIENT_PLUGIN_AUTH);
}

#[test]
fn the_native_scramble_of_secret_is_what_the_mariadb_client_sent() {
    assert_eq!(
        native_scramble(NONCE, "secret"),
        unhex(SCRAMBLED)[4..].to_vec()
    );
    assert!(native_scramble(NONCE, "").is_empty());
}

#[test]
fn the_caching_sha2_scramble_matches_a_reference_computation() {
    let nonce: Vec<u8> = (1..=20).collect();
    // Computed with Python's hashlib from the formula in MySQL's documentation.
    let expected = unhex("746ebe205d56a0707acb3e796e834e0dd7b1d61743b26bd5202c7a623230c7c9");
    assert_eq!(sha2_scramble(&nonce, "secret"), expected);
}

#[test]
fn root_without_a_password_answers_the_greeting_with_an_empty_native_scramble() {
    let mut input = unhex(GREETING);
    input.extend(frame(2, b"\x00\x00\x00\x02\x00\x00\x00"));
    let mut p = wire(&input);
    let g = log_in(&mut p, &login("root", None, true)).unwrap();
    assert_eq!(g.server(), "10.11.19-MariaDB-0+deb12u1");
    let out = &p.get_ref().output;
    assert_eq!(&out[3..4], [1], "the response is packet 1");
    let caps = u32::from_le_bytes([out[4], out[5], out[6], out[7]]);
    assert_eq!(
        caps & (CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH),
        CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH
    );
    assert_eq!(out[12], CHARSET);
    assert_eq!(&out[13..36], [0; 23]);
    assert_eq!(&out[36..], b"root\0\0mysql_native_password\0");
}

#[test]
fn an_auth_switch_is_answered_with_the_scramble_of_the_new_nonce() {
    let mut input = unhex(GREETING);
    input.extend(unhex(SWITCH));
    input.extend(unhex(OK_AFTER_SWITCH));
    let mut p = wire(&input);
    log_in(&mut p, &login("monitor", Some("secret"), true)).unwrap();
    assert!(p.get_ref().output.ends_with(&unhex(SCRAMBLED)));
}

#[test]
fn access_denied_names_the_field_and_the_credentials_tried() {
    let mut input = unhex(GREETING);
    let mut err = b"\xff\x15\x04#28000".to_vec();
    err.extend_from_slice(b"Access denied for user 'monitor'@'localhost' (using password: YES)");
    input.extend(frame(2, &err));
    let e = log_in(&mut wire(&input), &login("monitor", Some("wrong"), true)).unwrap_err();
    let Fault::Auth(field, why) = e else {
        panic!("not an auth fault: {e:?}")
    };
    assert_eq!(field, "password");
    assert!(
        why.starts_with("the server refused user monitor: Access denied"),
        "{why}"
    );
}

#[test]
fn an_error_instead_of_a_greeting_is_the_servers_error() {
    let input = frame(0, b"\xff\x10\x04Too many connections");
    let e = log_in(&mut wire(&input), &login("root", None, true)).unwrap_err();
    assert!(matches!(e, Fault::Failed(w) if w.contains("Too many connections")));
}

#[test]
fn another_protocol_is_garbage_not_a_greeting() {
    let e = log_in(
        &mut wire(&frame(0, b"\x09hello")),
        &login("root", None, true),
    )
    .unwrap_err();
    assert!(matches!(e, Fault::Garbage(g) if g.contains("protocol 9")));
    let e = log_in(
        &mut wire(b"SSH-2.0-OpenSSH_9.2\r\n"),
        &login("root", None, true),
    )
    .unwrap_err();
    assert!(matches!(e, Fault::Garbage(_)), "{e:?}");
    let e = log_in(&mut wire(&frame(0, b"\x0a5.7")), &login("root", None, true)).unwrap_err();
    assert!(matches!(e, Fault::Garbage(g) if g.starts_with("the greeting ends early")));
}

#[test]
fn caching_sha2_full_authentication_sends_the_password_only_over_a_unix_socket() {
    let mut input = greeting_of(CACHING_SHA2);
    input.extend(frame(2, b"\x01\x04"));
    input.extend(frame(4, b"\x00\x00\x00\x02\x00\x00\x00"));
    let mut p = wire(&input);
    log_in(&mut p, &login("app", Some("pw"), true)).unwrap();
    let out = &p.get_ref().output;
    assert!(out.ends_with(&frame(3, b"pw\0")));
    let nonce: Vec<u8> = (1..=20).collect();
    // Header, capabilities, packet size, charset, filler; the user; the length byte.
    let first = 36 + "app\0".len() + 1;
    assert_eq!(&out[first..first + 32], sha2_scramble(&nonce, "pw"));

    let e = log_in(&mut wire(&input), &login("app", Some("pw"), false)).unwrap_err();
    assert!(matches!(e, Fault::Auth("password", w) if w.contains("needs TLS")));
}

#[test]
fn caching_sha2_fast_authentication_waits_for_the_ok() {
    let mut input = greeting_of(CACHING_SHA2);
    input.extend(frame(2, b"\x01\x03"));
    input.extend(frame(3, b"\x00\x00\x00\x02\x00\x00\x00"));
    log_in(&mut wire(&input), &login("app", Some("pw"), false)).unwrap();
}

#[test]
fn an_unknown_plugin_is_refused_naming_it() {
    let mut input = unhex(GREETING);
    input.extend(frame(2, b"\xfeclient_ed25519\0nonce"));
    let e = log_in(&mut wire(&input), &login("root", None, true)).unwrap_err();
    assert!(matches!(e, Fault::Auth(_, w) if w.contains("client_ed25519")));
}

#[test]
fn a_switch_to_unix_socket_sends_nothing() {
    let mut input = unhex(GREETING);
    input.extend(frame(2, b"\xfeunix_socket\0"));
    input.extend(frame(4, b"\x00\x00\x00\x02\x00\x00\x00"));
    let mut p = wire(&input);
    log_in(&mut p, &login("root", None, true)).unwrap();
    assert!(p.get_ref().output.ends_with(&frame(3, b"")));
}
