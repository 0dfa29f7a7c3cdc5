//! PostgreSQL: `xact_commit + xact_rollback` summed over `pg_stat_database`, through the
//! `postgres` crate (no TLS). Over the server's Unix socket the connection is made as the OS
//! user that runs the server, so that peer authentication (Debian's default for local
//! connections) accepts it; over TCP, or with a configured password, as the configured user.

use std::path::Path;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::{Client, Config, NoTls};

use super::reader::{Fault, Session};
use super::{Endpoint, PresetSettings, Reading, pg_socket_port};

/// The query: every database's committed and rolled-back transactions.
pub const QUERY: &str = "SELECT sum(xact_commit + xact_rollback)::float8 FROM pg_stat_database";

/// A kept connection to one PostgreSQL server.
pub(crate) struct Postgres {
    endpoint: Endpoint,
    settings: PresetSettings,
    client: Option<Client>,
}

impl Postgres {
    pub(crate) fn new(endpoint: Endpoint, settings: PresetSettings) -> Postgres {
        Postgres {
            endpoint,
            settings,
            client: None,
        }
    }

    /// The connection settings, and the OS ids to connect as (peer authentication).
    fn config(&self, limit: Duration) -> Result<(Config, Option<(u32, u32)>), Fault> {
        let mut c = Config::new();
        let mut run_as = None;
        let default_user;
        match &self.endpoint {
            Endpoint::Unix(path) => {
                let port = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(pg_socket_port)
                    .ok_or_else(|| {
                        Fault::Failed(format!(
                            "{} is not named .s.PGSQL.<port>; set `socket` to PostgreSQL's socket file",
                            path.display()
                        ))
                    })?;
                c.host_path(path.parent().unwrap_or(Path::new("/")));
                c.port(port);
                run_as = self
                    .settings
                    .run_as
                    .filter(|_| self.settings.password.is_none());
                default_user = run_as.and_then(|(uid, _)| perfpilot_sys::user::name_of(uid));
            }
            Endpoint::Tcp(addr) => {
                c.hostaddr(addr.ip());
                c.port(addr.port());
                default_user = None;
            }
        }
        let user = self
            .settings
            .user
            .clone()
            .or(default_user)
            .unwrap_or_else(|| "postgres".into());
        c.user(&user);
        c.dbname(self.settings.dbname.as_deref().unwrap_or("postgres"));
        if let Some(p) = &self.settings.password {
            c.password(p);
        }
        c.application_name("perfpilot");
        c.connect_timeout(limit);
        // The server ends a query that hangs, too (pg_stat_database never should).
        c.options(&format!(
            "-c statement_timeout={}",
            limit.as_millis().max(1)
        ));
        Ok((c, run_as))
    }

    fn connect(&self, limit: Duration) -> Result<Client, Fault> {
        let (config, run_as) = self.config(limit)?;
        let connect = move || config.connect(NoTls);
        let result = match run_as {
            // SO_PEERCRED records the connecting thread's ids, so only the connect needs them.
            Some((uid, gid)) => perfpilot_sys::user::as_user(uid, gid, connect).map_err(|e| {
                Fault::Auth(
                    "user` and `password",
                    format!("cannot connect as the server's OS user for peer authentication: {e}"),
                )
            })?,
            None => connect(),
        };
        result.map_err(|e| fault(&e))
    }
}

impl Session for Postgres {
    fn read(&mut self, io_limit: Duration) -> Result<Reading, Fault> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(self.connect(io_limit)?);
        }
        let Some(client) = self.client.as_mut() else {
            unreachable!("connected just above")
        };
        let row = client.query_one(QUERY, &[]).map_err(|e| fault(&e))?;
        let value: Option<f64> = row.try_get(0).map_err(|e| fault(&e))?;
        Ok(Reading {
            value: value.ok_or_else(|| {
                Fault::MetricMissing(
                    "xact_commit + xact_rollback (pg_stat_database is empty)".into(),
                )
            })?,
            source: "xact_commit + xact_rollback from pg_stat_database".into(),
        })
    }

    fn reset(&mut self) {
        self.client = None;
    }
}

/// The fault of a client error: authentication problems name the field to set.
fn fault(e: &postgres::Error) -> Fault {
    let full = chain(e);
    if let Some(db) = e.as_db_error() {
        let msg = db.message().to_string();
        return match db.code() {
            c if *c == SqlState::INVALID_PASSWORD => Fault::Auth("password", msg),
            c if *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
                Fault::Auth("user` and `password", msg)
            }
            c if *c == SqlState::INVALID_CATALOG_NAME => {
                Fault::Failed(format!("{msg}; set `dbname` in its [[preset]]"))
            }
            c if *c == SqlState::QUERY_CANCELED => Fault::Timeout,
            _ => Fault::Failed(msg),
        };
    }
    if full.contains("password missing") {
        return Fault::Auth("password", "the server asks for a password".into());
    }
    let text = e.to_string();
    if text.starts_with("timeout") {
        Fault::Timeout
    } else if text.starts_with("error connecting") {
        // The cause alone ("Connection refused (os error 111)"): the message says the rest.
        Fault::Unreachable(
            full.split_once(": ")
                .map_or(full.clone(), |(_, c)| c.to_string()),
        )
    } else if let Some(io) = io_cause(e) {
        Fault::io(io)
    } else {
        Fault::Failed(full)
    }
}

/// The error and its causes, joined by ": ".
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// The I/O error underneath, if any.
fn io_cause(e: &postgres::Error) -> Option<&std::io::Error> {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cause = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unix_socket_gives_its_directory_port_and_the_server_user() {
        let pg = Postgres::new(
            Endpoint::Unix("/var/run/postgresql/.s.PGSQL.5433".into()),
            PresetSettings {
                run_as: Some((0, 0)),
                ..PresetSettings::default()
            },
        );
        let (c, run_as) = pg.config(Duration::from_secs(1)).unwrap();
        assert_eq!(c.get_ports(), [5433]);
        assert_eq!(
            c.get_hosts(),
            [postgres::config::Host::Unix("/var/run/postgresql".into())]
        );
        assert_eq!(c.get_user(), Some("root"), "the name of uid 0");
        assert_eq!(c.get_dbname(), Some("postgres"));
        assert_eq!(run_as, Some((0, 0)));
    }

    #[test]
    fn a_password_means_no_peer_authentication() {
        let pg = Postgres::new(
            Endpoint::Unix("/run/pg/.s.PGSQL.5432".into()),
            PresetSettings {
                user: Some("monitor".into()),
                password: Some("pw".into()),
                run_as: Some((104, 110)),
                ..PresetSettings::default()
            },
        );
        let (c, run_as) = pg.config(Duration::from_secs(1)).unwrap();
        assert_eq!(c.get_user(), Some("monitor"));
        assert_eq!(run_as, None);
    }

    #[test]
    fn a_socket_not_named_like_postgres_is_refused() {
        let pg = Postgres::new(
            Endpoint::Unix("/tmp/pg.sock".into()),
            PresetSettings::default(),
        );
        assert!(
            matches!(pg.config(Duration::from_secs(1)), Err(Fault::Failed(w)) if w.contains(".s.PGSQL"))
        );
    }
}
