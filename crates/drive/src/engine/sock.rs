//! One non-blocking connection of the event loop: TCP (`mio`) with rustls on top for
//! `https://`, and the bytes received and not yet used by the response reader. A socket is read
//! only after an edge-triggered event said it has data, and a read that leaves room in the
//! buffer means it is drained until the next event: no read per response that only finds the
//! socket empty (a runtime's readiness needs that one to learn it).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use rustls::ClientConnection;
use rustls::pki_types::ServerName;

use crate::client::{ErrKind, TlsFailure};
use crate::h1::{Fed, READ_CHUNK, Response, io_kind, make_room};
use crate::tls;

/// How far the connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// The TCP connection is being established.
    Connecting,
    /// The TLS handshake is under way.
    Handshaking,
    /// Ready for requests.
    Open,
}

/// What one read got.
enum Got {
    Bytes,
    /// Nothing until the next readable event.
    Blocked,
    /// The server closed the connection.
    Eof,
}

/// A connection of the event loop.
pub(super) struct Sock {
    tcp: TcpStream,
    tls: Option<Box<ClientConnection>>,
    stage: Stage,
    /// An event said there are bytes to read, and no read has drained them since.
    readable: bool,
    buf: Vec<u8>,
    /// Unused bytes are `buf[pos..len]`.
    pos: usize,
    len: usize,
    /// The responses it carried.
    pub served: u64,
    /// The server closed it or said it will: it must not carry another request.
    pub closed: bool,
}

/// A reader of the socket that notes whether a read left room in the buffer it was given
/// (the socket is then drained), for rustls's `read_tls`.
struct Drain<'a> {
    tcp: &'a mut TcpStream,
    drained: bool,
}

impl Read for Drain<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.tcp.read(buf)?;
        self.drained = n < buf.len();
        Ok(n)
    }
}

impl Sock {
    /// Starts connecting to `addr` (with TLS when `tls` gives the configuration and the
    /// server's name), registered for both readiness kinds under `token`.
    pub fn connect(
        addr: SocketAddr,
        registry: &Registry,
        token: Token,
        tls: Option<(&Arc<rustls::ClientConfig>, &ServerName<'static>)>,
    ) -> Result<Sock, ErrKind> {
        let mut tcp = TcpStream::connect(addr).map_err(|e| ErrKind::Connect(e.kind()))?;
        registry
            .register(&mut tcp, token, Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| ErrKind::Connect(e.kind()))?;
        let tls = match tls {
            Some((config, name)) => Some(Box::new(
                ClientConnection::new(config.clone(), name.clone())
                    .map_err(|e| tls::failure_of(&e))?,
            )),
            None => None,
        };
        Ok(Sock {
            tcp,
            tls,
            stage: Stage::Connecting,
            readable: false,
            buf: vec![0; READ_CHUNK],
            pos: 0,
            len: 0,
            served: 0,
            closed: false,
        })
    }

    /// An event for this socket: `readable` when it says there are bytes (or an end) to read.
    pub fn event(&mut self, readable: bool) {
        self.readable |= readable;
    }

    /// Advances the connection and the TLS handshake; true once requests can be sent.
    pub fn open(&mut self) -> Result<bool, ErrKind> {
        if self.stage == Stage::Connecting {
            if let Some(e) = self.tcp.take_error().unwrap_or_else(Some) {
                return Err(ErrKind::Connect(e.kind()));
            }
            match self.tcp.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(false),
                Err(e) => return Err(ErrKind::Connect(e.kind())),
            }
            let _ = self.tcp.set_nodelay(true);
            self.stage = if self.tls.is_some() {
                Stage::Handshaking
            } else {
                Stage::Open
            };
        }
        if self.stage == Stage::Handshaking {
            if !self.handshake().map_err(|e| match e {
                ErrKind::Tls(_) => e,
                _ => ErrKind::Tls(TlsFailure::Protocol),
            })? {
                return Ok(false);
            }
            self.stage = Stage::Open;
        }
        Ok(true)
    }

