//! memcached: on a loopback port, TCP only, with the memory it is given.

use std::process::Command;

use super::ServerError;

/// The Debian package with the server.
pub const PACKAGE: &str = "memcached";

/// `memcached` on 127.0.0.1:`port` (no UDP) with `mib` MiB for items; the caller adds options
/// (threads, connections, `-u` or a user switch: it refuses to keep root).
pub fn command(port: u16, mib: u64) -> Result<Command, ServerError> {
    let mut c = Command::new(crate::tool::require("memcached", PACKAGE)?);
    c.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"])
        .args(["-m", &mib.to_string()]);
    Ok(c)
}
