//! Reading a preset: one worker thread per reader keeps the connection between reads and does
//! the talking; the caller waits for its answer with a timeout, so a hung server costs a
//! timeout, never a stuck daemon, and never more than that one thread.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use super::{At, Candidate, Endpoint, PresetError, PresetKind, Reading};

/// Why a read failed, before the reader adds the preset and endpoint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fault {
    /// No connection.
    Unreachable(String),
    /// Credentials needed or refused: the `[[preset]]` field to set, and what the server said.
    Auth(&'static str, String),
    /// The socket gave up waiting.
    Timeout,
    /// Not this kind's answer: its start.
    Garbage(String),
    /// The counter is missing: what was looked for.
    MetricMissing(String),
    /// The answer is larger than this many bytes.
    TooLarge(u64),
    /// Anything else, said in full.
    Failed(String),
    /// This build cannot read the kind.
    Unsupported(String),
}

impl Fault {
    /// The fault of an I/O error while connecting or talking.
    pub(crate) fn io(e: &io::Error) -> Fault {
        use io::ErrorKind::*;
        match e.kind() {
            WouldBlock | TimedOut => Fault::Timeout,
            ConnectionRefused | NotFound | AddrNotAvailable | HostUnreachable
            | NetworkUnreachable | PermissionDenied => Fault::Unreachable(e.to_string()),
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => {
                Fault::Failed(format!("the server closed the connection ({e})"))
            }
            _ => Fault::Failed(e.to_string()),
        }
    }

    fn at(self, at: At, timeout: Duration) -> PresetError {
        match self {
            Fault::Unreachable(why) => PresetError::Unreachable { at, why },
            Fault::Auth(field, why) => PresetError::Auth { at, field, why },
            Fault::Timeout => PresetError::Timeout { at, timeout },
            Fault::Garbage(got) => PresetError::Garbage { at, got },
            Fault::MetricMissing(what) => PresetError::MetricMissing { at, what },
            Fault::TooLarge(limit) => PresetError::TooLarge { at, limit },
            Fault::Failed(why) => PresetError::Failed { at, why },
            Fault::Unsupported(why) => PresetError::Unsupported { at, why },
        }
    }
}

/// One kind's conversation with its server; it owns the connection.
pub(crate) trait Session: Send {
    /// Reads the counter, connecting first when there is no connection; the socket waits at
    /// most `io_limit` for any one step.
    fn read(&mut self, io_limit: Duration) -> Result<Reading, Fault>;
    /// Drops the connection (after an error: the next read connects anew).
    fn reset(&mut self);
}

/// A session over one kept connection. A kept connection that fails with
/// [`Fault::Failed`] (the server closed it: a restart, an idle timeout) is dropped and the
/// query runs once more on a new one; other faults are the answer.
pub(crate) trait KeptConnection: Send {
    /// Whether a connection is kept.
    fn connected(&self) -> bool;
    /// Drops the kept connection.
    fn disconnect(&mut self);
    /// Reads the counter, connecting first when no connection is kept.
    fn query(&mut self, io_limit: Duration) -> Result<Reading, Fault>;
}

impl<K: KeptConnection> Session for K {
    fn read(&mut self, io_limit: Duration) -> Result<Reading, Fault> {
        let kept = self.connected();
        match self.query(io_limit) {
            Err(Fault::Failed(_)) if kept => {
                self.disconnect();
                self.query(io_limit)
            }
            other => other,
        }
    }

    fn reset(&mut self) {
        self.disconnect();
    }
}

/// A connected stream socket, TCP or Unix.
pub(crate) enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix.
    Unix(UnixStream),
}

