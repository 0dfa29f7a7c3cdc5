//! `perfpilot drive --worker`: waits for a coordinator, answers its hello and clock pings,
//! runs the share it is given at the time it is given, streams each completed second, and
//! sends its measurement at the end. A coordinator that goes away stops the run.
//!
//! Listening, each connection is admitted on a thread of its own ([`Admission`]: the TLS
//! handshake with a client certificate checked, or plain TCP) and must say hello within
//! [`OPENING`]; one share runs at a time, and a coordinator that comes meanwhile is refused,
//! naming the one served. `--stdio` serves the one coordinator that started it over `ssh`.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::ServerConfig;

use super::link::Link;
use super::wire::{Msg, PROTOCOL, WireInterval};
use crate::engine::{RunControl, run};
use crate::error::DriveError;

/// How long a connection has for its TLS handshake and its hello.
pub const OPENING: Duration = Duration::from_secs(10);

/// Connections in their handshake or hello at once, at most: past that a connection is closed
/// at once (each waits on a thread of its own for up to [`OPENING`]).
pub const OPENING_AT_ONCE: usize = 32;

/// The connections being admitted now (see [`OPENING_AT_ONCE`]).
#[derive(Clone, Default)]
pub struct Opening(Arc<std::sync::atomic::AtomicUsize>);

/// One connection's place among those being admitted; freed when dropped.
pub struct OpeningSlot(Arc<std::sync::atomic::AtomicUsize>);

impl Opening {
    /// A place for one more connection, or `None` when [`OPENING_AT_ONCE`] are being admitted.
    pub fn enter(&self) -> Option<OpeningSlot> {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        if n >= OPENING_AT_ONCE {
            self.0.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(OpeningSlot(self.0.clone()))
    }
}

impl Drop for OpeningSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Who a worker is and how it runs.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// perfpilot's version, compared with the coordinator's.
    pub version: String,
    /// Milliseconds added to every clock reading the worker reports and takes: a test's stand-in
    /// for a host whose clock is off (0 in real use).
    pub clock_skew_ms: i64,
    /// This process's CPU time, for the driver's cost per request.
    pub cpu_clock: Option<fn() -> Duration>,
}

/// How a listening worker admits a connection.
#[derive(Clone)]
pub enum Admission {
    /// Mutual TLS: the client's certificate must chain to the configured CA.
    Tls(Arc<ServerConfig>),
    /// Plain TCP (loopback, or `--insecure-listen`).
    Plain,
}

impl Admission {
    /// The connection `s` as a link: after a TLS handshake that checked the client's
    /// certificate, or as it is. `Err` says who and why (for the log).
    pub fn admit(&self, s: TcpStream) -> Result<Link, String> {
        let addr = s
            .peer_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string());
        match self {
            Admission::Tls(c) => {
                super::secure::accept(s, c).map_err(|why| format!("{addr}: refused: {why}"))
            }
            Admission::Plain => Link::tcp(s, addr.clone()).map_err(|e| format!("{addr}: {e}")),
        }
    }
}

/// How a session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The share ran and its measurement was sent.
    Ran,
    /// The coordinator hung up before a run (it refused this worker, or only measured it).
    HungUp,
}

fn wire_err(what: &str, e: impl std::fmt::Display) -> DriveError {
    DriveError::Worker {
        addr: what.to_string(),
        reason: e.to_string(),
    }
}

fn now_us(skew_ms: i64) -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
        + skew_ms * 1000
}

/// Serves coordinators on `listener` (after one session when `once`, else forever); every
/// admission, refusal and session end goes to `log`.
pub fn serve(
    listener: &TcpListener,
    admission: &Admission,
    cfg: &WorkerConfig,
    log: fn(&str),
    once: bool,
) {
    if once {
        // One at a time on this thread, until one coordinator was served.
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let link = match admission.admit(stream) {
                Ok(l) => l,
                Err(why) => {
                    log(&format!("coordinator {why}"));
                    continue;
                }
            };
            let peer = link.peer.clone();
            match greet(link) {
                Ok(g) => {
                    log(&format!("coordinator {peer}: admitted"));
                    return log_end(&peer, run_session(g, cfg), log);
                }
                Err(why) => log(&format!("coordinator {peer}: {why}")),
            }
        }
        return;
    }
    // The coordinator being served, if one is.
    let serving: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let opening = Opening::default();
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let Some(slot) = opening.enter() else {
            log(&refused_crowd(&stream));
            continue;
        };
        let serving = serving.clone();
        let (admission, cfg) = (admission.clone(), cfg.clone());
        // Each connection on a thread of its own: one that never finishes its handshake or
        // its hello holds no one else up.
        std::thread::spawn(move || {
            let link = match admission.admit(stream) {
                Ok(l) => l,
                Err(why) => return log(&format!("coordinator {why}")),
            };
            let peer = link.peer.clone();
            let hello = match greet(link) {
                Ok(h) => h,
                Err(why) => return log(&format!("coordinator {peer}: {why}")),
            };
            drop(slot);
            let mut now = serving.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(other) = now.clone() {
                drop(now);
                log(&format!("coordinator {peer}: refused, busy with {other}"));
                let reason = format!(
                    "this worker runs the share of coordinator {other}; it serves one at a time: start another worker for this run"
                );
                let _ = hello.link.writer.send(&Msg::Refused { reason });
                return;
            }
            *now = Some(peer.clone());
            drop(now);
            log(&format!("coordinator {peer}: admitted"));
            log_end(&peer, run_session(hello, &cfg), log);
            *serving.lock().unwrap_or_else(|p| p.into_inner()) = None;
        });
    }
}

