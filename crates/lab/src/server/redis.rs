//! Redis: `redis-server` on a loopback port with its files in a directory of the caller's,
//! nothing saved and no append-only file (a throw-away or preloaded dataset).

use std::path::Path;
use std::process::Command;

use super::ServerError;

/// The Debian package with the server.
pub const PACKAGE: &str = "redis-server";

/// `redis-server` on 127.0.0.1:`port` with `dir` as its directory, saving nothing; the caller
/// adds options (a Unix socket, `--requirepass`, an RDB file to load).
pub fn command(port: u16, dir: &Path) -> Result<Command, ServerError> {
    let mut c = Command::new(crate::tool::require("redis-server", PACKAGE)?);
    c.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(dir);
    Ok(c)
}