impl Stream {
    /// Connects to `endpoint` within `limit`, and makes every later read and write give up
    /// after `limit` too.
    pub(crate) fn connect(endpoint: &Endpoint, limit: Duration) -> Result<Stream, Fault> {
        let s = match endpoint {
            Endpoint::Tcp(a) => {
                let s = TcpStream::connect_timeout(a, limit).map_err(|e| Fault::io(&e))?;
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }
            Endpoint::Unix(p) => Stream::Unix(UnixStream::connect(p).map_err(|e| Fault::io(&e))?),
        };
        let limit = Some(limit.max(Duration::from_millis(1)));
        let set = match &s {
            Stream::Tcp(t) => t.set_read_timeout(limit).and(t.set_write_timeout(limit)),
            Stream::Unix(u) => u.set_read_timeout(limit).and(u.set_write_timeout(limit)),
        };
        set.map_err(|e| Fault::io(&e))?;
        Ok(s)
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// A stream that reads a server's bytes and drops what is written to it: a whole
/// conversation replayed from recorded or fuzzed bytes.
pub(crate) struct Replay<'a> {
    input: io::Cursor<&'a [u8]>,
}

impl<'a> Replay<'a> {
    /// A server that says `server`, then closes.
    pub(crate) fn new(server: &'a [u8]) -> Replay<'a> {
        Replay {
            input: io::Cursor::new(server),
        }
    }
}

impl Read for Replay<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Replay<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A stream that reads from fixed bytes and records what is written: a server's side for
/// the presets' tests.
#[cfg(test)]
pub(crate) struct Wire {
    pub(crate) input: io::Cursor<Vec<u8>>,
    pub(crate) output: Vec<u8>,
}

#[cfg(test)]
impl Wire {
    /// A server that says `input`, then closes.
    pub(crate) fn new(input: &[u8]) -> Wire {
        Wire {
            input: io::Cursor::new(input.to_vec()),
            output: Vec::new(),
        }
    }
}

#[cfg(test)]
impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

#[cfg(test)]
impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// How long the worker's socket waits for one step, for a read waited on for `timeout`: long
/// enough that a slow answer is still taken by a later read, short enough that a hung
/// server frees the worker.
fn io_limit(timeout: Duration) -> Duration {
    (timeout * 10).clamp(Duration::from_secs(1), Duration::from_secs(120))
}

/// Reads one [`Candidate`] again and again over one kept connection.
///
/// Each [`read`](Self::read) hands the work to the reader's worker thread and waits at most
/// its timeout. A read that times out keeps running on the worker; until it ends, later
/// reads answer [`PresetError::StillWaiting`] at once instead of starting more work, and its
/// late answer is dropped (it belongs to an earlier moment). After any error the connection
/// is dropped and the next read connects anew. Dropping the reader lets the worker end once
/// its current step does.
pub struct PresetReader {
    candidate: Candidate,
    worker: Option<Worker>,
}

struct Worker {
    ask: Sender<Duration>,
    answer: Receiver<Result<Reading, Fault>>,
    /// When the read still running on the worker was asked for, if one is.
    pending: Option<Instant>,
}

impl PresetReader {
    /// A reader of `candidate`; nothing connects before the first read.
    pub fn new(candidate: Candidate) -> PresetReader {
        PresetReader {
            candidate,
            worker: None,
        }
    }

    /// What this reader reads.
    pub fn candidate(&self) -> &Candidate {
        &self.candidate
    }

