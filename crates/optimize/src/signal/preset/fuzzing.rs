//! The presets' readers of a server's bytes, fed from a byte slice: the entries of the fuzz
//! targets (`crates/fuzz`), not an interface. Each must return for any bytes.

use std::io::Cursor;

/// A MySQL or MariaDB session: the first byte picks the credentials (bit 0: a password,
/// bit 1: a Unix socket), the rest is what the server sends (greeting, authentication
/// exchange, the query's result set). The value read, if the bytes got that far.
pub fn mysql(data: &[u8]) -> Option<u64> {
    let (&flags, server) = data.split_first()?;
    let password = (flags & 1 != 0).then_some("secret");
    super::mysql::replay(server, password, flags & 2 != 0)
}

/// A PostgreSQL session: the first byte's bit 0 says whether a password is configured, the
/// rest is what the server sends (authentication exchange, parameters, ReadyForQuery, the
/// query's answer). The value read, if the bytes got that far.
pub fn postgres(data: &[u8]) -> Option<f64> {
    let (&flags, server) = data.split_first()?;
    super::postgres::replay(server, flags & 1 != 0)
}

/// RESP replies as the Redis preset reads them (`AUTH`'s, then `INFO stats`'), up to eight in
/// a row; a bulk reply's text is read for `total_commands_processed`.
pub fn resp(data: &[u8]) {
    let mut r = Cursor::new(data);
    for _ in 0..8 {
        match super::redis::read_reply(&mut r) {
            Ok(super::redis::Reply::Bulk(text)) => {
                let _ = super::redis::parse_info(&String::from_utf8_lossy(&text));
            }
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// A memcached `stats` answer: `cmd_get + cmd_set`, if it reads.
pub fn memcached_stats(data: &[u8]) -> Option<f64> {
    super::memcached::read_stats(&mut Cursor::new(data)).ok()
}

/// An nginx `stub_status` page: its `requests`, if it reads.
pub fn nginx_stub_status(text: &str) -> Option<u64> {
    super::nginx::parse_stub_status(text).map(|s| s.requests)
}
