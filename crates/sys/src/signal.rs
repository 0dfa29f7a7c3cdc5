//! Signals: asking a child perfpilot started to stop, and how a closed output pipe ends a command.

use crate::{Error, Result};

/// Sends SIGTERM to process `pid`, asking it to exit cleanly.
///
/// `pid` must name one process: 0 and ids above `i32::MAX` are refused, because `kill(2)`
/// would read them as "my process group" or "every process I may signal". A process that
/// has already exited (and been reaped) gives an error that [`Error::is_vanished`] accepts.
pub fn terminate(pid: u32) -> Result<()> {
    send(pid, libc::SIGTERM)
}

/// Sends SIGINT to process `pid`: PostgreSQL's fast shutdown (SIGTERM waits for its clients).
/// The same rules for `pid` as [`terminate`].
pub fn interrupt(pid: u32) -> Result<()> {
    send(pid, libc::SIGINT)
}

fn send(pid: u32, signal: i32) -> Result<()> {
    let target = format!("pid {pid}");
    let raw = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| Error::Syscall {
            call: "kill",
            target: target.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a single process id (must be 1..=2147483647)",
            ),
        })?;
    // SAFETY: kill has no memory preconditions; raw > 0 addresses exactly one process.
    if unsafe { libc::kill(raw, signal) } != 0 {
        return Err(Error::Syscall {
            call: "kill",
            target,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Sends SIGKILL to every process of process group `pgid` (a group perfpilot made for a child it
/// started, with `CommandExt::process_group(0)`, so the group id is the child's pid). Ids that
/// would address more than one group (0, 1, above `i32::MAX`) are refused.
pub fn kill_group(pgid: u32) -> Result<()> {
    let target = format!("process group {pgid}");
    let raw = i32::try_from(pgid)
        .ok()
        .filter(|&p| p > 1)
        .ok_or_else(|| Error::Syscall {
            call: "killpg",
            target: target.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a single process group id (must be 2..=2147483647)",
            ),
        })?;
    // SAFETY: killpg has no memory preconditions; raw > 1 addresses exactly one group.
    if unsafe { libc::killpg(raw, libc::SIGKILL) } != 0 {
        return Err(Error::Syscall {
            call: "killpg",
            target,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Restores `SIGPIPE`'s default action (end the process), which the Rust runtime sets to
/// "ignore": a command whose reader went away (`perfpilot tunables --list | head -3`) then ends
/// quietly, as other Unix tools do, instead of panicking in `println!`. Not for the daemon, which
/// must outlive a closed log pipe.
pub fn end_on_closed_pipe() {
    // SAFETY: setting a standard signal's disposition to SIG_DFL has no memory preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminated_child_exits_by_sigterm() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep must be installed");
        terminate(child.id()).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn killing_a_group_ends_the_child_and_its_children() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30; wait"])
            .process_group(0)
            .spawn()
            .expect("sh must be installed");
        kill_group(child.id()).unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success());
        // The group is empty now: signalling it again finds no process.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let e = kill_group(child.id()).unwrap_err();
        assert!(e.to_string().contains("No such process"), "{e}");
        assert!(kill_group(1).is_err() && kill_group(0).is_err());
    }

    #[test]
    fn process_group_and_broadcast_ids_are_refused() {
        for pid in [0, u32::MAX, 1 << 31] {
            let e = terminate(pid).unwrap_err();
            assert!(e.to_string().contains("not a single process id"), "{e}");
        }
    }
}