    /// Drives the handshake as far as the socket allows; true once it is done.
    fn handshake(&mut self) -> Result<bool, ErrKind> {
        let Some(tls) = self.tls.as_mut() else {
            return Ok(true);
        };
        loop {
            if !flush(tls, &mut self.tcp)? {
                return Ok(false);
            }
            if !tls.is_handshaking() {
                return Ok(true);
            }
            if !self.readable {
                return Ok(false);
            }
            let mut rd = Drain {
                tcp: &mut self.tcp,
                drained: false,
            };
            match tls.read_tls(&mut rd) {
                Ok(0) => return Err(ErrKind::Tls(TlsFailure::Protocol)),
                Ok(_) => self.readable = !rd.drained,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_kind(&e)),
            }
            if let Err(e) = tls.process_new_packets() {
                // Tell the server why (an alert), if the socket takes it.
                let _ = flush(tls, &mut self.tcp);
                return Err(tls::failure_of(&e));
            }
        }
    }

    /// Whether bytes nobody asked for wait in the buffer (the stream is out of sync).
    pub fn out_of_sync(&self) -> bool {
        self.pos != self.len
    }

    /// Sends `bytes` from `*sent` on; true once all are on their way.
    pub fn send(&mut self, bytes: &[u8], sent: &mut usize) -> Result<bool, ErrKind> {
        match self.tls.as_mut() {
            None => {
                while *sent < bytes.len() {
                    match self.tcp.write(&bytes[*sent..]) {
                        Ok(0) => return Err(ErrKind::Reset),
                        Ok(n) => *sent += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(io_kind(&e)),
                    }
                }
                Ok(true)
            }
            Some(tls) => loop {
                if !flush(tls, &mut self.tcp)? {
                    return Ok(false);
                }
                if *sent == bytes.len() {
                    return Ok(true);
                }
                // rustls takes what its send buffer has room for.
                match tls.writer().write(&bytes[*sent..]) {
                    Ok(0) => return Err(ErrKind::Io(io::ErrorKind::WriteZero)),
                    Ok(n) => *sent += n,
                    Err(e) => return Err(io_kind(&e)),
                }
            },
        }
    }

    /// Reads `response` as far as the bytes received allow: its status once it is complete,
    /// `None` while it waits for the next event.
    pub fn receive(&mut self, response: &mut Response) -> Result<Option<u16>, ErrKind> {
        loop {
            match response.feed(&self.buf[self.pos..self.len]) {
                Ok(Fed::Done { used, status }) => {
                    self.pos += used;
                    self.closed |= response.close;
                    self.served += 1;
                    return Ok(Some(status));
                }
                Ok(Fed::More { used }) => self.pos += used,
                Err(e) => {
                    self.closed = true;
                    return Err(e);
                }
            }
            make_room(&mut self.buf, &mut self.pos, &mut self.len);
            match self.read()? {
                Got::Bytes => {}
                Got::Blocked => return Ok(None),
                Got::Eof => {
                    self.closed = true;
                    let status = response.closed()?;
                    self.pos = self.len;
                    self.served += 1;
                    return Ok(Some(status));
                }
            }
        }
    }

    /// Reads what there is into the room at the end of the buffer.
    fn read(&mut self) -> Result<Got, ErrKind> {
        let room = &mut self.buf[self.len..];
        let Some(tls) = self.tls.as_mut() else {
            loop {
                if !self.readable {
                    return Ok(Got::Blocked);
                }
                return match self.tcp.read(room) {
                    Ok(0) => Ok(Got::Eof),
                    Ok(n) => {
                        self.readable = n == room.len();
                        self.len += n;
                        Ok(Got::Bytes)
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.readable = false;
                        Ok(Got::Blocked)
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => Err(io_kind(&e)),
                };
            }
        };
        loop {
            match tls.reader().read(room) {
                // The server's close_notify.
                Ok(0) => return Ok(Got::Eof),
                Ok(n) => {
                    self.len += n;
                    return Ok(Got::Bytes);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Closed without close_notify.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Got::Eof),
                Err(e) => return Err(io_kind(&e)),
            }
            if !self.readable {
                return Ok(Got::Blocked);
            }
            let mut rd = Drain {
                tcp: &mut self.tcp,
                drained: false,
            };
            match tls.read_tls(&mut rd) {
                // rustls notes the end; the plaintext reader says it next.
                Ok(0) => self.readable = false,
                Ok(_) => self.readable = !rd.drained,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    return Ok(Got::Blocked);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_kind(&e)),
            }
            if tls.process_new_packets().is_err() {
                let _ = flush(tls, &mut self.tcp);
                return Err(ErrKind::Io(io::ErrorKind::InvalidData));
            }
        }
    }
}

/// Writes what rustls has to send; true once all of it is out.
fn flush(tls: &mut ClientConnection, tcp: &mut TcpStream) -> Result<bool, ErrKind> {
    while tls.wants_write() {
        match tls.write_tls(tcp) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_kind(&e)),
        }
    }
    Ok(true)
}
