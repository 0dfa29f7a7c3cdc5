//! Whether a TCP port on 127.0.0.1 is free, checked by binding it without listening: a check
//! that listened, even for a moment, would accept a connection another run's readiness probe
//! makes to that port, and the probe would take it for the server.

use std::net::{Ipv4Addr, SocketAddr};

use socket2::{Domain, Socket, Type};

/// Whether `port` on 127.0.0.1 can be bound by a server that sets `SO_REUSEADDR` (as servers
/// do, so connections of an earlier run in `TIME_WAIT` do not make the port look busy).
pub fn port_free(port: u16) -> bool {
    let Ok(socket) = Socket::new(Domain::IPV4, Type::STREAM, None) else {
        return false;
    };
    if socket.set_reuse_address(true).is_err() {
        return false;
    }
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    socket.bind(&addr.into()).is_ok()
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_listened_port_is_busy_and_a_closed_one_free() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(!port_free(port));
        drop(listener);
        assert!(port_free(port));
    }

    #[test]
    fn the_check_never_accepts_a_connection() {
        // Hold the bound, unlistened socket the way the check does and connect to it: a bound
        // socket that does not listen refuses, so a probe cannot mistake the check for a server.
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        socket
            .bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
            .unwrap();
        let addr = socket.local_addr().unwrap().as_socket().unwrap();
        let r = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
        assert!(r.is_err(), "a bound socket that does not listen accepted");
    }
}
