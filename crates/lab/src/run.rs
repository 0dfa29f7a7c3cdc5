//! Commands an experiment runs to completion (initdb, a load tool, `perfpilot drive`): their
//! output captured in files, a time limit, cut short once they have run long enough, and given
//! up (with what they started below them) when the caller is asked to stop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::process;

/// Why a command did not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Its output file could not be made.
    #[error("cannot create {}: {source}", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It could not be started.
    #[error("cannot start {what} ({program}): {source}; is it installed?")]
    Spawn {
        /// What it is.
        what: String,
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting on it failed.
    #[error("waiting for {what}: {source}")]
    Wait {
        /// What it is.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// It exited unsuccessfully.
    #[error("{what} failed ({status}): {tail}")]
    Failed {
        /// What it is.
        what: String,
        /// How it exited.
        status: ExitStatus,
        /// The last lines of its stderr (or of its stdout when stderr was empty).
        tail: String,
    },
    /// It ran past its limit and was stopped.
    #[error("{what} ran past its limit of {}: stopped", perfpilot_units::duration(*limit))]
    Limit {
        /// What it is.
        what: String,
        /// The limit.
        limit: Duration,
    },
    /// The caller asked it to stop (Ctrl-C).
    #[error("interrupted: {what} was stopped")]
    Interrupted {
        /// What it is.
        what: String,
    },
    /// It was cut short though it could not be.
    #[error("{what} was cut short without being asked to")]
    Cut {
        /// What it is.
        what: String,
    },
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Output {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
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

/// Runs `cmd` to completion (output captured in `dir`), killing it when `give_up` says so or
/// after `limit`; fails with its stderr when it exits non-zero.
pub fn run(
    what: &str,
    cmd: Command,
    dir: &Path,
    limit: Duration,
    give_up: &dyn Fn() -> bool,
) -> Result<Output, RunError> {
    run_while(what, cmd, dir, limit, &Cut::never(), give_up)?.ok_or_else(|| RunError::Cut {
        what: what.to_string(),
    })
}

/// Runs a short command (`chown`, `initdb`) to completion in the temporary directory, with an
/// hour's limit; fails with its stderr when it exits non-zero.
pub fn quick(what: &str, cmd: Command) -> Result<Output, RunError> {
    run(
        what,
        cmd,
        &std::env::temp_dir(),
        Duration::from_secs(3600),
        &|| false,
    )
}

/// As [`run`], but stopped (and `Ok(None)` returned) once `cut` says it has run long enough.
pub fn run_while(
    what: &str,
    mut cmd: Command,
    dir: &Path,
    limit: Duration,
    cut: &Cut,
    give_up: &dyn Fn() -> bool,
) -> Result<Option<Output>, RunError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    // Unique per call: commands of one process may run side by side (tests, threads).
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tag = format!(
        "{}-{}-{}",
        what.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let (out_p, err_p) = (
        dir.join(format!("{tag}.out")),
        dir.join(format!("{tag}.err")),
    );
    let create = |p: &Path| {
        std::fs::File::create(p).map_err(|source| RunError::Output {
            path: p.to_path_buf(),
            source,
        })
    };
    let (out_f, err_f) = (create(&out_p)?, create(&err_p)?);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out_f)
        .stderr(err_f)
        .spawn()
        .map_err(|source| RunError::Spawn {
            what: what.to_string(),
            program: cmd.get_program().to_string_lossy().into_owned(),
            source,
        })?;
    let remove = || {
        let _ = std::fs::remove_file(&out_p);
        let _ = std::fs::remove_file(&err_p);
    };
    let start = Instant::now();
    let end = start + limit.min(Duration::from_secs(u32::MAX.into()));
    let mut asked = start;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(source) => {
                end_tree(&mut child);
                remove();
                return Err(RunError::Wait {
                    what: what.to_string(),
                    source,
                });
            }
        }
        if start.elapsed() >= cut.after && asked.elapsed() >= cut.every {
            asked = Instant::now();
            if !(cut.more)() {
                end_tree(&mut child);
                remove();
                return Ok(None);
            }
        }
        let stopped = give_up();
        if stopped || Instant::now() > end {
            end_tree(&mut child);
            remove();
            let what = what.to_string();
            return Err(if stopped {
                RunError::Interrupted { what }
            } else {
                RunError::Limit { what, limit }
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out_p).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_p).unwrap_or_default();
    remove();
    if !status.success() {
        let said = if stderr.trim().is_empty() {
            &stdout
        } else {
            &stderr
        };
        return Err(RunError::Failed {
            what: what.to_string(),
            status,
            tail: last_lines(said, 10),
        });
    }
    Ok(Some(Output { stdout, stderr }))
}

/// Stops a child and its descendants (a load tool under `perfpilot drive`): SIGTERM to the
/// tree, then SIGKILL to the child.
fn end_tree(child: &mut Child) {
    for d in process::descendants(child.id()) {
        let _ = perfpilot_sys::signal::terminate(d);
    }
    let _ = perfpilot_sys::signal::terminate(child.id());
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
        let dir = tempfile::tempdir().expect("temp dir");
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
        let limit = Duration::from_secs(60);
        let out = run_while("sleep", sleep(), dir.path(), limit, &cut, &|| false).expect("run");
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
        assert!(run("true", quick, dir.path(), limit, &|| false).is_ok());
        let mut short = Command::new("true");
        short.arg("x");
        let never = || panic!("not asked before `after`");
        let late = Cut {
            after: Duration::from_secs(60),
            every: Duration::ZERO,
            more: &never,
        };
        let out = run_while("true", short, dir.path(), limit, &late, &|| false).expect("run");
        assert!(out.is_some());
        // Given up: interrupted, and a failure quotes its stderr.
        let e = run("sleep", sleep(), dir.path(), limit, &|| true).expect_err("given up");
        assert!(matches!(e, RunError::Interrupted { .. }), "{e}");
        let mut fails = Command::new("sh");
        fails.args(["-c", "echo out; echo broken >&2; exit 4"]);
        let e = run("sh", fails, dir.path(), limit, &|| false).expect_err("fails");
        assert!(e.to_string().ends_with("broken"), "{e}");
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}