/// The log line of a connection closed because [`OPENING_AT_ONCE`] others are being admitted.
pub fn refused_crowd(stream: &TcpStream) -> String {
    format!(
        "coordinator {}: refused: {OPENING_AT_ONCE} connections are in their handshake or hello already",
        stream
            .peer_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string())
    )
}

fn log_end(peer: &str, end: Result<SessionEnd, DriveError>, log: fn(&str)) {
    match end {
        Ok(SessionEnd::Ran) => log(&format!("coordinator {peer}: share run and reported")),
        Ok(SessionEnd::HungUp) => log(&format!("coordinator {peer}: hung up before a run")),
        Err(e) => log(&format!("coordinator {peer}: {e}")),
    }
}

/// A link whose coordinator said hello.
pub struct Greeted {
    link: Link,
    version: String,
    protocol: u32,
}

/// Reads the hello a coordinator opens with, within [`OPENING`].
pub fn greet(mut link: Link) -> Result<Greeted, String> {
    link.reader.set_deadline(Some(OPENING));
    let hello = link.reader.recv::<Msg>();
    link.reader.set_deadline(None);
    match hello {
        Ok(Some(Msg::Hello { version, protocol })) => Ok(Greeted {
            link,
            version,
            protocol,
        }),
        Ok(Some(other)) => Err(format!("refused: it opened with {other:?}, not a hello")),
        Ok(None) => Err("closed before its hello".into()),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(format!(
            "refused: no hello within {}",
            perfpilot_units::clock(OPENING)
        )),
        Err(e) => Err(format!("refused: {e}")),
    }
}

/// Serves one coordinator on `link` (a test's loopback connection, or `--stdio`).
pub fn serve_session(link: Link, cfg: &WorkerConfig) -> Result<SessionEnd, DriveError> {
    let peer = link.peer.clone();
    let g = greet(link).map_err(|why| wire_err(&peer, why))?;
    run_session(g, cfg)
}

/// Runs the session of a coordinator that said hello.
fn run_session(g: Greeted, cfg: &WorkerConfig) -> Result<SessionEnd, DriveError> {
    let Greeted {
        link,
        version,
        protocol,
    } = g;
    let Link {
        peer,
        mut reader,
        writer,
    } = link;
    let say =
        |msg: &Msg| -> Result<(), DriveError> { writer.send(msg).map_err(|e| wire_err(&peer, e)) };
    if version != cfg.version || protocol != PROTOCOL {
        let reason = format!(
            "this worker runs perfpilot {} (protocol {PROTOCOL}), the coordinator \
             perfpilot {version} (protocol {protocol}): run the same version on both",
            cfg.version
        );
        say(&Msg::Refused {
            reason: reason.clone(),
        })?;
        return Err(wire_err(&peer, reason));
    }
    say(&Msg::Hello {
        version: cfg.version.clone(),
        protocol: PROTOCOL,
    })?;
    let (spec, start_at_ms) = loop {
        match reader.recv().map_err(|e| wire_err(&peer, e))? {
            Some(Msg::Ping { t0_us }) => say(&Msg::Pong {
                t0_us,
                worker_us: now_us(cfg.clock_skew_ms),
            })?,
            Some(Msg::Start { spec, start_at_ms }) => break (spec, start_at_ms),
            Some(Msg::Stop) | None => return Ok(SessionEnd::HungUp),
            Some(other) => return Err(wire_err(&peer, format!("unexpected {other:?}"))),
        }
    };
    let drive_spec = match spec.to_drive_spec(&std::env::temp_dir()) {
        Ok(s) => s,
        Err(e) => {
            say(&Msg::Failed {
                reason: e.to_string(),
            })?;
            return Err(e);
        }
    };
    // The start in this host's real clock.
    let start_real_ms = start_at_ms as i64 - cfg.clock_skew_ms;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let control = RunControl {
        progress: false,
        ctrl_c: false,
        start_at: Some(UNIX_EPOCH + Duration::from_millis(start_real_ms.max(0) as u64)),
        live: vec![tx],
        cpu_clock: cfg.cpu_clock,
        stop: Some(stop.clone()),
    };
    // A Stop, or the coordinator gone, stops the run.
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            loop {
                match reader.recv::<Msg>() {
                    Ok(Some(Msg::Stop)) | Ok(None) | Err(_) => break,
                    Ok(Some(_)) => {}
                }
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    let forwarder = {
        let writer = writer.clone();
        std::thread::spawn(move || {
            loop {
                let msg = match rx.recv_timeout(Duration::from_secs(1)) {
                    Ok(i) => Msg::Interval(WireInterval::from_interval(&i)),
                    Err(RecvTimeoutError::Timeout) => Msg::Alive,
                    Err(RecvTimeoutError::Disconnected) => break,
                };
                if writer.send(&msg).is_err() {
                    break;
                }
            }
        })
    };
    let result = run(&drive_spec, &control);
    drop(control);
    let _ = forwarder.join();
    let end = match result {
        Ok(m) => say(&Msg::Done {
            measurement: Box::new(m),
        })
        .map(|()| SessionEnd::Ran),
        Err(e) => {
            let _ = say(&Msg::Failed {
                reason: e.to_string(),
            });
            Err(e)
        }
    };
    // The coordinator closes after the measurement; the watcher ends with it.
    writer.shutdown(Shutdown::Write);
    let _ = watcher.join();
    if let Some(ca) = &drive_spec.tls.ca_file {
        let _ = std::fs::remove_file(ca);
    }
    end
}
