//! Servers an experiment starts: one guard for a started server process ([`Server`]: its log,
//! readiness waits that give up on a dead process, the end of its log in errors, a stop on
//! drop), and one file per kind for how each is started (PostgreSQL, Redis, memcached, nginx,
//! the JVM service, a command line of the user's). The study's, capacity's and the proof
//! harness's deployments and the test kit's throw-away servers all start theirs through these;
//! what load each applies stays theirs.

pub mod command;
pub mod jvm;
pub mod memcached;
pub mod nginx;
pub mod postgres;
pub mod redis;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::process::{self, NotReady, StopSignal};

/// Lines of a server's log quoted when it fails.
const TAIL_LINES: usize = 15;

/// Why a server could not be started or made ready.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A program it needs is not installed.
    #[error(transparent)]
    Missing(#[from] crate::tool::Missing),
    /// No free port.
    #[error(transparent)]
    Port(#[from] crate::port::PortError),
    /// A system user it runs as does not exist.
    #[error("no user {user:?} in /etc/passwd (its Debian package creates it)")]
    NoUser {
        /// The user.
        user: String,
    },
    /// Preparing its files failed.
    #[error("{what} {}: {source}", path.display())]
    Files {
        /// What was being done (`writing`, `creating`, `opening the log`).
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A command it needed (chown, initdb) failed.
    #[error(transparent)]
    Run(#[from] crate::run::RunError),
    /// The process could not be started.
    #[error("cannot start {name} ({program}): {source}")]
    Spawn {
        /// The server.
        name: String,
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// It exited.
    #[error("{name} exited ({status}){tail}")]
    Exited {
        /// The server.
        name: String,
        /// How.
        status: ExitStatus,
        /// The end of its log (`; the end of its log PATH: …`), or nothing.
        tail: String,
    },
    /// It was not ready in time.
    #[error("{name} was not {what} within {}{tail}", perfpilot_units::duration(*within))]
    Late {
        /// The server.
        name: String,
        /// What it was waited for (`listening on 127.0.0.1:5432`).
        what: String,
        /// The limit.
        within: Duration,
        /// The end of its log, or nothing.
        tail: String,
    },
    /// The caller gave up waiting (Ctrl-C).
    #[error("interrupted while waiting for {name}")]
    Interrupted {
        /// The server.
        name: String,
    },
}

/// A started server process, stopped when dropped (its stop signal, a grace period, then
/// SIGKILL; reaped either way), also when the caller panics.
#[derive(Debug)]
pub struct Server {
    name: String,
    child: Option<Child>,
    log: Option<PathBuf>,
    signal: StopSignal,
    grace: Duration,
}

impl Server {
    /// Starts `cmd` as the server `name`, its standard output and error appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Server, ServerError> {
        let files = |source| ServerError::Files {
            what: "opening the log",
            path: log.to_path_buf(),
            source,
        };
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(files)?;
        let err = out.try_clone().map_err(files)?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let mut s = Server::start(name, cmd)?;
        s.log = Some(log.to_path_buf());
        Ok(s)
    }

    /// Starts `cmd` as the server `name` with the output the caller gave it.
    pub fn start(name: &str, mut cmd: Command) -> Result<Server, ServerError> {
        let child = cmd.spawn().map_err(|source| ServerError::Spawn {
            name: name.to_string(),
            program: cmd.get_program().to_string_lossy().into_owned(),
            source,
        })?;
        Ok(Server::adopt(name, child))
    }

    /// Guards a server process the caller started.
    pub fn adopt(name: &str, child: Child) -> Server {
        Server {
            name: name.to_string(),
            child: Some(child),
            log: None,
            signal: StopSignal::Terminate,
            grace: Duration::from_secs(20),
        }
    }

    /// Stopped with `signal` and `grace` (SIGTERM and 20 s unless set).
    pub fn stopped_by(mut self, signal: StopSignal, grace: Duration) -> Server {
        self.signal = signal;
        self.grace = grace;
        self
    }

    /// What it is, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its log, when it was started with one.
    pub fn log(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// Its process id (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// How it exited, once it has (`None` while it runs or after [`Server::stop`]).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// `; the end of its log PATH: a | b | c`, or nothing without a log or lines in it.
    pub fn log_tail(&self) -> String {
        let Some(log) = &self.log else {
            return String::new();
        };
        let lines = crate::log::tail(log, TAIL_LINES);
        if lines.is_empty() {
            return String::new();
        }
        format!(
            "; the end of its log {}: {}",
            log.display(),
            lines.join(" | ")
        )
    }

    /// Fails, with the end of its log, when it has exited.
    pub fn check_alive(&mut self) -> Result<(), ServerError> {
        match self.exit_status() {
            Some(status) => Err(ServerError::Exited {
                name: self.name.clone(),
                status,
                tail: self.log_tail(),
            }),
            None => Ok(()),
        }
    }

    /// Waits until `ready` says yes (at most `limit`, `what` naming it in the error), giving up
    /// as soon as the server exits or `give_up` says so.
    pub fn wait_until(
        &mut self,
        what: &str,
        limit: Duration,
        ready: impl FnMut() -> bool,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), ServerError> {
        let Some(child) = self.child.as_mut() else {
            return Err(ServerError::Interrupted {
                name: self.name.clone(),
            });
        };
        match process::wait_ready(child, limit, ready, give_up) {
            Ok(()) => Ok(()),
            Err(NotReady::Stopped) => Err(ServerError::Interrupted {
                name: self.name.clone(),
            }),
            Err(NotReady::Exited(status)) => Err(ServerError::Exited {
                name: self.name.clone(),
                status,
                tail: self.log_tail(),
            }),
            Err(NotReady::Late) => Err(ServerError::Late {
                name: self.name.clone(),
                what: what.to_string(),
                within: limit,
                tail: self.log_tail(),
            }),
        }
    }

    /// Waits until `host:port` accepts TCP connections (at most `limit`).
    pub fn wait_port(
        &mut self,
        host: &str,
        port: u16,
        limit: Duration,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), ServerError> {
        let what = format!("listening on {host}:{port}");
        self.wait_until(&what, limit, || process::accepts(host, port), give_up)
    }

    /// Waits until `path` (its Unix socket) exists (at most `limit`).
    pub fn wait_path(
        &mut self,
        path: &Path,
        limit: Duration,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), ServerError> {
        let what = format!("ready with {}", path.display());
        self.wait_until(&what, limit, || path.exists(), give_up)
    }

    /// Waits for it to exit by itself (at most `limit`, after its own shutdown command), then
    /// stops it.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Some(s) = self.exit_status() {
                self.child = None;
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop();
        None
    }

    /// Its stop signal, up to its grace period for a clean exit, then SIGKILL (and SIGTERM to
    /// what it left running below it); reaped either way. Returns whether it exited within the
    /// grace period (or had already).
    pub fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return true;
        };
        if let Ok(Some(_)) = c.try_wait() {
            return true;
        }
        // Taken first: once it is killed, its children belong to init.
        let below = process::descendants(c.id());
        let clean = process::stop(&mut c, self.signal, self.grace);
        if !clean {
            eprintln!(
                "perfpilot: {} ignored its stop signal for {}: killed it",
                self.name,
                perfpilot_units::duration(self.grace)
            );
            for d in below {
                let _ = perfpilot_sys::signal::terminate(d);
            }
        }
        clean
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Makes `cmd` run as the system user `user` (its uid and gid from /etc/passwd); the process
/// is the program itself, so signals reach it.
pub fn as_user(cmd: &mut Command, user: &str) -> Result<(), ServerError> {
    use std::os::unix::process::CommandExt;
    let (uid, gid) = crate::user::ids(user).ok_or_else(|| ServerError::NoUser {
        user: user.to_string(),
    })?;
    cmd.uid(uid).gid(gid);
    Ok(())
}

/// Makes `cmd` run as `user` when this process is root (servers that refuse root).
pub fn as_user_if_root(cmd: &mut Command, user: &str) -> Result<(), ServerError> {
    if perfpilot_sys::user::is_root() {
        as_user(cmd, user)?;
    }
    Ok(())
}

/// Hands `path` (recursively) to `user`, so a server started as that user can write there.
pub fn chown(path: &Path, user: &str) -> Result<(), ServerError> {
    let mut c = Command::new("chown");
    c.arg("-R").arg(format!("{user}:")).arg(path);
    crate::run::quick(&format!("chown -R {user}: {}", path.display()), c)?;
    Ok(())
}

/// Writes `text` to `path`.
pub fn write(path: &Path, text: &str) -> Result<(), ServerError> {
    std::fs::write(path, text).map_err(|source| ServerError::Files {
        what: "writing",
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_exits_is_named_with_the_end_of_its_log_and_a_live_one_is_stopped_on_drop() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("log");
        let mut c = Command::new("sh");
        c.args(["-c", "echo starting; echo bad config >&2; exit 2"]);
        let mut s = Server::spawn("broken", c, &log).expect("spawn");
        let e = s
            .wait_port("127.0.0.1", 1, Duration::from_secs(30), &|| false)
            .expect_err("it exits");
        let text = e.to_string();
        assert!(text.starts_with("broken exited"), "{text}");
        assert!(text.contains("starting | bad config"), "{text}");

        let mut c = Command::new("sleep");
        c.arg("30");
        let mut s = Server::spawn("sleeper", c, &log)
            .expect("spawn")
            .stopped_by(StopSignal::Terminate, Duration::from_secs(5));
        let pid = s.pid();
        assert!(s.check_alive().is_ok());
        let late = s.wait_until("ready", Duration::from_millis(100), || false, &|| false);
        assert!(matches!(late, Err(ServerError::Late { .. })), "{late:?}");
        let asked = s.wait_until("ready", Duration::from_secs(30), || false, &|| true);
        assert!(
            matches!(asked, Err(ServerError::Interrupted { .. })),
            "{asked:?}"
        );
        drop(s);
        assert!(
            process::cpu_seconds(pid).is_none(),
            "stopped and reaped on drop"
        );
    }
}
