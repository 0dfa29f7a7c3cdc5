//! Processes the harness starts (over `perfpilot_lab`'s tools, readiness waits and stops):
//! requiring tools, starting them as a given user with their output
//! in log files, waiting for ports, running commands that Ctrl-C can cut short, and a guard
//! that stops each one (SIGTERM, then SIGKILL) when dropped.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use perfpilot_lab::process::{self, NotReady, StopSignal};

/// Set by the Ctrl-C/SIGTERM handler: every wait checks it and gives up.
static STOP: AtomicBool = AtomicBool::new(false);

/// Asks every wait to give up (the Ctrl-C handler calls it).
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// Whether a stop was requested.
pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Fails when a stop was requested, so `?` unwinds the run (and its guards restore).
pub fn check_stop() -> Result<()> {
    if stopping() {
        bail!("interrupted: stopping (every setting is restored, every process stopped)");
    }
    Ok(())
}

/// Sleeps `d`, waking early (with an error) when a stop is requested.
pub fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        check_stop()?;
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
    }
    check_stop()
}

/// The path of `tool`, or an error naming the Debian package that has it.
pub fn require_tool(tool: &str, package: &str) -> Result<PathBuf> {
    perfpilot_lab::tool::find(tool).with_context(|| {
        format!(
            "{tool} is not installed: install the Debian package {package} (or run with --install)"
        )
    })
}

/// The uid and gid of `user` from /etc/passwd.
pub fn user_ids(user: &str) -> Result<(u32, u32)> {
    perfpilot_lab::user::ids(user)
        .with_context(|| format!("no user {user:?} in /etc/passwd (its Debian package creates it)"))
}

/// Makes `cmd` run as `user` (when given).
pub fn as_user(cmd: &mut Command, user: Option<&str>) -> Result<()> {
    if let Some(u) = user {
        let (uid, gid) = user_ids(u)?;
        cmd.uid(uid).gid(gid);
    }
    Ok(())
}

/// Hands `path` (recursively) to `user`, so a server started as that user can write there.
pub fn chown(path: &Path, user: &str) -> Result<()> {
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{user}:"))
        .arg(path)
        .status()
        .context("running chown")?;
    if !status.success() {
        bail!("chown -R {user}: {} failed ({status})", path.display());
    }
    Ok(())
}

/// A process the harness started, stopped when dropped.
pub struct Proc {
    /// What it is, for messages.
    pub name: String,
    child: Option<Child>,
    /// Its standard output and error (one file).
    pub log: PathBuf,
}

impl Proc {
    /// Starts `cmd` with its output appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Proc> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening the log {}", log.display()))?;
        let err = out.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("cannot start {name} ({cmd:?})"))?;
        Ok(Proc {
            name: name.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
        })
    }

    /// Its process id (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// Fails (with the end of its log) if it has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            bail!(
                "{} exited ({status}); the end of its log {}:\n{}",
                self.name,
                self.log.display(),
                perfpilot_lab::log::tail(&self.log, 15).join("\n")
            );
        }
        Ok(())
    }

    /// Waits until 127.0.0.1:`port` accepts connections (at most `limit`).
    pub fn wait_port(&mut self, port: u16, limit: Duration) -> Result<()> {
        let Some(child) = self.child.as_mut() else {
            bail!("{} was stopped before it listened", self.name);
        };
        let ready = || process::accepts("127.0.0.1", port);
        match process::wait_ready(child, limit, ready, &stopping) {
            Ok(()) => Ok(()),
            Err(NotReady::Stopped) => check_stop(),
            Err(NotReady::Exited(_)) => self.check_alive(),
            Err(NotReady::Late) => bail!(
                "{} did not listen on 127.0.0.1:{port} within {}; see {}",
                self.name,
                perfpilot_units::duration(limit),
                self.log.display()
            ),
        }
    }

    /// Waits for it to exit by itself (at most `limit`), then stops it.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(s)) = c.try_wait()
            {
                self.child = None;
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop();
        None
    }

    /// SIGTERM, up to 20 s for a clean exit, then SIGKILL; reaped either way.
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        // Taken first: once it is killed, its children belong to init.
        let below = process::descendants(c.id());
        if !process::stop(&mut c, StopSignal::Terminate, Duration::from_secs(20)) {
            eprintln!("proof: {} ignored SIGTERM for 20 s: killed it", self.name);
            for d in below {
                let _ = perfpilot_sys::signal::terminate(d);
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// SIGTERM to `pid`'s descendants (a load tool under `perfpilot drive`), then to `pid`.
fn terminate_tree(pid: u32) {
    for d in process::descendants(pid) {
        let _ = perfpilot_sys::signal::terminate(d);
    }
    let _ = perfpilot_sys::signal::terminate(pid);
}

/// What a finished command printed.
pub struct Output {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `cmd` to completion (output captured in `dir`), killing it when a stop is requested or
/// after `limit`; fails with its stderr when it exits non-zero.
pub fn run(what: &str, cmd: Command, dir: &Path, limit: Duration) -> Result<Output> {
    run_while(what, cmd, dir, limit, &Cut::never())?
        .with_context(|| format!("{what} was cut short without being asked to"))
}

/// When a command run by [`run_while`] may be cut short: once `after` has passed, as soon as
/// `more` (asked every `every`) says no more is needed.
pub struct Cut<'a> {
    /// The least time it runs.
    pub after: Duration,
    /// How often `more` is asked.
    pub every: Duration,
    /// Whether it should run on.
    pub more: &'a dyn Fn() -> bool,
}

impl Cut<'_> {
    /// Never cut short.
    pub fn never() -> Cut<'static> {
        Cut {
            after: Duration::MAX,
            every: Duration::MAX,
            more: &|| true,
        }
    }
}

