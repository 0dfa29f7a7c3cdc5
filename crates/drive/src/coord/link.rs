//! The byte pipe a coordinator and a worker speak over, whatever carries it: a TCP connection
//! (plain, or mutual TLS: [`super::secure`]), an `ssh` child's stdin and stdout on the
//! coordinator's side, this process's stdin and stdout on the worker's (`--stdio`). Reads go
//! through a thread of their own, so that every transport has read deadlines (a pipe has no
//! `SO_RCVTIMEO`) and the framing is read the same way everywhere ([`perfpilot_fetch::lines::recv`]).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::Child;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use perfpilot_fetch::lines::{recv, send};

/// Chunks read ahead of the reader, at most (64 KiB each): what a peer that sends faster than
/// the session reads can make this side hold.
const READ_AHEAD: usize = 8;

/// A connection between a coordinator and a worker.
pub struct Link {
    /// Who is at the other end, for logs and errors: the address, with the certificate's
    /// subject over TLS, or the `ssh` destination.
    pub peer: String,
    /// The incoming messages.
    pub reader: LinkReader,
    /// The outgoing messages (cloneable: a session's threads share it).
    pub writer: LinkWriter,
}

/// The reading half of a [`Link`].
pub struct LinkReader {
    inner: BufReader<Pump>,
}

/// How one side of a link is closed (`Shutdown::Write`: no more messages, still reading).
type Closer = Box<dyn Fn(Shutdown) + Send + Sync>;

struct Shared {
    out: Mutex<Box<dyn Write + Send>>,
    close: Closer,
    /// The last lines the transport's own process printed (`ssh`'s stderr), for errors.
    stderr: Arc<Said>,
}

/// What a transport's process said on its stderr, and whether it has finished saying it.
#[derive(Default)]
pub(crate) struct Said {
    lines: Mutex<VecDeque<String>>,
    /// Set when its stderr closed (at once for transports without a process).
    done: std::sync::atomic::AtomicBool,
}

impl Said {
    pub(crate) fn none() -> Arc<Said> {
        let s = Said::default();
        s.done.store(true, std::sync::atomic::Ordering::SeqCst);
        Arc::new(s)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        (self.close)(Shutdown::Both);
    }
}

/// The writing half of a [`Link`]; the link closes when the last clone is dropped.
#[derive(Clone)]
pub struct LinkWriter(Arc<Shared>);

impl LinkReader {
    /// Reads fail with `TimedOut` after `limit` without a byte (`None`: they wait).
    pub fn set_timeout(&mut self, limit: Option<Duration>) {
        self.inner.get_mut().timeout = limit;
    }

    /// Reads fail with `TimedOut` once `within` has passed from now, however the bytes trickle
    /// in (`None`: no deadline): what a hello must arrive within.
    pub fn set_deadline(&mut self, within: Option<Duration>) {
        self.inner.get_mut().deadline = within.map(|d| std::time::Instant::now() + d);
    }

    /// The next message; `Ok(None)` when the other side closed.
    pub fn recv<T: DeserializeOwned>(&mut self) -> std::io::Result<Option<T>> {
        recv(&mut self.inner)
    }

    /// The buffered reader underneath (what [`recv`] reads from).
    pub fn buffered(&mut self) -> &mut impl BufRead {
        &mut self.inner
    }
}

impl LinkWriter {
    /// Sends one message.
    pub fn send<T: Serialize>(&self, msg: &T) -> std::io::Result<()> {
        let mut w = self.0.out.lock().unwrap_or_else(|p| p.into_inner());
        send(&mut *w, msg)
    }

    /// Closes the link (`Shutdown::Write`: says no more, and can still read what comes).
    pub fn shutdown(&self, how: Shutdown) {
        (self.0.close)(how);
    }

    /// What the transport's own process said last (`ssh`'s errors), if it said anything; waits
    /// up to a second for it to finish saying it (its stderr may lag its stdout's end).
    pub fn transport_said(&self) -> Option<String> {
        for _ in 0..20 {
            if self.0.stderr.done.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let lines = self
            .0
            .stderr
            .lines
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        (!lines.is_empty()).then(|| lines.iter().cloned().collect::<Vec<_>>().join("; "))
    }
}

/// Bytes from a source read on a thread of its own, with an optional deadline per read.
struct Pump {
    chunks: Receiver<std::io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    at: usize,
    timeout: Option<Duration>,
    deadline: Option<std::time::Instant>,
    ended: bool,
}

impl Pump {
    /// How long the next read may wait: the per-read timeout, cut to the deadline.
    fn wait(&self) -> Option<Duration> {
        let left = self
            .deadline
            .map(|d| d.saturating_duration_since(std::time::Instant::now()));
        match (self.timeout, left) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        }
    }

