//! `perfpilot drive --worker`: waits for a coordinator, answers its hello and clock pings,
//! runs the share it is given at the time it is given, streams each completed second, and
//! sends its measurement at the end. A coordinator that goes away stops the run.

use std::io::BufReader;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::wire::{Msg, PROTOCOL, WireInterval, recv, send};
use crate::engine::{RunControl, run};
use crate::error::DriveError;

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

/// Serves coordinators one after the other, forever; each session's end or error is passed to
/// `log`.
pub fn serve(listener: &TcpListener, cfg: &WorkerConfig, log: &dyn Fn(&str)) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string());
        match serve_session(stream, cfg) {
            Ok(SessionEnd::Ran) => log(&format!("coordinator {peer}: share run and reported")),
            Ok(SessionEnd::HungUp) => log(&format!("coordinator {peer}: hung up before a run")),
            Err(e) => log(&format!("coordinator {peer}: {e}")),
        }
    }
}

/// Serves one coordinator on `stream`.
pub fn serve_session(stream: TcpStream, cfg: &WorkerConfig) -> Result<SessionEnd, DriveError> {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "the coordinator".to_string(), |a| a.to_string());
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| wire_err(&peer, e))?);
    let writer = Arc::new(Mutex::new(stream));
    let say = |msg: &Msg| -> Result<(), DriveError> {
        let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
        send(&mut *w, msg).map_err(|e| wire_err(&peer, e))
    };
    match recv(&mut reader).map_err(|e| wire_err(&peer, e))? {
        Some(Msg::Hello { version, protocol }) => {
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
        }
        Some(other) => return Err(wire_err(&peer, format!("expected hello, got {other:?}"))),
        None => return Ok(SessionEnd::HungUp),
    }
    let (spec, start_at_ms) = loop {
        match recv(&mut reader).map_err(|e| wire_err(&peer, e))? {
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
                match recv(&mut reader) {
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
                let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
                if send(&mut *w, &msg).is_err() {
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
    let _ = writer.lock().map(|w| w.shutdown(std::net::Shutdown::Write));
    let _ = watcher.join();
    if let Some(ca) = &drive_spec.tls.ca_file {
        let _ = std::fs::remove_file(ca);
    }
    end
}