/// As [`run`], but stopped (and `Ok(None)` returned) once `cut` says it has run long enough.
pub fn run_while(
    what: &str,
    mut cmd: Command,
    dir: &Path,
    limit: Duration,
    cut: &Cut,
) -> Result<Option<Output>> {
    let tag = format!(
        "{}-{}",
        what.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
        std::process::id()
    );
    let (out_p, err_p) = (
        dir.join(format!("{tag}.out")),
        dir.join(format!("{tag}.err")),
    );
    let out_f =
        std::fs::File::create(&out_p).with_context(|| format!("creating {}", out_p.display()))?;
    let err_f = std::fs::File::create(&err_p)?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out_f)
        .stderr(err_f)
        .spawn()
        .with_context(|| format!("cannot start {what} ({cmd:?}): is it installed?"))?;
    let start = Instant::now();
    let end = start + limit;
    let mut asked = start;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if start.elapsed() >= cut.after && asked.elapsed() >= cut.every {
            asked = Instant::now();
            if !(cut.more)() {
                end_tree(&mut child);
                let _ = std::fs::remove_file(&out_p);
                let _ = std::fs::remove_file(&err_p);
                return Ok(None);
            }
        }
        if stopping() || Instant::now() > end {
            end_tree(&mut child);
            check_stop()?;
            bail!(
                "{what} ran past its limit of {}: stopped",
                perfpilot_units::duration(limit)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out_p).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_p).unwrap_or_default();
    let _ = std::fs::remove_file(&out_p);
    let _ = std::fs::remove_file(&err_p);
    if !status.success() {
        bail!(
            "{what} failed ({status}): {}",
            last_lines(
                if stderr.trim().is_empty() {
                    &stdout
                } else {
                    &stderr
                },
                10
            )
        );
    }
    Ok(Some(Output { stdout, stderr }))
}

/// Stops a child and its descendants: SIGTERM to the tree, then SIGKILL to the child.
fn end_tree(child: &mut Child) {
    terminate_tree(child.id());
    std::thread::sleep(Duration::from_millis(500));
    let _ = child.kill();
    let _ = child.wait();
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_cut_short_once_its_least_time_passed_and_it_is_no_longer_wanted() {
        let dir = tempfile::tempdir().unwrap();
        let sleep = || {
            let mut c = Command::new("sleep");
            c.arg("30");
            c
        };
        let asked = std::cell::Cell::new(0);
        let more = || {
            asked.set(asked.get() + 1);
            asked.get() < 3
        };
        let cut = Cut {
            after: Duration::from_millis(300),
            every: Duration::from_millis(100),
            more: &more,
        };
        let t = Instant::now();
        let out = run_while("sleep", sleep(), dir.path(), Duration::from_secs(60), &cut).unwrap();
        assert!(out.is_none(), "cut short, no output");
        assert_eq!(asked.get(), 3, "asked until it said no");
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(20),
            "{took:?}"
        );
        // Never cut: runs to its end; a command that ends first is not asked at all.
        let mut quick = Command::new("true");
        quick.arg("x");
        assert!(run("true", quick, dir.path(), Duration::from_secs(60)).is_ok());
        let mut short = Command::new("true");
        short.arg("x");
        let never = || panic!("not asked before `after`");
        let late = Cut {
            after: Duration::from_secs(60),
            every: Duration::ZERO,
            more: &never,
        };
        let out = run_while("true", short, dir.path(), Duration::from_secs(60), &late).unwrap();
        assert!(out.is_some());
    }
}
