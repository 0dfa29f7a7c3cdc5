//! PostgreSQL: `xact_commit + xact_rollback` summed over `pg_stat_database`.
//!
//! The client is hand-made over blocking sockets, in the parts the one query needs: the
//! messages are `postgres-protocol`'s (serialized, parsed, and its md5 and SCRAM-SHA-256
//! exchanges), framed here over the preset's [`Stream`] ([`wire`]); logging in ([`auth`]:
//! trust, peer, a cleartext or md5 password, SCRAM-SHA-256); one simple Query and Terminate
//! ([`query`]). The `postgres` crate it replaces is a blocking face on `tokio-postgres`, which
//! put tokio into the daemon for this one query; no TLS either way.
//!
//! Credentials: over the server's Unix socket the connection is made as the OS user that runs
//! the server, so that peer authentication (Debian's default for local connections) accepts
//! it; over TCP, or with a configured password, as the configured user (default `postgres`).
//! A refusal names the fields to set. The connection is kept between reads; after an error it
//! is dropped, and a kept one the server has closed is made anew at once.

mod auth;
mod query;
mod wire;

use std::time::Duration;

use super::reader::{Fault, KeptConnection, Replay, Stream};
use super::{Endpoint, PresetSettings, Reading};
use auth::{Login, Server};
use wire::Messages;

/// The role and database used when none is configured.
const DEFAULT_USER: &str = "postgres";
const DEFAULT_DBNAME: &str = "postgres";

/// A kept connection to one PostgreSQL server.
pub(crate) struct Postgres {
    endpoint: Endpoint,
    settings: PresetSettings,
    conn: Option<Conn>,
}

/// A logged-in connection.
struct Conn {
    messages: Messages<Stream>,
    server: Server,
}

impl Drop for Conn {
    fn drop(&mut self) {
        query::terminate(&mut self.messages);
    }
}

/// Whom to log in as, and the OS ids to connect as (peer authentication).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Who {
    user: String,
    dbname: String,
    run_as: Option<(u32, u32)>,
    tried: String,
}

impl Postgres {
    pub(crate) fn new(endpoint: Endpoint, settings: PresetSettings) -> Postgres {
        Postgres {
            endpoint,
            settings,
            conn: None,
        }
    }

    /// The role, the database, and the OS ids to connect as: over a Unix socket with no
    /// password, the server's own OS user, whose name is also the default role.
    fn who(&self) -> Who {
        let s = &self.settings;
        let run_as = match self.endpoint {
            Endpoint::Unix(_) => s.run_as.filter(|_| s.password.is_none()),
            Endpoint::Tcp(_) => None,
        };
        let os_user = run_as.and_then(|(uid, _)| perfpilot_sys::user::name_of(uid));
        let user = s
            .user
            .clone()
            .or_else(|| os_user.clone())
            .unwrap_or_else(|| DEFAULT_USER.into());
        let tried = match (&s.password, &os_user) {
            (Some(_), _) => format!("user {user} with the configured password"),
            (None, Some(os)) => {
                format!("user {user} with no password, connecting as the OS user {os} (peer)")
            }
            (None, None) => format!("user {user} with no password"),
        };
        Who {
            user,
            dbname: s.dbname.clone().unwrap_or_else(|| DEFAULT_DBNAME.into()),
            run_as,
            tried,
        }
    }

    fn connect(&self, limit: Duration) -> Result<Conn, Fault> {
        let who = self.who();
        // Every read and write of the stream gives up after `limit`.
        let stream = match who.run_as {
            // SO_PEERCRED records the connecting thread's ids, so only the connect needs them.
            Some((uid, gid)) => {
                let endpoint = self.endpoint.clone();
                perfpilot_sys::user::as_user(uid, gid, move || Stream::connect(&endpoint, limit))
                    .map_err(|e| {
                    Fault::Auth(
                        "user` and `password",
                        format!(
                            "cannot connect as the server's OS user for peer \
                                 authentication: {e}"
                        ),
                    )
                })??
            }
            None => Stream::connect(&self.endpoint, limit)?,
        };
        let mut messages = Messages::new(stream);
        // The server ends a query that hangs, too (pg_stat_database never should).
        let options = format!("-c statement_timeout={}", limit.as_millis().max(1));
        let login = Login {
            user: &who.user,
            password: self.settings.password.as_deref(),
            dbname: &who.dbname,
            options: &options,
            tried: who.tried.clone(),
        };
        let server = auth::log_in(&mut messages, &login)?;
        Ok(Conn { messages, server })
    }
}

impl KeptConnection for Postgres {
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
        let tried = self.who().tried;
        let Some(conn) = self.conn.as_mut() else {
            unreachable!("connected just above")
        };
        let value = query::transactions(&mut conn.messages, &tried)?;
        let version = conn
            .server
            .version
            .as_deref()
            .map(|v| format!(" (PostgreSQL {v})"))
            .unwrap_or_default();
        Ok(Reading {
            value,
            source: format!("xact_commit + xact_rollback from pg_stat_database{version}"),
        })
    }
}

/// A server's side of a whole read replayed from `server` (the fuzz target's entry): the
/// login as `postgres` (with a password when `password`), then the query; what perfpilot
/// writes is dropped. Returns the value read, if the bytes made it that far.
pub(crate) fn replay(server: &[u8], password: bool) -> Option<f64> {
    let mut m = Messages::new(Replay::new(server));
    let login = Login {
        user: DEFAULT_USER,
        password: password.then_some("secret"),
        dbname: DEFAULT_DBNAME,
        options: "-c statement_timeout=1000",
        tried: "user postgres".into(),
    };
    auth::log_in(&mut m, &login).ok()?;
    let value = query::transactions(&mut m, &login.tried).ok();
    query::terminate(&mut m);
    value
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
