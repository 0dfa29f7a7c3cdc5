//! Loopback ports for the servers an experiment starts.

use std::net::TcpListener;

/// Why no ports were found.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// Binding a port to learn a free one failed.
    #[error("cannot bind a loopback port to find a free one: {0}")]
    Bind(#[from] std::io::Error),
    /// Too many of the ports from `base` on are in use.
    #[error("no {wanted} free ports from {base} on: too many are in use; choose another base port")]
    Exhausted {
        /// The first port wanted.
        base: u16,
        /// How many were wanted.
        wanted: usize,
    },
}

/// A free loopback TCP port (bound, then released; the kernel's choice).
pub fn free_port() -> Result<u16, PortError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `n` free loopback ports from `base` up, looking at most `200 + n` ports past it; `notes`
/// get one line for each port skipped because it was in use.
pub fn free_ports_from(
    base: u16,
    n: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<u16>, PortError> {
    let mut ports = Vec::with_capacity(n);
    let mut p = u32::from(base);
    let last = u32::from(base) + 200 + n as u32;
    while ports.len() < n {
        if p > u32::from(u16::MAX) || p > last {
            return Err(PortError::Exhausted { base, wanted: n });
        }
        let port = p as u16;
        if perfpilot_sys::net::port_free(port) {
            ports.push(port);
        } else {
            notes.push(format!("port {port} is in use; skipped it"));
        }
        p += 1;
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_in_use_is_skipped_and_noted() {
        let held = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = held.local_addr().expect("addr").port();
        let mut notes = Vec::new();
        let ports = free_ports_from(port, 2, &mut notes).expect("ports");
        assert_eq!(ports.len(), 2);
        assert!(ports.iter().all(|p| *p > port), "{ports:?}");
        assert_eq!(notes, [format!("port {port} is in use; skipped it")]);
        assert!(free_port().is_ok_and(|p| p > 0));
    }
}
