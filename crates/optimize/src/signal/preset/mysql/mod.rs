//! MySQL and MariaDB: `Questions` of `SHOW GLOBAL STATUS` (statements the server ran for its
//! clients; perfpilot's own read adds one each time).
//!
//! The client is hand-written, in the few parts the query needs: the greeting and login
//! ([`auth`]: Handshake v10, HandshakeResponse41, auth switch, `mysql_native_password`,
//! `caching_sha2_password`, MariaDB's `unix_socket`), the packets ([`packet`]), and one
//! COM_QUERY with its text result set ([`query`]). The `mysql` crate (28.0, default features
//! off, `minimal-rust`) does connect over the socket with `unix_socket` and with a password,
//! but adds 55 crates to this one (URL, IDNA/ICU, regex, UUID, LRU, …: 135 → 190), past the
//! 40 this project accepts for one query; the hand-written client adds one (`sha1`).
//!
//! Credentials: the `[[preset]]`'s `user` and `password`; without them, the user `root`
//! with no password, which Debian's MariaDB admits over its Unix socket for a client running
//! as the OS user root (the daemon), through `unix_socket` authentication. A refusal names
//! the fields to set. The connection is kept between reads; after an error it is dropped and
//! the next read connects anew.

mod auth;
mod packet;
mod query;

use std::time::Duration;

use super::reader::{Fault, KeptConnection, Replay, Stream};
use super::{Endpoint, PresetSettings, Reading};
use auth::{Greeting, Login};
use packet::Packets;

/// The user tried when none is configured.
const DEFAULT_USER: &str = "root";

/// A kept connection to one MySQL or MariaDB server.
pub(crate) struct Mysql {
    endpoint: Endpoint,
    settings: PresetSettings,
    conn: Option<Conn>,
}

/// A logged-in connection.
struct Conn {
    packets: Packets<Stream>,
    greeting: Greeting,
}

impl Drop for Conn {
    fn drop(&mut self) {
        query::quit(&mut self.packets);
    }
}

impl Mysql {
    pub(crate) fn new(endpoint: Endpoint, settings: PresetSettings) -> Mysql {
        Mysql {
            endpoint,
            settings,
            conn: None,
        }
    }

    /// Who logs in, and what a refusal says.
    fn login(&self) -> Login<'_> {
        let unix = matches!(self.endpoint, Endpoint::Unix(_));
        let password = self.settings.password.as_deref();
        let (user, tried) = match (&self.settings.user, password) {
            (Some(u), Some(_)) => (u.as_str(), format!("user {u} with the configured password")),
            (Some(u), None) => (u.as_str(), format!("user {u} with no password")),
            (None, Some(_)) => (
                DEFAULT_USER,
                format!("user {DEFAULT_USER} (no `user` set) with the configured password"),
            ),
            (None, None) if unix => (
                DEFAULT_USER,
                format!(
                    "user {DEFAULT_USER} with no password (the default: MariaDB's unix_socket \
                     authentication admits it for a client running as root)"
                ),
            ),
            (None, None) => (
                DEFAULT_USER,
                format!("user {DEFAULT_USER} with no password (the default)"),
            ),
        };
        Login {
            user,
            password,
            unix,
            // With a password set, the password is what to check first; without one, both.
            field: if password.is_some() {
                "password"
            } else {
                "user` and `password"
            },
            tried,
        }
    }

    fn connect(&self, limit: Duration) -> Result<Conn, Fault> {
        // Every read and write of the stream gives up after `limit`.
        let mut packets = Packets::new(Stream::connect(&self.endpoint, limit)?);
        let greeting = auth::log_in(&mut packets, &self.login())?;
        Ok(Conn { packets, greeting })
    }
}

impl KeptConnection for Mysql {
    fn connected(&self) -> bool {
        self.conn.is_some()
    }

    fn disconnect(&mut self) {
        self.conn = None;
    }

    fn query(&mut self, io_limit: Duration) -> Result<Reading, Fault> {
        if self.conn.is_none() {
            self.conn = Some(self.connect(io_limit)?);
        }
        let login = self.login();
        let (field, tried) = (login.field, login.tried);
        let Some(conn) = self.conn.as_mut() else {
            unreachable!("connected just above")
        };
        let value = query::questions(&mut conn.packets, field, &tried)?;
        Ok(Reading {
            value: value as f64,
            source: format!(
                "{} from SHOW GLOBAL STATUS ({})",
                query::VARIABLE,
                conn.greeting.server()
            ),
        })
    }
}

/// A server's side of a whole read replayed from `server` (the fuzz target's entry): the
/// login as `user` (with `password`, over a Unix socket when `unix`), then the query; what
/// perfpilot writes is dropped. Returns the value read, if the bytes made it that far.
pub(crate) fn replay(server: &[u8], password: Option<&str>, unix: bool) -> Option<u64> {
    let mut packets = Packets::new(Replay::new(server));
    let login = Login {
        user: DEFAULT_USER,
        password,
        unix,
        field: "password",
        tried: "user root".into(),
    };
    auth::log_in(&mut packets, &login).ok()?;
    let value = query::questions(&mut packets, login.field, &login.tried).ok();
    query::quit(&mut packets);
    value
}

#[cfg(test)]
mod tests {
    use super::super::reader::Session;
    use super::*;

    fn mysql(endpoint: &str, user: Option<&str>, password: Option<&str>) -> Mysql {
        let endpoint = match endpoint.parse() {
            Ok(addr) => Endpoint::Tcp(addr),
            Err(_) => Endpoint::Unix(endpoint.into()),
        };
        Mysql::new(
            endpoint,
            PresetSettings {
                user: user.map(String::from),
                password: password.map(String::from),
                ..PresetSettings::default()
            },
        )
    }

    #[test]
    fn without_credentials_root_is_tried_and_a_refusal_names_both_fields() {
        let m = mysql("/run/mysqld/mysqld.sock", None, None);
        let l = m.login();
        assert_eq!((l.user, l.password, l.unix), ("root", None, true));
        assert_eq!(l.field, "user` and `password");
        assert!(l.tried.contains("unix_socket"), "{}", l.tried);
        let m = mysql("127.0.0.1:3306", None, None);
        let l = m.login();
        assert!(!l.unix);
        assert!(!l.tried.contains("unix_socket"), "{}", l.tried);
    }

    #[test]
    fn configured_credentials_are_used_and_a_refusal_names_the_password() {
        let m = mysql("127.0.0.1:3306", Some("monitor"), Some("pw"));
        let l = m.login();
        assert_eq!((l.user, l.password), ("monitor", Some("pw")));
        assert_eq!(l.field, "password");
        assert_eq!(l.tried, "user monitor with the configured password");
        let m = mysql("127.0.0.1:3306", None, Some("pw"));
        assert_eq!(m.login().user, "root");
    }

    #[test]
    fn a_socket_that_does_not_exist_is_unreachable() {
        let mut m = mysql("/nonexistent/perfpilot/mysqld.sock", None, None);
        assert!(matches!(
            m.read(Duration::from_secs(1)),
            Err(Fault::Unreachable(_))
        ));
    }
}
