//! `perfpilot study worker`: serves study coordinators one after the other. For each it
//! answers the hello (refusing another version, both named), parses the study it is sent and
//! checks it on this host (the preflight of `study validate`, relative paths from the
//! coordinator's working directory), then runs the trials it is asked for on this host's
//! topology, with knobs journaled next to `--store` as the local runner does, saying `alive`
//! every second while one runs. A coordinator that goes away (or says stop) ends the trial
//! early; the trial's guards restore every knob and stop every instance, and the worker
//! listens again.
//!
//! Each connection is admitted on a thread of its own (mutual TLS checked, or plain TCP:
//! [`Admission`]) and must say hello within [`OPENING`]; a message over the framing's limit,
//! another version or a refused certificate ends that connection alone, with a line in the
//! log. `--stdio` ([`serve_stdio`]) serves the one coordinator that started it over `ssh`.

use std::net::{Shutdown, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use perfpilot_drive::coord::{Admission, Link, LinkReader, LinkWriter, Opening, refused_crowd};
use perfpilot_observe::Topology;
use perfpilot_store::TrialStatus;
use perfpilot_sys::Fs;

use super::wire::{PROTOCOL, Reply, Request};
use crate::deploy;
use crate::error::StudyError;
use crate::spec::{Study, preflight};
use crate::trial::{TrialContext, TrialOutcome, run_trial};

/// How long a coordinator has for its hello, and then for its study.
pub const OPENING: Duration = Duration::from_secs(10);

/// Who a worker is and where it runs trials.
pub struct WorkerConfig {
    /// perfpilot's version, compared with the coordinator's.
    pub version: String,
    /// This host's topology (layouts are planned on it).
    pub topology: Topology,
    /// Where knob paths are rooted (the live system).
    pub knob_fs: Fs,
    /// The knob journal: undo records written before each change, replayed at start.
    pub knob_journal: PathBuf,
    /// Set (by Ctrl-C) to end the trial running now, restore, and stop serving.
    pub quit: Arc<AtomicBool>,
    /// Set while a trial runs (a Ctrl-C handler may exit at once otherwise).
    pub busy: Arc<AtomicBool>,
}

fn wire_err(peer: &str, reason: impl std::fmt::Display) -> StudyError {
    StudyError::Coordinator {
        peer: peer.to_string(),
        reason: reason.to_string(),
    }
}

/// Serves coordinators one after the other until `cfg.quit` is set; knobs a killed worker
/// left changed are restored first. A coordinator that comes while another is served is
/// refused at once, naming the other. Each admission, refusal and session's end (or error)
/// goes to `log`.
pub fn serve(
    listener: &TcpListener,
    admission: &Admission,
    cfg: &WorkerConfig,
    log: fn(&str),
) -> Result<(), StudyError> {
    recover(cfg, log)?;
    let incoming = listener
        .try_clone()
        .map_err(|e| StudyError::Failed(format!("cannot accept coordinators: {e}")))?;
    // The coordinator being served, if one is.
    let serving: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let (tx, sessions) = std::sync::mpsc::channel::<Greeted>();
    let claim = serving.clone();
    let admission = admission.clone();
    // Accepts for as long as the process lives; each connection is admitted and greeted on a
    // thread of its own and claims the worker only with a hello, so that a port check, a
    // stray connection or a client that says nothing does not make the coordinator that
    // comes next find it busy.
    std::thread::spawn(move || {
        let opening = Opening::default();
        for stream in incoming.incoming() {
            let Ok(stream) = stream else { continue };
            let Some(slot) = opening.enter() else {
                log(&refused_crowd(&stream));
                continue;
            };
            let (serving, tx, admission) = (serving.clone(), tx.clone(), admission.clone());
            std::thread::spawn(move || {
                let link = match admission.admit(stream) {
                    Ok(l) => l,
                    Err(why) => return log(&format!("coordinator {why}")),
                };
                let peer = link.peer.clone();
                let g = match greet(link) {
                    Ok(g) => g,
                    Err(why) => return log(&format!("coordinator {peer}: {why}")),
                };
                drop(slot);
                let mut now = serving.lock().unwrap_or_else(|p| p.into_inner());
                match now.as_ref() {
                    Some(other) => {
                        let other = other.clone();
                        drop(now);
                        log(&format!(
                            "coordinator {}: refused, busy with {other}",
                            g.peer
                        ));
                        refuse_busy(g, &other);
                    }
                    None => {
                        *now = Some(g.peer.clone());
                        drop(now);
                        // An error: the worker has stopped serving; the connection just closes.
                        let _ = tx.send(g);
                    }
                }
            });
        }
    });
    for g in sessions {
        let peer = g.peer.clone();
        end_session(&peer, serve_session(g, cfg, &log), log);
        *claim.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if cfg.quit.load(Ordering::SeqCst) {
            break;
        }
    }
    Ok(())
}

/// Serves the one coordinator on this process's stdin and stdout (started by `ssh … perfpilot
/// study worker --stdio`); `peer` says who (the SSH client's address).
pub fn serve_stdio(cfg: &WorkerConfig, peer: String, log: fn(&str)) -> Result<(), StudyError> {
    recover(cfg, log)?;
    match greet(Link::stdio(peer.clone())) {
        Ok(g) => {
            log(&format!("coordinator {peer}: admitted"));
            end_session(&peer, serve_session(g, cfg, &log), log);
            Ok(())
        }
        Err(why) => Err(wire_err(&peer, why)),
    }
}

/// Restores the knobs a killed worker left changed.
fn recover(cfg: &WorkerConfig, log: fn(&str)) -> Result<(), StudyError> {
    for line in deploy::recover_knobs(&cfg.knob_fs, &cfg.knob_journal)? {
        log(&line);
    }
    Ok(())
}

fn end_session(peer: &str, end: Result<usize, StudyError>, log: fn(&str)) {
    match end {
        Ok(n) => log(&format!(
            "coordinator {peer}: {n} trial(s) run; session ended"
        )),
        Err(e) => log(&e.to_string()),
    }
}

/// A connection that said hello: what a session starts from.
struct Greeted {
    /// Who the coordinator is (its address; its certificate's subject over TLS).
    peer: String,
    writer: LinkWriter,
    /// The connection's reader, past the hello (it may hold what came after it).
    reader: LinkReader,
    /// The hello's perfpilot version and wire protocol.
    version: String,
    protocol: u32,
}

/// Why a connection was not admitted as a coordinator.
#[derive(Debug, thiserror::Error)]
enum GreetError {
    /// It sent something other than a hello first.
    #[error("refused: it did not open with a hello")]
    NotHello,
    /// It closed before saying anything.
    #[error("closed before its hello")]
    Closed,
    /// It said nothing within [`OPENING`].
    #[error("refused: no hello within {}", perfpilot_units::clock(OPENING))]
    Silent,
    /// Its first message could not be read.
    #[error("refused: {0}")]
    Read(#[source] std::io::Error),
}

/// Reads the hello a coordinator opens with (within [`OPENING`]); `Err` says why not.
fn greet(link: Link) -> Result<Greeted, GreetError> {
    let Link {
        peer,
        mut reader,
        writer,
    } = link;
    reader.set_deadline(Some(OPENING));
    let hello = reader.recv::<Request>();
    reader.set_deadline(None);
    match hello {
        Ok(Some(Request::Hello { version, protocol })) => Ok(Greeted {
            peer,
            writer,
            reader,
            version,
            protocol,
        }),
        Ok(Some(_)) => Err(GreetError::NotHello),
        Ok(None) => Err(GreetError::Closed),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(GreetError::Silent),
        Err(e) => Err(GreetError::Read(e)),
    }
}

/// Refuses the coordinator of `g`, this worker being busy with `other`, then the connection
/// closes (the coordinator's close, not ours, ends it, so the refusal is read, not reset).
fn refuse_busy(g: Greeted, other: &str) {
    let Greeted {
        writer, mut reader, ..
    } = g;
    let reason = format!(
        "this worker runs the trials of coordinator {other}; a worker serves one coordinator at a time: start another worker (another port) for this run"
    );
    let _ = writer.send(&Reply::Refused { reason });
    writer.shutdown(Shutdown::Write);
    reader.set_timeout(Some(Duration::from_secs(2)));
    while let Ok(Some(_)) = reader.recv::<serde_json::Value>() {}
}

/// Serves the coordinator that said hello on `g`; returns the trials run.
fn serve_session(g: Greeted, cfg: &WorkerConfig, log: &dyn Fn(&str)) -> Result<usize, StudyError> {
    let Greeted {
        peer,
        writer,
        reader,
        version,
        protocol,
    } = g;
    let stop = Arc::new(AtomicBool::new(false));
    let requests = read_requests(reader, writer.clone(), stop.clone());
    let session = Session {
        out: Replies { peer, writer },
        requests,
        stop,
    };
    let Some((study, workdir)) = session.open(cfg, &version, protocol)? else {
        return Ok(0);
    };
    log(&format!(
        "coordinator {}: study {} ({}), relative paths from {}",
        session.out.peer,
        study.name,
        study.path.display(),
        workdir.display()
    ));
    session.trials(cfg, &study, log)
}

/// Reads the coordinator's requests on a thread of their own: a stop, or the coordinator
/// gone, ends the trial that runs meanwhile (through `stop`). A message this worker cannot
/// read (too long, not of this protocol) is refused in words and ends the session.
fn read_requests(
    mut reader: LinkReader,
    writer: LinkWriter,
    stop: Arc<AtomicBool>,
) -> Receiver<std::io::Result<Request>> {
    let (tx, requests) = std::sync::mpsc::channel::<std::io::Result<Request>>();
    std::thread::spawn(move || {
        loop {
            match reader.recv::<Request>() {
                Ok(Some(Request::Stop)) | Ok(None) => break,
                Ok(Some(r)) => {
                    if tx.send(Ok(r)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = writer.send(&Reply::Refused {
                        reason: refusal(&e),
                    });
                    let _ = tx.send(Err(e));
                    break;
                }
            }
        }
        stop.store(true, Ordering::SeqCst);
    });
    requests
}

/// Where this worker's replies go.
struct Replies {
    /// The coordinator, for errors.
    peer: String,
    writer: LinkWriter,
}

impl Replies {
    fn say(&self, r: &Reply) -> Result<(), StudyError> {
        self.writer.send(r).map_err(|e| wire_err(&self.peer, e))
    }
}

/// A coordinator's session: its replies, its requests (read by [`read_requests`]) and the
/// flag that ends a running trial.
struct Session {
    out: Replies,
    requests: Receiver<std::io::Result<Request>>,
    stop: Arc<AtomicBool>,
}

impl Session {
    /// The request that opens a step of the session (`what`, for the error), within
    /// [`OPENING`]; `None` when the coordinator left.
    fn opening(&self, what: &str) -> Result<Option<Request>, StudyError> {
        let peer = &self.out.peer;
        match self.requests.recv_timeout(OPENING) {
            Ok(Ok(r)) => Ok(Some(r)),
            Ok(Err(e)) => Err(wire_err(peer, refusal(&e))),
            Err(RecvTimeoutError::Disconnected) => Ok(None),
            Err(RecvTimeoutError::Timeout) => Err(wire_err(
                peer,
                format!("no {what} within {}", perfpilot_units::clock(OPENING)),
            )),
        }
    }

    /// Answers the hello (the coordinator's `version` and `protocol` must be this worker's),
    /// then checks the study it sends; the study and the directory its relative paths start
    /// from, or `None` when the coordinator left first.
    fn open(
        &self,
        cfg: &WorkerConfig,
        version: &str,
        protocol: u32,
    ) -> Result<Option<(Study, PathBuf)>, StudyError> {
        let peer = &self.out.peer;
        if version != cfg.version || protocol != PROTOCOL {
            let reason = format!(
                "this worker runs perfpilot {} (protocol {PROTOCOL}), the coordinator perfpilot {version} (protocol {protocol}): run the same version on both",
                cfg.version
            );
            self.out.say(&Reply::Refused {
                reason: reason.clone(),
            })?;
            return Err(wire_err(peer, reason));
        }
        self.out.say(&Reply::Hello {
            version: cfg.version.clone(),
            protocol: PROTOCOL,
        })?;
        let (study, workdir) = match self.opening("study")? {
            Some(Request::Study {
                source,
                path,
                workdir,
            }) => match check(&source, Path::new(&path), Path::new(&workdir)) {
                Ok(s) => (s, PathBuf::from(workdir)),
                Err(errors) => {
                    self.out.say(&Reply::Unready {
                        errors: errors.clone(),
                    })?;
                    return Err(wire_err(
                        peer,
                        format!("the study cannot run here: {}", errors.join("; ")),
                    ));
                }
            },
            Some(other) => return Err(wire_err(peer, format!("expected a study, got {other:?}"))),
            None => return Ok(None),
        };
        self.out.say(&Reply::Ready {
            topology: Box::new(cfg.topology.clone()),
            facts: perfpilot_lab::MachineFacts::with_topology(&Fs::live(), &cfg.topology).to_json(),
        })?;
        Ok(Some((study, workdir)))
    }

    /// Runs the trials the coordinator asks for until it leaves or says stop; returns how
    /// many ran.
    fn trials(
        &self,
        cfg: &WorkerConfig,
        study: &Study,
        log: &dyn Fn(&str),
    ) -> Result<usize, StudyError> {
        let peer = &self.out.peer;
        let stop: &AtomicBool = &self.stop;
        let ctx = TrialContext {
            study,
            topo: &cfg.topology,
            knob_fs: &cfg.knob_fs,
            knob_journal: Some(&cfg.knob_journal),
            stop,
        };
        let out = &self.out;
        let say = |r: &Reply| out.say(r);
        let mut trials = 0;
        while let Some(req) = next(&self.requests, stop) {
            let Request::Trial {
                phase,
                round,
                config,
            } = req
            else {
                return Err(wire_err(peer, format!("expected a trial, got {req:?}")));
            };
            let outcome = if study.holds(&config) {
                cfg.busy.store(true, Ordering::SeqCst);
                let o = while_alive(&say, stop, &cfg.quit, || run_trial(&ctx, &config, None));
                cfg.busy.store(false, Ordering::SeqCst);
                o
            } else {
                TrialOutcome {
                    status: TrialStatus::Failed,
                    reason: format!("{} is not a configuration of this study", config.key()),
                    value: None,
                    measurement: None,
                    detail: Default::default(),
                }
            };
            trials += 1;
            if stop.load(Ordering::SeqCst) {
                // A trial cut short is no measurement: the coordinator runs the round elsewhere
                // (or, having said stop itself, drops it).
                let reason = match cfg.quit.load(Ordering::SeqCst) {
                    true => {
                        "the worker was stopped (Ctrl-C or SIGTERM) during a trial; it restored the trial's knobs"
                    }
                    false => "the trial was stopped",
                };
                log(&format!(
                    "coordinator {peer}: {phase} round {round} {}: stopped",
                    config.key()
                ));
                let _ = say(&Reply::Refused {
                    reason: reason.into(),
                });
                break;
            }
            log(&format!(
                "coordinator {peer}: {phase} round {round} {}: {}{}",
                config.key(),
                outcome.status,
                outcome
                    .value
                    .map_or(String::new(), |v| format!(" ({v:.4})"))
            ));
            say(&Reply::Outcome {
                outcome: Box::new(outcome),
            })?;
        }
        Ok(trials)
    }
}

/// The next request, or `None` when the coordinator is gone, said stop, or sent what this
/// worker refused.
fn next(requests: &Receiver<std::io::Result<Request>>, stop: &AtomicBool) -> Option<Request> {
    loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        match requests.recv_timeout(Duration::from_millis(500)) {
            Ok(Ok(r)) => return Some(r),
            Ok(Err(_)) => return None,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// What this worker tells a coordinator whose message it cannot read.
fn refusal(e: &std::io::Error) -> String {
    format!("this worker refused the coordinator's message: {e}")
}

/// Runs `f` while saying `alive` every second; a `quit` (Ctrl-C) stops the trial.
fn while_alive<T>(
    say: &(dyn Fn(&Reply) -> Result<(), StudyError> + Sync),
    stop: &AtomicBool,
    quit: &AtomicBool,
    f: impl FnOnce() -> T,
) -> T {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                for _ in 0..10 {
                    std::thread::sleep(Duration::from_millis(100));
                    if done.load(Ordering::SeqCst) {
                        return;
                    }
                }
                if quit.load(Ordering::SeqCst) {
                    stop.store(true, Ordering::SeqCst);
                }
                // A coordinator gone shows in the reader; the trial ends through `stop`.
                let _ = say(&Reply::Alive);
            }
        });
        let out = f();
        done.store(true, Ordering::SeqCst);
        out
    })
}

/// The study parsed and checked on this host, or the errors found (as `validate` words
/// them). Relative paths resolve from `workdir`, which becomes this process's directory.
fn check(source: &str, path: &Path, workdir: &Path) -> Result<Study, Vec<String>> {
    if let Err(e) = std::env::set_current_dir(workdir) {
        return Err(vec![format!(
            "the coordinator's directory {} is not usable here: {e}; a host needs the study's files at the same paths",
            workdir.display()
        )]);
    }
    let study = Study::parse(source, path).map_err(|e| vec![e.to_string()])?;
    let errors: Vec<String> = preflight(&study, workdir)
        .iter()
        .filter(|f| f.is_error())
        .map(ToString::to_string)
        .collect();
    if errors.is_empty() {
        Ok(study)
    } else {
        Err(errors)
    }
}
