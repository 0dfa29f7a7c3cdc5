//! A study worker seen from the coordinator: connect (over SSH, mutual TLS or plain TCP, by
//! the form of its address: `perfpilot_drive::coord::dial`), hello (versions compared), the
//! study sent and checked on the worker's host, then one trial at a time. A worker that closes
//! the connection or stays silent for [`HOST_SILENCE`] during a trial is lost.

use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use perfpilot_drive::coord::dial::closed_early;
use perfpilot_drive::coord::{Dialer, LinkWriter};
use perfpilot_observe::Topology;
use perfpilot_store::TrialPhase;

use super::HostLost;
use super::pool::Host;
use super::wire::{PROTOCOL, Reply, Request};
use crate::error::StudyError;
use crate::spec::{Config, Study};
use crate::trial::TrialOutcome;

/// A worker silent this long during a trial is lost (it says `alive` every second).
pub const HOST_SILENCE: Duration = Duration::from_secs(10);

/// The longest the worker may take to parse and check the study.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What the worker's connection brought: a reply, its end, or a read error.
type Incoming = std::io::Result<Option<Reply>>;

/// What the coordinator's host runs on a worker's host over SSH.
const WORKER_ARGS: [&str; 3] = ["study", "worker", "--stdio"];

/// The connection to a worker.
struct Link {
    addr: String,
    writer: LinkWriter,
    replies: Receiver<Incoming>,
}

/// A connected study worker.
pub(crate) struct RemoteHost {
    link: Link,
    /// The worker's topology.
    pub topology: Topology,
    /// The worker's machine facts (JSON, as stored with a run).
    pub facts: String,
}

fn host_err(addr: &str, reason: impl std::fmt::Display) -> StudyError {
    StudyError::Host {
        addr: addr.to_string(),
        reason: reason.to_string(),
    }
}

impl RemoteHost {
    /// Connects to the worker at `addr`, compares versions (`version`: this perfpilot's) and
    /// has it check `study` (read relative to `workdir`) on its host.
    pub fn connect(
        addr: &str,
        dialer: &Dialer,
        version: &str,
        study: &Study,
        workdir: &std::path::Path,
    ) -> Result<RemoteHost, StudyError> {
        let link = dialer.dial(addr, &WORKER_ARGS).map_err(|why| {
            host_err(
                addr,
                format!("{why}; is `perfpilot study worker` listening there (or SSH reaching it)?"),
            )
        })?;
        let mut reader = link.reader;
        let writer = link.writer;
        // The replies on a thread of their own, so that a trial can wait with a deadline
        // and the coordinator can say Stop meanwhile.
        let (tx, replies) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            loop {
                let r: Incoming = reader.recv();
                let end = !matches!(r, Ok(Some(_)));
                if tx.send(r).is_err() || end {
                    break;
                }
            }
        });
        let h = Link {
            addr: addr.to_string(),
            writer,
            replies,
        };
        h.say(&Request::Hello {
            version: version.to_string(),
            protocol: PROTOCOL,
        })
        .map_err(|e| host_err(addr, e))?;
        // A worker serves one coordinator at a time: one busy with another answers late.
        let hello = h.next(
            READY_TIMEOUT,
            "to the hello: is the worker serving another coordinator?",
        );
        match hello.map_err(|e| host_err(addr, e))? {
            Reply::Hello {
                version: theirs,
                protocol,
            } => {
                if theirs != version || protocol != PROTOCOL {
                    return Err(host_err(
                        addr,
                        format!(
                            "the worker runs perfpilot {theirs} (protocol {protocol}), this coordinator perfpilot {version} (protocol {PROTOCOL}): run the same version on both"
                        ),
                    ));
                }
            }
            Reply::Refused { reason } => return Err(host_err(addr, reason)),
            other => return Err(host_err(addr, format!("expected hello, got {other:?}"))),
        }
        h.say(&Request::Study {
            source: study.source.clone(),
            path: study.path.display().to_string(),
            workdir: workdir.display().to_string(),
        })
        .map_err(|e| host_err(addr, e))?;
        match h
            .next(READY_TIMEOUT, "to the study: is its check slow there?")
            .map_err(|e| host_err(addr, e))?
        {
            Reply::Ready { topology, facts } => Ok(RemoteHost {
                link: h,
                topology: *topology,
                facts,
            }),
            Reply::Unready { errors } => Err(host_err(
                addr,
                format!(
                    "the study cannot run there: {}; a host needs the study's programs and files at the same paths as here (relative ones from {})",
                    errors.join("; "),
                    workdir.display()
                ),
            )),
            Reply::Refused { reason } => Err(host_err(addr, reason)),
            other => Err(host_err(addr, format!("expected ready, got {other:?}"))),
        }
    }
}

impl Link {
    fn say(&self, r: &Request) -> Result<(), HostLost> {
        self.writer
            .send(r)
            .map_err(|e| HostLost::Send(e.to_string()))
    }

    /// The next reply other than `alive`, within `within` (`late` ends the message when it
    /// does not come).
    fn next(&self, within: Duration, late: &str) -> Result<Reply, HostLost> {
        let until = Instant::now() + within;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.replies.recv_timeout(left) {
                Ok(Ok(Some(Reply::Alive))) => {}
                Ok(Ok(Some(r))) => return Ok(r),
                Ok(Ok(None)) | Err(RecvTimeoutError::Disconnected) => {
                    return Err(HostLost::Closed {
                        how: closed_early(self.writer.transport_said()),
                    });
                }
                Ok(Err(e)) => return Err(HostLost::Read(e.to_string())),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(HostLost::NoAnswer {
                        within,
                        late: late.to_string(),
                    });
                }
            }
        }
    }
}

impl Host for RemoteHost {
    fn name(&self) -> &str {
        &self.link.addr
    }

    fn trial(
        &mut self,
        phase: TrialPhase,
        round: usize,
        config: &Config,
        stop: &AtomicBool,
    ) -> Result<TrialOutcome, HostLost> {
        let link = &self.link;
        link.say(&Request::Trial {
            phase,
            round,
            config: config.clone(),
        })?;
        let mut heard = Instant::now();
        let mut stopped = false;
        loop {
            match link.replies.recv_timeout(Duration::from_millis(250)) {
                Ok(Ok(Some(Reply::Outcome { outcome }))) => return Ok(*outcome),
                Ok(Ok(Some(Reply::Alive))) => heard = Instant::now(),
                Ok(Ok(Some(Reply::Refused { reason }))) => return Err(HostLost::Refused(reason)),
                Ok(Ok(Some(other))) => return Err(HostLost::Unexpected(format!("{other:?}"))),
                Ok(Ok(None)) | Err(RecvTimeoutError::Disconnected) => {
                    return Err(HostLost::Closed {
                        how: "closed the connection".into(),
                    });
                }
                Ok(Err(e)) => return Err(HostLost::Read(e.to_string())),
                Err(RecvTimeoutError::Timeout) => {
                    if heard.elapsed() >= HOST_SILENCE {
                        return Err(HostLost::Silent(HOST_SILENCE));
                    }
                    if !stopped && stop.load(Ordering::SeqCst) {
                        // The worker ends the trial early, restores, and answers.
                        stopped = true;
                        link.say(&Request::Stop)?;
                    }
                }
            }
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // The worker sees the end of the session and listens again; the reader thread ends.
        self.writer.shutdown(Shutdown::Both);
    }
}