    /// Reads the counter, waiting at most `timeout` for the server.
    pub fn read(&mut self, timeout: Duration) -> Result<Reading, PresetError> {
        let at = At {
            kind: self.candidate.kind,
            endpoint: self.candidate.endpoint.clone(),
        };
        if let Some(w) = &mut self.worker
            && let Some(since) = w.pending
        {
            match w.answer.try_recv() {
                // The late answer of a read that timed out: stale, so dropped.
                Ok(_) => w.pending = None,
                Err(TryRecvError::Empty) => {
                    return Err(PresetError::StillWaiting {
                        at,
                        waiting: since.elapsed(),
                    });
                }
                // The worker is gone (it panicked); a new one starts below.
                Err(TryRecvError::Disconnected) => self.worker = None,
            }
        }
        if self.worker.is_none() {
            self.worker = Some(spawn(&self.candidate).map_err(|e| PresetError::Failed {
                at: at.clone(),
                why: format!("cannot start a reader thread: {e}"),
            })?);
        }
        let Some(w) = self.worker.as_mut() else {
            unreachable!("a worker was just started")
        };
        let asked = Instant::now();
        if w.ask.send(timeout).is_err() {
            self.worker = None;
            return Err(PresetError::Failed {
                at,
                why: "the reader thread ended; the next read starts a new one".into(),
            });
        }
        match w.answer.recv_timeout(timeout) {
            Ok(r) => r.map_err(|f| f.at(at, timeout)),
            Err(RecvTimeoutError::Timeout) => {
                w.pending = Some(asked);
                Err(PresetError::Timeout { at, timeout })
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.worker = None;
                Err(PresetError::Failed {
                    at,
                    why: "the reader thread failed; the next read starts a new one".into(),
                })
            }
        }
    }
}

/// Starts the worker thread of `candidate`.
fn spawn(candidate: &Candidate) -> io::Result<Worker> {
    let (ask, asks) = mpsc::channel::<Duration>();
    let (tell, answer) = mpsc::channel();
    let mut session = session_for(candidate);
    std::thread::Builder::new()
        .name(format!("preset-{}", candidate.kind))
        .spawn(move || {
            for timeout in asks {
                let r = session.read(io_limit(timeout));
                if r.is_err() {
                    session.reset();
                }
                if tell.send(r).is_err() {
                    break;
                }
            }
        })?;
    Ok(Worker {
        ask,
        answer,
        pending: None,
    })
}

/// The conversation for `candidate`'s kind.
fn session_for(c: &Candidate) -> Box<dyn Session> {
    let (e, s) = (c.endpoint.clone(), c.settings.clone());
    match c.kind {
        PresetKind::Postgres => Box::new(super::postgres::Postgres::new(e, s)),
        PresetKind::Redis => Box::new(super::redis::Redis::new(e, s)),
        PresetKind::Memcached => Box::new(super::memcached::Memcached::new(e)),
        PresetKind::Nginx => Box::new(super::nginx::Nginx::new(e, s)),
        PresetKind::Mysql => Box::new(super::mysql::Mysql::new(e, s)),
        PresetKind::Prometheus => Box::new(super::prometheus::Scraper::new(e, s)),
    }
}

/// Reads one line ending in `\r\n` (or `\n`) of at most `max` bytes; a longer one is
/// [`Fault::TooLarge`], and an end of stream before it is a closed connection.
pub(crate) fn read_line(r: &mut impl io::BufRead, max: usize) -> Result<Vec<u8>, Fault> {
    let mut line = Vec::new();
    let mut limited = io::Read::take(&mut *r, max as u64 + 1);
    let n = io::BufRead::read_until(&mut limited, b'\n', &mut line).map_err(|e| Fault::io(&e))?;
    if n == 0 {
        return Err(Fault::Failed("the server closed the connection".into()));
    }
    if !line.ends_with(b"\n") {
        return Err(if line.len() > max {
            Fault::TooLarge(max as u64)
        } else {
            Fault::Failed(format!(
                "the server closed the connection after {:?}",
                super::snippet(&line, 80)
            ))
        });
    }
    line.pop();
    if line.ends_with(b"\r") {
        line.pop();
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_read_without_its_ending_and_a_long_one_is_too_large() {
        let mut r = io::Cursor::new(b"STAT pid 7\r\nEND\nxxxxxxxx".to_vec());
        assert_eq!(read_line(&mut r, 100).unwrap(), b"STAT pid 7");
        assert_eq!(read_line(&mut r, 100).unwrap(), b"END");
        assert!(matches!(read_line(&mut r, 100), Err(Fault::Failed(_))));
        let mut r = io::Cursor::new(vec![b'x'; 200]);
        assert_eq!(read_line(&mut r, 100), Err(Fault::TooLarge(100)));
    }

    #[test]
    fn the_worker_waits_ten_times_the_timeout_within_bounds() {
        assert_eq!(io_limit(Duration::from_secs(2)), Duration::from_secs(20));
        assert_eq!(io_limit(Duration::from_millis(10)), Duration::from_secs(1));
        assert_eq!(io_limit(Duration::from_secs(60)), Duration::from_secs(120));
    }
}
