//! PostgreSQL: a cluster made with `initdb` and its server started on a port, with its Unix
//! sockets in a directory of the caller's, as the `postgres` user when this process is root
//! (both refuse root); ready once `pg_isready` says it accepts connections (its port opens
//! before recovery ends).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{Server, ServerError};

/// The Debian package with the server and its tools.
pub const PACKAGE: &str = "postgresql";

/// The system user the server runs as.
pub const USER: &str = "postgres";

/// The path of PostgreSQL's program `name` (`initdb`, `postgres`, `pg_ctl`, `psql`, …; the
/// newest version's).
pub fn bin(name: &str) -> Result<PathBuf, ServerError> {
    Ok(crate::tool::require(name, PACKAGE)?)
}

/// `program` as a command run as the `postgres` user when this process is root.
pub fn command(program: &Path) -> Result<Command, ServerError> {
    let mut c = Command::new(program);
    super::as_user_if_root(&mut c, USER)?;
    Ok(c)
}

/// How a new cluster admits connections over its Unix sockets (TCP is always trusted: the
/// clusters are throw-away and listen on private addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalAuth {
    /// Any role.
    Trust,
    /// The OS user must match the role.
    Peer,
}

/// `initdb` of a cluster in `data` (superuser `postgres`, no sync), as the `postgres` user
/// when root; the caller adds options and runs it.
pub fn initdb(data: &Path, local: LocalAuth) -> Result<Command, ServerError> {
    let mut c = command(&bin("initdb")?)?;
    let local = match local {
        LocalAuth::Trust => "--auth-local=trust",
        LocalAuth::Peer => "--auth-local=peer",
    };
    c.arg("-D")
        .arg(data)
        .args(["--auth-host=trust", local, "-U", USER, "--no-sync"]);
    Ok(c)
}

/// Where and how a cluster's server listens.
#[derive(Clone, Debug)]
pub struct Listen<'a> {
    /// Its TCP port.
    pub port: u16,
    /// The addresses it listens on (`127.0.0.1`, a namespace link's address).
    pub addresses: &'a [String],
    /// The directory of its Unix sockets (`.s.PGSQL.<port>`).
    pub sockets: &'a Path,
}

/// The server of the cluster in `data` listening as `listen`, with `settings` given as `-c`;
/// not switched to the `postgres` user (see [`command`]: a caller that moves it into a CPU
/// group switches on joining).
pub fn server(
    data: &Path,
    listen: &Listen,
    settings: &[(String, String)],
) -> Result<Command, ServerError> {
    let initdb = bin("initdb")?;
    let program =
        crate::tool::find("postgres").unwrap_or_else(|| initdb.with_file_name("postgres"));
    let mut c = Command::new(program);
    c.arg("-D").arg(data);
    let fixed = [
        ("port", listen.port.to_string()),
        ("listen_addresses", listen.addresses.join(",")),
        (
            "unix_socket_directories",
            listen.sockets.display().to_string(),
        ),
    ]
    .map(|(k, v)| (k.to_string(), v));
    for (k, v) in fixed.iter().chain(settings) {
        c.arg("-c").arg(format!("{k}={v}"));
    }
    Ok(c)
}

/// The Unix socket of a server listening on `port` in `dir`.
pub fn socket(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

/// Whether the server on 127.0.0.1:`port` accepts connections (`pg_isready`; a TCP connect
/// where it is not installed).
pub fn ready(port: u16) -> bool {
    let Some(ready) = crate::tool::find("pg_isready") else {
        return crate::process::accepts("127.0.0.1", port);
    };
    Command::new(ready)
        .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

/// Waits (at most `limit`) until `server`, listening on 127.0.0.1:`port`, accepts connections.
pub fn wait_ready(
    server: &mut Server,
    port: u16,
    limit: Duration,
    give_up: &dyn Fn() -> bool,
) -> Result<(), ServerError> {
    let what = format!("accepting connections on 127.0.0.1:{port}");
    server.wait_until(&what, limit, || ready(port), give_up)
}