    fn start(mut source: impl Read + Send + 'static) -> Pump {
        let (tx, chunks): (SyncSender<_>, _) = std::sync::mpsc::sync_channel(READ_AHEAD);
        std::thread::spawn(move || {
            loop {
                let mut buf = vec![0u8; 64 << 10];
                match source.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        buf.truncate(n);
                        if tx.send(Ok(buf)).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                }
            }
        });
        Pump {
            chunks,
            chunk: Vec::new(),
            at: 0,
            timeout: None,
            deadline: None,
            ended: false,
        }
    }
}

impl Read for Pump {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.chunk.len() {
            if self.ended {
                return Ok(0);
            }
            let wait = self.wait();
            let next = match wait {
                Some(t) => self.chunks.recv_timeout(t),
                None => self
                    .chunks
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
            };
            match next {
                Ok(Ok(c)) => {
                    self.chunk = c;
                    self.at = 0;
                }
                Ok(Err(e)) => {
                    self.ended = true;
                    return Err(e);
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.ended = true;
                    return Ok(0);
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "nothing received for {}",
                            perfpilot_units::clock(wait.unwrap_or_default())
                        ),
                    ));
                }
            }
        }
        let n = out.len().min(self.chunk.len() - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Link {
    /// A link over `source` and `sink`, closed by `close`.
    pub(crate) fn from_parts(
        peer: String,
        source: impl Read + Send + 'static,
        sink: impl Write + Send + 'static,
        close: Closer,
        stderr: Arc<Said>,
    ) -> Link {
        Link {
            peer,
            reader: LinkReader {
                inner: BufReader::new(Pump::start(source)),
            },
            writer: LinkWriter(Arc::new(Shared {
                out: Mutex::new(Box::new(sink)),
                close,
                stderr,
            })),
        }
    }

    /// A plain TCP connection.
    pub fn tcp(stream: TcpStream, peer: String) -> std::io::Result<Link> {
        let _ = stream.set_nodelay(true);
        let source = stream.try_clone()?;
        let closer = stream.try_clone()?;
        Ok(Link::from_parts(
            peer,
            source,
            stream,
            Box::new(move |how| {
                let _ = closer.shutdown(how);
            }),
            Said::none(),
        ))
    }

    /// This process's stdin and stdout (a worker started by `ssh` with `--stdio`); `peer` says
    /// who started it.
    pub fn stdio(peer: String) -> Link {
        Link::from_parts(
            peer,
            std::io::stdin(),
            std::io::stdout(),
            // The process's end closes them.
            Box::new(|_| {}),
            Said::none(),
        )
    }

    /// A child process's stdout and stdin (`ssh host perfpilot … --stdio`); its stderr's last
    /// lines are kept for errors ([`LinkWriter::transport_said`]); the child is killed when the
    /// link closes.
    pub fn child(mut child: Child, peer: String) -> std::io::Result<Link> {
        let missing = || std::io::Error::other("the child's pipes were not set up");
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let said: Arc<Said> = Arc::default();
        match child.stderr.take() {
            Some(stderr) => {
                let said = said.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stderr).lines() {
                        let Ok(line) = line else { break };
                        let line = line.trim().to_string();
                        if line.is_empty() {
                            continue;
                        }
                        let mut s = said.lines.lock().unwrap_or_else(|p| p.into_inner());
                        if s.len() == 4 {
                            s.pop_front();
                        }
                        s.push_back(line);
                    }
                    said.done.store(true, std::sync::atomic::Ordering::SeqCst);
                });
            }
            None => said.done.store(true, std::sync::atomic::Ordering::SeqCst),
        }
        let child = Mutex::new(Some(child));
        let stdin = Arc::new(Mutex::new(Some(stdin)));
        let sink = ChildStdin(stdin.clone());
        Ok(Link::from_parts(
            peer,
            stdout,
            sink,
            Box::new(move |how| {
                // No more messages: the worker sees its stdin end, as a TCP worker sees EOF.
                stdin.lock().unwrap_or_else(|p| p.into_inner()).take();
                if how == Shutdown::Both
                    && let Some(mut c) = child.lock().unwrap_or_else(|p| p.into_inner()).take()
                {
                    // A worker that ends its session on EOF has a moment to restore and exit.
                    for _ in 0..50 {
                        if matches!(c.try_wait(), Ok(Some(_))) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }),
            said,
        ))
    }
}

/// A child's stdin that [`Link::child`]'s closer can take away (closing it).
struct ChildStdin(Arc<Mutex<Option<std::process::ChildStdin>>>);

impl Write for ChildStdin {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(s) => s.write(buf),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(s) => s.flush(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_peer_times_out_and_a_late_message_is_still_read() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let mut link = Link::tcp(a, "b".into()).unwrap();
        link.reader.set_timeout(Some(Duration::from_millis(100)));
        let e = link.reader.recv::<u32>().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        send(&mut &b, &7u32).unwrap();
        assert_eq!(link.reader.recv::<u32>().unwrap(), Some(7));
        drop(b);
        assert_eq!(link.reader.recv::<u32>().unwrap(), None);
    }
}
